//! `keisan bench nbody`: the force kernel over a range of N, against the f32 FMA rate
//! measured in the same run.
//!
//! The kernel's inner loop issues, per interaction, 3 FADD (separations), 3 FFMA (r²),
//! 3 FMUL (m/r, m/r³), 3 FFMA (accelerations), 1 FADD (potential) and a select on the
//! FP32 pipes — 14 instructions — and one MUFU rsqrt on its own, slower pipe (16 per
//! clock per SM against 128 FP32: 8 FP32 slots' worth, overlapped). The ceiling is then
//! the measured FMA instruction rate (FLOP rate / 2) divided by 14 interactions per
//! instruction issue; the study's figures use 26 FLOP per interaction, reported too.

use clap::FromArgMatches;
use serde::Serialize;

use super::{Gravity, cuda::CudaNbody, presets};
use crate::bench::ceilings_for;
use crate::device::Device;
use crate::device::ceilings::Ceilings;
use crate::error::{Error, Result};
use crate::solver::Report;

/// FP32-pipe instructions per interaction (see the module's comment).
const INSTRUCTIONS: f64 = 14.0;
/// The study's convention for GFLOPS figures.
const STUDY_FLOP: f64 = 26.0;

#[derive(clap::Args, Debug)]
pub struct NbodyBenchArgs {
    /// Particle counts, comma-separated.
    #[arg(long, default_value = "4096,16384,65536,262144,1048576")]
    n: String,
    #[arg(long, default_value_t = 5)]
    repetitions: usize,
    /// Sum each particle's f32 terms in f64.
    #[arg(long)]
    accurate: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct NbodyCase {
    pub n: usize,
    /// Blocks per i-tile the j-sum is split over.
    pub splits: usize,
    /// Median seconds of one force evaluation (positions packed to f32, then forces).
    pub seconds: f64,
    pub interactions_per_s: f64,
    pub study_gflops: f64,
    /// interactions_per_s / (measured FMA f32 rate / 2 / 14).
    pub fraction_of_fp32_issue: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NbodyBench {
    pub device: String,
    pub accurate: bool,
    pub ceilings: Ceilings,
    pub cases: Vec<NbodyCase>,
}

pub fn run(device: &Device, args: &clap::ArgMatches) -> Result<Report> {
    let a = NbodyBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let Device::Cuda(gpu) = device else {
        return Err(Error::invalid(
            "--backend",
            "cpu",
            "keisan bench nbody times the CUDA force kernel; the CPU reference runs with keisan run",
        ));
    };
    let ns =
        a.n.split(',')
            .map(|t| t.trim().parse::<usize>().ok().filter(|&n| n >= 1))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::invalid("--n", &a.n, "comma-separated particle counts ≥ 1"))?;
    if a.repetitions == 0 {
        return Err(Error::invalid("--repetitions", 0, "at least 1"));
    }
    let ceilings = ceilings_for(device)?;
    let fma = ceilings.fma_f32.unwrap_or(f64::NAN);
    let grav = Gravity {
        g: 1.0,
        softening: 0.01,
    };
    let mut cases = Vec::new();
    for n in ns {
        let p = presets::plummer(n, 1.0, presets::PLUMMER_A, 1);
        let mut e = CudaNbody::new(gpu.clone(), grav, 0.01, &p, 0, a.accurate)?;
        let seconds = e.time_forces(a.repetitions)?;
        let rate = (n as f64) * (n as f64) / seconds;
        cases.push(NbodyCase {
            n,
            splits: e.splits(),
            seconds,
            interactions_per_s: rate,
            study_gflops: rate * STUDY_FLOP * 1e-9,
            fraction_of_fp32_issue: rate / (fma / 2.0 / INSTRUCTIONS),
        });
    }
    let b = NbodyBench {
        device: device.describe(),
        accurate: a.accurate,
        ceilings,
        cases,
    };
    Ok(Report {
        human: human(&b),
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

fn human(b: &NbodyBench) -> String {
    use crate::units::seconds as s;
    let mut r = format!(
        "nbody bench on {}{}\n",
        b.device,
        if b.accurate { " (accurate mode)" } else { "" }
    );
    r += &b.ceilings.human();
    for c in &b.cases {
        r += &format!(
            "  N = {:>8}: {} per force evaluation ({} splits), {:.1} G interactions/s, \
             {:.0} GFLOP/s at 26 FLOP each, {:.1} % of the FP32 issue ceiling\n",
            c.n,
            s(c.seconds),
            c.splits,
            c.interactions_per_s * 1e-9,
            c.study_gflops,
            100.0 * c.fraction_of_fp32_issue
        );
    }
    r
}
