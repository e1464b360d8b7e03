//! Decomposed runs under mpirun (cargo feature `mpi`; CI installs Open MPI): 1, 2 and 4
//! ranks on the CPU backend write the same files as one process, bit for bit (residual
//! histories and the stopping iteration included; N-body force sums shared out), restart
//! from a checkpoint of another rank count, and a request no rank can carry out ends
//! every rank with the error instead of hanging.
#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::{Command, Output};

const ADVECTION: &str = "solver = \"advection\"\n[advection]\nnx = 40\nny = 31\nsteps = 12\n\
    cfl = 0.9\nvelocity = { kind = \"rotation\" }\ninitial = { preset = \"zalesak\" }\n\
    [output]\nevery = 4\n";
const HEAT: &str = "solver = \"heat\"\n[heat]\nshape = [30, 17, 24]\ndt = 1e-4\nsteps = 9\n\
    initial = { preset = \"hot_box\" }\n[output]\nevery = 3\n";
const HEAT_2D: &str = "solver = \"heat\"\n[heat]\nshape = [41, 33]\ndt = 1e-4\nsteps = 8\n\
    initial = { preset = \"gaussian\", width = 0.2 }\n[output]\nevery = 4\n";

const JACOBI: &str = "solver = \"jacobi\"\n[jacobi]\nn = 30\nm = 23\ntolerance = 1e-6\n\
    max_iterations = 2000\n[output]\nevery = 100\n";

const ELECTROSTATICS: &str = "solver = \"electrostatics\"\n[electrostatics]\n\
    x = { range = [0.0, 1.0], cells = 10 }\ny = { range = [0.0, 1.0], cells = 9 }\n\
    z = { range = [0.0, 1.0], cells = 16 }\nvoltages = [1.0, 0.0]\npermittivities = [4.0]\n\
    tolerance = 1e-8\nmax_iterations = 3000\ncapacitance = true\n\
    [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.0, 0.0, 0.3]\nmax = [1.0, 1.0, 0.6]\n\
    dielectric = 1\n[[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.5, 0.5, 0.2]\n\
    radius = 0.15\nelectrode = 1\n[[electrostatics.shapes]]\nkind = \"box\"\n\
    min = [0.2, 0.2, 0.8]\nmax = [0.8, 0.8, 0.9]\nelectrode = 2\n";

const NBODY: &str = "solver = \"nbody\"\n[nbody]\nn = 101\nsoftening = 0.05\ndt = 0.01\n\
    steps = 20\ninitial = { preset = \"two_plummers\", separation = 3.0 }\n[output]\nevery = 10\n";

fn mpirun(dir: &Path, ranks: usize, args: &[&str]) -> Output {
    let o = Command::new("mpirun")
        .current_dir(dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-np", &ranks.to_string(), "--oversubscribe"])
        .arg(common::keisan_bin())
        .args(args)
        .output()
        .expect("mpirun (Open MPI) on the PATH");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
    o
}

fn alone(dir: &Path, args: &[&str]) {
    let o = Command::new(common::keisan_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The .npy and .csv files of run folder `a`, each equal in `b`.
fn same_files(dir: &Path, a: &str, b: &str) {
    let mut n = 0;
    for e in std::fs::read_dir(dir.join(a)).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".npy") || name.ends_with(".csv") {
            let x = std::fs::read(dir.join(a).join(&name)).unwrap();
            let y = std::fs::read(dir.join(b).join(&name))
                .unwrap_or_else(|_| panic!("{b} lacks {name}"));
            assert!(x == y, "{name} differs between {a} and {b}");
            n += 1;
        }
    }
    assert!(n >= 4, "{a} holds only {n} field files");
}

#[test]
fn ranks_write_what_one_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, problem) in [
        ("adv", ADVECTION),
        ("heat", HEAT),
        ("heat2d", HEAT_2D),
        ("jacobi", JACOBI),
        ("es", ELECTROSTATICS),
        ("nbody", NBODY),
    ] {
        let file = format!("{name}.toml");
        std::fs::write(d.join(&file), problem).unwrap();
        let one = format!("{name}-alone");
        alone(d, &["run", &file, "--backend", "cpu", "-q", "--out", &one]);
        for ranks in [1, 2, 4] {
            let out = format!("{name}-{ranks}");
            let o = mpirun(d, ranks, &["run", &file, "--backend", "cpu", "--out", &out]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            same_files(d, &one, &out);
        }
    }
}

#[test]
fn a_checkpoint_of_one_rank_count_restarts_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("adv.toml"), ADVECTION).unwrap();
    alone(
        d,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "straight",
        ],
    );
    let o = mpirun(
        d,
        4,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "--out",
            "first",
            "--set",
            "advection.steps=6",
            "--checkpoint-every",
            "6",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = mpirun(
        d,
        2,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "--out",
            "second",
            "--restart",
            "first/checkpoint.keisan",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |run: &str| std::fs::read(d.join(run).join("f.npy")).unwrap();
    assert_eq!(read("straight"), read("second"));
}

#[test]
fn a_request_no_rank_can_take_ends_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("adv.toml"), ADVECTION).unwrap();
    // Too many ranks for 31 rows with halos of 2: refused on every rank, none hangs.
    let o = mpirun(
        d,
        20,
        &["run", "adv.toml", "--backend", "cpu", "--out", "x"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("rank") && err.contains("--subdomains"),
        "{err}"
    );
    // Per-process placement options are refused under mpirun.
    let o = mpirun(
        d,
        2,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "--out",
            "y",
            "--subdomains",
            "2",
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("every rank takes one subdomain"));
}
