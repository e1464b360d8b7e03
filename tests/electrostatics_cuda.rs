//! The CUDA electrostatics engine against the CPU reference on random geometries (the
//! same bits: same operations per node, no contraction), and its independence from the
//! launch shape. Skips with a message without a device.

mod common;

use keisan::precision::Real;
use keisan::run::{self, Engine};
use keisan::solvers::electrostatics::{
    self, ElectrostaticsProblem, Geometry, SweepKernel, cpu, cuda,
};
use rand::Rng;

/// A random problem: two electrodes (random voltages; a bar of the first across x holds
/// nodes of both x faces), a dielectric sphere of random εr and place, a nonuniform x
/// mesh, a fixed z_min face; an odd or even node count in x
/// (the colour-split rows then end on either colour), random counts in y and z.
fn random_problem(
    rng: &mut rand::rngs::StdRng,
    nx_odd: bool,
    iterations: u64,
    tolerance: f64,
    charge: &str,
) -> ElectrostaticsProblem {
    random_problem_sized(rng, nx_odd, iterations, tolerance, charge, false)
}

/// [`random_problem`]; `wide`: 170–210 nodes in x (rows of several per-colour tiles), fewer
/// in y and z.
fn random_problem_sized(
    rng: &mut rand::rngs::StdRng,
    nx_odd: bool,
    iterations: u64,
    tolerance: f64,
    charge: &str,
    wide: bool,
) -> ElectrostaticsProblem {
    let (v1, v2): (f64, f64) = (rng.random_range(-2.0..2.0), rng.random_range(-2.0..2.0));
    let eps: f64 = rng.random_range(1.5..9.0);
    let c: Vec<f64> = (0..3).map(|_| rng.random_range(0.35..0.65)).collect();
    // nx = 13 + dx + 1.
    let (dx, ny, nz): (usize, usize, usize) = if wide {
        (
            2 * rng.random_range(78..98) + nx_odd as usize,
            rng.random_range(17..22),
            rng.random_range(14..18),
        )
    } else {
        (
            2 * rng.random_range(9..12) + nx_odd as usize,
            rng.random_range(25..29),
            rng.random_range(20..24),
        )
    };
    let toml = format!(
        "solver = \"electrostatics\"\n[electrostatics]\n\
         x = {{ breakpoints = [0.0, 0.3, 1.0], divisions = [13, {dx}] }}\n\
         y = {{ range = [0.0, 1.0], cells = {ny} }}\nz = {{ range = [0.0, 1.0], cells = {nz} }}\n\
         voltages = [{v1}, {v2}]\npermittivities = [{eps}]\nmax_iterations = {iterations}\n\
         tolerance = {tolerance}\ncharge_density = {charge}\n\
         [electrostatics.faces]\nz_min = 0.25\n\
         [[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [{}, {}, {}]\nradius = 0.2\ndielectric = 1\n\
         [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.1, 0.1, 0.5]\nmax = [0.3, 0.9, 0.6]\nelectrode = 1\n\
         [[electrostatics.shapes]]\nkind = \"cylinder\"\naxis = \"y\"\ncenter = [0.8, 0.7]\nradius = 0.1\nrange = [0.0, 1.0]\nelectrode = 2\n\
         [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.0, 0.45, 0.75]\nmax = [1.0, 0.5, 0.8]\nelectrode = 1\n",
        c[0], c[1], c[2]
    );
    keisan::problem::parse(&toml, "test", None, &Default::default())
        .unwrap()
        .spec_as::<ElectrostaticsProblem>()
        .unwrap()
        .clone()
}

fn solve<T: Real>(e: &mut dyn Engine<Real = T>, p: &ElectrostaticsProblem) -> (Vec<f64>, u64) {
    let out = run::drive(e, p.max_iterations, &run::progress_bar(0, true)).unwrap();
    (
        e.snapshot()
            .unwrap()
            .data
            .iter()
            .map(|v| v.as_f64())
            .collect(),
        out.steps,
    )
}

/// The CPU engine's and the CUDA engine's (default launch but `kernel`) V and iteration
/// counts.
fn cpu_and_cuda<T: Real>(
    gpu: &std::sync::Arc<keisan::device::cuda::Gpu>,
    p: &ElectrostaticsProblem,
    g: &Geometry,
    kernel: SweepKernel,
) -> ((Vec<f64>, u64), (Vec<f64>, u64)) {
    let launch = electrostatics::Launch {
        kernel: Some(kernel),
        ..electrostatics::DEFAULT_LAUNCH
    };
    cpu_and_cuda_with::<T>(gpu, p, g, launch)
}

fn cpu_and_cuda_with<T: Real>(
    gpu: &std::sync::Arc<keisan::device::cuda::Gpu>,
    p: &ElectrostaticsProblem,
    g: &Geometry,
    launch: electrostatics::Launch,
) -> ((Vec<f64>, u64), (Vec<f64>, u64)) {
    (
        solve(
            &mut cpu::CpuElectrostatics::<T>::new(p, g.clone(), None).unwrap(),
            p,
        ),
        solve(
            &mut cuda::CudaElectrostatics::<T>::new(gpu.clone(), p, g, None, launch).unwrap(),
            p,
        ),
    )
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// CUDA (`launch`) gives the CPU's bits in f64 and in f32: the same operations in the same
/// order per node, no contraction. `what` names the case in a failure.
fn assert_cpu_bits_both_precisions(
    gpu: &std::sync::Arc<keisan::device::cuda::Gpu>,
    p: &ElectrostaticsProblem,
    g: &Geometry,
    launch: electrostatics::Launch,
    what: &str,
) {
    let ((a, _), (b, _)) = cpu_and_cuda_with::<f64>(gpu, p, g, launch);
    let d = common::rel_max_diff(&b, &a);
    assert!(
        same_bits(&a, &b),
        "f64 CUDA ({launch:?}) vs CPU ({what}): {d:e}"
    );
    let ((a, _), (b, _)) = cpu_and_cuda_with::<f32>(gpu, p, g, launch);
    let d = common::rel_max_diff(&b, &a);
    assert!(
        same_bits(&a, &b),
        "f32 CUDA ({launch:?}) vs CPU ({what}): {d:e}"
    );
}

#[test]
fn cuda_matches_cpu_on_random_geometries() {
    let Some(keisan::device::Device::Cuda(gpu)) =
        common::gpu_or_skip("electrostatics cuda_matches_cpu")
    else {
        return;
    };
    let mut rng = common::rng();
    let charges = ["3e-11", "{ random = 5e-11, seed = 7 }", "0.0", "1e-11"];
    for (n, charge) in charges.into_iter().enumerate() {
        let p = random_problem(&mut rng, n % 2 == 0, 60, 0.0, charge);
        let g = Geometry::build(&p).unwrap();
        // Every kernel, the two that read 4-bit class codes with either code width
        // (4 bits: both colours' codes of a compact index in one byte).
        // The blocked kernel has its own arithmetic (the stencil table): tested below.
        let kernels = SweepKernel::ALL
            .iter()
            .filter(|&&k| k != SweepKernel::Blocked);
        let launches = kernels.flat_map(|&kernel| {
            let widths = match kernel {
                SweepKernel::PerColour | SweepKernel::Persistent => vec![Some(4), Some(8)],
                _ => vec![None],
            };
            widths
                .into_iter()
                .map(move |class_bits| electrostatics::Launch {
                    kernel: Some(kernel),
                    class_bits,
                    ..electrostatics::DEFAULT_LAUNCH
                })
        });
        for launch in launches {
            assert_cpu_bits_both_precisions(&gpu, &p, &g, launch, &format!("charge {charge}"));
        }
    }
    // To a tolerance: the same iteration count (an odd one too: the fused kernel's result
    // then lies in the second buffer; the persistent kernel stops inside its launch), also
    // where the run tests convergence every 7 iterations only: a multiple of 7.
    for (tolerance, kernel, every) in [
        (1e-9, SweepKernel::Fused, None),
        (1e-9, SweepKernel::PerColour, None),
        (3e-6, SweepKernel::Fused, None),
        (1e-9, SweepKernel::Staged, None),
        (1e-9, SweepKernel::Persistent, None),
        (3e-6, SweepKernel::Persistent, None),
        (1e-9, SweepKernel::PerColour, Some(7)),
        (1e-9, SweepKernel::Fused, Some(7)),
        (3e-6, SweepKernel::Persistent, Some(7)),
    ] {
        let mut p = random_problem(&mut rng, false, 5000, tolerance, "3e-11");
        p.check_every = every;
        let g = Geometry::build(&p).unwrap();
        let ((a, na), (b, nb)) = cpu_and_cuda::<f64>(&gpu, &p, &g, kernel);
        assert_eq!(
            na, nb,
            "iterations to {tolerance:e} ({kernel:?}, every {every:?})"
        );
        assert!(na < 5000 && na % every.unwrap_or(1) == 0, "{na}");
        assert!(same_bits(&a, &b), "V at {tolerance:e} ({kernel:?})");
    }
}

/// Rows of several tiles (170–210 nodes in x): the per-colour sweep's edge lanes read the
/// other colour's values beside their tile from the next tile's rows; the bits must stay
/// the CPU's, with electrodes across the tile edges and free x faces, in both precisions
/// and code widths, and to a tolerance the same iteration count.
#[test]
fn rows_of_several_tiles_keep_the_cpu_bits() {
    let Some(keisan::device::Device::Cuda(gpu)) = common::gpu_or_skip("electrostatics tile edges")
    else {
        return;
    };
    let mut rng = common::rng();
    for (n, charge) in ["0.0", "{ random = 5e-11, seed = 5 }"]
        .into_iter()
        .enumerate()
    {
        for nx_odd in [false, true] {
            let p = random_problem_sized(&mut rng, nx_odd, 50 + n as u64, 0.0, charge, true);
            let g = Geometry::build(&p).unwrap();
            // The large meshes' sweep: 4-bit codes, 32×16, compiled once per colour.
            for (class_bits, block, colour_templated) in [
                (Some(4), (32, 8), None),
                (Some(4), (32, 16), Some(true)),
                (Some(8), (32, 16), None),
                (None, (32, 4), None),
            ] {
                let launch = electrostatics::Launch {
                    kernel: Some(SweepKernel::PerColour),
                    class_bits,
                    block: Some(block),
                    colour_templated,
                    ..electrostatics::DEFAULT_LAUNCH
                };
                assert_cpu_bits_both_precisions(&gpu, &p, &g, launch, &format!("odd nx {nx_odd}"));
            }
        }
    }
    let p = random_problem_sized(&mut rng, true, 5000, 1e-9, "3e-11", true);
    let g = Geometry::build(&p).unwrap();
    let ((a, na), (b, nb)) = cpu_and_cuda::<f64>(&gpu, &p, &g, SweepKernel::PerColour);
    assert_eq!(na, nb, "iterations to 1e-9");
    assert!(na < 5000);
    assert!(same_bits(&a, &b), "V at 1e-9");
}

#[test]
fn the_cuda_result_does_not_depend_on_the_launch_shape() {
    let Some(keisan::device::Device::Cuda(gpu)) =
        common::gpu_or_skip("electrostatics launch shape")
    else {
        return;
    };
    let mut rng = common::rng();
    for nx_odd in [false, true] {
        let p = random_problem(&mut rng, nx_odd, 40, 0.0, "{ random = 5e-11, seed = 3 }");
        let g = Geometry::build(&p).unwrap();
        // The fused kernel's blocks have halo rows and lanes, so at least 3 rows.
        let (fused, per_colour, staged, persistent) = (
            SweepKernel::Fused,
            SweepKernel::PerColour,
            SweepKernel::Staged,
            SweepKernel::Persistent,
        );
        // The persistent kernel's grid: as many blocks as fit, or 1, 7 or 64 blocks, each
        // then taking several tiles per colour.
        let shapes = [
            (fused, (32, 10), None),
            (fused, (64, 4), Some(1)),
            (fused, (32, 3), Some(7)),
            (fused, (96, 5), Some(100)),
            (fused, (32, 16), Some(3)),
            (per_colour, (32, 8), None),
            (per_colour, (32, 16), Some(9)),
            (per_colour, (128, 1), Some(100)),
            (per_colour, (64, 2), Some(3)),
            (staged, (32, 4), None),
            (staged, (64, 2), Some(1)),
            (staged, (32, 1), Some(7)),
            (staged, (32, 3), Some(100)),
            (persistent, (32, 8), None),
            (persistent, (64, 2), Some(3)),
        ];
        let grids = [None, Some(1), Some(7), Some(64)];
        let shapes: Vec<_> = (shapes.iter().map(|&(k, b, p)| (k, b, p, None)))
            .chain(grids.iter().map(|&g| (persistent, (32, 4), Some(2), g)))
            .collect();
        let runs: Vec<Vec<f64>> = shapes
            .iter()
            .map(|&(kernel, block, planes, persistent_blocks)| {
                let launch = electrostatics::Launch {
                    block: Some(block),
                    planes,
                    kernel: Some(kernel),
                    persistent_blocks,
                    ..electrostatics::DEFAULT_LAUNCH
                };
                solve(
                    &mut cuda::CudaElectrostatics::<f64>::new(gpu.clone(), &p, &g, None, launch)
                        .unwrap(),
                    &p,
                )
                .0
            })
            .collect();
        for (r, shape) in runs[1..].iter().zip(&shapes[1..]) {
            assert!(same_bits(r, &runs[0]), "launch {shape:?}, odd nx {nx_odd}");
        }
    }
}

/// The blocked engine (passes of two iterations from a stencil table) gives the table's
/// CPU reference bit for bit, after odd and even counts (a last pass of one iteration) and
/// however the iterations are grouped into passes,
/// with free and held faces, electrodes across tile edges, a uniform charge and one per
/// node, in both precisions; its residual history is the reference's to rounding (other
/// order of sums, and in f32 each thread's sums in f32: 1e-4 relative) at the iterations
/// it measures: the multiples of the check interval and the last one (the runs' limit).
#[test]
fn the_blocked_kernel_equals_the_stencil_table_reference() {
    let Some(keisan::device::Device::Cuda(gpu)) =
        common::gpu_or_skip("electrostatics the_blocked_kernel_equals_the_stencil_table_reference")
    else {
        return;
    };
    use electrostatics::stencil_table;
    let mut rng = common::rng();
    for (n, (charge, wide, iterations)) in [
        ("0.0", false, 7u64),
        ("3e-11", true, 6),
        ("1e-11", false, 1),
        ("{ random = 5e-11, seed = 7 }", true, 9),
    ]
    .into_iter()
    .enumerate()
    {
        let p = random_problem_sized(&mut rng, n % 2 == 0, iterations, 0.0, charge, wide);
        let g = Geometry::build(&p).unwrap();
        fn check<T: Real>(
            gpu: &std::sync::Arc<keisan::device::cuda::Gpu>,
            p: &ElectrostaticsProblem,
            g: &Geometry,
            iterations: u64,
            what: &str,
        ) {
            let t = stencil_table::build::<T>(p, g).unwrap();
            let v0 = cpu::initial_potential::<T>(g).unwrap();
            let mut v = stencil_table::pad(&v0, g.counts, t.pitch);
            let sums = stencil_table::iterate(&mut v, &t, g.counts, iterations as usize);
            let want: Vec<f64> = stencil_table::unpad(&v, g.counts, t.pitch)
                .iter()
                .map(|x| x.as_f64())
                .collect();
            let mut e =
                electrostatics::cuda_blocked::CudaBlocked::<T>::new(gpu.clone(), p, g, None)
                    .unwrap();
            e.advance(iterations).unwrap();
            let d = e.diagnostics().unwrap();
            assert_eq!(d.steps, iterations, "{what}");
            let got: Vec<f64> = e
                .snapshot()
                .unwrap()
                .data
                .iter()
                .map(|x| x.as_f64())
                .collect();
            assert!(
                same_bits(&want, &got),
                "{what}: {:e}",
                common::rel_max_diff(&got, &want)
            );
            // The same iterations grouped into passes otherwise: one, then the rest.
            let mut split =
                electrostatics::cuda_blocked::CudaBlocked::<T>::new(gpu.clone(), p, g, None)
                    .unwrap();
            split.advance(1).unwrap();
            split.advance(iterations - 1).unwrap();
            let again: Vec<f64> = split
                .snapshot()
                .unwrap()
                .data
                .iter()
                .map(|x| x.as_f64())
                .collect();
            assert!(same_bits(&want, &again), "{what}: passes of 1 + the rest");
            assert_eq!(d.new_residuals.len(), iterations as usize, "{what}");
            let tol = if std::mem::size_of::<T>() == 4 {
                1e-4
            } else {
                1e-9
            };
            let every = p.as_table().check_interval();
            for (k, (r, s)) in d.new_residuals.iter().zip(&sums).enumerate() {
                let done = k as u64 + 1;
                let measured = done.is_multiple_of(every) || done == p.max_iterations;
                assert_eq!(run::is_measured(*r), measured, "{what}: iteration {done}");
                if !measured {
                    continue;
                }
                let (res, norm) = ((s[0] + s[2]).sqrt(), (s[1] + s[3]).sqrt());
                let want = if norm > 0.0 { res / norm } else { res };
                assert!(
                    (r - want).abs() <= tol * want.abs() + 1e-300,
                    "{what}: residual of iteration {k}: {r:e} vs {want:e}"
                );
            }
        }
        check::<f64>(&gpu, &p, &g, iterations, &format!("f64, case {n}"));
        check::<f32>(&gpu, &p, &g, iterations, &format!("f32, case {n}"));
        if n == 0 {
            // Random classes in a corner: more stencils than a byte would index (16-bit
            // ids, a table of some hundreds of entries in shared memory). A corner of 16³
            // nodes gave 577–821 stencils over 60 random meshes (9³ gave 275–396: the
            // electrodes and faces there hold many of its nodes).
            let mut g = g.clone();
            g.epsr = (0..16).map(|c| 1.0 + c as f64).collect();
            let [nx, ny, _] = g.counts;
            for (at, c) in g.id_epsr.iter_mut().enumerate() {
                let (i, j, k) = (at % nx, at / nx % ny, at / (nx * ny));
                if i < 16 && j < 16 && k < 16 {
                    *c = ((at as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as u8;
                }
            }
            let entries = stencil_table::build::<f64>(&p, &g).unwrap().entries();
            assert!(entries > 300, "{entries} stencils");
            check::<f64>(&gpu, &p, &g, 5, "f64, 16-bit ids");
            check::<f32>(&gpu, &p, &g, 5, "f32, 16-bit ids");
        }
    }
}

/// To a tolerance the blocked engine stops within a check interval of the CPU engine's
/// iteration count (it tests at multiples of it), at a potential that agrees with it to the
/// tolerance's order (the table's weights are rounded once: the last bits differ); with
/// `update = "table"` the CPU engine is the table form's, and the two agree bit for bit,
/// also with a check interval of their own.
#[test]
fn the_blocked_kernel_converges_with_the_cpu_engine() {
    let Some(keisan::device::Device::Cuda(gpu)) =
        common::gpu_or_skip("electrostatics the_blocked_kernel_converges_with_the_cpu_engine")
    else {
        return;
    };
    let mut rng = common::rng();
    let p = random_problem(&mut rng, true, 5000, 1e-10, "3e-11");
    let g = Geometry::build(&p).unwrap();
    let (a, na) = solve(
        &mut cpu::CpuElectrostatics::<f64>::new(&p, g.clone(), None).unwrap(),
        &p,
    );
    let (b, nb) = solve(
        &mut electrostatics::cuda_blocked::CudaBlocked::<f64>::new(gpu.clone(), &p, &g, None)
            .unwrap(),
        &p,
    );
    let every = p.as_table().check_interval();
    assert!(
        na < 5000 && nb >= na && nb - na < every && nb % every == 0,
        "{na} vs {nb} iterations"
    );
    let scale = a.iter().fold(0f64, |m, x| m.max(x.abs()));
    let worst = a
        .iter()
        .zip(&b)
        .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(worst <= 1e-8 * scale, "max |ΔV| {worst:e} of {scale:e}");
    // `update = "table"`: the CPU engine of the table form and the blocked kernel, the
    // same bits and the same (even) iteration count, in both precisions.
    let mut p = p;
    p.update = electrostatics::Update::Table;
    let cpu_device = keisan::device::Device::Cpu { threads: 2 };
    let cuda_device = keisan::device::Device::Cuda(gpu.clone());
    fn both<T: Real>(
        p: &ElectrostaticsProblem,
        g: &Geometry,
        devices: [&keisan::device::Device; 2],
    ) -> [(Vec<f64>, u64); 2] {
        devices.map(|d| {
            let mut e = electrostatics::engine::<T>(p, g, d, None).unwrap();
            solve(e.as_mut(), p)
        })
    }
    for (tolerance, every) in [(1e-10, None), (3e-6, None), (1e-10, Some(5))] {
        (p.tolerance, p.check_every) = (tolerance, every);
        let k = p.check_interval();
        let [(a, na), (b, nb)] = both::<f64>(&p, &g, [&cpu_device, &cuda_device]);
        assert_eq!(
            (na, na % k),
            (nb, 0),
            "f64 iterations to {tolerance:e}, every {k}"
        );
        assert!(same_bits(&a, &b), "f64 V to {tolerance:e}, every {k}");
    }
    p.check_every = None;
    // f32 over a fixed count (its residual sums differ in rounding, so a count to a
    // tolerance could too, near a tie).
    (p.tolerance, p.max_iterations) = (0.0, 37);
    let [(a, na), (b, nb)] = both::<f32>(&p, &g, [&cpu_device, &cuda_device]);
    assert_eq!((na, nb), (37, 37), "f32 iterations");
    assert!(same_bits(&a, &b), "f32 V after 37 iterations");
}
