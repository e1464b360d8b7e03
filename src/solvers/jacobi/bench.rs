//! `keisan bench jacobi`: sweeps of the seed case timed against the copy bandwidth
//! measured in the same run.

use clap::FromArgMatches;
use serde::Serialize;

use super::{Fields, JacobiConfig, Manufactured};
use crate::bench::{ceilings_for, sorted_seconds};
use crate::device::Device;
use crate::device::ceilings::Ceilings;
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::solver::Report;

#[derive(clap::Args, Debug)]
pub struct JacobiBenchArgs {
    /// Grid points in x and y, NxM (the same limits as a problem's jacobi.n, jacobi.m).
    #[arg(long, default_value = "5120x5000")]
    size: String,
    /// Jacobi iterations per timed run.
    #[arg(long, default_value_t = 100)]
    iterations: u64,
    /// Timed runs of each case; the report gives their median.
    #[arg(long, default_value_t = 7)]
    repetitions: usize,
    /// The precision of the field (the seed study's is f64).
    #[arg(long, value_enum, default_value_t = Precision::F64)]
    precision: Precision,
}

#[derive(Debug, Clone, Serialize)]
pub struct JacobiBench {
    pub device: String,
    /// Sweeps per pass through memory: 1 = single-pass kernel, 2 = temporal blocking.
    pub sweeps_per_pass: u32,
    pub precision: String,
    pub n: usize,
    pub m: usize,
    pub iterations: u64,
    pub repetitions: usize,
    /// Median seconds for `iterations` sweeps (device time on CUDA, from events).
    pub seconds: f64,
    pub seconds_min: f64,
    pub seconds_max: f64,
    pub gcells_per_s: f64,
    /// Bytes a single-pass sweep must move per cell: read u and f, write u_new.
    pub bytes_per_cell: usize,
    pub effective_bandwidth: f64,
    pub ceilings: Ceilings,
    /// effective_bandwidth / measured copy bandwidth.
    pub fraction_of_copy_bandwidth: f64,
    /// Time the sweeps would take at the measured copy bandwidth.
    pub floor_seconds: f64,
}

/// "5120x5000" → (5120, 5000), validated as a problem's n and m would be.
fn size(s: &str, iterations: u64, precision: Precision) -> Result<super::JacobiProblem> {
    let bad = || Error::invalid("--size", s, "expected NxM, e.g. 5120x5000");
    let (a, b) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let parse = |t: &str| t.trim().parse::<i64>().map_err(|_| bad());
    let cfg = JacobiConfig {
        n: parse(a)?,
        m: parse(b)?,
        alpha: 1.0,
        relax: 0.5,
        tolerance: 0.0, // never stop early: every sweep is timed work
        max_iterations: iterations as i64,
        exact: Manufactured::Polynomial,
    };
    cfg.validate(precision).map_err(|e| match e {
        Error::InvalidField { value, why, .. } => {
            Error::invalid("--size", format!("{s} ({value})"), why)
        }
        e => e,
    })
}

pub fn run(device: &Device, args: &clap::ArgMatches) -> Result<Report> {
    let a = JacobiBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    if a.iterations == 0 || a.repetitions == 0 {
        return Err(Error::invalid(
            "--iterations/--repetitions",
            0,
            "both must be at least 1",
        ));
    }
    if a.iterations > i64::MAX as u64 {
        return Err(Error::invalid("--iterations", a.iterations, "too many"));
    }
    let problem = size(&a.size, a.iterations, a.precision)?;
    let ceilings = ceilings_for(device)?;
    let variants: &[u32] = match device {
        Device::Cpu { .. } => &[1],
        Device::Cuda(_) => &[1, 2],
    };
    let reports = variants
        .iter()
        .map(|&spp| match a.precision {
            Precision::F32 => case::<f32>(device, &problem, a.repetitions, spp, ceilings),
            Precision::F64 => case::<f64>(device, &problem, a.repetitions, spp, ceilings),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Report {
        human: human(&reports),
        json: serde_json::to_value(&reports).expect("serialises"),
    })
}

fn case<T: Real>(
    device: &Device,
    problem: &super::JacobiProblem,
    repetitions: usize,
    sweeps_per_pass: u32,
    ceilings: Ceilings,
) -> Result<JacobiBench> {
    let iterations = problem.max_iterations;
    let mut engine =
        super::engine_with::<T>(problem, device, Fields::Manufactured, sweeps_per_pass)?;
    engine.advance(iterations.min(10))?; // warm-up
    engine.diagnostics()?;
    let times = sorted_seconds(device, engine.as_mut(), iterations, repetitions)?;
    let seconds = times[times.len() / 2];
    let cells = problem.cells() as f64 * iterations as f64;
    let bytes_per_cell = 3 * T::PRECISION.bytes();
    let effective_bandwidth = cells * bytes_per_cell as f64 / seconds;
    Ok(JacobiBench {
        device: device.describe(),
        sweeps_per_pass,
        precision: T::PRECISION.to_string(),
        n: problem.n,
        m: problem.m,
        iterations,
        repetitions,
        seconds,
        seconds_min: times[0],
        seconds_max: times[times.len() - 1],
        gcells_per_s: cells / seconds * 1e-9,
        bytes_per_cell,
        effective_bandwidth,
        fraction_of_copy_bandwidth: effective_bandwidth / ceilings.copy_bandwidth,
        floor_seconds: cells * bytes_per_cell as f64 / ceilings.copy_bandwidth,
        ceilings,
    })
}

/// The report table: ceilings once, then one block per variant.
fn human(reports: &[JacobiBench]) -> String {
    use crate::units::seconds as s;
    let mut r = String::new();
    if let Some(b) = reports.first() {
        r += &format!("jacobi bench on {}\n", b.device);
        r += &b.ceilings.human();
    }
    for b in reports {
        let how = match b.sweeps_per_pass {
            1 => "single pass".to_string(),
            k => format!("{k} sweeps per pass"),
        };
        r += &format!("  [{how}]\n");
        r += &format!(
            "  {} × {} {}, {} iterations, median of {}: {} (min {}, max {})\n",
            b.n,
            b.m,
            b.precision,
            b.iterations,
            b.repetitions,
            s(b.seconds),
            s(b.seconds_min),
            s(b.seconds_max)
        );
        r += &format!(
            "  {:.2} Gcell/s, {} B/cell, effective {:.1} GB/s = {:.1} % of copy bandwidth; single-pass floor {}\n",
            b.gcells_per_s,
            b.bytes_per_cell,
            b.effective_bandwidth * 1e-9,
            100.0 * b.fraction_of_copy_bandwidth,
            s(b.floor_seconds)
        );
    }
    r
}

/// `keisan bench jacobi --devices …` (or `--subdomains`): strong scaling of the seed case
/// (`--size`) on slabs against the first device alone, the halo exchange alone, how much
/// of it the slabs hide, and the model for 8 and 64 devices.
#[derive(Debug, Clone, Serialize)]
pub struct JacobiScaling {
    pub placement: String,
    pub precision: String,
    pub n: usize,
    pub m: usize,
    pub iterations: u64,
    pub subdomains: usize,
    pub devices: usize,
    pub one_device_s: f64,
    pub slabs_s: f64,
    pub speedup: f64,
    /// speedup ÷ distinct devices.
    pub efficiency: f64,
    pub exposure: crate::bench::Exposure,
}

pub fn slabs(placement: &crate::device::Placement, args: &clap::ArgMatches) -> Result<Report> {
    let a = JacobiBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    if a.iterations == 0 || a.repetitions == 0 || a.iterations > i64::MAX as u64 {
        return Err(Error::invalid(
            "--iterations/--repetitions",
            format!("{}/{}", a.iterations, a.repetitions),
            "both at least 1",
        ));
    }
    let problem = size(&a.size, a.iterations, a.precision)?;
    let b = match a.precision {
        Precision::F32 => scaling::<f32>(placement, &problem, a.repetitions)?,
        Precision::F64 => scaling::<f64>(placement, &problem, a.repetitions)?,
    };
    let s = crate::units::seconds;
    let mut human = format!(
        "jacobi on slabs: {}\n  {} × {} {}, {} sweeps, median of {}\n  first device alone {}; {} subdomains on {} device(s) {}: {:.2}× ({:.1} % per device)\n",
        b.placement,
        b.n,
        b.m,
        b.precision,
        b.iterations,
        a.repetitions,
        s(b.one_device_s),
        b.subdomains,
        b.devices,
        s(b.slabs_s),
        b.speedup,
        100.0 * b.efficiency,
    );
    human += &b.exposure.human("sweep", &format!("{} × {}", b.n, b.m));
    Ok(Report {
        human,
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

fn scaling<T: Real>(
    placement: &crate::device::Placement,
    problem: &super::JacobiProblem,
    reps: usize,
) -> Result<JacobiScaling> {
    let iterations = problem.max_iterations;
    let time = |on: &crate::device::Placement| -> Result<(f64, crate::bench::HaloTimes)> {
        let mut placed = super::engine_placed::<T>(problem, on, None)?;
        let e: &mut dyn crate::run::Engine<Real = T> = match &mut placed {
            super::Placed::One(e) => e.as_mut(),
            super::Placed::Slabs(e) => e.as_mut(),
        };
        e.advance(iterations.min(10))?; // warm-up
        e.diagnostics()?;
        let t = crate::bench::sorted_wall_seconds(e, iterations, reps)?;
        let halo = crate::bench::halo_times(e, iterations, reps)?;
        Ok((t[t.len() / 2], halo))
    };
    let one = crate::device::Placement::single(placement.first().clone());
    let (t1, _) = time(&one)?;
    let (tp, halo) = time(placement)?;
    let devices = placement.distinct_devices().len();
    let per = |t: f64| t / iterations as f64;
    Ok(JacobiScaling {
        placement: placement.describe(),
        precision: T::PRECISION.to_string(),
        n: problem.n,
        m: problem.m,
        iterations,
        subdomains: placement.parts.len(),
        devices,
        one_device_s: t1,
        slabs_s: tp,
        speedup: t1 / tp,
        efficiency: t1 / tp / devices as f64,
        exposure: crate::bench::Exposure::new(per(t1) / devices as f64, per(tp), per(t1), halo),
    })
}
