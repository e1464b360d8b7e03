//! `keisan bench nbody`: the force evaluation over a range of N, against the arithmetic
//! ceiling measured in the same run, beside the CUDA sample's kernel.
//!
//! Counting: N² interactions per force evaluation (the self pair included, as every
//! direct-sum figure counts them) and 20 FLOP per interaction (the CUDA sample's
//! `flopsPerInteraction`, the convention of GPU N-body figures).
//! The fraction of the FMA rate is TFLOP/s at 20 FLOP over the FMA f32 rate measured
//! now. The truer ceiling is instruction issue: keisan's kernel issues per interaction 3
//! FADD, 3 FFMA (r² chained from ε²), 1 MUFU rsqrt, 3 FMUL (m/r³; 2 when every mass is
//! equal) and 3 FFMA — 13 (12) instructions, one per clock per SM sub-partition — so
//! the issue ceiling is the measured FFMA instruction rate (FMA FLOP rate / 2) over 13
//! (12); one shared-memory load per j serves `ipt` interactions and adds 1/ipt. Where
//! the engine evaluates each pair once (nbody_mutual, one device at large N), N² still
//! counts the interactions (each pair gives two) and the ceiling uses that kernel's
//! instructions per interaction ([`per_interaction`]).

use clap::FromArgMatches;
use serde::Serialize;

use super::cuda::{CudaNbody, ForceShape};
use super::{Gravity, Particles, cpu, presets};
use crate::bench::ceilings_for;
use crate::device::Device;
use crate::device::ceilings::{Ceilings, cpu_flop_rate};
use crate::error::{Error, Result};
use crate::solver::Report;

/// FLOP per interaction, the CUDA sample's count.
const FLOP: f64 = 20.0;

#[derive(clap::Args, Debug)]
pub struct NbodyBenchArgs {
    /// Particle counts, comma-separated [default: 16384,65536,262144,1048576 on a GPU,
    /// 2048,8192 on the CPU].
    #[arg(long)]
    n: Option<String>,
    /// Timed force evaluations at each N; the report gives their median.
    #[arg(long, default_value_t = 5)]
    repetitions: usize,
    /// Sum each particle's f32 terms in f64.
    #[arg(long)]
    accurate: bool,
    /// Masses spread by ±20 % (the general kernel; equal masses take the kernel that
    /// multiplies by the mass once).
    #[arg(long)]
    unequal_masses: bool,
    /// Force-kernel block shapes to time, threads×i-particles per thread, comma-separated.
    #[arg(long, default_value = "128x8")]
    shapes: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NbodyCase {
    pub n: usize,
    pub threads: usize,
    pub ipt: usize,
    /// GPUs sharing the particles.
    pub devices: usize,
    /// Blocks per i-block the j-sum is split over on the first device (0 on the CPU);
    /// with `mutual`, the rounds each launch runs side by side.
    pub splits: usize,
    /// Each pair of tiles evaluated once (nbody_mutual), not each interaction.
    pub mutual: bool,
    /// Issued instructions per interaction the issue ceiling assumes (GPU, not accurate).
    pub instructions: Option<f64>,
    /// Median seconds of one force evaluation (positions packed to f32, copied to the
    /// other devices, then forces).
    pub seconds: f64,
    /// Several devices: the first device alone's time over `seconds`.
    pub speedup: Option<f64>,
    pub interactions_per_s: f64,
    pub tflops: f64,
    /// tflops / the FMA f32 rate (GPU) or the f64 multiply-add rate (CPU) measured now.
    pub fraction_of_fma: f64,
    /// interactions_per_s / (FFMA instruction rate / instructions per interaction).
    pub fraction_of_issue: Option<f64>,
    /// The CUDA sample's kernel on the same particles: interactions/s.
    pub baseline_interactions_per_s: Option<f64>,
    /// Largest |a − a_f64| over the first 256 particles, relative to their RMS |a_f64|
    /// (the CPU reference's f64 sum of the same particles).
    pub force_error: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NbodyBench {
    pub device: String,
    pub accurate: bool,
    pub equal_masses: bool,
    /// FP32-pipe instructions per interaction of keisan's kernel (None: accurate mode).
    pub instructions: Option<f64>,
    pub ceilings: Ceilings,
    /// The CPU's f64 multiply-add rate (CPU backend).
    pub cpu_flop_rate: Option<f64>,
    pub threads: usize,
    pub cases: Vec<NbodyCase>,
}

fn parse_list<T>(
    text: &str,
    field: &str,
    each: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<Vec<T>> {
    text.split(',')
        .map(|t| each(t.trim()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::invalid(field, text, expected))
}

fn shape_of(t: &str) -> Option<ForceShape> {
    let (a, b) = t.split_once('x')?;
    let s = ForceShape {
        threads: a.parse().ok()?,
        ipt: b.parse().ok()?,
        mutual: None,
    };
    let ok = [32, 64, 128, 256, 512].contains(&s.threads) && (1..=16).contains(&s.ipt);
    ok.then_some(s)
}

/// The Plummer sphere of the bench; with `unequal`, masses spread by ±20 % and
/// renormalised (a deterministic pattern).
fn particles(n: usize, unequal: bool) -> Particles {
    let mut p = presets::plummer(n, 1.0, presets::PLUMMER_A, 1);
    if unequal {
        for (i, m) in p.mass.iter_mut().enumerate() {
            *m *= 0.8 + 0.4 * ((i * 7919) % 1000) as f64 / 999.0;
        }
        let total = p.total_mass();
        p.mass.iter_mut().for_each(|m| *m /= total);
    }
    p
}

pub fn run(device: &Device, args: &clap::ArgMatches) -> Result<Report> {
    run_on(device, None, args)
}

/// The bench on several GPUs (`--devices`): each N on all of them and on the first
/// alone, and the speedup.
pub fn run_placed(placement: &crate::device::Placement, args: &clap::ArgMatches) -> Result<Report> {
    let gpus = placement.gpus()?.ok_or_else(|| {
        Error::invalid(
            "--subdomains",
            placement.parts.len(),
            "nbody shares its forces over GPUs (--devices) or MPI ranks; on the CPU it \
             uses every thread already",
        )
    })?;
    run_on(placement.first(), Some(gpus), args)
}

fn run_on(
    device: &Device,
    several: Option<Vec<std::sync::Arc<crate::device::Gpu>>>,
    args: &clap::ArgMatches,
) -> Result<Report> {
    let a = NbodyBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let default_n = match device {
        Device::Cuda(_) => "16384,65536,262144,1048576",
        Device::Cpu { .. } => "2048,8192",
    };
    let n_text = a.n.clone().unwrap_or_else(|| default_n.into());
    let ns = parse_list(
        &n_text,
        "--n",
        |t| t.parse::<usize>().ok().filter(|&n| n >= 2),
        "comma-separated particle counts ≥ 2",
    )?;
    let shapes = parse_list(
        &a.shapes,
        "--shapes",
        shape_of,
        "comma-separated threads×ipt, threads a power of two 32…512, ipt 1…16 (e.g. 128x8)",
    )?;
    if a.repetitions == 0 {
        return Err(Error::invalid("--repetitions", 0, "at least 1"));
    }
    let ceilings = ceilings_for(device)?;
    let grav = Gravity {
        g: 1.0,
        softening: 0.01,
    };
    let instructions = (!a.accurate).then_some(if a.unequal_masses { 13.0 } else { 12.0 });
    let mut cases = Vec::new();
    let mut cpu_rate = None;
    match device {
        Device::Cuda(gpu) => {
            let gpus = several.unwrap_or_else(|| vec![gpu.clone()]);
            // The ceilings are the first device's; shares on distinct devices add theirs
            // (a device listed twice adds nothing).
            let distinct = (0..gpus.len())
                .filter(|&i| {
                    !gpus[..i]
                        .iter()
                        .any(|g| std::sync::Arc::ptr_eq(g, &gpus[i]))
                })
                .count();
            let fma = ceilings.fma_f32.unwrap_or(f64::NAN) * distinct as f64;
            for &n in &ns {
                let p = particles(n, a.unequal_masses);
                let mut baseline = None;
                for &shape in &shapes {
                    let mut e = CudaNbody::with_shape(&gpus, grav, 0.01, &p, 0, a.accurate, shape)?;
                    if baseline.is_none() {
                        let t = e.time_baseline(&p, a.repetitions)?;
                        baseline = Some((n as f64).powi(2) / t);
                    }
                    let seconds = e.time_forces(a.repetitions)?;
                    let one_device = match gpus.len() {
                        1 => None,
                        _ => Some(
                            CudaNbody::with_shape(
                                &gpus[..1],
                                grav,
                                0.01,
                                &p,
                                0,
                                a.accurate,
                                shape,
                            )?
                            .time_forces(a.repetitions)?,
                        ),
                    };
                    let rate = (n as f64).powi(2) / seconds;
                    let mutual = e.mutual();
                    let k = instructions
                        .map(|k| per_interaction(k, !a.unequal_masses, mutual, shape.ipt));
                    let sample = 0..n.min(256);
                    let exact = cpu::accelerations_of(&p, grav, false, sample.clone()).0;
                    let got = &e.accelerations()?[sample];
                    cases.push(NbodyCase {
                        n,
                        threads: shape.threads,
                        ipt: shape.ipt,
                        devices: gpus.len(),
                        splits: if mutual {
                            e.rounds_per_launch()
                        } else {
                            e.splits()[0]
                        },
                        mutual,
                        instructions: k,
                        seconds,
                        speedup: one_device.map(|t| t / seconds),
                        interactions_per_s: rate,
                        tflops: rate * FLOP * 1e-12,
                        fraction_of_fma: rate * FLOP / fma,
                        fraction_of_issue: k.map(|k| rate / (fma / 2.0 / k)),
                        baseline_interactions_per_s: baseline,
                        force_error: Some(worst_relative(got, &exact)),
                    });
                }
            }
        }
        Device::Cpu { .. } => {
            let flops = cpu_flop_rate();
            cpu_rate = Some(flops);
            for &n in &ns {
                let p = particles(n, a.unequal_masses);
                let seconds = time_cpu(a.repetitions, || {
                    std::hint::black_box(cpu::accelerations(&p, grav, false));
                });
                let rate = (n as f64).powi(2) / seconds;
                cases.push(NbodyCase {
                    n,
                    threads: rayon::current_num_threads(),
                    ipt: 1,
                    devices: 1,
                    splits: 0,
                    mutual: false,
                    instructions: None,
                    seconds,
                    speedup: None,
                    interactions_per_s: rate,
                    tflops: rate * FLOP * 1e-12,
                    fraction_of_fma: rate * FLOP / flops,
                    fraction_of_issue: None,
                    baseline_interactions_per_s: None,
                    force_error: None,
                });
            }
        }
    }
    let b = NbodyBench {
        device: device.describe(),
        accurate: a.accurate,
        equal_masses: !a.unequal_masses,
        instructions,
        ceilings,
        cpu_flop_rate: cpu_rate,
        threads: rayon::current_num_threads(),
        cases,
    };
    Ok(Report {
        human: human(&b),
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

/// max_i |a_i − b_i| / RMS |b|.
fn worst_relative(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let norm = |v: &[f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let rms = (b.iter().map(|v| norm(v).powi(2)).sum::<f64>() / b.len() as f64).sqrt();
    a.iter()
        .zip(b)
        .map(|(x, y)| norm(&[x[0] - y[0], x[1] - y[1], x[2] - y[2]]))
        .fold(0.0, f64::max)
        / rms
}

/// Median wall seconds of `reps` runs of `f` (after one warm-up).
fn time_cpu(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = std::time::Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn human(b: &NbodyBench) -> String {
    use crate::units::seconds as s;
    let mut r = format!(
        "nbody bench on {} ({} masses{})\n",
        b.device,
        if b.equal_masses { "equal" } else { "unequal" },
        if b.accurate { ", accurate mode" } else { "" }
    );
    r += &b.ceilings.human();
    if let Some(f) = b.cpu_flop_rate {
        r += &format!(
            "  f64 multiply-add rate (measured now, {} threads): {:.1} GFLOP/s\n",
            b.threads,
            f * 1e-9
        );
    }
    for c in &b.cases {
        r += &format!(
            "  N = {:>8}{}: {} per force evaluation, {} G interactions/s, {:.3} TFLOP/s at \
             20 FLOP, {:.1} % of the {}",
            c.n,
            if c.splits > 0 {
                let on = if c.devices > 1 {
                    format!(" on {} GPUs", c.devices)
                } else {
                    String::new()
                };
                if c.mutual {
                    format!(
                        " ({}x{}, each pair once, {} rounds per launch{on})",
                        c.threads, c.ipt, c.splits
                    )
                } else {
                    format!(" ({}x{}, {} splits{on})", c.threads, c.ipt, c.splits)
                }
            } else {
                format!(" ({} threads)", c.threads)
            },
            s(c.seconds),
            sig3(c.interactions_per_s * 1e-9),
            c.tflops,
            100.0 * c.fraction_of_fma,
            if c.splits > 0 {
                "FMA rate"
            } else {
                "multiply-add rate"
            }
        );
        if let (Some(f), Some(k)) = (c.fraction_of_issue, c.instructions) {
            r += &format!(
                ", {:.1} % of the issue ceiling ({k:.2} instructions per interaction)",
                100.0 * f
            );
        }
        if let Some(x) = c.speedup {
            r += &format!(", {x:.2}× the first GPU alone");
        }
        if let Some(err) = c.force_error {
            r += &format!(", force error {err:.1e} of the RMS");
        }
        if let Some(base) = c.baseline_interactions_per_s {
            r += &format!(
                "; CUDA-sample kernel (first GPU) {:.1} G/s ({:.1} % of its FMA rate): {:.2}×",
                base * 1e-9,
                100.0 * base * FLOP / b.ceilings.fma_f32.unwrap_or(f64::NAN),
                c.interactions_per_s / base
            );
        }
        r += "\n";
    }
    r
}

/// Instructions issued per interaction: nbody_forces' `k` per interaction (12 with equal
/// masses, 13 without) and one shared load per j for `ipt` i-particles. nbody_mutual's per
/// pair of interactions: 15 with equal masses (3 FFMA more for j), 17 without (and the
/// second mass product), plus per j and warp the instructions of its shuffles, shared
/// load and store and loop: 33 and 34.5 (the SASS of its 2-j loop on sm_90 at ipt 8: 306
/// and 341 instructions).
pub fn per_interaction(k: f64, equal_masses: bool, mutual: bool, ipt: usize) -> f64 {
    let ipt = ipt as f64;
    match (mutual, equal_masses) {
        (false, _) => k + 1.0 / ipt,
        (true, true) => (15.0 * ipt + 33.0) / (2.0 * ipt),
        (true, false) => (17.0 * ipt + 34.5) / (2.0 * ipt),
    }
}

/// Three significant digits (1234.5 → "1235", 0.2634 → "0.263").
fn sig3(x: f64) -> String {
    let decimals = (2 - x.abs().log10().floor() as i32).clamp(0, 6) as usize;
    format!("{x:.decimals$}")
}
