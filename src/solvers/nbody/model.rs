//! `keisan model nbody`: the study's cycle model (seed 001, eq. 2) written for keisan's
//! force kernel, fitted on this GPU, against measured step times over N and device
//! counts, and extrapolated to 256 GPUs.
//!
//! Eq. (2) counts, per wave of blocks, the tiles each block walks times
//! max(L, the cycles of one tile), plus a fixed launch cost. For keisan's kernel a wave
//! is k blocks on each of the SMs (k from the driver's occupancy), a tile is T
//! j-particles against T·ipt i-particles per block, so k blocks' tiles take
//! k·T²·ipt·C_calc/128 cycles on an SM's 128 lanes (C_calc: cycles per interaction per
//! lane; 12 at the issue ceiling). A device's step costs
//!
//!   t(N, P) = t_fixed(P) + Σ_segments waves · tiles_per_split · max(L, k·T²·ipt·C_calc/128) / f
//!             + max(0, t_copy − t_local)
//!
//! with P shares of N/P particles (one segment each), t_copy the other segments' peer
//! copies and t_local the forces they hide behind. L is measured (a pointer chase),
//! t_fixed(P) from runs of one particle per share (every launch, event and copy of a
//! step, kernels with nothing to do: the study's empty-kernel fit), C_calc from the
//! largest N. Beyond the devices of this process the ranks pass segments round a ring
//! (the study's transport): P − 1 steps, each hidden behind the forces of the last one
//! or not, and t_fixed grows by one synchronisation stage per doubling of P.

use clap::FromArgMatches;
use serde::Serialize;

use super::cuda::{self, CudaNbody, ForceShape, tiles_per_split};
use super::{NbodyProblem, Particles, presets};
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::solver::Report;

#[derive(clap::Args, Debug)]
pub struct NbodyModelArgs {
    /// Particle counts to measure, comma-separated.
    #[arg(long, default_value = "4096,16384,65536,262144,1048576")]
    n: String,
    /// Link bandwidth between GPUs of different nodes for the extrapolation, GB/s per GPU.
    #[arg(long, default_value_t = 25.0)]
    link_gbs: f64,
    /// Smallest cost of one synchronisation stage between ranks, µs (the extrapolation
    /// takes the larger of this and the stage cost fitted over this process's devices).
    #[arg(long, default_value_t = 5.0)]
    sync_us: f64,
    /// Repetitions of each measurement (median).
    #[arg(long, default_value_t = 3)]
    repetitions: usize,
}

/// What the model is fitted to, all measured on this machine in this run.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    pub device: String,
    pub clock_hz: f64,
    pub sms: usize,
    pub blocks_per_sm: usize,
    pub threads: usize,
    pub ipt: usize,
    /// Memory latency, cycles.
    pub latency_cycles: f64,
    /// Cycles per interaction per lane, from the largest N on one device.
    pub c_calc: f64,
    /// (devices, seconds): the fixed cost of a step.
    pub fixed: Vec<(usize, f64)>,
    /// Seconds per synchronisation stage (per doubling of the devices).
    pub sync_stage_s: f64,
    /// Bytes per second between this process's devices (peer copies).
    pub peer_bytes_per_s: f64,
}

impl Fit {
    fn shape(&self) -> ForceShape {
        ForceShape {
            threads: self.threads,
            ipt: self.ipt,
            mutual: Some(false),
        }
    }

    /// Cycles of one force launch: n_i particles of a share against n_j of a segment.
    fn force_cycles(&self, n_i: usize, n_j: usize) -> f64 {
        let shape = self.shape();
        let bp = shape.block_particles();
        let i_blocks = n_i.div_ceil(bp).max(1);
        let tiles = (n_j.div_ceil(bp).max(1) * bp) / shape.threads;
        let tps = tiles_per_split(i_blocks, tiles, self.sms);
        let blocks = i_blocks * tiles.div_ceil(tps);
        // Blocks an SM holds at once: k, or fewer when the grid is small.
        let resident = self.blocks_per_sm.min(blocks.div_ceil(self.sms));
        let waves = blocks.div_ceil(resident * self.sms) as f64;
        let per_tile =
            (resident * shape.threads * shape.threads * shape.ipt) as f64 * self.c_calc / 128.0;
        waves * tps as f64 * self.latency_cycles.max(per_tile)
    }

    fn fixed(&self, devices: usize) -> f64 {
        match self.fixed.iter().find(|(p, _)| *p == devices) {
            Some(&(_, t)) => t,
            None => self.fixed[0].1 + self.sync_stage_s * (devices as f64).log2(),
        }
    }

    /// Predicted seconds per step of N particles on P shares of one process, `per_gpu`
    /// of them on each GPU (shares of one GPU take their turns on its SMs).
    pub fn in_process(&self, n: usize, p: usize, per_gpu: usize) -> f64 {
        let share = n.div_ceil(p);
        let local = self.force_cycles(share, share) / self.clock_hz;
        let bytes = (p - 1) as f64
            * (share.div_ceil(self.shape().block_particles()) as f64)
            * (self.shape().block_particles() * 16) as f64;
        let copy = bytes / self.peer_bytes_per_s;
        self.fixed(p) + (per_gpu * p) as f64 * local + (copy - local).max(0.0)
    }

    /// Predicted seconds per step of N particles on P ranks passing segments round a ring
    /// over links of `link` bytes/s.
    pub fn ring(&self, n: usize, p: usize, link: f64) -> f64 {
        let share = n.div_ceil(p);
        let local = self.force_cycles(share, share) / self.clock_hz;
        let msg = (share * 16) as f64 / link;
        self.fixed(p) + local + (p - 1) as f64 * local.max(msg)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub n: usize,
    /// Shares of the particles, and the distinct GPUs under them.
    pub devices: usize,
    pub gpus: usize,
    pub predicted_s: f64,
    pub measured_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Extrapolated {
    pub gpus: usize,
    pub predicted_s: f64,
    /// t(N, 1) / (P · t(N, P)).
    pub efficiency: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NbodyModel {
    pub fit: Fit,
    pub points: Vec<Point>,
    pub extrapolation_n: usize,
    pub link_bytes_per_s: f64,
    pub extrapolation: Vec<Extrapolated>,
}

/// Seconds per step of `p` on `gpus` (shares), the median of `reps`, with the kernel the
/// model describes (each interaction evaluated: the study's scheme, not the one-device
/// pairs-once kernel).
fn measure(
    gpus: &[std::sync::Arc<crate::device::Gpu>],
    problem: &NbodyProblem,
    p: &Particles,
    reps: usize,
) -> Result<f64> {
    let shape = ForceShape {
        mutual: Some(false),
        ..ForceShape::default()
    };
    let (g, dt) = (problem.gravity(), problem.dt);
    let mut e = CudaNbody::with_shape(gpus, g, dt, p, 0, problem.accurate, shape)?;
    let steps = (4usize << 20).div_ceil(p.len()).clamp(1, 20) as u64;
    e.time_steps(steps, reps)
}

pub fn run(
    problem: &NbodyProblem,
    placement: &Placement,
    args: &clap::ArgMatches,
) -> Result<Report> {
    let a = NbodyModelArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let Device::Cuda(first) = placement.first() else {
        return Err(Error::invalid(
            "--backend",
            "cpu",
            "the cycle model describes the CUDA force kernel; run it on a GPU",
        ));
    };
    let gpus = placement.gpus()?.unwrap_or_else(|| vec![first.clone()]);
    let ns: Vec<usize> = (a.n.split(','))
        .map(|t| t.trim().parse::<usize>().ok().filter(|&n| n >= 2))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::invalid("--n", &a.n, "comma-separated particle counts ≥ 2"))?;
    if a.repetitions == 0 || a.link_gbs <= 0.0 || a.sync_us < 0.0 {
        return Err(Error::invalid(
            "--repetitions/--link-gbs/--sync-us",
            format!("{}/{}/{}", a.repetitions, a.link_gbs, a.sync_us),
            "repetitions ≥ 1, a positive bandwidth, a synchronisation cost ≥ 0",
        ));
    }
    let plummer = |n| presets::plummer(n, 1.0, presets::PLUMMER_A, 1);
    let largest = *ns.iter().max().expect("at least one N");
    let clock_hz = first
        .ctx
        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?
        as f64
        * 1e3;
    let shape = ForceShape::default();
    let probe = CudaNbody::new(
        &gpus[..1],
        problem.gravity(),
        problem.dt,
        &plummer(2),
        0,
        false,
    )?;
    let blocks_per_sm = probe.blocks_per_sm()?.max(1);
    let latency_cycles = cuda::load_latency(first)? * clock_hz;
    // Fixed cost: one particle per share.
    let mut fixed = Vec::new();
    for p in 1..=gpus.len() {
        let t = measure(&gpus[..p], problem, &plummer(p.max(2)), a.repetitions)?;
        fixed.push((p, t));
    }
    let mut fit = Fit {
        device: placement.describe(),
        clock_hz,
        sms: first.multiprocessors,
        blocks_per_sm,
        threads: shape.threads,
        ipt: shape.ipt,
        latency_cycles,
        c_calc: 12.0,
        fixed,
        sync_stage_s: 0.0,
        peer_bytes_per_s: 0.0,
    };
    // Forces of the fixed-cost runs (one tile each) are not fixed cost.
    fit.peer_bytes_per_s = peer_bandwidth(&gpus)?;
    // C_calc from the largest N on one device, the fixed costs from the runs of one
    // particle per share less their (one-tile) forces: a few rounds settle both.
    let t_big = measure(&gpus[..1], problem, &plummer(largest), a.repetitions)?;
    let raw = fit.fixed.clone();
    for _ in 0..4 {
        let one_tile = fit.force_cycles(1, 1) / clock_hz;
        for ((p, t), (_, r)) in fit.fixed.iter_mut().zip(&raw) {
            *t = (r - *p as f64 * one_tile).max(0.0);
        }
        let unit = fit.force_cycles(largest, largest) / fit.c_calc; // cycles per unit C_calc
        fit.c_calc = ((t_big - fit.fixed(1)) * clock_hz / unit).max(1.0);
    }
    if gpus.len() > 1 {
        let (t1, tp) = (fit.fixed[0].1, fit.fixed[gpus.len() - 1].1);
        fit.sync_stage_s = ((tp - t1) / (gpus.len() as f64).log2()).max(0.0);
    }
    let mut points = Vec::new();
    for &n in &ns {
        for p in 1..=gpus.len() {
            let measured_s = if n == largest && p == 1 {
                t_big
            } else {
                measure(&gpus[..p], problem, &plummer(n), a.repetitions)?
            };
            let distinct = (gpus[..p].iter().map(|g| g.ordinal))
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let point = Point {
                n,
                devices: p,
                gpus: distinct,
                predicted_s: fit.in_process(n, p, p.div_ceil(distinct)),
                measured_s,
            };
            crate::say!("{}", point_row(&point));
            points.push(point);
        }
    }
    let link = a.link_gbs * 1e9;
    let stage = fit.sync_stage_s.max(a.sync_us * 1e-6);
    let mut ring_fit = fit.clone();
    ring_fit.sync_stage_s = stage;
    ring_fit.fixed.truncate(1);
    let n = problem.n;
    let one = ring_fit.ring(n, 1, link);
    let extrapolation = (0..=8)
        .map(|k| {
            let gpus = 1usize << k;
            let t = ring_fit.ring(n, gpus, link);
            Extrapolated {
                gpus,
                predicted_s: t,
                efficiency: one / (gpus as f64 * t),
            }
        })
        .collect();
    let m = NbodyModel {
        fit,
        points,
        extrapolation_n: n,
        link_bytes_per_s: link,
        extrapolation,
    };
    Ok(Report {
        human: human(&m, stage),
        json: serde_json::to_value(&m).expect("serialises"),
    })
}

/// Bytes per second of a peer copy of 64 MiB from the second device to the first (a
/// device-to-device copy with one device).
fn peer_bandwidth(gpus: &[std::sync::Arc<crate::device::Gpu>]) -> Result<f64> {
    let bytes = 64usize << 20;
    let (a, b) = (&gpus[0], gpus.get(1).unwrap_or(&gpus[0]));
    let src = b.stream.alloc_zeros::<u8>(bytes)?;
    let mut dst = a.stream.alloc_zeros::<u8>(bytes)?;
    b.stream.synchronize()?;
    if gpus.len() > 1 {
        crate::device::cuda::enable_peer_access(&gpus[..2])?;
    }
    let t = crate::device::ceilings::time_median(a, 1, 5, || {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let (s, _) = src.device_ptr(&b.stream);
        let (d, _) = dst.device_ptr_mut(&a.stream);
        // SAFETY: both buffers hold `bytes`; the copy runs on a's stream, timed by it.
        unsafe {
            cudarc::driver::result::memcpy_peer_async(
                a.ctx.cu_ctx(),
                d,
                b.ctx.cu_ctx(),
                s,
                bytes,
                a.stream.cu_stream(),
            )
        }?;
        Ok(())
    })?;
    Ok(bytes as f64 / t)
}

fn point_row(p: &Point) -> String {
    use crate::units::seconds as s;
    format!(
        "  N = {:>8}, {} share(s) on {} GPU(s): predicted {:>10}, measured {:>10} per step \
         ({:+.1} %)",
        p.n,
        p.devices,
        p.gpus,
        s(p.predicted_s),
        s(p.measured_s),
        100.0 * (p.predicted_s / p.measured_s - 1.0)
    )
}

fn human(m: &NbodyModel, stage: f64) -> String {
    use crate::units::seconds as s;
    let f = &m.fit;
    let mut r = format!(
        "nbody cycle model (seed 001, eq. 2) on {}: clock {:.0} MHz, {} SMs, {} blocks of \
         {}×{} per SM\n  fitted: L = {:.0} cycles (pointer chase), C_calc = {:.2} cycles per \
         interaction per lane (12 = the issue ceiling), fixed cost per step {}; peer copies \
         {:.0} GB/s\n",
        f.device,
        f.clock_hz * 1e-6,
        f.sms,
        f.blocks_per_sm,
        f.threads,
        f.ipt,
        f.latency_cycles,
        f.c_calc,
        f.fixed
            .iter()
            .map(|(p, t)| format!("{} on {p}", s(*t)))
            .collect::<Vec<_>>()
            .join(", "),
        f.peer_bytes_per_s * 1e-9
    );
    for p in &m.points {
        r += &point_row(p);
        r += "\n";
    }
    r += &format!(
        "  extrapolated, N = {} on GPUs passing segments round a ring ({:.0} GB/s links, \
         {} per synchronisation stage):\n",
        m.extrapolation_n,
        m.link_bytes_per_s * 1e-9,
        s(stage)
    );
    for e in &m.extrapolation {
        r += &format!(
            "    {:>4} GPUs: {:>10} per step, parallel efficiency {:.1} %\n",
            e.gpus,
            s(e.predicted_s),
            100.0 * e.efficiency
        );
    }
    r
}
