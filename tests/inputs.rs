//! Inputs keisan must not trust: a problem file or an input that is not a regular file
//! (a FIFO would hang, /dev/zero grow without end), a problem file of absurd size, a
//! particle CSV whose first row is bad, and a signal while a run still sets up.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Wait for `child` at most `secs`; its exit code and stderr (killed and failed when it
/// hangs).
fn finish_within(mut child: Child, secs: u64, what: &str) -> (i32, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(!err.contains("panicked"), "{what}: {err}");
            return (status.code().unwrap_or(-1), err);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(common::keisan_bin())
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo");
}

#[test]
fn problem_files_that_are_not_regular_files_or_too_large_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("fifo.toml"));
    std::fs::write(
        dir.path().join("huge.toml"),
        format!("# {}\n", "x".repeat(17 << 20)),
    )
    .unwrap();
    for (file, needle) in [
        ("/dev/zero", "not a regular file"),
        ("fifo.toml", "not a regular file"),
        (".", "a folder"),
        ("huge.toml", "larger than 16 MiB"),
    ] {
        let (code, err) = finish_within(spawn(dir.path(), &["run", file]), 20, file);
        assert_eq!(code, 2, "{file}: {err}");
        assert!(err.contains(needle), "{file}: {err}");
    }
}

#[test]
fn input_arrays_and_checkpoints_that_are_fifos_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("f.npy"));
    mkfifo(&dir.path().join("c.keisan"));
    std::fs::write(
        dir.path().join("p.toml"),
        "solver = \"advection\"\n[advection]\nnx = 16\nny = 16\nsteps = 2\ncfl = 0.5\n\
         [advection.velocity]\nkind = \"uniform\"\nu = 1.0\nv = 0.0\n\
         [advection.initial]\npreset = \"file\"\npath = \"f.npy\"\n",
    )
    .unwrap();
    let (code, err) = finish_within(
        spawn(dir.path(), &["run", "p.toml", "--backend", "cpu"]),
        20,
        "fifo input",
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("advection.initial.path") && err.contains("not a regular file"));
    let (code, err) = finish_within(
        spawn(
            dir.path(),
            &["run", "--restart", "c.keisan", "--backend", "cpu"],
        ),
        20,
        "fifo checkpoint",
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}

/// A signal while the geometry of a large mesh is built ends the run at once (exit 143),
/// not when the set-up is over.
#[cfg(unix)]
#[test]
fn a_signal_during_set_up_stops_the_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.toml"),
        "solver = \"electrostatics\"\n[electrostatics]\n\
         x = { range = [0.0, 1.0], cells = 320 }\ny = { range = [0.0, 1.0], cells = 320 }\n\
         z = { range = [0.0, 1.0], cells = 320 }\nvoltages = [1.0]\nmax_iterations = 2\n\
         [electrostatics.faces]\nx_min = 0.0\n[[electrostatics.shapes]]\nkind = \"sphere\"\n\
         center = [0.5, 0.5, 0.5]\nradius = 0.2\nelectrode = 1\n",
    )
    .unwrap();
    let args = ["run", "p.toml", "--backend", "cpu", "-q", "--out", "res"];
    // How long the whole run takes undisturbed.
    let start = Instant::now();
    let (code, err) = finish_within(spawn(dir.path(), &args), 120, "undisturbed");
    assert_eq!(code, 0, "{err}");
    let whole = start.elapsed();
    std::fs::remove_dir_all(dir.path().join("res")).unwrap();
    let child = spawn(dir.path(), &args);
    std::thread::sleep(Duration::from_millis(100));
    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let (code, err) = finish_within(child, 120, "signalled");
    let took = sent.elapsed();
    assert_eq!(code, 143, "{err}");
    assert!(
        took < whole / 3,
        "stopped {took:?} after the signal; the whole run takes {whole:?}"
    );
    assert!(!dir.path().join("res").join("summary.json").exists());
}

fn particles(dir: &Path, csv: &str) -> (i32, String) {
    std::fs::write(dir.join("p.csv"), csv).unwrap();
    std::fs::write(
        dir.join("p.toml"),
        "solver = \"nbody\"\n[nbody]\ndt = 0.01\nsteps = 2\nsoftening = 0.01\n\
         initial = { file = \"p.csv\" }\n",
    )
    .unwrap();
    let o = common::keisan_in(dir, &["run", "p.toml", "--backend", "cpu", "-q", "--json"]);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap(), format!("{err}{s}"))
}

#[test]
fn a_particle_csv_header_is_decided_by_rule_and_bad_rows_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rows = "1,0,0,0,0.5,0,1\n-1,0,0,0,-0.5,0,1\n";
    for (csv, n) in [
        (rows.to_string(), 2),
        (format!("x,y,z,vx,vy,vz,m\n{rows}"), 2),
        (format!("\u{feff}{rows}"), 2),
        (format!("\u{feff}x,y,z,vx,vy,vz,m\n{rows}"), 2),
    ] {
        let (code, out) = particles(dir.path(), &csv);
        assert_eq!(code, 0, "{csv:?}: {out}");
        assert_eq!(
            common_shape(&out),
            Some(n),
            "{csv:?}: the particle count: {out}"
        );
    }
    for (csv, line) in [
        (format!(",0,0,0,0.5,0,1\n{rows}"), "line 1"),
        (format!("0..5,0,0,0,0.5,0,1\n{rows}"), "line 1"),
        (format!("x,y,z,vx,vy,vz,m\n{rows}1,2,3\n"), "line 4"),
    ] {
        let (code, out) = particles(dir.path(), &csv);
        assert_eq!(code, 2, "{csv:?}: {out}");
        assert!(
            out.contains(line) && out.contains("nbody"),
            "{csv:?}: {out}"
        );
    }
}

/// The particle count of a run's JSON summary (the first number of "shape").
fn common_shape(out: &str) -> Option<u64> {
    let at = out.find("{\"")?;
    let v: serde_json::Value = serde_json::from_str(&out[at..]).ok()?;
    v["shape"][0].as_u64()
}
