//! Carry out a validated problem: the solver builds its engine ([`Case`]), and one runner
//! shared by every solver drives it stop by stop — numbered outputs and a diagnostics row
//! on the output schedule, checkpoints on theirs, a checkpoint and a clean exit on
//! SIGINT/SIGTERM — then writes the final outputs as one set and fills in the summary.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::checkpoint::{self, Checkpoint, History};
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::output::{self, OutputDir, OutputSet};
use crate::precision::Real;
use crate::problem::Problem;
use crate::run::{self, Engine, Field, LoopOutcome, Restart};
use crate::summary::{Summary, Timings};

#[derive(Debug, Clone, Default)]
pub struct ExecuteOptions {
    pub quiet: bool,
    /// Seconds spent creating the device context, for the report.
    pub context_s: f64,
    /// When the process started, for the report.
    pub process_start: Option<Instant>,
    /// Continue from this checkpoint.
    pub restart: Option<Checkpoint>,
}

/// One run as a solver sees it: the problem, the device, the options.
pub struct Execution<'a> {
    pub problem: &'a Problem,
    /// The first subdomain's device: the whole run's unless decomposed.
    pub device: &'a Device,
    /// Every subdomain's device (one for an undecomposed run).
    pub placement: &'a Placement,
    pub opts: &'a ExecuteOptions,
}

impl Execution<'_> {
    /// Print a notice on stderr unless quiet.
    pub fn notice(&self, msg: &str) {
        if !self.opts.quiet {
            eprintln!("keisan: {msg}");
        }
    }
}

pub fn execute(problem: &Problem, device: &Device, opts: &ExecuteOptions) -> Result<Summary> {
    execute_placed(problem, &Placement::single(device.clone()), opts)
}

/// [`execute`] on subdomains (`--devices`, `--subdomains`): the solver decomposes the
/// grid over `placement`, or refuses when it cannot yet.
pub fn execute_placed(
    problem: &Problem,
    placement: &Placement,
    opts: &ExecuteOptions,
) -> Result<Summary> {
    if !placement.is_single() && !problem.spec.decomposes() {
        return Err(Error::invalid(
            "--subdomains",
            placement.parts.len(),
            format!(
                "{} runs on one device or one CPU so far (decomposed runs: advection, heat, jacobi, electrostatics)",
                problem.solver.name()
            ),
        ));
    }
    // Prove the output folder can be written before a long solve, creating nothing yet.
    if let Some(dir) = &problem.output.dir {
        output::check_writable(dir)?;
    }
    if let Some(c) = &opts.restart {
        c.check_compatible(problem)?;
    }
    problem.spec.execute(&Execution {
        problem,
        device: placement.first(),
        placement,
        opts,
    })
}

/// The residual of sweep `step` from a run's residual history (entry k is sweep k + 1),
/// for an iterative solver's diagnostics row.
pub fn residual_at(step: u64, residuals: &[f64]) -> Option<f64> {
    step.checked_sub(1)
        .and_then(|k| residuals.get(k as usize))
        .copied()
}

/// What a solver hands the runner: its engine, and what it adds to the diagnostics and
/// the summary.
pub trait Case {
    type Real: Real;
    fn engine(&mut self) -> &mut dyn Engine<Real = Self::Real>;
    /// Points per axis, slowest first, for the summary.
    fn shape(&self) -> Vec<usize>;
    /// The solver's scalars for a diagnostics row at `step`, from the field on the host
    /// and the residual history.
    fn scalars(
        &self,
        step: u64,
        u: &Field<Self::Real>,
        residuals: &[f64],
    ) -> Result<Vec<(&'static str, f64)>>;
    /// After the loop: checks such as the solution error. `u`: the final field on the
    /// host, when it was copied there (outputs, or [`Case::needs_final_field`]).
    fn finish(
        &mut self,
        outcome: &LoopOutcome,
        u: Option<&Field<Self::Real>>,
        s: &mut Summary,
    ) -> Result<()>;
    fn needs_final_field(&self) -> bool {
        false
    }
    /// How the problem met the device, for the summary.
    fn layout(&self) -> Option<serde_json::Value> {
        None
    }
    /// Files of the solver's own beside each numbered field `stem` of the series at
    /// `step` (pictures and a ParaView series of particles), in the same set.
    fn series_extras(
        &mut self,
        _step: u64,
        _stem: &str,
        _u: &Field<Self::Real>,
        _set: &mut OutputSet,
    ) -> Result<()> {
        Ok(())
    }
    /// Files of the solver's own beside the final field (derived fields, tables), written
    /// into the final set; `u` is the final field on the host.
    fn extra_outputs(&mut self, _u: &Field<Self::Real>, _set: &mut OutputSet) -> Result<()> {
        Ok(())
    }
}

/// Outputs of a run in progress: the folder, what the series holds so far.
struct Writer<'a> {
    problem: &'a Problem,
    /// The run has an output folder: every rank takes the snapshots (collective under
    /// mpirun), and the one that writes files has `dir`.
    has_dir: bool,
    dir: Option<OutputDir>,
    history: History,
    /// Digits of the step in numbered file names.
    width: usize,
    written: Vec<PathBuf>,
}

impl Writer<'_> {
    fn time(&self, step: u64) -> f64 {
        self.problem
            .spec
            .dt()
            .map_or(step as f64, |dt| step as f64 * dt)
    }

    /// The numbered field of `step`, the series collection and the diagnostics table, as
    /// one set.
    fn series<C: Case>(&mut self, case: &mut C, step: u64, residuals: &[f64]) -> Result<()> {
        if !self.has_dir {
            return Ok(());
        }
        let u = case.engine().snapshot()?;
        let Some(dir) = &self.dir else { return Ok(()) };
        let scalars = case.scalars(step, &u, residuals)?;
        let mut header = vec!["step".to_string()];
        let mut row = vec![step as f64];
        if self.problem.spec.dt().is_some() {
            header.push("time".into());
            row.push(self.time(step));
        }
        for (name, v) in &scalars {
            header.push(name.to_string());
            row.push(*v);
        }
        self.history.diagnostics_header = header;
        self.history.diagnostics.retain(|r| r[0] < step as f64);
        self.history.diagnostics.push(row);
        let stem = format!("{}_{step:0w$}", u.name, w = self.width);
        let mut set = OutputSet::begin(dir)?;
        set.field(&stem, &u)?;
        case.series_extras(step, &stem, &u, &mut set)?;
        if u.shape.len() >= 2 && u.is_grid() {
            let vtk = format!("{stem}.{}", output::vtk_extension(&u));
            self.history.series.retain(|(_, f)| f != &vtk);
            self.history.series.push((self.time(step), vtk));
            output::pvd::write(&set.file(&format!("{}.pvd", u.name)), &self.history.series)?;
        }
        output::csv::write_table(
            &set.file("diagnostics.csv"),
            &self.history.diagnostics_header,
            &self.history.diagnostics,
        )?;
        self.written.extend(set.commit()?);
        Ok(())
    }

    fn checkpoint<T: Real>(
        &mut self,
        engine: &mut dyn Engine<Real = T>,
        step: u64,
        status: run::Status,
        residuals: &[f64],
    ) -> Result<PathBuf> {
        let fields = engine.state()?;
        let Some(dir) = self.dir.as_ref() else {
            let folder = self.problem.output.dir.as_deref().unwrap_or(Path::new("."));
            return Ok(folder.join(checkpoint::FILE));
        };
        let path = dir.file(checkpoint::FILE);
        self.history.residuals = residuals.to_vec();
        checkpoint::write(&path, self.problem, step, status, &fields, &self.history)?;
        Ok(path)
    }
}

/// An error for a pending SIGINT/SIGTERM at `step`, saying what was kept: the latest
/// checkpoint (its path and step), if any.
fn stop_if_signalled(step: u64, checkpoint: Option<&(PathBuf, u64)>) -> Result<()> {
    let Some(sig) = crate::signals::pending() else {
        return Ok(());
    };
    let kept = match checkpoint {
        Some((p, k)) => format!(
            "checkpoint of step {k} written to {0} (continue with keisan run --restart {0})",
            p.display()
        ),
        None => "no checkpoint (none configured)".to_string(),
    };
    Err(Error::Interrupted {
        signal: sig,
        message: format!(
            "interrupted by {} at step {step}; {kept}; no final outputs written",
            crate::signals::name(sig)
        ),
    })
}

/// Build the solver's case (from the checkpoint when restarting) and run it to the end:
/// the runner every solver shares.
pub fn run_case<C: Case>(
    cx: &Execution,
    build: impl FnOnce(Option<Restart<C::Real>>) -> Result<C>,
) -> Result<Summary> {
    let p = cx.problem;
    let opts = cx.opts;
    let mut t = Timings::default();
    let clock = Instant::now();
    let (restart, mut history) = match &opts.restart {
        Some(c) => {
            let (r, residuals) = c.restart::<C::Real>()?;
            let mut h = c.header.history.clone();
            h.residuals = residuals;
            (Some(r), h)
        }
        None => (None, History::default()),
    };
    let restarted_at = restart.as_ref().map(|r| r.step);
    let mut case = build(restart)?;
    let mut lp = run::Loop::new(case.engine(), std::mem::take(&mut history.residuals))?;
    t.setup_s = clock.elapsed().as_secs_f64();
    stop_if_signalled(lp.steps, None)?;

    let max = p.spec.max_steps();
    let mut w = Writer {
        problem: p,
        has_dir: p.output.dir.is_some(),
        dir: (p.output.dir.as_deref())
            .filter(|_| crate::parallel::world::writes_files())
            .map(OutputDir::create)
            .transpose()?,
        history,
        width: max.to_string().len().max(6),
        written: Vec::new(),
    };
    let out = &p.output;
    let bar = run::progress_bar(max, opts.quiet);
    if restarted_at.is_none() && out.steps.first() == Some(&0) {
        let lap = Instant::now();
        w.series(&mut case, 0, &lp.residuals)?;
        lp.paused_s += lap.elapsed().as_secs_f64();
    }
    let mut last_checkpoint = None;
    loop {
        let next_output = out.steps.iter().copied().find(|&s| s > lp.steps);
        let next_checkpoint = out.checkpoint_every.map(|k| (lp.steps / k + 1) * k);
        let target = [Some(max), next_output, next_checkpoint]
            .into_iter()
            .flatten()
            .min()
            .expect("max is always there");
        lp.run_to(case.engine(), target, &bar)?;
        let lap = Instant::now();
        let step = lp.steps;
        if lp.status == run::Status::NonFinite {
            break;
        }
        let finished = !lp.running() || step >= max;
        let scheduled = next_output == Some(step)
            || (finished && out.every.is_some() && !out.steps.contains(&step));
        if scheduled && !(restarted_at == Some(step) && step > 0) {
            w.series(&mut case, step, &lp.residuals)?;
        }
        if next_checkpoint == Some(step) && step > 0 {
            let path = w.checkpoint(case.engine(), step, lp.status, &lp.residuals)?;
            last_checkpoint = Some((path, step));
        }
        if crate::signals::pending().is_some() {
            let current = last_checkpoint.as_ref().is_some_and(|(_, k)| *k == step);
            if out.checkpoint_every.is_some() && !current {
                let path = w.checkpoint(case.engine(), step, lp.status, &lp.residuals)?;
                last_checkpoint = Some((path, step));
            }
            bar.finish_and_clear();
            stop_if_signalled(step, last_checkpoint.as_ref())?;
        }
        lp.paused_s += lap.elapsed().as_secs_f64();
        if finished {
            break;
        }
    }
    let outcome = lp.finish(&bar)?;
    t.solve_s = outcome.seconds;

    let mut summary = Summary {
        solver: p.solver.name(),
        title: p.title.clone(),
        device: cx.device.describe(),
        precision: C::Real::PRECISION.to_string(),
        shape: case.shape(),
        iterations: outcome.steps,
        max_iterations: max,
        status: outcome.status,
        final_residual: outcome.residuals.last().copied(),
        solution_error: None,
        time_per_iteration_s: outcome.seconds / outcome.steps.max(1) as f64,
        timings: Timings::default(),
        outputs: Vec::new(),
        layout: case.layout(),
        results: None,
        restarted_at_step: restarted_at,
        checkpoint: last_checkpoint.as_ref().map(|(p, _)| p.clone()),
    };
    // The host copy serves both the checks and the outputs; an out-of-core engine hands
    // over its grid instead of copying it.
    let u = if w.has_dir || case.needs_final_field() {
        let lap = Instant::now();
        let u = case.engine().take_snapshot()?;
        t.download_s = lap.elapsed().as_secs_f64();
        Some(u)
    } else {
        None
    };
    let lap = Instant::now();
    case.finish(&outcome, u.as_ref(), &mut summary)?;
    t.check_s = lap.elapsed().as_secs_f64();
    t.study_s = t.setup_s + t.solve_s + t.check_s + t.download_s;
    t.context_s = opts.context_s;

    if let (Some(dir), Some(u)) = (&w.dir, &u) {
        let lap = Instant::now();
        let mut set = OutputSet::begin(dir)?;
        set.field(u.name, u)?;
        case.extra_outputs(u, &mut set)?;
        if !outcome.residuals.is_empty() {
            output::csv::write_residuals(&set.file("residuals.csv"), &outcome.residuals)?;
        }
        let json = set.file("summary.json");
        let mut seen = std::collections::HashSet::new();
        summary.outputs = w
            .written
            .into_iter()
            .filter(|f| seen.insert(f.clone()))
            .collect();
        summary
            .outputs
            .extend(set.names().iter().map(|n| set.final_path(n)));
        t.write_s = lap.elapsed().as_secs_f64();
        t.total_s = opts
            .process_start
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        summary.timings = t;
        let text = serde_json::to_string_pretty(&summary).expect("summary serialises");
        output::write_atomic(&json, |f| writeln!(f, "{text}"))?;
        stop_if_signalled(outcome.steps, last_checkpoint.as_ref())?;
        set.commit()?;
    } else {
        t.total_s = opts
            .process_start
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        summary.timings = t;
    }
    Ok(summary)
}
