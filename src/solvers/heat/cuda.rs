//! CUDA engine for the heat equation, in-core: both time layers on the device. Steps go
//! in temporal-blocking passes of several steps each (one trip through device memory per
//! pass), single-step passes for the remainder; buffers alternate by pass.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use super::HeatProblem;
use super::pyramid::Region;
use super::step_kernel::{BoxKernels, NONE, TemporalBlock, default_levels};
use crate::device::cuda::Gpu;
use crate::error::{Error, Result};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

/// One kernel launch: its first step, how many steps it took, the buffer it read.
#[derive(Debug, Clone, Copy)]
struct Pass {
    start: u64,
    steps: u64,
    input: usize,
}

pub struct CudaHeat<T: Real> {
    gpu: Arc<Gpu>,
    p: HeatProblem,
    buf: [CudaSlice<T>; 2],
    /// The buffer holding U after the last pass.
    cur: usize,
    /// First step of the pass that produced a non-finite value, or NONE.
    bad: CudaSlice<u64>,
    kernels: BoxKernels<T>,
    blocked: Option<TemporalBlock<T>>,
    launched: u64,
    /// Passes since the last check found every value finite (to replay a failed pass).
    unchecked: Vec<Pass>,
    /// The step that first produced a non-finite value, once found.
    failed: Option<u64>,
}

impl<T: Real> CudaHeat<T> {
    /// `u0`: the field after `step0` steps (0 for the initial field).
    pub fn new(gpu: Arc<Gpu>, p: &HeatProblem, u0: Vec<T>, step0: u64) -> Result<Self> {
        gpu.ensure_fits(
            p.field_bytes(T::PRECISION),
            "the heat fields (two time layers)",
        )?;
        let kernels = BoxKernels::new(&gpu, p)?;
        let levels = p
            .temporal_block
            .unwrap_or_else(|| default_levels(p.dims, T::PRECISION));
        let blocked = match levels {
            1 => None,
            n => Some(TemporalBlock::new(&gpu, p, n)?),
        };
        let s = &gpu.stream;
        let b0 = gpu.upload(&u0)?;
        let b1 = s.clone_dtod(&b0)?;
        let bad = s.clone_htod(&[NONE])?;
        Ok(Self {
            gpu,
            p: p.clone(),
            buf: [b0, b1],
            cur: 0,
            bad,
            kernels,
            blocked,
            launched: step0,
            unchecked: Vec::new(),
            failed: None,
        })
    }

    /// Steps per pass (1 without temporal blocking).
    pub fn levels(&self) -> usize {
        self.blocked.as_ref().map_or(1, |b| b.levels())
    }

    /// One launch of `steps` steps (1 or the temporal block) from buffer `input`.
    fn launch(&mut self, input: usize, start: u64, steps: u64) -> Result<()> {
        let [b0, b1] = &mut self.buf;
        let (src, dst) = if input == 0 { (&*b0, b1) } else { (&*b1, b0) };
        let stream = &self.gpu.stream;
        match &self.blocked {
            Some(tb) if steps > 1 => tb.pass(stream, src, dst, start, &mut self.bad),
            _ => {
                let whole = Region {
                    lo: [0; 3],
                    hi: self.p.shape,
                };
                self.kernels.step(
                    stream,
                    src,
                    dst,
                    [0; 3],
                    self.p.shape,
                    &whole,
                    start,
                    &mut self.bad,
                )
            }
        }
    }

    /// Redo a failed temporal pass one step at a time to find the step that went
    /// non-finite; the pass's input buffer is untouched, since every later launch returned
    /// at once. Leaves U after that step current.
    fn replay(&mut self, pass: Pass) -> Result<u64> {
        self.gpu.stream.memcpy_htod(&[NONE], &mut self.bad)?;
        let mut input = pass.input;
        for k in pass.start..pass.start + pass.steps {
            self.launch(input, k, 1)?;
            input ^= 1;
        }
        let step = self.gpu.stream.clone_dtoh(&self.bad)?[0];
        if step == NONE {
            return Err(Error::Cuda(format!(
                "a temporal-blocking pass of steps {}..{} reported a non-finite value that \
                 single steps did not reproduce",
                pass.start,
                pass.start + pass.steps
            )));
        }
        self.cur = pass.input ^ ((step - pass.start + 1) as usize & 1);
        Ok(step)
    }

    fn state(&mut self) -> Result<(u64, Status)> {
        if let Some(step) = self.failed {
            return Ok((step + 1, Status::NonFinite));
        }
        let bad = self.gpu.stream.clone_dtoh(&self.bad)?[0];
        if bad == NONE {
            self.unchecked.clear();
            return Ok((self.launched, Status::Running));
        }
        let pass = *self
            .unchecked
            .iter()
            .find(|p| p.start == bad)
            .ok_or_else(|| Error::Cuda(format!("no pass began at failed step {bad}")))?;
        let step = if pass.steps == 1 {
            self.cur = pass.input ^ 1;
            bad
        } else {
            self.replay(pass)?
        };
        self.failed = Some(step);
        Ok((step + 1, Status::NonFinite))
    }
}

impl<T: Real> Engine for CudaHeat<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let levels = self.levels() as u64;
        let mut left = steps;
        while left > 0 {
            let n = if left >= levels { levels } else { 1 };
            let pass = Pass {
                start: self.launched,
                steps: n,
                input: self.cur,
            };
            self.launch(pass.input, pass.start, n)?;
            self.unchecked.push(pass);
            self.cur ^= 1;
            self.launched += n;
            left -= n;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let (steps, status) = self.state()?;
        Ok(Diagnostics::steps_only(steps, status))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        self.state()?;
        let data = self.gpu.download(&self.buf[self.cur].as_view())?;
        Ok(super::field_of(&self.p, data))
    }
}
