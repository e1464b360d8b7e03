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

/// Run the keisan binary in `dir`; a panic in its stderr fails the test.
pub fn keisan_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let o = std::process::Command::new(keisan_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "panic: {err}");
    o
}

/// The text after `label` on its line of a run's human summary (`  label         text`).
pub fn summary_line(summary: &str, label: &str) -> String {
    let at = summary
        .find(&format!("\n  {label:<14}"))
        .unwrap_or_else(|| panic!("no {label} line: {summary}"));
    let text = &summary[at + 3..];
    text[label.len().max(14)..]
        .lines()
        .next()
        .unwrap()
        .to_string()
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

/// A heat problem from a `[heat]` table body (shape, steps and any extra keys), with dt
/// set to 0.9 of the stability limit.
pub fn heat_problem(shape: &str, steps: u64, extra: &str) -> keisan::solvers::heat::HeatProblem {
    let toml = format!(
        "solver = \"heat\"\n[heat]\nshape = {shape}\ndt = 1e-12\nsteps = {steps}\n{extra}\n"
    );
    let mut p = heat_from(&toml);
    p.dt = 0.9 * p.largest_stable_dt();
    p
}

/// The heat problem of a problem file's text.
pub fn heat_from(toml: &str) -> keisan::solvers::heat::HeatProblem {
    let problem = keisan::problem::parse(toml, "test", None, &Default::default()).unwrap();
    problem
        .spec_as::<keisan::solvers::heat::HeatProblem>()
        .expect("a heat problem")
        .clone()
}

/// Run a heat problem from `u0` on `device`; the final field and how it was laid out.
pub fn heat_run<T: keisan::precision::Real>(
    p: &keisan::solvers::heat::HeatProblem,
    device: &Device,
    u0: &[f64],
) -> (Vec<T>, keisan::solvers::heat::Layout) {
    let u0: Vec<T> = u0.iter().map(|v| T::lit(*v)).collect();
    let (mut e, layout) = keisan::solvers::heat::engine_from::<T>(p, device, u0).unwrap();
    keisan::run::drive(e.as_mut(), p.steps, &keisan::run::progress_bar(0, true)).unwrap();
    (e.snapshot().unwrap().data, layout)
}

/// Equal bits (widening f32 to f64 is exact).
pub fn same_bits<T: keisan::precision::Real>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.as_f64().to_bits() == y.as_f64().to_bits())
}

pub fn cpu() -> Device {
    Device::Cpu {
        threads: rayon::current_num_threads(),
    }
}

/// Run the problem file `toml` in `dir` on the CPU with an output folder and check it is
/// refused as a bad request (exit 2) with a message holding every needle, no panic, and
/// no output folder created.
pub fn refuses(dir: &std::path::Path, toml: &str, needles: &[&str]) {
    refuses_with(dir, toml, &[], needles)
}

/// [`refuses`] with more arguments to `keisan run`.
pub fn refuses_with(dir: &std::path::Path, toml: &str, args: &[&str], needles: &[&str]) {
    std::fs::write(dir.join("p.toml"), toml).unwrap();
    let o = std::process::Command::new(keisan_bin())
        .current_dir(dir)
        .args(["run", "p.toml", "--backend", "cpu", "-q", "--out", "res"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{toml}: {err}");
    assert!(!err.contains("panicked"));
    for n in needles {
        assert!(err.contains(n), "lacks `{n}`: {err}");
    }
    assert!(!dir.join("res").exists(), "outputs were created");
}

/// The advection problem of a problem file's `[advection]` body.
pub fn advection(body: &str) -> keisan::solvers::advection::AdvectionProblem {
    let toml = format!("solver = \"advection\"\n[advection]\n{body}");
    keisan::problem::parse(&toml, "test", None, &Default::default())
        .unwrap()
        .spec_as::<keisan::solvers::advection::AdvectionProblem>()
        .expect("an advection problem")
        .clone()
}

/// Run an advection problem from `f0` on `device` for its steps; the final field.
pub fn advection_run<T: keisan::precision::Real>(
    p: &keisan::solvers::advection::AdvectionProblem,
    device: &Device,
    f0: &[f64],
) -> Vec<f64> {
    use keisan::solvers::advection::cuda::VelocitySource;
    match device {
        Device::Cpu { .. } => {
            let f0: Vec<T> = f0.iter().map(|v| T::lit(*v)).collect();
            advection_finish(
                Box::new(keisan::solvers::advection::cpu::CpuAdvection::new(p, f0, 0).unwrap()),
                p.steps,
            )
        }
        Device::Cuda(gpu) => advection_cuda_run::<T>(gpu, p, f0, VelocitySource::Kernel),
    }
}

/// The CUDA engine with the velocity from `source`, run from `f0` for the problem's steps.
pub fn advection_cuda_run<T: keisan::precision::Real>(
    gpu: &std::sync::Arc<Gpu>,
    p: &keisan::solvers::advection::AdvectionProblem,
    f0: &[f64],
    source: keisan::solvers::advection::cuda::VelocitySource,
) -> Vec<f64> {
    let f0: Vec<T> = f0.iter().map(|v| T::lit(*v)).collect();
    let e = keisan::solvers::advection::cuda::CudaAdvection::with_velocity(
        gpu.clone(),
        p,
        f0,
        0,
        source,
    )
    .unwrap();
    advection_finish(Box::new(e), p.steps)
}

fn advection_finish<T: keisan::precision::Real>(
    mut e: Box<dyn keisan::run::Engine<Real = T>>,
    steps: u64,
) -> Vec<f64> {
    keisan::run::drive(e.as_mut(), steps, &keisan::run::progress_bar(0, true)).unwrap();
    e.snapshot()
        .unwrap()
        .data
        .iter()
        .map(|v| v.as_f64())
        .collect()
}

/// f shifted by (sx, sy) cells with wrap-around: g[j][i] = f[j − sy][i − sx].
pub fn rolled(f: &[f64], nx: usize, ny: usize, sx: isize, sy: isize) -> Vec<f64> {
    let w = |a: isize, n: usize| a.rem_euclid(n as isize) as usize;
    (0..nx * ny)
        .map(|n| {
            let (i, j) = ((n % nx) as isize, (n / nx) as isize);
            f[w(j - sy, ny) * nx + w(i - sx, nx)]
        })
        .collect()
}

/// `n` subdomains of one run, all on `device`.
pub fn on(device: &Device, n: usize) -> keisan::device::Placement {
    keisan::device::Placement::local(vec![device.clone(); n])
}

/// `subdomains` slabs over CUDA devices 0 and 1, or None (with a message saying why)
/// where the machine has no second device.
pub fn two_gpus_or_skip(
    test: &str,
    subdomains: Option<usize>,
) -> Option<keisan::device::Placement> {
    gpu_or_skip(test)?;
    match keisan::device::place(
        keisan::device::Backend::Cuda,
        0,
        Some("0,1"),
        subdomains,
        &mut |_| {},
    ) {
        Ok(p) => Some(p),
        Err(e) => {
            skip(&format!("{test}: {e}"));
            None
        }
    }
}

/// Wait until `path` exists, at most `secs` seconds.
pub fn wait_for(path: &std::path::Path, secs: u64) {
    let t = std::time::Instant::now();
    while !path.exists() && t.elapsed().as_secs() < secs {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The whole-cell shifts of the advection tests: a periodic 37 × 23 grid, 9 steps of
/// Δt = Δx under a uniform velocity of (u, v) cells per step, each case with a random
/// field and its exact answer: (label, problem, f0, the field shifted).
pub fn unit_shifts() -> Vec<(
    String,
    keisan::solvers::advection::AdvectionProblem,
    Vec<f64>,
    Vec<f64>,
)> {
    let mut rng = rng();
    let (nx, ny, steps) = (37usize, 23usize, 9isize);
    [(1, 1), (-1, 1), (1, -1), (-1, -1), (1, 0), (0, 1)]
        .into_iter()
        .map(|(u, v)| {
            // Δx = 1/nx, Δt = Δx: du = −u; dv = −vy·Δt/Δy = −vy·ny/nx.
            let vy = v as f64 * nx as f64 / ny as f64;
            let p = advection(&format!(
                "nx = {nx}\nny = {ny}\nsteps = {steps}\ndt = {}\nboundary = \"periodic\"\n\
                 velocity = {{ kind = \"uniform\", u = {u}, v = {vy} }}\n\
                 initial = {{ preset = \"sine\" }}\n",
                1.0 / nx as f64
            ));
            let f0 = random_field(nx * ny, &mut rng);
            let want = rolled(&f0, nx, ny, u * steps, v * steps);
            (format!("u = {u}, v = {v}"), p, f0, want)
        })
        .collect()
}

/// The largest |a − b| over two fields.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Write `data` as an .npy of `shape` (the dtype of `T`).
pub fn write_npy<T: npyz::AutoSerialize + Copy>(path: &std::path::Path, shape: &[u64], data: &[T]) {
    use npyz::WriterBuilder;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::fs::File::create(path).unwrap())
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

/// Every entry of folder `d` (recursively), with its bytes (None for a folder).
pub fn snapshot(d: &std::path::Path) -> std::collections::BTreeMap<String, Option<Vec<u8>>> {
    let mut all = std::collections::BTreeMap::new();
    let mut todo = vec![d.to_path_buf()];
    while let Some(at) = todo.pop() {
        for e in std::fs::read_dir(&at).unwrap() {
            let p = e.unwrap().path();
            let name = p.strip_prefix(d).unwrap().display().to_string();
            if p.is_dir() {
                all.insert(name, None);
                todo.push(p);
            } else {
                all.insert(name, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    all
}

/// The names in folder `d`.
pub fn names(d: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// The folder holds exactly one run's set: the files its summary.json lists (besides
/// checkpoints and `others`), every file its .pvd files name, no stage left behind.
pub fn consistent(d: &std::path::Path, others: &[&str]) {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap()).unwrap();
    let mut listed: Vec<String> = summary["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            std::path::Path::new(p.as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    listed.sort();
    let stage = stage_named(d);
    let present: Vec<String> = names(d)
        .into_iter()
        .filter(|n| !n.starts_with("checkpoint") && !others.contains(&n.as_str()))
        .filter(|n| Some(n) != stage.as_ref())
        .collect();
    assert_eq!(present, listed, "the folder holds what its summary lists");
    for n in &present {
        if n.ends_with(".pvd") {
            let text = std::fs::read_to_string(d.join(n)).unwrap();
            for part in text.split("file=\"").skip(1) {
                let file = part.split('"').next().unwrap();
                assert!(
                    d.join(file).exists(),
                    "{n} names {file}, which is not there"
                );
            }
        }
    }
}

/// The stage the folder's checkpoint names (kept for a restart from it), if any.
pub fn stage_named(d: &std::path::Path) -> Option<String> {
    let c = keisan::checkpoint::Checkpoint::open(&d.join("checkpoint.keisan")).ok()?;
    c.header.history.stage
}
