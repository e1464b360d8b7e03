//! CUDA engine. u, u_new and f stay on the device for the whole solve; the two u
//! buffers alternate by parity (no copies); the residual norm is reduced inside the
//! sweep, and a device-side stop flag lets the host queue many sweeps and read a few
//! scalars now and then.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::{Coefficients, Fields, JacobiEngine, JacobiProblem};
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::run::{Diagnostics, Engine, Field, Status};

pub const KERNELS: KernelSource = KernelSource {
    name: "jacobi/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// Threads per block along x, and rows each block walks down: the fastest of a sweep on
/// the H100 for the seed case (docs/PERFORMANCE.md). KEISAN_JACOBI_TILE=BXxRY overrides
/// them for tuning runs.
fn tile(precision: Precision) -> (u32, u32) {
    static TILE: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    let chosen = *TILE.get_or_init(|| {
        std::env::var("KEISAN_JACOBI_TILE")
            .ok()
            .and_then(|v| {
                let (a, b) = v.split_once('x')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .filter(|&(bx, ry): &(u32, u32)| bx % 32 == 0 && (32..=1024).contains(&bx) && ry >= 1)
    });
    chosen.unwrap_or(match precision {
        Precision::F64 => (512, 8),
        Precision::F32 => (256, 64),
    })
}

fn tile_defines(precision: Precision) -> [(&'static str, String); 2] {
    let (bx, ry) = tile(precision);
    [("J_BX", bx.to_string()), ("J_RY", ry.to_string())]
}
/// Residual history slots on the device; the run loop reads them at least this often.
const HISTORY: usize = 4096;

pub struct CudaJacobi<T: Real> {
    gpu: Arc<Gpu>,
    problem: JacobiProblem,
    c: Coefficients,
    /// u after an even number of sweeps lives in buf[0], after an odd number in buf[1].
    buf: [CudaSlice<T>; 2],
    f: CudaSlice<T>,
    partials: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    /// [sweeps done, stop flag]
    ctl: CudaSlice<u64>,
    hist: CudaSlice<f64>,
    sweep: CudaFunction,
    cfg: LaunchConfig,
    launched: u64,
    reported: u64,
}

impl<T: Real> CudaJacobi<T> {
    pub fn new(gpu: Arc<Gpu>, problem: &JacobiProblem, fields: Fields<T>) -> Result<Self> {
        let (n, m) = (problem.n, problem.m);
        let cells = n * m;
        gpu.ensure_fits(
            problem.field_bytes(T::PRECISION),
            "the Jacobi fields (u, u_new, f)",
        )?;
        let (bx, ry) = tile(T::PRECISION);
        let defines = tile_defines(T::PRECISION);
        let sweep = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_sweep")?;
        let strips = (m - 2).div_ceil(ry as usize).min(65535) as u32;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(bx as usize) as u32, strips, 1),
            block_dim: (bx, 1, 1),
            shared_mem_bytes: 0,
        };
        let blocks = (cfg.grid_dim.0 * cfg.grid_dim.1) as usize;
        let s = &gpu.stream;
        // SAFETY: every element is written below before it is read.
        let (mut b0, mut b1, mut f) = unsafe {
            (
                s.alloc::<T>(cells)?,
                s.alloc::<T>(cells)?,
                s.alloc::<T>(cells)?,
            )
        };
        let c = problem.coefficients();
        match fields {
            Fields::Manufactured => {
                let init = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_init")?;
                let (ni, mi, kind) = (n as i32, m as i32, problem.exact.code());
                let mut l = s.launch_builder(&init);
                l.arg(&mut b0).arg(&mut b1).arg(&mut f);
                l.arg(&ni).arg(&mi).arg(&kind);
                l.arg(&problem.alpha).arg(&c.dx).arg(&c.dy);
                // SAFETY: the buffers hold n·m values; the kernel is grid-stride.
                unsafe { l.launch(gpu.stride_config(cells, 256)) }?;
            }
            Fields::Given { f: hf, u0 } => {
                s.memcpy_htod(&hf, &mut f)?;
                s.memcpy_htod(&u0, &mut b0)?;
                s.memcpy_htod(&u0, &mut b1)?;
            }
        }
        Ok(Self {
            partials: s.alloc_zeros::<f64>(blocks.max(1))?,
            ticket: s.alloc_zeros::<u32>(1)?,
            ctl: s.alloc_zeros::<u64>(2)?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            gpu,
            problem: problem.clone(),
            c,
            buf: [b0, b1],
            f,
            sweep,
            cfg,
            launched: 0,
            reported: 0,
        })
    }

    fn current(&self, steps: u64) -> &CudaSlice<T> {
        &self.buf[(steps % 2) as usize]
    }
}

impl<T: Real> Engine for CudaJacobi<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let (n, m) = (self.problem.n as i32, self.problem.m as i32);
        let (ax, ay, b, rb, omega) = (
            T::lit(self.c.ax),
            T::lit(self.c.ay),
            T::lit(self.c.b),
            T::lit(self.c.rb),
            T::lit(self.problem.relax),
        );
        let tol = self.problem.tolerance;
        let hist_len = HISTORY as u32;
        for _ in 0..steps {
            let k = self.launched;
            let [b0, b1] = &mut self.buf;
            let (src, dst) = if k.is_multiple_of(2) {
                (&*b0, b1)
            } else {
                (&*b1, b0)
            };
            let mut l = self.gpu.stream.launch_builder(&self.sweep);
            l.arg(src).arg(dst).arg(&self.f);
            l.arg(&n)
                .arg(&m)
                .arg(&ax)
                .arg(&ay)
                .arg(&b)
                .arg(&rb)
                .arg(&omega);
            l.arg(&tol).arg(&k);
            l.arg(&mut self.partials).arg(&mut self.ticket);
            l.arg(&mut self.ctl).arg(&mut self.hist).arg(&hist_len);
            // SAFETY: buffers sized n·m, partials one per block, hist HISTORY long.
            unsafe { l.launch(self.cfg) }?;
            self.launched += 1;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
        let (steps, flag) = (ctl[0], ctl[1]);
        let mut new_residuals = Vec::new();
        if steps > self.reported {
            let hist = self.gpu.stream.clone_dtoh(&self.hist)?;
            new_residuals.extend((self.reported..steps).map(|k| hist[k as usize % HISTORY]));
            self.reported = steps;
        }
        Ok(Diagnostics {
            steps,
            new_residuals,
            status: match flag {
                0 => Status::Running,
                1 => Status::Converged,
                _ => Status::NonFinite,
            },
        })
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let steps = self.gpu.stream.clone_dtoh(&self.ctl)?[0];
        let data = self.gpu.stream.clone_dtoh(self.current(steps))?;
        Ok(super::cpu::field_of(&self.problem, data))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        HISTORY as u64
    }
}

impl<T: Real> JacobiEngine for CudaJacobi<T> {
    fn solution_error(&mut self) -> Result<f64> {
        let p = &self.problem;
        let defines = tile_defines(T::PRECISION);
        let func = self
            .gpu
            .function(&KERNELS, T::PRECISION, &defines, "jacobi_solution_error")?;
        let steps = self.gpu.stream.clone_dtoh(&self.ctl)?[0];
        let cfg = self.gpu.stride_config(p.cells(), 256);
        let mut partials = self
            .gpu
            .stream
            .alloc_zeros::<f64>(cfg.grid_dim.0 as usize)?;
        let mut out = self.gpu.stream.alloc_zeros::<f64>(1)?;
        let (n, m, kind) = (p.n as i32, p.m as i32, p.exact.code());
        let mut l = self.gpu.stream.launch_builder(&func);
        l.arg(&self.buf[(steps % 2) as usize])
            .arg(&n)
            .arg(&m)
            .arg(&kind);
        l.arg(&self.c.dx).arg(&self.c.dy);
        l.arg(&mut partials).arg(&mut self.ticket).arg(&mut out);
        // SAFETY: grid-stride over n·m values; one partial per block.
        unsafe { l.launch(cfg) }?;
        let sum = self.gpu.stream.clone_dtoh(&out)?[0];
        Ok(p.solution_error_from_sum(sum))
    }
}
