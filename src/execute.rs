//! Carry out a validated problem: the solver builds its engine ([`Case`]), and one runner
//! shared by every solver drives it stop by stop — numbered outputs and a diagnostics row
//! on the output schedule, checkpoints on theirs, a checkpoint and a clean exit on
//! SIGINT/SIGTERM — then writes the final outputs as one set and fills in the summary.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::checkpoint::{self, Checkpoint, History};
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::output::stage::{self, Stage};
use crate::output::{self, OutputDir, OutputSet, pvtk};
use crate::parallel::world;
use crate::precision::Real;
use crate::problem::{Pieces, Problem};
use crate::run::{self, Engine, Field, LoopOutcome, Piece, Restart};
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
    /// The tests' fault injection: publishing fails like a full disk at the output file
    /// of this name.
    pub inject_write_failure: Option<String>,
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
            crate::say!("keisan: {msg}");
        }
    }

    /// Whether a field of `shape` will be gathered whole (else written in pieces, with no
    /// measures of the whole field). Collective under mpirun: every rank asks.
    pub fn gathers<T: Real>(&self, shape: &[usize]) -> Result<bool> {
        Ok(choose_layout::<T>(self.problem, shape)?.gather)
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
    crate::problem::check_paths(problem)?;
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
/// for an iterative solver's diagnostics row; None where it was not measured.
pub fn residual_at(step: u64, residuals: &[f64]) -> Option<f64> {
    step.checked_sub(1)
        .and_then(|k| residuals.get(k as usize))
        .copied()
        .filter(|&r| run::is_measured(r))
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

/// How a run's fields reach files: gathered into whole files, or one piece per rank;
/// and whether the whole field may be gathered at all (for the measures taken on it).
#[derive(Debug, Clone, Copy)]
struct Layout {
    pieces: bool,
    gather: bool,
}

/// The most bytes of a field gathered onto every rank: half a node's memory shared among
/// its ranks (every rank receives the whole field); `KEISAN_GATHER_LIMIT_BYTES` sets it
/// (the tests use it to stand for a field too large to gather).
fn gather_limit() -> u128 {
    if let Some(b) = std::env::var("KEISAN_GATHER_LIMIT_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return b;
    }
    if crate::parallel::World::current().is_none() {
        return u128::MAX;
    }
    let node = crate::memory::host_total_bytes().map_or(u128::MAX, |t| t / 2);
    node / world::local_size() as u128
}

/// The layout of a run whose field has `shape` (every rank decides alike).
fn choose_layout<T: Real>(p: &Problem, shape: &[usize]) -> Result<Layout> {
    let bytes = shape.iter().map(|&n| n as u128).product::<u128>() * T::PRECISION.bytes() as u128;
    let fits = world::all(bytes <= gather_limit())?;
    if p.output.pieces == Pieces::PerRank && !p.spec.writes_pieces() {
        return Err(Error::invalid(
            "output.pieces",
            "\"per-rank\"",
            format!(
                "{} writes its results whole (\"auto\" or \"gather\")",
                p.solver.name()
            ),
        ));
    }
    let can_split = p.spec.writes_pieces() && shape.len() >= 2;
    let pieces = can_split
        && match p.output.pieces {
            Pieces::Auto => !fits,
            Pieces::Gather => false,
            Pieces::PerRank => true,
        };
    Ok(Layout {
        pieces,
        gather: fits || !pieces,
    })
}

/// This process's piece of the engine's field (collective): the engine's own under
/// mpirun, else the whole field as one piece (`whole`, when the caller has already
/// copied it to the host, else a snapshot).
fn piece_of<T: Real>(
    engine: &mut dyn Engine<Real = T>,
    whole: Option<&Field<T>>,
) -> Result<Piece<T>> {
    Ok(match engine.piece()? {
        Some(p) => p,
        None => Piece::whole(match whole {
            Some(u) => u.clone(),
            None => engine.snapshot()?,
        }),
    })
}

/// Outputs of a run in progress: the folders, what the series holds so far.
struct Writer<'a> {
    problem: &'a Problem,
    /// The run has an output folder: every rank takes the snapshots (collective under
    /// mpirun), and the one that writes files has `dir`.
    has_dir: bool,
    /// The output folder, on the rank that writes files: its checkpoints go there, and
    /// the stage's files once the run has completed.
    dir: Option<OutputDir>,
    /// Where the run's output files are written until published (every rank).
    stage: Option<Stage>,
    layout: Layout,
    /// Where this process writes its checkpoint pieces (every rank, with `layout.pieces`).
    local: Option<OutputDir>,
    history: History,
    /// Digits of the step in numbered file names.
    width: usize,
}

impl Writer<'_> {
    /// The stage folder, on the rank that writes files.
    fn staged(&self) -> Option<&OutputDir> {
        self.stage
            .as_ref()
            .filter(|_| self.dir.is_some())
            .map(Stage::dir)
    }

    /// Note the files the series write of `step` added to the stage (all but the indexes,
    /// which every write renews), for a restart to bring along.
    fn note_series_files(&mut self, step: u64, indexes: &[String]) -> Result<()> {
        let Some(stage) = self.stage.as_ref().filter(|_| self.dir.is_some()) else {
            return Ok(());
        };
        let known: std::collections::HashSet<String> = (self.history.series_files.iter())
            .map(|(_, n)| n.clone())
            .collect();
        for name in stage.files()? {
            if !known.contains(&name) && !indexes.contains(&name) {
                self.history.series_files.push((step, name));
            }
        }
        Ok(())
    }

    fn time(&self, step: u64) -> f64 {
        self.problem
            .spec
            .dt()
            .map_or(step as f64, |dt| step as f64 * dt)
    }

    /// This process's piece of the engine's field as the set `stem(name)` in its folder
    /// (collective: every rank's piece is in place when it returns); `whole`: the field,
    /// where the caller has copied it to the host already.
    fn pieces<T: Real>(
        &self,
        engine: &mut dyn Engine<Real = T>,
        whole: Option<&Field<T>>,
        stem: impl Fn(&str) -> String,
    ) -> Result<Piece<T>> {
        let p = piece_of(engine, whole)?;
        // A piece of the whole field (an engine not decomposed over ranks) is rank 0's.
        if let Some(stage) = self
            .stage
            .as_ref()
            .filter(|_| p.ranks.len() > 1 || self.dir.is_some())
        {
            let mut set = OutputSet::begin(stage.dir())?;
            set.piece(&stem(p.whole.name), &p)?;
            set.commit()?;
        }
        world::barrier()?;
        Ok(p)
    }

    /// The numbered field of `step` (whole, or pieces and their index), the series
    /// collection and the diagnostics table, as one set.
    fn series<C: Case>(&mut self, case: &mut C, step: u64, residuals: &[f64]) -> Result<()> {
        if !self.has_dir {
            return Ok(());
        }
        let width = self.width;
        let numbered = |name: &str| format!("{name}_{step:0width$}");
        let u = match self.layout.gather {
            true => Some(case.engine().snapshot()?),
            false => None,
        };
        let piece = match self.layout.pieces {
            true => Some(self.pieces(case.engine(), u.as_ref(), numbered)?),
            false => None,
        };
        let Some(dir) = self.staged().cloned() else {
            return Ok(());
        };
        let scalars = match &u {
            Some(u) => case.scalars(step, u, residuals)?,
            None => residual_at(step, residuals)
                .map(|r| vec![("residual", r)])
                .unwrap_or_default(),
        };
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
        let mut set = OutputSet::begin(&dir)?;
        let (name, vtk) = match (&piece, &u) {
            (Some(p), _) => {
                let stem = numbered(p.whole.name);
                let index = format!("{stem}.{}", pvtk::extension(&p.whole));
                pvtk::write(&set.file(&index), &stem, p)?;
                (p.whole.name, Some(index))
            }
            (None, Some(u)) => {
                let stem = numbered(u.name);
                set.field(&stem, u)?;
                let vtk = (u.shape.len() >= 2 && u.is_grid())
                    .then(|| format!("{stem}.{}", output::vtk_extension(u)));
                (u.name, vtk)
            }
            (None, None) => unreachable!("a field is gathered unless it is written in pieces"),
        };
        if let Some(u) = &u {
            if piece.is_some() {
                set.picture(&numbered(name), u)?;
            }
            case.series_extras(step, &numbered(name), u, &mut set)?;
        }
        if let Some(vtk) = vtk {
            self.history.series.retain(|(_, f)| f != &vtk);
            self.history.series.push((self.time(step), vtk));
            output::pvd::write(&set.file(&format!("{name}.pvd")), &self.history.series)?;
        }
        output::csv::write_table(
            &set.file(DIAGNOSTICS),
            &self.history.diagnostics_header,
            &self.history.diagnostics,
        )?;
        set.commit()?;
        self.note_series_files(step, &[format!("{name}.pvd"), DIAGNOSTICS.to_string()])
    }

    /// The series' indexes (`<name>.pvd`, diagnostics.csv) from the history, into `set`:
    /// the final set renews them, so that a restart's list only names files it has.
    fn indexes(&self, name: &str, set: &mut OutputSet) -> Result<()> {
        if !self.history.series.is_empty() {
            output::pvd::write(&set.file(&format!("{name}.pvd")), &self.history.series)?;
        }
        if !self.history.diagnostics.is_empty() {
            output::csv::write_table(
                &set.file(DIAGNOSTICS),
                &self.history.diagnostics_header,
                &self.history.diagnostics,
            )?;
        }
        Ok(())
    }

    /// Before checkpointing: the history names the stage, which is kept from then on
    /// should the run not complete.
    fn stage_for_checkpoint(&mut self) {
        if let Some(stage) = self.stage.as_mut().filter(|_| self.dir.is_some()) {
            self.history.stage = Some(stage.name());
            stage.keep();
        }
    }

    /// A restart's run: the series files of the checkpoint's run up to `step`, from its
    /// stage or its output folder, into this run's stage; the series and the pictures
    /// it could not find are dropped from the history (a notice says how many).
    fn adopt_series(&mut self, c: &Checkpoint, step: u64, cx: &Execution) -> Result<()> {
        let Some(stage) = self.stage.as_ref().filter(|_| self.dir.is_some()) else {
            return Ok(());
        };
        let mut from = Vec::new();
        if let Some(d) = &c.header.output_dir {
            if let Some(s) = &c.header.history.stage {
                from.push(d.join(s));
            }
            from.push(d.clone());
        }
        let h = &mut self.history;
        h.series_files.retain(|(k, _)| *k <= step);
        let names: Vec<String> = h.series_files.iter().map(|(_, n)| n.clone()).collect();
        let found = stage.adopt(&names, &from)?;
        h.series_files.retain(|(_, n)| found.contains(n));
        h.series.retain(|(_, f)| found.contains(f));
        let missing = names.len() - found.len();
        if missing > 0 {
            cx.notice(&format!(
                "{missing} of the {} files of the checkpoint's series up to step {step} are \
                 gone from {}; the series continues without them",
                names.len(),
                from.last()
                    .map_or("its folder".into(), |d| d.display().to_string()),
            ));
        }
        Ok(())
    }

    fn checkpoint<T: Real>(
        &mut self,
        engine: &mut dyn Engine<Real = T>,
        step: u64,
        status: run::Status,
        residuals: &[f64],
    ) -> Result<PathBuf> {
        if self.layout.pieces {
            return self.checkpoint_pieces(engine, step, status, residuals);
        }
        let fields = engine.state()?;
        self.stage_for_checkpoint();
        let Some(dir) = self.dir.as_ref() else {
            let folder = self.problem.output.dir.as_deref().unwrap_or(Path::new("."));
            return Ok(folder.join(checkpoint::FILE));
        };
        let path = dir.file(checkpoint::FILE);
        self.history.residuals = residuals.to_vec();
        checkpoint::write(&path, self.problem, step, status, &fields, &self.history)?;
        Ok(path)
    }

    /// A checkpoint in pieces: every rank writes its piece, then rank 0 the main file that
    /// names them, then each rank removes its pieces of older checkpoints — so the main
    /// file always names pieces that exist.
    fn checkpoint_pieces<T: Real>(
        &mut self,
        engine: &mut dyn Engine<Real = T>,
        step: u64,
        status: run::Status,
        residuals: &[f64],
    ) -> Result<PathBuf> {
        let p = piece_of(engine, None)?;
        self.stage_for_checkpoint();
        let local = self
            .local
            .as_ref()
            .expect("every rank has its folder for pieces");
        let writes = p.ranks.len() > 1 || self.dir.is_some();
        if writes {
            checkpoint::write_piece(local.path(), self.problem, step, status, &p)?;
        }
        world::barrier()?;
        let path = local.file(checkpoint::FILE);
        if self.dir.is_some() {
            self.history.residuals = residuals.to_vec();
            checkpoint::write_index(&path, self.problem, step, status, &p, &self.history)?;
        }
        world::barrier()?;
        if writes {
            checkpoint::remove_old_pieces(local.path(), step, p.rank)?;
        }
        Ok(path)
    }
}

/// The table of the diagnostics rows, beside the series.
const DIAGNOSTICS: &str = "diagnostics.csv";
/// The run's summary, the last file of its set.
const SUMMARY: &str = "summary.json";

/// An error for a pending SIGINT/SIGTERM at `step`, saying what was kept: the latest
/// checkpoint (its path and step), if any.
fn stop_if_signalled(
    sig: Option<i32>,
    step: u64,
    checkpoint: Option<&(PathBuf, u64)>,
) -> Result<()> {
    let Some(sig) = sig else {
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
    crate::signals::setup_done();
    let mut lp = run::Loop::new(case.engine(), std::mem::take(&mut history.residuals))?;
    t.setup_s = clock.elapsed().as_secs_f64();
    stop_if_signalled(crate::signals::agreed()?, lp.steps, None)?;

    let max = p.spec.max_steps();
    let time_dependent = p.spec.dt().is_some();
    let layout = choose_layout::<C::Real>(p, &case.shape())?;
    if layout.pieces && !layout.gather {
        cx.notice(
            "the field does not fit one process: written one piece per rank, with no \
             measures of the whole field",
        );
    }
    let mut w = Writer {
        problem: p,
        has_dir: p.output.dir.is_some(),
        dir: (p.output.dir.as_deref())
            .filter(|_| world::writes_files())
            .map(OutputDir::create)
            .transpose()?,
        stage: p.output.dir.as_deref().map(Stage::begin).transpose()?,
        layout,
        local: (p.output.dir.as_deref())
            .filter(|_| layout.pieces)
            .map(OutputDir::create)
            .transpose()?,
        width: history.width.unwrap_or(max.to_string().len().max(6)),
        history,
    };
    w.history.width = Some(w.width);
    if let (Some(c), Some(step)) = (&opts.restart, restarted_at) {
        w.adopt_series(c, step, cx)?;
    }
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
        // Collective: under mpirun every rank takes this branch at the same step.
        let signal = crate::signals::agreed()?;
        if signal.is_some() {
            let current = last_checkpoint.as_ref().is_some_and(|(_, k)| *k == step);
            if out.checkpoint_every.is_some() && !current {
                let path = w.checkpoint(case.engine(), step, lp.status, &lp.residuals)?;
                last_checkpoint = Some((path, step));
            }
            bar.finish_and_clear();
            stop_if_signalled(signal, step, last_checkpoint.as_ref())?;
        }
        lp.paused_s += lap.elapsed().as_secs_f64();
        if finished {
            break;
        }
    }
    // The schedule's outputs and checkpoints, written between the loop's chunks: not solve
    // time, and part of the run's writing.
    let written_during_s = lp.paused_s;
    let outcome = lp.finish(&bar)?;
    t.solve_s = outcome.seconds;

    let mut summary = Summary {
        solver: p.solver.name(),
        title: p.title.clone(),
        device: cx.placement.describe(),
        precision: C::Real::PRECISION.to_string(),
        shape: case.shape(),
        iterations: outcome.steps,
        max_iterations: max,
        status: match (time_dependent, outcome.status) {
            (true, run::Status::Running) => run::Status::Completed,
            (_, status) => status,
        },
        time_dependent,
        final_residual: run::last_measured(&outcome.residuals),
        solution_error: None,
        solution_error_meaning: None,
        time_per_iteration_s: outcome.seconds / outcome.steps.max(1) as f64,
        timings: Timings::default(),
        outputs: Vec::new(),
        layout: case.layout(),
        results: None,
        highlights: Vec::new(),
        warnings: Vec::new(),
        restarted_at_step: restarted_at,
        checkpoint: last_checkpoint.as_ref().map(|(p, _)| p.clone()),
        pieces: None,
    };
    // The host copy serves the checks, the outputs and, in one process, the one piece;
    // an out-of-core engine hands over its grid instead of copying it.
    let u = if w.layout.gather && (w.has_dir || case.needs_final_field()) {
        let lap = Instant::now();
        let u = case.engine().take_snapshot()?;
        t.download_s = lap.elapsed().as_secs_f64();
        Some(u)
    } else {
        None
    };
    let piece = match w.has_dir && w.layout.pieces {
        true => Some(w.pieces(case.engine(), u.as_ref(), |name| name.to_string())?),
        false => None,
    };
    let lap = Instant::now();
    case.finish(&outcome, u.as_ref(), &mut summary)?;
    t.check_s = lap.elapsed().as_secs_f64();
    t.study_s = t.setup_s + t.solve_s + t.check_s + t.download_s;
    t.context_s = opts.context_s;

    let stage = w.stage.take().filter(|_| w.dir.is_some());
    if let (Some(dir), Some(stage)) = (w.dir.clone(), stage) {
        let lap = Instant::now();
        let mut set = OutputSet::begin(stage.dir())?;
        let name = match (&piece, &u) {
            (Some(p), _) => p.whole.name,
            (None, Some(u)) => u.name,
            (None, None) => unreachable!("a field is gathered unless it is written in pieces"),
        };
        match (&piece, &u) {
            (Some(p), _) => {
                let index = format!("{}.{}", p.whole.name, pvtk::extension(&p.whole));
                pvtk::write(&set.file(&index), p.whole.name, p)?;
                summary.pieces = Some(serde_json::json!({
                    "index": index,
                    "ranks": p.ranks.len(),
                    "rows": p.ranks.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
                    "files": (0..p.ranks.len()).map(|r| pvtk::piece_stem(p.whole.name, r)).collect::<Vec<_>>(),
                    "whole_field_measures": u.is_some(),
                }));
            }
            (None, Some(u)) => set.field(u.name, u)?,
            (None, None) => unreachable!("a field is gathered unless it is written in pieces"),
        }
        if let Some(u) = &u {
            if piece.is_some() {
                set.picture(u.name, u)?;
            }
            case.extra_outputs(u, &mut set)?;
        }
        if !outcome.residuals.is_empty() {
            output::csv::write_residuals(&set.file("residuals.csv"), &outcome.residuals)?;
        }
        w.indexes(name, &mut set)?;
        set.commit()?;
        let mut names = stage.files()?;
        names.push(SUMMARY.to_string());
        summary.outputs = names.iter().map(|n| dir.file(n)).collect();
        t.write_s = written_during_s + lap.elapsed().as_secs_f64();
        t.total_s = opts
            .process_start
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        summary.timings = t;
        let text = serde_json::to_string_pretty(&summary)
            .map_err(|e| Error::Parse(format!("the summary cannot be written as JSON: {e}")))?;
        output::write_atomic(&stage.dir().file(SUMMARY), |f| writeln!(f, "{text}"))?;
        // Rank 0 alone: its own signal keeps the run's outputs from landing.
        stop_if_signalled(
            crate::signals::pending(),
            outcome.steps,
            last_checkpoint.as_ref(),
        )?;
        stage.publish(opts.inject_write_failure.as_deref())?;
        // Stages that interrupted runs left here and that the folder's checkpoint (this
        // run's, when it wrote one) does not name.
        let named = match last_checkpoint.is_some() {
            true => None,
            false => checkpoint::Checkpoint::open(&dir.file(checkpoint::FILE))
                .ok()
                .and_then(|c| c.header.history.stage),
        };
        stage::remove_abandoned(dir.path(), named.as_deref());
    } else {
        t.total_s = opts
            .process_start
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        summary.timings = t;
    }
    Ok(summary)
}
