//! Helpers shared by the integration tests.
#![allow(dead_code)]

use keisan::device::{Device, Gpu};
use keisan::solvers::jacobi::{JacobiProblem, Manufactured};
use rand::{Rng, SeedableRng};

/// The keisan binary: $KEISAN_BIN when set (test executables copied to a GPU host),
/// else the one cargo built for this test run.
pub fn keisan_bin() -> std::path::PathBuf {
    std::env::var_os("KEISAN_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_keisan").into())
}

/// The first CUDA device, or None after printing why the test is skipped.
pub fn gpu_or_skip(test: &str) -> Option<Device> {
    match Gpu::open(0) {
        Ok(gpu) => Some(Device::Cuda(gpu)),
        Err(e) => {
            skip(&format!("skipped: no CUDA device ({test}: {e})"));
            None
        }
    }
}

pub fn problem(n: usize, m: usize, relax: f64, tolerance: f64, iters: u64) -> JacobiProblem {
    JacobiProblem {
        n,
        m,
        alpha: 1.0,
        relax,
        tolerance,
        max_iterations: iters,
        exact: Manufactured::Polynomial,
    }
}

/// Fresh random values in [-1, 1), from a seed drawn per test run.
pub fn random_field(len: usize, rng: &mut rand::rngs::StdRng) -> Vec<f64> {
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}

pub fn rng() -> rand::rngs::StdRng {
    let seed: u64 = rand::rng().random();
    eprintln!("random seed {seed}");
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// max |a − b| / max |b|
pub fn rel_max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |s, v| s.max(v.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f64, |s, (x, y)| s.max((x - y).abs()));
    diff / scale
}

/// Print past libtest's capture, so a skip shows in the test output.
pub fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}
