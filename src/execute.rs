//! Carry out a validated problem on a chosen device: engine, run loop, checks, outputs.

use std::time::Instant;

use crate::device::Device;
use crate::error::Result;
use crate::output::{self, OutputDir};
use crate::precision::{Precision, Real};
use crate::problem::{Problem, SolverProblem};
use crate::run::{self, Engine};
use crate::solvers::heat::{self, HeatProblem};
use crate::solvers::jacobi::{self, Fields, JacobiProblem};
use crate::summary::{Summary, Timings};

#[derive(Debug, Clone, Default)]
pub struct ExecuteOptions {
    pub quiet: bool,
    /// Seconds spent creating the device context, for the report.
    pub context_s: f64,
    /// When the process started, for the report.
    pub process_start: Option<Instant>,
}

pub fn execute(problem: &Problem, device: &Device, opts: &ExecuteOptions) -> Result<Summary> {
    // Prove the output folder writable before a long solve, not after.
    let out = problem
        .output
        .dir
        .as_deref()
        .map(OutputDir::prepare)
        .transpose()?;
    let mut summary = match &problem.solver {
        SolverProblem::Jacobi(p) => match problem.precision {
            Precision::F32 => run_jacobi::<f32>(p, device, out.as_ref(), opts)?,
            Precision::F64 => run_jacobi::<f64>(p, device, out.as_ref(), opts)?,
        },
        SolverProblem::Heat(p) => match problem.precision {
            Precision::F32 => run_heat::<f32>(p, device, out.as_ref(), opts)?,
            Precision::F64 => run_heat::<f64>(p, device, out.as_ref(), opts)?,
        },
    };
    summary.title = problem.title.clone();
    summary.timings.context_s = opts.context_s;
    summary.timings.total_s = opts
        .process_start
        .map_or(0.0, |t| t.elapsed().as_secs_f64());
    if let Some(out) = &out {
        let path = out.file("summary.json");
        summary.outputs.push(path.clone());
        let json = serde_json::to_string_pretty(&summary).expect("summary serialises");
        output::write_atomic(&path, |w| writeln!(w, "{json}"))?;
    }
    Ok(summary)
}

/// Build an engine (timed as setup, including the device finishing its initialisation)
/// and drive it to `max_steps` (timed as solve).
fn setup_and_drive<E: Engine + ?Sized>(
    build: impl FnOnce() -> Result<Box<E>>,
    max_steps: u64,
    opts: &ExecuteOptions,
    t: &mut Timings,
) -> Result<(Box<E>, run::LoopOutcome)> {
    let clock = Instant::now();
    let mut engine = build()?;
    engine.diagnostics()?; // waits for the initialisation to finish
    t.setup_s = clock.elapsed().as_secs_f64();
    let bar = run::progress_bar(max_steps, opts.quiet);
    let outcome = run::drive(engine.as_mut(), max_steps, &bar)?;
    t.solve_s = outcome.seconds;
    Ok((engine, outcome))
}

/// Write a field as `<name>.npy`, plus `<name>.vti` and a picture `<name>.png` (the field,
/// or its middle z-plane) when it is 2D or 3D; the paths written.
fn write_field<T: Real>(out: &OutputDir, u: &run::Field<T>) -> Result<Vec<std::path::PathBuf>> {
    let npy = out.file(&format!("{}.npy", u.name));
    output::npy::write(&npy, &u.shape, &u.data)?;
    let mut files = vec![npy];
    if u.shape.len() >= 2 {
        let vti = out.file(&format!("{}.vti", u.name));
        output::vti::write(&vti, u)?;
        files.push(vti);
    }
    if output::png::applies(u) {
        let png = out.file(&format!("{}.png", u.name));
        output::png::write(&png, u)?;
        files.push(png);
    }
    Ok(files)
}

fn run_jacobi<T: Real>(
    p: &JacobiProblem,
    device: &Device,
    out: Option<&OutputDir>,
    opts: &ExecuteOptions,
) -> Result<Summary> {
    let mut t = Timings::default();
    let (mut engine, outcome) = setup_and_drive(
        || jacobi::engine::<T>(p, device, Fields::Manufactured),
        p.max_iterations,
        opts,
        &mut t,
    )?;

    let lap = Instant::now();
    let solution_error = engine.solution_error()?;
    t.check_s = lap.elapsed().as_secs_f64();

    let mut outputs = Vec::new();
    if let Some(out) = out {
        let lap = Instant::now();
        let u = engine.snapshot()?;
        t.download_s = lap.elapsed().as_secs_f64();
        let lap = Instant::now();
        outputs = write_field(out, &u)?;
        let csv = out.file("residuals.csv");
        output::csv::write_residuals(&csv, &outcome.residuals)?;
        outputs.push(csv);
        t.write_s = lap.elapsed().as_secs_f64();
    }
    t.study_s = t.setup_s + t.solve_s + t.check_s + t.download_s;

    Ok(Summary {
        solver: "jacobi",
        title: String::new(),
        device: device.describe(),
        precision: T::PRECISION.to_string(),
        shape: vec![p.m, p.n],
        iterations: outcome.steps,
        max_iterations: p.max_iterations,
        status: outcome.status,
        final_residual: outcome.residuals.last().copied(),
        solution_error: Some(solution_error),
        time_per_iteration_s: outcome.seconds / outcome.steps.max(1) as f64,
        timings: t,
        outputs,
        layout: None,
    })
}

fn run_heat<T: Real>(
    p: &HeatProblem,
    device: &Device,
    out: Option<&OutputDir>,
    opts: &ExecuteOptions,
) -> Result<Summary> {
    let mut t = Timings::default();
    let mut layout = None;
    let (mut engine, outcome) = setup_and_drive(
        || {
            let (engine, l) = heat::engine::<T>(p, device)?;
            if !opts.quiet && l.strategy != heat::Strategy::InCore {
                eprintln!("keisan: {}", l.human());
            }
            layout = Some(l);
            Ok(engine)
        },
        p.steps,
        opts,
        &mut t,
    )?;

    // The host copy serves both the analytic check and the outputs.
    let exact_known = p.exact(0, 0.0).is_some();
    let mut outputs = Vec::new();
    let mut solution_error = None;
    if exact_known || out.is_some() {
        let lap = Instant::now();
        let u = engine.take_snapshot()?;
        t.download_s = lap.elapsed().as_secs_f64();
        if exact_known {
            let lap = Instant::now();
            let time = outcome.steps as f64 * p.dt;
            let err = {
                use rayon::prelude::*;
                u.data
                    .par_iter()
                    .enumerate()
                    .map(|(i, v)| (v.as_f64() - p.exact(i, time).expect("sine preset")).abs())
                    .reduce(|| 0.0f64, f64::max)
            };
            solution_error = Some(err);
            t.check_s = lap.elapsed().as_secs_f64();
        }
        if let Some(out) = out {
            let lap = Instant::now();
            outputs = write_field(out, &u)?;
            t.write_s = lap.elapsed().as_secs_f64();
        }
    }
    t.study_s = t.setup_s + t.solve_s + t.check_s + t.download_s;

    Ok(Summary {
        solver: "heat",
        title: String::new(),
        device: device.describe(),
        precision: T::PRECISION.to_string(),
        shape: p.user_shape(),
        iterations: outcome.steps,
        max_iterations: p.steps,
        status: outcome.status,
        final_residual: None,
        solution_error,
        time_per_iteration_s: outcome.seconds / outcome.steps.max(1) as f64,
        timings: t,
        outputs,
        layout: layout.map(|l| serde_json::to_value(l).expect("layout serialises")),
    })
}
