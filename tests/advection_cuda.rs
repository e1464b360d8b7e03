//! The CUDA advection engine (the study's branch-free form) against the CPU reference
//! (the two-branch form) on random fields. Skips with a message without a device.

mod common;

use keisan::device::Device;
use keisan::run::Engine;
use keisan::solvers::advection::AdvectionProblem;
use keisan::solvers::advection::cuda::{CudaAdvection, VelocitySource};

/// A grid that fills no block evenly (128 columns, 64 rows per block).
fn problem(boundary: &str, velocity: &str, steps: u64) -> AdvectionProblem {
    common::advection(&format!(
        "nx = 133\nny = 70\nsteps = {steps}\ncfl = 0.9\nboundary = \"{boundary}\"\n\
         velocity = {velocity}\ninitial = {{ preset = \"sine\" }}\n"
    ))
}

const ROTATION: &str = "{ kind = \"rotation\", center = [0.43, 0.61] }";

fn largest(a: &[f64]) -> f64 {
    a.iter().fold(0.0f64, |s, v| s.max(v.abs()))
}

#[test]
fn cuda_matches_cpu_on_random_fields() {
    let Some(gpu) = common::gpu_or_skip("advection cuda_matches_cpu") else {
        return;
    };
    let mut rng = common::rng();
    for boundary in ["contest", "periodic"] {
        for velocity in [ROTATION, "{ kind = \"swirl\", period = 1.0 }"] {
            let p = problem(boundary, velocity, 25);
            let f0 = common::random_field(p.cells(), &mut rng);
            let cpu = common::advection_run::<f64>(&p, &common::cpu(), &f0);
            let cuda = common::advection_run::<f64>(&p, &gpu, &f0);
            // The branch-free form with fused multiply-adds rounds differently (and sinpi
            // is not Rust's sin for the swirl): a few ulps per step.
            let d = common::rel_max_diff(&cuda, &cpu);
            eprintln!("f64 {boundary} {velocity}: {d:.2e}");
            assert!(d < 1e-12, "f64 {boundary} {velocity}: {d:e}");
            let cpu32 = common::advection_run::<f32>(&p, &common::cpu(), &f0);
            let cuda32 = common::advection_run::<f32>(&p, &gpu, &f0);
            let d32 = common::rel_max_diff(&cuda32, &cpu32);
            eprintln!("f32 {boundary} {velocity}: {d32:.2e}");
            // f32: 25 steps of a few ulps (6e-8 each) on values of order 1.
            assert!(d32 < 2e-5, "f32 {boundary} {velocity}: {d32:e}");
            assert!(largest(&cuda) < 2.0, "bounded");
        }
    }
}

#[test]
fn velocity_from_arrays_and_from_the_kernel_give_the_same_bits() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection velocity source") else {
        return;
    };
    let mut rng = common::rng();
    let p = problem("contest", ROTATION, 20);
    let f0: Vec<f32> = common::random_field(p.cells(), &mut rng)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let run = |source| {
        let mut e =
            CudaAdvection::<f32>::with_velocity(gpu.clone(), &p, f0.clone(), 0, source).unwrap();
        e.advance(p.steps).unwrap();
        e.snapshot().unwrap().data
    };
    assert!(common::same_bits(
        &run(VelocitySource::Arrays),
        &run(VelocitySource::Kernel)
    ));
}

#[test]
fn several_steps_per_pass_equal_single_steps_bit_for_bit() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection steps per pass") else {
        return;
    };
    let mut rng = common::rng();
    for boundary in ["contest", "periodic"] {
        for velocity in [ROTATION, "{ kind = \"uniform\", u = -0.7, v = 0.4 }"] {
            // 11 steps: whole passes, then single steps for the rest.
            let p = problem(boundary, velocity, 11);
            let f0 = common::random_field(p.cells(), &mut rng);
            let run = |per_pass: usize, source| -> Vec<f64> {
                let q = AdvectionProblem {
                    steps_per_pass: Some(per_pass),
                    ..p.clone()
                };
                let mut e =
                    CudaAdvection::<f64>::with_velocity(gpu.clone(), &q, f0.clone(), 0, source)
                        .unwrap();
                assert_eq!(e.steps_per_pass(), per_pass as u64);
                e.advance(q.steps).unwrap();
                e.snapshot().unwrap().data
            };
            let single = run(1, VelocitySource::Arrays);
            for per_pass in [2, 3, 4] {
                for source in [VelocitySource::Arrays, VelocitySource::Kernel] {
                    assert!(
                        common::same_bits(&single, &run(per_pass, source)),
                        "{boundary} {velocity}: {per_pass} steps per pass, {source:?}"
                    );
                }
            }
        }
    }
}
