//! Electrostatics on slabs of z-planes (src/parallel): on the CPU every decomposition
//! gives the potential, every iteration's residual and the stopping iteration of one
//! engine, bit for bit — dielectrics, electrodes, a fixed face, a nonuniform mesh, a
//! random charge; CUDA slabs (one GPU or two) the same potential bits and stopping
//! iteration, and residuals to 1e-12. The same of the table form (`update = "table"`),
//! against its own engines.

mod common;

use keisan::device::Placement;
use keisan::precision::Real;
use keisan::run::{Field, Restart, Status};
use keisan::solvers::electrostatics::{self, ElectrostaticsProblem, Geometry};

/// 19 planes in z: 2, 3, 4 and 6 slabs do not divide them evenly.
const DEVICE: &str = "solver = \"electrostatics\"\n[electrostatics]\n\
    x = { breakpoints = [0.0, 0.3, 1.0], divisions = [4, 9] }\n\
    y = { range = [0.0, 1.0], cells = 11 }\nz = { range = [0.0, 1.0], cells = 18 }\n\
    voltages = [1.0, -0.5]\npermittivities = [3.0, 7.5]\nmax_iterations = 60\n\
    tolerance = TOL\n[electrostatics.faces]\nz_min = 0.0\n\
    [[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.5, 0.5, 0.45]\nradius = 0.3\n\
    dielectric = 1\n\
    [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.0, 0.0, 0.7]\nmax = [1.0, 1.0, 0.8]\n\
    dielectric = 2\n\
    [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.4, 0.4, 0.4]\nmax = [0.6, 0.6, 0.55]\n\
    electrode = 1\n\
    [[electrostatics.shapes]]\nkind = \"cylinder\"\naxis = \"z\"\ncenter = [0.2, 0.8]\n\
    radius = 0.1\nrange = [0.3, 0.9]\nelectrode = 2\n";

const POISSON: &str = "solver = \"electrostatics\"\n[electrostatics]\n\
    x = { range = [0.0, 1.0], cells = 12 }\ny = { range = [0.0, 1.0], cells = 9 }\n\
    z = { range = [0.0, 1.0], cells = 22 }\ncharge_density = { random = 1e-9, seed = 7 }\n\
    max_iterations = 60\ntolerance = TOL\n[electrostatics.faces]\nx_min = 0.0\nx_max = 0.0\n\
    y_min = 0.0\ny_max = 0.0\nz_min = 0.0\nz_max = 0.0\n";

fn problem(text: &str, tolerance: f64) -> ElectrostaticsProblem {
    let toml = text.replace("TOL", &format!("{tolerance:e}"));
    keisan::problem::parse(&toml, "test", None, &Default::default())
        .unwrap()
        .spec_as::<ElectrostaticsProblem>()
        .expect("an electrostatics problem")
        .clone()
}

/// V, the residuals, the last step and status, in chunks that line up with nothing.
fn run<T: Real>(
    p: &ElectrostaticsProblem,
    placement: &Placement,
    restart: Option<Restart<T>>,
    iterations: u64,
) -> (Vec<T>, Vec<f64>, u64, Status) {
    let g = Geometry::build(p).unwrap();
    let mut e = electrostatics::engine_placed::<T>(p, &g, placement, restart).unwrap();
    let mut residuals = Vec::new();
    let mut done = 0;
    for chunk in [2, 5, 1, 3].iter().cycle() {
        let k = (*chunk).min(iterations - done);
        e.advance(k).unwrap();
        done += k;
        let d = e.diagnostics().unwrap();
        residuals.extend(d.new_residuals);
        if d.status != Status::Running || done == iterations {
            return (e.snapshot().unwrap().data, residuals, d.steps, d.status);
        }
    }
    unreachable!()
}

fn slabs_equal_one_engine<T: Real>(text: &str) {
    let cpu = common::cpu();
    let (_, r, _, _) = run::<T>(&problem(text, 0.0), &common::on(&cpu, 1), None, 40);
    // A tolerance crossed between iterations 30 and 31, away from either residual.
    let crossing = 0.5 * (r[29] + r[30]);
    for tolerance in [0.0, crossing] {
        let p = problem(text, tolerance);
        let one = run::<T>(&p, &common::on(&cpu, 1), None, 40);
        if tolerance > 0.0 {
            assert_eq!((one.2, one.3), (31, Status::Converged));
        }
        for n in [2, 3, 4, 6] {
            let (v, r, steps, status) = run::<T>(&p, &common::on(&cpu, n), None, 40);
            assert!(common::same_bits(&one.0, &v), "{n} slabs: V");
            assert!(common::same_bits(&one.1, &r), "{n} slabs: residuals");
            assert_eq!((one.2, one.3), (steps, status), "{n} slabs");
        }
    }
}

#[test]
fn cpu_slabs_equal_one_engine_with_dielectrics_and_electrodes() {
    slabs_equal_one_engine::<f64>(DEVICE);
    slabs_equal_one_engine::<f32>(DEVICE);
}

#[test]
fn cpu_slabs_equal_one_engine_with_a_random_charge() {
    slabs_equal_one_engine::<f64>(POISSON);
}

/// A checkpoint of V after `step` iterations.
fn after(p: &ElectrostaticsProblem, step: u64, data: Vec<f64>) -> Restart<f64> {
    Restart {
        step,
        status: Status::Running,
        fields: vec![Field {
            name: "V",
            shape: p.shape(),
            spacing: vec![1.0; 3],
            origin: vec![0.0; 3],
            coords: None,
            data,
        }],
    }
}

/// 30 iterations of one CPU engine against 13 of it, checkpointed, and 17 more on `slabs`.
fn restart_on(text: &str, slabs: &Placement) {
    let one = common::on(&common::cpu(), 1);
    let p = problem(text, 0.0);
    let (straight, _, _, _) = run::<f64>(&p, &one, None, 30);
    let (half, _, _, _) = run::<f64>(&p, &one, None, 13);
    let (v, _, steps, _) = run::<f64>(&p, slabs, Some(after(&p, 13, half)), 17);
    assert_eq!(steps, 30);
    assert!(common::same_bits(&straight, &v));
}

#[test]
fn slabs_restart_from_a_checkpoint_of_one_engine() {
    restart_on(DEVICE, &common::on(&common::cpu(), 4));
}

#[test]
fn too_many_slabs_are_refused_by_name() {
    let cpu = common::cpu();
    let p = problem(DEVICE, 0.0);
    let g = Geometry::build(&p).unwrap();
    // 19 planes with halos of two: at most 9 slabs.
    let Err(e) = electrostatics::engine_placed::<f64>(&p, &g, &common::on(&cpu, 10), None) else {
        panic!("10 slabs of 19 planes were accepted");
    };
    assert!(e.to_string().contains("--subdomains"), "{e}");
}

/// Residual histories of two runs, each iteration's within `tol` relative.
fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * x.abs().max(y.abs()))
}

/// CUDA slabs on `placement` against the CPU engine alone (which the one-device CUDA
/// engine equals bit for bit, tests/electrostatics_cuda.rs): the same V bits, residuals
/// to 1e-12 (each slab adds up its own sums), the same stopping iteration.
fn cuda_slabs_equal_one_engine<T: Real>(text: &str, placements: &[(String, Placement)]) {
    let cpu = common::cpu();
    let (_, r, _, _) = run::<T>(&problem(text, 0.0), &common::on(&cpu, 1), None, 40);
    let crossing = 0.5 * (r[29] + r[30]);
    for tolerance in [0.0, crossing] {
        let p = problem(text, tolerance);
        let one = run::<T>(&p, &common::on(&cpu, 1), None, 40);
        for (name, placement) in placements {
            let (v, r, steps, status) = run::<T>(&p, placement, None, 40);
            assert!(common::same_bits(&one.0, &v), "{name}: V");
            assert!(
                close(&one.1, &r, 1e-12),
                "{name}: residuals {:?} vs {r:?}",
                one.1
            );
            assert_eq!((one.2, one.3), (steps, status), "{name}");
        }
    }
}

fn slabs_on_one_gpu(test: &str) -> Option<Vec<(String, Placement)>> {
    let gpu = common::gpu_or_skip(test)?;
    Some(
        [2, 3, 4, 6]
            .map(|n| (format!("{n} CUDA slabs"), common::on(&gpu, n)))
            .to_vec(),
    )
}

#[test]
fn cuda_slabs_equal_one_engine_with_dielectrics_and_electrodes() {
    let Some(placements) = slabs_on_one_gpu("electrostatics CUDA slabs") else {
        return;
    };
    cuda_slabs_equal_one_engine::<f64>(DEVICE, &placements);
    cuda_slabs_equal_one_engine::<f32>(DEVICE, &placements);
    cuda_slabs_equal_one_engine::<f64>(POISSON, &placements);
    // 13 nodes in x: the x_max face's nodes in the last compact column (kernels.cu
    // ES_NX_ODD), copied by the sweeps' lanes as with 14.
    let odd = DEVICE.replace("divisions = [4, 9]", "divisions = [4, 8]");
    cuda_slabs_equal_one_engine::<f32>(&odd, &placements);
}

#[test]
fn cuda_slabs_on_two_gpus_equal_one_engine() {
    let Some(two) = common::two_gpus_or_skip("electrostatics on two GPUs", Some(3)) else {
        return;
    };
    cuda_slabs_equal_one_engine::<f64>(DEVICE, &[("3 slabs on GPUs 0, 1".into(), two)]);
}

#[test]
fn cuda_slabs_restart_from_a_checkpoint_of_one_engine() {
    if let Some(gpu) = common::gpu_or_skip("electrostatics CUDA slabs restart") {
        restart_on(POISSON, &common::on(&gpu, 3));
    }
}

/// `text` with the table form of the update.
fn table(text: &str) -> String {
    text.replace(
        "[electrostatics]\n",
        "[electrostatics]\nupdate = \"table\"\n",
    )
}

/// The table form on slabs: the CPU's give its one engine's V, residuals (measured at
/// the same iterations) and stopping iteration bit for bit; CUDA slabs (`gpu`) its V bits,
/// the residuals to `tol` (the blocked kernel adds its sums in another order, and in f32
/// starts them in f32) and the same stopping iteration, a multiple of the check interval
/// (16 by default; `check_every = 5` is odd and counts twice: 10).
fn table_slabs_equal_one_engine<T: Real>(
    text: &str,
    gpu: Option<&[(String, Placement)]>,
    tol: f64,
) {
    for (every, interval) in [("", 16), ("check_every = 5\n", 10)] {
        let text = table(text).replace("[electrostatics]\n", &format!("[electrostatics]\n{every}"));
        table_slabs_at_interval::<T>(&text, gpu, tol, interval);
    }
}

fn table_slabs_at_interval<T: Real>(
    text: &str,
    gpu: Option<&[(String, Placement)]>,
    tol: f64,
    interval: usize,
) {
    let cpu = common::cpu();
    let (_, r, _, _) = run::<T>(&problem(text, 0.0), &common::on(&cpu, 1), None, 40);
    for (k, x) in r.iter().enumerate() {
        assert_eq!(keisan::run::is_measured(*x), (k + 1) % interval == 0, "{k}");
    }
    // Crossed between the tests at interval and 2·interval: it stops at the latter.
    let crossing = 0.5 * (r[interval - 1] + r[2 * interval - 1]);
    for tolerance in [0.0, crossing] {
        let p = problem(text, tolerance);
        let one = run::<T>(&p, &common::on(&cpu, 1), None, 40);
        if tolerance > 0.0 {
            assert_eq!((one.2, one.3), (2 * interval as u64, Status::Converged));
        }
        // Halos of four planes: 19 planes take at most 4 slabs.
        let cpu_slabs = [2, 3, 4].map(|n| (format!("{n} CPU slabs"), common::on(&cpu, n)));
        for (name, placement) in &cpu_slabs {
            let (v, r, steps, status) = run::<T>(&p, placement, None, 40);
            assert!(common::same_bits(&one.0, &v), "{name}: V");
            assert!(common::same_bits(&one.1, &r), "{name}: residuals");
            assert_eq!((one.2, one.3), (steps, status), "{name}");
        }
        for (name, placement) in gpu.unwrap_or_default() {
            let (v, r, steps, status) = run::<T>(&p, placement, None, 40);
            assert!(common::same_bits(&one.0, &v), "{name}: V");
            assert!(
                close(&one.1, &r, tol),
                "{name}: residuals {:?} vs {r:?}",
                one.1
            );
            assert_eq!((one.2, one.3), (steps, status), "{name}");
        }
    }
}

#[test]
fn table_form_slabs_equal_its_one_engine() {
    table_slabs_equal_one_engine::<f64>(DEVICE, None, 0.0);
    table_slabs_equal_one_engine::<f32>(DEVICE, None, 0.0);
    table_slabs_equal_one_engine::<f64>(POISSON, None, 0.0);
}

#[test]
fn table_form_cuda_slabs_equal_its_one_engine() {
    let Some(mut placements) = slabs_on_one_gpu("electrostatics table-form CUDA slabs") else {
        return;
    };
    placements.retain(|(name, _)| !name.starts_with('6'));
    table_slabs_equal_one_engine::<f64>(DEVICE, Some(&placements), 1e-9);
    table_slabs_equal_one_engine::<f32>(DEVICE, Some(&placements), 1e-4);
    table_slabs_equal_one_engine::<f64>(POISSON, Some(&placements), 1e-9);
    let odd = DEVICE.replace("divisions = [4, 9]", "divisions = [4, 8]");
    table_slabs_equal_one_engine::<f32>(&odd, Some(&placements), 1e-4);
    if let Some(two) = common::two_gpus_or_skip("table-form slabs on two GPUs", Some(3)) {
        table_slabs_equal_one_engine::<f64>(
            DEVICE,
            Some(&[("3 slabs on GPUs 0, 1".into(), two)]),
            1e-9,
        );
    }
}

#[test]
fn table_form_slabs_restart_from_a_checkpoint_of_one_engine() {
    restart_on(&table(POISSON), &common::on(&common::cpu(), 4));
    if let Some(gpu) = common::gpu_or_skip("electrostatics table-form CUDA slabs restart") {
        restart_on(&table(POISSON), &common::on(&gpu, 3));
    }
}
