//! The CUDA heat engine against the CPU engine on random fields: bit for bit, since
//! both evaluate the same update in the same order and kernels are compiled without
//! FMA contraction. Skips with a message where there is no CUDA device.

mod common;

use common::{cpu, gpu_or_skip, heat_problem, heat_run, random_field, rng, same_bits};
use keisan::precision::Real;
use keisan::run;
use keisan::solvers::heat::{self, HeatProblem};

fn problem_for(shape: &str, steps: u64) -> HeatProblem {
    heat_problem(shape, steps, "")
}

fn cuda_equals_cpu<T: Real>(shape: &str, steps: u64) {
    let Some(gpu) = gpu_or_skip("heat cuda_equals_cpu") else {
        return;
    };
    let cpu = cpu();
    let p = problem_for(shape, steps);
    let u0 = random_field(p.cells(), &mut rng());
    let (a, _) = heat_run::<T>(&p, &gpu, &u0);
    let (b, _) = heat_run::<T>(&p, &cpu, &u0);
    assert!(
        same_bits(&a, &b),
        "{shape} {}: CUDA and CPU differ",
        T::PRECISION
    );
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
    let mut e = heat::engine_from::<f64>(&p, &gpu, u0).unwrap().0;
    let err = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap_err();
    assert!(err.to_string().contains("at step 1;"), "{err}");
}
