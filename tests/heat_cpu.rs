//! The CPU heat engine against the analytic decay of a sine mode, in 1D, 2D and 3D.

mod common;

use keisan::device::Device;
use keisan::run;
use keisan::solvers::heat::{self, HeatProblem};

fn cpu() -> Device {
    Device::Cpu {
        threads: rayon::current_num_threads(),
    }
}

/// A sine-mode problem with n points per axis, run to time `t_end` in `steps` steps.
fn sine_problem(dims: usize, n: usize, steps: u64, t_end: f64) -> HeatProblem {
    let shape = vec![n.to_string(); dims].join(", ");
    let modes = vec!["1"; dims].join(", ");
    let toml = format!(
        "solver = \"heat\"\n[heat]\nshape = [{shape}]\ndt = {}\nsteps = {steps}\n\
         [heat.initial]\npreset = \"sine\"\nmodes = [{modes}]\n",
        t_end / steps as f64
    );
    common::heat_from(&toml)
}

fn max_error(p: &HeatProblem) -> f64 {
    let mut e = heat::engine::<f64>(p, &cpu()).unwrap().0;
    let out = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap();
    assert_eq!(out.steps, p.steps);
    let u = e.snapshot().unwrap();
    let t = p.steps as f64 * p.dt;
    u.data.iter().enumerate().fold(0.0f64, |m, (i, v)| {
        m.max((v - p.exact(i, t).unwrap()).abs())
    })
}

/// Three refinements from `n0` points and `s0` steps: h halves and Δt quarters, so
/// r = α²Δt/h² is the same on every grid and the O(h²) + O(Δt) error falls as h².
fn observed_orders(dims: usize, n0: usize, s0: u64, t_end: f64) -> Vec<f64> {
    let errs: Vec<f64> = (0..3u32)
        .map(|l| {
            let n = (n0 - 1) * (1 << l) + 1;
            max_error(&sine_problem(dims, n, s0 * 4u64.pow(l), t_end))
        })
        .collect();
    errs.windows(2).map(|w| (w[0] / w[1]).log2()).collect()
}

#[test]
fn sine_decay_converges_at_second_order_in_1d() {
    for o in observed_orders(1, 17, 64, 0.05) {
        assert!((1.95..2.05).contains(&o), "1D order {o:.3}");
    }
}

#[test]
fn sine_decay_converges_at_second_order_in_2d() {
    for o in observed_orders(2, 17, 52, 0.02) {
        assert!((1.95..2.05).contains(&o), "2D order {o:.3}");
    }
}

#[test]
fn sine_decay_converges_at_second_order_in_3d() {
    for o in observed_orders(3, 9, 10, 0.01) {
        assert!((1.95..2.05).contains(&o), "3D order {o:.3}");
    }
}

#[test]
fn boundary_values_stay_fixed() {
    let toml = "solver = \"heat\"\n[heat]\nshape = [20, 30]\ndt = 1e-5\nsteps = 50\n\
                [heat.initial]\npreset = \"hot_box\"\nfraction = 1.0\nvalue = 3.0\n";
    let p = common::heat_from(toml);
    let mut e = heat::engine::<f64>(&p, &cpu()).unwrap().0;
    run::drive(e.as_mut(), 50, &run::progress_bar(0, true)).unwrap();
    let u = e.snapshot().unwrap().data;
    for j in 0..20 {
        for i in 0..30 {
            let v = u[j * 30 + i];
            if j == 0 || j == 19 || i == 0 || i == 29 {
                assert_eq!(v, 0.0);
            } else {
                assert!(v > 0.0 && v <= 3.0);
            }
        }
    }
}

#[test]
fn nan_in_the_initial_field_stops_at_step_1() {
    let p = sine_problem(2, 9, 10, 0.001);
    let mut u0 = vec![0.0; 81];
    u0[40] = f64::NAN;
    let mut e = heat::engine_from::<f64>(&p, &cpu(), u0).unwrap().0;
    let err = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap_err();
    assert!(err.to_string().contains("at step 1;"), "{err}");
}
