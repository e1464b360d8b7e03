//! The run loop every solver shares: advance in chunks, read a few scalars between
//! chunks, stop on convergence, the step limit or a non-finite value, and report progress.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{Error, Result};
use crate::precision::Real;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Still iterating; as a final status: the iteration limit was reached.
    #[serde(rename = "iteration_limit")]
    Running,
    Converged,
    NonFinite,
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
    /// For engines without a residual (time steppers): the step count and status.
    pub fn steps_only(steps: u64, status: Status) -> Self {
        Self {
            steps,
            new_residuals: Vec::new(),
            status,
        }
    }
}

/// A field copied to the host, row-major with the last axis fastest.
#[derive(Debug, Clone)]
pub struct Field<T> {
    pub name: &'static str,
    pub shape: Vec<usize>,
    /// Grid spacing per axis, in the order of `shape`.
    pub spacing: Vec<f64>,
    /// Coordinates of element 0 per axis, in the order of `shape`.
    pub origin: Vec<f64>,
    pub data: Vec<T>,
}

/// The surface a solver engine (CPU or CUDA) offers the run loop.
pub trait Engine {
    type Real: Real;
    /// Queue `steps` more steps; device-resident, no host copies. Steps after the
    /// engine has stopped (converged or non-finite) do nothing.
    fn advance(&mut self, steps: u64) -> Result<()>;
    fn diagnostics(&mut self) -> Result<Diagnostics>;
    fn snapshot(&mut self) -> Result<Field<Self::Real>>;
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

/// Run until `max_steps`, convergence, or a non-finite residual (an error that names
/// the step). Chunks grow while a chunk takes under ~0.1 s, so a fast device syncs
/// rarely and a slow one still updates the bar.
pub fn drive<E: Engine + ?Sized>(
    engine: &mut E,
    max_steps: u64,
    bar: &ProgressBar,
) -> Result<LoopOutcome> {
    let start = Instant::now();
    let mut chunk = engine.step_granularity().max(1);
    let mut residuals = Vec::new();
    let mut diag = engine.diagnostics()?;
    residuals.extend(&diag.new_residuals);
    while diag.status == Status::Running && diag.steps < max_steps {
        let this = chunk
            .min(max_steps - diag.steps)
            .min(engine.max_steps_between_diagnostics());
        let t = Instant::now();
        engine.advance(this)?;
        diag = engine.diagnostics()?;
        residuals.extend(&diag.new_residuals);
        if t.elapsed() < Duration::from_millis(100) {
            chunk = chunk.saturating_mul(2);
        }
        bar.set_position(diag.steps);
        if let Some(r) = residuals.last() {
            bar.set_message(format!("residual {r:.3e}"));
        }
    }
    bar.finish_and_clear();
    if diag.status == Status::NonFinite {
        return Err(Error::Diverged(format!(
            "a non-finite value (NaN or inf) appeared at step {}; stopped, no outputs written",
            diag.steps
        )));
    }
    Ok(LoopOutcome {
        steps: diag.steps,
        residuals,
        status: diag.status,
        seconds: start.elapsed().as_secs_f64(),
    })
}
