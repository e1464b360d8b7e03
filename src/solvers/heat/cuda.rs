//! CUDA engine for the heat equation, in-core: both time layers on the device, one
//! single-pass step kernel per step, buffers alternating by step parity.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use super::HeatProblem;
use super::pyramid::Region;
use super::step_kernel::{BoxKernels, NONE};
use crate::device::cuda::Gpu;
use crate::error::Result;
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

pub struct CudaHeat<T: Real> {
    gpu: Arc<Gpu>,
    p: HeatProblem,
    /// U after an even number of steps is in buf[0], after an odd number in buf[1].
    buf: [CudaSlice<T>; 2],
    /// First step that produced a non-finite value, or NONE.
    bad: CudaSlice<u64>,
    kernels: BoxKernels<T>,
    launched: u64,
}

impl<T: Real> CudaHeat<T> {
    pub fn new(gpu: Arc<Gpu>, p: &HeatProblem, u0: Vec<T>) -> Result<Self> {
        gpu.ensure_fits(
            p.field_bytes(T::PRECISION),
            "the heat fields (two time layers)",
        )?;
        let kernels = BoxKernels::new(&gpu, p)?;
        let s = &gpu.stream;
        let b0 = s.clone_htod(&u0)?;
        let b1 = s.clone_htod(&u0)?;
        let bad = s.clone_htod(&[NONE])?;
        Ok(Self {
            gpu,
            p: p.clone(),
            buf: [b0, b1],
            bad,
            kernels,
            launched: 0,
        })
    }

    fn state(&mut self) -> Result<(u64, Status)> {
        let bad = self.gpu.stream.clone_dtoh(&self.bad)?[0];
        Ok(if bad == NONE {
            (self.launched, Status::Running)
        } else {
            (bad + 1, Status::NonFinite)
        })
    }
}

impl<T: Real> Engine for CudaHeat<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let whole = Region {
            lo: [0; 3],
            hi: self.p.shape,
        };
        for _ in 0..steps {
            let k = self.launched;
            let [b0, b1] = &mut self.buf;
            let (src, dst) = if k.is_multiple_of(2) {
                (&*b0, b1)
            } else {
                (&*b1, b0)
            };
            self.kernels.step(
                &self.gpu.stream,
                src,
                dst,
                [0; 3],
                self.p.shape,
                &whole,
                k,
                &mut self.bad,
            )?;
            self.launched += 1;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let (steps, status) = self.state()?;
        Ok(Diagnostics::steps_only(steps, status))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let (steps, _) = self.state()?;
        let data = self
            .gpu
            .stream
            .clone_dtoh(&self.buf[(steps % 2) as usize])?;
        Ok(super::field_of(&self.p, data))
    }
}
