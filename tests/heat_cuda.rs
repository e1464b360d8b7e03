//! The CUDA heat engine against the CPU engine on random fields: bit for bit, since
//! both evaluate the same update in the same order and kernels are compiled without
//! FMA contraction. Skips with a message where there is no CUDA device.

mod common;

use common::{gpu_or_skip, random_field, rng};
use keisan::device::Device;
use keisan::precision::Real;
use keisan::problem::{self, SolverProblem};
use keisan::run;
use keisan::solvers::heat::{self, HeatProblem};

fn problem_for(shape: &str, steps: u64) -> HeatProblem {
    let toml = format!("solver = \"heat\"\n[heat]\nshape = {shape}\ndt = 1e-9\nsteps = {steps}\n");
    match problem::parse(&toml, "test", &[]).unwrap().solver {
        SolverProblem::Heat(mut p) => {
            p.dt = 0.9 * p.largest_stable_dt();
            p
        }
        _ => unreachable!(),
    }
}

fn run_on<T: Real>(p: &HeatProblem, d: &Device, u0: &[f64]) -> Vec<T> {
    let u0: Vec<T> = u0.iter().map(|v| T::lit(*v)).collect();
    let mut e = heat::engine_from::<T>(p, d, u0).unwrap();
    run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap();
    e.snapshot().unwrap().data
}

fn cuda_equals_cpu<T: Real>(shape: &str, steps: u64) {
    let Some(gpu) = gpu_or_skip("heat cuda_equals_cpu") else {
        return;
    };
    let cpu = Device::Cpu {
        threads: rayon::current_num_threads(),
    };
    let p = problem_for(shape, steps);
    let u0 = random_field(p.cells(), &mut rng());
    let a = run_on::<T>(&p, &gpu, &u0);
    let b = run_on::<T>(&p, &cpu, &u0);
    // Widening f32 to f64 is exact, so equal f64 bits mean equal bits.
    let same = a
        .iter()
        .zip(&b)
        .all(|(x, y)| x.as_f64().to_bits() == y.as_f64().to_bits());
    assert!(same, "{shape} {}: CUDA and CPU differ", T::PRECISION);
}

#[test]
fn cuda_equals_cpu_bit_for_bit_1d_2d_3d() {
    cuda_equals_cpu::<f64>("[1001]", 37);
    cuda_equals_cpu::<f64>("[130, 257]", 21);
    cuda_equals_cpu::<f64>("[19, 23, 300]", 11);
    cuda_equals_cpu::<f32>("[1001]", 37);
    cuda_equals_cpu::<f32>("[130, 257]", 21);
    cuda_equals_cpu::<f32>("[19, 23, 300]", 11);
}

#[test]
fn cuda_nan_stops_with_the_step() {
    let Some(gpu) = gpu_or_skip("heat cuda_nan_stops_with_the_step") else {
        return;
    };
    let p = problem_for("[40, 40]", 30);
    let mut u0 = vec![0.0f64; p.cells()];
    u0[20 * 40 + 20] = f64::NAN;
    let mut e = heat::engine_from::<f64>(&p, &gpu, u0).unwrap();
    let err = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap_err();
    assert!(err.to_string().contains("at step 1;"), "{err}");
}
