//! CUDA engine: V, one class byte per node and the class table stay on the device; four
//! launches per iteration (faces and interior, per colour); the residual is reduced inside
//! the interior launches and a device-side stop flag lets the host queue many iterations
//! and read a few scalars now and then (as the Jacobi engine does).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;

use super::{ElectrostaticsProblem, Geometry, Launch, cpu};
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::{Error, Result};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Restart, Status};

pub const KERNELS: KernelSource = KernelSource {
    name: "electrostatics/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// Residual history slots on the device; the run loop reads them at least this often.
const HISTORY: usize = 4096;

/// Waves of resident blocks a sweep aims for; the z-chunk per block follows from it.
const WAVES: usize = 4;

/// The class byte per node: one entry per (held or free, εr) pair present, so a node's
/// update reads one id byte instead of the study's two.
pub struct Classes {
    pub code: Vec<u8>,
    pub eps: Vec<f64>,
    pub fixed: Vec<u8>,
}

impl Classes {
    pub fn of(g: &Geometry) -> Result<Self> {
        let mut index = vec![u16::MAX; 2 * 256];
        let (mut eps, mut fixed) = (Vec::new(), Vec::new());
        let mut code = vec![0u8; g.id_volt.len()];
        for ((c, &v), &e) in code.iter_mut().zip(&g.id_volt).zip(&g.id_epsr) {
            let key = 2 * e as usize + (v != 0) as usize;
            if index[key] == u16::MAX {
                if eps.len() == 256 {
                    return Err(Error::invalid(
                        "electrostatics.permittivities",
                        g.epsr.len() - 1,
                        "the CUDA engine holds at most 256 (dielectric, electrode or free) \
                         combinations; use fewer dielectrics or the CPU",
                    ));
                }
                index[key] = eps.len() as u16;
                eps.push(g.epsr[e as usize]);
                fixed.push((v != 0) as u8);
            }
            *c = index[key] as u8;
        }
        eps.resize(256, 1.0);
        fixed.resize(256, 1);
        Ok(Self { code, eps, fixed })
    }
}

/// Where node 0 of a row sits in the device layout (kernels.cu: ES_OFF).
const ROW_OFFSET: usize = 31;

/// Values per device row: node nx-1 and the pair past it, rounded to 128 bytes of f32.
fn pitch_of(nx: usize) -> usize {
    (nx + ROW_OFFSET + 1).next_multiple_of(32)
}

/// Rows of `nx` values into rows of `pitch` values starting at ROW_OFFSET.
fn pitched<T: Copy + Default + Send + Sync>(data: &[T], nx: usize, pitch: usize) -> Vec<T> {
    let mut out = vec![T::default(); data.len() / nx * pitch];
    out.par_chunks_mut(pitch)
        .zip(data.par_chunks(nx))
        .for_each(|(dst, src)| dst[ROW_OFFSET..ROW_OFFSET + nx].copy_from_slice(src));
    out
}

fn unpitched<T: Copy + Send + Sync>(data: &[T], nx: usize, pitch: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(data.len() / pitch * nx);
    out.par_extend(
        data.par_chunks(pitch)
            .flat_map_iter(|r| r[ROW_OFFSET..ROW_OFFSET + nx].iter().copied()),
    );
    out
}

pub struct CudaElectrostatics<T: Real> {
    gpu: Arc<Gpu>,
    p: ElectrostaticsProblem,
    v: CudaSlice<T>,
    code: CudaSlice<u8>,
    cls_eps: CudaSlice<T>,
    cls_fixed: CudaSlice<u8>,
    /// 2ρ/ε0 per node when ρ varies (a 1-value placeholder otherwise), and the uniform value.
    qnode: CudaSlice<T>,
    has_qnode: i32,
    q: T,
    coefficients: Vec<CudaSlice<T>>,
    partials: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    ctl: CudaSlice<u64>,
    acc: CudaSlice<f64>,
    hist: CudaSlice<f64>,
    sweep: CudaFunction,
    faces: CudaFunction,
    cfg: LaunchConfig,
    faces_cfg: Option<LaunchConfig>,
    pitch: usize,
    planes: usize,
    launched: u64,
    reported: u64,
}

impl<T: Real> CudaElectrostatics<T> {
    pub fn new(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        g: &Geometry,
        restart: Option<Restart<T>>,
        launch: Launch,
    ) -> Result<Self> {
        let block = launch.block;
        if !block.0.is_multiple_of(32) || block.1 == 0 || block.0 * block.1 > 1024 {
            return Err(Error::invalid(
                "KEISAN_ES_BLOCK",
                format!("{}x{}", block.0, block.1),
                "x threads a multiple of 32 (a warp walks one row), at most 1024 in all",
            ));
        }
        let [nx, ny, nz] = g.counts;
        let pitch = pitch_of(nx);
        let rows = ny * nz;
        let qnode = cpu::charge_per_node::<T>(g);
        let per_node = std::mem::size_of::<T>() * (1 + qnode.is_some() as usize) + 1;
        gpu.ensure_fits(
            (rows * pitch * per_node) as u128,
            "the potential, the class bytes and the charge density",
        )?;
        let defines = [
            ("ES_BX", block.0.to_string()),
            ("ES_BY", block.1.to_string()),
            ("ES_MINB", launch.min_blocks.to_string()),
        ];
        let sweep = gpu.function(&KERNELS, T::PRECISION, &defines, "es_sweep")?;
        let faces = gpu.function(&KERNELS, T::PRECISION, &defines, "es_faces")?;
        let (gx, gy) = (
            (nx - 2).div_ceil(2).div_ceil(block.0 as usize),
            (ny - 2).div_ceil(block.1 as usize),
        );
        let per_sm =
            sweep.occupancy_max_active_blocks_per_multiprocessor(block.0 * block.1, 0, None)?;
        let resident = gpu.multiprocessors * (per_sm as usize).max(1);
        let chunks = (WAVES * resident).div_ceil(gx * gy).clamp(1, nz - 2);
        let planes = launch
            .planes
            // At least 8 planes: a block loads 3 planes before its first update.
            .unwrap_or((nz - 2).div_ceil(chunks).max(8))
            .clamp(1, nz - 2);
        let cfg = LaunchConfig {
            grid_dim: (gx as u32, gy as u32, (nz - 2).div_ceil(planes) as u32),
            block_dim: (block.0, block.1, 1),
            shared_mem_bytes: 0,
        };
        let classes = Classes::of(g)?;
        let faces_cfg = has_free_face_nodes(g, &classes).then(|| LaunchConfig {
            grid_dim: (
                nx.max(ny).div_ceil(32) as u32,
                ny.max(nz).div_ceil(8) as u32,
                6,
            ),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        });
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
        let cls_eps: Vec<T> = classes.eps.iter().map(|&e| T::lit(e)).collect();
        let flag = status.device_flag();
        let (qnode, has_qnode) = match qnode {
            Some(q) => (s.clone_htod(&pitched(&q, nx, pitch))?, 1),
            None => (s.alloc_zeros::<T>(1)?, 0),
        };
        Ok(Self {
            v: s.clone_htod(&pitched(&v0, nx, pitch))?,
            code: s.clone_htod(&pitched(&classes.code, nx, pitch))?,
            cls_eps: s.clone_htod(&cls_eps)?,
            cls_fixed: s.clone_htod(&classes.fixed)?,
            qnode,
            has_qnode,
            q: T::lit(g.q_uniform),
            coefficients,
            partials: s.alloc_zeros::<f64>(2 * blocks)?,
            ticket: s.alloc_zeros::<u32>(1)?,
            ctl: s.clone_htod(&[step, flag])?,
            acc: s.alloc_zeros::<f64>(2)?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            sweep,
            faces,
            cfg,
            faces_cfg,
            pitch,
            planes,
            launched: step,
            reported: step,
            gpu,
            p: p.clone(),
        })
    }

    /// The sweep's launch as run: grid, block, planes per block, registers, occupancy.
    pub fn launch_summary(&self) -> Result<String> {
        let threads = self.cfg.block_dim.0 * self.cfg.block_dim.1;
        Ok(format!(
            "grid {:?}, block {:?}, {} planes per block, {} registers/thread, {} blocks/SM",
            self.cfg.grid_dim,
            self.cfg.block_dim,
            self.planes,
            self.sweep.num_regs()?,
            self.sweep
                .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)?
        ))
    }

    fn launch_faces(&mut self, oe: i32) -> Result<()> {
        let Some(cfg) = self.faces_cfg else {
            return Ok(());
        };
        let [nx, ny, nz] = self.p.counts().map(|c| c as i32);
        let pitch = self.pitch as i32;
        let mut l = self.gpu.stream.launch_builder(&self.faces);
        l.arg(&mut self.v).arg(&self.code).arg(&self.cls_fixed);
        l.arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&pitch)
            .arg(&oe)
            .arg(&self.ctl);
        // SAFETY: V and the class bytes hold ny·nz rows of `pitch` values; the kernel
        // touches face nodes only.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    fn launch_sweep(&mut self, oe: i32, iteration: u64) -> Result<()> {
        let [nx, ny, nz] = self.p.counts().map(|c| c as i32);
        let (pitch, planes) = (self.pitch as i32, self.planes as i32);
        let omega = T::lit(self.p.omega);
        let tol = self.p.tolerance;
        let hist_len = HISTORY as u32;
        let c = &self.coefficients;
        let mut l = self.gpu.stream.launch_builder(&self.sweep);
        l.arg(&mut self.v)
            .arg(&self.code)
            .arg(&self.cls_eps)
            .arg(&self.cls_fixed);
        l.arg(&self.qnode).arg(&self.has_qnode).arg(&self.q);
        l.arg(&c[0])
            .arg(&c[1])
            .arg(&c[2])
            .arg(&c[3])
            .arg(&c[4])
            .arg(&c[5]);
        l.arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&pitch)
            .arg(&planes)
            .arg(&oe)
            .arg(&omega)
            .arg(&tol)
            .arg(&iteration);
        l.arg(&mut self.partials)
            .arg(&mut self.ticket)
            .arg(&mut self.ctl);
        l.arg(&mut self.acc).arg(&mut self.hist).arg(&hist_len);
        // SAFETY: V, the class bytes and the per-node charge (when present) hold ny·nz rows
        // of `pitch` values, the class tables 256 entries, each coefficient array its
        // axis's nodes, partials two values per block, hist HISTORY values.
        unsafe { l.launch(self.cfg) }?;
        Ok(())
    }
}

/// Whether any face node is free (else the face launches have nothing to do).
fn has_free_face_nodes(g: &Geometry, c: &Classes) -> bool {
    let [nx, ny, nz] = g.counts;
    (0..nz).any(|k| {
        (0..ny).any(|j| {
            let on =
                |i: usize| i == 0 || i == nx - 1 || j == 0 || j == ny - 1 || k == 0 || k == nz - 1;
            (0..nx).any(|i| on(i) && c.fixed[c.code[(k * ny + j) * nx + i] as usize] == 0)
        })
    })
}

impl<T: Real> Engine for CudaElectrostatics<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            let k = self.launched;
            for oe in 0..2 {
                self.launch_faces(oe)?;
                self.launch_sweep(oe, k)?;
            }
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
        let nx = self.p.counts()[0];
        Ok(cpu::field_of(
            &self.p,
            "V",
            unpitched(&data, nx, self.pitch),
        ))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        HISTORY as u64
    }
}
