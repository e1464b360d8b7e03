//! Launching the box-step kernel (kernels.cu) shared by the in-core and pyramid engines.

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::HeatProblem;
use super::model::PassShape;
use super::pyramid::Region;
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::tuning;

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
    /// The step for boxes whose rows are whole vectors (`vector_values`), if enabled.
    vec_step: Option<CudaFunction>,
    copy: CudaFunction,
    p: HeatProblem,
    r: [T; 3],
    march: usize,
    /// Threads per block of the step kernel: scalar, vector (step_block).
    blocks: [(u32, u32); 2],
}

/// Points each thread of the step kernel marches along the slowest real axis (tuned on
/// the H100, docs/PERFORMANCE.md); KEISAN_HEAT_MARCH overrides it for tuning.
fn march() -> Result<usize> {
    Ok(tuning::number("KEISAN_HEAT_MARCH", 1..=1024)?.unwrap_or(32))
}

/// Values one thread of the vector kernels loads at once: 16 bytes.
pub fn vector_values(precision: Precision) -> usize {
    16 / precision.bytes()
}

/// Threads per block of the step kernel over (x, middle axis): a 64×4 tile in 3D, rows of
/// 256 otherwise (the middle axis then has one point). The vector kernel's x threads each
/// own a vector, and a multiple of 32 keeps warps along x: 32×8 in 3D, rows of 128
/// otherwise. Measured on the H100, 3D 32×4 to 128×2 and 2D rows of 32 to 256 within 1 %
/// of each other, 32×16 and 512 about 12 % slower (docs/PERFORMANCE.md).
/// KEISAN_HEAT_STEP_BLOCK / KEISAN_HEAT_VEC_BLOCK = XxY override them for tuning.
fn step_block(dims: usize, vector: bool) -> Result<(u32, u32)> {
    let (var, expect) = match vector {
        true => (
            "KEISAN_HEAT_VEC_BLOCK",
            "XxY, X a multiple of 32 and X·Y at most 1024, e.g. 32x8",
        ),
        false => ("KEISAN_HEAT_STEP_BLOCK", "XxY, X·Y at most 1024, e.g. 64x4"),
    };
    let valid = |&x: &u32, &y: &u32| {
        x > 0
            && y > 0
            && x.checked_mul(y).is_some_and(|t| t <= 1024)
            && (!vector || x.is_multiple_of(32))
    };
    Ok(
        tuning::pair(var, 'x', expect, valid)?.unwrap_or(match (dims, vector) {
            (3, false) => (64, 4),
            (3, true) => (32, 8),
            (_, false) => (256, 1),
            (_, true) => (128, 1),
        }),
    )
}

/// The launch of a step over `region`; `vec` is the vector width when the vector kernel
/// runs (threads then tile whole vectors of x from the one holding `region.lo[2]`).
fn step_config(
    region: &Region,
    dims: usize,
    march_len: usize,
    vec: Option<usize>,
    (tx, ty): (u32, u32),
) -> LaunchConfig {
    let [rz, ry, _] = region.shape();
    let (march, other) = if dims == 2 { (ry, rz) } else { (rz, ry) };
    let x_threads = match vec {
        Some(v) => region.hi[2].div_ceil(v) - region.lo[2] / v,
        None => region.hi[2] - region.lo[2],
    };
    LaunchConfig {
        grid_dim: (
            (x_threads as u32).div_ceil(tx),
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

/// The arguments after (u, un) that the box kernels share: the box's shape, the region,
/// the box's global origin and the grid's shape, each slowest axis first. Panics if the
/// buffers do not hold the box.
fn box_args<T>(
    src: &CudaSlice<T>,
    dst: &CudaSlice<T>,
    shape: [usize; 3],
    region: &Region,
    origin: [usize; 3],
    grid: [usize; 3],
) -> [i32; 15] {
    let len: usize = shape.iter().product();
    assert!(
        src.len() >= len && dst.len() >= len,
        "box larger than its buffers"
    );
    let mut a = [0; 15];
    a[..3].copy_from_slice(&shape.map(|v| v as i32));
    a[3..9].copy_from_slice(&region_args(region));
    a[9..12].copy_from_slice(&origin.map(|v| v as i32));
    a[12..].copy_from_slice(&grid.map(|v| v as i32));
    a
}

impl<T: Real> BoxKernels<T> {
    pub fn new(gpu: &Gpu, p: &HeatProblem) -> Result<Self> {
        let r = p.r();
        let march_len = march()?;
        let mut march = vec![("MARCH", march_len.to_string())];
        // Vector-kernel march points whose loads are issued together (tuning override).
        if let Some(g) = tuning::number("KEISAN_HEAT_VGROUP", 1..=8usize)? {
            march.push(("VGROUP", g.to_string()));
        }
        let vector = tuning::switch("KEISAN_HEAT_VEC")?.unwrap_or(true);
        let vec_step = match vector {
            true => Some(gpu.function(&KERNELS, T::PRECISION, &march, "heat_vec_step")?),
            false => None,
        };
        Ok(Self {
            step: gpu.function(&KERNELS, T::PRECISION, &march, "heat_box_step")?,
            vec_step,
            copy: gpu.function(&KERNELS, T::PRECISION, &march, "box_copy")?,
            p: p.clone(),
            r: r.map(T::lit),
            march: march_len,
            blocks: [step_block(p.dims, false)?, step_block(p.dims, true)?],
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
        let args = box_args(src, dst, shape, region, origin, self.p.shape);
        let dims = self.p.dims as i32;
        let v = vector_values(T::PRECISION);
        let (kernel, vec) = match &self.vec_step {
            Some(k) if shape[2].is_multiple_of(v) => (k, Some(v)),
            _ => (&self.step, None),
        };
        let mut l = stream.launch_builder(kernel);
        l.arg(src).arg(dst);
        for v in &args {
            l.arg(v);
        }
        l.arg(&dims).arg(&self.r[0]).arg(&self.r[1]).arg(&self.r[2]);
        l.arg(&step).arg(bad);
        let block = self.blocks[vec.is_some() as usize];
        // SAFETY: the region lies inside the box, both buffers hold the box, and the
        // kernel reads neighbours only of points that are not on the grid's edge, which
        // lie inside the box (the region shrinks on halo sides); the vector kernel needs
        // rows of whole vectors, which the allocations' alignment keeps aligned.
        unsafe { l.launch(step_config(region, self.p.dims, self.march, vec, block)) }?;
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

/// 32-bit registers the register-tiled kernel may spend on its march state per thread
/// (levels × rows × vector values, two planes each, plus the input) before it would spill:
/// at most 100, and what a block of `threads` leaves beside ~24 for indices and temporaries.
fn state_registers(threads: usize) -> usize {
    (65536 / threads).min(255).saturating_sub(24).min(140)
}

/// Output planes each block of the temporal-blocking kernel marches over: long enough that
/// the `levels` warm-up planes below each chunk cost little, short enough for many blocks.
fn tb_chunk(dims: usize) -> Result<usize> {
    let default = if dims == 3 { 128 } else { 256 };
    Ok(tuning::at_least("KEISAN_HEAT_TB_CHUNK", 1)?.unwrap_or(default))
}

/// Steps per pass of the in-core temporal-blocking kernel when the problem does not say:
/// the fastest measured on the H100 (docs/PERFORMANCE.md); 1 (single pass) in 1D.
pub fn default_levels(dims: usize, precision: Precision) -> usize {
    match (dims, precision) {
        (3, _) => 4,
        (2, Precision::F32) => 12,
        (2, Precision::F64) => 8,
        _ => 1,
    }
}

/// How a temporal-blocking pass tiles the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tile {
    /// `heat_tb_pass`: one column per thread, lateral neighbours in shared memory;
    /// `x` × `y` threads.
    Shared { x: usize, y: usize },
    /// `heat_tb3_pass` (3D, nx a multiple of `vec`): each thread holds `vec` x values of
    /// `rows` rows, a warp spans 32 vectors, `warps` warps stack along y.
    Registers {
        rows: usize,
        warps: usize,
        vec: usize,
    },
}

impl Tile {
    /// Whether the tile can take `levels` steps per pass with values of `bytes`.
    fn allows(self, levels: usize, bytes: usize) -> bool {
        match self {
            Tile::Shared { x, y } => {
                let halo_ok = 4 * levels <= x && (y == 1 || 4 * levels <= y);
                halo_ok && 2 * levels * x * y * bytes <= crate::device::cuda::STATIC_SHARED
            }
            Tile::Registers { rows, warps, vec } => {
                let halo_x = levels.div_ceil(vec) * vec;
                let state = (2 * levels + 1) * rows * vec * bytes.div_ceil(4);
                4 * halo_x <= 32 * vec
                    && 4 * levels <= rows * warps
                    && rows * vec <= 32
                    && state <= state_registers(32 * warps)
                    && self.shared_bytes(levels, bytes) <= crate::device::cuda::MAX_DYNAMIC_SHARED
            }
        }
    }

    /// Dynamic shared memory of one block (the shared-memory kernel's is static).
    fn shared_bytes(self, levels: usize, bytes: usize) -> usize {
        match self {
            Tile::Shared { .. } => 0,
            Tile::Registers { warps, vec, .. } => 2 * levels * warps * 2 * 32 * vec * bytes,
        }
    }

    fn kernel(self) -> &'static str {
        match self {
            Tile::Shared { .. } => "heat_tb_pass",
            Tile::Registers { .. } => "heat_tb3_pass",
        }
    }

    fn defines(self, levels: usize) -> Vec<(&'static str, String)> {
        match self {
            Tile::Shared { x, y } => vec![
                ("TB_LEVELS", levels.to_string()),
                ("TB_X", x.to_string()),
                ("TB_Y", y.to_string()),
            ],
            Tile::Registers { rows, warps, vec } => vec![
                ("TB3_LEVELS", levels.to_string()),
                ("TB3_ROWS", rows.to_string()),
                ("TB3_WARPS", warps.to_string()),
                ("TB3_VEC", vec.to_string()),
            ],
        }
    }
}

/// The register tile KEISAN_HEAT_TB3=ROWSxWARPSxVEC asks for (tuning override).
fn tile_override() -> Option<Tile> {
    let v = std::env::var("KEISAN_HEAT_TB3").ok()?;
    let n: Vec<usize> = v
        .split('x')
        .map(|t| t.trim().parse().ok())
        .collect::<Option<_>>()?;
    match n[..] {
        [rows, warps, vec] if [1, 2, 4].contains(&vec) && rows > 0 && (1..=32).contains(&warps) => {
            Some(Tile::Registers { rows, warps, vec })
        }
        _ => None,
    }
}

/// The tile for `levels` levels of a grid of `shape`: in 3D with rows of whole vectors the
/// first register tile that allows it, else the first shared-memory tile that does.
fn tb_tile(shape: [usize; 3], dims: usize, levels: usize, bytes: usize) -> Option<Tile> {
    // 3 rows × 16 warps measured fastest at 4 steps/pass (docs/PERFORMANCE.md); the
    // others take passes whose state the first cannot hold.
    let registers = [(3, 16, 2), (2, 16, 2), (1, 32, 2)]
        .map(|(rows, warps, vec)| Tile::Registers { rows, warps, vec });
    let shared: &[(usize, usize)] = match dims {
        3 => &[(32, 16), (32, 32)],
        2 => &[(512, 1), (256, 1), (128, 1)],
        _ => &[],
    };
    let fits = |t: &Tile| match t {
        Tile::Registers { vec, .. } => dims == 3 && shape[2].is_multiple_of(*vec),
        Tile::Shared { .. } => true,
    };
    let preferred = tile_override().into_iter().chain(registers);
    preferred
        .filter(|_| dims == 3)
        .chain(shared.iter().map(|&(x, y)| Tile::Shared { x, y }))
        .find(|t| fits(t) && t.allows(levels, bytes))
}

/// The most steps per pass the tiles allow for a grid of `shape` (None in 1D).
fn tallest_levels(shape: [usize; 3], dims: usize, bytes: usize) -> Option<usize> {
    (1..=super::MAX_TEMPORAL_BLOCK)
        .take_while(|&l| tb_tile(shape, dims, l, bytes).is_some())
        .last()
}

/// What a register-tile pass covers, which fixes how much of its box is known when the
/// kernel is compiled (runtime box bounds cost registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// The whole grid (in-core); a failed pass reports its first step and is replayed.
    Grid,
    /// Any box (the pyramid's tasks), reporting the exact bad step.
    Boxes,
    /// Boxes of whole planes (a decomposed run's slabs), the plane's extent fixed at
    /// compile time, reporting a failed pass's first step (the slab replays the pass):
    /// no probe in the pass, which cost slabs 7–12 % (docs/PERFORMANCE.md).
    Slabs,
}

impl Span {
    const ALL: [Span; 3] = [Span::Grid, Span::Boxes, Span::Slabs];
}

/// The register tile's defines for passes over `span`.
fn register_defines(tile: Tile, levels: usize, span: Span) -> Vec<(&'static str, String)> {
    let mut d = tile.defines(levels);
    let (bounds, probe) = match span {
        Span::Grid => (0, 0),
        Span::Boxes => (1, 1),
        Span::Slabs => (2, 0),
    };
    d.push(("TB3_BOX", bounds.to_string()));
    d.push(("TB3_PROBE", probe.to_string()));
    d
}

/// A kernel the engine may build: its precision, defines and name.
pub type Variant = (Precision, Vec<(&'static str, String)>, &'static str);

/// The defines of every temporal-blocking kernel the engine may build by default, and of
/// the tallest pass each tile allows (for compile checks).
pub fn tb_variants() -> Vec<Variant> {
    let mut out = Vec::new();
    for precision in [Precision::F32, Precision::F64] {
        let bytes = precision.bytes();
        // Rows of whole vectors pick the register tile in 3D, odd rows the shared one.
        for (dims, shape) in [(2, [1, 64, 64]), (3, [64, 64, 64]), (3, [63, 63, 63])] {
            let tallest = tallest_levels(shape, dims, bytes);
            for levels in [Some(default_levels(dims, precision)), tallest]
                .into_iter()
                .flatten()
            {
                if let Some(tile) = tb_tile(shape, dims, levels, bytes) {
                    match tile {
                        Tile::Shared { .. } => {
                            out.push((precision, tile.defines(levels), tile.kernel()))
                        }
                        Tile::Registers { .. } => {
                            for span in Span::ALL {
                                let defines = register_defines(tile, levels, span);
                                out.push((precision, defines, tile.kernel()));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The temporal-blocking kernel: `levels` steps per pass through device memory, over the
/// whole grid (in-core) or, with the register tile, over a box (the pyramid's tasks).
pub struct TemporalBlock<T: Real> {
    pass: CudaFunction,
    levels: usize,
    tile: Tile,
    chunk: usize,
    /// Blocks that fill the device twice: box passes shorten their z chunks to reach it.
    enough_blocks: usize,
    p: HeatProblem,
    r: [T; 3],
}

impl<T: Real> TemporalBlock<T> {
    /// The in-core kernel; a non-finite value sets the bad-step flag to the pass's first
    /// step (the engine replays the pass to find the step).
    pub fn new(gpu: &Gpu, p: &HeatProblem, levels: usize) -> Result<Self> {
        let bytes = T::PRECISION.bytes();
        let tile = tb_tile(p.shape, p.dims, levels, bytes)
            .ok_or_else(|| Self::too_tall(p, p.shape, levels))?;
        Self::with_tile(gpu, p, levels, tile, Span::Grid)
    }

    /// The error for a pass of `levels` steps that no tile can take on boxes of `shape`.
    pub fn too_tall(p: &HeatProblem, shape: [usize; 3], levels: usize) -> Error {
        let bytes = T::PRECISION.bytes();
        let most = tallest_levels(shape, p.dims, bytes).unwrap_or(1);
        Error::invalid(
            "heat.temporal_block",
            levels,
            format!(
                "a {}D grid in {} takes at most {most} steps per pass (the tile's halo, \
                 registers and shared memory); 1 turns temporal blocking off",
                p.dims,
                T::PRECISION
            ),
        )
    }

    /// The kernel for boxes (`span` Boxes or Slabs) of a 3D grid (the register tile),
    /// `levels` steps per pass; None in 1D and 2D or for one step. Over Boxes it reports
    /// the exact step a value first went non-finite, since the pyramid cannot replay a
    /// pass; over Slabs the pass's first step, which the slab replays. A 3D pass the tile
    /// cannot take is refused if the problem asked for it, else (the default) left out.
    pub fn for_boxes(
        gpu: &Gpu,
        p: &HeatProblem,
        levels: usize,
        span: Span,
    ) -> Result<Option<Self>> {
        debug_assert!(span != Span::Grid, "the in-core pass is TemporalBlock::new");
        let bytes = T::PRECISION.bytes();
        // Any even width picks the register tile; each box is checked as it comes.
        let even = [p.shape[0], p.shape[1], 64];
        match tb_tile(even, p.dims, levels, bytes) {
            Some(tile @ Tile::Registers { .. }) if levels > 1 => {
                Self::with_tile(gpu, p, levels, tile, span).map(Some)
            }
            _ if levels > 1 && p.dims == 3 && p.temporal_block.is_some() => {
                Err(Self::too_tall(p, even, levels))
            }
            _ => Ok(None),
        }
    }

    fn with_tile(
        gpu: &Gpu,
        p: &HeatProblem,
        levels: usize,
        tile: Tile,
        span: Span,
    ) -> Result<Self> {
        let bytes = T::PRECISION.bytes();
        let defines = match tile {
            Tile::Registers { .. } => register_defines(tile, levels, span),
            Tile::Shared { .. } => tile.defines(levels),
        };
        let pass = gpu.function(&KERNELS, T::PRECISION, &defines, tile.kernel())?;
        let shared = tile.shared_bytes(levels, bytes);
        crate::device::cuda::allow_shared(&pass, shared)?;
        if std::env::var_os("KEISAN_TRACE").is_some() {
            use cudarc::driver::sys::CUfunction_attribute_enum as A;
            let regs = pass.get_attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?;
            let local = pass.get_attribute(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?;
            crate::say!(
                "temporal block: {levels} steps/pass, {tile:?} over {span:?}, {regs} \
                 registers, {local} B local, {shared} B dynamic shared"
            );
        }
        Ok(Self {
            pass,
            levels,
            tile,
            chunk: tb_chunk(p.dims)?,
            enough_blocks: 2 * gpu.multiprocessors,
            p: p.clone(),
            r: p.r().map(T::lit),
        })
    }

    pub fn levels(&self) -> usize {
        self.levels
    }

    /// How box passes tile a region (None for the shared-memory tile, which takes only
    /// the whole grid).
    pub fn shape(&self) -> Option<PassShape> {
        let Tile::Registers { rows, warps, vec } = self.tile else {
            return None;
        };
        let halo_x = self.levels.div_ceil(vec) * vec;
        Some(PassShape {
            levels: self.levels,
            vec,
            out_x: 32 * vec - 2 * halo_x,
            out_y: rows * warps - 2 * self.levels,
            tile: 32 * vec * rows * warps,
            chunk: self.chunk,
            enough_blocks: self.enough_blocks,
        })
    }

    /// Whether boxes of `shape` take several-step passes: rows of whole vectors.
    pub fn takes(&self, shape: [usize; 3]) -> bool {
        self.shape().is_some_and(|g| shape[2].is_multiple_of(g.vec))
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
        if let Tile::Registers { .. } = self.tile {
            let whole = Region {
                lo: [0; 3],
                hi: self.p.shape,
            };
            let done = self.pass_box(stream, src, dst, [0; 3], self.p.shape, &whole, step, bad)?;
            debug_assert!(done, "the register tile was chosen for this grid");
            return Ok(());
        }
        let [nz, ny, nx] = self.p.shape.map(|v| v as i32);
        let (dims, chunk) = (self.p.dims as i32, self.chunk as i32);
        let mut l = stream.launch_builder(&self.pass);
        l.arg(src).arg(dst).arg(&nz).arg(&ny).arg(&nx).arg(&dims);
        l.arg(&self.r[0]).arg(&self.r[1]).arg(&self.r[2]);
        l.arg(&chunk).arg(&step).arg(bad);
        // SAFETY: both buffers hold the grid; the kernel reads and writes grid points only.
        unsafe { l.launch(self.shared_config()) }?;
        Ok(())
    }

    /// `levels` steps of a box of `shape` at global `origin` from `src` into `dst`,
    /// writing `region` (local indices), the region valid after the pass: `levels` inside
    /// the region `src` holds valid values in, on every side that is not the grid's edge.
    /// False, launching nothing, where the box's rows are not whole vectors.
    #[allow(clippy::too_many_arguments)]
    pub fn pass_box(
        &self,
        stream: &CudaStream,
        src: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
        origin: [usize; 3],
        shape: [usize; 3],
        region: &Region,
        step: u64,
        bad: &mut CudaSlice<u64>,
    ) -> Result<bool> {
        let (Some(geometry), Tile::Registers { warps, .. }) = (self.shape(), self.tile) else {
            return Ok(false);
        };
        if !self.takes(shape) {
            return Ok(false);
        }
        if region.is_empty() {
            return Ok(true);
        }
        let args = box_args(src, dst, shape, region, origin, self.p.shape);
        let [tx, ty, chunk, chunks] = geometry.grid(region);
        let cfg = LaunchConfig {
            grid_dim: (tx as u32, ty as u32, chunks as u32),
            block_dim: (32, warps as u32, 1),
            shared_mem_bytes: self.tile.shared_bytes(self.levels, T::PRECISION.bytes()) as u32,
        };
        let chunk = chunk as i32;
        let mut l = stream.launch_builder(&self.pass);
        l.arg(src).arg(dst);
        for v in &args {
            l.arg(v);
        }
        l.arg(&self.r[0]).arg(&self.r[1]).arg(&self.r[2]);
        l.arg(&chunk).arg(&step).arg(bad);
        // SAFETY: both buffers hold the box, whose rows are whole vectors (checked) of an
        // aligned allocation; the kernel reads box points only and writes region points.
        unsafe { l.launch(cfg) }?;
        Ok(true)
    }

    fn shared_config(&self) -> LaunchConfig {
        let [nz, ny, nx] = self.p.shape;
        let levels = self.levels;
        let d3 = self.p.dims == 3;
        let march = if d3 { nz } else { ny };
        let Tile::Shared { x, y } = self.tile else {
            unreachable!("the shared-memory tile's launch")
        };
        let out_y = if d3 { y - 2 * levels } else { 1 };
        let tiles_y = if d3 { ny.div_ceil(out_y) } else { 1 };
        LaunchConfig {
            grid_dim: (
                nx.div_ceil(x - 2 * levels) as u32,
                tiles_y as u32,
                march.div_ceil(self.chunk) as u32,
            ),
            block_dim: (x as u32, y as u32, 1),
            shared_mem_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: usize = 4;
    const F64: usize = 8;

    #[test]
    fn rows_of_whole_vectors_take_the_register_tile_in_3d() {
        let t = tb_tile([64, 64, 64], 3, 4, F32);
        assert_eq!(
            t,
            Some(Tile::Registers {
                rows: 3,
                warps: 16,
                vec: 2
            })
        );
        // Odd rows cannot be read as pairs, and 2D keeps its row tiles.
        assert!(matches!(
            tb_tile([64, 64, 63], 3, 4, F32),
            Some(Tile::Shared { .. })
        ));
        assert!(matches!(
            tb_tile([1, 64, 64], 2, 4, F32),
            Some(Tile::Shared { .. })
        ));
    }

    #[test]
    fn taller_passes_move_to_taller_tiles_and_stop_where_state_would_spill() {
        // 3 rows × 16 warps (512 threads, 104 registers of state at most) holds
        // (2·8 + 1)·6 = 102 f32 values at 8 levels; in f64, (2·3 + 1)·12 = 84 at 3, not 4.
        let r = |rows, warps| {
            Some(Tile::Registers {
                rows,
                warps,
                vec: 2,
            })
        };
        assert_eq!(tb_tile([64, 64, 64], 3, 8, F32), r(3, 16));
        assert_eq!(tb_tile([64, 64, 64], 3, 3, F64), r(3, 16));
        assert_eq!(tb_tile([64, 64, 64], 3, 4, F64), r(2, 16));
        assert_eq!(tallest_levels([64, 64, 64], 3, F32), Some(8));
        assert_eq!(tallest_levels([64, 64, 64], 3, F64), Some(6));
        assert_eq!(tallest_levels([63, 63, 63], 3, F32), Some(6));
        for levels in 1..=8 {
            let t = tb_tile([64, 64, 64], 3, levels, F32).unwrap();
            if let Tile::Registers { rows, warps, vec } = t {
                let state = (2 * levels + 1) * rows * vec;
                assert!(4 * levels <= rows * warps, "{levels}: {t:?}");
                assert!(state <= state_registers(32 * warps), "{levels}: {t:?}");
            }
        }
    }

    #[test]
    fn variants_cover_both_kernels_in_both_precisions() {
        let v = tb_variants();
        for p in [Precision::F32, Precision::F64] {
            for k in ["heat_tb_pass", "heat_tb3_pass"] {
                assert!(
                    v.iter().any(|(q, _, name)| *q == p && *name == k),
                    "{p} {k}"
                );
            }
        }
    }
}
