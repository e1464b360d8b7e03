//! The CUDA engine: positions, velocities and masses in f64 on the device (the leapfrog
//! in f64), forces in f32 by the study's tiled kernel (or with their terms summed in
//! f64: the accurate mode). For small N the j-sum is split over several blocks per
//! i-tile so every SM has work; the splits are added in order, so runs repeat bit for
//! bit.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::{Gravity, Particles, cpu};
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::precision::Precision;
use crate::run::{Diagnostics, Engine, Field, Status};

pub const KERNELS: KernelSource = KernelSource {
    name: "nbody/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// j-particles per shared-memory tile, and threads per block of the force kernel.
pub const TILE: usize = 256;

/// Blocks the force kernel aims for: enough waves for every SM.
const BLOCKS_WANTED_PER_SM: usize = 4;

pub struct CudaNbody {
    gpu: Arc<Gpu>,
    n: usize,
    n_pad: usize,
    splits: usize,
    tiles_per_split: i32,
    grav: Gravity,
    dt: f64,
    x: CudaSlice<f64>,
    v: CudaSlice<f64>,
    m: CudaSlice<f64>,
    xm: CudaSlice<f32>,
    /// Per split, (ax, ay, az, φ)/G of every (padded) particle at the current positions.
    parts: CudaSlice<f32>,
    pack: CudaFunction,
    forces: CudaFunction,
    kick: CudaFunction,
    drift: CudaFunction,
    steps: u64,
}

impl CudaNbody {
    /// From `p` at step `step`; `accurate`: force terms summed in f64.
    pub fn new(
        gpu: Arc<Gpu>,
        grav: Gravity,
        dt: f64,
        p: &Particles,
        step: u64,
        accurate: bool,
    ) -> Result<Self> {
        let n = p.len();
        let n_pad = n.div_ceil(TILE) * TILE;
        let tiles = n_pad / TILE;
        let wanted = gpu.multiprocessors * BLOCKS_WANTED_PER_SM;
        let splits = wanted.div_ceil(tiles).clamp(1, tiles);
        let tiles_per_split = tiles.div_ceil(splits);
        let splits = tiles.div_ceil(tiles_per_split);
        gpu.ensure_fits(
            (n * 7 * 8 + n_pad * 16 * (splits + 1)) as u128,
            "the particles and their forces",
        )?;
        let defines = [
            ("NB_TILE", TILE.to_string()),
            ("NB_ACCURATE", u8::from(accurate).to_string()),
        ];
        let f = |name| gpu.function(&KERNELS, Precision::F64, &defines, name);
        let s = &gpu.stream;
        let xs: Vec<f64> = p.pos.iter().flatten().copied().collect();
        let vs: Vec<f64> = p.vel.iter().flatten().copied().collect();
        let mut e = Self {
            x: s.clone_htod(&xs)?,
            v: s.clone_htod(&vs)?,
            m: s.clone_htod(&p.mass)?,
            xm: s.alloc_zeros::<f32>(4 * n_pad)?,
            parts: s.alloc_zeros::<f32>(4 * n_pad * splits)?,
            pack: f("nbody_pack")?,
            forces: f("nbody_forces")?,
            kick: f("nbody_kick")?,
            drift: f("nbody_drift")?,
            n,
            n_pad,
            splits,
            tiles_per_split: tiles_per_split as i32,
            grav,
            dt,
            steps: step,
            gpu,
        };
        e.compute_forces()?;
        Ok(e)
    }

    /// Forces at the current positions into `parts`.
    pub fn compute_forces(&mut self) -> Result<()> {
        let s = &self.gpu.stream;
        let (n, n_pad) = (self.n as i32, self.n_pad as i32);
        let mut l = s.launch_builder(&self.pack);
        l.arg(&self.x)
            .arg(&self.m)
            .arg(&mut self.xm)
            .arg(&n)
            .arg(&n_pad);
        // SAFETY: x holds 3n, m n, xm 4·n_pad values; grid-stride.
        unsafe { l.launch(self.gpu.stride_config(self.n_pad, 256)) }?;
        let eps2 = (self.grav.softening * self.grav.softening) as f32;
        let cfg = LaunchConfig {
            grid_dim: ((self.n_pad / TILE) as u32, self.splits as u32, 1),
            block_dim: (TILE as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = s.launch_builder(&self.forces);
        l.arg(&self.xm).arg(&mut self.parts).arg(&n_pad);
        l.arg(&self.tiles_per_split).arg(&eps2);
        // SAFETY: one thread per padded particle; parts holds splits·n_pad float4s.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    fn kick(&mut self, h: f64, phi: Option<&mut CudaSlice<f64>>) -> Result<()> {
        let (splits, n_pad, n) = (self.splits as i32, self.n_pad as i32, self.n as i32);
        let g = self.grav.g;
        let mut l = self.gpu.stream.launch_builder(&self.kick);
        l.arg(&self.parts).arg(&splits).arg(&n_pad).arg(&mut self.v);
        l.arg(&n).arg(&g).arg(&h);
        let null = 0u64;
        match phi {
            Some(p) => l.arg(p),
            None => l.arg(&null),
        };
        // SAFETY: parts holds splits·n_pad float4s, v 3n values, phi (if any) n.
        unsafe { l.launch(self.gpu.stride_config(self.n, 256)) }?;
        Ok(())
    }

    fn drift(&mut self) -> Result<()> {
        let (n, dt) = (self.n as i32, self.dt);
        let mut l = self.gpu.stream.launch_builder(&self.drift);
        l.arg(&mut self.x).arg(&self.v).arg(&n).arg(&dt);
        // SAFETY: x and v hold 3n values; grid-stride.
        unsafe { l.launch(self.gpu.stride_config(3 * self.n, 256)) }?;
        Ok(())
    }

    /// Accelerations and potentials at the current positions, on the host (for tests:
    /// the forces against the CPU direct sum).
    pub fn accelerations(&mut self) -> Result<(Vec<[f64; 3]>, Vec<f64>)> {
        let parts = self.gpu.stream.clone_dtoh(&self.parts)?;
        let g = self.grav.g;
        let mut acc = vec![[0.0; 3]; self.n];
        let mut phi = vec![0.0; self.n];
        for s in 0..self.splits {
            for i in 0..self.n {
                let q = &parts[4 * (s * self.n_pad + i)..4 * (s * self.n_pad + i) + 4];
                for k in 0..3 {
                    acc[i][k] += q[k] as f64;
                }
                phi[i] += q[3] as f64;
            }
        }
        for (a, p) in acc.iter_mut().zip(&mut phi) {
            *a = a.map(|v| g * v);
            *p *= g;
        }
        Ok((acc, phi))
    }

    /// Seconds of one force evaluation (pack and forces), the median of `reps`.
    pub fn time_forces(&mut self, reps: usize) -> Result<f64> {
        let gpu = self.gpu.clone();
        crate::device::ceilings::time_median(&gpu, 2, reps, || self.compute_forces())
    }

    pub fn splits(&self) -> usize {
        self.splits
    }
}

impl Engine for CudaNbody {
    type Real = f64;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let half = 0.5 * self.dt;
        for _ in 0..steps {
            self.kick(half, None)?;
            self.drift()?;
            self.compute_forces()?;
            self.kick(half, None)?;
        }
        self.steps += steps;
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let v = self.gpu.stream.clone_dtoh(&self.v)?;
        let status = if v.iter().all(|x| x.is_finite()) {
            Status::Running
        } else {
            Status::NonFinite
        };
        Ok(Diagnostics::steps_only(self.steps, status))
    }

    fn snapshot(&mut self) -> Result<Field<f64>> {
        let s = &self.gpu.stream;
        let (x, v, m) = (
            s.clone_dtoh(&self.x)?,
            s.clone_dtoh(&self.v)?,
            s.clone_dtoh(&self.m)?,
        );
        let p = Particles {
            pos: x.chunks(3).map(|c| [c[0], c[1], c[2]]).collect(),
            vel: v.chunks(3).map(|c| [c[0], c[1], c[2]]).collect(),
            mass: m,
        };
        Ok(cpu::particles_field(&p))
    }
}
