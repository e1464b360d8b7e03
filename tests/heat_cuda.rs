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
    // Rows of whole 16-byte vectors take the vector kernel, the ones above the scalar one.
    cuda_equals_cpu::<f64>("[1000]", 37);
    cuda_equals_cpu::<f32>("[130, 256]", 21);
    cuda_equals_cpu::<f64>("[130, 258]", 21);
    cuda_equals_cpu::<f32>("[19, 23, 4]", 11);
    cuda_equals_cpu::<f32>("[67, 45, 520]", 9);
}

/// Temporal-blocked passes (several steps per trip through memory) against single-step
/// passes and the CPU: step counts that are not multiples of the pass, grids of several
/// tiles and march chunks with uneven remainders.
fn temporal_equals_single<T: Real>(shape: &str, steps: u64, levels: &[usize]) {
    let Some(gpu) = gpu_or_skip("heat temporal_equals_single") else {
        return;
    };
    let single = heat_problem(shape, steps, "temporal_block = 1");
    let u0 = random_field(single.cells(), &mut rng());
    let (reference, _) = heat_run::<T>(&single, &gpu, &u0);
    let (on_cpu, _) = heat_run::<T>(&single, &cpu(), &u0);
    assert!(
        same_bits(&reference, &on_cpu),
        "{shape}: single pass vs CPU"
    );
    for &n in levels {
        let p = heat_problem(shape, steps, &format!("temporal_block = {n}"));
        let (blocked, _) = heat_run::<T>(&p, &gpu, &u0);
        assert!(
            same_bits(&blocked, &reference),
            "{shape} {} temporal_block = {n}: differs from single-step passes",
            T::PRECISION
        );
    }
}

#[test]
fn temporal_blocking_equals_single_steps_bit_for_bit() {
    temporal_equals_single::<f32>("[700, 1100]", 29, &[2, 5, 12]);
    temporal_equals_single::<f64>("[700, 1100]", 29, &[3, 8]);
    temporal_equals_single::<f32>("[5, 3000]", 7, &[12]);
    temporal_equals_single::<f32>("[150, 40, 70]", 13, &[2, 3, 4]);
    temporal_equals_single::<f64>("[150, 40, 70]", 13, &[2, 4]);
    // Register tiles of each shape (4 rows × 8 warps, 2 × 16, ...) over several tiles and
    // chunks with remainders; an odd nx takes the shared-memory tile.
    temporal_equals_single::<f32>("[131, 61, 126]", 17, &[2, 3, 5, 6, 8]);
    temporal_equals_single::<f64>("[131, 61, 126]", 11, &[2, 3, 4, 6]);
    temporal_equals_single::<f32>("[40, 30, 71]", 9, &[2, 4]);
    // Grids smaller than one tile and than the pass: every plane near z's ends, rows and
    // columns outside the grid in every tile, two vectors per row.
    temporal_equals_single::<f32>("[4, 6, 8]", 9, &[2, 3, 4]);
    temporal_equals_single::<f64>("[6, 5, 4]", 7, &[2, 5]);
    temporal_equals_single::<f32>("[3, 3, 3]", 5, &[2]);
}

#[test]
fn temporal_block_too_tall_is_refused() {
    let Some(gpu) = gpu_or_skip("heat temporal_block_too_tall_is_refused") else {
        return;
    };
    let p = heat_problem("[40, 40, 40]", 4, "temporal_block = 9");
    let u0 = vec![0.0f64; p.cells()];
    let err = heat::engine_from::<f64>(&p, &gpu, u0)
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("at most 6 steps per pass"),
        "{err}"
    );
}

#[test]
fn cuda_nan_in_a_temporal_pass_stops_with_the_step() {
    let Some(gpu) = gpu_or_skip("heat cuda_nan_in_a_temporal_pass_stops_with_the_step") else {
        return;
    };
    for (shape, at) in [("[40, 40]", 20 * 40 + 20), ("[20, 20, 20]", 8000 / 2 + 210)] {
        let p = heat_problem(shape, 30, "temporal_block = 4");
        let mut u0 = vec![0.0f32; p.cells()];
        u0[at] = f32::NAN;
        let mut e = heat::engine_from::<f32>(&p, &gpu, u0).unwrap().0;
        let err = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap_err();
        assert!(err.to_string().contains("at step 1;"), "{shape}: {err}");
    }
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
