//! Output schedules (numbered fields, a ParaView collection, the diagnostics table) and
//! outputs as a set: a failed write leaves the previous complete set as it was.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::keisan_bin;

fn keisan(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let o = Command::new(keisan_bin())
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
    o
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Every file of a folder with its bytes, by name.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    names(dir)
        .into_iter()
        .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
        .collect()
}

const HEAT: &str = "solver = \"heat\"\n[heat]\nshape = [30, 40]\ndt = 1e-4\nsteps = 10\n\
                    [heat.initial]\npreset = \"sine\"\n[output]\ndir = \"res\"\n";

#[test]
fn every_k_steps_writes_a_series_a_collection_and_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("p.toml"), format!("{HEAT}every = 4\n")).unwrap();
    let o = keisan(d, &["run", "p.toml", "-q", "--backend", "cpu"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let res = d.join("res");
    let files = names(&res);
    for step in ["000000", "000004", "000008", "000010"] {
        for ext in ["npy", "vti", "png"] {
            assert!(files.contains(&format!("u_{step}.{ext}")), "{files:?}");
        }
    }
    assert!(
        !files.iter().any(|f| f.starts_with('.')),
        "left over: {files:?}"
    );
    let pvd = std::fs::read_to_string(res.join("u.pvd")).unwrap();
    assert_eq!(pvd.matches("<DataSet").count(), 4, "{pvd}");
    assert!(
        pvd.contains("timestep=\"1e-3\" part=\"0\" file=\"u_000010.vti\""),
        "{pvd}"
    );
    let csv = std::fs::read_to_string(res.join("diagnostics.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "step,time,min,max,mean,max_error");
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(rows[4].starts_with("10,1.00000000000000"), "{csv}");
    // The numbered field of the last step is the final field.
    assert_eq!(
        std::fs::read(res.join("u_000010.npy")).unwrap(),
        std::fs::read(res.join("u.npy")).unwrap()
    );
}

#[test]
fn times_become_steps_and_need_a_time_dependent_solver() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("p.toml"),
        format!("{HEAT}times = [0.0005, 0.0002]\n"),
    )
    .unwrap();
    let o = keisan(d, &["run", "p.toml", "-q", "--backend", "cpu"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = names(&d.join("res"));
    assert!(files.contains(&"u_000002.npy".into()) && files.contains(&"u_000005.npy".into()));
    assert!(!files.contains(&"u_000000.npy".into()), "{files:?}");
    let o = keisan(
        d,
        &[
            "run",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "j",
            "--set",
            "output.times=[1.0]",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("output.times") && err.contains("output.every"),
        "{err}"
    );
    let o = keisan(
        d,
        &[
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--set",
            "output.times=[1.0]",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("output.times = 1") && err.contains("[0, steps × dt]"),
        "{err}"
    );
}

#[test]
fn a_failed_write_leaves_the_previous_set_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("p.toml"), HEAT).unwrap();
    let o = keisan(d, &["run", "p.toml", "-q", "--backend", "cpu"], &[]);
    assert!(o.status.success());
    let res = d.join("res");
    let before = contents(&res);
    for fail in ["u.npy", "summary.json"] {
        let o = keisan(
            d,
            &[
                "run",
                "p.toml",
                "-q",
                "--backend",
                "cpu",
                "--set",
                "heat.steps=20",
                "--inject-write-failure",
                fail,
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("injected write failure"), "{err}");
        let after = contents(&res);
        assert!(
            after == before,
            "the previous set changed or gained files ({fail})"
        );
    }
}

#[test]
fn nothing_is_created_for_a_problem_that_fails_before_solving() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The .npy is found wrong during set-up: no output folder appears.
    std::fs::write(d.join("u0.npy"), "not an array").unwrap();
    std::fs::write(
        d.join("p.toml"),
        HEAT.replace("preset = \"sine\"", "preset = \"file\"\npath = \"u0.npy\""),
    )
    .unwrap();
    let o = keisan(d, &["run", "p.toml", "-q", "--backend", "cpu"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!d.join("res").exists());
}

#[test]
fn one_process_writes_one_piece_and_restarts_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("p.toml"), format!("{HEAT}every = 5\n")).unwrap();
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec!["run", "p.toml", "-q", "--backend", "cpu", "--out", out];
        args.extend_from_slice(extra);
        let o = keisan(d, &args, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let pieces = "output.pieces=\"per-rank\"";
    run("whole", &[]);
    run(
        "first",
        &[
            "--set",
            pieces,
            "--set",
            "heat.steps=5",
            "--checkpoint-every",
            "5",
        ],
    );
    run(
        "second",
        &["--restart", "first/checkpoint.keisan", "--set", pieces],
    );
    let files = names(&d.join("second"));
    for f in [
        "u.pvti",
        "u_r0000.npy",
        "u_r0000.vti",
        "u_000010.pvti",
        "u_000010_r0000.vti",
        "u.png",
    ] {
        assert!(files.contains(&f.to_string()), "{f} missing: {files:?}");
    }
    assert!(!files.contains(&"u.npy".to_string()));
    let npy = |run: &str, f: &str| std::fs::read(d.join(run).join(f)).unwrap();
    assert!(npy("whole", "u.npy") == npy("second", "u_r0000.npy"));
    // A piece file is not a checkpoint to restart from: the main file is.
    let o = keisan(
        d,
        &[
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "third",
            "--restart",
            "first/checkpoint.s5.r0000.keisan",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("restart from checkpoint.keisan"), "{err}");
    let index = String::from_utf8(npy("second", "u.pvti")).unwrap();
    assert!(
        index.contains("<Piece Extent=\"0 39 0 29 0 0\" Source=\"u_r0000.vti\"/>"),
        "{index}"
    );
}
