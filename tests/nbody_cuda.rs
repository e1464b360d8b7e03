//! The N-body CUDA engine against the CPU f64 direct sum (skips without a GPU).
//!
//! The f32 bound: each term G·m_j·d/r³ carries the rounding of the f32 positions (a
//! separation d of particles at |x| loses log2(|x|/|d|) bits: with |x| ≲ 10 and pairs
//! within ε = 0.01 that is a relative error up to ~1e-4 in the nearest terms, which
//! dominate the force of a particle in a dense core), rsqrt (≤ 2 ulp) and the products;
//! the f32 sum of N terms adds O(√N·6e-8) of the largest partial sums. Relative to the
//! RMS acceleration the worst particle's error stays below 1e-4 (measured ≈ 1e-5 at
//! N ≤ 4099 on the H100). The accurate mode sums the same f32 terms in f64: at these N
//! the terms' own error dominates, so it meets the same bound; its gain is at large N
//! (the bench prints the force error of both modes at N up to 2^20).

mod common;

use keisan::device::Device;
use keisan::run::Engine;
use keisan::solvers::nbody::cuda::{self, CudaNbody, ForceShape};
use keisan::solvers::nbody::{Gravity, Particles, cpu, presets};

fn worst_relative(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let rms = (b
        .iter()
        .map(|v| v.iter().map(|x| x * x).sum::<f64>())
        .sum::<f64>()
        / b.len() as f64)
        .sqrt();
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            ((x[0] - y[0]).powi(2) + (x[1] - y[1]).powi(2) + (x[2] - y[2]).powi(2)).sqrt()
        })
        .fold(0.0, f64::max)
        / rms
}

/// `p` with masses spread by ±20 % (the general kernel, not the equal-mass one).
fn unequal(mut p: Particles) -> Particles {
    for (i, m) in p.mass.iter_mut().enumerate() {
        *m *= 0.8 + 0.4 * ((i * 31) % 17) as f64 / 16.0;
    }
    p
}

#[test]
fn forces_match_the_cpu_direct_sum_within_the_f32_bound() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("nbody forces") else {
        return;
    };
    let grav = Gravity {
        g: 1.3,
        softening: 0.01,
    };
    // Odd N (padding), N below one block, around a block of 1024, several splits.
    for (n, seed) in [(2, 1), (3, 2), (255, 3), (1023, 4), (1025, 5), (4099, 6)] {
        for p in [
            presets::plummer(n, 1.0, presets::PLUMMER_A, seed),
            unequal(presets::plummer(n, 1.0, presets::PLUMMER_A, seed)),
        ] {
            let (acc, phi) = cpu::accelerations(&p, grav, true);
            for accurate in [false, true] {
                // Each pair once (nbody_mutual: tiles in pairs, N padded to an even
                // count of tiles) at these sizes too.
                for shape in [
                    ForceShape::default(),
                    ForceShape {
                        threads: 64,
                        ipt: 3,
                        mutual: Some(false),
                    },
                    ForceShape {
                        mutual: Some(true),
                        ..ForceShape::default()
                    },
                    ForceShape {
                        threads: 64,
                        ipt: 3,
                        mutual: Some(true),
                    },
                ] {
                    let mut e = CudaNbody::with_shape(
                        std::slice::from_ref(&gpu),
                        grav,
                        0.01,
                        &p,
                        0,
                        accurate,
                        shape,
                    )
                    .unwrap();
                    let a = e.accelerations().unwrap();
                    let err = worst_relative(&a, &acc);
                    eprintln!(
                        "n {n} accurate {accurate} {shape:?}: {err:e} (splits {:?})",
                        e.splits()
                    );
                    assert!(err < 1e-4, "n {n} accurate {accurate} {shape:?}: {err:e}");
                }
            }
            // The diagnostics' potential: f64 on the device against f64 on the host.
            let f = cuda::potential(&gpu, grav, &p).unwrap();
            // No contraction, IEEE sqrt and division, j in the same order: the same bits.
            assert!(common::same_bits(&phi, &f), "the device potential differs");
        }
    }
    // A lone particle feels nothing and has no potential.
    let p = presets::plummer(1, 1.0, presets::PLUMMER_A, 1);
    let mut e = CudaNbody::new(std::slice::from_ref(&gpu), grav, 0.01, &p, 0, false).unwrap();
    assert_eq!(e.accelerations().unwrap(), vec![[0.0; 3]]);
    assert_eq!(cuda::potential(&gpu, grav, &p).unwrap(), vec![0.0]);
}

#[test]
fn unsoftened_pairs_and_padding_give_finite_forces_and_runs_repeat() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("nbody unsoftened") else {
        return;
    };
    let grav = Gravity {
        g: 1.0,
        softening: 0.0,
    };
    let p = presets::cold_sphere(300, 7);
    let (acc, _) = cpu::accelerations(&p, grav, false);
    let mut e = CudaNbody::new(std::slice::from_ref(&gpu), grav, 0.001, &p, 0, false).unwrap();
    let a = e.accelerations().unwrap();
    assert!(a.iter().flatten().all(|v| v.is_finite()));
    assert!(worst_relative(&a, &acc) < 1e-3);
    // Two runs of 20 steps: the same bits (splits added in order, no atomics), with
    // each pair evaluated once or twice.
    for mutual in [false, true] {
        let shape = ForceShape {
            threads: 32,
            ipt: 2,
            mutual: Some(mutual),
        };
        let run = || {
            let mut e =
                CudaNbody::with_shape(std::slice::from_ref(&gpu), grav, 0.001, &p, 0, false, shape)
                    .unwrap();
            let a = e.accelerations().unwrap();
            assert!(a.iter().flatten().all(|v| v.is_finite()), "{shape:?}");
            assert!(worst_relative(&a, &acc) < 1e-3, "{shape:?}");
            e.advance(20).unwrap();
            e.snapshot().unwrap().data
        };
        let (x, y) = (run(), run());
        assert!(common::same_bits(&x, &y), "{shape:?}");
    }
}

#[test]
fn a_cuda_run_keeps_energy_like_the_cpu_one() {
    let Some(Device::Cuda(gpu)) = common::gpu_or_skip("nbody energy") else {
        return;
    };
    use keisan::solvers::nbody::diagnostics::Measures;
    let grav = Gravity {
        g: 1.0,
        softening: 0.05,
    };
    let p = presets::plummer(512, 1.0, presets::PLUMMER_A, 9);
    let start = Measures::of(&p, grav);
    let mut e = CudaNbody::new(std::slice::from_ref(&gpu), grav, 1.0 / 64.0, &p, 0, false).unwrap();
    e.advance(181).unwrap();
    let end = cpu::particles_of(&e.snapshot().unwrap().data);
    let err = Measures::of(&end, grav).energy_error(&start);
    // The leapfrog error of this step (≈ 1e-5) dominates the f32 force error.
    assert!(err < 1e-4, "|ΔE/E| {err:e}");
}

#[test]
fn shares_over_several_devices_agree_with_one_and_repeat() {
    let Some(dev) = common::gpu_or_skip("nbody on several devices") else {
        return;
    };
    let Device::Cuda(gpu) = &dev else { return };
    let grav = Gravity {
        g: 1.0,
        softening: 0.02,
    };
    // Shares of 2 and 3 on this GPU (and on two GPUs where there are two); N = 2 on 3
    // shares leaves one share empty.
    let mut placements: Vec<(&str, Vec<std::sync::Arc<keisan::device::Gpu>>)> = vec![
        ("2 shares", vec![gpu.clone(); 2]),
        ("3 shares", vec![gpu.clone(); 3]),
    ];
    if let Some(two) = common::two_gpus_or_skip("nbody on 2 GPUs", None) {
        placements.push(("2 GPUs", two.gpus().unwrap().unwrap()));
    }
    for (n, seed) in [(2, 1), (1000, 2), (5000, 3)] {
        for p in [
            presets::plummer(n, 1.0, presets::PLUMMER_A, seed),
            unequal(presets::plummer(n, 1.0, presets::PLUMMER_A, seed)),
        ] {
            let (acc, _) = cpu::accelerations(&p, grav, false);
            for (what, gpus) in &placements {
                // Each interaction, or each pair of tiles once with every device taking
                // every count-th round and gathering its share's sums from all (small
                // tiles: several rounds per device even at these N).
                for shape in [
                    ForceShape::default(),
                    ForceShape {
                        threads: 32,
                        ipt: 2,
                        mutual: Some(true),
                    },
                ] {
                    let mut e =
                        CudaNbody::with_shape(gpus, grav, 0.01, &p, 0, false, shape).unwrap();
                    let err = worst_relative(&e.accelerations().unwrap(), &acc);
                    eprintln!(
                        "{what}, n {n}, {shape:?}: {err:e} (splits {:?})",
                        e.splits()
                    );
                    assert!(err < 1e-4, "{what}, n {n}, {shape:?}: {err:e}");
                }
            }
        }
    }
    // A run on 3 shares repeats bit for bit (both kernels), and keeps its particles in
    // order.
    let p = presets::plummer(3000, 1.0, presets::PLUMMER_A, 4);
    let run = |mutual| {
        let shape = ForceShape {
            mutual: Some(mutual),
            ..ForceShape::default()
        };
        let mut e =
            CudaNbody::with_shape(&placements[1].1, grav, 0.01, &p, 0, false, shape).unwrap();
        e.advance(10).unwrap();
        e.snapshot().unwrap().data
    };
    let (x, y) = (run(false), run(false));
    assert!(common::same_bits(&x, &y));
    let (xm, ym) = (run(true), run(true));
    assert!(common::same_bits(&xm, &ym), "pairs once on 3 shares");
    let one = {
        let mut e = CudaNbody::new(std::slice::from_ref(gpu), grav, 0.01, &p, 0, false).unwrap();
        e.advance(10).unwrap();
        e.snapshot().unwrap().data
    };
    // Masses are carried, not computed: the same bits; positions agree to f32 forces.
    let masses = |d: &[f64]| d.chunks(7).map(|r| r[6]).collect::<Vec<_>>();
    assert!(common::same_bits(&masses(&x), &masses(&one)));
    for (what, run) in [("each interaction", &x), ("pairs once", &xm)] {
        let worst = (run.iter().zip(&one))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            worst < 1e-6,
            "{what}: positions after 10 steps differ by {worst:e}"
        );
    }
}
