//! `keisan bench advection`: the GPU Challenge 2010 problems (rotation field), timed
//! against the copy bandwidth measured in the same run, beside the study's times.

use clap::FromArgMatches;
use serde::Serialize;

use super::{AdvectionProblem, Boundary, Initial, Velocity, cuda::VelocitySource};
use crate::bench::{ceilings_for, sorted_seconds, sorted_wall_seconds};
use crate::device::ceilings::Ceilings;
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::run::Engine;
use crate::solver::Report;

/// The contest's five problems (nx, ny, nt) and the study's times on one and two 2010
/// GPUs (seed 000, table 1), in seconds.
pub const CONTEST: [(usize, usize, u64, f64, f64); 5] = [
    (2048, 2048, 20480, 24.409, 12.029),
    (4096, 4096, 10240, 46.841, 22.577),
    (4096, 4096, 10240, 48.776, 23.545),
    (16384, 4096, 4096, 73.327, 34.563),
    (8192, 16384, 2048, 72.820, 34.208),
];

#[derive(clap::Args, Debug)]
pub struct AdvectionBenchArgs {
    /// Contest problem 1–5 (default 5 on a GPU); or --nx/--ny/--steps.
    #[arg(long)]
    problem: Option<usize>,
    /// Every contest problem, in a table beside the study's times.
    #[arg(long)]
    all: bool,
    /// Cells in x of a grid of your own (with --ny and --steps).
    #[arg(long)]
    nx: Option<usize>,
    /// Cells in y of a grid of your own.
    #[arg(long)]
    ny: Option<usize>,
    /// Time steps (default: the contest problem's).
    #[arg(long)]
    steps: Option<u64>,
    /// Where the kernel gets the velocity: "arrays" (the contest's: du, dv per cell, read
    /// every step) or "kernel" (the rotation formula evaluated in the kernel).
    #[arg(long, value_enum, default_value_t = Source::Arrays)]
    velocity: Source,
    /// CUDA steps per pass through device memory (default: the engine's for the
    /// precision; 1: one launch per step).
    #[arg(long)]
    steps_per_pass: Option<usize>,
    /// Timed runs of each case; the report gives their median.
    #[arg(long, default_value_t = 3)]
    repetitions: usize,
    /// The precision of the field (the contest's is f32).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Arrays,
    Kernel,
}

#[derive(Debug, Serialize)]
pub struct AdvectionCase {
    pub name: String,
    pub nx: usize,
    pub ny: usize,
    pub steps: u64,
    pub seconds: f64,
    pub gcells_per_s: f64,
    pub steps_per_pass: u64,
    /// Bytes each step must move per cell: f in and out, and du, dv when read from
    /// arrays, once per pass.
    pub bytes_per_cell: f64,
    pub fraction_of_copy_bandwidth: f64,
    /// nx·ny·steps·B/cell ÷ the copy bandwidth.
    pub predicted_s: f64,
    pub study_one_gpu_s: Option<f64>,
    pub study_two_gpus_s: Option<f64>,
    /// Slabs (--devices, --subdomains) and the distinct devices they are on.
    pub subdomains: usize,
    pub devices: usize,
    /// Decomposed runs: the same case on the first device alone, and the ratio.
    pub one_device_s: Option<f64>,
    pub speedup: Option<f64>,
    /// speedup ÷ devices.
    pub efficiency: Option<f64>,
    /// Decomposed runs, weak scaling: the grid `subdomains` times as tall on the same
    /// slabs, and the first device's time for this grid alone (× subdomains ÷ devices)
    /// over it.
    pub weak_s: Option<f64>,
    pub weak_efficiency: Option<f64>,
    /// Decomposed runs, per step against the first device's time ÷ devices: the
    /// exchange alone (an exchange serves a pass), what the slabs add (their own work,
    /// timed with the exchange off, and the exchange's exposed part).
    pub exposure: Option<crate::bench::Exposure>,
    /// The model T(P) = T(1)/P + steps × exposed per step, at 8 and 64 devices.
    pub model_8_s: Option<f64>,
    pub model_64_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct AdvectionBench {
    pub device: String,
    pub precision: String,
    pub velocity: String,
    pub cases: Vec<AdvectionCase>,
    pub ceilings: Ceilings,
}

/// The bench's problem: a Gaussian on a solid-body rotation (one turn per unit time) at
/// |du|, |dv| ≤ 1/2 over the grid, the contest's boundary.
pub fn problem(nx: usize, ny: usize, steps: u64) -> Result<AdvectionProblem> {
    let cfg = super::AdvectionConfig {
        nx: nx as i64,
        ny: ny as i64,
        dx: None,
        dy: None,
        steps: steps as i64,
        dt: None,
        cfl: Some(0.5),
        velocity: Velocity::Rotation {
            omega: None,
            center: None,
        },
        initial: Initial::Gaussian {
            center: Some([0.5, 0.75]),
            width: Some(0.05),
            amplitude: 1.0,
        },
        boundary: Boundary::Contest,
        steps_per_pass: None,
    };
    cfg.validate(Precision::F64)
}

/// f in and out, and du, dv from arrays, once per pass of `per_pass` steps.
pub fn bytes_per_cell<T: Real>(arrays: bool, per_pass: u64) -> f64 {
    (std::mem::size_of::<T>() * if arrays { 4 } else { 2 }) as f64 / per_pass as f64
}

pub fn run(placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
    let device = placement.first();
    let a = AdvectionBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    if a.repetitions == 0 {
        return Err(Error::invalid("--repetitions", 0, "at least 1"));
    }
    if let Some(n) = a.steps_per_pass
        && !(1..=super::MAX_STEPS_PER_PASS as usize).contains(&n)
    {
        return Err(Error::invalid(
            "--steps-per-pass",
            n,
            format!("must be in [1, {}]", super::MAX_STEPS_PER_PASS),
        ));
    }
    let gpu = matches!(device, Device::Cuda(_));
    // Name, nx, ny, steps, the study's times on 1 and 2 GPUs.
    type Planned = (String, usize, usize, u64, Option<(f64, f64)>);
    let mut cases: Vec<Planned> = Vec::new();
    if a.all {
        for (k, c) in CONTEST.iter().enumerate() {
            cases.push((
                format!("contest {}", k + 1),
                c.0,
                c.1,
                c.2,
                Some((c.3, c.4)),
            ));
        }
    } else if let Some(k) = a.problem {
        let Some(c) = CONTEST.get(k.wrapping_sub(1)) else {
            return Err(Error::invalid(
                "--problem",
                k,
                "the contest has problems 1 to 5",
            ));
        };
        cases.push((format!("contest {k}"), c.0, c.1, c.2, Some((c.3, c.4))));
    } else if gpu && a.nx.is_none() && a.ny.is_none() {
        let c = CONTEST[4];
        cases.push((
            "contest 5".into(),
            c.0,
            c.1,
            a.steps.unwrap_or(c.2),
            Some((c.3, c.4)),
        ));
    } else {
        let (nx, ny) = (a.nx.unwrap_or(1024), a.ny.unwrap_or(1024));
        cases.push((
            format!("{nx}x{ny}"),
            nx,
            ny,
            a.steps.unwrap_or(if gpu { 256 } else { 8 }),
            None,
        ));
    }
    let ceilings = ceilings_for(device)?;
    let mut out = Vec::new();
    for (name, nx, ny, steps, study) in cases {
        // The case's grid, or (weak scaling) one as many rows tall.
        let rows = |ny: usize| -> Result<AdvectionProblem> {
            Ok(AdvectionProblem {
                steps_per_pass: a.steps_per_pass,
                ..problem(nx, ny, steps)?
            })
        };
        let p = rows(ny)?;
        let timed = |p: &AdvectionProblem, placement: &Placement| match a.precision {
            Precision::F32 => case::<f32>(placement, p, a.velocity, a.repetitions, &ceilings),
            Precision::F64 => case::<f64>(placement, p, a.velocity, a.repetitions, &ceilings),
        };
        let (mut c, halo) = timed(&p, placement)?;
        if !placement.is_single() {
            let (one, _) = timed(&p, &Placement::single(device.clone()))?;
            let speedup = one.seconds / c.seconds;
            c.one_device_s = Some(one.seconds);
            c.speedup = Some(speedup);
            c.efficiency = Some(speedup / c.devices as f64);
            let slabs = placement.parts.len();
            let (weak, _) = timed(&rows(ny * slabs)?, placement)?;
            c.weak_s = Some(weak.seconds);
            c.weak_efficiency = Some(one.seconds * slabs as f64 / c.devices as f64 / weak.seconds);
            let steps = c.steps as f64;
            let per = |t: f64| t / steps;
            let x = crate::bench::Exposure::new(
                per(one.seconds) / c.devices as f64,
                per(c.seconds),
                per(one.seconds),
                halo,
            );
            c.model_8_s = Some(steps * x.model_8_s_per_step);
            c.model_64_s = Some(steps * x.model_64_s_per_step);
            c.exposure = Some(x);
        }
        out.push(AdvectionCase {
            name,
            study_one_gpu_s: study.map(|s| s.0),
            study_two_gpus_s: study.map(|s| s.1),
            ..c
        });
    }
    let b = AdvectionBench {
        device: placement.describe(),
        precision: a.precision.to_string(),
        velocity: format!("{:?}", a.velocity).to_lowercase(),
        cases: out,
        ceilings,
    };
    let mut human = format!(
        "advection bench on {}\n{}  {}, velocity from {}, median of {}\n",
        b.device,
        b.ceilings.human(),
        b.precision,
        b.velocity,
        a.repetitions
    );
    for c in &b.cases {
        human += &format!(
            "  {:<10} {:>5} x {:<5} {:>5} steps, {} per pass: {} ({:.3} Gcell/s, {:.1} B/cell/step, {:.1} % of copy bandwidth; model {}){}\n",
            c.name,
            c.nx,
            c.ny,
            c.steps,
            c.steps_per_pass,
            crate::units::seconds(c.seconds),
            c.gcells_per_s,
            c.bytes_per_cell,
            100.0 * c.fraction_of_copy_bandwidth,
            crate::units::seconds(c.predicted_s),
            match (c.study_one_gpu_s, c.study_two_gpus_s) {
                (Some(a), Some(b)) => format!("; study 2010: {a:.1} s on 1 GPU, {b:.1} s on 2"),
                _ => String::new(),
            }
        );
        if let (Some(one), Some(x), Some(e)) = (c.one_device_s, c.speedup, c.efficiency) {
            human += &format!(
                "             {} slabs on {} device(s): {:.2}x the first device alone ({}), {:.1} % efficiency\n",
                c.subdomains,
                c.devices,
                x,
                crate::units::seconds(one),
                100.0 * e
            );
        }
        if let (Some(w), Some(e)) = (c.weak_s, c.weak_efficiency) {
            human += &format!(
                "             weak: {} x {} on the same slabs: {}, {:.1} % efficiency\n",
                c.nx,
                c.ny * c.subdomains,
                crate::units::seconds(w),
                100.0 * e
            );
        }
        if let Some(x) = &c.exposure {
            human += &format!(
                "           {}             model T(1)/P + exposed: {} on 8 devices, {} on 64\n",
                x.exchange_line("step"),
                crate::units::seconds(c.model_8_s.unwrap_or(0.0)),
                crate::units::seconds(c.model_64_s.unwrap_or(0.0)),
            );
        }
    }
    Ok(Report {
        human,
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

/// One case timed on `placement`, and the decomposed engine's halo timings (none on one
/// device), which the caller turns into the case's exposure against the first device.
fn case<T: Real>(
    placement: &Placement,
    p: &AdvectionProblem,
    source: Source,
    reps: usize,
    ceilings: &Ceilings,
) -> Result<(AdvectionCase, crate::bench::HaloTimes)> {
    let device = placement.first();
    let f0 = super::presets::initial_field::<T>(p)?;
    let arrays = source == Source::Arrays;
    let velocity = if arrays {
        VelocitySource::Arrays
    } else {
        VelocitySource::Kernel
    };
    let devices = placement.distinct_devices().len();
    let (mut e, per_pass): (Box<dyn Engine<Real = T>>, u64) = match device {
        _ if !placement.is_single() => (
            super::slabs(p, placement, &f0, 0, velocity)?,
            match device {
                Device::Cuda(_) => {
                    super::cuda::CudaAdvection::<T>::steps_per_pass_for(p, velocity)?
                }
                Device::Cpu { .. } => 1,
            },
        ),
        Device::Cuda(gpu) => {
            let e = super::cuda::CudaAdvection::with_velocity(gpu.clone(), p, f0, 0, velocity)?;
            let n = e.steps_per_pass();
            (Box::new(e), n)
        }
        Device::Cpu { .. } => (Box::new(super::cpu::CpuAdvection::new(p, f0, 0)?), 1),
    };
    e.advance(1)?;
    e.diagnostics()?;
    let times = if placement.is_single() {
        sorted_seconds(device, e.as_mut(), p.steps, reps)?
    } else {
        sorted_wall_seconds(e.as_mut(), p.steps, reps)?
    };
    let seconds = times[times.len() / 2];
    let halo = crate::bench::halo_times(e.as_mut(), p.steps, reps)?;
    // Every device moves its slab's bytes at the copy bandwidth measured on the first.
    let bandwidth = ceilings.copy_bandwidth * devices as f64;
    // The CPU engine reads du, dv arrays for every steady velocity.
    let bytes = bytes_per_cell::<T>(arrays || matches!(device, Device::Cpu { .. }), per_pass);
    let work = (p.cells() as u64 * p.steps) as f64;
    let case = AdvectionCase {
        name: String::new(),
        nx: p.nx,
        ny: p.ny,
        steps: p.steps,
        seconds,
        gcells_per_s: work / seconds * 1e-9,
        steps_per_pass: per_pass,
        bytes_per_cell: bytes,
        fraction_of_copy_bandwidth: work * bytes / seconds / bandwidth,
        predicted_s: work * bytes / bandwidth,
        study_one_gpu_s: None,
        study_two_gpus_s: None,
        subdomains: placement.parts.len(),
        devices,
        one_device_s: None,
        speedup: None,
        efficiency: None,
        weak_s: None,
        weak_efficiency: None,
        exposure: None,
        model_8_s: None,
        model_64_s: None,
    };
    Ok((case, halo))
}
