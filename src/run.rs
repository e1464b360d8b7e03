//! The run loop every solver shares: advance in chunks, read a few scalars between
//! chunks, stop on convergence, the step limit or a non-finite value, and report progress.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{Error, Result};
use crate::precision::Real;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Still iterating; as a final status: the iteration limit was reached.
    #[serde(rename = "iteration_limit")]
    Running,
    Converged,
    NonFinite,
    /// A time-dependent run took all its steps (in summaries only: the run loop and the
    /// engines know it as [`Status::Running`] at the step limit).
    Completed,
    /// An iterative run whose stopping test passed while its true residual did not meet
    /// the tolerance (in summaries only): the update stalled, it did not converge.
    Stalled,
}

impl Status {
    /// The stop flag the CUDA kernels keep on the device: 0 running, 1 converged,
    /// 2 non-finite.
    pub fn device_flag(self) -> u64 {
        match self {
            Status::Running | Status::Completed | Status::Stalled => 0,
            Status::Converged => 1,
            Status::NonFinite => 2,
        }
    }

    pub fn from_device_flag(flag: u64) -> Self {
        match flag {
            0 => Status::Running,
            1 => Status::Converged,
            _ => Status::NonFinite,
        }
    }
}

/// A residual history's entry for an iteration whose residual was not computed: an
/// engine that tests convergence every k iterations may skip the sums in between (the
/// electrostatics table form). Negative, so never a residual; outputs leave it out.
pub const NOT_MEASURED: f64 = -1.0;

/// Whether a history entry is a residual (not [`NOT_MEASURED`]; a non-finite residual is
/// one).
pub fn is_measured(r: f64) -> bool {
    r >= 0.0 || r.is_nan()
}

/// The last residual a history holds, skipping iterations not measured.
pub fn last_measured(history: &[f64]) -> Option<f64> {
    history.iter().rev().copied().find(|&r| is_measured(r))
}

/// What an engine reports between chunks: cheap to get (a few scalars over the bus).
#[derive(Debug, Clone)]
pub struct Diagnostics {
    /// Steps (iterations) completed so far.
    pub steps: u64,
    /// Residual norm of each step completed since the previous call, in order.
    pub new_residuals: Vec<f64>,
    pub status: Status,
}

impl Diagnostics {
    /// A device engine's report: `steps` done, its stop flag (0 running, 1 converged, 2
    /// non-finite), the residuals since `reported` from its history ring `hist` (slot k
    /// mod its length); `reported` moves on.
    pub fn from_device(
        gpu: &crate::device::cuda::Gpu,
        steps: u64,
        flag: u64,
        hist: &cudarc::driver::CudaSlice<f64>,
        reported: &mut u64,
    ) -> Result<Self> {
        let new_residuals = gpu.ring_range(hist, *reported, steps)?;
        *reported = (*reported).max(steps);
        Ok(Self {
            steps,
            new_residuals,
            status: Status::from_device_flag(flag),
        })
    }

    /// [`Diagnostics::from_device`] from the device's counters `ctl` (`ctl[0]` steps done,
    /// `ctl[1]` the stop flag), as the iterative engines' kernels keep them.
    pub fn from_ctl(
        gpu: &crate::device::cuda::Gpu,
        ctl: &cudarc::driver::CudaSlice<u64>,
        hist: &cudarc::driver::CudaSlice<f64>,
        reported: &mut u64,
    ) -> Result<Self> {
        let ctl = gpu.stream.clone_dtoh(ctl)?;
        Self::from_device(gpu, ctl[0], ctl[1], hist, reported)
    }

    /// For engines without a residual (time steppers): the step count and status.
    pub fn steps_only(steps: u64, status: Status) -> Self {
        Self {
            steps,
            new_residuals: Vec::new(),
            status,
        }
    }
}

/// The bookkeeping of an iterative engine on the host: iterations done, status, and the
/// residuals the run loop has not read yet.
#[derive(Debug, Clone)]
pub struct Iterations {
    pub steps: u64,
    pub status: Status,
    pending: Vec<f64>,
}

impl Iterations {
    pub fn new(steps: u64, status: Status) -> Self {
        Self {
            steps,
            status,
            pending: Vec::new(),
        }
    }

    pub fn running(&self) -> bool {
        self.status == Status::Running
    }

    /// One iteration done with `residual`: converged at or below `tolerance`, stopped on
    /// a non-finite value.
    pub fn record(&mut self, residual: f64, tolerance: f64) {
        self.record_where(residual, tolerance, true);
    }

    /// [`Iterations::record`], testing convergence only where `may_stop` (an engine whose
    /// runs stop at some iteration counts only); a non-finite residual stops it anywhere.
    pub fn record_where(&mut self, residual: f64, tolerance: f64, may_stop: bool) {
        self.steps += 1;
        self.pending.push(residual);
        if !residual.is_finite() {
            self.status = Status::NonFinite;
        } else if may_stop && residual <= tolerance {
            self.status = Status::Converged;
        }
    }

    /// One iteration done whose residual was not computed ([`NOT_MEASURED`]).
    pub fn skip(&mut self) {
        self.steps += 1;
        self.pending.push(NOT_MEASURED);
    }

    pub fn diagnostics(&mut self) -> Diagnostics {
        Diagnostics {
            steps: self.steps,
            new_residuals: std::mem::take(&mut self.pending),
            status: self.status,
        }
    }
}

/// A field copied to the host, row-major with the last axis fastest.
#[derive(Debug, Clone)]
pub struct Field<T> {
    pub name: &'static str,
    pub shape: Vec<usize>,
    /// Grid spacing per axis, in the order of `shape`; empty for a table that is not a
    /// grid (N-body particles: rows of x y z vx vy vz m), which is written as .npy only.
    pub spacing: Vec<f64>,
    /// Coordinates of element 0 per axis, in the order of `shape`.
    pub origin: Vec<f64>,
    /// Node coordinates per axis (order of `shape`) of a rectilinear, nonuniform grid;
    /// None for a uniform one (`origin` + `spacing`). Writers then give .vtr, not .vti.
    pub coords: Option<Vec<Vec<f64>>>,
    pub data: Vec<T>,
}

impl<T> Field<T> {
    /// A grid (pictures and VTK files apply), not a table.
    pub fn is_grid(&self) -> bool {
        !self.spacing.is_empty()
    }

    /// Values per row of the slowest axis.
    pub fn row_len(&self) -> usize {
        self.shape.iter().skip(1).product()
    }
}

/// This process's part of a field decomposed over processes: the rows `rows` of the
/// slowest axis, with what a piece file and a restart need to know about the others.
#[derive(Debug, Clone)]
pub struct Piece<T> {
    /// The whole field's name, shape, spacing, origin and coordinates; no data.
    pub whole: Field<T>,
    pub rank: usize,
    /// The rows each process owns, in rank order (this one's is `ranks[rank]`).
    pub ranks: Vec<std::ops::Range<usize>>,
    /// The owned rows' values.
    pub data: Vec<T>,
    /// The first row of the next process (a VTK piece shares its last points with the
    /// next piece, or ParaView shows a gap); empty on the last process.
    pub next_row: Vec<T>,
}

impl<T: Clone> Piece<T> {
    /// The whole field as one piece (one process).
    pub fn whole(mut field: Field<T>) -> Self {
        let n = field.shape.first().copied().unwrap_or(0);
        let data = std::mem::take(&mut field.data);
        Self {
            whole: field,
            rank: 0,
            ranks: std::iter::once(0..n).collect(),
            data,
            next_row: Vec::new(),
        }
    }

    pub fn rows(&self) -> std::ops::Range<usize> {
        self.ranks[self.rank].clone()
    }

    /// The owned rows as a field of their own (shape and coordinates cut; the origin
    /// stays the whole grid's, as VTK pieces place themselves by their extent), with the
    /// next process's first row when `shared` (the points VTK pieces share).
    pub fn field(&self, shared: bool) -> Field<T> {
        let rows = self.rows();
        let mut data = self.data.clone();
        let mut end = rows.end;
        if shared && !self.next_row.is_empty() {
            data.extend_from_slice(&self.next_row);
            end += 1;
        }
        let w = &self.whole;
        let mut shape = w.shape.clone();
        shape[0] = end - rows.start;
        let coords = w.coords.as_ref().map(|c| {
            let mut c = c.clone();
            c[0] = c[0][rows.start..end].to_vec();
            c
        });
        Field {
            name: w.name,
            shape,
            spacing: w.spacing.clone(),
            origin: w.origin.clone(),
            coords,
            data,
        }
    }
}

/// The surface a solver engine (CPU or CUDA) offers the run loop.
pub trait Engine {
    type Real: Real;
    /// Queue `steps` more steps; device-resident, no host copies. Steps after the
    /// engine has stopped (converged or non-finite) do nothing.
    fn advance(&mut self, steps: u64) -> Result<()>;
    fn diagnostics(&mut self) -> Result<Diagnostics>;
    fn snapshot(&mut self) -> Result<Field<Self::Real>>;
    /// How the engine runs where it chose among several ways (the CUDA kernel and its
    /// launch), for the run's summary; None where there is nothing to tell.
    fn describe(&self) -> Option<String> {
        None
    }
    /// Diagnostics must be read at least this often (device-side history buffers).
    fn max_steps_between_diagnostics(&self) -> u64 {
        u64::MAX
    }
    /// Steps the engine prefers to advance at a time (a pyramid pass); chunks are
    /// multiples of it.
    fn step_granularity(&self) -> u64 {
        1
    }
    /// The final field, for engines that may hand over their storage instead of copying
    /// it (an out-of-core grid can be most of the host's memory). The engine must not be
    /// advanced afterwards.
    fn take_snapshot(&mut self) -> Result<Field<Self::Real>> {
        self.snapshot()
    }
    /// What a checkpoint holds so that a restart continues bit for bit: the fields the
    /// engine's factory takes back in a [`Restart`] (default: the snapshot's field).
    fn state(&mut self) -> Result<Vec<Field<Self::Real>>> {
        Ok(vec![self.snapshot()?])
    }
    /// Engines decomposed over processes (mpirun): this process's owned rows of the
    /// field, without gathering the others' (collective: every rank calls it). None: the
    /// engine holds the whole field ([`Engine::snapshot`] is the one piece).
    fn piece(&mut self) -> Result<Option<Piece<Self::Real>>> {
        Ok(None)
    }
    /// Decomposed engines: seconds one halo exchange takes alone (no compute beside it),
    /// the mean of `reps`; None for engines without halos.
    fn halo_exchange_seconds(&mut self, _reps: usize) -> Result<Option<f64>> {
        Ok(None)
    }
    /// Steps one halo exchange serves (several where a pass takes several steps).
    fn steps_per_halo_exchange(&self) -> u64 {
        1
    }
    /// Decomposed engines, for `keisan bench` only: switch the halo exchange off (the
    /// halos keep what they hold, so the fields are wrong from then on) or on again, to
    /// time the subdomains' own work without it. Returns whether the engine has halos.
    fn set_halo_exchange(&mut self, _on: bool) -> bool {
        false
    }
}

/// Where an engine starts when it continues from a checkpoint: the step count, the
/// status and the fields of [`Engine::state`] at that step.
#[derive(Debug, Clone)]
pub struct Restart<T> {
    pub step: u64,
    pub status: Status,
    pub fields: Vec<Field<T>>,
}

impl<T> Restart<T> {
    /// The field named `name`, which the factory needs.
    pub fn take(&mut self, name: &str) -> Result<Vec<T>> {
        let i = self
            .fields
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| Error::Parse(format!("the checkpoint holds no field `{name}`")))?;
        Ok(self.fields.swap_remove(i).data)
    }
}

#[derive(Debug, Clone)]
pub struct LoopOutcome {
    pub steps: u64,
    pub residuals: Vec<f64>,
    pub status: Status,
    pub seconds: f64,
}

/// A progress bar on stderr, drawn only when stderr is a terminal and not `quiet`.
pub fn progress_bar(len: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} it ({per_sec}, eta {eta}) {msg}",
        )
        .expect("valid template"),
    );
    bar
}

/// The run loop's state, so a run can be advanced to one stop after another (outputs,
/// checkpoints) without losing its chunk size or its residual history.
pub struct Loop {
    chunk: u64,
    pub residuals: Vec<f64>,
    pub steps: u64,
    pub status: Status,
    start: Instant,
    /// Seconds spent outside the engine between stops (writing outputs), not solve time.
    pub paused_s: f64,
}

impl Loop {
    /// Start from the engine's current state; `residuals`: the history before it (restart).
    pub fn new<E: Engine + ?Sized>(engine: &mut E, mut residuals: Vec<f64>) -> Result<Self> {
        let diag = engine.diagnostics()?;
        residuals.extend(&diag.new_residuals);
        Ok(Self {
            chunk: engine.step_granularity().max(1),
            residuals,
            steps: diag.steps,
            status: diag.status,
            start: Instant::now(),
            paused_s: 0.0,
        })
    }

    pub fn running(&self) -> bool {
        self.status == Status::Running
    }

    /// Advance to step `target` (or convergence, or a non-finite value, or a pending
    /// signal: [`crate::signals::agreed`], so under mpirun every rank stops alike). Chunks grow while a chunk takes under ~0.1 s (under mpirun: always), so a
    /// fast device syncs rarely and a slow one still updates the bar; a stop ends a chunk
    /// early, so outputs ride on chunk boundaries and never force a sync per step.
    pub fn run_to<E: Engine + ?Sized>(
        &mut self,
        engine: &mut E,
        target: u64,
        bar: &ProgressBar,
    ) -> Result<()> {
        while self.running() && self.steps < target && crate::signals::agreed()?.is_none() {
            let this = self
                .chunk
                .min(target - self.steps)
                .min(engine.max_steps_between_diagnostics());
            let t = Instant::now();
            engine.advance(this)?;
            let diag = engine.diagnostics()?;
            self.residuals.extend(&diag.new_residuals);
            self.steps = diag.steps;
            self.status = diag.status;
            // Under mpirun every rank must take the same chunks (a decomposed engine's
            // diagnostics are collective), so there the chunk grows without a clock.
            let in_world = crate::parallel::World::current().is_some();
            if in_world || t.elapsed() < Duration::from_millis(100) {
                self.chunk = self.chunk.saturating_mul(2);
            }
            bar.set_position(self.steps);
            if let Some(r) = last_measured(&self.residuals) {
                bar.set_message(format!("residual {r:.3e}"));
            }
        }
        Ok(())
    }

    /// The outcome; a non-finite value is an error that names the step.
    pub fn finish(self, bar: &ProgressBar) -> Result<LoopOutcome> {
        bar.finish_and_clear();
        if self.status == Status::NonFinite {
            return Err(Error::Diverged(format!(
                "a non-finite value (NaN or inf) appeared at step {}; stopped, no final \
                 outputs written",
                self.steps
            )));
        }
        Ok(LoopOutcome {
            steps: self.steps,
            residuals: self.residuals,
            status: self.status,
            seconds: self.start.elapsed().as_secs_f64() - self.paused_s,
        })
    }
}

/// Run until `max_steps`, convergence, or a non-finite residual (an error that names
/// the step), with no stops between.
pub fn drive<E: Engine + ?Sized>(
    engine: &mut E,
    max_steps: u64,
    bar: &ProgressBar,
) -> Result<LoopOutcome> {
    let mut l = Loop::new(engine, Vec::new())?;
    l.run_to(engine, max_steps, bar)?;
    l.finish(bar)
}
