//! CUDA engine of the blocked kernel (`SweepKernel::Blocked`, kernels.cu `es_blocked`):
//! the update from a stencil table (stencil_table.rs) in passes of two red-black
//! iterations through device memory, V in the natural layout (rows padded to an even
//! pitch), two buffers. A pass that ends where the run tests convergence (every
//! `check_interval`, an even count) or at its last iteration reduces that iteration's
//! residual and sets the device-side stop flag; the passes between skip the sums (6 % of a
//! pass in f32, 18 % in f64). Passes start at even counts (a pass of one realigns them), so
//! a run stops where the table form's CPU engine does. Its V differs from the per-colour engines' in the
//! last bits (the table's weights are rounded once); it equals [`stencil_table::iterate`]'s
//! bit for bit.
//!
//! On a slab of a decomposed run (four halo planes each side) a pass is two iterations of
//! the owned planes a compute call names (one, to reach an even count), from the buffer's
//! halo as the neighbours last sent it: the wavefront's levels start four planes below the
//! first output plane and end three above the last, computing there what the neighbours
//! compute, so one exchange serves two iterations. The bands and the interior read one
//! buffer and write the other, so they run side by side. V equals the one-device engine's
//! bit for bit; each call's (res², V²) of a measured iteration lands in a ring that
//! es_record adds up over the slabs, stopping at the tested counts only, which end passes.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::stencil_table::{self, StencilTable};
use super::{ElectrostaticsProblem, Geometry, cpu};
use crate::device::cuda::{Gpu, allow_shared};
use crate::error::Result;
use crate::parallel::{PARTIAL_STEPS, Partials, Rows, Subdomain, Window, advance_alone};
use crate::precision::{Precision, Real};
use crate::run::{Diagnostics, Engine, Field, Restart, Status};

/// Residual history slots on the device.
const HISTORY: usize = PARTIAL_STEPS;
/// A slab's compute calls per iteration at most (two bands and the interior), and its
/// ring values per iteration: (res², V²) per call.
const CALLS: usize = 3;
const PER_STEP: usize = 2 * CALLS;

/// Rows per thread and warps per block (kernels.cu ES_TB_R, ES_TB_W): the most registers
/// per thread without spills at one block per multiprocessor (f32: 160 registers; f64:
/// 128 at 512 threads; docs/PERFORMANCE.md).
fn shape(precision: Precision) -> (usize, usize) {
    match precision {
        Precision::F32 => (4, 12),
        Precision::F64 => (2, 16),
    }
}

/// Shared memory of a pass of `levels` before its table: two buffers of every level's
/// edge rows (a pair of values a lane, two rows a warp).
fn edge_bytes(precision: Precision, levels: usize) -> usize {
    2 * levels * shape(precision).1 * 64 * 2 * precision.bytes()
}

/// Bytes of a block's shared memory left for the table beside a two-iteration pass's
/// edge rows (less 1 KiB for the kernel's static shared memory).
fn table_room(precision: Precision) -> usize {
    crate::device::cuda::MAX_DYNAMIC_SHARED - edge_bytes(precision, 4) - 1024
}

/// The most table entries the blocked kernel takes in `precision` (the same on any device:
/// in f32 about 5700, in f64 1500).
pub fn most_entries(precision: Precision) -> usize {
    table_room(precision) / (stencil_table::WEIGHTS * precision.bytes())
}

/// Whether a table of `entries` stencils fits the blocked kernel in `precision`.
pub fn table_fits(entries: usize, precision: Precision) -> bool {
    entries <= most_entries(precision)
}

/// Planes per block (even, at most 128): the fewest waves × (planes + 6), one block per
/// multiprocessor at a time, the 6 a chunk's own cost (its march starts below it). That
/// ranks the chunks measured at 256³ and 384³ in their measured order, where the tiles
/// alone leave a wave part-empty (2026-11-28, H200: 256³ 83.1 µs an iteration at 38 planes
/// against 116.6 µs at 64); larger chunks measured slower at 512³ (docs/PERFORMANCE.md).
fn chunk_planes(tiles_xy: usize, nz: usize, multiprocessors: usize) -> usize {
    let cost = |planes: usize| {
        let blocks = tiles_xy * nz.div_ceil(planes);
        blocks.div_ceil(multiprocessors.max(1)) * (planes + 6)
    };
    let most = (nz + (nz & 1)).clamp(2, 128);
    // The largest chunk of the least cost (fewer blocks where they tie).
    (1..=most / 2)
        .rev()
        .map(|h| 2 * h)
        .min_by_key(|&p| cost(p))
        .unwrap_or(2)
}

struct Pass {
    function: CudaFunction,
    /// Tiles in x and y; threads per block; shared memory per block.
    tiles: (u32, u32),
    block: (u32, u32, u32),
    shared: u32,
}

/// What the blocked kernel's passes of one mesh have in common.
struct PassSpec {
    /// A charge term per node (`ES_TB_Q`).
    charge: bool,
    entries: usize,
    /// Values per row (padded) and rows per plane.
    pitch: usize,
    ny: usize,
}

impl PassSpec {
    /// Tiles in x and y of a pass of `levels` (4: two iterations; 2: one).
    fn tiles(&self, precision: Precision, levels: usize) -> (usize, usize) {
        tiles(precision, levels, self.pitch, self.ny)
    }

    /// The pass of `levels`, with or without its last iteration's residual sums.
    fn pass<T: Real>(&self, gpu: &Gpu, levels: usize, sums: bool) -> Result<Pass> {
        let (r, w) = shape(T::PRECISION);
        let defines = [
            ("ES_TB_T", levels.to_string()),
            ("ES_TB_R", r.to_string()),
            ("ES_TB_W", w.to_string()),
            ("ES_TB_Q", (self.charge as u8).to_string()),
            ("ES_TB_SUMS", (sums as u8).to_string()),
        ];
        let function = gpu.function(&super::cuda::KERNELS, T::PRECISION, &defines, "es_blocked")?;
        let shared = edge_bytes(T::PRECISION, levels)
            + self.entries * stencil_table::WEIGHTS * size_of::<T>();
        allow_shared(&function, shared)?;
        let (tx, ty) = self.tiles(T::PRECISION, levels);
        Ok(Pass {
            function,
            tiles: (tx as u32, ty as u32),
            block: (32, w as u32, 1),
            shared: shared as u32,
        })
    }
}

/// Tiles in x and y of a pass of `levels` over planes of `ny` rows of `pitch` values: a
/// tile's output shrinks by the levels' halo on each side.
fn tiles(precision: Precision, levels: usize, pitch: usize, ny: usize) -> (usize, usize) {
    let (r, w) = shape(precision);
    let (txo, tyo) = (64 - 2 * levels.div_ceil(2) * 2, w * r - 2 * levels);
    (pitch.div_ceil(txo), ny.div_ceil(tyo))
}

pub struct CudaBlocked<T: Real> {
    gpu: Arc<Gpu>,
    p: ElectrostaticsProblem,
    counts: [usize; 3],
    pitch: usize,
    /// The planes this engine updates and holds (the whole mesh, or a slab's).
    window: Window,
    v: [CudaSlice<T>; 2],
    ids: CudaSlice<u16>,
    table: CudaSlice<T>,
    /// Each node's charge term (the ids' layout), or one unused value.
    charge: CudaSlice<T>,
    entries: i32,
    /// Per compute call (a slab's may run side by side): block partials and ticket.
    scratch: Vec<(CudaSlice<f64>, CudaSlice<u32>)>,
    /// A slab's sums of iteration k at (k mod PARTIAL_STEPS)·PER_STEP (one unused value
    /// on the whole mesh).
    ring: CudaSlice<f64>,
    ctl: CudaSlice<u64>,
    hist: CudaSlice<f64>,
    /// Passes of two iterations and of one, [plain, with the residual sums of their
    /// last iteration] (the sums only where the run measures it). Passes of one only
    /// realign a run at an odd count, so they are loaded when first launched.
    two: [Pass; 2],
    one: [Option<Pass>; 2],
    spec: PassSpec,
    /// A slab's book-keeping (es_record).
    record: Option<CudaFunction>,
    /// Every pass takes the form with the sums (halos by NCCL: see `halos_by_nccl`).
    sums_every_pass: bool,
    chunk: usize,
    /// The buffer the next pass reads.
    input: usize,
    launched: u64,
    /// A slab's iterations recorded (es_record queued).
    recorded: u64,
    reported: u64,
    calls: usize,
}

impl<T: Real> CudaBlocked<T> {
    pub fn new(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        g: &Geometry,
        restart: Option<Restart<T>>,
    ) -> Result<Self> {
        let table: StencilTable<T> = stencil_table::build_or_refuse(p, g)?;
        let (v0, step, status) = cpu::starting_state(g, restart)?;
        let window = Window::whole(g.counts[2], false);
        Self::on_window(gpu, p, &table, g.counts, window, &v0, step, status)
    }

    /// An engine for the z-planes `window` owns, with the whole mesh's table `t`, from the
    /// whole potential `v` (unpadded) after `step` iterations in `status`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_window(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        t: &StencilTable<T>,
        counts: [usize; 3],
        window: Window,
        v: &[T],
        step: u64,
        status: Status,
    ) -> Result<Self> {
        let ny = counts[1];
        let pitch = t.pitch;
        let per_node = (2 + t.charge.is_some() as usize) * size_of::<T>() + 2;
        gpu.ensure_fits(
            (per_node * pitch * ny * window.rows) as u128,
            "the blocked kernel's two buffers of V and the ids",
        )?;
        let padded = stencil_table::pad_window(v, counts, &window, pitch);
        let size = std::mem::size_of::<T>();
        let (tx, ty) = tiles(T::PRECISION, 4, pitch, ny);
        let chunk = match crate::tuning::knob("KEISAN_ES_CHUNK", "an even number of planes", |v| {
            v.parse::<usize>().ok().filter(|&c| c >= 2 && c % 2 == 0)
        })? {
            Some(c) => c,
            None => chunk_planes(tx * ty, window.own.len(), gpu.multiprocessors),
        };
        let entries = t.entries();
        let most = table_room(T::PRECISION);
        if entries * stencil_table::WEIGHTS * size > most {
            return Err(stencil_table::refusal(
                p,
                &format!(
                    "its {entries} stencils take {} KiB of weights in {}; a block's shared memory \
                 holds {} KiB beside the kernel's rows (in f32 about 5700 stencils, in f64 1500)",
                    (entries * stencil_table::WEIGHTS * size) >> 10,
                    T::PRECISION,
                    most >> 10
                ),
            ));
        }
        let spec = PassSpec {
            charge: t.charge.is_some(),
            entries,
            pitch,
            ny,
        };
        let two = [
            spec.pass::<T>(&gpu, 4, false)?,
            spec.pass::<T>(&gpu, 4, true)?,
        ];
        let slab = window.rows != counts[2];
        let record = match slab {
            true => Some(gpu.function(&super::cuda::KERNELS, T::PRECISION, &[], "es_record")?),
            false => None,
        };
        // Block partials for the largest grid a call launches (every call's planes lie
        // among the owned ones).
        let blocks = [4, 2]
            .map(|levels| {
                let (tx, ty) = spec.tiles(T::PRECISION, levels);
                tx * ty
            })
            .into_iter()
            .max()
            .unwrap_or(1)
            * window.own.len().div_ceil(chunk);
        let s = &gpu.stream;
        let (ids, charge) = t.window_view(&window, ny);
        let scratch = (0..if slab { CALLS } else { 1 })
            .map(|_| Ok((s.alloc_zeros::<f64>(4 * blocks)?, s.alloc_zeros::<u32>(1)?)))
            .collect::<Result<Vec<_>>>()?;
        // Both buffers start from the same V: one upload, then a device copy.
        let first = gpu.upload(&padded)?;
        Ok(Self {
            v: [s.clone_dtod(&first)?, first],
            ids: gpu.upload(&ids)?,
            table: s.clone_htod(&t.table)?,
            charge: match &charge {
                Some(b) => gpu.upload(b)?,
                None => s.alloc_zeros::<T>(1)?,
            },
            entries: entries as i32,
            scratch,
            ring: s.alloc_zeros::<f64>(if slab { PARTIAL_STEPS * PER_STEP } else { 1 })?,
            ctl: s.clone_htod(&[step, status.device_flag(), 0])?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            two,
            one: [None, None],
            spec,
            record,
            sums_every_pass: false,
            chunk,
            input: 0,
            launched: step,
            recorded: step,
            reported: step,
            calls: 0,
            counts,
            pitch,
            window,
            gpu,
            p: p.as_table(),
        })
    }

    fn is_slab(&self) -> bool {
        self.record.is_some()
    }

    /// A pass of `iterations` (1 or 2) of the grid planes `planes` from buffer `input`
    /// into the other, on `stream`, with block partials `scratch`; its sums into the
    /// device address `slot` (a slab's), else its verdict into ctl.
    fn launch(
        &mut self,
        iterations: u64,
        planes: Range<usize>,
        slot: u64,
        scratch: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        // The sums where the run measures the pass's last iteration (es_record takes
        // only those iterations' sums, whichever form a pass took).
        let done = self.launched + iterations;
        let sums = (self.sums_every_pass || self.p.measures_after(done)) as usize;
        let pass = match iterations {
            2 => &self.two[sums],
            _ => match &mut self.one[sums] {
                Some(one) => &*one,
                empty => empty.insert(self.spec.pass::<T>(&self.gpu, 2, sums == 1)?),
            },
        };
        let cfg = LaunchConfig {
            grid_dim: (
                pass.tiles.0,
                pass.tiles.1,
                planes.len().div_ceil(self.chunk).max(1) as u32,
            ),
            block_dim: pass.block,
            shared_mem_bytes: pass.shared,
        };
        let [nz, ny] = [self.counts[2] as i32, self.counts[1] as i32];
        let (px, chunk) = (self.pitch as i32, self.chunk as i32);
        let w = &self.window;
        let kbase = w.base as i32;
        let (zlo, zhi) = (kbase.max(0), (kbase + w.rows as i32).min(nz));
        let (zfirst, zend) = (planes.start as i32, planes.end as i32);
        let (tol, iteration) = (self.p.tolerance_after(done), self.launched);
        let hist_len = HISTORY as u32;
        let out = 1 - self.input;
        let out_buf = out as i32;
        let [a, b] = &mut self.v;
        let (src, dst) = if self.input == 0 { (a, b) } else { (b, a) };
        let (partials, ticket) = &mut self.scratch[scratch];
        let mut l = stream.launch_builder(&pass.function);
        l.arg(&*src)
            .arg(dst)
            .arg(&self.ids)
            .arg(&self.table)
            .arg(&self.charge);
        l.arg(&self.entries);
        l.arg(&nz).arg(&ny).arg(&px).arg(&chunk);
        l.arg(&kbase).arg(&zlo).arg(&zhi).arg(&zfirst).arg(&zend);
        l.arg(&tol).arg(&iteration);
        let slot_step = PER_STEP as i32;
        l.arg(partials)
            .arg(ticket)
            .arg(&mut self.ctl)
            .arg(&mut self.hist)
            .arg(&hist_len)
            .arg(&out_buf)
            .arg(&slot)
            .arg(&slot_step);
        // SAFETY: es_blocked's parameters in order: both buffers hold pitch·ny values for
        // each of the window's planes, ids as many 16-bit ids, the charge terms as many
        // values (or 1, unread), the table `entries` entries of 8 values, partials 4
        // values per block of the largest grid, ctl 3 counters, hist HISTORY values, slot
        // (when not 0) two values in the pass's last iteration's step of the ring (a
        // pass of two starts at an even step, so its second does not wrap); the pass reads planes
        // zlo..zhi (those the buffers hold, within the mesh) and writes `planes` (owned);
        // all live as long as the engine.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// A whole-mesh pass on the engine's stream.
    fn pass(&mut self, iterations: u64) -> Result<()> {
        let stream = self.gpu.stream.clone();
        self.launch(iterations, 0..self.counts[2], 0, 0, &stream)?;
        self.input = 1 - self.input;
        self.launched += iterations;
        Ok(())
    }

    /// The buffer holding the state after the iterations the device has done: the last
    /// pass that ran wrote its output buffer in ctl[2] (0, where the start is, before
    /// any; passes queued after a stop return at once).
    fn current(&self) -> Result<usize> {
        Ok(self.gpu.stream.clone_dtoh(&self.ctl)?[2] as usize)
    }

    fn slot(&self, call: usize) -> u64 {
        let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(&self.ring, &self.gpu.stream);
        let at = (self.launched as usize % PARTIAL_STEPS) * PER_STEP + 2 * call;
        ptr + (at * std::mem::size_of::<f64>()) as u64
    }
}

impl<T: Real> Engine for CudaBlocked<T> {
    type Real = T;

    /// Passes of two iterations from an even count, so that every even count (where a
    /// run may stop) ends a pass: a pass of one first from an odd count, and last for an
    /// odd remainder.
    fn advance(&mut self, steps: u64) -> Result<()> {
        if self.is_slab() {
            let gpu = self.gpu.clone();
            return advance_alone(self, &gpu, steps);
        }
        let mut left = steps;
        if left > 0 && self.launched % 2 == 1 {
            self.pass(1)?;
            left -= 1;
        }
        for _ in 0..left / 2 {
            self.pass(2)?;
        }
        if left % 2 == 1 {
            self.pass(1)?;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
        // Passes queued after a stop returned at once: the device's count and buffer are
        // the truth.
        (self.launched, self.recorded, self.input) = (ctl[0], ctl[0], ctl[2] as usize);
        Diagnostics::from_device(&self.gpu, ctl[0], ctl[1], &self.hist, &mut self.reported)
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = match self.is_slab() {
            true => self.owned()?,
            false => stencil_table::unpad(
                &self.gpu.download(&self.v[self.current()?].as_view())?,
                self.counts,
                self.pitch,
            ),
        };
        Ok(cpu::field_of(&self.p, "V", data))
    }

    fn describe(&self) -> Option<String> {
        let (b, t) = (self.two[1].block, self.two[1].tiles);
        let chunks = self.window.own.len().div_ceil(self.chunk);
        let k = self.p.check_interval();
        let sums = match self.sums_every_pass {
            true => format!("residual sums every pass beside NCCL, tested every {k} iterations"),
            false => format!("residual sums every {k} iterations"),
        };
        Some(format!(
            "blocked (two iterations a pass from a table of {} stencils; blocks of {}×{} threads, {} of them, {} planes each; {sums})",
            self.entries,
            b.0,
            b.1,
            t.0 as usize * t.1 as usize * chunks,
            self.chunk,
        ))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        super::cuda::STOP_CHECK
    }
}

impl<T: Real> Subdomain for CudaBlocked<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.pitch * self.counts[1]
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Device {
            gpu: &self.gpu,
            buf: &mut self.v[self.input],
            offset: 0,
        }
    }
    fn steps_per_exchange(&self) -> u64 {
        2
    }
    /// Beside NCCL's kernels the passes without the sums ran slower, not faster: 2 × H200,
    /// 512³ f32 on two slabs, 327 µs an iteration against 277 µs with the sums in every
    /// pass (the interior's end 607 against 512 µs into a pass; by peer copies 265
    /// against 277 µs; docs/PERFORMANCE.md). So with NCCL every pass sums.
    fn halos_by_nccl(&mut self) {
        self.sums_every_pass = true;
    }
    /// Passes of two start at even counts (where a run may stop), as on one device.
    fn steps_next(&self, left: u64, every: u64) -> u64 {
        if left >= every && self.launched.is_multiple_of(every) {
            every
        } else {
            1
        }
    }
    /// `steps` (1 or 2) iterations of the owned planes `rows` into the other buffer.
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert!(
            steps == 1 || (steps == 2 && self.launched.is_multiple_of(2)),
            "a table-form slab takes one iteration, or two from an even count, between exchanges"
        );
        let call = self.calls;
        assert!(call < CALLS, "at most {CALLS} compute calls per iteration");
        self.calls += 1;
        let main = self.gpu.stream.clone();
        let stream = stream.unwrap_or(&main).clone();
        let slot = self.slot(call);
        self.launch(steps, rows, slot, call, &stream)
    }
    fn commit(&mut self, steps: u64) {
        self.launched += steps;
        self.input = 1 - self.input;
        self.calls = 0;
    }
    fn owned_row_len(&self) -> usize {
        self.counts[0] * self.counts[1]
    }
    fn owned(&mut self) -> Result<Vec<T>> {
        let own = self.window.own_in_buffer();
        let plane = self.row_len();
        let v = &self.v[self.current()?];
        let planes = self
            .gpu
            .download(&v.slice(own.start * plane..own.end * plane))?;
        Ok(stencil_table::unpad(&planes, self.counts, self.pitch))
    }
    fn partials(&mut self) -> Partials {
        let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(&self.ring, &self.gpu.stream);
        Partials::Device {
            ring: ptr,
            per_step: PER_STEP,
            step: self.launched,
        }
    }
    fn queue_record(
        &mut self,
        sources: &CudaSlice<u64>,
        count: usize,
        ring_steps: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let record = self.record.as_ref().expect("a slab");
        // Every iteration queued since the last call, in order (a pass may take two).
        for k in self.recorded..self.launched {
            let slab = super::cuda_slab::RecordArgs {
                per_step: PER_STEP,
                tolerance: self.p.tolerance_after(k + 1),
                ctl: &self.ctl,
                hist: &self.hist,
                measured: self.p.measures_after(k + 1),
            };
            super::cuda_slab::queue_es_record(
                record, stream, sources, count, ring_steps, k, &slab,
            )?;
        }
        self.recorded = self.launched;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_planes;

    /// The chunks measured best on 132 multiprocessors (f32 tiles: 35 at 256³, 70 at 384³,
    /// 130 at 512³, 12 at 128³; f64 18 at the Poisson case's 130³).
    #[test]
    fn chunks_fill_the_waves() {
        assert_eq!(chunk_planes(35, 256, 132), 38);
        assert_eq!(chunk_planes(70, 384, 132), 56);
        assert_eq!(chunk_planes(130, 512, 132), 128);
        assert_eq!(chunk_planes(12, 128, 132), 12);
        assert_eq!(chunk_planes(18, 130, 132), 20);
        assert_eq!(chunk_planes(1, 3, 132), 2);
    }
}
