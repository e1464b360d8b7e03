//! Launching the box-step kernel (kernels.cu) shared by the in-core and pyramid engines.

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::HeatProblem;
use super::pyramid::Region;
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};

pub const KERNELS: KernelSource = KernelSource {
    name: "heat/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// No non-finite value seen yet (the bad-step flag's resting value).
pub const NONE: u64 = u64::MAX;

/// Threads per block of the region copy.
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

/// Threads per block of the step kernel over (x, middle axis): a 64×4 tile in 3D, rows of
/// 256 otherwise (the middle axis then has one point). Measured on the H100: 64×4, 32×4
/// and 128×2 within 1 % of each other (docs/PERFORMANCE.md).
fn step_block(dims: usize) -> (u32, u32) {
    if dims == 3 { (64, 4) } else { (256, 1) }
}

fn step_config(region: &Region, dims: usize, march_len: usize) -> LaunchConfig {
    let [rz, ry, rx] = region.shape();
    let (march, other) = if dims == 2 { (ry, rz) } else { (rz, ry) };
    let (tx, ty) = step_block(dims);
    LaunchConfig {
        grid_dim: (
            (rx as u32).div_ceil(tx),
            (other as u32).div_ceil(ty),
            march.div_ceil(march_len).clamp(1, 65535) as u32,
        ),
        block_dim: (tx, ty, 1),
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

/// Shared memory a block may hold in static arrays without opting in.
const STATIC_SHARED: usize = 48 << 10;

/// Output planes each block of the temporal-blocking kernel marches over: long enough that
/// the `levels` warm-up planes below each chunk cost little, short enough for many blocks.
fn tb_chunk(dims: usize) -> usize {
    if dims == 3 { 128 } else { 256 }
}

/// Steps per pass of the in-core temporal-blocking kernel when the problem does not say:
/// the fastest measured on the H100 (docs/PERFORMANCE.md); 1 (single pass) in 1D.
pub fn default_levels(dims: usize, precision: Precision) -> usize {
    match (dims, precision) {
        (3, _) => 2,
        (2, Precision::F32) => 12,
        (2, Precision::F64) => 8,
        _ => 1,
    }
}

/// The thread tile (x, y) for `levels` levels: the first candidate whose halo takes at most
/// half of each tiled axis and whose double-buffered planes fit in static shared memory.
fn tb_tile(dims: usize, levels: usize, bytes: usize) -> Option<(u32, u32)> {
    let candidates: &[(usize, usize)] = match dims {
        3 => &[(32, 16), (32, 32)],
        2 => &[(512, 1), (256, 1), (128, 1)],
        _ => &[],
    };
    candidates
        .iter()
        .find(|&&(tx, ty)| {
            let halo_ok = 4 * levels <= tx && (dims != 3 || 4 * levels <= ty);
            halo_ok && 2 * levels * tx * ty * bytes <= STATIC_SHARED
        })
        .map(|&(tx, ty)| (tx as u32, ty as u32))
}

/// The most steps per pass a tile allows for `dims` and values of `bytes` (None in 1D).
fn tallest_levels(dims: usize, bytes: usize) -> Option<usize> {
    (1..=super::MAX_TEMPORAL_BLOCK)
        .take_while(|&l| tb_tile(dims, l, bytes).is_some())
        .last()
}

fn tb_defines(levels: usize, tile: (u32, u32)) -> Vec<(&'static str, String)> {
    vec![
        ("TB_LEVELS", levels.to_string()),
        ("TB_X", tile.0.to_string()),
        ("TB_Y", tile.1.to_string()),
    ]
}

/// The defines of every temporal-blocking kernel the engine may build by default, and of
/// the tallest pass each dimension and precision allows (for compile checks).
pub fn tb_variants() -> Vec<(Precision, Vec<(&'static str, String)>)> {
    let mut out = Vec::new();
    for precision in [Precision::F32, Precision::F64] {
        for dims in [2, 3] {
            let bytes = precision.bytes();
            let tallest = tallest_levels(dims, bytes);
            for levels in [Some(default_levels(dims, precision)), tallest]
                .into_iter()
                .flatten()
            {
                if let Some(tile) = tb_tile(dims, levels, bytes) {
                    out.push((precision, tb_defines(levels, tile)));
                }
            }
        }
    }
    out
}

/// The in-core temporal-blocking kernel: `levels` steps per pass through device memory.
pub struct TemporalBlock<T: Real> {
    pass: CudaFunction,
    levels: usize,
    tile: (u32, u32),
    chunk: usize,
    p: HeatProblem,
    r: [T; 3],
}

impl<T: Real> TemporalBlock<T> {
    pub fn new(gpu: &Gpu, p: &HeatProblem, levels: usize) -> Result<Self> {
        let tile = tb_tile(p.dims, levels, T::PRECISION.bytes()).ok_or_else(|| {
            let most = tallest_levels(p.dims, T::PRECISION.bytes()).unwrap_or(1);
            Error::invalid(
                "heat.temporal_block",
                levels,
                format!(
                    "a {}D grid in {} takes at most {most} steps per pass (the tile's \
                     halo and shared memory); 1 turns temporal blocking off",
                    p.dims,
                    T::PRECISION
                ),
            )
        })?;
        let defines = tb_defines(levels, tile);
        Ok(Self {
            pass: gpu.function(&KERNELS, T::PRECISION, &defines, "heat_tb_pass")?,
            levels,
            tile,
            chunk: tb_chunk(p.dims),
            p: p.clone(),
            r: p.r().map(T::lit),
        })
    }

    pub fn levels(&self) -> usize {
        self.levels
    }

    /// `levels` steps of the whole grid from `src` into `dst`, the first being `step`.
    pub fn pass(
        &self,
        stream: &CudaStream,
        src: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
        step: u64,
        bad: &mut CudaSlice<u64>,
    ) -> Result<()> {
        let len = self.p.cells();
        assert!(
            src.len() >= len && dst.len() >= len,
            "grid larger than its buffers"
        );
        let [nz, ny, nx] = self.p.shape.map(|v| v as i32);
        let d3 = self.p.dims == 3;
        let (tx, ty) = self.tile;
        let halo = 2 * self.levels as u32;
        let march = if d3 { nz } else { ny } as usize;
        let cfg = LaunchConfig {
            grid_dim: (
                (nx as u32).div_ceil(tx - halo),
                if d3 {
                    (ny as u32).div_ceil(ty - halo)
                } else {
                    1
                },
                march.div_ceil(self.chunk) as u32,
            ),
            block_dim: (tx, ty, 1),
            shared_mem_bytes: 0,
        };
        let (dims, chunk) = (self.p.dims as i32, self.chunk as i32);
        let mut l = stream.launch_builder(&self.pass);
        l.arg(src).arg(dst).arg(&nz).arg(&ny).arg(&nx).arg(&dims);
        l.arg(&self.r[0]).arg(&self.r[1]).arg(&self.r[2]);
        l.arg(&chunk).arg(&step).arg(bad);
        // SAFETY: both buffers hold the grid; the kernel reads and writes grid points only.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}
