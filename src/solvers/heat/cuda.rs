//! CUDA engine for the heat equation, in-core: both time layers on the device, one
//! single-pass step kernel per step, buffers alternating by step parity.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::HeatProblem;
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

pub const KERNELS: KernelSource = KernelSource {
    name: "heat/kernels.cu",
    code: include_str!("kernels.cu"),
};

const NONE: u64 = u64::MAX;

pub struct CudaHeat<T: Real> {
    gpu: Arc<Gpu>,
    p: HeatProblem,
    /// U after an even number of steps is in buf[0], after an odd number in buf[1].
    buf: [CudaSlice<T>; 2],
    /// First step that produced a non-finite value, or NONE.
    bad: CudaSlice<u64>,
    step: CudaFunction,
    cfg: LaunchConfig,
    launched: u64,
}

impl<T: Real> CudaHeat<T> {
    pub fn new(gpu: Arc<Gpu>, p: &HeatProblem, u0: Vec<T>) -> Result<Self> {
        gpu.ensure_fits(
            p.field_bytes(T::PRECISION),
            "the heat fields (two time layers)",
        )?;
        let step = gpu.function(&KERNELS, T::PRECISION, &[], "heat_step")?;
        let [nz, ny, nx] = p.shape;
        let cfg = LaunchConfig {
            grid_dim: (nx.div_ceil(256) as u32, (nz * ny).min(65535) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = &gpu.stream;
        let b0 = s.clone_htod(&u0)?;
        let b1 = s.clone_htod(&u0)?;
        let bad = s.clone_htod(&[NONE])?;
        Ok(Self {
            gpu,
            p: p.clone(),
            buf: [b0, b1],
            bad,
            step,
            cfg,
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
        let [nz, ny, nx] = self.p.shape.map(|v| v as i32);
        let dims = self.p.dims as i32;
        let r = self.p.r();
        let (rz, ry, rx) = (T::lit(r[0]), T::lit(r[1]), T::lit(r[2]));
        for _ in 0..steps {
            let k = self.launched;
            let [b0, b1] = &mut self.buf;
            let (src, dst) = if k.is_multiple_of(2) {
                (&*b0, b1)
            } else {
                (&*b1, b0)
            };
            let mut l = self.gpu.stream.launch_builder(&self.step);
            l.arg(src).arg(dst).arg(&nz).arg(&ny).arg(&nx).arg(&dims);
            l.arg(&rz).arg(&ry).arg(&rx).arg(&k).arg(&mut self.bad);
            // SAFETY: both buffers hold nz·ny·nx values; the kernel stays in the interior.
            unsafe { l.launch(self.cfg) }?;
            self.launched += 1;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let (steps, status) = self.state()?;
        Ok(Diagnostics {
            steps,
            new_residuals: Vec::new(),
            status,
        })
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
