//! What a solver offers the rest of keisan. The top level (problem parsing, execution,
//! `keisan bench` and `keisan model`, the kernel compile check) reaches solvers only
//! through [`Solver`] and the list in [`crate::solvers::REGISTRY`].

use std::any::Any;

use crate::device::cuda::KernelSource;
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::execute::Execution;
use crate::problem::{Problem, Source};
use crate::summary::Summary;

/// One solver: its problem table, its engines (behind [`SolverProblem::execute`]), its
/// kernels, its benchmark and, where it has one, its performance model.
pub trait Solver: Sync {
    /// The `solver = "…"` value and the name of its table.
    fn name(&self) -> &'static str;
    /// The keys its table needs, for "needs a `[name]` table (…)".
    fn table_hint(&self) -> &'static str;
    /// Its CUDA sources (the compile check in CI builds every one).
    fn kernels(&self) -> Vec<KernelSource>;
    /// Validate its table into a problem; errors name the field (and the line, from a file).
    fn problem(&self, table: toml::Value, src: &Source) -> Result<Box<dyn SolverProblem>>;
    /// The arguments of `keisan bench <name>` (beside --backend, --device and --json).
    fn bench_args(&self, cmd: clap::Command) -> clap::Command;
    fn bench(&self, device: &Device, args: &clap::ArgMatches) -> Result<Report>;
    /// `keisan bench <name>` with `--devices`/`--subdomains`: solvers that decompose
    /// time their slabs; the others run on one device.
    fn bench_placed(&self, placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
        if !placement.is_single() {
            return Err(Error::invalid(
                "--subdomains",
                placement.parts.len(),
                format!("keisan bench {} runs on one device", self.name()),
            ));
        }
        self.bench(placement.first(), args)
    }
    /// The arguments of `keisan model <name> PROBLEM`, if the solver has a model.
    fn model_args(&self, _cmd: clap::Command) -> Option<clap::Command> {
        None
    }
    /// The model on `placement` (its first device; solvers that share work over
    /// devices measure on all of them).
    fn model(
        &self,
        _problem: &Problem,
        _placement: &Placement,
        _args: &clap::ArgMatches,
    ) -> Result<Report> {
        Err(Error::Parse(format!(
            "{} has no performance model yet",
            self.name()
        )))
    }
}

/// What every validated problem offers by being `Serialize`: the whole problem as JSON
/// and a way back to its own type. Implemented for all such types at once.
pub trait Described {
    /// The validated problem, for checkpoints: a restart compares it key by key.
    fn describe(&self) -> serde_json::Value;
    fn as_any(&self) -> &dyn Any;
}

impl<P: serde::Serialize + Any> Described for P {
    fn describe(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a validated problem serialises")
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A validated problem of one solver, ready to run on any device.
pub trait SolverProblem: Described + std::fmt::Debug + Send + Sync {
    /// The most steps (iterations) the run takes.
    fn max_steps(&self) -> u64;
    /// Model time per step, for time-dependent solvers (`output.times`, the CSV's time).
    fn dt(&self) -> Option<f64> {
        None
    }
    /// `--device-memory`: the device memory an out-of-core solver may use.
    fn set_device_memory(&mut self, _bytes: u64) -> Result<()> {
        Err(Error::invalid(
            "--device-memory",
            "given",
            "this solver keeps its fields in device memory; the option is for out-of-core \
             solvers (heat)",
        ))
    }
    /// The values the run reads and writes at the least (each field read and written
    /// once per step, to its step limit): with the host's copy bandwidth, the floor of its
    /// time, which the runner says before a long CPU run a GPU was meant for.
    fn least_values_moved(&self) -> Option<f64> {
        None
    }
    /// Whether its engines run on slabs over several devices ([`crate::parallel`]).
    fn decomposes(&self) -> bool {
        false
    }
    /// Whether its field may be written one piece per rank under mpirun (`[output]
    /// pieces`): a grid of slabs does; N-body's particles, a table every rank holds whole,
    /// do not.
    fn writes_pieces(&self) -> bool {
        self.decomposes()
    }
    /// Keys of [`Described::describe`] a restart may change: step limits and
    /// placement, which leave every step's arithmetic as it was.
    fn restart_may_change(&self) -> &'static [&'static str];
    /// Build the engine on the execution's device and drive it (see [`crate::execute`]).
    fn execute(&self, cx: &Execution) -> Result<Summary>;
}

/// What `keisan bench` and `keisan model` print: a table for people, JSON for programs.
pub struct Report {
    pub human: String,
    pub json: serde_json::Value,
}
