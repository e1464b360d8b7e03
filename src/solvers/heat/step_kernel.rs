//! Launching the box-step kernel (kernels.cu) shared by the in-core and pyramid engines.

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::HeatProblem;
use super::pyramid::Region;
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::Real;

pub const KERNELS: KernelSource = KernelSource {
    name: "heat/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// No non-finite value seen yet (the bad-step flag's resting value).
pub const NONE: u64 = u64::MAX;

const THREADS: u32 = 256;

/// The step and copy kernels of one precision, with the problem's constants.
pub struct BoxKernels<T: Real> {
    step: CudaFunction,
    copy: CudaFunction,
    p: HeatProblem,
    r: [T; 3],
    march: usize,
}

/// Points each thread of the step kernel marches along the slowest real axis (tuned on
/// the H100, docs/PERFORMANCE.md); KEISAN_HEAT_MARCH overrides it for tuning.
fn march() -> usize {
    std::env::var("KEISAN_HEAT_MARCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&m: &usize| (1..=1024).contains(&m))
        .unwrap_or(32)
}

fn step_config(region: &Region, dims: usize, march_len: usize) -> LaunchConfig {
    let [rz, ry, rx] = region.shape();
    let (march, other) = if dims == 2 { (ry, rz) } else { (rz, ry) };
    LaunchConfig {
        grid_dim: (
            (rx as u32).div_ceil(THREADS),
            (other * march.div_ceil(march_len)).clamp(1, 65535) as u32,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn config(region: &Region) -> LaunchConfig {
    let [rz, ry, rx] = region.shape();
    LaunchConfig {
        grid_dim: (
            (rx as u32).div_ceil(THREADS),
            (rz * ry).clamp(1, 65535) as u32,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A region as the kernels take it: z0, z1, y0, y1, x0, x1.
fn region_args(region: &Region) -> [i32; 6] {
    let [lo, hi] = [region.lo, region.hi].map(|a| a.map(|v| v as i32));
    [lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]]
}

impl<T: Real> BoxKernels<T> {
    pub fn new(gpu: &Gpu, p: &HeatProblem) -> Result<Self> {
        let r = p.r();
        let march_len = march();
        let march = [("MARCH", march_len.to_string())];
        Ok(Self {
            step: gpu.function(&KERNELS, T::PRECISION, &march, "heat_box_step")?,
            copy: gpu.function(&KERNELS, T::PRECISION, &march, "box_copy")?,
            p: p.clone(),
            r: r.map(T::lit),
            march: march_len,
        })
    }

    /// One step over `region` (local indices) of a box of `shape` at global `origin`.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        stream: &CudaStream,
        src: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
        origin: [usize; 3],
        shape: [usize; 3],
        region: &Region,
        step: u64,
        bad: &mut CudaSlice<u64>,
    ) -> Result<()> {
        if region.is_empty() {
            return Ok(());
        }
        let len: usize = shape.iter().product();
        assert!(
            src.len() >= len && dst.len() >= len,
            "box larger than its buffers"
        );
        let i = |v: usize| v as i32;
        let [bz, by, bx] = shape.map(i);
        let bounds = region_args(region);
        let (o, n) = (origin.map(i), self.p.shape.map(i));
        let dims = self.p.dims as i32;
        let mut l = stream.launch_builder(&self.step);
        l.arg(src).arg(dst).arg(&bz).arg(&by).arg(&bx);
        for v in bounds.iter().chain(&o).chain(&n) {
            l.arg(v);
        }
        l.arg(&dims).arg(&self.r[0]).arg(&self.r[1]).arg(&self.r[2]);
        l.arg(&step).arg(bad);
        // SAFETY: the region lies inside the box, both buffers hold the box, and the
        // kernel reads neighbours only of points that are not on the grid's edge, which
        // lie inside the box (the region shrinks on halo sides).
        unsafe { l.launch(step_config(region, self.p.dims, self.march)) }?;
        Ok(())
    }

    /// Copy `region` of a box of `shape` from `src` to `dst`.
    pub fn copy(
        &self,
        stream: &CudaStream,
        src: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
        shape: [usize; 3],
        region: &Region,
    ) -> Result<()> {
        if region.is_empty() {
            return Ok(());
        }
        let (by, bx) = (shape[1] as i32, shape[2] as i32);
        let bounds = region_args(region);
        let mut l = stream.launch_builder(&self.copy);
        l.arg(src).arg(dst).arg(&by).arg(&bx);
        for v in &bounds {
            l.arg(v);
        }
        // SAFETY: the region lies inside the box, which both buffers hold.
        unsafe { l.launch(config(region)) }?;
        Ok(())
    }
}
