//! The command line end to end, on the CPU backend.

mod common;

use std::process::Command;

use common::keisan_bin;

fn keisan(args: &[&str]) -> std::process::Output {
    Command::new(keisan_bin())
        .args(args)
        .output()
        .expect("keisan runs")
}

#[test]
fn run_writes_npy_vti_csv_and_json_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("res");
    let o = keisan(&[
        "run",
        "--backend",
        "cpu",
        "--quiet",
        "--json",
        "--set",
        "jacobi.n=40",
        "--set",
        "jacobi.m=30",
        "--set",
        "jacobi.max_iterations=25",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["iterations"], 25);
    assert_eq!(s["shape"], serde_json::json!([30, 40]));
    assert_eq!(s["status"], "iteration_limit");
    assert!(s["final_residual"].as_f64().unwrap() > 0.0);

    let npy = npyz::NpyFile::new(std::fs::File::open(out.join("u.npy")).unwrap()).unwrap();
    assert_eq!(npy.shape(), &[30, 40]);
    let u: Vec<f64> = npy.into_vec().unwrap();
    assert!(u.iter().any(|v| *v > 0.0) && u[0] == 0.0);

    let csv = std::fs::read_to_string(out.join("residuals.csv")).unwrap();
    assert_eq!(csv.lines().count(), 26);
    assert!(csv.starts_with("iteration,residual\n1,"));
    let vti = std::fs::read(out.join("u.vti")).unwrap();
    assert!(vti.starts_with(b"<?xml") && vti.len() > 30 * 40 * 8);
    // A picture of the field with its colour bar, small grids enlarged.
    let png = std::fs::File::open(out.join("u.png")).unwrap();
    let reader = png::Decoder::new(std::io::BufReader::new(png))
        .read_info()
        .unwrap();
    assert!(reader.info().width >= 256, "{}", reader.info().width);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["iterations"], 25);
    // Nothing temporary is left behind.
    for e in std::fs::read_dir(&out).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(!name.starts_with('.'), "left over: {name}");
    }
}

#[test]
fn run_accepts_a_problem_file_and_precision_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    std::fs::write(
        &file,
        "solver = \"jacobi\"\n[jacobi]\nn = 17\nm = 19\nmax_iterations = 100000\ntolerance = 1e-7\n",
    )
    .unwrap();
    let o = keisan(&[
        "run",
        file.to_str().unwrap(),
        "--backend",
        "cpu",
        "--precision",
        "f32",
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["precision"], "f32");
    assert_eq!(s["status"], "converged");
}

#[test]
fn human_summary_goes_to_stderr() {
    let o = keisan(&[
        "run",
        "--backend",
        "cpu",
        "--set",
        "jacobi.n=20",
        "--set",
        "jacobi.m=20",
    ]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("iterations    100 of 100") && err.contains("solution err"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// With `--json`, a refused or failed command says so on stdout too: a JSON object with
/// the message, the exit code and, for a bad value, the field; without it stdout stays
/// empty.
#[test]
fn errors_come_as_json_when_json_was_asked_for() {
    let o = keisan(&[
        "run",
        "--backend",
        "cpu",
        "--json",
        "--set",
        "jacobi.relax=2.5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["field"], "jacobi.relax");
    assert_eq!(e["value"], "2.5");
    assert_eq!(e["exit_code"], 2);
    let message = e["error"].as_str().unwrap();
    assert!(message.starts_with("jacobi.relax = 2.5: "), "{message}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(message));
    let o = keisan(&["bench", "jacobi", "--json", "--repetitions", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["field"], "--iterations/--repetitions");
    let o = keisan(&["run", "no-such-file.toml", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(e.get("field").is_none());
    assert!(e["error"].as_str().unwrap().contains("no-such-file.toml"));
    let o = keisan(&["run", "--backend", "cpu", "--set", "jacobi.relax=2.5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
}

#[test]
fn info_lists_threads_and_explains_missing_cuda() {
    let o = keisan(&["info", "--json"]);
    assert!(o.status.success());
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(s["cpu_threads"].as_u64().unwrap() >= 1);
    assert!(s["cuda_devices"].is_array());
}

/// `keisan bench --help` and `keisan model --help` say what each solver's case measures:
/// a line of its own per solver (a doc comment on the shared arguments once gave every
/// solver the same words).
#[test]
fn bench_and_model_help_describe_each_solver() {
    for (cmd, solvers) in [
        (
            "bench",
            &["jacobi", "heat", "electrostatics", "advection", "nbody"][..],
        ),
        ("model", &["heat", "nbody"][..]),
    ] {
        let o = keisan(&[cmd, "--help"]);
        assert!(o.status.success());
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines: Vec<&str> = solvers
            .iter()
            .map(|s| {
                let line = text
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{s} ")))
                    .unwrap_or_else(|| panic!("{cmd}: no line for {s}\n{text}"));
                line.trim_start()[s.len()..].trim()
            })
            .collect();
        for (k, a) in lines.iter().enumerate() {
            assert!(a.len() > 20, "{cmd} {}: {a:?}", solvers[k]);
            assert!(!lines[..k].contains(a), "{cmd}: {a:?} twice\n{text}");
        }
    }
}

#[test]
fn bench_reports_the_fraction_of_the_measured_ceiling() {
    let o = keisan(&[
        "bench",
        "jacobi",
        "--backend",
        "cpu",
        "--size",
        "200x100",
        "--iterations",
        "5",
        "--repetitions",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 1, "the CPU has one variant");
    let s = &all[0];
    let frac = s["fraction_of_copy_bandwidth"].as_f64().unwrap();
    assert!(frac > 0.0 && s["ceilings"]["copy_bandwidth"].as_f64().unwrap() > 0.0);
    assert_eq!(s["bytes_per_cell"], 24);
}

/// `bench electrostatics` on slabs: weak and strong scaling against one device, the
/// exchange and the model in the report (CPU subdomains here; the GPU figures are in
/// docs/PERFORMANCE.md).
#[test]
fn bench_electrostatics_on_slabs_reports_weak_and_strong_scaling() {
    let o = keisan(&[
        "bench",
        "electrostatics",
        "--backend",
        "cpu",
        "--subdomains",
        "3",
        "--cells",
        "11",
        "--iterations",
        "3",
        "--repetitions",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["subdomains"].as_u64(), s["nodes_per_axis"].as_u64()),
        (Some(3), Some(12))
    );
    for key in [
        "one_device_s_per_iteration",
        "weak_s_per_iteration",
        "strong_s_per_iteration",
        "model_strong_64_s_per_iteration",
    ] {
        assert!(s[key].as_f64().unwrap() > 0.0, "{key}: {s}");
    }
    let x = &s["exposure"];
    assert!(x["exchange_s_per_step"].as_f64().is_some(), "{s}");
    // The slabs timed with the exchange off: their own work and the exchange's part
    // cover what they take beyond one device's share (each is clamped at 0).
    let (own, exposed, beyond) = (
        x["decomposition_s_per_step"].as_f64().unwrap(),
        x["exposed_exchange_s_per_step"].as_f64().unwrap(),
        x["exposed_s_per_step"].as_f64().unwrap(),
    );
    assert!(own >= 0.0 && exposed >= 0.0, "{s}");
    assert!(own + exposed >= beyond * (1.0 - 1e-12), "{s}");
    assert!(
        x["without_exchange_s_per_step"].as_f64().unwrap() > 0.0,
        "{s}"
    );
    // --poisson times one device only.
    let o = keisan(&[
        "bench",
        "electrostatics",
        "--backend",
        "cpu",
        "--subdomains",
        "2",
        "--poisson",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `bench jacobi` and `bench heat` on slabs: the scaling against the first device alone,
/// the halo exchange alone per step, the exposed part and the model for 8 and 64 devices.
#[test]
fn bench_jacobi_and_heat_on_slabs_report_the_exchange_and_the_model() {
    for args in [
        &["jacobi", "--size", "64x48", "--iterations", "4"][..],
        &["heat", "--size-3d", "24x16x16", "--steps", "4"][..],
    ] {
        let mut all = vec!["bench"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--backend",
            "cpu",
            "--subdomains",
            "2",
            "--repetitions",
            "1",
            "--json",
        ]);
        let o = keisan(&all);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let x = &s["exposure"];
        assert!(x["exchange_s_per_step"].as_f64().unwrap() > 0.0, "{s}");
        assert!(x["exposed_s_per_step"].as_f64().unwrap() >= 0.0, "{s}");
        assert!(
            x["without_exchange_s_per_step"].as_f64().unwrap() > 0.0,
            "{s}"
        );
        assert!(x["hidden_fraction"].as_f64().is_some(), "{s}");
        assert!(
            x["model_8_s_per_step"].as_f64().unwrap() > x["model_64_s_per_step"].as_f64().unwrap(),
            "{s}"
        );
    }
}

/// An initial field from a .npy beside the problem file (a relative path is taken from the
/// problem file's folder, not the working directory); the run starts from those values.
#[test]
fn heat_initial_field_from_a_npy_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ny, nx) = (9usize, 12usize);
    let u0: Vec<f32> = (0..ny * nx)
        .map(|i| ((i % nx) * (i / nx)) as f32 * 0.01)
        .collect();
    keisan::output::npy::write(&d.join("u0.npy"), &[ny, nx], &u0).unwrap();
    let toml = format!(
        "solver = \"heat\"\n[heat]\nshape = [{ny}, {nx}]\ndt = 1e-4\nsteps = 1\n\
         [heat.initial]\npreset = \"file\"\npath = \"u0.npy\"\n[output]\ndir = \"{}\"\n",
        d.join("res").display()
    );
    std::fs::write(d.join("p.toml"), toml).unwrap();
    let o = keisan(&[
        "run",
        d.join("p.toml").to_str().unwrap(),
        "--backend",
        "cpu",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(d.join("res/u.npy")).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[ny as u64, nx as u64]);
    let u: Vec<f64> = npy.into_vec().unwrap();
    // One step: boundary values kept, interior moved by the update from the file's values.
    let r = 1e-4 * ((ny - 1) as f64).powi(2);
    let rx = 1e-4 * ((nx - 1) as f64).powi(2);
    let at = |j: usize, i: usize| u0[j * nx + i] as f64;
    for (j, i) in [(0, 3), (ny - 1, 5), (4, 0), (4, 6)] {
        let want = if j == 0 || j == ny - 1 || i == 0 || i == nx - 1 {
            at(j, i)
        } else {
            let c = at(j, i);
            c + (rx * ((at(j, i - 1) + at(j, i + 1)) - 2.0 * c)
                + r * ((at(j - 1, i) + at(j + 1, i)) - 2.0 * c))
        };
        assert!(
            (u[j * nx + i] - want).abs() < 1e-12,
            "({j}, {i}): {} vs {want}",
            u[j * nx + i]
        );
    }
}

#[test]
fn every_example_is_a_valid_problem() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            keisan::problem::load(&path, &Default::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 6, "{n} examples");
}
