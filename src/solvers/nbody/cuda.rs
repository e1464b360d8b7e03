//! The CUDA engine: positions, velocities and masses in f64 on the device (the leapfrog
//! in f64), forces in f32 by a tiled kernel holding several i-particles per thread (or
//! with their terms summed in f64: the accurate mode). The j-sum is split over blocks
//! so the grid fills whole waves of the device (small N: every SM works; large N: no
//! half-empty last wave); the splits are added in order, so runs repeat bit for bit.
//! On the devices of one process at N ≥ 2^16 (H100) each pair of tiles is evaluated once
//! instead (nbody_mutual: Newton's third law, 9.6 instead of 12.1 instructions per
//! interaction), the circle method's rounds giving every tile to one block per round
//! (several devices: every count-th round each, then each gathers its share's sums from
//! all), so again every sum is added in a fixed order.
//! The potential for the diagnostics is an f64 direct sum on the device ([`potential`]).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use super::{Gravity, Particles, cpu};
use crate::device::cuda::{Gpu, KernelSource};
use crate::error::Result;
use crate::parallel::{World, world};
use crate::precision::Precision;
use crate::run::{Diagnostics, Engine, Field, Status};
use crate::tuning;

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
    /// Each pair of tiles once (nbody_mutual) on the devices of one process: Some(choice),
    /// or None for the default (where its pairs of tiles fill the devices a few times
    /// over; KEISAN_NBODY_MUTUAL=0|1 overrides it). Never under mpirun or in accurate mode.
    pub mutual: Option<bool>,
}

impl Default for ForceShape {
    fn default() -> Self {
        Self {
            threads: 128,
            ipt: 8,
            mutual: None,
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

/// nbody_mutual is used where its pairs of tiles (one block each) come to at least this
/// many blocks per multiprocessor (two waves at 6 blocks per SM): on the H100 it beat
/// nbody_forces from N = 2^16 (2016 pairs: 2573 against 2243 G interactions/s) and lost
/// at 2^15 (496 pairs: 1856 against 2129; docs/PERFORMANCE.md).
const MUTUAL_MIN_BLOCKS_PER_SM: usize = 12;

/// Waves of resident blocks each nbody_mutual launch aims for, by running that many
/// rounds side by side, each into its own split (one round has only tiles/2 blocks): on
/// the H100 at N = 2^20, 1 / 2 / 4 / 6 rounds per launch gave 2592 / 2729 / 2868 / 2916 G
/// interactions/s (docs/PERFORMANCE.md).
const MUTUAL_WAVES: usize = 4;

/// One device's share: its particles (a contiguous i-range of n, kicked and drifted
/// here), every particle's packed f32 position (its own segment packed here, the
/// others' copied from their devices each step), and the splits of its force sums.
struct Part {
    gpu: Arc<Gpu>,
    /// Its particles' segment among all.
    segment: usize,
    /// Peer copies of the other devices' segments run here, beside the local forces.
    copy: Arc<cudarc::driver::CudaStream>,
    /// Recorded after this device packed its segment / after its copies of the others'.
    packed: cudarc::driver::CudaEvent,
    copied: cudarc::driver::CudaEvent,
    /// Recorded after the forces that read the copied segments.
    forces_done: cudarc::driver::CudaEvent,
    /// nbody_mutual over several devices: recorded after this device's share of every
    /// device's sums arrived in `parts`.
    gathered: cudarc::driver::CudaEvent,
    n: usize,
    x: CudaSlice<f64>,
    v: CudaSlice<f64>,
    m: CudaSlice<f64>,
    /// x y z m of every segment (padded), in segment order.
    xm: CudaSlice<f32>,
    /// Per split, the kernel's (ax, ay, az, 0) of this share's (padded) particles.
    parts: CudaSlice<f32>,
    /// nbody_mutual over several devices: this device's rounds' sums for every particle,
    /// `slots` runs of all of them (a placeholder otherwise: one device sums into parts).
    sums: CudaSlice<f32>,
    /// nbody_mutual's rounds per launch.
    slots: usize,
    /// Per j-segment: (first tile, end tile, tiles per split, first split).
    segments: Vec<(i32, i32, i32, i32)>,
    splits: usize,
    pack: CudaFunction,
    forces: CudaFunction,
    /// `forces` is nbody_mutual (each pair of tiles once).
    mutual: bool,
    kick: CudaFunction,
    drift: CudaFunction,
}

/// Under mpirun, every segment in a page-locked host buffer (segment order).
struct Ranks {
    world: World,
    host: cudarc::driver::PinnedHostSlice<f32>,
}

/// The engine over one or several devices in one process (the study's two-GPU scheme,
/// for any count): each device owns a contiguous share of the particles, packs their
/// positions, starts the forces from its own share while the other devices' positions
/// arrive by peer copies on a second stream, then adds the forces from those. Every
/// force is summed over the j-segments in particle order, so a run repeats bit for bit;
/// another device count groups the f32 sums differently (equal within the f32 bound).
pub struct CudaNbody {
    /// This process's devices (one under mpirun).
    parts: Vec<Part>,
    /// Under mpirun: the ranks, each with one segment, and the host buffer the
    /// segments travel through.
    ranks: Option<Ranks>,
    shape: ForceShape,
    /// Padded particles per segment (= per device) and their offsets in `xm`.
    seg_pad: Vec<usize>,
    seg_off: Vec<usize>,
    /// Particles of the run (all ranks').
    total: usize,
    grav: Gravity,
    /// What the kick multiplies the kernel's sums by: G, or G·m when every mass is m.
    scale: f64,
    dt: f64,
    steps: u64,
}

impl CudaNbody {
    /// From `p` at step `step` on `gpus` (one share each); `accurate`: force terms
    /// summed in f64.
    pub fn new(
        gpus: &[Arc<Gpu>],
        grav: Gravity,
        dt: f64,
        p: &Particles,
        step: u64,
        accurate: bool,
    ) -> Result<Self> {
        Self::with_shape(gpus, grav, dt, p, step, accurate, ForceShape::default())
    }

    /// [`CudaNbody::new`] with the force kernel's block shape chosen (the bench tries
    /// several).
    pub fn with_shape(
        gpus: &[Arc<Gpu>],
        grav: Gravity,
        dt: f64,
        p: &Particles,
        step: u64,
        accurate: bool,
        shape: ForceShape,
    ) -> Result<Self> {
        Self::build(gpus, None, grav, dt, p, step, accurate, shape)
    }

    /// [`CudaNbody::new`] for a run's placement: with `world` (mpirun), this rank's
    /// share of `p` on its one GPU — the ranks' segments travel by the study's
    /// accumulation stages (partner rank XOR 2^s, the data doubling each stage) when the
    /// rank count is a power of two, else round the ring (the transport), and the forces
    /// of each arrival start while the next stage travels.
    pub fn placed(
        gpus: &[Arc<Gpu>],
        world: Option<World>,
        grav: Gravity,
        dt: f64,
        p: &Particles,
        step: u64,
        accurate: bool,
    ) -> Result<Self> {
        let shape = ForceShape::default();
        Self::build(gpus, world, grav, dt, p, step, accurate, shape)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        gpus: &[Arc<Gpu>],
        world: Option<World>,
        grav: Gravity,
        dt: f64,
        p: &Particles,
        step: u64,
        accurate: bool,
        shape: ForceShape,
    ) -> Result<Self> {
        let n = p.len();
        if world.is_some() && gpus.len() != 1 {
            return Err(crate::error::Error::invalid(
                "--devices",
                gpus.len(),
                "under mpirun each rank runs on one GPU (local rank mod GPUs)",
            ));
        }
        let count = world.map_or(gpus.len(), |w| w.size);
        let bp = shape.block_particles();
        // Devices of one process: each pair of tiles once (nbody_mutual) where its pairs
        // of tiles fill the devices a few times over (KEISAN_NBODY_MUTUAL=0|1 forces the
        // choice).
        let mutual = world.is_none()
            && !accurate
            && match (shape.mutual, tuning::switch("KEISAN_NBODY_MUTUAL")?) {
                (Some(choice), _) | (None, Some(choice)) => choice,
                (None, None) => {
                    let tiles = 2 * n.div_ceil(2 * bp);
                    let sms: usize = gpus.iter().map(|g| g.multiprocessors).sum();
                    tiles * (tiles - 1) / 2 >= MUTUAL_MIN_BLOCKS_PER_SM * sms
                }
            };
        // nbody_mutual pairs tiles of bp particles: an even count.
        let unit = if mutual { 2 * bp } else { bp };
        let bounds: Vec<usize> = match world {
            Some(w) => (0..=count)
                .map(|r| {
                    if r < count {
                        cpu::share(n, w, r).start
                    } else {
                        n
                    }
                })
                .collect(),
            None => (0..=count).map(|d| n * d / count).collect(),
        };
        let widest = (0..count)
            .map(|d| bounds[d + 1] - bounds[d])
            .max()
            .unwrap_or(0);
        // Ranks exchange equal blocks: every segment as wide as the widest.
        let seg_pad: Vec<usize> = (0..count)
            .map(|d| match world {
                Some(_) => widest.div_ceil(bp).max(1) * bp,
                None => (bounds[d + 1] - bounds[d]).div_ceil(unit).max(1) * unit,
            })
            .collect();
        let seg_off: Vec<usize> = (0..count).map(|d| seg_pad[..d].iter().sum()).collect();
        let total: usize = seg_pad.iter().sum();
        let equal_mass = p.mass.iter().all(|&m| m == p.mass[0]);
        // Tuned on the H100 (docs/PERFORMANCE.md): unroll 2 (2297 against 2245 G/s at 4);
        // 5 blocks per SM for the equal-mass kernel (102 registers: 2284 against 2190 G/s
        // at 3), 3 for the general one (2118 against 2086 at 5).
        // nbody_mutual: 6 blocks per SM with equal masses (85 registers, no spill: 2916
        // against 2663 G/s at 5), 5 with unequal ones (2363; 6: 2151).
        let minb = match (mutual, equal_mass) {
            (false, true) => 5,
            (false, false) => 3,
            (true, true) => 6,
            (true, false) => 5,
        };
        // KEISAN_NBODY_UNROLL and KEISAN_NBODY_MINB override them for tuning runs.
        let unroll = tuning::number("KEISAN_NBODY_UNROLL", 1..=16u32)?.unwrap_or(2);
        let minb = tuning::number("KEISAN_NBODY_MINB", 1..=32u32)?.unwrap_or(minb);
        let defines = [
            ("NB_UNROLL", unroll.to_string()),
            ("NB_MINB", minb.to_string()),
            ("NB_THREADS", shape.threads.to_string()),
            ("NB_IPT", shape.ipt.to_string()),
            ("NB_ACCURATE", u8::from(accurate).to_string()),
            ("NB_GUARD", u8::from(grav.softening == 0.0).to_string()),
            ("NB_EQUAL_MASS", u8::from(equal_mass).to_string()),
        ];
        if gpus.len() > 1 {
            crate::device::cuda::enable_peer_access(gpus)?;
        }
        let mut parts = Vec::with_capacity(gpus.len());
        for (k, gpu) in gpus.iter().enumerate() {
            let d = world.map_or(k, |w| w.rank);
            let (first, own) = (bounds[d], bounds[d + 1] - bounds[d]);
            let i_blocks = seg_pad[d] / bp;
            let mut segments = Vec::with_capacity(count);
            let f = |name| gpu.function(&KERNELS, Precision::F64, &defines, name);
            let forces = f(if mutual {
                "nbody_mutual"
            } else {
                "nbody_forces"
            })?;
            // nbody_mutual: rounds side by side, one sum buffer each, for MUTUAL_WAVES
            // waves of blocks per launch (KEISAN_NBODY_SLOTS overrides); over several
            // devices each takes every count-th round and its forces for all particles,
            // and every device gathers its share's from all: count·slots splits.
            let (mut splits, mut slots) = (0, 0);
            if mutual {
                let per_sm = forces.occupancy_max_active_blocks_per_multiprocessor(
                    shape.threads as u32,
                    0,
                    None,
                )? as usize;
                let (resident, round) = (gpu.multiprocessors * per_sm.max(1), total / bp / 2);
                let most = (2 * round - 1).div_ceil(count);
                slots = tuning::at_least("KEISAN_NBODY_SLOTS", 1)?
                    .unwrap_or((MUTUAL_WAVES * resident).div_ceil(round))
                    .clamp(1, most);
                splits = count * slots;
            }
            for e in (0..count).filter(|_| !mutual) {
                let (t0, tiles) = (seg_off[e] / shape.threads, seg_pad[e] / shape.threads);
                let tps = tiles_per_split(i_blocks, tiles, gpu.multiprocessors);
                segments.push((t0 as i32, (t0 + tiles) as i32, tps as i32, splits as i32));
                splits += tiles.div_ceil(tps);
            }
            let sums = if mutual && count > 1 {
                slots * total
            } else {
                0
            };
            gpu.ensure_fits(
                (own * 7 * 8 + total * 16 + (seg_pad[d] * splits + sums) * 16) as u128,
                "the particles and their forces",
            )?;
            let s = &gpu.stream;
            let range = first..first + own;
            let xs: Vec<f64> = p.pos[range.clone()].iter().flatten().copied().collect();
            let vs: Vec<f64> = p.vel[range.clone()].iter().flatten().copied().collect();
            // Devices without particles keep one-element buffers (never read).
            let upload = |v: &[f64]| -> Result<CudaSlice<f64>> {
                Ok(if v.is_empty() {
                    s.alloc_zeros::<f64>(1)?
                } else {
                    s.clone_htod(v)?
                })
            };
            parts.push(Part {
                segment: d,
                copy: gpu.ctx.new_stream()?,
                packed: gpu.ctx.new_event(None)?,
                copied: gpu.ctx.new_event(None)?,
                forces_done: gpu.ctx.new_event(None)?,
                gathered: gpu.ctx.new_event(None)?,
                n: own,
                x: upload(&xs)?,
                v: upload(&vs)?,
                m: upload(&p.mass[range])?,
                xm: s.alloc_zeros::<f32>(4 * total)?,
                parts: s.alloc_zeros::<f32>(4 * seg_pad[d] * splits)?,
                sums: s.alloc_zeros::<f32>(4 * sums.max(1))?,
                slots,
                segments,
                splits,
                pack: f("nbody_pack")?,
                forces,
                mutual,
                kick: f("nbody_kick")?,
                drift: f("nbody_drift")?,
                gpu: gpu.clone(),
            });
        }
        let ranks = match world {
            // SAFETY: every byte is written (own segment or received) before it is read.
            Some(w) => Some(Ranks {
                world: w,
                host: unsafe { gpus[0].ctx.alloc_pinned_with_flags::<f32>(4 * total, 0) }?,
            }),
            None => None,
        };
        let mut e = Self {
            parts,
            ranks,
            shape,
            total: n,
            seg_pad,
            seg_off,
            scale: if equal_mass {
                grav.g * p.mass[0]
            } else {
                grav.g
            },
            grav,
            dt,
            steps: step,
        };
        e.compute_forces()?;
        Ok(e)
    }

    /// Forces at the current positions into every device's `parts`: each device packs
    /// its segment and sums over it, while its copy stream brings the other segments
    /// (once packed, and once this device's previous forces have read the old ones);
    /// then the sums over those. A device packs again only after every copy of its
    /// segment is done.
    pub fn compute_forces(&mut self) -> Result<()> {
        if self.ranks.is_some() {
            return self.compute_forces_on_ranks();
        }
        let count = self.parts.len();
        let eps2 = (self.grav.softening * self.grav.softening) as f32;
        let mutual = self.parts[0].mutual;
        for d in 0..count {
            if count > 1 {
                for e in (0..count).filter(|&e| e != d) {
                    self.parts[d].gpu.stream.wait(&self.parts[e].copied)?;
                }
                // nbody_mutual: every device's gather of this one's sums is done.
                for e in (0..count).filter(|_| mutual) {
                    self.parts[d].gpu.stream.wait(&self.parts[e].gathered)?;
                }
            }
            let own = (self.seg_off[d], self.seg_pad[d]);
            let part = &mut self.parts[d];
            pack(part, own)?;
            part.packed.record(&part.gpu.stream)?;
            if mutual {
                // One device: every round, into its splits; several: after the copies.
                if count == 1 {
                    launch_mutual(part, self.shape, own.1, eps2, (0, 1))?;
                }
                continue;
            }
            launch_forces(part, self.shape, own, d, eps2)?;
        }
        if count == 1 {
            return Ok(());
        }
        for d in 0..count {
            let c = self.parts[d].copy.clone();
            c.wait(&self.parts[d].forces_done)?;
            for e in (0..count).filter(|&e| e != d) {
                c.wait(&self.parts[e].packed)?;
                let (off, bytes) = (self.seg_off[e] * 16, self.seg_pad[e] * 16);
                let (dst, src) = (&self.parts[d], &self.parts[e]);
                // SAFETY: both ranges are segment e of live xm buffers of the same length;
                // the copy stream waits for e's pack and for d's last read of the range,
                // and e's next pack waits for this copy (`copied`).
                unsafe { peer_copy((dst, &dst.xm, off), (src, &src.xm, off), bytes, &c) }?;
            }
            self.parts[d].copied.record(&c)?;
        }
        let total: usize = self.seg_pad.iter().sum();
        for d in 0..count {
            let own = (self.seg_off[d], self.seg_pad[d]);
            let part = &mut self.parts[d];
            part.gpu.stream.wait(&part.copied)?;
            if mutual {
                launch_mutual(part, self.shape, total, eps2, (d, count))?;
            } else {
                for e in (0..count).filter(|&e| e != d) {
                    launch_forces(part, self.shape, own, e, eps2)?;
                }
            }
            part.forces_done.record(&part.gpu.stream)?;
        }
        if mutual {
            self.gather_sums()?;
        }
        Ok(())
    }

    /// nbody_mutual over several devices: every device's share of every device's sums
    /// (device e's slot s to split e·slots + s), by peer copies on the copy stream once
    /// those forces are done; the device's stream (its kick) waits for them.
    fn gather_sums(&mut self) -> Result<()> {
        let count = self.parts.len();
        let total: usize = self.seg_pad.iter().sum();
        for d in 0..count {
            let c = self.parts[d].copy.clone();
            for e in 0..count {
                c.wait(&self.parts[e].forces_done)?;
            }
            let (off, pad, slots) = (self.seg_off[d], self.seg_pad[d], self.parts[d].slots);
            let dst = &self.parts[d];
            for (e, src) in self.parts.iter().enumerate() {
                for slot in 0..slots {
                    let from = (slot * total + off) * 16;
                    let to = ((e * slots + slot) * pad) * 16;
                    // SAFETY: sums holds slots runs of `total` float4s on every device, parts
                    // count·slots runs of `pad`; the copy waits for every device's forces,
                    // and every device's next forces wait for this gather (`gathered`).
                    unsafe {
                        peer_copy((dst, &dst.parts, to), (src, &src.sums, from), pad * 16, &c)
                    }?;
                }
            }
            self.parts[d].gathered.record(&c)?;
            self.parts[d].gpu.stream.wait(&self.parts[d].gathered)?;
        }
        Ok(())
    }

    /// [`CudaNbody::compute_forces`] under mpirun: pack this rank's segment, bring it to
    /// the host and start its forces; then each stage sends what this rank holds to its
    /// partner (recursive doubling) or passes one segment on round the ring, and the
    /// segments that arrived go up to the device and their forces start while the next
    /// stage travels.
    fn compute_forces_on_ranks(&mut self) -> Result<()> {
        let eps2 = (self.grav.softening * self.grav.softening) as f32;
        let Some(ranks) = self.ranks.as_mut() else {
            unreachable!("called under mpirun only")
        };
        let (w, part) = (ranks.world, &mut self.parts[0]);
        let d = part.segment;
        let seg = self.seg_pad[d];
        let floats = 4 * seg; // per segment (all equal under mpirun)
        let own = (self.seg_off[d], seg);
        let s = part.gpu.stream.clone();
        pack(part, own)?;
        let host = ranks.host.as_mut_slice()?;
        let (xm_ptr, _) = part.xm.device_ptr(&s);
        // SAFETY: the host range and the device segment hold `floats` f32s; the stream
        // is synchronised before MPI reads the host range.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(
                &mut host[d * floats..(d + 1) * floats],
                xm_ptr + (d * floats * 4) as u64,
                s.cu_stream(),
            )
        }?;
        s.synchronize()?;
        launch_forces(part, self.shape, own, d, eps2)?;
        for (stage, (send, from, arriving)) in stages(w).into_iter().enumerate() {
            let tag = stage as i32;
            let sends = [(
                send.0,
                tag,
                world::to_bytes(&host[send.1.start * floats..send.1.end * floats]),
            )];
            let receives = [(from, tag, arriving.len() * floats * 4)];
            let got = world::exchange(&sends, &receives)?;
            let at = arriving.start * floats;
            host[at..at + arriving.len() * floats]
                .copy_from_slice(&world::from_bytes::<f32>(&got[0]));
            // SAFETY: page-locked host range and device segments of the same size; the
            // range is not written again before the stream is synchronised (next step).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    xm_ptr + (at * 4) as u64,
                    &host[at..at + arriving.len() * floats],
                    s.cu_stream(),
                )
            }?;
            for e in arriving {
                launch_forces(part, self.shape, own, e, eps2)?;
            }
        }
        Ok(())
    }

    fn kick(&mut self, h: f64) -> Result<()> {
        for part in self.parts.iter_mut().filter(|p| p.n > 0) {
            let pad = self.seg_pad[part.segment] as i32;
            let (splits, n) = (part.splits as i32, part.n as i32);
            let mut l = part.gpu.stream.launch_builder(&part.kick);
            l.arg(&part.parts).arg(&splits).arg(&pad).arg(&mut part.v);
            l.arg(&n).arg(&self.scale).arg(&h);
            // SAFETY: parts holds splits·pad float4s, v 3n values.
            unsafe { l.launch(part.gpu.stride_config(part.n, 256)) }?;
        }
        Ok(())
    }

    fn drift(&mut self) -> Result<()> {
        for part in self.parts.iter_mut().filter(|p| p.n > 0) {
            let (n, dt) = (part.n as i32, self.dt);
            let mut l = part.gpu.stream.launch_builder(&part.drift);
            l.arg(&mut part.x).arg(&part.v).arg(&n).arg(&dt);
            // SAFETY: x and v hold 3n values; grid-stride.
            unsafe { l.launch(part.gpu.stride_config(3 * part.n, 256)) }?;
        }
        Ok(())
    }

    /// Accelerations at the current positions, on the host (the splits added in order
    /// as the kick adds them), for tests against the CPU direct sum.
    pub fn accelerations(&mut self) -> Result<Vec<[f64; 3]>> {
        let mut acc = Vec::new();
        for part in &self.parts {
            let parts = part.gpu.stream.clone_dtoh(&part.parts)?;
            let pad = self.seg_pad[part.segment];
            for i in 0..part.n {
                let mut a = [0.0; 3];
                for s in 0..part.splits {
                    let q = &parts[4 * (s * pad + i)..];
                    for k in 0..3 {
                        a[k] += q[k] as f64;
                    }
                }
                acc.push(a.map(|v| self.scale * v));
            }
        }
        Ok(acc)
    }

    /// Seconds of one force evaluation (pack, copies, forces on every device), the median
    /// of `reps`.
    pub fn time_forces(&mut self, reps: usize) -> Result<f64> {
        self.time_on_all_devices(2, reps, |e| e.compute_forces())
    }

    /// The median seconds of `work` over `reps` (after `warmup`), timed on the first
    /// device's stream once every other device's work has joined it.
    fn time_on_all_devices(
        &mut self,
        warmup: usize,
        reps: usize,
        mut work: impl FnMut(&mut Self) -> Result<()>,
    ) -> Result<f64> {
        let gpu = self.parts[0].gpu.clone();
        let joins: Vec<cudarc::driver::CudaEvent> = (self.parts.iter())
            .map(|p| p.gpu.ctx.new_event(None))
            .collect::<std::result::Result<_, _>>()?;
        crate::device::ceilings::time_median(&gpu, warmup, reps, || {
            work(self)?;
            for (p, j) in self.parts.iter().zip(&joins).skip(1) {
                j.record(&p.gpu.stream)?;
                gpu.stream.wait(j)?;
            }
            Ok(())
        })
    }

    /// Seconds of the CUDA sample's kernel (one i per thread, 256-particle tiles, no
    /// split) on the same particles on the first device, the median of `reps`; N is
    /// padded to 256.
    pub fn time_baseline(&mut self, p: &Particles, reps: usize) -> Result<f64> {
        let gpu = self.parts[0].gpu.clone();
        let f = gpu.function(&KERNELS, Precision::F64, &[], "nbody_baseline")?;
        let n = p.len();
        let n256 = n.div_ceil(256) * 256;
        let s = &gpu.stream;
        let xs: Vec<f64> = p.pos.iter().flatten().copied().collect();
        let (x, m) = (s.clone_htod(&xs)?, s.clone_htod(&p.mass)?);
        let mut xm = s.alloc_zeros::<f32>(4 * n256)?;
        let mut acc = s.alloc_zeros::<f32>(4 * n256)?;
        let pack = gpu.function(&KERNELS, Precision::F64, &[], "nbody_pack")?;
        let (ni, n_pad) = (n as i32, n256 as i32);
        let mut l = s.launch_builder(&pack);
        l.arg(&x).arg(&m).arg(&mut xm).arg(&ni).arg(&n_pad);
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

    /// Whether each pair of tiles is evaluated once (nbody_mutual).
    pub fn mutual(&self) -> bool {
        self.parts.iter().any(|p| p.mutual)
    }

    /// nbody_mutual's rounds side by side per launch on the first device (0 without it).
    pub fn rounds_per_launch(&self) -> usize {
        self.parts[0].slots
    }

    /// Splits of the force sums per device.
    pub fn splits(&self) -> Vec<usize> {
        self.parts.iter().map(|p| p.splits).collect()
    }

    /// Blocks of the force kernel that one SM holds at once (the driver's occupancy).
    pub fn blocks_per_sm(&self) -> Result<usize> {
        let p = &self.parts[0];
        Ok(p.forces.occupancy_max_active_blocks_per_multiprocessor(
            self.shape.threads as u32,
            0,
            None,
        )? as usize)
    }

    /// Seconds of one leapfrog step (kick, drift, forces with their copies, kick on
    /// every device), the median over `reps` runs of `steps` steps.
    pub fn time_steps(&mut self, steps: u64, reps: usize) -> Result<f64> {
        let t = self.time_on_all_devices(1, reps, |e| e.advance(steps))?;
        Ok(t / steps as f64)
    }
}

/// The memory latency of `gpu` in seconds per dependent load: one thread chasing a
/// stride of 4099 × 32 elements (512 KiB) through 256 MiB, every timed chain on lines
/// no earlier chain touched (DRAM, not L2).
pub fn load_latency(gpu: &Gpu) -> Result<f64> {
    let n: u32 = 64 << 20;
    let stride: u64 = 4099 * 32;
    let next: Vec<u32> = (0..n)
        .map(|i| ((i as u64 + stride) % n as u64) as u32)
        .collect();
    let s = &gpu.stream;
    let next = s.clone_htod(&next)?;
    let mut out = s.alloc_zeros::<u32>(1)?;
    let f = gpu.function(&KERNELS, Precision::F64, &[], "nbody_chase")?;
    let hops = 4096i32;
    let mut chain = 0u32;
    let t = crate::device::ceilings::time_median(gpu, 1, 5, || {
        // Chains 1 MiB + 128 B apart: other lines, other pages.
        chain += 1;
        let start = chain * ((1 << 18) + 32);
        let mut l = s.launch_builder(&f);
        l.arg(&next).arg(&start).arg(&hops).arg(&mut out);
        // SAFETY: every next[] entry and every start is an index below n; one thread.
        unsafe { l.launch(LaunchConfig::for_num_elems(1)) }?;
        Ok(())
    })?;
    Ok(t / hops as f64)
}

/// One stage of the exchange: (rank to send to, segments sent), rank to receive from,
/// segments arriving.
type Stage = ((usize, Range<usize>), usize, Range<usize>);

/// The stages that bring every rank's segment to rank `w.rank`: (where to send and
/// which segments, whom to receive from, the segments arriving). Recursive doubling
/// (the study's accumulation: partner = rank XOR 2^s, the block doubling) when the
/// rank count is a power of two, else the ring (the transport: one segment passed on
/// per stage).
fn stages(w: World) -> Vec<Stage> {
    let (r, p) = (w.rank, w.size);
    if p.is_power_of_two() {
        (0..p.trailing_zeros())
            .map(|s| {
                let block = 1usize << s;
                let (base, partner) = (r & !(block - 1), r ^ block);
                let theirs = partner & !(block - 1);
                (
                    (partner, base..base + block),
                    partner,
                    theirs..theirs + block,
                )
            })
            .collect()
    } else {
        (1..p)
            .map(|t| {
                let pass = (r + p - t + 1) % p; // what arrived last stage (own first)
                let arrives = (r + p - t) % p;
                (
                    ((r + 1) % p, pass..pass + 1),
                    (r + p - 1) % p,
                    arrives..arrives + 1,
                )
            })
            .collect()
    }
}

/// Pack `part`'s particles into its segment of xm (`pad` entries from `off`; the
/// padding far away with zero mass).
fn pack(part: &mut Part, (off, pad): (usize, usize)) -> Result<()> {
    let (n, entries) = (part.n as i32, pad as i32);
    let mut own = part.xm.slice_mut(4 * off..4 * (off + pad));
    let mut l = part.gpu.stream.launch_builder(&part.pack);
    l.arg(&part.x)
        .arg(&part.m)
        .arg(&mut own)
        .arg(&n)
        .arg(&entries);
    // SAFETY: x holds 3n, m n values; the segment 4·pad; grid-stride.
    unsafe { l.launch(part.gpu.stride_config(pad, 256)) }?;
    Ok(())
}

/// The force kernel of `part`'s particles (its segment: `pad` padded particles from
/// `i_base` in xm) against j-segment `segment`, into that segment's splits.
fn launch_forces(
    part: &mut Part,
    shape: ForceShape,
    (i_base, pad): (usize, usize),
    segment: usize,
    eps2: f32,
) -> Result<()> {
    if part.n == 0 {
        return Ok(());
    }
    let (t0, t1, tps, base) = part.segments[segment];
    let splits = (t1 - t0 + tps - 1) / tps;
    let cfg = LaunchConfig {
        grid_dim: ((pad / shape.block_particles()) as u32, splits as u32, 1),
        block_dim: (shape.threads as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (i_base, pad) = (i_base as i32, pad as i32);
    let mut l = part.gpu.stream.launch_builder(&part.forces);
    l.arg(&part.xm).arg(&mut part.parts).arg(&i_base).arg(&pad);
    l.arg(&t0).arg(&t1).arg(&tps).arg(&base).arg(&eps2);
    // SAFETY: the grid covers the segment's pad i-particles (ipt per thread) and the
    // j-tiles t0..t1 of xm; parts holds (base + splits) · pad float4s at least.
    unsafe { l.launch(cfg) }?;
    Ok(())
}

/// The pairs of tiles of all `pad` particles (every tile's packed position on this
/// device) that device `first` of `stride` takes, once each (nbody_mutual: its tiles
/// against themselves, then its rounds of the circle method, `slots` side by side in each
/// launch, its m-th round adding into slot m mod slots); into `parts` on one device, else
/// into `sums` (all particles) for the gather.
fn launch_mutual(
    part: &mut Part,
    shape: ForceShape,
    pad: usize,
    eps2: f32,
    (first, stride): (usize, usize),
) -> Result<()> {
    let tiles = (pad / shape.block_particles()) as i32;
    let s = part.gpu.stream.clone();
    let slots = part.slots;
    let out = if stride == 1 {
        &mut part.parts
    } else {
        &mut part.sums
    };
    s.memset_zeros(out)?;
    let (n_pad, first, stride) = (pad as i32, first as i32, stride as i32);
    // Round -1: the device's tiles against themselves; then its rounds, slots per launch.
    let own_tiles = (tiles - first + stride - 1).max(0) / stride;
    let launches = std::iter::once((-1, (own_tiles, 1)))
        .chain(
            (first..tiles - 1)
                .step_by(slots * stride as usize)
                .map(|r| (r, (tiles / 2, slots as i32))),
        )
        .filter(|&(_, (blocks, _))| blocks > 0);
    for (round, (blocks, side_by_side)) in launches {
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, side_by_side as u32, 1),
            block_dim: (shape.threads as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = s.launch_builder(&part.forces);
        l.arg(&part.xm).arg(&mut *out).arg(&tiles).arg(&round);
        l.arg(&first).arg(&stride).arg(&n_pad).arg(&eps2);
        // SAFETY: xm holds `tiles` (even) tiles of block_particles float4s and the output
        // `slots` such runs; the launches of one stream run in order, and the blocks
        // of a launch touch disjoint (tile, slot) ranges.
        unsafe { l.launch(cfg) }?;
    }
    Ok(())
}

/// Copies `bytes` bytes from byte `from` of `src` (a buffer of device part `sp`) to byte
/// `to` of `dst` (of part `dp`) on `stream`: a peer copy, or a plain one where both parts
/// share a device.
///
/// # Safety
/// Both ranges lie inside their buffers, and `stream` is ordered after the last write of
/// the source range and the last read of the destination range.
unsafe fn peer_copy(
    (dp, dst, to): (&Part, &CudaSlice<f32>, usize),
    (sp, src, from): (&Part, &CudaSlice<f32>, usize),
    bytes: usize,
    stream: &cudarc::driver::CudaStream,
) -> Result<()> {
    let (d, _) = dst.device_ptr(&dp.gpu.stream);
    let (s, _) = src.device_ptr(&sp.gpu.stream);
    dp.gpu.ctx.bind_to_thread()?;
    // SAFETY: as the caller promises.
    unsafe {
        cudarc::driver::result::memcpy_peer_async(
            dp.gpu.ctx.cu_ctx(),
            d + to as u64,
            sp.gpu.ctx.cu_ctx(),
            s + from as u64,
            bytes,
            stream.cu_stream(),
        )
    }?;
    Ok(())
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
        let mut finite = true;
        for part in self.parts.iter().filter(|p| p.n > 0) {
            finite &= (part.gpu.stream.clone_dtoh(&part.v)?)
                .iter()
                .all(|x| x.is_finite());
        }
        if let Some(r) = &self.ranks {
            // Every rank takes the same decision.
            let all = world::all_gather(&[u8::from(finite)], &vec![1; r.world.size])?;
            finite = all.iter().all(|&f| f == 1);
        }
        let status = if finite {
            Status::Running
        } else {
            Status::NonFinite
        };
        Ok(Diagnostics::steps_only(self.steps, status))
    }

    fn snapshot(&mut self) -> Result<Field<f64>> {
        let mut p = Particles {
            pos: Vec::new(),
            vel: Vec::new(),
            mass: Vec::new(),
        };
        for part in self.parts.iter().filter(|p| p.n > 0) {
            let s = &part.gpu.stream;
            let (x, v) = (s.clone_dtoh(&part.x)?, s.clone_dtoh(&part.v)?);
            p.pos.extend(x.chunks(3).map(|c| [c[0], c[1], c[2]]));
            p.vel.extend(v.chunks(3).map(|c| [c[0], c[1], c[2]]));
            p.mass.extend(s.clone_dtoh(&part.m)?);
        }
        let field = cpu::particles_field(&p);
        let Some(r) = &self.ranks else {
            return Ok(field);
        };
        // Every rank's rows in rank order (= particle order), on every rank.
        let counts: Vec<usize> = (0..r.world.size)
            .map(|k| 7 * 8 * cpu::share(self.total, r.world, k).len())
            .collect();
        let data = world::from_bytes(&world::all_gather(&world::to_bytes(&field.data), &counts)?);
        Ok(cpu::particles_field(&cpu::particles_of(&data)))
    }
}

#[cfg(test)]
mod tests {
    use super::{stages, tiles_per_split};
    use crate::parallel::World;

    #[test]
    fn every_rank_gets_every_segment_from_a_partner_that_holds_it() {
        for size in 1..=9 {
            let plans: Vec<_> = (0..size).map(|rank| stages(World { rank, size })).collect();
            let mut held: Vec<Vec<bool>> = (0..size)
                .map(|r| (0..size).map(|k| k == r).collect())
                .collect();
            let count = plans[0].len();
            assert!(plans.iter().all(|p| p.len() == count));
            if size.is_power_of_two() {
                assert_eq!(
                    count,
                    size.trailing_zeros() as usize,
                    "doubling: log2 stages"
                );
            }
            for stage in 0..count {
                let before = held.clone();
                for (r, plan) in plans.iter().enumerate() {
                    let ((to, ref sent), _, _) = plan[stage];
                    assert!(
                        sent.clone().all(|k| before[r][k]),
                        "sends only what it holds"
                    );
                    // The receiver expects exactly this block from r.
                    let (_, from, ref arriving) = plans[to][stage];
                    assert_eq!((from, arriving.clone()), (r, sent.clone()));
                    for k in sent.clone() {
                        assert!(!before[to][k], "nothing arrives twice");
                        held[to][k] = true;
                    }
                }
            }
            assert!(
                held.iter().flatten().all(|&h| h),
                "size {size}: all segments"
            );
        }
    }

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
