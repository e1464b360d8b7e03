//! The CUDA advection engine (the study's branch-free form) against the CPU reference
//! (the two-branch form) on random fields. Skips with a message without a device.

mod common;

use keisan::device::Device;
use keisan::run::Engine;
use keisan::solvers::advection::AdvectionProblem;
use keisan::solvers::advection::cuda::{CudaAdvection, VelocitySource};

/// A grid that fills no block evenly (128 columns, 64 rows per block); its odd rows keep
/// single steps on adv_step (loads through L1).
fn problem(boundary: &str, velocity: &str, steps: u64) -> AdvectionProblem {
    problem_nx(133, boundary, velocity, steps)
}

/// Rows of a multiple of 16 bytes: single steps with velocity arrays take adv_step_bulk
/// (rows copied into a ring of shared slots), still no block filled evenly.
const BULK_NX: usize = 136;

fn problem_nx(nx: usize, boundary: &str, velocity: &str, steps: u64) -> AdvectionProblem {
    problem_grid(nx, 70, boundary, velocity, steps)
}

fn problem_grid(
    nx: usize,
    ny: usize,
    boundary: &str,
    velocity: &str,
    steps: u64,
) -> AdvectionProblem {
    common::advection(&format!(
        "nx = {nx}\nny = {ny}\nsteps = {steps}\ncfl = 0.9\nboundary = \"{boundary}\"\n\
         velocity = {velocity}\ninitial = {{ preset = \"sine\" }}\n"
    ))
}

const ROTATION: &str = "{ kind = \"rotation\", center = [0.43, 0.61] }";

fn largest(a: &[f64]) -> f64 {
    a.iter().fold(0.0f64, |s, v| s.max(v.abs()))
}

/// The CUDA engine (velocity from `source`) against the CPU reference from `f0`: f64
/// within 1e-12 and f32 within 2e-5 relative. The f64 CUDA field.
fn against_cpu(
    gpu: &std::sync::Arc<keisan::device::cuda::Gpu>,
    p: &AdvectionProblem,
    f0: &[f64],
    source: VelocitySource,
    what: &str,
) -> Vec<f64> {
    let cpu = common::advection_run::<f64>(p, &common::cpu(), f0);
    let cuda = common::advection_cuda_run::<f64>(gpu, p, f0, source);
    // The branch-free form with fused multiply-adds rounds differently (and sinpi is not
    // Rust's sin for the swirl): a few ulps per step.
    let d = common::rel_max_diff(&cuda, &cpu);
    eprintln!("f64 {what}: {d:.2e}");
    assert!(d < 1e-12, "f64 {what}: {d:e}");
    let cpu32 = common::advection_run::<f32>(p, &common::cpu(), f0);
    let cuda32 = common::advection_cuda_run::<f32>(gpu, p, f0, source);
    let d32 = common::rel_max_diff(&cuda32, &cpu32);
    eprintln!("f32 {what}: {d32:.2e}");
    // f32: 25 steps of a few ulps (6e-8 each) on values of order 1.
    assert!(d32 < 2e-5, "f32 {what}: {d32:e}");
    cuda
}

#[test]
fn cuda_matches_cpu_on_random_fields() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection cuda_matches_cpu") else {
        return;
    };
    let mut rng = common::rng();
    for boundary in ["contest", "periodic"] {
        for velocity in [ROTATION, "{ kind = \"swirl\", period = 1.0 }"] {
            let p = problem(boundary, velocity, 25);
            let f0 = common::random_field(p.cells(), &mut rng);
            let what = format!("{boundary} {velocity}");
            let cuda = against_cpu(&gpu, &p, &f0, VelocitySource::Kernel, &what);
            assert!(largest(&cuda) < 2.0, "bounded");
        }
    }
}

/// The rotation preset computed in the kernel takes the separable form (Lagrange weights
/// per row and column); from arrays it takes the study's general form. Both against the
/// CPU reference, and against each other.
#[test]
fn the_separable_and_the_general_form_agree() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection separable form") else {
        return;
    };
    let mut rng = common::rng();
    for boundary in ["contest", "periodic"] {
        for velocity in [ROTATION, "{ kind = \"uniform\", u = -0.7, v = 0.4 }"] {
            let p = problem(boundary, velocity, 25);
            let f0 = common::random_field(p.cells(), &mut rng);
            let cpu = common::advection_run::<f64>(&p, &common::cpu(), &f0);
            let general = common::advection_cuda_run::<f64>(&gpu, &p, &f0, VelocitySource::Arrays);
            let separable =
                common::advection_cuda_run::<f64>(&gpu, &p, &f0, VelocitySource::Kernel);
            for (name, d) in [
                ("general - cpu", common::rel_max_diff(&general, &cpu)),
                ("separable - cpu", common::rel_max_diff(&separable, &cpu)),
                (
                    "separable - general",
                    common::rel_max_diff(&separable, &general),
                ),
            ] {
                eprintln!("f64 {boundary} {velocity} {name}: {d:.2e}");
                assert!(d < 1e-12, "f64 {boundary} {velocity} {name}: {d:e}");
            }
            let general = common::advection_cuda_run::<f32>(&gpu, &p, &f0, VelocitySource::Arrays);
            let separable =
                common::advection_cuda_run::<f32>(&gpu, &p, &f0, VelocitySource::Kernel);
            let d = common::rel_max_diff(&separable, &general);
            eprintln!("f32 {boundary} {velocity} separable - general: {d:.2e}");
            // 25 steps of a few ulps each in either form.
            assert!(d < 2e-5, "f32 {boundary} {velocity}: {d:e}");
        }
    }
}

/// |du| = |dv| = 1: one whole cell per step, in both forms.
#[test]
fn unit_courant_numbers_shift_the_field_exactly() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection exact shift") else {
        return;
    };
    for (case, p, f0, want) in common::unit_shifts() {
        for source in [VelocitySource::Arrays, VelocitySource::Kernel] {
            let f = common::advection_cuda_run::<f64>(&gpu, &p, &f0, source);
            // dv is 1 to within an ulp of Δt/Δy; each step rounds (the general form its
            // coefficients, the separable one its weights) on values of order 1.
            let d = common::max_abs_diff(&f, &want);
            assert!(
                d <= 1e-14 * p.steps as f64,
                "{case}, {source:?}: max error {d:e}"
            );
        }
    }
}

#[test]
fn several_steps_per_pass_equal_single_steps_bit_for_bit() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection steps per pass") else {
        return;
    };
    let mut rng = common::rng();
    for (nx, boundary) in [133, BULK_NX]
        .into_iter()
        .flat_map(|n| [(n, "contest"), (n, "periodic")])
    {
        for velocity in [ROTATION, "{ kind = \"uniform\", u = -0.7, v = 0.4 }"] {
            // 11 steps: whole passes, then single steps for the rest.
            let p = problem_nx(nx, boundary, velocity, 11);
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
            for source in [VelocitySource::Arrays, VelocitySource::Kernel] {
                // Arrays on rows of 16 bytes: passes take adv_pass_w, single steps the
                // general form (weighted_passes_... below).
                if source == VelocitySource::Arrays && nx == BULK_NX {
                    continue;
                }
                let single = run(1, source);
                for per_pass in [2, 3, 4] {
                    assert!(
                        common::same_bits(&single, &run(per_pass, source)),
                        "nx {nx} {boundary} {velocity}: {per_pass} steps per pass, {source:?}"
                    );
                }
            }
        }
    }
}

/// The separable pass's fast tiles: on a grid wide and tall enough for tiles that lie
/// inside it (neither clamped nor wrapped) and away from the rotation's centre row and
/// column, a tile whose rows start their x stencils alike and whose columns start their y
/// stencils alike walks a four-row window, offset by the y start at run time; the others
/// walk five rows. With the centre column at 0.43 of 2048 columns, such tiles lie on both
/// sides of it (both y starts), and above and below the centre row (both x starts); the
/// uniform velocities take every sign pair. Passes of 2 and 3 steps against single steps
/// (which always walk five rows) bit for bit, in both precisions and on both boundaries,
/// and the default pass against the CPU.
#[test]
fn separable_passes_over_inner_tiles_equal_single_steps_bit_for_bit() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection separable inner tiles") else {
        return;
    };
    let mut rng = common::rng();
    for boundary in ["contest", "periodic"] {
        for velocity in [
            ROTATION,
            "{ kind = \"uniform\", u = -0.7, v = 0.4 }",
            "{ kind = \"uniform\", u = 0.5, v = -0.6 }",
        ] {
            let p = problem_grid(2048, 400, boundary, velocity, 11);
            let f0 = common::random_field(p.cells(), &mut rng);
            let what = format!("{boundary} {velocity}");
            let with = |per_pass: usize| AdvectionProblem {
                steps_per_pass: Some(per_pass),
                ..p.clone()
            };
            let kernel = VelocitySource::Kernel;
            let single = common::advection_cuda_run::<f64>(&gpu, &with(1), &f0, kernel);
            let single32 = common::advection_cuda_run::<f32>(&gpu, &with(1), &f0, kernel);
            for per_pass in [2, 3] {
                let pass = common::advection_cuda_run::<f64>(&gpu, &with(per_pass), &f0, kernel);
                assert!(
                    common::same_bits(&single, &pass),
                    "f64 {what}: {per_pass} a pass"
                );
                let pass = common::advection_cuda_run::<f32>(&gpu, &with(per_pass), &f0, kernel);
                assert!(
                    common::same_bits(&single32, &pass),
                    "f32 {what}: {per_pass} a pass"
                );
            }
            against_cpu(&gpu, &p, &f0, kernel, &format!("inner tiles {what}"));
        }
    }
}

/// Single steps of the general form on rows of 16 bytes come from adv_step_bulk (velocity
/// arrays, and the swirl computed in the kernel): against the CPU in both precisions and
/// both boundaries. (Against adv_step bit for bit: through the passes, above.)
#[test]
fn single_steps_from_bulk_copies_match_the_cpu() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection bulk-copy single steps") else {
        return;
    };
    let mut rng = common::rng();
    for boundary in ["contest", "periodic"] {
        for (velocity, source) in [
            (ROTATION, VelocitySource::Arrays),
            ("{ kind = \"swirl\", period = 1.0 }", VelocitySource::Kernel),
        ] {
            let p = AdvectionProblem {
                steps_per_pass: Some(1),
                ..problem_nx(BULK_NX, boundary, velocity, 25)
            };
            let f0 = common::random_field(p.cells(), &mut rng);
            against_cpu(
                &gpu,
                &p,
                &f0,
                source,
                &format!("bulk {boundary} {velocity}"),
            );
        }
    }
}

/// Passes of velocity arrays on rows of 16 bytes take adv_pass_w (each cell's Lagrange
/// weights in registers, 3 steps a pass by default, the next tile's rows copied in while
/// a block computes one). Against the CPU in both precisions, and across steps per pass
/// bit for bit (steps left over take its one-step form): on the small grid each block
/// takes one tile, on the wide ones some take two or more; on the wide periodic one a
/// block's tiles mix copied ones and ones at the grid's sides loaded value by value, so
/// its waits on the two velocity sets' mbarriers do not strictly alternate.
#[test]
fn weighted_passes_match_the_cpu_and_each_other_bit_for_bit() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("advection weighted passes") else {
        return;
    };
    let mut rng = common::rng();
    let grids = [
        (BULK_NX, 70, "contest"),
        (BULK_NX, 70, "periodic"),
        (1024, 400, "contest"),
        (1024, 400, "periodic"),
    ];
    for (nx, ny, boundary) in grids {
        for velocity in [
            ROTATION,
            "{ kind = \"uniform\", u = -0.7, v = 0.4 }",
            "{ kind = \"uniform\", u = 0.7, v = -0.4 }",
        ] {
            let p = problem_grid(nx, ny, boundary, velocity, 13);
            let f0 = common::random_field(p.cells(), &mut rng);
            let what = format!("weighted {nx} x {ny} {boundary} {velocity}");
            against_cpu(&gpu, &p, &f0, VelocitySource::Arrays, &what);
            let run = |per_pass: usize| -> Vec<f64> {
                let q = AdvectionProblem {
                    steps_per_pass: Some(per_pass),
                    ..p.clone()
                };
                let mut e = CudaAdvection::<f64>::with_velocity(
                    gpu.clone(),
                    &q,
                    f0.clone(),
                    0,
                    VelocitySource::Arrays,
                )
                .unwrap();
                assert_eq!(e.steps_per_pass(), per_pass as u64);
                e.advance(q.steps).unwrap();
                e.snapshot().unwrap().data
            };
            let two = run(2);
            for per_pass in [3, 4, 5] {
                assert!(
                    common::same_bits(&two, &run(per_pass)),
                    "{what}: {per_pass} steps per pass against 2"
                );
            }
        }
    }
}
