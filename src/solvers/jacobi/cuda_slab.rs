//! A CUDA slab of rows for decomposed runs: the same point update as the one-device
//! engine (fields equal bit for bit), two sweeps between halo exchanges (a halo of two
//! rows; jacobi_rows2, the one-device engine's temporal blocking within a row range), and
//! the residual of each sweep added up over all slabs on the device (jacobi_record) before
//! the stop flag is set, so every slab stops at the same sweep without the host waiting.
//! A solve that stops at the first sweep of a pair has its second undone by the host
//! (`settle`): the pair's input is still in the other buffer, and one sweep from it gives
//! the stopping sweep's field.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use super::JacobiProblem;
use super::cuda::{KERNELS, tile, tile_defines, tile2};
use crate::device::cuda::Gpu;
use crate::error::Result;
use crate::parallel::{PARTIAL_STEPS, Partials, Rows, Subdomain, Window, advance_alone, slab_view};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

/// Compute calls per sweep at most (two bands and the interior): one partial sum each.
const CALLS: usize = 3;
/// Residual history slots; the run reads diagnostics at least this often.
const HISTORY: usize = PARTIAL_STEPS;

pub struct CudaJacobiSlab<T: Real> {
    gpu: Arc<Gpu>,
    /// The sweep kernels' tiles (cuda.rs: tile, tile2).
    tiles: ((u32, u32), (usize, usize)),
    problem: JacobiProblem,
    window: Window,
    /// u and u_new: sweep k reads buf[k % 2].
    buf: [CudaSlice<T>; 2],
    f: CudaSlice<T>,
    /// Per compute call of a sweep (they may run side by side): block partials, ticket.
    scratch: Vec<(CudaSlice<f64>, CudaSlice<u32>)>,
    /// Partial sums: sweep k's call c at (k mod PARTIAL_STEPS)·CALLS + c.
    ring: CudaSlice<f64>,
    /// [sweeps done, stop flag (1 converged, 2 non-finite), unused]
    ctl: CudaSlice<u64>,
    hist: CudaSlice<f64>,
    rows_fn: CudaFunction,
    rows2_fn: CudaFunction,
    record_fn: CudaFunction,
    /// Sweeps queued (the next sweep's number), compute calls of the current one.
    launched: u64,
    calls: usize,
    reported: u64,
    /// Sweeps whose book-keeping is queued.
    recorded: u64,
    /// The buffer holding the current field.
    cur: usize,
    /// Passes queued since the host last read the stop flag: (first sweep, sweeps, the
    /// buffer they read).
    passes: Vec<(u64, u64, usize)>,
    /// A stop flag that is never set: the undo sweep runs after the solve stopped.
    running: CudaSlice<u64>,
    /// Where the undo sweep's residual total goes (nobody reads it).
    spare: CudaSlice<f64>,
}

/// Sweeps between halo exchanges (the halo is as many rows).
pub const SWEEPS_PER_EXCHANGE: u64 = 2;

impl<T: Real> CudaJacobiSlab<T> {
    /// The slab `window` of the manufactured problem: from the whole iterate `u` after
    /// `step` sweeps in `status` when restarting, else from u = 0.
    pub fn on_window(
        gpu: Arc<Gpu>,
        problem: &JacobiProblem,
        window: Window,
        restart: Option<(&[T], u64, Status)>,
    ) -> Result<Self> {
        let n = problem.n;
        let len = window.rows * n;
        gpu.ensure_fits(
            3 * (len * std::mem::size_of::<T>()) as u128,
            "the Jacobi fields of a slab (u, u_new, f)",
        )?;
        let tiles = (tile(T::PRECISION)?, tile2(T::PRECISION)?);
        let mut defines = tile_defines(tiles.0, tiles.1).to_vec();
        // Diagnosis: the unroll that miscompiled on the H100 (see jacobi_rows).
        if let Some(u) = crate::tuning::number("KEISAN_JACOBI_ROWS_UNROLL", 1..=64u32)? {
            defines.push(("J_ROWS_UNROLL", u.to_string()));
        }
        let rows_fn = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_rows")?;
        let rows2_fn = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_rows2")?;
        let record_fn = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_record")?;
        let init = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_init_rows")?;
        let s = &gpu.stream;
        // SAFETY: jacobi_init_rows writes every element.
        let (mut b0, mut b1, mut f) =
            unsafe { (s.alloc::<T>(len)?, s.alloc::<T>(len)?, s.alloc::<T>(len)?) };
        let c = problem.coefficients();
        let (ni, base, rows, kind) = (
            n as i32,
            window.base as i32,
            window.rows as i32,
            problem.exact.code(),
        );
        let mut l = s.launch_builder(&init);
        l.arg(&mut b0).arg(&mut b1).arg(&mut f);
        l.arg(&ni).arg(&base).arg(&rows).arg(&kind);
        l.arg(&problem.alpha).arg(&c.dx).arg(&c.dy);
        // SAFETY: the buffers hold rows·n values; the kernel is grid-stride.
        unsafe { l.launch(gpu.stride_config(len, 256)) }?;
        let mut ctl = [0u64; 3];
        if let Some((u, step, status)) = restart {
            // Through page-locked buffers once, then a device copy: two pageable copies
            // of the slab took 10 ns a cell (2 × H200).
            gpu.upload_into(&slab_view(&window, u, n), &mut b0.as_view_mut())?;
            s.memcpy_dtod(&b0, &mut b1)?;
            ctl = [step, status.device_flag(), 0];
        }
        let most = Self::config(problem, tiles.0, 0..window.rows).grid_dim;
        let most2 = Self::config2(problem, tiles.1, 0..window.rows).grid_dim;
        let slots = ((most.0 * most.1) as usize).max(2 * (most2.0 * most2.1) as usize);
        let scratch = (0..CALLS)
            .map(|_| Ok((s.alloc_zeros::<f64>(slots)?, s.alloc_zeros::<u32>(1)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            tiles,
            ring: s.alloc_zeros::<f64>(PARTIAL_STEPS * CALLS)?,
            ctl: s.clone_htod(&ctl)?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            scratch,
            buf: [b0, b1],
            f,
            rows_fn,
            rows2_fn,
            record_fn,
            launched: ctl[0],
            calls: 0,
            reported: ctl[0],
            recorded: ctl[0],
            cur: 0,
            passes: Vec::new(),
            running: s.alloc_zeros::<u64>(3)?,
            spare: s.alloc_zeros::<f64>(1)?,
            gpu,
            problem: problem.clone(),
            window,
        })
    }

    /// Blocks of tile `(bx, ry)` for the grid rows `rows` (at least one, so an empty
    /// range still writes its partial sum, 0).
    fn config(p: &JacobiProblem, (bx, ry): (u32, u32), rows: Range<usize>) -> LaunchConfig {
        let strips = rows.len().div_ceil(ry as usize).clamp(1, 65535) as u32;
        LaunchConfig {
            grid_dim: (p.n.div_ceil(bx as usize) as u32, strips, 1),
            block_dim: (bx, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The update's coefficients and the relaxation, in the run's precision.
    fn coefficients(p: &JacobiProblem) -> [T; 5] {
        let c = p.coefficients();
        [c.ax, c.ay, c.b, c.rb, p.relax].map(T::lit)
    }

    /// Blocks of jacobi_rows2 (output tile `(tx, ty)`) for the grid rows `rows` (at least
    /// one).
    fn config2(p: &JacobiProblem, (tx, ty): (usize, usize), rows: Range<usize>) -> LaunchConfig {
        let strips = rows.len().div_ceil(ty).clamp(1, 65535) as u32;
        LaunchConfig {
            grid_dim: (p.n.div_ceil(tx) as u32, strips, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Read the device's sweep count and, once stopped, make it the host's: the passes
    /// queued after the stop changed nothing, and the result lies in the buffer the pass
    /// of the stopping sweep wrote — after one sweep from that pass's input where it was
    /// the first of two.
    fn settle(&mut self) -> Result<[u64; 3]> {
        let ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
        if ctl[1] != 0 {
            let done = ctl[0];
            let pass = self
                .passes
                .iter()
                .copied()
                .find(|&(first, sweeps, _)| first < done && done <= first + sweeps);
            if let Some((first, sweeps, read)) = pass {
                if done < first + sweeps {
                    self.undo_second(read)?;
                }
                self.cur = 1 - read;
            }
            self.launched = done;
            self.recorded = self.recorded.min(done);
        }
        // Every queued pass has run: none is left to undo.
        self.passes.clear();
        Ok([ctl[0], ctl[1], ctl[2]])
    }

    /// One sweep of the owned rows from buf[read] into the other buffer (the field after
    /// the first sweep of a pair), whatever the stop flag says.
    fn undo_second(&mut self, read: usize) -> Result<()> {
        let stream = self.gpu.stream.clone();
        let (spare, _sync) = self.spare.device_ptr(&stream);
        drop(_sync);
        let own = self.window.own.clone();
        self.launch_rows(1, own, read, true, 0, [spare, spare], &stream)?;
        stream.synchronize()?;
        Ok(())
    }

    /// Queue `sweeps` (1: jacobi_rows, 2: jacobi_rows2) over the grid rows `rows` from
    /// buf[read] into the other buffer on `stream`, with compute call `call`'s block sums,
    /// each sweep's total into the device address in `slots`; after a stop they do
    /// nothing unless `past_stop`.
    #[allow(clippy::too_many_arguments)]
    fn launch_rows(
        &mut self,
        sweeps: u64,
        rows: Range<usize>,
        read: usize,
        past_stop: bool,
        call: usize,
        slots: [u64; 2],
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let p = &self.problem;
        let [ax, ay, b, rb, omega] = Self::coefficients(p);
        let (n, m, base) = (p.n as i32, p.m as i32, self.window.base as i32);
        let (j0, j1) = (rows.start as i32, rows.end as i32);
        let (function, cfg) = match sweeps {
            1 => (&self.rows_fn, Self::config(p, self.tiles.0, rows)),
            _ => (&self.rows2_fn, Self::config2(p, self.tiles.1, rows)),
        };
        let [b0, b1] = &mut self.buf;
        let (src, dst) = if read == 0 { (&*b0, b1) } else { (&*b1, b0) };
        let ctl = if past_stop { &self.running } else { &self.ctl };
        let (partials, ticket) = &mut self.scratch[call];
        let mut l = stream.launch_builder(function);
        l.arg(src).arg(dst).arg(&self.f);
        l.arg(&n).arg(&m).arg(&base).arg(&j0).arg(&j1);
        l.arg(&ax).arg(&ay).arg(&b).arg(&rb).arg(&omega);
        l.arg(ctl).arg(partials).arg(ticket).arg(&slots[0]);
        if sweeps > 1 {
            l.arg(&slots[1]);
        }
        // SAFETY: rows j0..j1 lie inside the slab's buffers with the halo rows a pass of
        // `sweeps` reads (one per sweep); partials hold `sweeps` values per block; each
        // slot is one f64 of the ring or of `spare`.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    fn ring_address(&self) -> u64 {
        let (ptr, _sync) = self.ring.device_ptr(&self.gpu.stream);
        ptr
    }
}

impl<T: Real> Engine for CudaJacobiSlab<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let gpu = self.gpu.clone();
        advance_alone(self, &gpu, steps)
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let ctl = self.settle()?;
        Diagnostics::from_device(&self.gpu, ctl[0], ctl[1], &self.hist, &mut self.reported)
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(super::cpu::field_of(&self.problem, data))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        HISTORY as u64
    }
}

impl<T: Real> Subdomain for CudaJacobiSlab<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.problem.n
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Device {
            gpu: &self.gpu,
            buf: &mut self.buf[self.cur],
            offset: 0,
        }
    }
    fn steps_per_exchange(&self) -> u64 {
        SWEEPS_PER_EXCHANGE
    }
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert!(
            steps == 1 || steps == SWEEPS_PER_EXCHANGE,
            "a Jacobi slab takes one sweep or a pair between exchanges"
        );
        let call = self.calls;
        self.calls += 1;
        let stream = stream.unwrap_or(&self.gpu.stream).clone();
        let (ring, _sync) = self.ring.device_ptr(&stream);
        drop(_sync);
        let slot = |k: u64| ring + (((k as usize % PARTIAL_STEPS) * CALLS + call) * 8) as u64;
        let slots = [slot(self.launched), slot(self.launched + 1)];
        self.launch_rows(steps, rows, self.cur, false, call, slots, &stream)
    }
    fn commit(&mut self, steps: u64) {
        self.passes.push((self.launched, steps, self.cur));
        self.launched += steps;
        self.cur = 1 - self.cur;
        self.calls = 0;
    }
    fn owned(&mut self) -> Result<Vec<T>> {
        self.settle()?;
        let own = self.window.own_in_buffer();
        let n = self.problem.n;
        self.gpu
            .download(&self.buf[self.cur].slice(own.start * n..own.end * n))
    }
    fn partials(&mut self) -> Partials {
        Partials::Device {
            ring: self.ring_address(),
            per_step: CALLS,
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
        let p = &self.problem;
        let (count, per_step, ring) = (count as i32, CALLS as i32, ring_steps as u32);
        let (n, m, hist_len) = (p.n as i32, p.m as i32, HISTORY as u32);
        // Every sweep queued since the last call, in order (a pass may take two).
        for k in self.recorded..self.launched {
            let mut l = stream.launch_builder(&self.record_fn);
            l.arg(sources).arg(&count).arg(&per_step).arg(&ring).arg(&k);
            l.arg(&n).arg(&m).arg(&p.tolerance);
            l.arg(&mut self.ctl).arg(&mut self.hist).arg(&hist_len);
            // SAFETY: sources holds `count` addresses of rings of `ring` steps × CALLS values.
            unsafe { l.launch(LaunchConfig::for_num_elems(1)) }?;
        }
        self.recorded = self.launched;
        Ok(())
    }
}
