//! A terminal that cannot take keisan's text (a full disk behind a redirection, a closed
//! pipe) never makes it panic nor costs the results; command-line errors come as JSON on
//! stdout when `--json` was asked for, like every other error.

mod common;

use std::process::{Command, Stdio};

const PROBLEM: &str = "solver = \"jacobi\"\n[jacobi]\nn = 16\nm = 16\nmax_iterations = 20\n\
                       relax = 0.5\ntolerance = 1e-10\n";

fn full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

#[test]
fn a_full_stdout_or_stderr_neither_panics_nor_loses_the_results() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), PROBLEM).unwrap();
    for (out, args) in [
        (
            "a",
            &["run", "p.toml", "--backend", "cpu", "--out", "a"][..],
        ),
        (
            "b",
            &["run", "p.toml", "--backend", "cpu", "--out", "b", "--json"][..],
        ),
    ] {
        for to_stdout in [false, true] {
            let mut c = Command::new(common::keisan_bin());
            c.current_dir(dir.path()).args(args);
            if to_stdout {
                c.stdout(full()).stderr(Stdio::piped());
            } else {
                c.stderr(full()).stdout(Stdio::piped());
            }
            let o = c.output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
            assert!(dir.path().join(out).join("summary.json").is_file());
            assert!(dir.path().join(out).join("u.npy").is_file());
        }
    }
    let o = Command::new(common::keisan_bin())
        .args(["info", "--json"])
        .stdout(full())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn command_line_errors_come_as_json_when_json_was_asked_for() {
    for (args, field) in [
        (&["run", "--bogus", "--json"][..], "--bogus"),
        (&["run", "--precision", "f16", "--json"][..], "--precision"),
        (
            &["model", "heat", "x.toml", "--heights", "a,b", "--json"][..],
            "--heights",
        ),
    ] {
        let o = Command::new(common::keisan_bin())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e})"));
        assert_eq!(v["exit_code"], 2);
        assert!(
            v["field"].as_str().unwrap_or("").contains(field),
            "{args:?}: {v}"
        );
        assert!(!String::from_utf8_lossy(&o.stderr).is_empty());
    }
    // Without --json, stdout stays empty.
    let o = Command::new(common::keisan_bin())
        .args(["run", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
}

/// A binary built without MPI, started by a launcher as one of several processes, refuses
/// to run (each process would write the same folder) and says what to do.
#[cfg(not(feature = "mpi"))]
#[test]
fn a_build_without_mpi_refuses_to_run_as_one_of_several_ranks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), PROBLEM).unwrap();
    for var in ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"] {
        let o = Command::new(common::keisan_bin())
            .current_dir(dir.path())
            .args(["run", "p.toml", "--backend", "cpu", "--out", "res"])
            .env(var, "3")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--features mpi"), "{err}");
        assert!(!dir.path().join("res").exists());
    }
    // One process of a launcher is an ordinary run.
    let o = Command::new(common::keisan_bin())
        .current_dir(dir.path())
        .args(["run", "p.toml", "--backend", "cpu", "-q"])
        .env("OMPI_COMM_WORLD_SIZE", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
}
