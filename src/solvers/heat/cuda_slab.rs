//! CUDA engine for one slab of a decomposed heat run (src/parallel): the slab's layers
//! and its halo as a box of the grid, stepped by the out-of-core engine's box kernels —
//! several steps per pass in 3D (the register tile), single steps in 2D. A pass that
//! produced a non-finite value reports its first step; the slab then replays it one step
//! at a time to name the exact step, from its input's owned layers (later kernels return
//! at once) and its input halo: still in place if no pass followed, else copied aside by
//! the next pass before the exchange after it overwrote the halo.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::HeatProblem;
use super::pyramid::Region;
use super::step_kernel::{BoxKernels, KERNELS, NONE, Span, TemporalBlock, default_levels};
use crate::device::cuda::Gpu;
use crate::error::{Error, Result};
use crate::parallel::{Rows, Subdomain, Window, slab_view};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

pub struct CudaHeatSlab<T: Real> {
    gpu: Arc<Gpu>,
    p: HeatProblem,
    window: Window,
    /// The current field first; both hold the box.
    buf: [CudaSlice<T>; 2],
    /// The step that first went non-finite (a several-step pass's first step until the
    /// pass is replayed), or NONE.
    bad: CudaSlice<u64>,
    kernels: BoxKernels<T>,
    blocked: Option<TemporalBlock<T>>,
    steps: u64,
    /// The halo layers (below, then above) of a failed several-step pass's input, copied
    /// by the next pass (`heat_rescue`).
    kept: CudaSlice<T>,
    rescue: CudaFunction,
    /// The last pass committed: its first step and steps.
    last: Option<(u64, u64)>,
    /// The first step of the pass whose input halo `rescue_halos` was queued for.
    rescued: Option<u64>,
    /// Every launch since a check last found every value finite: (first step, steps).
    unchecked: Vec<(u64, u64)>,
    /// The exact step that first went non-finite, once found.
    failed: Option<u64>,
}

impl<T: Real> CudaHeatSlab<T> {
    /// Steps per pass a slab takes on `gpu` (so its halo is this many layers).
    pub fn steps_per_pass(gpu: &Gpu, p: &HeatProblem) -> Result<u64> {
        Ok(Self::blocked(gpu, p)?.map_or(1, |b| b.levels() as u64))
    }

    fn blocked(gpu: &Gpu, p: &HeatProblem) -> Result<Option<TemporalBlock<T>>> {
        let levels = p
            .temporal_block
            .unwrap_or_else(|| default_levels(p.dims, T::PRECISION));
        let tb = TemporalBlock::for_boxes(gpu, p, levels, Span::Slabs)?;
        // Rows of whole vectors or no passes: every box of a slab has the grid's rows.
        Ok(tb.filter(|b| b.takes(p.shape)))
    }

    /// The engine for the layers `window` owns; `full`: the field after `step0` steps.
    pub fn on_window(
        gpu: Arc<Gpu>,
        p: &HeatProblem,
        window: Window,
        full: &[T],
        step0: u64,
    ) -> Result<Self> {
        let u = slab_view(&window, full, super::layer_len(p));
        let halo = (window.rows - window.own.len()) * super::layer_len(p);
        gpu.ensure_fits(
            ((2 * u.len() + halo) * std::mem::size_of::<T>()) as u128,
            "a heat slab (two time layers and a copy of its halo)",
        )?;
        let s = &gpu.stream;
        let first = gpu.upload(&u)?;
        Ok(Self {
            buf: [s.clone_dtod(&first)?, first],
            bad: s.clone_htod(&[NONE])?,
            kernels: BoxKernels::new(&gpu, p)?,
            blocked: Self::blocked(&gpu, p)?,
            steps: step0,
            kept: s.alloc_zeros::<T>(halo.max(1))?,
            rescue: gpu.function(&KERNELS, T::PRECISION, &[], "heat_rescue")?,
            last: None,
            rescued: None,
            unchecked: Vec::new(),
            failed: None,
            window,
            p: p.clone(),
            gpu,
        })
    }

    /// Where halo layers `rows` (buffer rows) lie in a buffer and, `at` layers in, in the
    /// kept copy.
    fn spans(&self, rows: &Range<usize>, at: usize) -> (Range<usize>, Range<usize>) {
        let layer = super::layer_len(&self.p);
        let n = rows.len() * layer;
        (
            rows.start * layer..rows.end * layer,
            at * layer..at * layer + n,
        )
    }

    /// Ahead of the first kernel of a pass after a several-step pass of steps
    /// `first..end`: copy that pass's input halo layers (now in buffer 1) into the kept
    /// copy if that pass failed, before the exchange after this pass overwrites them.
    fn rescue_halos(&mut self, stream: &Arc<CudaStream>, (first, end): (u64, u64)) -> Result<()> {
        let [(below, at0), (above, at1)] = self.halos();
        // The halo below is the buffer's first layers and the kept copy's (spans() of them
        // start at 0 in both).
        let ((f0, _), (f1, k1)) = (self.spans(&below, at0), self.spans(&above, at1));
        let (n0, n1) = (f0.len() as u64, f1.len() as u64);
        if n0 + n1 == 0 {
            return Ok(());
        }
        let (from1, to1) = (f1.start as u64, k1.start as u64);
        let mut l = stream.launch_builder(&self.rescue);
        l.arg(&self.buf[1])
            .arg(&mut self.kept)
            .arg(&n0)
            .arg(&from1)
            .arg(&to1)
            .arg(&n1)
            .arg(&first)
            .arg(&end)
            .arg(&self.bad);
        // Few blocks: every pass launches it, and it copies only after a failure.
        let cfg = LaunchConfig {
            grid_dim: ((n0.max(n1).div_ceil(256)).clamp(1, 64) as u32, 2, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: n0 values from 0 and n1 from from1 lie in buffer 1 (its halo layers),
        // their copies at 0 and to1 in `kept`, which holds both halos.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Put the kept halo layers `rows` (`at` layers into the copy) back into buffer
    /// `input`.
    fn restore_halo(
        &mut self,
        stream: &Arc<CudaStream>,
        input: usize,
        rows: Range<usize>,
        at: usize,
    ) -> Result<()> {
        let (field, kept) = self.spans(&rows, at);
        if field.is_empty() {
            return Ok(());
        }
        let src = self.kept.slice(kept);
        stream.memcpy_dtod(&src, &mut self.buf[input].slice_mut(field))?;
        Ok(())
    }

    /// The halo layers of the buffer, below and above the owned ones, and where each
    /// lies in the kept copy.
    fn halos(&self) -> [(Range<usize>, usize); 2] {
        let own = self.window.own_in_buffer();
        [(0..own.start, 0), (own.end..self.window.rows, own.start)]
    }

    /// Replay the failed pass of `levels` steps beginning at `start`, whose input is now
    /// buffer `input` (its halo in the kept copy if `rescued`, else still in place), one
    /// step at a time: the exact step that first went non-finite. Leaves the field after
    /// that step in buffer 0.
    fn replay(&mut self, start: u64, input: usize, rescued: bool) -> Result<u64> {
        self.gpu.ctx.synchronize()?;
        let stream = self.gpu.stream.clone();
        if rescued {
            for (rows, at) in self.halos() {
                self.restore_halo(&stream, input, rows, at)?;
            }
        }
        stream.memcpy_htod(&[NONE], &mut self.bad)?;
        let levels = self.steps_per_exchange();
        let (origin, shape) = self.bounds();
        let (a, own) = (super::slab_axis(self.p.dims), self.window.own_in_buffer());
        let mut from = input;
        for j in 1..=levels {
            // Valid after step j: the owned layers and levels − j more on each side.
            let grow = (levels - j) as usize;
            let mut region = Region {
                lo: [0; 3],
                hi: shape,
            };
            region.lo[a] = own.start.saturating_sub(grow);
            region.hi[a] = (own.end + grow).min(self.window.rows);
            let [b0, b1] = &mut self.buf;
            let (src, dst) = if from == 0 { (&*b0, b1) } else { (&*b1, b0) };
            let step = start + j - 1;
            self.kernels.step(
                &stream,
                src,
                dst,
                origin,
                shape,
                &region,
                step,
                &mut self.bad,
            )?;
            from ^= 1;
        }
        let step = stream.clone_dtoh(&self.bad)?[0];
        if step == NONE {
            return Err(Error::Cuda(format!(
                "a heat slab's pass of steps {start}..{} reported a non-finite value that \
                 single steps did not reproduce",
                start + levels
            )));
        }
        // Later launches returned at once: the field after the failing step is where that
        // step wrote.
        if input ^ ((step - start + 1) as usize & 1) != 0 {
            self.buf.swap(0, 1);
        }
        Ok(step)
    }

    /// The run's state: running, or the exact step that first went non-finite.
    fn state(&mut self) -> Result<Option<u64>> {
        if let Some(step) = self.failed {
            return Ok(Some(step));
        }
        let bad = self.gpu.stream.clone_dtoh(&self.bad)?[0];
        if bad == NONE {
            self.unchecked.clear();
            return Ok(None);
        }
        let pass = self.unchecked.iter().position(|&(s, n)| s == bad && n > 1);
        let step = match pass {
            // Buffer 1 after the pass's commit, swapped by every later one; a later pass
            // copied its halo aside.
            Some(i) => {
                let later = self.unchecked.len() - i;
                self.replay(bad, later % 2, later > 1)?
            }
            None => bad, // a single step: exact
        };
        self.failed = Some(step);
        Ok(Some(step))
    }

    /// The box the buffers hold: its global origin and shape.
    fn bounds(&self) -> ([usize; 3], [usize; 3]) {
        let a = super::slab_axis(self.p.dims);
        let (mut origin, mut shape) = ([0; 3], self.p.shape);
        origin[a] = self.window.base as usize;
        shape[a] = self.window.rows;
        (origin, shape)
    }
}

impl<T: Real> Engine for CudaHeatSlab<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let per_pass = self.steps_per_exchange();
        let mut left = steps;
        while left > 0 {
            let k = if left >= per_pass { per_pass } else { 1 };
            self.compute(k, self.window.own.clone(), None)?;
            self.commit(k);
            left -= k;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(match self.state()? {
            None => Diagnostics::steps_only(self.steps, Status::Running),
            Some(step) => Diagnostics::steps_only(step + 1, Status::NonFinite),
        })
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(super::field_of(&self.p, data))
    }
}

impl<T: Real> Subdomain for CudaHeatSlab<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        super::layer_len(&self.p)
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Device {
            gpu: &self.gpu,
            buf: &mut self.buf[0],
            offset: 0,
        }
    }
    fn steps_per_exchange(&self) -> u64 {
        self.blocked.as_ref().map_or(1, |b| b.levels() as u64)
    }
    /// A band's few-plane pass beside the interior's slows both more than it does alone
    /// ahead of it (4 H200s, 512³ f32 a GPU: weak 94.8 % against 93.9 % beside; 2: 96.3
    /// against 93.8 %, 2026-11-26).
    fn bands_first(&self) -> bool {
        true
    }
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (origin, shape) = self.bounds();
        let a = super::slab_axis(self.p.dims);
        let mut region = Region {
            lo: [0; 3],
            hi: shape,
        };
        region.lo[a] = self.window.buffer_row(rows.start as isize);
        region.hi[a] = region.lo[a] + rows.len();
        let stream = &stream.unwrap_or(&self.gpu.stream).clone();
        if let Some((first, n)) = self.last.filter(|&(_, n)| n > 1)
            && self.rescued != Some(self.steps)
        {
            // With the pass's first kernel: the bands, whose completion the exchange
            // after them waits for, come first.
            self.rescue_halos(stream, (first, first + n))?;
            self.rescued = Some(self.steps);
        }
        let [src, dst] = &mut self.buf;
        match &self.blocked {
            Some(tb) if steps > 1 => {
                let ran = tb.pass_box(
                    stream,
                    src,
                    dst,
                    origin,
                    shape,
                    &region,
                    self.steps,
                    &mut self.bad,
                )?;
                if !ran {
                    return Err(Error::Parse(
                        "internal: a heat slab's box does not take several-step passes".into(),
                    ));
                }
                Ok(())
            }
            _ => self.kernels.step(
                stream,
                src,
                dst,
                origin,
                shape,
                &region,
                self.steps,
                &mut self.bad,
            ),
        }
    }
    fn commit(&mut self, steps: u64) {
        self.unchecked.push((self.steps, steps));
        self.last = Some((self.steps, steps));
        self.buf.swap(0, 1);
        self.steps += steps;
    }
}
