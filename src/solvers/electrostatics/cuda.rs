//! CUDA engine: V and the id arrays stay on the device; one launch per colour; the
//! residual is reduced inside the launches and a device-side stop flag lets the host
//! queue many iterations and read a few scalars now and then (as the Jacobi engine does).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::{EPSILON_0, ElectrostaticsProblem, Geometry, cpu};
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Restart, Status};

pub const KERNELS: KernelSource = KernelSource {
    name: "electrostatics/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// Blocks per multiprocessor a launch aims for (each block walks several z-planes).
const BLOCKS_PER_SM: usize = 32;

/// Residual history slots on the device; the run loop reads them at least this often.
const HISTORY: usize = 4096;

pub struct CudaElectrostatics<T: Real> {
    gpu: Arc<Gpu>,
    p: ElectrostaticsProblem,
    v: CudaSlice<T>,
    idv: CudaSlice<u8>,
    ide: CudaSlice<u8>,
    epsr: CudaSlice<T>,
    coefficients: Vec<CudaSlice<T>>,
    partials: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    ctl: CudaSlice<u64>,
    acc: CudaSlice<f64>,
    hist: CudaSlice<f64>,
    sweep: CudaFunction,
    cfg: LaunchConfig,
    launched: u64,
    reported: u64,
}

impl<T: Real> CudaElectrostatics<T> {
    /// `block`: threads per block in x (colour pairs) and y; the result does not depend
    /// on it (tested).
    pub fn new(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        g: &Geometry,
        restart: Option<Restart<T>>,
        block: (u32, u32),
    ) -> Result<Self> {
        let [nx, ny, nz] = g.counts;
        gpu.ensure_fits(
            (p.points() * (std::mem::size_of::<T>() + 2)) as u128,
            "the potential and the id arrays",
        )?;
        let defines = [
            ("ES_BX", block.0.to_string()),
            ("ES_BY", block.1.to_string()),
        ];
        let sweep = gpu.function(&KERNELS, T::PRECISION, &defines, "es_sweep")?;
        let (gx, gy) = (
            nx.div_ceil(2).div_ceil(block.0 as usize),
            ny.div_ceil(block.1 as usize),
        );
        // About BLOCKS_PER_SM blocks per multiprocessor in all; each walks several
        // z-planes. KEISAN_ES_BLOCKS_PER_SM overrides it for tuning runs.
        let per_sm = std::env::var("KEISAN_ES_BLOCKS_PER_SM")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&v| v >= 1)
            .unwrap_or(BLOCKS_PER_SM);
        let gz = (gpu.multiprocessors * per_sm)
            .div_ceil(gx * gy)
            .clamp(1, nz);
        let cfg = LaunchConfig {
            grid_dim: (gx as u32, gy as u32, gz as u32),
            block_dim: (block.0, block.1, 1),
            shared_mem_bytes: 0,
        };
        let blocks = (cfg.grid_dim.0 * cfg.grid_dim.1 * cfg.grid_dim.2) as usize;
        let s = &gpu.stream;
        let (v0, step, status) = match restart {
            Some(mut r) => (r.take("V")?, r.step, r.status),
            None => (cpu::initial_potential::<T>(g)?, 0, Status::Running),
        };
        let mut coefficients = Vec::new();
        for a in 0..3 {
            let (rp, rm) = cpu::axis_coefficients(&p.nodes[a]);
            for r in [rp, rm] {
                let r: Vec<T> = r.iter().map(|&x| T::lit(x)).collect();
                coefficients.push(s.clone_htod(&r)?);
            }
        }
        let epsr: Vec<T> = g.epsr.iter().map(|&e| T::lit(e)).collect();
        let flag = status.device_flag();
        Ok(Self {
            v: s.clone_htod(&v0)?,
            idv: s.clone_htod(&g.id_volt)?,
            ide: s.clone_htod(&g.id_epsr)?,
            epsr: s.clone_htod(&epsr)?,
            coefficients,
            partials: s.alloc_zeros::<f64>(2 * blocks)?,
            ticket: s.alloc_zeros::<u32>(1)?,
            ctl: s.clone_htod(&[step, flag])?,
            acc: s.alloc_zeros::<f64>(2)?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            sweep,
            cfg,
            launched: step,
            reported: step,
            gpu,
            p: p.clone(),
        })
    }

    fn launch(&mut self, oe: i32, iteration: u64) -> Result<()> {
        let [nx, ny, nz] = self.p.counts().map(|c| c as i32);
        let (omega, q) = (
            T::lit(self.p.omega),
            T::lit(2.0 * self.p.charge_density / EPSILON_0),
        );
        let tol = self.p.tolerance;
        let hist_len = HISTORY as u32;
        let c = &self.coefficients;
        let nepsr = self.epsr.len() as i32;
        let mut l = self.gpu.stream.launch_builder(&self.sweep);
        l.arg(&mut self.v)
            .arg(&self.idv)
            .arg(&self.ide)
            .arg(&self.epsr);
        l.arg(&c[0])
            .arg(&c[1])
            .arg(&c[2])
            .arg(&c[3])
            .arg(&c[4])
            .arg(&c[5]);
        l.arg(&nepsr)
            .arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&oe)
            .arg(&omega)
            .arg(&q)
            .arg(&tol)
            .arg(&iteration);
        l.arg(&mut self.partials)
            .arg(&mut self.ticket)
            .arg(&mut self.ctl);
        l.arg(&mut self.acc).arg(&mut self.hist).arg(&hist_len);
        // SAFETY: V and the id arrays hold nx·ny·nz values, each coefficient array its
        // axis's nodes, partials two values per block, hist HISTORY values.
        unsafe { l.launch(self.cfg) }?;
        Ok(())
    }
}

impl<T: Real> Engine for CudaElectrostatics<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            let k = self.launched;
            self.launch(0, k)?;
            self.launch(1, k)?;
            self.launched += 1;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
        let (steps, flag) = (ctl[0], ctl[1]);
        let new_residuals = self.gpu.ring_range(&self.hist, self.reported, steps)?;
        self.reported = self.reported.max(steps);
        // Launches queued after a stop returned at once: the device count is the truth.
        self.launched = steps;
        Ok(Diagnostics {
            steps,
            new_residuals,
            status: Status::from_device_flag(flag),
        })
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.gpu.stream.clone_dtoh(&self.v)?;
        Ok(cpu::field_of(&self.p, "V", data))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        HISTORY as u64
    }
}
