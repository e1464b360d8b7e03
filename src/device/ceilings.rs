//! The ceilings a benchmark is measured against, measured in the same process:
//! streaming copy bandwidth (bytes read + written per second) and FMA rate.

use cudarc::driver::{LaunchConfig, PushKernelArg};
use serde::Serialize;

use super::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::{Precision, Real};

pub const KERNELS: KernelSource = KernelSource {
    name: "ceilings.cu",
    code: include_str!("ceilings.cu"),
};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ceilings {
    /// Bytes read + written per second by a large streaming copy.
    pub copy_bandwidth: f64,
    /// Floating-point operations per second (an FMA counts 2) in f32 and f64; None
    /// where not measured (the CPU path measures bandwidth only).
    pub fma_f32: Option<f64>,
    pub fma_f64: Option<f64>,
}

impl Ceilings {
    /// "  ceilings (measured now): copy … GB/s, FMA f32 … TFLOP/s, f64 … TFLOP/s"
    pub fn human(&self) -> String {
        let mut r = format!(
            "  ceilings (measured now): copy {:.1} GB/s",
            self.copy_bandwidth * 1e-9
        );
        if let (Some(a), Some(b)) = (self.fma_f32, self.fma_f64) {
            r += &format!(
                ", FMA f32 {:.1} TFLOP/s, f64 {:.1} TFLOP/s",
                a * 1e-12,
                b * 1e-12
            );
        }
        r + "\n"
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Time `reps` launches (after `warmup`) one by one with events; the median seconds.
pub fn time_median(
    gpu: &Gpu,
    warmup: usize,
    reps: usize,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        launch()?;
    }
    let (start, stop) = (gpu.timing_event()?, gpu.timing_event()?);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        start.record(&gpu.stream)?;
        launch()?;
        stop.record(&gpu.stream)?;
        times.push(start.elapsed_ms(&stop)? as f64 * 1e-3);
    }
    Ok(median(times))
}

pub fn measure_gpu(gpu: &Gpu) -> Result<Ceilings> {
    // 2 x 512 MiB: far beyond L2, small enough for any current data-centre GPU.
    let elems: usize = (512 << 20) / 16;
    gpu.ensure_fits(2 * (512 << 20), "the copy-bandwidth probe")?;
    let src = gpu.stream.alloc_zeros::<f64>(2 * elems)?;
    let mut dst = gpu.stream.alloc_zeros::<f64>(2 * elems)?;
    let copy = gpu.function(&KERNELS, Precision::F64, &[], "ceiling_copy")?;
    let cfg = gpu.stride_config(elems, 256);
    let n = elems as u64;
    let t_copy = time_median(gpu, 3, 15, || {
        let mut b = gpu.stream.launch_builder(&copy);
        b.arg(&src).arg(&mut dst).arg(&n);
        // SAFETY: both buffers hold `elems` double2 values.
        unsafe { b.launch(cfg) }?;
        Ok(())
    })?;
    // The driver's device-to-device copy streams faster than a plain kernel on some parts
    // (H100: ~2.97 vs ~2.76 TB/s); the ceiling is the faster of the two, so fractions of
    // it are never flattered.
    let t_memcpy = time_median(gpu, 3, 15, || {
        gpu.stream.memcpy_dtod(&src, &mut dst)?;
        Ok(())
    })?;
    let copy_bandwidth = 2.0 * (elems * 16) as f64 / t_copy.min(t_memcpy);
    Ok(Ceilings {
        copy_bandwidth,
        fma_f32: Some(fma_rate(gpu, Precision::F32)?),
        fma_f64: Some(fma_rate(gpu, Precision::F64)?),
    })
}

fn fma_rate(gpu: &Gpu, precision: Precision) -> Result<f64> {
    match precision {
        Precision::F32 => fma_rate_typed::<f32>(gpu),
        Precision::F64 => fma_rate_typed::<f64>(gpu),
    }
}

fn fma_rate_typed<T: Real>(gpu: &Gpu) -> Result<f64> {
    let f = gpu.function(&KERNELS, T::PRECISION, &[], "ceiling_fma")?;
    let threads = 256u32;
    let blocks = (gpu.multiprocessors * 8) as u32;
    let iters = 2048i32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut out = gpu.stream.alloc_zeros::<T>((blocks * threads) as usize)?;
    let (a, b) = (T::lit(0.999), T::lit(1e-3));
    let t = time_median(gpu, 2, 7, || {
        let mut l = gpu.stream.launch_builder(&f);
        l.arg(&mut out).arg(&a).arg(&b).arg(&iters);
        // SAFETY: out has one slot per thread.
        unsafe { l.launch(cfg) }?;
        Ok(())
    })?;
    // 8 chains × 16 unrolled FMAs × iters per thread, 2 flops each.
    let flops = 2.0 * 8.0 * 16.0 * iters as f64 * (blocks * threads) as f64;
    Ok(flops / t)
}

/// Host memory bandwidth of a parallel streaming copy (bytes read + written per second),
/// the ceiling for the CPU engines.
pub fn measure_cpu() -> Ceilings {
    use rayon::prelude::*;
    let elems = 64usize << 20; // 512 MiB of f64 each way
    let src = vec![1.0f64; elems];
    let mut dst = vec![0.0f64; elems];
    let chunk = 1 << 16;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t0 = std::time::Instant::now();
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        times.push(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    Ceilings {
        copy_bandwidth: 2.0 * (elems * 8) as f64 / median(times),
        fma_f32: None,
        fma_f64: None,
    }
}

/// Independent multiply-add chains of `cpu_flop_rate`: eight vectors of AVX-512, enough
/// to cover the adds' latency.
const CHAINS: usize = 64;

/// `iters` rounds of x ← x·a + b on each of the chains (a multiply and an add: Rust
/// never contracts them into an FMA).
#[inline(always)]
fn multiply_add_chains(x: &mut [f64; CHAINS], a: f64, b: f64, iters: usize) {
    for _ in 0..iters {
        for v in x.iter_mut() {
            *v = *v * a + b;
        }
    }
}

crate::vector::vector_forms! {
    /// `multiply_add_chains` for SSE2, AVX2 and AVX-512.
    mod chains = multiply_add_chains [] [] (x: &mut [f64; CHAINS], a: f64, b: f64, iters: usize) -> ();
}

/// f64 FLOP rate of every rayon thread together (a multiply and an add count 2): 64
/// independent multiply-add chains per thread in the widest vectors the CPU runs
/// (AVX-512, AVX2, else SSE2; no FMA) — the arithmetic ceiling of the compute-bound
/// CPU engines, which pick their widest form the same way.
pub fn cpu_flop_rate() -> f64 {
    use rayon::prelude::*;
    use std::hint::black_box;
    const ITERS: usize = 1 << 23;
    let threads = rayon::current_num_threads();
    let mut times = Vec::new();
    for _ in 0..3 {
        let t0 = std::time::Instant::now();
        let s: f64 = (0..threads)
            .into_par_iter()
            .map(|t| {
                let mut x: [f64; CHAINS] = std::array::from_fn(|k| (t + k) as f64);
                chains::widest(&mut x, black_box(0.999), black_box(1e-3), ITERS);
                x.iter().sum::<f64>()
            })
            .sum();
        black_box(s);
        times.push(t0.elapsed().as_secs_f64());
    }
    2.0 * CHAINS as f64 * (ITERS * threads) as f64 / median(times)
}
