//! Problem files and `--set` values drawn at random from pieces a hostile user would
//! try: the library must answer each with a validated problem or an error of exit code
//! 2 that names something — never a panic — and a small problem that validates must run
//! (heat never to a non-finite value). Bounded: a few hundred cases, seconds in CI.

mod common;

use keisan::error::Error;
use keisan::problem::{Overrides, parse};
use proptest::prelude::*;

const KEYS: &[&str] = &[
    "n",
    "m",
    "alpha",
    "relax",
    "tolerance",
    "max_iterations",
    "exact",
    "shape",
    "dt",
    "steps",
    "diffusivity",
    "spacing",
    "strategy",
    "decomposition",
    "pyramid_height",
    "device_memory",
    "pin_host_grid",
    "temporal_block",
    "bogus",
];

const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "3",
    "7",
    "12",
    "64",
    "9223372036854775807",
    "-9223372036854775808",
    "1e19",
    "0.5",
    "64.0",
    "1.5",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "1e-320",
    "1e39",
    "\"\"",
    "\"x\"",
    "\"8GiB\"",
    "\"lots\"",
    "\"1d\"",
    "\"2d\"",
    "\"pyramid\"",
    "\"auto\"",
    "\"trivial\"",
    "\"polynomial\"",
    "true",
    "[]",
    "[5]",
    "[9, 9]",
    "[6, 7, 8]",
    "[3, 3, 3, 3]",
    "[1048576, 4194304, 4194304]",
    "[\"a\"]",
    "[0.1, 0.2]",
    "{preset = \"sine\", modes = [100]}",
    "{preset = \"hot_box\", value = nan}",
    "{preset = \"gaussian\", width = 1e-200}",
    "{preset = \"file\", path = \"nope.npy\"}",
    "{preset = \"sine\", amplitude = 1e300}",
];

fn line() -> impl Strategy<Value = String> {
    (prop::sample::select(KEYS), prop::sample::select(VALUES))
        .prop_map(|(k, v)| format!("{k} = {v}"))
}

fn document() -> impl Strategy<Value = String> {
    let solver = prop::sample::select(vec!["jacobi", "heat", "jacobi\"", "multigrid", ""]);
    let table = prop::sample::select(vec!["jacobi", "heat", "output", "run", "heat.initial", "x"]);
    let extra = prop::sample::select(vec![
        "",
        "precision = \"f32\"",
        "precision = \"f16\"",
        "[output]\nevery = 0",
        "[output]\ntimes = [-1.0]",
        "[output]\ncheckpoint_every = 3",
        "[output]\ndir = \"\"",
        "\u{0}\u{1}",
        "[jacobi",
    ]);
    (solver, table, prop::collection::vec(line(), 0..8), extra).prop_map(|(s, t, lines, e)| {
        format!("solver = \"{s}\"\n{e}\n[{t}]\n{}\n", lines.join("\n"))
    })
}

fn overrides() -> impl Strategy<Value = Vec<String>> {
    let key = prop::sample::select(vec![
        "jacobi.n",
        "jacobi.m",
        "jacobi.max_iterations",
        "heat.shape",
        "heat.steps",
        "heat.dt",
        "heat.initial",
        "output.every",
        "precision",
        "solver",
        "title",
        "x.y",
        "jacobi..n",
    ]);
    let value = prop_oneof![
        prop::sample::select(VALUES).prop_map(String::from),
        "[ -~\n\t]{0,12}",
    ];
    prop::collection::vec((key, value).prop_map(|(k, v)| format!("{k}={v}")), 0..3)
}

/// Tiny problems that validated run on the CPU; heat must stay finite.
fn run_small(problem: &keisan::problem::Problem) {
    use keisan::solvers::heat::HeatProblem;
    use keisan::solvers::jacobi::JacobiProblem;
    let small = match (
        problem.spec_as::<JacobiProblem>(),
        problem.spec_as::<HeatProblem>(),
    ) {
        (Some(j), _) => j.cells() <= 4096 && j.max_iterations <= 200,
        (_, Some(h)) => h.cells() <= 4096 && h.steps <= 200,
        _ => false,
    };
    if !small || problem.output.dir.is_some() {
        return;
    }
    let r = keisan::execute::execute(
        problem,
        &common::cpu(),
        &keisan::execute::ExecuteOptions {
            quiet: true,
            ..Default::default()
        },
    );
    if let Err(e) = r {
        let heat = problem.solver.name() == "heat";
        assert!(
            !(heat && matches!(e, Error::Diverged(_))),
            "a validated heat problem diverged: {e}"
        );
        assert_ne!(e.exit_code(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn problem_text_and_overrides_never_panic(text in document(), set in overrides()) {
        let o = Overrides { set, ..Default::default() };
        let r = std::panic::catch_unwind(|| parse(&text, "fuzz.toml", None, &o));
        let r = r.unwrap_or_else(|_| panic!("panicked on:\n{text}\n{:?}", o.set));
        match r {
            Ok(problem) => run_small(&problem),
            Err(e) => {
                prop_assert_eq!(e.exit_code(), 2, "{}", e);
                prop_assert!(!e.to_string().trim().is_empty());
            }
        }
    }
}

const BASES: &[&str] = &[
    "solver = \"jacobi\"\n[jacobi]\nn = 20\nm = 17\nmax_iterations = 30\nrelax = 0.8\n",
    "solver = \"heat\"\n[heat]\nshape = [9, 10, 11]\ndt = 1e-3\nsteps = 12\n",
    "solver = \"heat\"\nprecision = \"f32\"\n[heat]\nshape = [30, 31]\ndt = 1e-4\nsteps = 20\n",
];

fn table_overrides() -> impl Strategy<Value = Vec<String>> {
    let key = prop::sample::select(KEYS);
    let table = prop::sample::select(vec!["jacobi", "heat", "heat.initial", "output"]);
    let value = prop::sample::select(VALUES);
    prop::collection::vec(
        (table, key, value).prop_map(|(t, k, v)| format!("{t}.{k}={v}")),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, failure_persistence: None, ..ProptestConfig::default() })]

    /// Valid problems with a few fields replaced: most are refused, some run.
    #[test]
    fn mutated_valid_problems_validate_or_name_the_field(
        base in prop::sample::select(BASES), set in table_overrides()
    ) {
        let o = Overrides { set, ..Default::default() };
        let r = std::panic::catch_unwind(|| parse(base, "fuzz.toml", None, &o));
        let r = r.unwrap_or_else(|_| panic!("panicked on:\n{base}\n{:?}", o.set));
        match r {
            Ok(problem) => run_small(&problem),
            Err(e) => {
                prop_assert_eq!(e.exit_code(), 2, "{}", e);
                let s = e.to_string();
                // Every refusal names a field, a flag or the file.
                prop_assert!(s.contains('.') || s.contains("--") || s.contains("fuzz.toml"), "{}", s);
            }
        }
    }
}
