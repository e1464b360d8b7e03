//! Each class of mistake: one clear message naming the field, the right exit code, no
//! panic, and no output files left behind.

mod common;

use std::path::Path;
use std::process::Command;

use common::{keisan_bin, write_npy};

struct Outcome {
    code: i32,
    stderr: String,
}

fn keisan_in(dir: &Path, args: &[&str]) -> Outcome {
    let o = Command::new(keisan_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    Outcome {
        code: o.status.code().expect("exited normally"),
        stderr,
    }
}

/// Run a problem file with an output folder; check the code, the message, and that the
/// folder holds no files afterwards.
fn rejects(toml: &str, extra: &[&str], code: i32, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    rejects_in(dir.path(), toml, extra, code, needles);
}

/// As [`rejects`], in `dir` (which may hold files the problem refers to).
fn rejects_in(dir: &Path, toml: &str, extra: &[&str], code: i32, needles: &[&str]) {
    std::fs::write(dir.join("p.toml"), toml).unwrap();
    let mut args = vec!["run", "p.toml", "--out", "res", "-q"];
    if !extra.contains(&"--backend") {
        args.extend(["--backend", "cpu"]);
    }
    args.extend_from_slice(extra);
    let o = keisan_in(dir, &args);
    assert_eq!(o.code, code, "{}", o.stderr);
    for n in needles {
        assert!(o.stderr.contains(n), "message lacks `{n}`: {}", o.stderr);
    }
    let errors = o.stderr.lines().filter(|l| l.starts_with("error")).count();
    assert_eq!(errors, 1, "one clear message: {}", o.stderr);
    let res = dir.join("res");
    if res.exists() {
        assert_eq!(
            std::fs::read_dir(res).unwrap().count(),
            0,
            "partial outputs left"
        );
    }
}

fn jacobi(body: &str) -> String {
    let mut t = String::from("solver = \"jacobi\"\n[jacobi]\n");
    for (k, v) in [
        ("n", "16"),
        ("m", "16"),
        ("max_iterations", "10"),
        ("relax", "0.5"),
        ("tolerance", "1e-10"),
    ] {
        if !body
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{k} ")))
        {
            t += &format!("{k} = {v}\n");
        }
    }
    t + body
}

#[test]
fn malformed_toml() {
    rejects(
        "solver = \"jacobi\n[jacobi",
        &[],
        2,
        &["p.toml", "malformed TOML"],
    );
}

#[test]
fn unknown_key() {
    rejects(&jacobi("omega = 1.0\n"), &[], 2, &["unknown field `omega`"]);
    rejects(
        "solver = \"jacobi\"\nsolverr = 1\n",
        &[],
        2,
        &["unknown field `solverr`"],
    );
}

#[test]
fn unknown_solver_and_missing_table() {
    rejects(
        "solver = \"multigrid\"\n",
        &[],
        2,
        &[
            "line 1: solver",
            "unknown solver `multigrid`",
            "jacobi, heat",
        ],
    );
    rejects("solver = \"jacobi\"\n", &[], 2, &["[jacobi]"]);
}

#[test]
fn grid_smaller_than_three_points() {
    rejects(&jacobi("n = 2\n"), &[], 2, &["jacobi.n = 2", "[3, "]);
    rejects(&jacobi("m = -4\n"), &[], 2, &["jacobi.m = -4", "[3, "]);
}

#[test]
fn relaxation_outside_open_interval() {
    for w in ["0.0", "2.0", "-1", "nan"] {
        rejects(
            &jacobi(&format!("relax = {w}\n")),
            &[],
            2,
            &["jacobi.relax", "(0, 2)"],
        );
    }
}

#[test]
fn negative_or_nan_tolerance() {
    for t in ["-1e-6", "nan", "inf"] {
        rejects(
            &jacobi(&format!("tolerance = {t}\n")),
            &[],
            2,
            &["jacobi.tolerance", "≥ 0"],
        );
    }
}

#[test]
fn zero_iterations() {
    rejects(
        &jacobi("max_iterations = 0\n"),
        &[],
        2,
        &["jacobi.max_iterations = 0", "at least 1"],
    );
}

#[test]
fn negative_alpha() {
    rejects(&jacobi("alpha = -3\n"), &[], 2, &["jacobi.alpha", "≥ 0"]);
}

#[test]
fn grid_larger_than_memory() {
    // More than this machine has: a request it can never carry out (exit 2).
    rejects(
        &jacobi("n = 200000\nm = 200000\n"),
        &[],
        2,
        &["host memory", "smaller grid"],
    );
    // Every solver refuses before building its fields (an advection field, N-body
    // particles and an electrostatics geometry of this size used to abort the process in
    // an allocation, or take half a minute to build before the engine's check).
    rejects(
        "solver = \"advection\"\n[advection]\nnx = 1000000\nny = 1000000\nsteps = 1\n\
         cfl = 0.5\nvelocity = { kind = \"rotation\" }\ninitial = { preset = \"gaussian\" }\n",
        &[],
        2,
        &["the advection field", "host memory", "smaller grid"],
    );
    rejects(
        "solver = \"nbody\"\n[nbody]\nn = 1000000000000\nsoftening = 0.05\ndt = 0.01\n\
         steps = 1\ninitial = { preset = \"plummer\" }\n",
        &[],
        2,
        &["host memory", "nbody.n"],
    );
    rejects(
        "solver = \"electrostatics\"\n[electrostatics]\n\
         x = { range = [0.0, 1.0], cells = 10000 }\ny = { range = [0.0, 1.0], cells = 10000 }\n\
         z = { range = [0.0, 1.0], cells = 10000 }\nmax_iterations = 10\n[electrostatics.faces]\nx_min = 1.0\n",
        &[],
        2,
        &["the potential and the id arrays", "host memory"],
    );
    // More points than any machine can address: refused before any size arithmetic.
    rejects(
        &jacobi("n = 2000000000\nm = 2000000000\n"),
        &[],
        2,
        &["jacobi.n × jacobi.m", "more points than any machine"],
    );
}

#[test]
fn cuda_backend_without_a_device() {
    if keisan::device::Gpu::open(0).is_ok() {
        common::skip("skipped: a CUDA device is present, so --backend cuda is valid here");
        return;
    }
    rejects(&jacobi(""), &["--backend", "cuda"], 1, &["no CUDA device"]);
}

#[test]
fn output_folder_that_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), jacobi("")).unwrap();
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    let o = keisan_in(
        dir.path(),
        &[
            "run",
            "p.toml",
            "--backend",
            "cpu",
            "--out",
            "afile/res",
            "-q",
        ],
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("afile/res") && o.stderr.contains("output folder"),
        "{}",
        o.stderr
    );
}

#[test]
fn missing_problem_file() {
    let dir = tempfile::tempdir().unwrap();
    let o = keisan_in(dir.path(), &["run", "nope.toml", "-q"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("cannot read problem file nope.toml"),
        "{}",
        o.stderr
    );
}

#[test]
fn malformed_override() {
    let dir = tempfile::tempdir().unwrap();
    let o = keisan_in(dir.path(), &["run", "--set", "jacobi.n", "-q"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("key=value"), "{}", o.stderr);
    let o = keisan_in(
        dir.path(),
        &["run", "--set", "jacobi.n=1", "--backend", "cpu", "-q"],
    );
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("jacobi.n = 1"), "{}", o.stderr);
}

#[test]
fn bad_bench_size() {
    let dir = tempfile::tempdir().unwrap();
    let o = keisan_in(dir.path(), &["bench", "jacobi", "--size", "100by100"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("NxM"), "{}", o.stderr);
}

fn heat(body: &str) -> String {
    format!("solver = \"heat\"\n[heat]\nshape = [64, 64]\nsteps = 10\n{body}")
}

#[test]
fn heat_dt_above_the_stability_limit() {
    // h = 1/63: the limit is dt ≤ 0.5/(2·63²) = 6.299e-5.
    rejects(
        &heat("dt = 1e-4\n"),
        &[],
        2,
        &["heat.dt", "stability limit", "largest stable dt is 6.2988"],
    );
}

#[test]
fn heat_bad_shape_and_steps() {
    rejects(
        &heat("dt = 1e-6\n").replace("[64, 64]", "[64, 2]"),
        &[],
        2,
        &["heat.shape", "[3, "],
    );
    rejects(
        &heat("dt = 1e-6\n").replace("[64, 64]", "[4, 4, 4, 4]"),
        &[],
        2,
        &["heat.shape", "1, 2 or 3"],
    );
    rejects(
        &heat("dt = 1e-6\n").replace("steps = 10", "steps = 0"),
        &[],
        2,
        &["heat.steps"],
    );
}

#[test]
fn heat_bad_initial_preset() {
    rejects(
        &heat("dt = 1e-6\n[heat.initial]\npreset = \"sine\"\nmodes = [1]\n"),
        &[],
        2,
        &["heat.initial.modes"],
    );
    rejects(
        &heat("dt = 1e-6\n[heat.initial]\npreset = \"plasma\"\n"),
        &[],
        2,
        &["unknown variant `plasma`"],
    );
}

#[test]
fn heat_device_budget_too_small_names_the_minimum() {
    // 64×64 f64, CPU executor (2 boxes): the smallest task is 3 rows of 64 or a 3×3 block.
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\ndevice_memory = \"100B\"\n"),
        &[],
        2,
        &["heat.device_memory", "too small", "at least 144 B"],
    );
}

#[test]
fn heat_bad_out_of_core_settings() {
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\ndevice_memory = \"lots\"\n"),
        &[],
        2,
        &["heat.device_memory", "8GiB"],
    );
    rejects(
        &heat("dt = 1e-6\npyramid_height = 0\n"),
        &[],
        2,
        &["heat.pyramid_height = 0", "[1, 1048576]"],
    );
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\ndecomposition = \"2d\"\n")
            .replace("[64, 64]", "[64]"),
        &[],
        2,
        &["heat.decomposition", "bands"],
    );
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\npyramid_height = 10\ndevice_memory = \"4KiB\"\n"),
        &[],
        2,
        &[
            "heat.pyramid_height = 10",
            "no task fits",
            "smaller pyramid_height",
        ],
    );
    // Taller than the run: the height is wrong, not the budget.
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\npyramid_height = 40\n"),
        &[],
        2,
        &[
            "heat.pyramid_height = 40",
            "taller than the run",
            "at most 10",
        ],
    );
    rejects(
        &heat("dt = 1e-6\npyramid_height = 2000000\n"),
        &[],
        2,
        &["heat.pyramid_height = 2000000", "[1, 1048576]"],
    );
}

#[test]
fn heat_bad_temporal_block() {
    rejects(
        &heat("dt = 1e-6\ntemporal_block = 0\n"),
        &[],
        2,
        &["heat.temporal_block", "[1, 64]"],
    );
    rejects(
        &heat("dt = 1e-6\ntemporal_block = 4\n").replace("[64, 64]", "[64]"),
        &[],
        2,
        &["heat.temporal_block", "2D and 3D"],
    );
}

#[test]
fn heat_bad_initial_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let from = |file: &str| {
        heat(&format!(
            "dt = 1e-6\n[heat.initial]\npreset = \"file\"\npath = \"{file}\"\n"
        ))
    };
    write_npy(&d.join("small.npy"), &[10, 10], &[0.0f64; 100]);
    rejects_in(
        d,
        &from("small.npy"),
        &[],
        2,
        &[
            "heat.initial.path",
            "small.npy",
            "shape [10, 10]",
            "[64, 64]",
        ],
    );
    write_npy(&d.join("ints.npy"), &[64, 64], &[0i32; 64 * 64]);
    rejects_in(
        d,
        &from("ints.npy"),
        &[],
        2,
        &["ints.npy", "dtype <i4", "float64"],
    );
    let mut u = vec![0.0f32; 64 * 64];
    u[3 * 64 + 5] = f32::NAN;
    write_npy(&d.join("nan.npy"), &[64, 64], &u);
    rejects_in(
        d,
        &from("nan.npy"),
        &[],
        2,
        &["nan.npy", "NaN at index [3, 5]", "finite"],
    );
    std::fs::write(d.join("text.npy"), "not an array").unwrap();
    rejects_in(
        d,
        &from("text.npy"),
        &[],
        2,
        &["text.npy", "not a readable .npy"],
    );
    rejects_in(
        d,
        &from("missing.npy"),
        &[],
        2,
        &["heat.initial.path", "missing.npy"],
    );
}

/// Run keisan with `args` in a fresh folder; the code and stderr.
fn cli(args: &[&str]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    keisan_in(dir.path(), args)
}

fn assert_rejects(o: &Outcome, code: i32, needles: &[&str]) {
    assert_eq!(o.code, code, "{}", o.stderr);
    for n in needles {
        assert!(o.stderr.contains(n), "message lacks `{n}`: {}", o.stderr);
    }
}

#[test]
fn grid_sizes_whose_product_overflows() {
    rejects(
        &heat("dt = 1e-30\n").replace("[64, 64]", "[1048576, 4194304, 4194304]"),
        &[],
        2,
        &["heat.shape", "more points than any machine"],
    );
    let o = cli(&[
        "bench",
        "jacobi",
        "--size",
        "4611686018427387905x4",
        "--backend",
        "cpu",
    ]);
    assert_rejects(&o, 2, &["--size", "[3, 2147483647]"]);
    let o = cli(&["bench", "jacobi", "--size", "2x100", "--backend", "cpu"]);
    assert_rejects(&o, 2, &["--size", "[3, "]);
    let o = cli(&[
        "bench",
        "heat",
        "--size-3d",
        "1000000x1000000x1000000",
        "--backend",
        "cpu",
    ]);
    assert_rejects(&o, 2, &["--size-3d", "more points than any machine"]);
}

#[test]
fn device_memory_on_a_solver_without_it() {
    rejects(
        &jacobi(""),
        &["--device-memory", "1GiB"],
        2,
        &["--device-memory", "heat"],
    );
    rejects(
        &jacobi(""),
        &["--device-memory", "lots"],
        2,
        &["--device-memory = lots", "8GiB"],
    );
    // The flag, not the problem's field, is named when the budget is too small.
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\n"),
        &["--device-memory", "100B"],
        2,
        &["--device-memory = 100 B", "too small"],
    );
}

#[test]
fn empty_output_folder() {
    rejects(
        &jacobi("[output]\ndir = \"\"\n"),
        &[],
        2,
        &["output.dir", "name a folder"],
    );
    let o = cli(&["run", "--backend", "cpu", "--out", "", "-q"]);
    assert_rejects(&o, 2, &["--out"]);
}

#[test]
fn unknown_piece_layout() {
    rejects(
        &jacobi("[output]\ndir = \"res\"\npieces = \"per-node\"\n"),
        &[],
        2,
        &["output.pieces", "per-node", "per-rank"],
    );
}

#[test]
fn values_that_are_not_finite_in_the_run_precision() {
    let hot = |v: &str| {
        heat(&format!(
            "dt = 1e-6\n[heat.initial]\npreset = \"hot_box\"\nvalue = {v}\n"
        ))
    };
    rejects(&hot("nan"), &[], 2, &["heat.initial.value = NaN", "finite"]);
    rejects(
        &hot("1e39"),
        &["--precision", "f32"],
        2,
        &["heat.initial.value = 1e39", "f32"],
    );
    rejects(
        &heat("dt = 1e-6\n[heat.initial]\npreset = \"sine\"\namplitude = inf\n"),
        &[],
        2,
        &["heat.initial.amplitude = inf"],
    );
    rejects(
        &heat("dt = 1e-6\n[heat.initial]\npreset = \"gaussian\"\nwidth = 1e-200\n"),
        &[],
        2,
        &["heat.initial.width = 1e-200", "1e-150"],
    );
    rejects(
        &jacobi("alpha = 1e39\n"),
        &["--precision", "f32"],
        2,
        &["jacobi.alpha = 1e39", "overflows f32", "f64"],
    );
}

#[test]
fn type_errors_name_the_field_and_line() {
    rejects(
        &heat("dt = 1e-6\n").replace("steps = 10", "steps = 64.0"),
        &[],
        2,
        &[
            "p.toml, line 4: heat.steps",
            "invalid type: floating point `64.0`",
        ],
    );
    rejects(
        &heat("dt = 1e-6\nstrategy = \"pyramid\"\ndevice_memory = true\n"),
        &[],
        2,
        &["line 7: heat.device_memory", "a size such as"],
    );
    rejects(
        &heat("dt = 1e-6\n"),
        &["--set", "heat.shape=[64, \"x\"]"],
        2,
        &["--set heat.shape", "heat.shape[1]"],
    );
}

#[test]
fn threads_are_capped_by_the_machine() {
    let o = cli(&["--threads", "100000", "run", "--backend", "cpu", "-q"]);
    assert_rejects(&o, 2, &["--threads = 100000", "use 1 to"]);
}

#[test]
fn pyramid_messages_blame_the_right_thing() {
    // A small grid and no budget: the workspace adapts; the run succeeds.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.toml"),
        heat("dt = 1e-6\nstrategy = \"pyramid\"\n").replace("[64, 64]", "[8, 8]"),
    )
    .unwrap();
    let o = keisan_in(dir.path(), &["run", "p.toml", "--backend", "cpu", "-q"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // `keisan model` reports an invalid field as that field.
    std::fs::write(
        dir.path().join("m.toml"),
        heat("dt = 1e-6\nstrategy = \"pyramid\"\ndecomposition = \"2d\"\n")
            .replace("[64, 64]", "[64]"),
    )
    .unwrap();
    let o = keisan_in(
        dir.path(),
        &[
            "model",
            "heat",
            "m.toml",
            "--backend",
            "cpu",
            "--heights",
            "1,2",
        ],
    );
    assert_rejects(&o, 2, &["heat.decomposition", "bands"]);
    let o = keisan_in(
        dir.path(),
        &[
            "model",
            "heat",
            "p.toml",
            "--backend",
            "cpu",
            "--heights",
            "50",
        ],
    );
    assert_rejects(&o, 2, &["--heights = 50", "heat.steps = 10"]);
}

#[test]
fn nonsense_that_was_silently_accepted() {
    rejects(
        &heat("dt = 1e-6\n[heat.initial]\npreset = \"sine\"\nmodes = [70, 1]\n"),
        &[],
        2,
        &["heat.initial.modes", "[1, n − 2]"],
    );
    rejects(
        &format!("{}[heat]\nshape = [8]\n", jacobi("")),
        &[],
        2,
        &[
            "line 8: heat",
            "a [heat] table in a problem with solver = \"jacobi\"",
        ],
    );
    let o = cli(&[
        "run",
        "--backend",
        "cpu",
        "-q",
        "--set",
        "jacobi.n=64\nfoo=1",
    ]);
    assert_rejects(&o, 2, &["--set jacobi.n=64\\nfoo=1", "one line"]);
    let o = cli(&["bench", "heat", "--size-3d", "64", "--backend", "cpu"]);
    assert_rejects(&o, 2, &["--size-3d = 64", "3 extents"]);
}

#[test]
fn auto_strategy_keeps_to_a_budget_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.toml"),
        heat("dt = 1e-6\ndevice_memory = \"16KiB\"\n"),
    )
    .unwrap();
    let o = Command::new(keisan_bin())
        .current_dir(dir.path())
        .args(["run", "p.toml", "--backend", "cpu", "-q", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["layout"]["strategy"], "pyramid", "{s}");
}

#[test]
fn info_reports_unmeasured_rates_as_null() {
    let o = Command::new(keisan_bin())
        .args(["info", "--probe", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(s["cpu_ceilings"]["fma_f32"].is_null(), "{s}");
    assert!(s["cpu_ceilings"]["copy_bandwidth"].as_f64().unwrap() > 0.0);
}

#[test]
fn npy_files_with_wrong_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let from = |file: &str| {
        heat(&format!(
            "dt = 1e-6\n[heat.initial]\npreset = \"file\"\npath = \"{file}\"\n"
        ))
    };
    write_npy(&d.join("ok.npy"), &[64, 64], &[0.5f64; 64 * 64]);
    let bytes = std::fs::read(d.join("ok.npy")).unwrap();
    std::fs::write(d.join("cut.npy"), &bytes[..bytes.len() - 100]).unwrap();
    rejects_in(
        d,
        &from("cut.npy"),
        &[],
        2,
        &["cut.npy", "truncated", "32768 bytes"],
    );
    let mut long = bytes.clone();
    long.extend([0u8; 24]);
    std::fs::write(d.join("long.npy"), &long).unwrap();
    rejects_in(
        d,
        &from("long.npy"),
        &[],
        2,
        &["long.npy", "24 bytes after"],
    );
}

#[test]
fn messages_stay_readable() {
    // A binary file: no raw NUL bytes echoed, one line saying what is wrong.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), b"solver = \"jacobi\"\0\x01\x02").unwrap();
    let o = keisan_in(dir.path(), &["run", "p.toml", "-q"]);
    assert_rejects(&o, 2, &["not UTF-8 text"]);
    assert!(!o.stderr.contains('\0'));
    std::fs::write(dir.path().join("q.toml"), "solver = \"jac\u{7}obi\"\n").unwrap();
    let o = keisan_in(dir.path(), &["run", "q.toml", "-q"]);
    assert_eq!(o.code, 2);
    assert!(!o.stderr.contains('\u{7}'), "{}", o.stderr);
    // Numbers near f64's limits print in exponent form, not as 309 digits.
    rejects(
        &jacobi("tolerance = -1e308\n"),
        &[],
        2,
        &["jacobi.tolerance = -1e308"],
    );
}

#[test]
fn paths_from_the_command_line_are_taken_from_the_current_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("probs")).unwrap();
    std::fs::write(d.join("probs/p.toml"), heat("dt = 1e-6\n")).unwrap();
    write_npy(&d.join("u0.npy"), &[64, 64], &[0.25f64; 64 * 64]);
    let o = keisan_in(
        d,
        &[
            "run",
            "probs/p.toml",
            "--backend",
            "cpu",
            "-q",
            "--set",
            "heat.initial={preset=\"file\", path=\"u0.npy\"}",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Written in the file, the same path is taken from the file's folder.
    std::fs::write(
        d.join("probs/q.toml"),
        heat("dt = 1e-6\n[heat.initial]\npreset = \"file\"\npath = \"u0.npy\"\n"),
    )
    .unwrap();
    let o = keisan_in(d, &["run", "probs/q.toml", "--backend", "cpu", "-q"]);
    assert_rejects(&o, 2, &["probs/u0.npy"]);
}
