//! A run's whole output — numbered series, pieces, final set — appears as one consistent
//! set, and nothing keisan did not write is replaced or removed: a rerun that fails or is
//! interrupted leaves the previous run's folder byte for byte as it was; a shorter rerun
//! leaves no stale series; a restart continues the series, into its folder or a new one;
//! a user's file or folder where an output must go stops the publishing and keeps the
//! outputs; an input in the output folder and a path JSON cannot carry are refused before
//! any solving.

mod common;

use std::path::Path;
use std::process::Command;

use common::{consistent, keisan_bin, names, snapshot, stage_named, write_npy};

const ADVECTION: &str = r#"solver = "advection"
precision = "f32"
[advection]
nx = 32
ny = 32
steps = 40
cfl = 0.5
[advection.velocity]
kind = "uniform"
u = 1.0
v = 0.5
[advection.initial]
preset = "zalesak"
[output]
every = 5
"#;

fn advection_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut f = vec![0.0f32; 32 * 32];
    for j in 10..16 {
        for i in 10..16 {
            f[j * 32 + i] = 3e38;
        }
    }
    write_npy(&dir.path().join("big.npy"), &[32, 32], &f);
    std::fs::write(dir.path().join("p.toml"), ADVECTION).unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        ADVECTION.replace(
            "preset = \"zalesak\"",
            "preset = \"file\"\npath = \"big.npy\"",
        ),
    )
    .unwrap();
    dir
}

fn run(d: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let o = Command::new(keisan_bin())
        .current_dir(d)
        .args(["run", "--backend", "cpu", "-q"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (o.status.code().unwrap(), err)
}

#[test]
fn a_rerun_that_fails_leaves_the_previous_run_untouched() {
    let dir = advection_folder();
    let d = dir.path();
    assert_eq!(run(d, &["p.toml", "--out", "res"], &[]).0, 0);
    consistent(&d.join("res"), &[]);
    let before = snapshot(&d.join("res"));
    assert!(before.keys().any(|n| n.starts_with("f_000040")));
    // Diverges after the series began; fails writing its final set; the same in slabs.
    let cases: [(&str, &[&str]); 3] = [
        ("bad.toml", &[]),
        ("bad.toml", &["--subdomains", "2"]),
        ("p.toml", &["--inject-write-failure", "f.npy"]),
    ];
    for (file, extra) in cases {
        let mut args = vec![file, "--out", "res"];
        args.extend_from_slice(extra);
        let (code, err) = run(d, &args, &[]);
        assert_eq!(code, 1, "{file} {extra:?}: {err}");
        assert!(
            snapshot(&d.join("res")) == before,
            "{file} {extra:?}: the previous run's folder changed"
        );
    }
}

#[test]
fn a_shorter_rerun_leaves_no_stale_series() {
    let dir = advection_folder();
    let d = dir.path();
    assert_eq!(run(d, &["p.toml", "--out", "res"], &[]).0, 0);
    std::fs::write(d.join("res/notes.txt"), "mine").unwrap();
    assert_eq!(
        run(
            d,
            &["p.toml", "--out", "res", "--set", "advection.steps=12"],
            &[]
        )
        .0,
        0
    );
    consistent(&d.join("res"), &["notes.txt"]);
    let n = names(&d.join("res"));
    assert!(n.iter().any(|f| f.starts_with("f_000012")), "{n:?}");
    assert!(!n.iter().any(|f| f.starts_with("f_000015")), "stale: {n:?}");
    assert_eq!(
        std::fs::read_to_string(d.join("res/notes.txt")).unwrap(),
        "mine"
    );
}

const LONG_JACOBI: &str = "solver = \"jacobi\"\n[jacobi]\nn = 300\nm = 300\n\
    tolerance = 1e-12\nmax_iterations = 100000000\n[output]\nevery = 100\n";

#[test]
fn an_interrupted_rerun_keeps_the_previous_run_and_a_restart_continues_its_series() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("p.toml"), LONG_JACOBI).unwrap();
    let short = [
        "p.toml",
        "--out",
        "res",
        "--set",
        "jacobi.max_iterations=300",
    ];
    assert_eq!(run(d, &short, &[]).0, 0);
    let before = snapshot(&d.join("res"));
    let child = Command::new(keisan_bin())
        .current_dir(d)
        .args(["run", "p.toml", "-q", "--backend", "cpu", "--out", "res"])
        .args(["--checkpoint-every", "200"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for(&d.join("res/checkpoint.keisan"), 60);
    std::thread::sleep(std::time::Duration::from_millis(200));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130));
    // The previous run's files are as they were; beside them the checkpoint, and the
    // interrupted run's series in its stage (hidden), for the restart.
    let after = snapshot(&d.join("res"));
    for (name, bytes) in &before {
        assert!(after.get(name) == Some(bytes), "{name} changed");
    }
    let new: Vec<&String> = after
        .keys()
        .filter(|n| !before.contains_key(*n) && !n.contains('/'))
        .collect();
    assert_eq!(new.len(), 2, "{new:?}");
    assert!(new.iter().any(|n| *n == "checkpoint.keisan"), "{new:?}");
    assert!(new.iter().any(|n| n.starts_with(".keisan-run-")), "{new:?}");
    let step = keisan::checkpoint::Checkpoint::open(&d.join("res/checkpoint.keisan"))
        .unwrap()
        .header
        .step;
    let until = format!("jacobi.max_iterations={}", step + 150);
    // Into a new folder: the series up to the checkpoint comes along.
    let restart = ["--restart", "res/checkpoint.keisan", "--set", &until];
    let (code, err) = run(d, &[&restart[..], &["--out", "b"]].concat(), &[]);
    assert_eq!(code, 0, "{err}");
    consistent(&d.join("b"), &[]);
    let n = names(&d.join("b"));
    assert!(n.contains(&"u_000000100.npy".to_string()), "{n:?}");
    assert!(n.contains(&format!("u_{:09}.npy", step + 150)), "{n:?}");
    // Into its own folder (no --out): the published set replaces the previous run's,
    // and the stage is gone.
    let (code, err) = run(d, &restart, &[]);
    assert_eq!(code, 0, "{err}");
    consistent(&d.join("res"), &[]);
    for name in names(&d.join("b")) {
        if name.ends_with(".npy") && name != "u.npy" {
            assert_eq!(
                std::fs::read(d.join("b").join(&name)).unwrap(),
                std::fs::read(d.join("res").join(&name)).unwrap(),
                "{name}"
            );
        }
    }
    // A restart into a new folder when part of the checkpoint's series is gone: the
    // index lists only what is there.
    let stage = d.join("res").join(stage_named(&d.join("res")).unwrap());
    std::fs::remove_dir_all(stage).unwrap();
    std::fs::remove_file(d.join("res/u_000000100.vti")).unwrap();
    let (code, err) = run(d, &[&restart[..], &["--out", "c"]].concat(), &[]);
    assert_eq!(code, 0, "{err}");
    consistent(&d.join("c"), &[]);
    let pvd = std::fs::read_to_string(d.join("c/u.pvd")).unwrap();
    assert!(!pvd.contains("u_000000100.vti") && pvd.contains("u_000000200.vti"));
}

#[test]
fn a_users_file_or_folder_is_never_replaced_or_removed() {
    let dir = advection_folder();
    let d = dir.path();
    assert_eq!(run(d, &["p.toml", "--out", "res"], &[]).0, 0);
    // A folder where an output goes: nothing replaced, the outputs kept and named.
    std::fs::remove_file(d.join("res/f.png")).unwrap();
    std::fs::create_dir(d.join("res/f.png")).unwrap();
    std::fs::write(d.join("res/f.png/notes.txt"), "mine").unwrap();
    let before = snapshot(&d.join("res"));
    let (code, err) = run(d, &["p.toml", "--out", "res"], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("res/f.png") && err.contains("is a folder"),
        "{err}"
    );
    let kept = err
        .split("kept in ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap();
    assert!(d.join(kept).join("f.npy").exists(), "{err}");
    let after = snapshot(&d.join("res"));
    for (name, bytes) in &before {
        assert!(after.get(name) == Some(bytes), "{name} changed");
    }
    // A file of the user's with an output's name, in a folder of no earlier run.
    std::fs::create_dir(d.join("mine")).unwrap();
    std::fs::write(d.join("mine/f.npy"), "not keisan's").unwrap();
    let (code, err) = run(d, &["p.toml", "--out", "mine"], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("mine/f.npy") && err.contains("is a file"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(d.join("mine/f.npy")).unwrap(),
        b"not keisan's"
    );
    // A later successful run elsewhere removes none of the kept outputs.
    assert_eq!(run(d, &["p.toml", "--out", "res2"], &[]).0, 0);
    assert!(d.join(kept).join("f.npy").exists());
}

#[test]
fn an_input_in_the_output_folder_is_refused_before_solving() {
    let dir = advection_folder();
    let d = dir.path();
    std::fs::create_dir(d.join("res")).unwrap();
    std::fs::copy(d.join("big.npy"), d.join("res/f.npy")).unwrap();
    let toml = ADVECTION.replace(
        "preset = \"zalesak\"",
        "preset = \"file\"\npath = \"res/f.npy\"",
    );
    std::fs::write(d.join("in.toml"), toml).unwrap();
    let (code, err) = run(d, &["in.toml", "--out", "res"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("advection.initial.path") && err.contains("output folder"),
        "{err}"
    );
    assert_eq!(names(&d.join("res")), ["f.npy"]);
}

#[test]
fn a_path_json_cannot_carry_is_refused_before_solving() {
    use std::os::unix::ffi::OsStrExt;
    let dir = advection_folder();
    let d = dir.path();
    let out = std::ffi::OsStr::from_bytes(b"out\xff");
    let o = Command::new(keisan_bin())
        .current_dir(d)
        .args(["run", "p.toml", "--backend", "cpu", "-q", "--out"])
        .arg(out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("output folder") && err.contains("UTF-8"),
        "{err}"
    );
    assert!(!d.join(out).exists());
    // A problem file in such a folder, with checkpoints (their header records its folder).
    let folder = d.join(std::ffi::OsStr::from_bytes(b"in\xff"));
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(d.join("p.toml"), folder.join("p.toml")).unwrap();
    let o = Command::new(keisan_bin())
        .current_dir(d)
        .arg("run")
        .arg(folder.join("p.toml"))
        .args([
            "--backend",
            "cpu",
            "-q",
            "--out",
            "res",
            "--checkpoint-every",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("problem file") && err.contains("UTF-8"),
        "{err}"
    );
}
