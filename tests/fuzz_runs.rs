//! Runs drawn at random, as a hostile user would try them: sequences of runs into one
//! folder (steps, schedules, slabs, divergence and injected write failures) always leave
//! one consistent set — the last completed run's, or the folder as it was — and a user's
//! file untouched; values whose derived quantities overflow are refused naming a field,
//! or run to a finite answer. Bounded for CI: a few dozen runs of tiny problems.

mod common;

use std::path::Path;
use std::process::Command;

use common::{consistent, keisan_bin, snapshot, write_npy};
use keisan::problem::{Overrides, parse};
use proptest::prelude::*;

const ADVECTION: &str = "solver = \"advection\"\nprecision = \"f32\"\n[advection]\nnx = 16\n\
    ny = 16\nsteps = 8\ncfl = 0.5\nvelocity = { kind = \"uniform\", u = 1.0, v = 0.5 }\n\
    initial = { preset = \"gaussian\" }\n";

/// One run of the sequence.
#[derive(Debug, Clone)]
struct Run {
    steps: u64,
    every: Option<u64>,
    subdomains: u64,
    /// Start from a field whose interpolation overflows: the run goes non-finite.
    diverges: bool,
    /// A file of the set whose writing fails.
    fails_on: Option<&'static str>,
}

fn a_run() -> impl Strategy<Value = Run> {
    (
        2u64..20,
        prop::option::of(1u64..6),
        1u64..3,
        prop::bool::weighted(0.2),
        prop::option::weighted(
            0.2,
            prop::sample::select(vec!["f.npy", "summary.json", "diagnostics.csv", "f.png"]),
        ),
    )
        .prop_map(|(steps, every, subdomains, diverges, fails_on)| Run {
            steps,
            every,
            subdomains,
            diverges,
            fails_on,
        })
}

fn run(d: &Path, r: &Run) -> i32 {
    let mut cmd = Command::new(keisan_bin());
    cmd.current_dir(d)
        .args(["run", "p.toml", "--backend", "cpu", "-q", "--out", "res"])
        .args(["--set", &format!("advection.steps={}", r.steps)])
        .args(["--subdomains", &r.subdomains.to_string()]);
    if let Some(k) = r.every {
        cmd.args(["--set", &format!("output.every={k}")]);
    }
    if r.diverges {
        cmd.args([
            "--set",
            "advection.initial={preset=\"file\",path=\"big.npy\"}",
        ]);
    }
    if let Some(f) = r.fails_on {
        cmd.args(["--inject-write-failure", f]);
    }
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    o.status.code().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn runs_into_one_folder_always_leave_one_consistent_set(
        runs in prop::collection::vec(a_run(), 2..5)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("p.toml"), ADVECTION).unwrap();
        let mut big = vec![0.0f32; 16 * 16];
        big[5 * 16 + 5..5 * 16 + 9].fill(3e38);
        write_npy(&d.join("big.npy"), &[16, 16], &big);
        std::fs::create_dir(d.join("res")).unwrap();
        std::fs::write(d.join("res/notes.txt"), "mine").unwrap();
        for r in &runs {
            let before = snapshot(&d.join("res"));
            let code = run(d, r);
            let writes = |f: &str| f != "diagnostics.csv" || r.every.is_some();
            let bad = r.diverges || r.fails_on.is_some_and(writes);
            prop_assert_eq!(code, if bad { 1 } else { 0 }, "{:?}", r);
            match code {
                0 => consistent(&d.join("res"), &["notes.txt"]),
                _ => prop_assert!(snapshot(&d.join("res")) == before, "{:?} changed the folder", r),
            }
            prop_assert_eq!(std::fs::read_to_string(d.join("res/notes.txt")).unwrap(), "mine");
        }
    }
}

const BASES: &[&str] = &[
    ADVECTION,
    "solver = \"advection\"\n[advection]\nnx = 16\nny = 12\nsteps = 4\ncfl = 0.5\n\
     velocity = { kind = \"rotation\" }\ninitial = { preset = \"sine\" }\n",
    "solver = \"nbody\"\n[nbody]\nn = 16\nsoftening = 0.05\ndt = 0.01\nsteps = 4\n\
     initial = { preset = \"plummer\" }\n",
    "solver = \"electrostatics\"\n[electrostatics]\nx = { range = [0.0, 1.0], cells = 6 }\n\
     y = { range = [0.0, 1.0], cells = 5 }\nz = { range = [0.0, 1.0], cells = 4 }\n\
     tolerance = 1e-6\nmax_iterations = 400\nfaces = { x_min = 1.0, x_max = 0.0 }\n",
];

const KEYS: &[&str] = &[
    "advection.velocity.u",
    "advection.velocity.v",
    "advection.velocity.omega",
    "advection.cfl",
    "advection.dt",
    "advection.end_time",
    "advection.initial.modes",
    "nbody.dt",
    "nbody.end_time",
    "nbody.softening",
    "nbody.g",
    "electrostatics.x.range",
    "electrostatics.z.range",
    "electrostatics.faces.x_min",
    "electrostatics.omega",
];

const VALUES: &[&str] = &[
    "1e308",
    "-1e308",
    "1e-320",
    "1e-300",
    "1e300",
    "0",
    "1e18",
    "1e19",
    "[0.0, 1e308]",
    "[-1e308, 1e308]",
    "[0.0, 1e-300]",
    "[16, 1]",
    "[7, 1]",
    "[0, 0]",
    "0.5",
    "1.9",
    "2.0",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Extreme values: refused naming a field (exit 2), or a run that ends without a
    /// non-finite value (advection, electrostatics) and never panics.
    #[test]
    fn values_whose_derived_quantities_overflow_are_refused_or_run_finite(
        base in prop::sample::select(BASES),
        set in prop::collection::vec(
            (prop::sample::select(KEYS), prop::sample::select(VALUES))
                .prop_map(|(k, v)| format!("{k}={v}")),
            1..3,
        )
    ) {
        let o = Overrides { set, ..Default::default() };
        let r = std::panic::catch_unwind(|| parse(base, "fuzz.toml", None, &o));
        let r = r.unwrap_or_else(|_| panic!("panicked on:\n{base}\n{:?}", o.set));
        let problem = match r {
            Ok(p) => p,
            Err(e) => {
                prop_assert_eq!(e.exit_code(), 2, "{}", e);
                let s = e.to_string();
                prop_assert!(s.contains('.') || s.contains("--"), "{}", s);
                return Ok(());
            }
        };
        if problem.spec.max_steps() > 100_000 {
            return Ok(());
        }
        let out = keisan::execute::execute(
            &problem,
            &common::cpu(),
            &keisan::execute::ExecuteOptions { quiet: true, ..Default::default() },
        );
        let may_diverge = problem.solver.name() == "nbody";
        match out {
            Ok(s) => prop_assert!(
                may_diverge || s.status != keisan::run::Status::NonFinite,
                "{:?}: {:?}", o.set, s.status
            ),
            Err(e) => prop_assert!(
                may_diverge || !matches!(e, keisan::error::Error::Diverged(_)),
                "{:?}: {}", o.set, e
            ),
        }
    }
}
