//! CUDA engine of the blocked kernel (`SweepKernel::Blocked`, kernels.cu `es_blocked`):
//! the update from a stencil table (stencil_table.rs) in passes of two red-black
//! iterations through device memory, V in the natural layout (rows padded to an even
//! pitch), two buffers. A pass reduces both its iterations' residuals and sets the
//! device-side stop flag at an even count only; passes start at even counts (a pass of one
//! realigns them), so a run stops where the table form's CPU engine does. Its V differs from the per-colour engines' in the
//! last bits (the table's weights are rounded once); it equals [`stencil_table::iterate`]'s
//! bit for bit.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::stencil_table::{self, StencilTable};
use super::{ElectrostaticsProblem, Geometry, cpu};
use crate::device::cuda::{Gpu, allow_shared};
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::run::{Diagnostics, Engine, Field, Restart, Status};

/// Residual history slots on the device.
const HISTORY: usize = 4096;

/// Rows per thread and warps per block (kernels.cu ES_TB_R, ES_TB_W): the most registers
/// per thread without spills at one block per multiprocessor (f32: 160 registers; f64:
/// 128 at 512 threads; docs/PERFORMANCE.md).
fn shape(precision: Precision) -> (usize, usize) {
    match precision {
        Precision::F32 => (4, 12),
        Precision::F64 => (2, 16),
    }
}

/// Planes per block: 128 (measured best at 512³), fewer where the tiles are too few to
/// give every multiprocessor a block; even.
fn chunk_planes(tiles_xy: usize, nz: usize, multiprocessors: usize) -> usize {
    let chunks = multiprocessors.div_ceil(tiles_xy).max(1);
    let planes = nz.div_ceil(chunks).clamp(8, 128);
    planes + (planes & 1)
}

struct Pass {
    function: CudaFunction,
    cfg: LaunchConfig,
}

pub struct CudaBlocked<T: Real> {
    gpu: Arc<Gpu>,
    p: ElectrostaticsProblem,
    counts: [usize; 3],
    pitch: usize,
    v: [CudaSlice<T>; 2],
    ids: CudaSlice<u16>,
    table: CudaSlice<T>,
    /// Each node's charge term (the ids' layout), or one unused value.
    charge: CudaSlice<T>,
    entries: i32,
    partials: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    ctl: CudaSlice<u64>,
    hist: CudaSlice<f64>,
    /// Passes of two iterations and of one.
    two: Pass,
    one: Pass,
    chunk: usize,
    /// The buffer the next pass reads.
    input: usize,
    launched: u64,
    reported: u64,
}

impl<T: Real> CudaBlocked<T> {
    pub fn new(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        g: &Geometry,
        restart: Option<Restart<T>>,
    ) -> Result<Self> {
        let table: StencilTable<T> = stencil_table::build_or_refuse(p, g)?;
        let counts = g.counts;
        let [_, ny, nz] = counts;
        let pitch = table.pitch;
        let per_node = (2 + table.charge.is_some() as usize) * size_of::<T>() + 2;
        let bytes = per_node * pitch * ny * nz;
        gpu.ensure_fits(
            bytes as u128,
            "the blocked kernel's two buffers of V and the ids",
        )?;
        let (v0, step, status) = match restart {
            Some(mut r) => (r.take("V")?, r.step, r.status),
            None => (cpu::initial_potential::<T>(g)?, 0, Status::Running),
        };
        let padded = stencil_table::pad(&v0, counts, pitch);
        let (r, w) = shape(T::PRECISION);
        let size = std::mem::size_of::<T>();
        // Shared memory of a pass of `levels`: two buffers of every level's edge rows
        // (a pair of values a lane, two rows a warp), then the table.
        let edges = |levels: usize| 2 * levels * w * 64 * 2 * size;
        let tiles = |t: usize| {
            let (txo, tyo) = (64 - 2 * t.div_ceil(2) * 2, w * r - 2 * t);
            (pitch.div_ceil(txo), ny.div_ceil(tyo))
        };
        let (tx, ty) = tiles(4);
        let chunk = chunk_planes(tx * ty, nz, gpu.multiprocessors);
        let entries = table.entries();
        // The table lives in each block's shared memory beside the edge rows.
        // (Less 1 KiB for the kernel's static shared memory.)
        let most = crate::device::cuda::MAX_DYNAMIC_SHARED - edges(4) - 1024;
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
        let pass = |levels: usize| -> Result<Pass> {
            let defines = [
                ("ES_TB_T", levels.to_string()),
                ("ES_TB_R", r.to_string()),
                ("ES_TB_W", w.to_string()),
                ("ES_TB_Q", (table.charge.is_some() as u8).to_string()),
            ];
            let function =
                gpu.function(&super::cuda::KERNELS, T::PRECISION, &defines, "es_blocked")?;
            let shared = edges(levels) + entries * stencil_table::WEIGHTS * size;
            allow_shared(&function, shared)?;
            let (tx, ty) = tiles(levels);
            Ok(Pass {
                function,
                cfg: LaunchConfig {
                    grid_dim: (tx as u32, ty as u32, nz.div_ceil(chunk) as u32),
                    block_dim: (32, w as u32, 1),
                    shared_mem_bytes: shared as u32,
                },
            })
        };
        let (two, one) = (pass(4)?, pass(2)?);
        let blocks = [&two, &one]
            .iter()
            .map(|p| (p.cfg.grid_dim.0 * p.cfg.grid_dim.1 * p.cfg.grid_dim.2) as usize)
            .max()
            .unwrap_or(1);
        let s = &gpu.stream;
        Ok(Self {
            v: [s.clone_htod(&padded)?, s.clone_htod(&padded)?],
            ids: s.clone_htod(&table.ids)?,
            table: s.clone_htod(&table.table)?,
            charge: match &table.charge {
                Some(b) => s.clone_htod(b)?,
                None => s.alloc_zeros::<T>(1)?,
            },
            entries: entries as i32,
            partials: s.alloc_zeros::<f64>(4 * blocks)?,
            ticket: s.alloc_zeros::<u32>(1)?,
            ctl: s.clone_htod(&[step, status.device_flag(), 0])?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            two,
            one,
            chunk,
            input: 0,
            launched: step,
            reported: step,
            counts,
            pitch,
            gpu,
            p: p.clone(),
        })
    }

    /// A pass of `iterations` (1 or 2) from buffer `input` into the other.
    fn launch(&mut self, iterations: u64) -> Result<()> {
        let pass = if iterations == 2 {
            &self.two
        } else {
            &self.one
        };
        let [nz, ny] = [self.counts[2] as i32, self.counts[1] as i32];
        let (px, chunk) = (self.pitch as i32, self.chunk as i32);
        let (tol, iteration) = (self.p.tolerance, self.launched);
        let hist_len = HISTORY as u32;
        let out = 1 - self.input;
        let out_buf = out as i32;
        let [a, b] = &mut self.v;
        let (src, dst) = if self.input == 0 { (a, b) } else { (b, a) };
        let mut l = self.gpu.stream.launch_builder(&pass.function);
        l.arg(&*src)
            .arg(dst)
            .arg(&self.ids)
            .arg(&self.table)
            .arg(&self.charge);
        l.arg(&self.entries);
        l.arg(&nz)
            .arg(&ny)
            .arg(&px)
            .arg(&chunk)
            .arg(&tol)
            .arg(&iteration);
        l.arg(&mut self.partials)
            .arg(&mut self.ticket)
            .arg(&mut self.ctl)
            .arg(&mut self.hist)
            .arg(&hist_len)
            .arg(&out_buf);
        // SAFETY: es_blocked's parameters in order: both buffers hold pitch·ny·nz values,
        // ids as many 16-bit ids, the charge terms as many values (or 1, unread), the
        // table `entries` entries of 8 values, partials 4 values
        // per block, ctl 3 counters, hist HISTORY values; all live as long as the engine.
        unsafe { l.launch(pass.cfg) }?;
        self.input = out;
        self.launched += iterations;
        Ok(())
    }

    /// The buffer holding the state after the iterations the device has done: the last
    /// pass that ran wrote its output buffer in ctl[2] (0, where the start is, before
    /// any); passes queued after a stop return at once.
    fn current(&self) -> Result<usize> {
        Ok(self.gpu.stream.clone_dtoh(&self.ctl)?[2] as usize)
    }
}

impl<T: Real> Engine for CudaBlocked<T> {
    type Real = T;

    /// Passes of two iterations from an even count, so that every even count (where a
    /// run may stop) ends a pass: a pass of one first from an odd count, and last for an
    /// odd remainder.
    fn advance(&mut self, steps: u64) -> Result<()> {
        let mut left = steps;
        if left > 0 && self.launched % 2 == 1 {
            self.launch(1)?;
            left -= 1;
        }
        for _ in 0..left / 2 {
            self.launch(2)?;
        }
        if left % 2 == 1 {
            self.launch(1)?;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let d = Diagnostics::from_ctl(&self.gpu, &self.ctl, &self.hist, &mut self.reported)?;
        // Passes queued after a stop returned at once: the device count is the truth.
        self.launched = d.steps;
        Ok(d)
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let v = self.gpu.stream.clone_dtoh(&self.v[self.current()?])?;
        Ok(cpu::field_of(
            &self.p,
            "V",
            stencil_table::unpad(&v, self.counts, self.pitch),
        ))
    }

    fn describe(&self) -> Option<String> {
        let (b, g) = (self.two.cfg.block_dim, self.two.cfg.grid_dim);
        Some(format!(
            "blocked (two iterations a pass from a table of {} stencils; blocks of {}×{} threads, {} of them, {} planes each)",
            self.entries,
            b.0,
            b.1,
            g.0 * g.1 * g.2,
            self.chunk
        ))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        super::cuda::STOP_CHECK
    }
}
