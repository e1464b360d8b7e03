//! Checkpoint and restart, bit for bit: 2N steps in one run equal N steps, a checkpoint,
//! a restart and N more — for Jacobi and heat (in-core and out-of-core), on the CPU and,
//! where there is one, on a CUDA device. Also: what a restart refuses, and SIGINT/SIGTERM.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::keisan_bin;

fn keisan(dir: &Path, args: &[&str]) -> Output {
    common::keisan_in(dir, args)
}

fn ok(dir: &Path, args: &[&str]) {
    let o = keisan(dir, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn cuda_present(test: &str) -> bool {
    common::gpu_or_skip(test).is_some()
}

/// Run `problem` for `2n` steps straight, and for `n` steps with a checkpoint then
/// restarted to `2n`; the final fields must be the same bytes, and so must the residual
/// history — except on CUDA Jacobi, whose fused two-sweep kernel reduces a sweep's
/// residual over other blocks than the single-sweep kernel, and which kernel takes a
/// sweep depends on where the run stops (there the history agrees to 1e-12).
fn restart_equals_straight(problem: &str, steps_key: &str, n: u64, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("p.toml"), problem).unwrap();
    let full = format!("{steps_key}={}", 2 * n);
    let half = format!("{steps_key}={n}");
    let args = |out: &str, set: &str, more: &[&str]| {
        let mut a = vec!["run", "p.toml", "-q", "--out", out, "--set", set];
        a.extend_from_slice(extra);
        a.extend_from_slice(more);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| ok(d, &a.iter().map(String::as_str).collect::<Vec<_>>());
    run(args("straight", &full, &[]));
    let every = n.to_string();
    run(args("first", &half, &["--checkpoint-every", &every]));
    run(args(
        "second",
        &full,
        &["--restart", "first/checkpoint.keisan"],
    ));
    let read = |run: &str, f: &str| std::fs::read(d.join(run).join(f)).ok();
    let field = match steps_key.split('.').next() {
        Some("electrostatics") => "V.npy",
        Some("advection") => "f.npy",
        Some("nbody") => "particles.npy",
        _ => "u.npy",
    };
    assert_eq!(
        read("straight", field).unwrap(),
        read("second", field).unwrap(),
        "{field} differs after a restart ({extra:?})"
    );
    let cuda_jacobi = steps_key.starts_with("jacobi") && extra.contains(&"cuda");
    match (
        read("straight", "residuals.csv"),
        read("second", "residuals.csv"),
    ) {
        (Some(a), Some(b)) if cuda_jacobi => {
            let values = |v: &[u8]| -> Vec<f64> {
                String::from_utf8_lossy(v)
                    .lines()
                    .skip(1)
                    .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
                    .collect()
            };
            let (a, b) = (values(&a), values(&b));
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= 1e-12 * x.abs(),
                    "residual {x} vs {y} ({extra:?})"
                );
            }
        }
        (a, b) => assert_eq!(a, b, "residuals.csv differs after a restart ({extra:?})"),
    }
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("second/summary.json")).unwrap()).unwrap();
    assert_eq!(s["restarted_at_step"], n, "{s}");
    assert_eq!(s["iterations"], 2 * n);
}

const JACOBI: &str = "solver = \"jacobi\"\n[jacobi]\nn = 37\nm = 29\nrelax = 0.7\n\
                      max_iterations = 10\ntolerance = 0\n";
const HEAT_2D: &str = "solver = \"heat\"\n[heat]\nshape = [45, 38]\ndt = 1e-4\nsteps = 10\n\
                       [heat.initial]\npreset = \"gaussian\"\nwidth = 0.2\n";
const HEAT_3D: &str = "solver = \"heat\"\n[heat]\nshape = [21, 18, 24]\ndt = 2e-5\nsteps = 10\n\
                       [heat.initial]\npreset = \"hot_box\"\n";

#[test]
fn jacobi_cpu_restart_is_bit_for_bit() {
    for p in ["f64", "f32"] {
        restart_equals_straight(
            JACOBI,
            "jacobi.max_iterations",
            13,
            &["--backend", "cpu", "--precision", p],
        );
    }
    // On CPU slabs: the residual history goes on as one engine's would.
    restart_equals_straight(
        JACOBI,
        "jacobi.max_iterations",
        13,
        &["--backend", "cpu", "--subdomains", "3"],
    );
}

#[test]
fn heat_in_core_cpu_restart_is_bit_for_bit() {
    for (problem, p) in [(HEAT_2D, "f64"), (HEAT_3D, "f32")] {
        restart_equals_straight(
            problem,
            "heat.steps",
            7,
            &["--backend", "cpu", "--precision", p],
        );
    }
}

#[test]
fn heat_out_of_core_cpu_restart_is_bit_for_bit() {
    // A budget of a few boxes forces the pyramid; the first half ends inside a pass.
    restart_equals_straight(
        &HEAT_3D.replace(
            "steps = 10",
            "steps = 10\nstrategy = \"pyramid\"\npyramid_height = 3",
        ),
        "heat.steps",
        5,
        &["--backend", "cpu", "--device-memory", "48KiB"],
    );
}

#[test]
fn jacobi_cuda_restart_is_bit_for_bit() {
    if !cuda_present("jacobi_cuda_restart_is_bit_for_bit") {
        return;
    }
    for p in ["f64", "f32"] {
        // 13 sweeps: the restart begins on an odd sweep, inside a two-sweep pair.
        restart_equals_straight(
            JACOBI,
            "jacobi.max_iterations",
            13,
            &["--backend", "cuda", "--precision", p],
        );
    }
}

#[test]
fn heat_cuda_restart_is_bit_for_bit() {
    if !cuda_present("heat_cuda_restart_is_bit_for_bit") {
        return;
    }
    for (problem, p) in [(HEAT_2D, "f64"), (HEAT_3D, "f32")] {
        restart_equals_straight(
            problem,
            "heat.steps",
            7,
            &["--backend", "cuda", "--precision", p],
        );
    }
    restart_equals_straight(
        &HEAT_3D.replace(
            "steps = 10",
            "steps = 10\nstrategy = \"pyramid\"\npyramid_height = 3",
        ),
        "heat.steps",
        5,
        &["--backend", "cuda", "--device-memory", "64KiB"],
    );
}

/// A checkpoint with its header rewritten by `edit`.
fn edited_checkpoint(from: &Path, to: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let bytes = std::fs::read(from).unwrap();
    let n = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[16..16 + n]).unwrap();
    edit(&mut header);
    // The header's checksum made anew: the edit stands for a file another keisan wrote.
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(&header).unwrap();
    let mut out = bytes[..8].to_vec();
    out.extend((json.len() as u64).to_le_bytes());
    out.extend(&json);
    out.extend(Sha256::digest(&json));
    out.extend(&bytes[16 + n + 32..]);
    std::fs::write(to, out).unwrap();
}

#[test]
fn restart_refuses_another_problem_or_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("p.toml"), HEAT_2D).unwrap();
    ok(
        d,
        &[
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "a",
            "--checkpoint-every",
            "5",
        ],
    );
    let ckpt = "a/checkpoint.keisan";
    let refused = |args: &[&str], needles: &[&str]| {
        let o = keisan(d, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        for n in needles {
            assert!(err.contains(n), "lacks `{n}`: {err}");
        }
    };
    refused(
        &[
            "run",
            "p.toml",
            "--restart",
            ckpt,
            "--set",
            "heat.dt=5e-5",
            "-q",
        ],
        &[
            "a different problem",
            "heat.dt is 0.0001 in the checkpoint, 0.00005 now",
        ],
    );
    refused(
        &[
            "run",
            "p.toml",
            "--restart",
            ckpt,
            "--precision",
            "f32",
            "-q",
        ],
        &["written in f64", "runs in f32"],
    );
    refused(
        &[
            "run",
            "p.toml",
            "--restart",
            ckpt,
            "--set",
            "heat.steps=3",
            "-q",
        ],
        &["at step 10", "past the problem's last step 3"],
    );
    edited_checkpoint(&d.join(ckpt), &d.join("old.keisan"), |h| {
        h["keisan_version"] = "0.0.1".into()
    });
    refused(
        &["run", "--restart", "old.keisan", "-q"],
        &["written by keisan 0.0.1", "this is keisan"],
    );
    std::fs::write(d.join("junk.keisan"), b"KEISANCK\x05\0\0\0\0\0\0\0{}").unwrap();
    refused(&["run", "--restart", "junk.keisan", "-q"], &["junk.keisan"]);
    let bytes = std::fs::read(d.join(ckpt)).unwrap();
    std::fs::write(d.join("cut.keisan"), &bytes[..bytes.len() - 8]).unwrap();
    refused(
        &["run", "--restart", "cut.keisan", "-q"],
        &["truncated or damaged"],
    );
    refused(
        &["run", "--restart", "p.toml", "-q"],
        &["not a keisan checkpoint"],
    );
    // Another solver's problem file.
    std::fs::write(
        d.join("j.toml"),
        "solver = \"jacobi\"\n[jacobi]\nn = 20\nm = 20\nmax_iterations = 5\n",
    )
    .unwrap();
    refused(
        &["run", "j.toml", "--restart", ckpt, "-q", "--backend", "cpu"],
        &[
            "a checkpoint of the heat solver",
            "the problem's solver is jacobi",
        ],
    );
}

/// Send `signal` to a long run once its first checkpoint exists; it must stop with the
/// conventional code, a checkpoint, no final outputs and no temporary files — and the
/// checkpoint must continue to the same bits as a straight run.
fn stopped_by(signal: &str, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let problem = JACOBI.replace("n = 37\nm = 29", "n = 300\nm = 300");
    std::fs::write(d.join("p.toml"), &problem).unwrap();
    let child = Command::new(keisan_bin())
        .current_dir(d)
        .args([
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "res",
            "--set",
            "jacobi.max_iterations=100000000",
            "--checkpoint-every",
            "200",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ckpt = d.join("res/checkpoint.keisan");
    common::wait_for(&ckpt, 60);
    Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(
        err.contains(&format!("interrupted by SIG{signal} at step")),
        "{err}"
    );
    assert!(err.contains("written to res/checkpoint.keisan"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let names: Vec<String> = std::fs::read_dir(d.join("res"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["checkpoint.keisan"], "only the checkpoint is left");
    // The checkpoint continues to the same bits as a straight run to that step + 10.
    let header = keisan::checkpoint::Checkpoint::open(&ckpt).unwrap().header;
    let target = format!("jacobi.max_iterations={}", header.step + 10);
    ok(
        d,
        &[
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "a",
            "--set",
            &target,
        ],
    );
    ok(
        d,
        &[
            "run",
            "--restart",
            "res/checkpoint.keisan",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "b",
            "--set",
            &target,
        ],
    );
    assert_eq!(
        std::fs::read(d.join("a/u.npy")).unwrap(),
        std::fs::read(d.join("b/u.npy")).unwrap()
    );
}

#[test]
fn sigint_writes_a_checkpoint_and_exits_130() {
    stopped_by("INT", 130);
}

#[test]
fn sigterm_writes_a_checkpoint_and_exits_143() {
    stopped_by("TERM", 143);
}

const ELECTROSTATICS: &str = "solver = \"electrostatics\"\n[electrostatics]\n\
    x = { range = [0.0, 1.0], cells = 14 }\ny = { range = [0.0, 1.0], cells = 11 }\n\
    z = { range = [0.0, 1.0], cells = 9 }\nvoltages = [1.0]\npermittivities = [3.0]\n\
    max_iterations = 10\ntolerance = 0\n[electrostatics.faces]\nz_min = 0.0\n\
    [[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.5, 0.5, 0.5]\nradius = 0.3\ndielectric = 1\n\
    [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.4, 0.4, 0.4]\nmax = [0.6, 0.6, 0.6]\nelectrode = 1\n";

#[test]
fn electrostatics_restart_is_bit_for_bit() {
    restart_equals_straight(
        ELECTROSTATICS,
        "electrostatics.max_iterations",
        9,
        &["--backend", "cpu"],
    );
    // On CPU slabs: the checkpoint holds the gathered potential.
    restart_equals_straight(
        ELECTROSTATICS,
        "electrostatics.max_iterations",
        9,
        &["--backend", "cpu", "--subdomains", "3"],
    );
    if cuda_present("electrostatics_restart_is_bit_for_bit") {
        restart_equals_straight(
            ELECTROSTATICS,
            "electrostatics.max_iterations",
            9,
            &["--backend", "cuda"],
        );
    }
}

const NBODY: &str = "solver = \"nbody\"\n[nbody]\nn = 64\nsoftening = 0.05\ndt = 0.01\n\
    steps = 10\ninitial = { preset = \"cold_sphere\", seed = 2 }\n";

#[test]
fn nbody_restart_is_bit_for_bit() {
    // The forces at the checkpoint's positions are computed again on restart: the same
    // bits, so the run continues exactly.
    restart_equals_straight(NBODY, "nbody.steps", 7, &["--backend", "cpu"]);
}

const ADVECTION_SWIRL: &str = "solver = \"advection\"\n[advection]\nnx = 37\nny = 29\n\
    steps = 10\ncfl = 0.8\nvelocity = { kind = \"swirl\", period = 1.0 }\n\
    initial = { preset = \"cosine_bell\" }\n";
const ADVECTION_ROTATION: &str = "solver = \"advection\"\n[advection]\nnx = 41\nny = 33\n\
    steps = 10\ncfl = 0.9\nsteps_per_pass = 2\nvelocity = { kind = \"rotation\" }\n\
    initial = { preset = \"zalesak\" }\n";

#[test]
fn advection_restart_is_bit_for_bit() {
    // The swirl depends on time (the restart must resume the clock); the rotation runs
    // two steps per pass on CUDA, and 7 steps end inside a pass.
    let mut backends = vec!["cpu"];
    if cuda_present("advection_restart_is_bit_for_bit") {
        backends.push("cuda");
    }
    for backend in backends {
        for problem in [ADVECTION_SWIRL, ADVECTION_ROTATION] {
            for p in ["f64", "f32"] {
                restart_equals_straight(
                    problem,
                    "advection.steps",
                    7,
                    &["--backend", backend, "--precision", p],
                );
            }
            // On slabs: the checkpoint holds the gathered field.
            restart_equals_straight(
                problem,
                "advection.steps",
                7,
                &["--backend", backend, "--subdomains", "3"],
            );
        }
    }
}

/// A diagnostics row with a value JSON cannot hold (the residual of step 0 is NaN) must
/// survive the checkpoint: the restart continues the table and the field bit for bit.
#[test]
fn a_diagnostics_table_with_nan_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let problem = format!(
        "{}[output]\nevery = 4\n",
        JACOBI.replace("max_iterations = 10", "max_iterations = 12")
    );
    std::fs::write(d.join("p.toml"), problem).unwrap();
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec!["run", "p.toml", "-q", "--backend", "cpu", "--out", out];
        args.extend_from_slice(extra);
        ok(d, &args);
    };
    run("straight", &[]);
    run(
        "first",
        &[
            "--set",
            "jacobi.max_iterations=8",
            "--checkpoint-every",
            "8",
        ],
    );
    let table = std::fs::read_to_string(d.join("first/diagnostics.csv")).unwrap();
    assert!(table.lines().nth(1).unwrap().contains("NaN"), "{table}");
    run("second", &["--restart", "first/checkpoint.keisan"]);
    for f in ["diagnostics.csv", "u.npy", "residuals.csv"] {
        let read = |r: &str| std::fs::read(d.join(r).join(f)).unwrap();
        assert!(
            read("straight") == read("second"),
            "{f} differs after the restart"
        );
    }
}
