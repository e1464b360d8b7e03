//! `keisan bench heat` and `keisan model heat`: in-core single-pass throughput against the
//! copy-bandwidth floor, out-of-core pyramid throughput under a device budget beside the
//! trivial baseline, and the cost model's predictions beside measured times.

use std::time::Instant;

use clap::FromArgMatches;
use serde::Serialize;

use crate::bench::{Timer, ceilings_for};
use crate::device::ceilings::Ceilings;
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::run::Engine;
use crate::solver::Report;
use crate::solvers::heat::{
    self, Decomposition, HeatConfig, HeatProblem, Initial, Layout, Strategy,
};

#[derive(clap::Args, Debug)]
pub struct HeatBenchArgs {
    /// The precision of the field.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    /// In-core 3D grid, ZxYxX (empty to skip).
    #[arg(long, default_value = "512x512x512")]
    size_3d: String,
    /// In-core 2D grid, YxX (empty to skip).
    #[arg(long, default_value = "16384x16384")]
    size_2d: String,
    /// Time steps per timed run of the in-core cases.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// Timed runs of each case; the report gives their median.
    #[arg(long, default_value_t = 5)]
    repetitions: usize,
    /// Out-of-core 3D grid, ZxYxX.
    #[arg(long, default_value = "1024x1024x1024")]
    ooc_size: String,
    /// Time steps of the out-of-core pyramid case.
    #[arg(long, default_value_t = 64)]
    ooc_steps: u64,
    /// Device budget = grid bytes / this.
    #[arg(long, default_value_t = 8)]
    budget_divisor: u64,
    /// Time steps of the trivial out-of-core baseline (the whole grid through the device
    /// every step: slow, so few).
    #[arg(long, default_value_t = 2)]
    trivial_steps: u64,
    /// Time the in-core cases only.
    #[arg(long)]
    skip_out_of_core: bool,
    /// Steps per pass of the temporal-blocked in-core cases (default: the engine's).
    #[arg(long)]
    temporal_block: Option<usize>,
}

#[derive(clap::Args, Debug)]
pub struct HeatModelArgs {
    /// Pyramid heights to try.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8, 12, 16, 24, 32, 48, 64])]
    heights: Vec<usize>,
}

/// "512x512x512" → [512, 512, 512] with exactly `dims` extents; "" → [] (skip).
fn parse_shape(flag: &str, s: &str, dims: usize) -> Result<Vec<usize>> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: Option<Vec<usize>> = s
        .split(['x', 'X'])
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|v| (3..=i32::MAX as usize).contains(v))
        })
        .collect();
    let example = ["512", "16384x16384", "512x512x512"][dims - 1];
    let v = v.filter(|v| v.len() == dims).ok_or_else(|| {
        Error::invalid(
            flag,
            s,
            format!(
                "expected {dims} extents in [3, {}], e.g. {example}",
                i32::MAX
            ),
        )
    })?;
    // Two time layers of f64: what the largest case would hold.
    crate::units::checked_cells(flag, &v, 16)?;
    Ok(v)
}

pub fn run(device: &Device, args: &clap::ArgMatches) -> Result<Report> {
    let a = HeatBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let most = heat::MAX_TEMPORAL_BLOCK;
    if let Some(t) = a.temporal_block.filter(|t| !(1..=most).contains(t)) {
        return Err(Error::invalid(
            "--temporal-block",
            t,
            format!("steps per pass must be in [1, {most}]"),
        ));
    }
    for (flag, v) in [
        ("--steps", a.steps),
        ("--repetitions", a.repetitions as u64),
        ("--ooc-steps", a.ooc_steps),
        ("--trivial-steps", a.trivial_steps),
        ("--budget-divisor", a.budget_divisor),
    ] {
        if !(1..=i64::MAX as u64).contains(&v) {
            return Err(Error::invalid(flag, v, "must be at least 1"));
        }
    }
    let o = HeatBenchOptions {
        precision: a.precision,
        shape_3d: parse_shape("--size-3d", &a.size_3d, 3)?,
        shape_2d: parse_shape("--size-2d", &a.size_2d, 2)?,
        steps: a.steps,
        repetitions: a.repetitions,
        ooc_shape: parse_shape("--ooc-size", &a.ooc_size, 3)?,
        ooc_steps: a.ooc_steps,
        budget_divisor: a.budget_divisor,
        trivial_steps: a.trivial_steps,
        skip_out_of_core: a.skip_out_of_core || a.ooc_size.trim().is_empty(),
        temporal_block: a.temporal_block,
    };
    let report = heat(device, &o)?;
    Ok(Report {
        human: report.human(),
        json: serde_json::to_value(&report).expect("serialises"),
    })
}

/// `keisan model heat`: predicted vs measured time for each height.
pub fn model(
    p: &HeatProblem,
    precision: Precision,
    device: &Device,
    args: &clap::ArgMatches,
) -> Result<Report> {
    let a = HeatModelArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    if let Some(&bad) = a.heights.iter().find(|&&n| n == 0 || n as u64 > p.steps) {
        return Err(Error::invalid(
            "--heights",
            bad,
            format!("each height must be in [1, heat.steps = {}]", p.steps),
        ));
    }
    if a.heights.is_empty() {
        return Err(Error::invalid(
            "--heights",
            "[]",
            "give at least one height",
        ));
    }
    let mut human = format!(
        "{:>4} {:>6} {:>6} {:>12} {:>12} {:>9}  bound\n",
        "dec", "n", "tasks", "predicted", "measured", "deviation"
    );
    let row = |m: &ModelPoint| {
        format!(
            "{:>4} {:>6} {:>6} {:>12} {:>12} {:>8.1}%  {}",
            m.decomposition.label(),
            m.pyramid_height,
            m.tasks,
            crate::units::seconds(m.predicted_s),
            crate::units::seconds(m.measured_s),
            100.0 * m.deviation,
            m.bound
        )
    };
    // Rows also appear on stderr as they are measured (a sweep takes a while).
    let show = |m: &ModelPoint| crate::say!("{}", row(m));
    let points = match precision {
        Precision::F32 => model_sweep::<f32>(device, p, &a.heights, &show)?,
        Precision::F64 => model_sweep::<f64>(device, p, &a.heights, &show)?,
    };
    if points.is_empty() {
        return Err(Error::DoesNotFit(format!(
            "--heights {:?}: no height fits the device budget; try smaller heights or more \
             device memory",
            a.heights
        )));
    }
    let mean = points.iter().map(|m| m.deviation.abs()).sum::<f64>() / points.len() as f64;
    for m in &points {
        human += &row(m);
        human.push('\n');
    }
    human += &format!(
        "mean |deviation| {:.1} % over {} runs\n",
        100.0 * mean,
        points.len()
    );
    Ok(Report {
        human,
        json: serde_json::json!({
            "device": device.describe(), "points": points, "mean_abs_deviation": mean
        }),
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct HeatCase {
    pub name: String,
    pub shape: Vec<usize>,
    pub precision: String,
    pub steps: u64,
    /// Median seconds for `steps` steps (device time on CUDA in-core, wall time otherwise).
    pub seconds: f64,
    pub gcells_per_s: f64,
    /// Single-pass traffic per cell per step: read U, write U_new.
    pub bytes_per_cell: usize,
    /// gcells_per_s × bytes_per_cell / copy bandwidth (> 1 only by temporal blocking).
    pub fraction_of_floor: f64,
    pub layout: Layout,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeatBench {
    pub device: String,
    pub ceilings: Ceilings,
    pub cases: Vec<HeatCase>,
}

pub struct HeatBenchOptions {
    pub precision: Precision,
    pub shape_3d: Vec<usize>,
    pub shape_2d: Vec<usize>,
    pub steps: u64,
    pub repetitions: usize,
    /// Out-of-core grid (3D); budget = grid bytes / `budget_divisor`.
    pub ooc_shape: Vec<usize>,
    pub ooc_steps: u64,
    pub budget_divisor: u64,
    pub trivial_steps: u64,
    pub skip_out_of_core: bool,
    /// Steps per pass of the temporal-blocked in-core case; None: the engine's default.
    pub temporal_block: Option<usize>,
}

/// How the name of an in-core case without temporal blocking ends.
const SINGLE_PASS: &str = "single-pass";

/// A heat problem with dt at 0.9 of the stability limit and a hot box inside.
pub fn bench_problem(shape: &[usize], steps: u64, ooc: heat::OutOfCore) -> Result<HeatProblem> {
    let cfg = HeatConfig {
        shape: shape.iter().map(|&v| v as i64).collect(),
        spacing: None,
        diffusivity: 1.0,
        dt: 1e-30,
        steps: steps as i64,
        initial: Initial::HotBox {
            fraction: 0.5,
            value: 1.0,
        },
        strategy: ooc.strategy,
        decomposition: ooc.decomposition,
        pyramid_height: ooc.pyramid_height.map(|v| v as i64),
        device_memory: ooc
            .device_memory
            .map(|b| crate::units::ByteSize::Bytes(b as i64)),
        pin_host_grid: Some(ooc.pin_host_grid),
        temporal_block: None,
    };
    let mut p = cfg.validate(Precision::F64)?;
    p.dt = 0.9 * p.largest_stable_dt();
    Ok(p)
}

pub fn heat(device: &Device, o: &HeatBenchOptions) -> Result<HeatBench> {
    let ceilings = ceilings_for(device)?;
    let cases = match o.precision {
        Precision::F32 => cases::<f32>(device, o, &ceilings)?,
        Precision::F64 => cases::<f64>(device, o, &ceilings)?,
    };
    Ok(HeatBench {
        device: device.describe(),
        ceilings,
        cases,
    })
}

fn cases<T: Real>(device: &Device, o: &HeatBenchOptions, c: &Ceilings) -> Result<Vec<HeatCase>> {
    let in_core = heat::OutOfCore {
        strategy: Strategy::InCore,
        ..Default::default()
    };
    let mut out = Vec::new();
    let on_gpu = matches!(device, Device::Cuda(_));
    for (dims, shape) in [("3D", &o.shape_3d), ("2D", &o.shape_2d)] {
        if shape.is_empty() {
            continue;
        }
        let mut p = bench_problem(shape, o.steps, in_core.clone())?;
        p.temporal_block = Some(1);
        let name = format!("in-core {dims} {SINGLE_PASS}");
        out.push(time_case::<T>(&name, device, &p, o.repetitions, c)?);
        let levels = o
            .temporal_block
            .unwrap_or_else(|| heat::step_kernel::default_levels(p.dims, T::PRECISION));
        if on_gpu && levels > 1 {
            p.temporal_block = Some(levels);
            let name = format!("in-core {dims} temporal {levels} steps/pass");
            out.push(time_case::<T>(&name, device, &p, o.repetitions, c)?);
        }
    }
    if !o.skip_out_of_core {
        let cells: u64 = o.ooc_shape.iter().map(|&v| v as u64).product();
        let budget = cells * T::PRECISION.bytes() as u64 / o.budget_divisor;
        for (name, strategy, steps) in [
            ("out-of-core pyramid", Strategy::Pyramid, o.ooc_steps),
            ("out-of-core trivial", Strategy::Trivial, o.trivial_steps),
        ] {
            let ooc = heat::OutOfCore {
                strategy,
                device_memory: Some(budget),
                ..Default::default()
            };
            let p = bench_problem(&o.ooc_shape, steps, ooc)?;
            out.push(time_case::<T>(name, device, &p, 1, c)?);
        }
    }
    Ok(out)
}

/// Build once, warm up one step (in-core), then time `p.steps` steps `reps` times.
pub fn time_case<T: Real>(
    name: &str,
    device: &Device,
    p: &HeatProblem,
    reps: usize,
    c: &Ceilings,
) -> Result<HeatCase> {
    let (mut engine, layout) = heat::engine::<T>(p, device)?;
    let in_core = layout.strategy == Strategy::InCore;
    let mut times = Vec::new();
    if in_core {
        engine.advance(1)?;
        engine.diagnostics()?;
    }
    for _ in 0..reps.max(1) {
        times.push(time_advance(engine.as_mut(), device, p.steps, in_core)?);
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let cell_steps = p.cells() as f64 * p.steps as f64;
    let gcells = cell_steps / seconds * 1e-9;
    let bytes_per_cell = 2 * T::PRECISION.bytes();
    Ok(HeatCase {
        name: name.to_string(),
        shape: p.user_shape(),
        precision: T::PRECISION.to_string(),
        steps: p.steps,
        seconds,
        gcells_per_s: gcells,
        bytes_per_cell,
        fraction_of_floor: gcells * 1e9 * bytes_per_cell as f64 / c.copy_bandwidth,
        layout,
    })
}

/// Device time (events) in-core on CUDA; wall time otherwise, since the out-of-core
/// engine's host work is part of what it costs.
fn time_advance(
    engine: &mut dyn Engine<Real = impl Real>,
    device: &Device,
    steps: u64,
    in_core: bool,
) -> Result<f64> {
    if in_core {
        let s = Timer::new(device)?.time(|| engine.advance(steps))?;
        engine.diagnostics()?;
        return Ok(s);
    }
    let t = Instant::now();
    engine.advance(steps)?;
    engine.diagnostics()?;
    Ok(t.elapsed().as_secs_f64())
}

impl HeatBench {
    pub fn human(&self) -> String {
        let c = &self.ceilings;
        let mut r = format!("heat bench on {}\n", self.device);
        // Every case has the bench's one precision.
        let (precision, bytes) = self
            .cases
            .first()
            .map_or(("f32", 8), |k| (k.precision.as_str(), k.bytes_per_cell));
        r += &format!(
            "  ceilings (measured now): copy {:.1} GB/s → single-pass floor {:.1} Gcell/s ({precision}, {bytes} B/cell/step)\n",
            c.copy_bandwidth * 1e-9,
            c.copy_bandwidth / bytes as f64 * 1e-9
        );
        let mut in_core_3d = None;
        let mut pyramid = None;
        for k in &self.cases {
            let shape: Vec<String> = k.shape.iter().map(|v| v.to_string()).collect();
            r += &format!(
                "  [{}] {} {}, {} steps: {} → {:.1} Gcell/s = {:.1} % of the single-pass floor\n",
                k.name,
                shape.join("×"),
                k.precision,
                k.steps,
                crate::units::seconds(k.seconds),
                k.gcells_per_s,
                100.0 * k.fraction_of_floor
            );
            if k.layout.strategy != Strategy::InCore {
                r += &format!("      {}\n", k.layout.human());
                if let Some(pred) = k.layout.predicted_s {
                    r += &format!(
                        "      model: predicted {} vs measured {} ({:+.1} %)\n",
                        crate::units::seconds(pred),
                        crate::units::seconds(k.seconds),
                        100.0 * (pred - k.seconds) / k.seconds
                    );
                }
            }
            let single_pass = |c: &HeatCase| c.name.ends_with(SINGLE_PASS);
            if k.layout.strategy == Strategy::InCore && !single_pass(k) {
                let twin = self
                    .cases
                    .iter()
                    .find(|c| c.shape == k.shape && single_pass(c));
                if let Some(s) = twin {
                    r += &format!(
                        "  temporal blocking / single pass ({}D): {:.2}×\n",
                        k.shape.len(),
                        k.gcells_per_s / s.gcells_per_s
                    );
                }
            }
            match k.name.as_str() {
                "in-core 3D single-pass" => in_core_3d = Some(k.gcells_per_s),
                "out-of-core pyramid" => pyramid = Some(k.gcells_per_s),
                "out-of-core trivial" => {
                    if let Some(py) = pyramid {
                        r += &format!("  pyramid / trivial: {:.1}×\n", py / k.gcells_per_s);
                    }
                }
                _ => {}
            }
        }
        if let (Some(ic), Some(py)) = (in_core_3d, pyramid) {
            r += &format!(
                "  out-of-core pyramid / in-core 3D single pass: {:.1} %\n",
                100.0 * py / ic
            );
        }
        r
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelPoint {
    pub decomposition: Decomposition,
    pub pyramid_height: usize,
    pub tasks: usize,
    pub predicted_s: f64,
    pub measured_s: f64,
    pub deviation: f64,
    pub bound: &'static str,
}

/// Predicted vs measured time of `p` for each pyramid height (and each decomposition
/// unless the problem fixes one), like the seed's figures 4–5.
pub fn model_sweep<T: Real>(
    device: &Device,
    p: &HeatProblem,
    heights: &[usize],
    progress: &dyn Fn(&ModelPoint),
) -> Result<Vec<ModelPoint>> {
    let decompositions: Vec<Decomposition> = match p.ooc.decomposition {
        Some(d) => vec![d],
        None => Decomposition::ALL
            .into_iter()
            .filter(|d| d.fits(p.dims))
            .collect(),
    };
    let mut points = Vec::new();
    for d in decompositions {
        for &n in heights {
            let mut q = p.clone();
            q.ooc.strategy = if p.ooc.strategy == Strategy::Trivial {
                Strategy::Trivial
            } else {
                Strategy::Pyramid
            };
            q.ooc.decomposition = Some(d);
            q.ooc.pyramid_height = Some(n);
            let (mut engine, layout) = match heat::engine::<T>(&q, device) {
                Ok(e) => e,
                Err(Error::DoesNotFit(_)) => continue,
                Err(e) => return Err(e),
            };
            let t = Instant::now();
            engine.advance(q.steps)?;
            engine.diagnostics()?;
            let measured = t.elapsed().as_secs_f64();
            let predicted = layout.predicted_s.unwrap_or(0.0);
            let point = ModelPoint {
                decomposition: d,
                pyramid_height: n,
                tasks: layout.tasks.unwrap_or(0),
                predicted_s: predicted,
                measured_s: measured,
                deviation: (predicted - measured) / measured,
                bound: layout.bound.unwrap_or("?"),
            };
            progress(&point);
            points.push(point);
        }
    }
    Ok(points)
}

/// One row of `keisan bench heat --devices …`.
#[derive(Debug, Serialize)]
pub struct SlabCase {
    pub name: String,
    pub shape: Vec<usize>,
    pub steps: u64,
    pub seconds: f64,
    pub one_device_s: f64,
    /// Weak: one device's grid ÷ this; strong: the speedup ÷ devices.
    pub efficiency: f64,
    pub gcells_per_s: f64,
}

/// `keisan bench heat --devices …`: in-core 3D on slabs, weak scaling (`--size-3d` per
/// device, the slowest axis times the devices) and strong scaling (the grown grid on one
/// device and on all), each timed against the first device alone in the same run.
pub fn slabs(placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
    let a = HeatBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    if a.repetitions == 0 || a.steps == 0 {
        return Err(Error::invalid(
            "--steps/--repetitions",
            0,
            "must be at least 1",
        ));
    }
    let shape = parse_shape("--size-3d", &a.size_3d, 3)?;
    let (cases, exposure) = match a.precision {
        Precision::F32 => slab_cases::<f32>(placement, &shape, a.steps, a.repetitions)?,
        Precision::F64 => slab_cases::<f64>(placement, &shape, a.steps, a.repetitions)?,
    };
    let mut human = format!(
        "heat bench on {}, {}, in-core 3D, median of {}\n",
        placement.describe(),
        a.precision,
        a.repetitions
    );
    for c in &cases {
        human += &format!(
            "  {:<8} {:>16} {:>5} steps: {} ({:.1} Gcell/s); first device alone {}: {:.1} % efficiency\n",
            c.name,
            c.shape
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("x"),
            c.steps,
            crate::units::seconds(c.seconds),
            c.gcells_per_s,
            crate::units::seconds(c.one_device_s),
            100.0 * c.efficiency
        );
    }
    let grown: Vec<String> = cases[0].shape.iter().map(|v| v.to_string()).collect();
    human += &exposure.human("step", &grown.join("x"));
    Ok(Report {
        human,
        json: serde_json::json!({
            "placement": placement.describe(),
            "precision": a.precision.to_string(),
            "cases": cases,
            "exposure": exposure,
        }),
    })
}

/// The weak and strong cases, and the weak run's exposed exchange (against the first
/// device alone on its share) with the model of the grown grid on more devices.
fn slab_cases<T: Real>(
    placement: &Placement,
    shape: &[usize],
    steps: u64,
    reps: usize,
) -> Result<(Vec<SlabCase>, crate::bench::Exposure)> {
    let d = placement.total();
    let mut grown = shape.to_vec();
    grown[0] *= d;
    let single = Placement::single(placement.first().clone());
    let time = |shape: &[usize], on: &Placement| -> Result<(f64, crate::bench::HaloTimes)> {
        let in_core = heat::OutOfCore {
            strategy: Strategy::InCore,
            ..Default::default()
        };
        let p = bench_problem(shape, steps, in_core)?;
        let (mut e, _) = heat::engine_placed::<T>(&p, on, None)?;
        e.advance(1)?;
        e.diagnostics()?;
        let t = crate::bench::sorted_wall_seconds(e.as_mut(), steps, reps)?;
        let halo = crate::bench::halo_times(e.as_mut(), steps, reps)?;
        Ok((t[t.len() / 2], halo))
    };
    let (one, _) = time(shape, &single)?;
    let (weak, halo) = time(&grown, placement)?;
    let (strong_one, _) = time(&grown, &single)?;
    // Slabs sharing a device share its time: the reference is one device's time for the
    // work each device holds.
    let share = d as f64 / placement.distinct_devices().len() as f64;
    let per = |t: f64| t / steps as f64;
    let exposure = crate::bench::Exposure::new(per(one) * share, per(weak), per(strong_one), halo);
    let cells = |s: &[usize]| s.iter().product::<usize>() as f64 * steps as f64;
    let cases = vec![
        SlabCase {
            name: "weak".into(),
            shape: grown.clone(),
            steps,
            seconds: weak,
            one_device_s: one,
            efficiency: one / weak,
            gcells_per_s: cells(&grown) / weak * 1e-9,
        },
        SlabCase {
            name: "strong".into(),
            shape: grown.clone(),
            steps,
            seconds: weak,
            one_device_s: strong_one,
            efficiency: strong_one / weak / d as f64,
            gcells_per_s: cells(&grown) / weak * 1e-9,
        },
    ];
    Ok((cases, exposure))
}
