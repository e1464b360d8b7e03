//! CUDA engine for one slab of a decomposed heat run (src/parallel): the slab's layers
//! and its halo as a box of the grid, stepped by the out-of-core engine's box kernels —
//! several steps per pass in 3D (the register tile, which reports the exact step a
//! value first went non-finite), single steps in 2D.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::HeatProblem;
use super::pyramid::Region;
use super::step_kernel::{BoxKernels, NONE, Span, TemporalBlock, default_levels};
use crate::device::cuda::Gpu;
use crate::error::{Error, Result};
use crate::parallel::{Rows, Subdomain, Window, slab_of};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

pub struct CudaHeatSlab<T: Real> {
    gpu: Arc<Gpu>,
    p: HeatProblem,
    window: Window,
    /// The current field first; both hold the box.
    buf: [CudaSlice<T>; 2],
    /// The exact step that first went non-finite, or NONE.
    bad: CudaSlice<u64>,
    kernels: BoxKernels<T>,
    blocked: Option<TemporalBlock<T>>,
    steps: u64,
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
        let u = slab_of(&window, full, super::layer_len(p));
        gpu.ensure_fits(
            (2 * u.len() * std::mem::size_of::<T>()) as u128,
            "a heat slab (two time layers)",
        )?;
        let s = &gpu.stream;
        Ok(Self {
            buf: [s.clone_htod(&u)?, s.clone_htod(&u)?],
            bad: s.clone_htod(&[NONE])?,
            kernels: BoxKernels::new(&gpu, p)?,
            blocked: Self::blocked(&gpu, p)?,
            steps: step0,
            window,
            p: p.clone(),
            gpu,
        })
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
        let bad = self.gpu.stream.clone_dtoh(&self.bad)?[0];
        Ok(match bad {
            NONE => Diagnostics::steps_only(self.steps, Status::Running),
            step => Diagnostics::steps_only(step + 1, Status::NonFinite),
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
        let stream = stream.unwrap_or(&self.gpu.stream);
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
        self.buf.swap(0, 1);
        self.steps += steps;
    }
}
