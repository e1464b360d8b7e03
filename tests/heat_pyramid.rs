//! The out-of-core pyramid method against the in-core engine: bit for bit (the same
//! update in the same order), for 1D/2D/3D grids, both decompositions, several pyramid
//! heights, sizes that do not divide evenly, budgets that force many tasks, and both ways of
//! moving boxes (direct to and from a pinned grid, and staged through the host). The CPU
//! executor runs here and in CI; the CUDA executor where a GPU is present.

mod common;

use common::{cpu, gpu_or_skip, heat_problem, heat_run, random_field, rng, same_bits};
use keisan::device::Device;
use keisan::precision::Real;
use keisan::run;
use keisan::solvers::heat;

/// (shape, steps): odd extents, step counts that are not multiples of the heights.
const GRIDS: [(&str, u64); 3] = [("[1001]", 23), ("[130, 97]", 17), ("[40, 19, 33]", 10)];

/// Device bytes for boxes of about 1/6 of the grid, or of the least a task of height n
/// with a result as wide as its halo needs.
fn budget_for(p: &heat::HeatProblem, d: &str, n: usize, bytes: usize, boxes: usize) -> usize {
    let [nz, ny, nx] = p.shape;
    let least = match (d, p.dims) {
        ("1d", 1) => 3 * n,
        ("1d", 2) => 3 * n * nx,
        ("1d", _) => 3 * n * ny * nx,
        (_, 2) => 9 * n * n,
        _ => 9 * n * n * nx,
    };
    let _ = nz;
    boxes * bytes * least.max(p.cells() / 6)
}

/// Every decomposition that fits, heights 1, 2, 3 and 7, a budget of ~1/6 of the grid
/// per box: the pyramid result equals the in-core result.
fn pyramid_equals_in_core<T: Real>(device: &Device, boxes: usize, trivial: bool) {
    let mut rng = rng();
    for (shape, steps) in GRIDS {
        let base = heat_problem(shape, steps, "");
        let u0 = random_field(base.cells(), &mut rng);
        let (reference, _) = heat_run::<T>(&base, &cpu(), &u0);
        let decompositions: &[&str] = if base.dims == 1 {
            &["1d"]
        } else {
            &["1d", "2d"]
        };
        let heights: &[usize] = if trivial { &[1] } else { &[1, 2, 3, 7] };
        for (d, pin) in decompositions.iter().flat_map(|d| [(d, true), (d, false)]) {
            for &n in heights {
                let budget = budget_for(&base, d, n, T::PRECISION.bytes(), boxes);
                let strategy = if trivial { "trivial" } else { "pyramid" };
                let height = if trivial {
                    String::new()
                } else {
                    format!("pyramid_height = {n}\n")
                };
                let extra = format!(
                    "strategy = \"{strategy}\"\ndecomposition = \"{d}\"\n{height}\
                     device_memory = {budget}\npin_host_grid = {pin}"
                );
                let p = heat_problem(shape, steps, &extra);
                let (u, layout) = heat_run::<T>(&p, device, &u0);
                let tasks = layout.tasks.unwrap();
                assert!(tasks >= 4, "{shape} {d} n={n}: only {tasks} tasks");
                assert_eq!(layout.direct, Some(pin), "{shape} {d} n={n}: pinning");
                assert!(
                    same_bits(&u, &reference),
                    "{shape} {d} n={n} pin={pin} {}: pyramid differs from in-core",
                    T::PRECISION
                );
            }
        }
    }
}

/// 3D boxes with rows of whole vectors go several steps per pass on the GPU (the register
/// tile): heights below, at and above the pass (so tasks mix passes and single steps),
/// passes of 2 to 6 steps, both decompositions, direct and staged; against the CPU.
fn box_passes_equal_in_core<T: Real>(device: &Device, boxes: usize) {
    let mut rng = rng();
    let (shape, steps) = ("[60, 26, 44]", 19);
    let base = heat_problem(shape, steps, "");
    let u0 = random_field(base.cells(), &mut rng);
    let (reference, _) = heat_run::<T>(&base, &cpu(), &u0);
    for (d, pin) in [("1d", true), ("2d", true), ("2d", false)] {
        for (n, levels) in [(4, 4), (9, 4), (6, 3), (7, 2), (13, 6)] {
            let budget = budget_for(&base, d, n, T::PRECISION.bytes(), boxes);
            let extra = format!(
                "strategy = \"pyramid\"\ndecomposition = \"{d}\"\npyramid_height = {n}\n\
                 device_memory = {budget}\npin_host_grid = {pin}\ntemporal_block = {levels}"
            );
            let p = heat_problem(shape, steps, &extra);
            let (u, layout) = heat_run::<T>(&p, device, &u0);
            let tasks = layout.tasks.unwrap();
            assert!(tasks >= 2, "{d} n={n}: only {tasks} task");
            assert!(
                same_bits(&u, &reference),
                "{d} n={n} {levels} steps/pass pin={pin} {}: pyramid differs from in-core",
                T::PRECISION
            );
        }
    }
}

#[test]
fn cuda_box_passes_equal_in_core_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("cuda_box_passes_equal_in_core_bit_for_bit") else {
        return;
    };
    box_passes_equal_in_core::<f32>(&gpu, 4);
    box_passes_equal_in_core::<f64>(&gpu, 4);
}

#[test]
fn cpu_box_passes_equal_in_core_bit_for_bit() {
    box_passes_equal_in_core::<f64>(&cpu(), 2);
}

#[test]
fn cpu_pyramid_equals_in_core_bit_for_bit_f64() {
    pyramid_equals_in_core::<f64>(&cpu(), 2, false);
}

#[test]
fn cpu_pyramid_equals_in_core_bit_for_bit_f32() {
    pyramid_equals_in_core::<f32>(&cpu(), 2, false);
}

#[test]
fn cpu_trivial_equals_in_core_bit_for_bit() {
    pyramid_equals_in_core::<f64>(&cpu(), 2, true);
}

#[test]
fn cuda_pyramid_equals_in_core_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("cuda_pyramid_equals_in_core_bit_for_bit") else {
        return;
    };
    pyramid_equals_in_core::<f64>(&gpu, 4, false);
    pyramid_equals_in_core::<f32>(&gpu, 4, false);
    pyramid_equals_in_core::<f64>(&gpu, 2, true);
}

#[test]
fn model_choice_equals_in_core_bit_for_bit() {
    let p0 = heat_problem("[64, 50]", 40, "");
    let u0 = random_field(p0.cells(), &mut rng());
    let (reference, _) = heat_run::<f64>(&p0, &cpu(), &u0);
    let p = heat_problem(
        "[64, 50]",
        40,
        "strategy = \"pyramid\"\ndevice_memory = \"16KiB\"",
    );
    let (u, layout) = heat_run::<f64>(&p, &cpu(), &u0);
    assert!(layout.tasks.unwrap() > 1);
    assert!(layout.predicted_s.unwrap() > 0.0);
    assert!(same_bits(&u, &reference));
}

fn nan_stops_with_the_step(device: &Device) {
    // 2D boxes go one step per launch, 3D boxes of even width several.
    let cases = [
        ("[40, 40]", "2d", 4, "8KiB", 20 * 40 + 20),
        ("[40, 24, 24]", "1d", 8, "1MiB", 20 * 576 + 12 * 24 + 12),
    ];
    for (shape, d, n, memory, at) in cases {
        let p = heat_problem(
            shape,
            30,
            &format!(
                "strategy = \"pyramid\"\ndecomposition = \"{d}\"\npyramid_height = {n}\n\
                 device_memory = \"{memory}\"\ntemporal_block = 4"
            ),
        );
        let mut u0 = vec![0.0f64; p.cells()];
        u0[at] = f64::NAN;
        let (mut e, _) = heat::engine_from::<f64>(&p, device, u0).unwrap();
        let err = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap_err();
        assert!(err.to_string().contains("at step 1;"), "{shape}: {err}");
    }
}

/// A run made unstable on purpose (dt past the limit, set after validation) overflows in
/// the middle of a several-step box pass: the pyramid names the in-core CPU engine's step.
fn unstable_stops_at_the_cpu_step(device: &Device) {
    let case = "strategy = \"pyramid\"\ndecomposition = \"1d\"\npyramid_height = 8\n\
                device_memory = \"1MiB\"\ntemporal_block = 4";
    let mut p = heat_problem("[40, 24, 24]", 16, case);
    p.dt *= 30.0;
    let mut u0 = vec![0.0f64; p.cells()];
    u0[20 * 576 + 12 * 24 + 12] = 1e300;
    let stop = |p: &heat::HeatProblem, device: &Device| {
        let (mut e, _) = heat::engine_from::<f64>(p, device, u0.clone()).unwrap();
        let err = run::drive(e.as_mut(), p.steps, &run::progress_bar(0, true)).unwrap_err();
        err.to_string()
    };
    let mut in_core = p.clone();
    in_core.ooc = Default::default();
    let want = stop(&in_core, &cpu());
    assert!(want.contains("at step 6;"), "the CPU's step moved: {want}");
    assert_eq!(stop(&p, device), want);
}

#[test]
fn cpu_pyramid_unstable_stops_at_the_cpu_step() {
    unstable_stops_at_the_cpu_step(&cpu());
}

#[test]
fn cuda_pyramid_unstable_stops_at_the_cpu_step() {
    if let Some(gpu) = gpu_or_skip("cuda_pyramid_unstable_stops_at_the_cpu_step") {
        unstable_stops_at_the_cpu_step(&gpu);
    }
}

#[test]
fn cpu_pyramid_nan_stops_with_the_step() {
    nan_stops_with_the_step(&cpu());
}

#[test]
fn cuda_pyramid_nan_stops_with_the_step() {
    if let Some(gpu) = gpu_or_skip("cuda_pyramid_nan_stops_with_the_step") {
        nan_stops_with_the_step(&gpu);
    }
}

#[test]
fn cuda_box_pass_too_tall_is_refused() {
    let Some(gpu) = gpu_or_skip("cuda_box_pass_too_tall_is_refused") else {
        return;
    };
    let p = heat_problem(
        "[40, 24, 24]",
        30,
        "strategy = \"pyramid\"\npyramid_height = 12\ndevice_memory = \"1MiB\"\ntemporal_block = 9",
    );
    let err = heat::engine_from::<f32>(&p, &gpu, vec![0.0; p.cells()])
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("at most 8 steps per pass"),
        "{err}"
    );
}
