//! CUDA engine. u, u_new and f stay on the device for the whole solve; the two u
//! buffers alternate (no copies); the residual norm is reduced inside the sweep, and a
//! device-side stop flag lets the host queue many sweeps and read a few scalars now and
//! then. With `sweeps_per_pass = 2` a fused kernel does two sweeps per pass through
//! memory (temporal blocking), residuals still exact for every sweep.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::{Coefficients, Fields, JacobiEngine, JacobiProblem};
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::run::{Diagnostics, Engine, Field, Status};
use crate::tuning;

pub const KERNELS: KernelSource = KernelSource {
    name: "jacobi/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// Threads per block along x, and rows each block walks down: the fastest of a sweep on
/// the H100 for the seed case (docs/PERFORMANCE.md). KEISAN_JACOBI_TILE=BXxRY overrides
/// them for tuning runs.
pub(super) fn tile(precision: Precision) -> Result<(u32, u32)> {
    let valid = |&bx: &u32, &ry: &u32| bx % 32 == 0 && (32..=1024).contains(&bx) && ry >= 1;
    let expect = "BXxRY, BX a multiple of 32 up to 1024 and RY >= 1, e.g. 512x8";
    let chosen = tuning::pair("KEISAN_JACOBI_TILE", 'x', expect, valid)?;
    Ok(chosen.unwrap_or(match precision {
        Precision::F64 => (512, 8),
        Precision::F32 => (256, 64),
    }))
}

/// The kernels' tile defines for tiles `(bx, ry)` and `(tx, ty)` ([`tile`], [`tile2`]).
pub(super) fn tile_defines(
    (bx, ry): (u32, u32),
    (tx, ty): (usize, usize),
) -> [(&'static str, String); 4] {
    [
        ("J_BX", bx.to_string()),
        ("J_RY", ry.to_string()),
        ("J2_TX", tx.to_string()),
        ("J2_TY", ty.to_string()),
    ]
}
/// Residual history slots on the device; the run loop reads them at least this often.
const HISTORY: usize = 4096;
/// Output tile (x, y) of the two-sweep kernel, which runs 256 threads per block; its two
/// shared-memory tiles must fit the 48 KiB of static shared memory.
/// KEISAN_JACOBI_TILE2=TXxTY overrides it for tuning runs.
pub(super) fn tile2(precision: Precision) -> Result<(usize, usize)> {
    // A side past 48 Ki values cannot fit (the other is >= 8): refused before the product,
    // which then cannot overflow.
    let fits = |&tx: &usize, &ty: &usize| {
        (8..=48 << 10).contains(&tx)
            && (8..=48 << 10).contains(&ty)
            && ((tx + 4) * (ty + 4) + (tx + 2) * (ty + 2)) * precision.bytes() <= 48 << 10
    };
    let expect = "TXxTY, both >= 8, the two shared tiles within 48 KiB, e.g. 64x32";
    Ok(tuning::pair("KEISAN_JACOBI_TILE2", 'x', expect, fits)?.unwrap_or((64, 32)))
}

/// One queued launch: sweeps k .. k+sweeps from buf[src] into buf[dst].
#[derive(Debug, Clone, Copy)]
struct Launch {
    k: u64,
    sweeps: u64,
    src: usize,
    dst: usize,
}

pub struct CudaJacobi<T: Real> {
    gpu: Arc<Gpu>,
    /// The kernels' tile defines (tile, tile2).
    defines: [(&'static str, String); 4],
    problem: JacobiProblem,
    c: Coefficients,
    buf: [CudaSlice<T>; 2],
    f: CudaSlice<T>,
    partials: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    /// [sweeps done, stop flag (1 converged, 2 non-finite), stopped inside a fused pair]
    ctl: CudaSlice<u64>,
    hist: CudaSlice<f64>,
    sweep: CudaFunction,
    cfg: LaunchConfig,
    /// The two-sweep kernel, when in use.
    sweep2: Option<(CudaFunction, LaunchConfig)>,
    /// Index of the buffer that holds u after all queued sweeps (if none stops early).
    head: usize,
    launched: u64,
    /// Launches since the device state was last read.
    log: Vec<Launch>,
    reported: u64,
}

impl<T: Real> CudaJacobi<T> {
    /// `sweeps_per_pass`: 1 (one sweep per kernel) or 2 (temporal blocking).
    pub fn new(
        gpu: Arc<Gpu>,
        problem: &JacobiProblem,
        fields: Fields<T>,
        sweeps_per_pass: u32,
    ) -> Result<Self> {
        let (n, m) = (problem.n, problem.m);
        let cells = n * m;
        gpu.ensure_fits(
            problem.field_bytes(T::PRECISION),
            "the Jacobi fields (u, u_new, f)",
        )?;
        let (bx, ry) = tile(T::PRECISION)?;
        let (tx, ty) = tile2(T::PRECISION)?;
        let defines = tile_defines((bx, ry), (tx, ty));
        let sweep = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_sweep")?;
        let strips = (m - 2).div_ceil(ry as usize).min(65535) as u32;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(bx as usize) as u32, strips, 1),
            block_dim: (bx, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut partial_slots = (cfg.grid_dim.0 * cfg.grid_dim.1) as usize;
        let tiles_y = m.div_ceil(ty);
        let sweep2 = if sweeps_per_pass >= 2 && tiles_y <= 65535 {
            let cfg2 = LaunchConfig {
                grid_dim: (n.div_ceil(tx) as u32, tiles_y as u32, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            partial_slots = partial_slots.max(2 * n.div_ceil(tx) * tiles_y);
            let f2 = gpu.function(&KERNELS, T::PRECISION, &defines, "jacobi_sweep2")?;
            Some((f2, cfg2))
        } else {
            None
        };
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
                gpu.upload_into(&hf, &mut f.as_view_mut())?;
                gpu.upload_into(&u0, &mut b0.as_view_mut())?;
                s.memcpy_dtod(&b0, &mut b1)?;
            }
        }
        Ok(Self {
            defines,
            partials: s.alloc_zeros::<f64>(partial_slots.max(1))?,
            ticket: s.alloc_zeros::<u32>(1)?,
            ctl: s.alloc_zeros::<u64>(3)?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            gpu,
            problem: problem.clone(),
            c,
            buf: [b0, b1],
            f,
            sweep,
            cfg,
            sweep2,
            head: 0,
            launched: 0,
            log: Vec::new(),
            reported: 0,
        })
    }

    /// Queue one launch of `sweeps` (1 or 2) sweeps starting at sweep `k`.
    fn launch(&mut self, k: u64, sweeps: u64, src: usize) -> Result<()> {
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
        let (func, cfg) = match (&self.sweep2, sweeps) {
            (Some((f2, cfg2)), 2) => (f2, *cfg2),
            _ => (&self.sweep, self.cfg),
        };
        let [b0, b1] = &mut self.buf;
        let (src, dst) = if src == 0 { (&*b0, b1) } else { (&*b1, b0) };
        let mut l = self.gpu.stream.launch_builder(func);
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
        // SAFETY: buffers sized n·m, partials sized for either kernel's blocks, hist
        // HISTORY long, ctl 3 values.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Read the device's progress and settle which buffer holds the current u. A solve
    /// that stopped inside a fused pair is brought back to the stopping sweep by redoing
    /// that sweep alone. Returns (sweeps done, stop flag).
    fn resolve(&mut self) -> Result<(u64, u64)> {
        let mut ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
        let steps = ctl[0];
        if steps < self.launched {
            let stop = *self
                .log
                .iter()
                .find(|l| l.k < steps && steps <= l.k + l.sweeps)
                .expect("the stopping sweep was queued since the last read");
            if ctl[2] == 1 && ctl[1] == 1 {
                self.gpu
                    .stream
                    .memcpy_htod(&[stop.k, 0u64, 0u64], &mut self.ctl)?;
                self.launch(stop.k, 1, stop.src)?;
                ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
            }
            self.head = stop.dst;
            self.launched = ctl[0];
        }
        self.log.clear();
        Ok((ctl[0], ctl[1]))
    }
}

impl<T: Real> Engine for CudaJacobi<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let mut left = steps;
        while left > 0 {
            let sweeps = if self.sweep2.is_some() && left >= 2 {
                2
            } else {
                1
            };
            let (k, src) = (self.launched, self.head);
            self.launch(k, sweeps, src)?;
            self.log.push(Launch {
                k,
                sweeps,
                src,
                dst: 1 - src,
            });
            self.head = 1 - src;
            self.launched += sweeps;
            left -= sweeps;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let (steps, flag) = self.resolve()?;
        Diagnostics::from_device(&self.gpu, steps, flag, &self.hist, &mut self.reported)
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        self.resolve()?;
        let data = self.gpu.download(&self.buf[self.head].as_view())?;
        Ok(super::cpu::field_of(&self.problem, data))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        HISTORY as u64
    }
}

impl<T: Real> JacobiEngine for CudaJacobi<T> {
    fn resume(&mut self, step: u64, status: Status, u: &[T]) -> Result<()> {
        self.resolve()?;
        let s = &self.gpu.stream;
        let [b0, b1] = &mut self.buf;
        self.gpu.upload_into(u, &mut b0.as_view_mut())?;
        s.memcpy_dtod(b0, b1)?;
        let flag = status.device_flag();
        s.memcpy_htod(&[step, flag, 0u64], &mut self.ctl)?;
        self.head = 0;
        self.launched = step;
        self.reported = step;
        Ok(())
    }

    fn solution_error(&mut self) -> Result<f64> {
        self.resolve()?;
        let p = &self.problem;
        let func = self.gpu.function(
            &KERNELS,
            T::PRECISION,
            &self.defines,
            "jacobi_solution_error",
        )?;
        let cfg = self.gpu.stride_config(p.cells(), 256);
        let mut partials = self
            .gpu
            .stream
            .alloc_zeros::<f64>(cfg.grid_dim.0 as usize)?;
        let mut out = self.gpu.stream.alloc_zeros::<f64>(1)?;
        let (n, m, kind) = (p.n as i32, p.m as i32, p.exact.code());
        let mut l = self.gpu.stream.launch_builder(&func);
        l.arg(&self.buf[self.head]).arg(&n).arg(&m).arg(&kind);
        l.arg(&self.c.dx).arg(&self.c.dy);
        l.arg(&mut partials).arg(&mut self.ticket).arg(&mut out);
        // SAFETY: grid-stride over n·m values; one partial per block.
        unsafe { l.launch(cfg) }?;
        let sum = self.gpu.stream.clone_dtoh(&out)?[0];
        Ok(p.solution_error_from_sum(sum))
    }
}
