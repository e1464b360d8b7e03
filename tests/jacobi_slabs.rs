//! Jacobi on CPU row slabs (src/parallel): every decomposition computes the fields of the
//! undecomposed run bit for bit, records the same residual for every sweep (row sums
//! added in row order over the slabs) and stops at the same sweep.

mod common;

use keisan::device::{Device, Placement};
use keisan::precision::Real;
use keisan::run::{Engine, Status};
use keisan::solvers::jacobi::{self, Fields, JacobiProblem, Placed};

/// The fields and residuals after at most `p.max_iterations` sweeps, in chunks that do
/// not line up with anything.
fn run<T: Real>(p: &JacobiProblem, placement: &Placement) -> (Vec<T>, Vec<f64>, u64, Status) {
    let mut e: Box<dyn Engine<Real = T>> = if placement.is_single() {
        // One sweep per pass (fields are the same bits either way; CPU slabs take one
        // sweep between exchanges, CUDA slabs two).
        jacobi::engine_with(p, placement.first(), Fields::Manufactured, 1).unwrap()
    } else {
        match jacobi::engine_placed::<T>(p, placement, None).unwrap() {
            Placed::Slabs(e) => e,
            Placed::One(_) => panic!("several subdomains give slabs"),
        }
    };
    let mut residuals = Vec::new();
    let mut done = 0;
    let mut last = None;
    for chunk in [3, 1, 7, 2].iter().cycle() {
        e.advance(*chunk).unwrap();
        done += chunk;
        let d = e.diagnostics().unwrap();
        residuals.extend(d.new_residuals);
        if d.status != Status::Running || done >= p.max_iterations {
            last = Some((d.steps, d.status));
            break;
        }
    }
    let (steps, status) = last.unwrap();
    (e.snapshot().unwrap().data, residuals, steps, status)
}

/// 37 rows: 2, 3 and 5 slabs do not divide them evenly.
fn problem(tolerance: f64, iters: u64) -> JacobiProblem {
    common::problem(29, 37, 1.3, tolerance, iters)
}

/// A tolerance the run crosses between sweeps 20 and 30, away from any residual.
fn stopping_tolerance(device: &Device) -> f64 {
    let (_, r, _, _) = run::<f64>(&problem(0.0, 30), &common::on(device, 1));
    0.5 * (r[22] + r[23])
}

#[test]
fn cpu_slabs_equal_the_whole_grid_and_stop_at_the_same_sweep() {
    let cpu = common::cpu();
    for tolerance in [0.0, stopping_tolerance(&cpu)] {
        let p = problem(tolerance, 40);
        let (u, r, steps, status) = run::<f64>(&p, &common::on(&cpu, 1));
        if tolerance > 0.0 {
            assert_eq!((steps, status), (24, Status::Converged));
        }
        for n in [2, 3, 5] {
            let (u2, r2, steps2, status2) = run::<f64>(&p, &common::on(&cpu, n));
            assert!(common::same_bits(&u, &u2), "{n} slabs: fields");
            assert!(common::same_bits(&r, &r2), "{n} slabs: residuals");
            assert_eq!((steps, status), (steps2, status2), "{n} slabs");
        }
        let (u, _, _, _) = run::<f32>(&p, &common::on(&cpu, 1));
        let (u3, _, _, _) = run::<f32>(&p, &common::on(&cpu, 3));
        assert!(common::same_bits(&u, &u3), "f32, 3 slabs");
    }
}

fn residuals_agree(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-12 * x.abs())
}

fn check_cuda_slabs<T: Real>(placements: &[(&str, Placement)], gpu: &Device) {
    // CUDA slabs take sweeps in pairs: with the chunks of `run`, sweep 23 ends a single
    // sweep and sweep 21 is the first of a pair (whose second the slabs undo).
    let (_, r, _, _) = run::<f64>(&problem(0.0, 30), &common::on(gpu, 1));
    let first_of_pair = 0.5 * (r[20] + r[21]);
    for tolerance in [0.0, stopping_tolerance(gpu), first_of_pair] {
        let p = problem(tolerance, 40);
        let (u, r, steps, status) = run::<T>(&p, &common::on(gpu, 1));
        for (what, placement) in placements {
            let (u2, r2, steps2, status2) = run::<T>(&p, placement);
            assert!(common::same_bits(&u, &u2), "{what}: fields");
            assert!(residuals_agree(&r, &r2), "{what}: residuals {r:?} {r2:?}");
            assert_eq!((steps, status), (steps2, status2), "{what}");
        }
    }
}

#[test]
fn cuda_slabs_equal_one_device() {
    let Some(gpu) = common::gpu_or_skip("cuda_slabs_equal_one_device") else {
        return;
    };
    let mut placements = vec![
        ("2 slabs on one GPU", common::on(&gpu, 2)),
        ("5 slabs on one GPU", common::on(&gpu, 5)),
    ];
    if let Some(two) = common::two_gpus_or_skip("jacobi slabs on 2 GPUs", Some(3)) {
        placements.push(("3 slabs on 2 GPUs", two));
    }
    check_cuda_slabs::<f64>(&placements, &gpu);
    check_cuda_slabs::<f32>(&placements, &gpu);
}

#[test]
fn slabs_restart_from_a_checkpoint_of_the_whole_grid() {
    let cpu = common::cpu();
    let p = problem(0.0, 30);
    let (straight, _, _, _) = run::<f64>(&p, &common::on(&cpu, 1));
    let (half, _, _, _) = run::<f64>(&problem(0.0, 13), &common::on(&cpu, 1));
    let restart = keisan::run::Restart {
        step: 13,
        status: Status::Running,
        fields: vec![keisan::run::Field {
            name: "u",
            shape: vec![p.m, p.n],
            spacing: vec![1.0, 1.0],
            origin: vec![0.0, 0.0],
            coords: None,
            data: half,
        }],
    };
    let Placed::Slabs(mut e) =
        jacobi::engine_placed::<f64>(&p, &common::on(&cpu, 4), Some(restart)).unwrap()
    else {
        panic!("slabs")
    };
    e.advance(17).unwrap();
    assert_eq!(e.diagnostics().unwrap().steps, 30);
    assert!(common::same_bits(&straight, &e.snapshot().unwrap().data));
}

/// One sweep, or a pair, of a CUDA slab over rows `rows` (grid numbering) from u = 0
/// changes exactly those rows that are interior (the regression of the unrolled row loop
/// that wrote on to the next multiple of J_RY buffer rows).
#[test]
fn a_slab_sweep_writes_exactly_its_rows() {
    use keisan::parallel::{Subdomain, windows};
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("a_slab_sweep_writes_exactly_its_rows")
    else {
        return;
    };
    let p = problem(0.0, 2);
    let w = windows(p.m, 2, 2, false, "x").unwrap();
    let own = w[1].own.clone();
    let cases = [19..19, 19..20, 19..21, 20..37, 30..31, 21..34, own.clone()];
    for (sweeps, rows) in cases.iter().flat_map(|r| [(1, r.clone()), (2, r.clone())]) {
        let mut s = jacobi::cuda_slab::CudaJacobiSlab::<f64>::on_window(
            gpu.clone(),
            &p,
            w[1].clone(),
            None,
        )
        .unwrap();
        s.compute(sweeps, rows.clone(), None).unwrap();
        s.commit(sweeps);
        let u = s.owned().unwrap();
        let changed: Vec<usize> = (own.clone())
            .filter(|&j| u[(j - own.start) * p.n..][..p.n].iter().any(|&v| v != 0.0))
            .collect();
        let expected: Vec<usize> = rows.clone().filter(|&j| j >= 1 && j < p.m - 1).collect();
        assert_eq!(changed, expected, "{sweeps} sweep(s), rows {rows:?}");
    }
}
