//! Advection on row slabs (src/parallel): every decomposition equals the undecomposed
//! run bit for bit — CPU slabs always, CUDA slabs on one device (several slabs share it)
//! and on two when the machine has them.

mod common;

use keisan::device::Placement;
use keisan::precision::Real;
use keisan::run::Engine;
use keisan::solvers::advection::cuda::VelocitySource;
use keisan::solvers::advection::{self, AdvectionProblem};

/// 70 rows: 3, 4 and 6 slabs do not divide them evenly.
fn problem(boundary: &str, velocity: &str, steps: u64) -> AdvectionProblem {
    problem_nx(61, boundary, velocity, steps)
}

/// Rows of 16 bytes (CUDA single steps of the general form then take adv_step_bulk).
const BULK_NX: usize = 64;

fn problem_nx(nx: usize, boundary: &str, velocity: &str, steps: u64) -> AdvectionProblem {
    common::advection(&format!(
        "nx = {nx}\nny = 70\nsteps = {steps}\ncfl = 0.9\nboundary = \"{boundary}\"\n\
         velocity = {velocity}\ninitial = {{ preset = \"sine\" }}\n"
    ))
}

const VELOCITIES: [&str; 3] = [
    "{ kind = \"rotation\", center = [0.43, 0.61] }",
    "{ kind = \"swirl\", period = 1.0 }",
    "{ kind = \"uniform\", u = -0.7, v = 0.4 }",
];

/// The preset velocities and one from .npy arrays (random, written to `dir`): a slab cuts
/// its rows, halo included, from the files.
fn velocities(dir: &std::path::Path, nx: usize) -> Vec<String> {
    let mut rng = common::rng();
    let mut file = |name: &str| {
        let path = dir.join(format!("{nx}-{name}"));
        let v = common::random_field(70 * nx, &mut rng);
        keisan::output::npy::write(&path, &[70, nx], &v).unwrap();
        path.display().to_string()
    };
    let (u, v) = (file("u.npy"), file("v.npy"));
    let mut all: Vec<String> = VELOCITIES.iter().map(|v| v.to_string()).collect();
    all.push(format!("{{ kind = \"file\", u = \"{u}\", v = \"{v}\" }}"));
    all
}

fn random<T: Real>(n: usize) -> Vec<T> {
    let mut rng = common::rng();
    common::random_field(n, &mut rng)
        .iter()
        .map(|&v| T::lit(v))
        .collect()
}

fn run<T: Real>(
    p: &AdvectionProblem,
    placement: &Placement,
    f0: &[T],
    source: VelocitySource,
) -> Vec<T> {
    let mut e: Box<dyn Engine<Real = T>> = if placement.is_single() {
        match placement.first() {
            // The engine of one device with the velocity source of the slabs (presets in
            // the kernel take the separable form, arrays the general one).
            keisan::device::Device::Cuda(gpu) => Box::new(
                advection::cuda::CudaAdvection::with_velocity(
                    gpu.clone(),
                    p,
                    f0.to_vec(),
                    0,
                    source,
                )
                .unwrap(),
            ),
            _ => advection::engine(p, placement, None, f0.to_vec()).unwrap(),
        }
    } else {
        advection::slabs(p, placement, f0, 0, source).unwrap()
    };
    // Chunks that end mid-pass: the slabs must not assume whole passes per call.
    let mut done = 0;
    for chunk in [1, 4, 2, 7].iter().cycle() {
        let k = (*chunk).min(p.steps - done);
        e.advance(k).unwrap();
        done += k;
        if done == p.steps {
            break;
        }
    }
    assert_eq!(e.diagnostics().unwrap().steps, p.steps);
    e.snapshot().unwrap().data
}

fn cpu_slabs_equal_the_whole_grid<T: Real>() {
    let dir = tempfile::tempdir().unwrap();
    for boundary in ["contest", "periodic"] {
        for velocity in velocities(dir.path(), 61) {
            let p = problem(boundary, &velocity, 9);
            let f0 = random::<T>(p.cells());
            let whole = run(
                &p,
                &common::on(&common::cpu(), 1),
                &f0,
                VelocitySource::Kernel,
            );
            for n in [2, 3, 4, 6] {
                let slabs = run(
                    &p,
                    &common::on(&common::cpu(), n),
                    &f0,
                    VelocitySource::Kernel,
                );
                assert!(
                    common::same_bits(&whole, &slabs),
                    "{boundary} {velocity}: {n} slabs"
                );
            }
        }
    }
}

#[test]
fn cpu_slabs_equal_the_whole_grid_bit_for_bit() {
    cpu_slabs_equal_the_whole_grid::<f64>();
    cpu_slabs_equal_the_whole_grid::<f32>();
}

#[test]
fn slabs_thinner_than_their_halo_are_refused_by_name() {
    let p = problem("contest", VELOCITIES[0], 1);
    let f0 = random::<f64>(p.cells());
    let e = advection::slabs(
        &p,
        &common::on(&common::cpu(), 40),
        &f0,
        0,
        VelocitySource::Kernel,
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("--subdomains"), "{e}");
    assert_eq!(e.exit_code(), 2);
}

/// CUDA slabs against the undecomposed CUDA engine, with passes of 1 to 3 steps (halos
/// of 2 to 6 rows) and velocities from arrays and from the kernel, on odd rows and on
/// rows of 16 bytes (adv_step and adv_step_bulk for single steps).
fn cuda_slabs_equal_the_whole_grid<T: Real>(placements: &[Placement], single: &Placement) {
    let dir = tempfile::tempdir().unwrap();
    let cases = [61, BULK_NX]
        .into_iter()
        .flat_map(|nx| [(nx, "contest"), (nx, "periodic")]);
    for (nx, boundary) in cases {
        for velocity in velocities(dir.path(), nx) {
            for per_pass in [1, 2, 3] {
                let p = AdvectionProblem {
                    steps_per_pass: (!velocity.contains("swirl")).then_some(per_pass),
                    ..problem_nx(nx, boundary, &velocity, 11)
                };
                let f0 = random::<T>(p.cells());
                for source in [VelocitySource::Arrays, VelocitySource::Kernel] {
                    let whole = run(&p, single, &f0, source);
                    for placement in placements {
                        let slabs = run(&p, placement, &f0, source);
                        assert!(
                            common::same_bits(&whole, &slabs),
                            "nx {nx} {boundary} {velocity} {per_pass} steps per pass {source:?}: {}",
                            placement.describe()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn cuda_slabs_on_one_device_equal_the_whole_grid_bit_for_bit() {
    let Some(gpu) = common::gpu_or_skip("advection CUDA slabs") else {
        return;
    };
    let placements = [
        common::on(&gpu, 2),
        common::on(&gpu, 3),
        common::on(&gpu, 5),
    ];
    cuda_slabs_equal_the_whole_grid::<f64>(&placements, &common::on(&gpu, 1));
    cuda_slabs_equal_the_whole_grid::<f32>(&placements, &common::on(&gpu, 1));
}

#[test]
fn cuda_slabs_on_two_devices_equal_one_device_bit_for_bit() {
    let Some(two) = common::two_gpus_or_skip("advection CUDA slabs on two devices", Some(3)) else {
        return;
    };
    let one = common::on(two.first(), 1);
    cuda_slabs_equal_the_whole_grid::<f64>(std::slice::from_ref(&two), &one);
    cuda_slabs_equal_the_whole_grid::<f32>(std::slice::from_ref(&two), &one);
}

#[test]
fn the_cli_runs_slabs_and_writes_the_same_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("p.toml"),
        "solver = \"advection\"\n[advection]\nnx = 40\nny = 31\nsteps = 6\ncfl = 0.9\n\
         velocity = { kind = \"rotation\" }\ninitial = { preset = \"zalesak\" }\n",
    )
    .unwrap();
    for (out, n) in [("one", "1"), ("three", "3")] {
        let o = common::keisan_in(
            d,
            &[
                "run",
                "p.toml",
                "-q",
                "--backend",
                "cpu",
                "--subdomains",
                n,
                "--out",
                out,
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let read = |run: &str| std::fs::read(d.join(run).join("f.npy")).unwrap();
    assert_eq!(read("one"), read("three"));
}

#[test]
fn placements_a_run_cannot_take_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("h.toml"),
        "solver = \"heat\"\n[heat]\nshape = [40]\ndt = 1e-4\nsteps = 3\n",
    )
    .unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["h.toml", "--backend", "cpu", "--subdomains", "2"],
            "a 1D heat grid runs on one device",
        ),
        (&["--backend", "cpu", "--devices", "0"], "--devices"),
        (&["--backend", "cpu", "--subdomains", "0"], "--subdomains"),
        (&["--backend", "cpu", "--devices", "0,x"], "--devices"),
    ];
    for (args, needle) in cases {
        let mut a = vec!["run", "-q", "--out", "res"];
        a.extend_from_slice(args);
        let o = common::keisan_in(d, &a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?} lacks `{needle}`: {err}");
        assert!(!d.join("res").exists());
    }
}
