//! The CUDA engine: positions, velocities and masses in f64 on the device (the leapfrog
//! in f64), forces in f32 by a tiled kernel holding several i-particles per thread (or
//! with their terms summed in f64: the accurate mode). The j-sum is split over blocks
//! so the grid fills whole waves of the device (small N: every SM works; large N: no
//! half-empty last wave); the splits are added in order, so runs repeat bit for bit.
//! The potential for the diagnostics is an f64 direct sum on the device ([`potential`]).

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

/// The force kernel's block: threads (= j-particles per shared tile) and i-particles per
/// thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForceShape {
    pub threads: usize,
    pub ipt: usize,
}

impl Default for ForceShape {
    fn default() -> Self {
        Self {
            threads: 128,
            ipt: 8,
        }
    }
}

impl ForceShape {
    /// i-particles per block: the padding unit of N.
    pub fn block_particles(&self) -> usize {
        self.threads * self.ipt
    }
}

/// Tiles of j per split for `i_blocks` i-blocks over `tiles` j-tiles on `sms`
/// multiprocessors. The kernel is issue-bound, so an SM's time is its share of the
/// grid's blocks: the best split makes ceil(blocks / sms) · tiles_per_split — the
/// time of the busiest SM — closest to the even share, with at least two blocks per SM
/// where N allows (latency hiding), and of equal choices the fewest splits (less to
/// write and add up).
pub fn tiles_per_split(i_blocks: usize, tiles: usize, sms: usize) -> usize {
    let work = (i_blocks * tiles) as f64;
    let mut best = (f64::MIN, tiles);
    for tps in (1..=tiles).rev() {
        let blocks = i_blocks * tiles.div_ceil(tps);
        let busiest = blocks.div_ceil(sms) * tps;
        let mut eff = work / (busiest * sms) as f64;
        if blocks < 2 * sms && tps > 1 {
            eff *= 0.9; // too few warps per SM to hide latency
        }
        if eff > best.0 + 0.005 {
            best = (eff, tps);
        }
    }
    best.1
}

pub struct CudaNbody {
    gpu: Arc<Gpu>,
    n: usize,
    n_pad: usize,
    shape: ForceShape,
    splits: usize,
    tiles_per_split: i32,
    grav: Gravity,
    /// What the kick multiplies the kernel's sums by: G, or G·m when every mass is m.
    scale: f64,
    dt: f64,
    x: CudaSlice<f64>,
    v: CudaSlice<f64>,
    m: CudaSlice<f64>,
    xm: CudaSlice<f32>,
    /// Per split, the kernel's (ax, ay, az, 0) of every (padded) particle at the current
    /// positions.
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
        Self::with_shape(gpu, grav, dt, p, step, accurate, ForceShape::default())
    }

    /// [`CudaNbody::new`] with the force kernel's block shape chosen (the bench tries
    /// several).
    pub fn with_shape(
        gpu: Arc<Gpu>,
        grav: Gravity,
        dt: f64,
        p: &Particles,
        step: u64,
        accurate: bool,
        shape: ForceShape,
    ) -> Result<Self> {
        let n = p.len();
        let n_pad = n.div_ceil(shape.block_particles()) * shape.block_particles();
        let tiles = n_pad / shape.threads;
        let i_blocks = n_pad / shape.block_particles();
        let tps = tiles_per_split(i_blocks, tiles, gpu.multiprocessors);
        let splits = tiles.div_ceil(tps);
        gpu.ensure_fits(
            (n * 7 * 8 + n_pad * 16 * (splits + 1)) as u128,
            "the particles and their forces",
        )?;
        let equal_mass = p.mass.iter().all(|&m| m == p.mass[0]);
        let tuning = |var: &str, default: &str| std::env::var(var).unwrap_or(default.into());
        let defines = [
            // Tuned on the H100 (docs/PERFORMANCE.md): 2297 against 2245 G/s at unroll 4.
            ("NB_UNROLL", tuning("KEISAN_NBODY_UNROLL", "2")),
            ("NB_MINB", tuning("KEISAN_NBODY_MINB", "3")),
            ("NB_THREADS", shape.threads.to_string()),
            ("NB_IPT", shape.ipt.to_string()),
            ("NB_ACCURATE", u8::from(accurate).to_string()),
            ("NB_GUARD", u8::from(grav.softening == 0.0).to_string()),
            ("NB_EQUAL_MASS", u8::from(equal_mass).to_string()),
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
            shape,
            splits,
            tiles_per_split: tps as i32,
            scale: if equal_mass {
                grav.g * p.mass[0]
            } else {
                grav.g
            },
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
            grid_dim: (
                (self.n_pad / self.shape.block_particles()) as u32,
                self.splits as u32,
                1,
            ),
            block_dim: (self.shape.threads as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = s.launch_builder(&self.forces);
        l.arg(&self.xm).arg(&mut self.parts).arg(&n_pad);
        l.arg(&self.tiles_per_split).arg(&eps2);
        // SAFETY: the grid covers n_pad i-particles (ipt per thread) and the splits'
        // tiles; parts holds splits·n_pad float4s.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    fn kick(&mut self, h: f64) -> Result<()> {
        let (splits, n_pad, n) = (self.splits as i32, self.n_pad as i32, self.n as i32);
        let mut l = self.gpu.stream.launch_builder(&self.kick);
        l.arg(&self.parts).arg(&splits).arg(&n_pad).arg(&mut self.v);
        l.arg(&n).arg(&self.scale).arg(&h);
        // SAFETY: parts holds splits·n_pad float4s, v 3n values.
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

    /// Accelerations at the current positions, on the host (the splits added in order
    /// as the kick adds them), for tests against the CPU direct sum.
    pub fn accelerations(&mut self) -> Result<Vec<[f64; 3]>> {
        let parts = self.gpu.stream.clone_dtoh(&self.parts)?;
        let mut acc = vec![[0.0; 3]; self.n];
        for (i, a) in acc.iter_mut().enumerate() {
            for s in 0..self.splits {
                let q = &parts[4 * (s * self.n_pad + i)..];
                for k in 0..3 {
                    a[k] += q[k] as f64;
                }
            }
            *a = a.map(|v| self.scale * v);
        }
        Ok(acc)
    }

    /// Seconds of one force evaluation (pack and forces), the median of `reps`.
    pub fn time_forces(&mut self, reps: usize) -> Result<f64> {
        let gpu = self.gpu.clone();
        crate::device::ceilings::time_median(&gpu, 2, reps, || self.compute_forces())
    }

    /// Seconds of the CUDA sample's kernel (one i per thread, 256-particle tiles, no
    /// split) on the same packed particles, the median of `reps`; N is padded to 256.
    pub fn time_baseline(&mut self, reps: usize) -> Result<f64> {
        let gpu = self.gpu.clone();
        let f = gpu.function(&KERNELS, Precision::F64, &[], "nbody_baseline")?;
        let n256 = self.n.div_ceil(256) * 256;
        let mut xm = gpu.stream.alloc_zeros::<f32>(4 * n256)?;
        let mut acc = gpu.stream.alloc_zeros::<f32>(4 * n256)?;
        let pack = gpu.function(&KERNELS, Precision::F64, &[], "nbody_pack")?;
        let (n, n_pad) = (self.n as i32, n256 as i32);
        let mut l = gpu.stream.launch_builder(&pack);
        l.arg(&self.x).arg(&self.m).arg(&mut xm).arg(&n).arg(&n_pad);
        // SAFETY: x holds 3n, m n, xm 4·n256 values; grid-stride.
        unsafe { l.launch(gpu.stride_config(n256, 256)) }?;
        let eps2 = (self.grav.softening * self.grav.softening) as f32;
        let cfg = LaunchConfig {
            grid_dim: ((n256 / 256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        crate::device::ceilings::time_median(&gpu, 2, reps, || {
            let mut l = gpu.stream.launch_builder(&f);
            l.arg(&xm).arg(&mut acc).arg(&n_pad).arg(&eps2);
            // SAFETY: one thread per padded particle; both buffers hold n256 float4s.
            unsafe { l.launch(cfg) }?;
            Ok(())
        })
    }

    pub fn splits(&self) -> usize {
        self.splits
    }
}

/// The potential per unit mass of every particle of `p`: an f64 direct sum on `gpu`
/// (self pair excluded, j in index order), like the CPU reference's — for diagnostics
/// at sizes where the host's O(N²) sum would dominate the run.
pub fn potential(gpu: &Gpu, grav: Gravity, p: &Particles) -> Result<Vec<f64>> {
    let f = gpu.function(&KERNELS, Precision::F64, &[], "nbody_potential")?;
    let s = &gpu.stream;
    let xs: Vec<f64> = p.pos.iter().flatten().copied().collect();
    let (x, m) = (s.clone_htod(&xs)?, s.clone_htod(&p.mass)?);
    let mut phi = s.alloc_zeros::<f64>(p.len())?;
    let n = p.len() as i32;
    let eps2 = grav.softening * grav.softening;
    let cfg = LaunchConfig {
        grid_dim: (p.len().div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = s.launch_builder(&f);
    l.arg(&x)
        .arg(&m)
        .arg(&mut phi)
        .arg(&n)
        .arg(&eps2)
        .arg(&grav.g);
    // SAFETY: one thread per particle (rounded up; the extra ones store nothing); x
    // holds 3n, m and phi n values.
    unsafe { l.launch(cfg) }?;
    Ok(s.clone_dtoh(&phi)?)
}

impl Engine for CudaNbody {
    type Real = f64;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let half = 0.5 * self.dt;
        for _ in 0..steps {
            self.kick(half)?;
            self.drift()?;
            self.compute_forces()?;
            self.kick(half)?;
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

#[cfg(test)]
mod tests {
    use super::tiles_per_split;

    /// Time of the busiest SM over the even share, for the chosen split.
    fn efficiency(i_blocks: usize, tiles: usize, sms: usize) -> (f64, usize) {
        let tps = tiles_per_split(i_blocks, tiles, sms);
        let blocks = i_blocks * tiles.div_ceil(tps);
        let busiest = blocks.div_ceil(sms) * tps;
        ((i_blocks * tiles) as f64 / (busiest * sms) as f64, blocks)
    }

    #[test]
    fn splits_fill_the_device_evenly() {
        // 128×8 blocks on an H100 (132 SMs) and an H200 (132) and a smaller part (46).
        for sms in [132, 46] {
            for n in [1 << 14, 1 << 16, 100_000, 1 << 18, 1 << 20] {
                let n_pad = (n as usize).div_ceil(1024) * 1024;
                let (eff, blocks) = efficiency(n_pad / 1024, n_pad / 128, sms);
                assert!(eff > 0.9, "n {n} on {sms} SMs: {eff}");
                assert!(blocks >= 2 * sms, "n {n} on {sms} SMs: {blocks} blocks");
            }
        }
        // One i-block and one tile: nothing to split.
        assert_eq!(tiles_per_split(1, 1, 132), 1);
    }
}
