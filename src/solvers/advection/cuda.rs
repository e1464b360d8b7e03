//! CUDA engine: both time layers (and du, dv when they come from arrays) on the device,
//! one launch per step (kernels.cu).

use std::f64::consts::PI;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use super::AdvectionProblem;
use super::presets::{Displacement, displacement_rows};
use crate::device::cuda::{Gpu, KernelSource, TensorMap, tensor_map_2d};
use crate::error::{Error, Result};
use crate::parallel::{Rows, Subdomain, Window, slab_view};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};
use crate::tuning;

pub const KERNELS: KernelSource = KernelSource {
    name: "advection/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// Values of padding before each field buffer (kernels.cu: ADV_PAD): the contest
/// boundary's columns read two values before the grid's first cell, and a pass's tiles
/// at the grid's sides read their halo columns where they lie (values the boundary never
/// lets into the grid) when the padding holds them, ADV_H + 2 ≤ 32 values. 2 + 128 bytes'
/// worth keeps the rows where they lay with 2 (the same alignment to 128-byte lines).
fn pad<T>() -> usize {
    2 + 128 / std::mem::size_of::<T>()
}

/// Values of padding after each field buffer: the side tiles' halo columns and pairs
/// past the last cell (up to ADV_COLS + 1).
fn pad_after<T>() -> usize {
    pad::<T>() + MAX_COLS + 1
}

/// Columns per thread (kernels.cu: ADV_COLS); KEISAN_ADV_COLS overrides it, up to
/// MAX_COLS (what pad_after() leaves room for).
const COLS: usize = 2;
const MAX_COLS: usize = 7;

fn cols() -> Result<usize> {
    Ok(tuning::number("KEISAN_ADV_COLS", 1..=MAX_COLS)?.unwrap_or(COLS))
}

/// The single-step kernel's launch: threads per block, rows per block, blocks per SM the
/// compiler must fit (a register cap) and adv_step_bulk's ring slots (0: not that kernel).
struct StepShape {
    threads: u32,
    rows: usize,
    min_blocks: u32,
    ring: usize,
}

/// The fastest shapes measured on the H100 (contest 5, velocity arrays, single steps).
/// adv_step (loads through L1): 64 threads of 2 columns by 64 rows (fastest of 1, 2, 4
/// columns × 64², 128×64, 128², 256×32, 32×256); f32 capped at 80 registers (12 blocks:
/// 1, 12, 16, 20 gave 2.12, 1.96, 2.11, 2.96 s, 2026-11-23), f64 uncapped (at 80 registers
/// it spills 636 B a thread). adv_step_bulk (2026-11-26, 05:33-05:40 UTC, 512 steps): f32
/// 128 threads × 32 rows, 16 slots, 80 registers: 388.9 ms, 95.8 % of the copy bandwidth
/// (64×64 with 8 slots 412.7 ms, 90.5 %; 256×64 with 4-16 slots 390.5-395.0 ms; 512×64
/// 388.9 ms); f64 256 × 32, 6 slots: 743.4 ms, 100.6 % (64×64: 763.7 ms; 128×32 and
/// 128×64 with 8 slots 755 ms). KEISAN_ADV_TILE=THREADSxROWS, KEISAN_ADV_MINB and
/// KEISAN_ADV_RING (0: adv_step) override them.
fn step_shape<T: Real>(bulk: bool) -> Result<StepShape> {
    use crate::precision::Precision::{F32, F64};
    let (threads, rows, min_blocks, ring) = match (T::PRECISION, bulk) {
        (F32, false) => (64, 64, 12, 0),
        (F64, false) => (64, 64, 1, 0),
        (F32, true) => (128, 32, 6, 16),
        (F64, true) => (256, 32, 1, 6),
    };
    let valid = |&x: &u32, &r: &usize| x.is_multiple_of(32) && (32..=1024).contains(&x) && r >= 1;
    let expect = "THREADSxROWS, THREADS a multiple of 32 up to 1024, e.g. 64x64";
    let (threads, rows) =
        tuning::pair("KEISAN_ADV_TILE", 'x', expect, valid)?.unwrap_or((threads, rows));
    let min_blocks = tuning::number("KEISAN_ADV_MINB", 1..=32u32)?.unwrap_or(min_blocks);
    let ring = match tuning::number("KEISAN_ADV_RING", 0..=64)? {
        Some(r) if bulk => r,
        _ => ring,
    };
    Ok(StepShape {
        threads,
        rows,
        min_blocks,
        ring,
    })
}

/// Whether adv_step_bulk can take the general form's single steps: its copies need every
/// row of the fields to start on 16 bytes (nx a multiple of 16 bytes' worth of values)
/// and an sm_90 device or newer.
fn bulk_rows<T: Real>(gpu: &Gpu, nx: usize) -> bool {
    gpu.compute_capability.0 >= 9 && rows_of_16_bytes::<T>(nx)
}

fn rows_of_16_bytes<T: Real>(nx: usize) -> bool {
    nx.is_multiple_of(16 / std::mem::size_of::<T>())
}

/// Threads per block of the several-steps pass (kernels.cu: adv_pass; one column each of
/// the first step's grown tile).
const PASS_THREADS: usize = 128;

/// Steps per pass and tile rows: the problem's steps per pass, or the fastest measured on
/// the H100 (contest 5; every pass reads f in its first step and writes g in its last):
/// 2 steps over 16-row tiles when du, dv come from arrays (2026-11-24, 21:43 UTC: 1.71 s
/// f32, against 1.86 s with the tile copied in and out; f64 3.44 s, 12 rows 3.53 s, 8 rows
/// 3.93 s); 2 steps over 32-row (f32) or 24-row (f64) tiles for the separable presets in
/// the kernel (0.575 s: 28 rows 0.580, 24 rows 0.606, 12 rows 0.620, 36–48 rows 0.64–0.76,
/// 3 steps 0.65; f64 1.09 s, 32 rows 1.36 s); single steps for the general form with the
/// velocity in the kernel (1.18 s on 2026-11-23; its passes took 1.28 s at best: bound by
/// instructions, not bytes). Since the side tiles read their halo in the padding (and
/// the L2 prefetch), 28 rows for f32 (2026-11-26, H100, three runs each: 28 rows 0.499,
/// 0.500, 0.501 s; 32 rows 0.500, 0.502, 0.503, 0.507 s); then 30 rows for f32 and 25 for
/// f64, multiples of the row loop's unroll by 5 (2026-11-26 04:13-04:18 UTC, H100: f32 30
/// rows 492.6-497.8 ms in 7 runs against 28 rows 495.8-503.5 ms in 6, 25 rows 500-503, 35
/// rows 502-504; f64 25 rows 968-972 ms against 24 rows 982-985, 30 rows 1033-1037);
/// kept with the four-row window of tiles whose y stencils start alike, unrolled by 4
/// (2026-11-27, 512 steps: f32 30 rows 117.1-117.5 ms, 26: 120.0-120.1, 28: 118.5-119.0,
/// 32: 120.5-120.9, 36: 128.7; f64 25 rows 221.5 ms, 24 and 28: 222.9, 20: 227.5).
/// Arrays on rows of 16 bytes took single steps since adv_step_bulk (2026-11-26, H100,
/// 512 steps of contest 5: f32 388.9 ms against 2 steps a pass 427 ms (1.707 s for 2048);
/// f64 743.4 ms against 916.8 ms), and since adv_pass_w its passes (WEIGHTED_STEPS) over
/// 64-row (f32, three rows of cells a thread) or 34-row (f64) tiles. KEISAN_ADV_PASS=S,TY
/// overrides.
fn pass_shape<T: Real>(
    p: &AdvectionProblem,
    arrays: bool,
    separable: bool,
) -> Result<(usize, usize)> {
    use crate::precision::Precision::{F32, F64};
    let weighted = arrays && rows_of_16_bytes::<T>(p.nx);
    let default = match (T::PRECISION, separable) {
        (F32, true) => (2, 30),
        (F64, true) => (2, 25),
        (F32, false) if weighted => (WEIGHTED_STEPS, 64),
        (F64, false) if weighted => (WEIGHTED_STEPS, 34),
        _ if arrays => (2, 16),
        _ => (1, 16),
    };
    let expect = "STEPS,ROWS (steps per pass, tile rows), both at least 1, e.g. 2,16";
    let env = tuning::pair("KEISAN_ADV_PASS", ',', expect, |&s, &ty| s >= 1 && ty >= 1)?;
    let (s, ty) = env.unwrap_or(default);
    Ok((p.steps_per_pass.unwrap_or(s), ty))
}

/// Steps per pass of adv_pass_w, the default for velocity arrays on rows of 16 bytes.
/// Contest 5, 512 steps on the H100, with the tiles by tensor copies (2026-11-26, 21:17–
/// 21:28 UTC): f32 3 steps over 56 × 56 tiles 219.2–220.8 ms, 56 × 48 219.5, 88 × 34
/// 228.4, 60 × 52 243.2, 52 × 60 259.3; 4 steps over 48 × 52 230.3, 56 × 44 260.1; 5
/// steps over 48 × 32 242.8; 2 steps over 56 × 60 257.4. f64: 3 steps over 40 × 34
/// 527.1 ms, 24 × 60 534.7, 32 × 43 587.3; 4 steps over 32 × 34 621.7. Single steps by
/// bulk copies: f32 389 ms, f64 743 ms.
const WEIGHTED_STEPS: usize = 3;

/// The tile of adv_pass_w (kernels.cu: ADV_WTX, ADV_TY, ADV_WE, ...): `tx` × `ty` cells
/// out; a thread owns 16 bytes' worth of adjacent cells on each of `rq` rows of the
/// first step's tile, grown by `e` columns (2·(steps − 1) rounded up to whole threads)
/// and 2·(steps − 1) rows on each side.
struct WeightedTile {
    tx: usize,
    ty: usize,
    /// Rows of cells a thread owns (kernels.cu: ADV_WRQ).
    rq: usize,
    threads: usize,
    /// Bytes of dynamic shared memory: three field buffers (the tile's, its partner, the
    /// next tile's, each grown by 2·steps + 2 columns and 2·steps rows on each side), two
    /// sets of the cells' du and dv (this tile's, the next one's), each on 128 bytes, two
    /// mbarriers.
    shared: usize,
    /// The tensor copies' boxes (columns, rows): a field buffer's, du's and dv's.
    boxes: [[u32; 2]; 2],
}

impl WeightedTile {
    /// The tile for `steps` steps and `ty` rows (fewer so that the first step's rows are a
    /// multiple of `rq`; fewer if the tile would pass 1024 threads' rows of cells, or 768
    /// from 5 steps a pass, times rq/2 for three or four rows a thread: the registers are
    /// those of 1024 threads of one row at 64 each, and the longer passes then spill —
    /// contest 5, 512 steps, H100: 5 steps over 48 × 48 tiles at 1024 threads 561 ms, 48 ×
    /// 32 at 768 threads 301.9 ms), `tx` columns: what leaves the first step's tile 64
    /// columns wide in f32 (16 threads' cells: 56 at 3 steps a pass, 48 at 4), 48 in f64
    /// (40 at 3 steps; KEISAN_ADV_WTX, a multiple of the cells per thread, overrides it).
    /// None where no tile fits.
    fn fit<T: Real>(steps: usize, ty: usize) -> Result<Option<Self>> {
        let size = std::mem::size_of::<T>();
        let q = 16 / size;
        let expect = format!("a multiple of {q} from {q} to 1024");
        let e = (2 * (steps - 1)).next_multiple_of(q);
        let grown: usize = if size == 4 { 64 } else { 48 };
        let tx = tuning::knob("KEISAN_ADV_WTX", &expect, |v| {
            v.parse()
                .ok()
                .filter(|&t: &usize| t.is_multiple_of(q) && (q..=1024).contains(&t))
        })?
        .unwrap_or(grown.saturating_sub(2 * e).max(q));
        // Rows of cells a thread: R rows read R + 3 buffer rows a step, not 4R. Two (512
        // threads of 128 registers for the same tile; contest 5, 512 steps, H100,
        // 2026-11-26 22:04 UTC: f32 185.4 ms against 206.9 for one, f64 453.5 against
        // 554.3 ms); three in f32 (384 threads of 168 registers over 56 × 64 tiles,
        // 2026-11-27 02:17 UTC: 158.2 ms against 163.1 for two over 56 × 56; four, 256
        // threads of 255 registers, 177.4; f64 three 386.3 against 377.2 ms).
        // KEISAN_ADV_WRQ (1 to 4) overrides it.
        let rq =
            tuning::number("KEISAN_ADV_WRQ", 1..=4usize)?.unwrap_or(if size == 4 { 3 } else { 2 });
        let per_row = (tx + 2 * e) / q;
        let grow = 4 * (steps - 1);
        // Threads' cells (rows of them): a thread of two rows takes twice the registers;
        // of 3 or 4 rows, fewer threads of up to 255.
        let most_threads = if steps <= 4 { 1024 } else { 768 } * rq.max(2) / 2;
        // The first step's rows in whole threads' rows.
        let Some(ty) = (most_threads / per_row)
            .checked_sub(grow)
            .and_then(|most| ((ty.min(most) + grow) / rq * rq).checked_sub(grow))
        else {
            return Ok(None);
        };
        if ty == 0 {
            return Ok(None);
        }
        let threads = per_row * (ty + grow) / rq;
        let (w, r) = (tx + 2 * e + 4, ty + 4 * steps);
        let on_lines = |n: usize| (n * size).next_multiple_of(128);
        // KEISAN_ADV_WSHARED_EXTRA: bytes more, for kernel experiments through
        // KEISAN_KERNELS_DIR whose layout takes more, or to time a larger one (the
        // one-velocity-set layout padded to this one's 133 KB, H100, 2026-11-27: 148.2 ms
        // against 148.5 for 512 steps of contest 5; the size alone costs nothing).
        let extra = tuning::number("KEISAN_ADV_WSHARED_EXTRA", 0..=1usize << 17)?.unwrap_or(0);
        let shared =
            128 + 3 * on_lines(w * r) + 4 * on_lines(per_row * q * (ty + grow)) + 16 + extra;
        // A tensor copy's box has at most 256 values on a side.
        let boxes = [[w, r], [per_row * q, ty + grow]];
        Ok((shared <= crate::device::cuda::MAX_DYNAMIC_SHARED
            && boxes.iter().flatten().all(|&n| n <= 256))
        .then_some(Self {
            tx,
            ty,
            rq,
            threads,
            shared,
            boxes: boxes.map(|b| b.map(|n| n as u32)),
        }))
    }
}

/// Columns per thread of the pass (1, 2 or 4: each step's grown tile is then a whole
/// number of them). The general form: one is fastest on the H100 (contest 5 with arrays,
/// 2026-11-24: 1.72 s; 2 columns 1.81 s at 6 blocks per SM, 2.12 s at 8; on 2026-11-23,
/// with the tile copied to shared memory, 2.18 s against 1.79). The separable form reads
/// its rows in pairs and takes 2. KEISAN_ADV_PASS_COLS overrides it.
fn pass_cols(separable: bool) -> Result<usize> {
    let env = tuning::knob("KEISAN_ADV_PASS_COLS", "1, 2 or 4", |v| {
        v.parse().ok().filter(|c| [1, 2, 4].contains(c))
    })?;
    Ok(env.unwrap_or(if separable { 2 } else { 1 }))
}

/// Rows ahead of its walk that a pass's first step asks L2 for (kernels.cu: ADV_PF): 4
/// for the separable form, which waits on those loads (contest 5 on the H100, velocity in
/// the kernel, 2026-11-25: 0.574 s without, 0.514 / 0.505 / 0.510 s at 2 / 4 / 8 rows
/// ahead; f64 1.089 -> 1.001 s), none for the general form, bound by instructions (1.715
/// -> 1.84 s with it). KEISAN_ADV_PF overrides it (0: none).
fn prefetch_rows(separable: bool) -> Result<usize> {
    let env = tuning::number("KEISAN_ADV_PF", 0..=64)?;
    Ok(env.unwrap_or(if separable { 4 } else { 0 }))
}

/// Threads per block of the pass: 128; KEISAN_ADV_PASS_BX (a multiple of 32) overrides it.
fn pass_threads() -> Result<usize> {
    let env = tuning::knob("KEISAN_ADV_PASS_BX", "a multiple of 32 up to 1024", |v| {
        v.parse()
            .ok()
            .filter(|&b: &usize| b.is_multiple_of(32) && (32..=1024).contains(&b))
    })?;
    Ok(env.unwrap_or(PASS_THREADS))
}

/// The kernels' velocity source (kernels.cu: ADV_MODE).
fn mode_of(d: Displacement) -> u8 {
    match d {
        Displacement::Arrays => 0,
        Displacement::Uniform(_) => 1,
        Displacement::Rotation(_) => 2,
        Displacement::Swirl { .. } => 3,
    }
}

/// Whether the kernels take the separable form (kernels.cu: adv_step_sep, adv_pass_sep):
/// for the uniform and rotation presets computed in the kernel (modes 1, 2), whose du
/// depends on the row only and dv on the column only. It rounds differently from the
/// general form; KEISAN_ADV_SEPARABLE=0 takes the general form for comparisons.
fn separable(mode: u8) -> Result<bool> {
    Ok(matches!(mode, 1 | 2) && tuning::switch("KEISAN_ADV_SEPARABLE")?.unwrap_or(true))
}

/// The several-steps pass: its kernel, launch and steps.
struct Pass {
    function: CudaFunction,
    cfg: LaunchConfig,
    steps: u64,
    /// Rows per tile.
    rows: usize,
    /// A persistent launch (adv_pass_w): at most this many blocks take the tiles in turn.
    resident: Option<u32>,
    /// adv_pass_w's tensor copies: their boxes, and the maps made for the buffers.
    boxes: Option<[[u32; 2]; 2]>,
    maps: Option<WeightedMaps>,
}

/// adv_pass_w's tensor maps (kernels.cu: fmap, umap, vmap): the field's for the buffer
/// read now and for the other one (they swap with the buffers), du's and dv's.
#[derive(Clone, Copy)]
struct WeightedMaps {
    field: [TensorMap; 2],
    du: TensorMap,
    dv: TensorMap,
}

impl Pass {
    /// A launch of `threads`-thread blocks over `tiles` (columns, rows of tiles) with
    /// `shared` bytes of dynamic shared memory, one step of one-row tiles until
    /// [`Pass::steps`] says otherwise.
    fn over_tiles(
        function: CudaFunction,
        tiles: [usize; 2],
        threads: usize,
        shared: usize,
    ) -> Result<Self> {
        crate::device::cuda::allow_shared(&function, shared)?;
        Ok(Pass {
            function,
            cfg: LaunchConfig {
                grid_dim: (tiles[0] as u32, tiles[1] as u32, 1),
                block_dim: (threads as u32, 1, 1),
                shared_mem_bytes: shared as u32,
            },
            steps: 1,
            rows: 1,
            resident: None,
            boxes: None,
            maps: None,
        })
    }

    /// The same launch taking `steps` steps over tiles of `rows` rows.
    fn steps(self, steps: usize, rows: usize) -> Self {
        Pass {
            steps: steps as u64,
            rows,
            ..self
        }
    }

    /// adv_pass_w's tensor maps for the buffers f and g (nbuf rows of nx reals after
    /// `pad` values), du and dv (nbuf rows of nx); nothing for the other kernels.
    fn bind<T: Real>(
        &mut self,
        stream: &Arc<CudaStream>,
        [f, g, du, dv]: [&CudaSlice<T>; 4],
        nx: usize,
        nbuf: usize,
        pad: usize,
    ) -> Result<()> {
        let Some([field, velocity]) = self.boxes else {
            return Ok(());
        };
        let size = std::mem::size_of::<T>();
        let map = |slice: &CudaSlice<T>, skip: usize, cols: usize, boxed| {
            let (ptr, _sync) = slice.device_ptr(stream);
            let dims = [cols as u64, nbuf as u64];
            tensor_map_2d(
                ptr + (skip * size) as u64,
                T::PRECISION,
                dims,
                (nx * size) as u64,
                boxed,
            )
        };
        // The field's maps start at column -2, on 16 bytes where the rows are (bulk_rows).
        self.maps = Some(WeightedMaps {
            field: [
                map(f, pad - 2, nx + 2, field)?,
                map(g, pad - 2, nx + 2, field)?,
            ],
            du: map(du, 0, nx, velocity)?,
            dv: map(dv, 0, nx, velocity)?,
        });
        Ok(())
    }
}

/// Where the kernel gets du, dv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VelocitySource {
    /// Read per node from arrays (the contest's setting; always for file velocities).
    Arrays,
    /// Computed in the kernel from the preset's formula (no velocity traffic).
    Kernel,
}

pub struct CudaAdvection<T: Real> {
    gpu: Arc<Gpu>,
    p: AdvectionProblem,
    /// The rows this engine computes and the rows its buffers hold.
    window: Window,
    f: CudaSlice<T>,
    g: CudaSlice<T>,
    du: CudaSlice<T>,
    dv: CudaSlice<T>,
    displacement: Displacement,
    /// The single-step kernel.
    step: Pass,
    pass: Option<Pass>,
    steps: u64,
    /// adv_nonfinite, and the flag it sets when an owned value is NaN or infinite.
    finite_check: CudaFunction,
    bad: CudaSlice<u32>,
    status: Status,
}

impl<T: Real> CudaAdvection<T> {
    /// `f0`: the field after `step0` steps; presets are evaluated in the kernel.
    pub fn new(gpu: Arc<Gpu>, p: &AdvectionProblem, f0: Vec<T>, step0: u64) -> Result<Self> {
        Self::with_velocity(gpu, p, f0, step0, VelocitySource::Kernel)
    }

    pub fn with_velocity(
        gpu: Arc<Gpu>,
        p: &AdvectionProblem,
        f0: Vec<T>,
        step0: u64,
        source: VelocitySource,
    ) -> Result<Self> {
        Self::on_window(
            gpu,
            p,
            Window::whole(p.ny, p.periodic()),
            &f0,
            step0,
            source,
        )
    }

    /// The displacement the kernel uses for `source`.
    fn displacement(p: &AdvectionProblem, source: VelocitySource) -> Displacement {
        match Displacement::of(p) {
            _ if source == VelocitySource::Arrays && !p.velocity.is_time_dependent() => {
                Displacement::Arrays
            }
            d => d,
        }
    }

    /// Steps one launch takes (and so one halo exchange of a slab serves) for `source`.
    pub fn steps_per_pass_for(p: &AdvectionProblem, source: VelocitySource) -> Result<u64> {
        let mode = mode_of(Self::displacement(p, source));
        Ok(match pass_shape::<T>(p, mode == 0, separable(mode)?)? {
            (s, _) if s > 1 && !p.velocity.is_time_dependent() => s as u64,
            _ => 1,
        })
    }

    /// An engine for the rows `window` owns; `full`: the whole field after `step0` steps
    /// (its halo rows are cut from it, then come from the neighbours).
    pub fn on_window(
        gpu: Arc<Gpu>,
        p: &AdvectionProblem,
        window: Window,
        full: &[T],
        step0: u64,
        source: VelocitySource,
    ) -> Result<Self> {
        let displacement = Self::displacement(p, source);
        let arrays = displacement == Displacement::Arrays;
        let buffer = window.rows * p.nx;
        let values = buffer * (2 + 2 * arrays as usize);
        gpu.ensure_fits(
            (values * std::mem::size_of::<T>()) as u128,
            "the advection fields (two time layers) and velocities",
        )?;
        let mode = mode_of(displacement);
        let separable = separable(mode)?;
        let steady = !p.velocity.is_time_dependent();
        let (per_pass, ty) = pass_shape::<T>(p, arrays, separable)?;
        // Passes of velocity arrays take adv_pass_w where it can (rows of 16 bytes for its
        // copies, an sm_90 device), and then its one-step form for steps left over, so
        // that every step of a run rounds alike.
        let weighted = arrays
            && steady
            && per_pass > 1
            && bulk_rows::<T>(&gpu, p.nx)
            && tuning::switch("KEISAN_ADV_WEIGHTS")?.unwrap_or(true)
            && WeightedTile::fit::<T>(per_pass, ty)?.is_some();
        let own = window.own.len();
        let step = if weighted {
            Self::weighted_pass(&gpu, p, own, 1, ty)?
        } else {
            Self::step(&gpu, p, own, mode, arrays, separable)?
        };
        let s = &gpu.stream;
        let (du, dv) = if arrays {
            let rows: Vec<usize> = (0..window.rows).map(|l| window.grid_row(l)).collect();
            let (du, dv) = displacement_rows::<T>(p, &rows)?;
            (gpu.upload(&du)?, gpu.upload(&dv)?)
        } else {
            (s.alloc_zeros::<T>(1)?, s.alloc_zeros::<T>(1)?)
        };
        let pass = match per_pass {
            s if s > 1 && steady && weighted => Some(Self::weighted_pass(&gpu, p, own, s, ty)?),
            s if s > 1 && steady => Some(Self::pass(&gpu, p, own, mode, s, ty)?),
            _ => None,
        };
        let (pad, after) = (pad::<T>(), pad_after::<T>());
        // The padding zero, the buffer's rows uploaded as they lie where they can be, and
        // g a device copy of f.
        let mut f = s.alloc_zeros::<T>(pad + buffer + after)?;
        let rows = slab_view(&window, full, p.nx);
        gpu.upload_into(&rows, &mut f.slice_mut(pad..pad + buffer))?;
        let g = s.clone_dtod(&f)?;
        let finite_check = gpu.function(&KERNELS, T::PRECISION, &[], "adv_nonfinite")?;
        let bad = s.alloc_zeros::<u32>(1)?;
        let (mut step, mut pass) = (step, pass);
        for launch in std::iter::once(&mut step).chain(pass.as_mut()) {
            launch.bind(s, [&f, &g, &du, &dv], p.nx, window.rows, pad)?;
        }
        Ok(Self {
            window,
            f,
            g,
            du,
            dv,
            displacement,
            step,
            pass,
            steps: step0,
            finite_check,
            bad,
            status: Status::Running,
            gpu,
            p: p.clone(),
        })
    }

    /// Whether every owned value of the current field is finite (one read of the owned
    /// rows; queued on the device's stream, read back at once).
    fn owned_finite(&mut self) -> Result<bool> {
        let own = self.window.own_in_buffer();
        let start = pad::<T>() + own.start * self.p.nx;
        let n = (own.len() * self.p.nx) as u64;
        let cfg = self.gpu.stride_config(n as usize, 256);
        let view = self.f.slice(start..start + n as usize);
        let s = &self.gpu.stream;
        let mut l = s.launch_builder(&self.finite_check);
        l.arg(&view).arg(&n).arg(&mut self.bad);
        // SAFETY: the view holds n values of f; bad holds one u32.
        unsafe { l.launch(cfg) }?;
        Ok(s.clone_dtoh(&self.bad)?[0] == 0)
    }

    /// Compile the single-step kernel for `rows` rows: adv_step_sep for the separable
    /// form, adv_step_bulk where the rows suit its copies (bulk_rows), else adv_step.
    fn step(
        gpu: &Gpu,
        p: &AdvectionProblem,
        rows: usize,
        mode: u8,
        arrays: bool,
        separable: bool,
    ) -> Result<Pass> {
        let bulk = !separable && bulk_rows::<T>(gpu, p.nx);
        let shape = step_shape::<T>(bulk)?;
        let cols = cols()?;
        let (name, ring) = match (separable, shape.ring) {
            (true, _) => ("adv_step_sep", 0),
            (false, 0) => ("adv_step", 0),
            (false, ring) => ("adv_step_bulk", ring),
        };
        // adv_step_bulk's ring: f rows with two halo columns each side, du and dv rows in
        // the arrays mode; an mbarrier per slot.
        let width = cols * shape.threads as usize;
        let slot = width + 4 + 2 * width * arrays as usize;
        let shared = ring * (slot * std::mem::size_of::<T>() + 8);
        if shared > crate::device::cuda::MAX_DYNAMIC_SHARED {
            return Err(Error::invalid(
                "KEISAN_ADV_RING",
                ring.to_string(),
                format!(
                    "{ring} slots of {slot} values need {shared} B of shared memory (at most 227 KiB)"
                ),
            ));
        }
        let defines = [
            ("ADV_MINB", shape.min_blocks.to_string()),
            ("ADV_BX", shape.threads.to_string()),
            ("ADV_COLS", cols.to_string()),
            ("ADV_MODE", mode.to_string()),
            ("ADV_PERIODIC", (p.periodic() as u8).to_string()),
            ("ADV_PAD", pad::<T>().to_string()),
            // Every module compiles adv_step_bulk, whose ring needs a slot even where
            // another kernel is launched.
            ("ADV_RING", ring.max(1).to_string()),
        ];
        let function = gpu.function(&KERNELS, T::PRECISION, &defines, name)?;
        let tiles = [p.nx.div_ceil(width), rows.div_ceil(shape.rows)];
        Pass::over_tiles(function, tiles, shape.threads as usize, shared)
            .map(|pass| pass.steps(1, shape.rows))
    }

    /// Compile the pass of `steps` steps over tiles of `ty` rows, for `rows` rows.
    fn pass(
        gpu: &Gpu,
        p: &AdvectionProblem,
        rows: usize,
        mode: u8,
        steps: usize,
        ty: usize,
    ) -> Result<Pass> {
        let separable = separable(mode)?;
        let (cols, threads) = (pass_cols(separable)?, pass_threads()?);
        let tx = cols * threads - 4 * (steps - 1);
        let (w, r) = (tx + 4 * steps, ty + 4 * steps);
        // Field buffers (kernels.cu: ADV_NBUF): one at 2 steps (the first step reads f, the
        // last writes g), two from 3; and the separable kernel's x weights (Lagrange, five
        // values aligned to 16 bytes per tile row).
        let buffers = if steps == 2 { 1 } else { 2 };
        let weights = (5 * std::mem::size_of::<T>()).next_multiple_of(16);
        let shared = buffers * w * r * std::mem::size_of::<T>() + r * weights * separable as usize;
        if shared > crate::device::cuda::MAX_DYNAMIC_SHARED || ty == 0 {
            return Err(Error::invalid(
                "KEISAN_ADV_PASS",
                format!("{steps},{ty}"),
                format!(
                    "a tile of {w} x {r} cells needs {shared} B of shared memory (at most 227 KiB)"
                ),
            ));
        }
        // Blocks per SM the compiler must fit: 8 for the general f32 pass (64 registers;
        // contest 5 with arrays: 1.72 s against 2.32 s uncapped, 2026-11-24); the others
        // gain nothing from a cap.
        let min_blocks = match (T::PRECISION, separable) {
            (crate::precision::Precision::F32, false) => 8,
            _ => 1,
        };
        let defines = [
            ("ADV_PASS_MINB", min_blocks.to_string()),
            ("ADV_PF", prefetch_rows(separable)?.to_string()),
            ("ADV_BX", threads.to_string()),
            ("ADV_MODE", mode.to_string()),
            ("ADV_PERIODIC", (p.periodic() as u8).to_string()),
            ("ADV_STEPS", steps.to_string()),
            ("ADV_COLS", cols.to_string()),
            ("ADV_TY", ty.to_string()),
            ("ADV_PAD", pad::<T>().to_string()),
            ("ADV_PAD_AFTER", pad_after::<T>().to_string()),
        ];
        let name = if separable {
            "adv_pass_sep"
        } else {
            "adv_pass"
        };
        let function = gpu.function(&KERNELS, T::PRECISION, &defines, name)?;
        Pass::over_tiles(
            function,
            [p.nx.div_ceil(tx), rows.div_ceil(ty)],
            threads,
            shared,
        )
        .map(|pass| pass.steps(steps, ty))
    }

    /// Compile adv_pass_w (velocity arrays, each cell's weights in registers) for
    /// `steps` steps over tiles of `ty` rows (fewer where WeightedTile::fit says so).
    fn weighted_pass(
        gpu: &Gpu,
        p: &AdvectionProblem,
        rows: usize,
        steps: usize,
        ty: usize,
    ) -> Result<Pass> {
        let Some(tile) = WeightedTile::fit::<T>(steps, ty)? else {
            return Err(Error::invalid(
                "steps_per_pass",
                steps.to_string(),
                "too many steps for one pass of adv_pass_w's tiles",
            ));
        };
        let (tx, ty, threads, shared) = (tile.tx, tile.ty, tile.threads, tile.shared);
        let min_blocks = tuning::number("KEISAN_ADV_WMINB", 1..=8u32)?.unwrap_or(1);
        let defines = [
            ("ADV_WMINB", min_blocks.to_string()),
            ("ADV_WTX", tx.to_string()),
            ("ADV_WRQ", tile.rq.to_string()),
            ("ADV_MODE", "0".to_string()),
            ("ADV_PERIODIC", (p.periodic() as u8).to_string()),
            ("ADV_STEPS", steps.to_string()),
            ("ADV_TY", ty.to_string()),
            ("ADV_PAD", pad::<T>().to_string()),
            ("ADV_PAD_AFTER", pad_after::<T>().to_string()),
        ];
        let function = gpu.function(&KERNELS, T::PRECISION, &defines, "adv_pass_w")?;
        let tiles = [p.nx.div_ceil(tx), rows.div_ceil(ty)];
        let mut pass = Pass::over_tiles(function, tiles, threads, shared)?.steps(steps, ty);
        pass.resident = Some(
            tuning::number("KEISAN_ADV_WBLOCKS", 1..=1 << 20)?
                .unwrap_or(gpu.multiprocessors as u32 * min_blocks),
        );
        pass.boxes = Some(tile.boxes);
        Ok(pass)
    }

    /// Steps per launch (1 without the several-steps pass).
    pub fn steps_per_pass(&self) -> u64 {
        self.pass.as_ref().map_or(1, |p| p.steps)
    }

    /// Queue `steps` (one, or a whole pass) of the grid rows `rows`, reading f and
    /// writing g; [`Subdomain::commit`] makes g the current field.
    fn launch(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let pass = match &self.pass {
            Some(pass) if steps == pass.steps => pass,
            _ if steps == 1 => &self.step,
            _ => {
                return Err(Error::Parse(format!(
                    "internal: {steps} steps in one launch of the advection engine"
                )));
            }
        };
        let (function, mut cfg, tile, maps) = (&pass.function, pass.cfg, pass.rows, pass.maps);
        cfg.grid_dim.1 = rows.len().div_ceil(tile) as u32;
        if let Some(blocks) = pass.resident {
            cfg.grid_dim = ((cfg.grid_dim.0 * cfg.grid_dim.1).min(blocks), 1, 1);
        }
        let a = self.velocity_args(self.steps);
        let (nx, ny) = (self.p.nx as i32, self.p.ny as i32);
        let w = &self.window;
        let (base, nbuf) = (w.base as i32, w.rows as i32);
        let (jw0, jw1, tile) = (rows.start as i32, rows.end as i32, tile as i32);
        let mut l = stream.unwrap_or(&self.gpu.stream).launch_builder(function);
        l.arg(&self.f).arg(&mut self.g).arg(&self.du).arg(&self.dv);
        l.arg(&a[0]).arg(&a[1]).arg(&a[2]).arg(&a[3]);
        l.arg(&nx)
            .arg(&ny)
            .arg(&base)
            .arg(&nbuf)
            .arg(&jw0)
            .arg(&jw1)
            .arg(&tile);
        if let Some(m) = &maps {
            l.arg(&m.field[0]).arg(&m.du).arg(&m.dv);
        }
        // SAFETY: f and g hold nbuf rows of nx after pad() values and pad_after() after them,
        // du and dv nbuf rows in the arrays mode (else they are not read); jw0..jw1 lie
        // in the owned rows; the kernels read f and write g's rows jw0..jw1 only (the
        // pass's shared memory is its launch's); adv_step_bulk copies f's rows from two
        // values before a row to two after its end (inside the padding) and whole du, dv
        // rows of the owned rows, all on 16-byte boundaries (bulk_rows); adv_pass_w's
        // tensor maps were made for these f, g (swapped with them in commit), du and dv,
        // with their extents: a box reaching past one (the grid's side tiles) is filled
        // with zeros there by the copy engine, which reads nothing outside it.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The kernel's velocity coefficients for the step starting at step `k`.
    fn velocity_args(&self, k: u64) -> [T; 4] {
        let p = &self.p;
        match self.displacement {
            Displacement::Arrays => [T::zero(); 4],
            Displacement::Uniform([a, b]) => [T::lit(a), T::lit(b), T::zero(), T::zero()],
            Displacement::Rotation(c) => c.map(T::lit),
            Displacement::Swirl { period } => {
                let c = (PI * (k as f64 * p.dt + 0.5 * p.dt) / period).cos();
                let [lx, ly] = p.extent();
                [
                    T::lit(-lx * c * p.dt / p.dx),
                    T::lit(ly * c * p.dt / p.dy),
                    T::zero(),
                    T::zero(),
                ]
            }
        }
    }
}

impl<T: Real> Engine for CudaAdvection<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let mut left = steps;
        while left > 0 {
            let k = match &self.pass {
                Some(pass) if left >= pass.steps => pass.steps,
                _ => 1,
            };
            self.launch(k, self.window.own.clone(), None)?;
            self.commit(k);
            left -= k;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        // Between chunks, not per step: a value that went NaN or infinite stays so (the
        // interpolation carries it), and the stop names the chunk's last step.
        if self.status == Status::Running && !self.owned_finite()? {
            self.status = Status::NonFinite;
        }
        Ok(Diagnostics::steps_only(self.steps, self.status))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(super::field_of(&self.p, data))
    }
}

impl<T: Real> Subdomain for CudaAdvection<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.p.nx
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Device {
            gpu: &self.gpu,
            buf: &mut self.f,
            offset: pad::<T>(),
        }
    }
    fn steps_per_exchange(&self) -> u64 {
        (self.window.halo as u64 / 2).max(1)
    }
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        self.launch(steps, rows, stream)
    }
    fn commit(&mut self, steps: u64) {
        std::mem::swap(&mut self.f, &mut self.g);
        for launch in std::iter::once(&mut self.step).chain(self.pass.as_mut()) {
            if let Some(maps) = &mut launch.maps {
                maps.field.swap(0, 1);
            }
        }
        self.steps += steps;
    }
}
