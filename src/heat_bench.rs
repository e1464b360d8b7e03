//! `keisan bench heat` and `keisan model heat`: in-core single-pass throughput against the
//! copy-bandwidth floor, out-of-core pyramid throughput under a device budget beside the
//! trivial baseline, and the cost model's predictions beside measured times.

use std::time::Instant;

use serde::Serialize;

use crate::device::Device;
use crate::device::ceilings::{self, Ceilings};
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::run::Engine;
use crate::solvers::heat::{
    self, Decomposition, HeatConfig, HeatProblem, Initial, Layout, Strategy,
};

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
    let mut p = cfg.validate()?;
    p.dt = 0.9 * p.largest_stable_dt();
    Ok(p)
}

pub fn heat(device: &Device, o: &HeatBenchOptions) -> Result<HeatBench> {
    let ceilings = match device {
        Device::Cpu { .. } => ceilings::measure_cpu(),
        Device::Cuda(gpu) => ceilings::measure_gpu(gpu)?,
    };
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

fn time_advance(
    engine: &mut dyn Engine<Real = impl Real>,
    device: &Device,
    steps: u64,
    in_core: bool,
) -> Result<f64> {
    match device {
        Device::Cuda(gpu) if in_core => {
            let (start, stop) = (gpu.timing_event()?, gpu.timing_event()?);
            start.record(&gpu.stream)?;
            engine.advance(steps)?;
            stop.record(&gpu.stream)?;
            let s = start.elapsed_ms(&stop)? as f64 * 1e-3;
            engine.diagnostics()?;
            Ok(s)
        }
        _ => {
            let t = Instant::now();
            engine.advance(steps)?;
            engine.diagnostics()?;
            Ok(t.elapsed().as_secs_f64())
        }
    }
}

impl HeatBench {
    pub fn human(&self) -> String {
        let c = &self.ceilings;
        let mut r = format!("heat bench on {}\n", self.device);
        r += &format!(
            "  ceilings (measured now): copy {:.1} GB/s → single-pass floor {:.1} Gcell/s (f32, 8 B/cell/step)\n",
            c.copy_bandwidth * 1e-9,
            c.copy_bandwidth / 8.0 * 1e-9
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
                Err(crate::error::Error::InvalidField { .. }) => continue, // does not fit
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
