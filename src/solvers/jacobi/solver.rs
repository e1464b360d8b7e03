//! The Jacobi solver's entry in the registry: its table, its run, its bench.

use super::{JacobiConfig, JacobiProblem, Placed, bench, cpu};
use crate::device::Device;
use crate::device::cuda::KernelSource;
use crate::error::Result;
use crate::execute::{Case, Execution, run_case};
use crate::precision::{Precision, Real};
use crate::problem::Source;
use crate::run::{Engine, Field, LoopOutcome};
use crate::solver::{Report, Solver, SolverProblem};
use crate::summary::Summary;

pub struct Jacobi;
pub static JACOBI: Jacobi = Jacobi;

impl Solver for Jacobi {
    fn name(&self) -> &'static str {
        "jacobi"
    }
    fn table_hint(&self) -> &'static str {
        "n, m, alpha, relax, tolerance, max_iterations"
    }
    fn kernels(&self) -> Vec<KernelSource> {
        vec![super::cuda::KERNELS]
    }
    fn problem(&self, table: toml::Value, src: &Source) -> Result<Box<dyn SolverProblem>> {
        let cfg: JacobiConfig = src.deserialize("jacobi", table)?;
        Ok(Box::new(cfg.validate(src.precision)?))
    }
    fn bench_args(&self, cmd: clap::Command) -> clap::Command {
        <bench::JacobiBenchArgs as clap::Args>::augment_args(cmd).about(
            "Sweeps of the seed case (Helmholtz, 5120 × 5000) against the copy bandwidth \
             measured in the same run",
        )
    }
    fn bench(&self, device: &Device, args: &clap::ArgMatches) -> Result<Report> {
        bench::run(device, args)
    }
    fn bench_placed(
        &self,
        placement: &crate::device::Placement,
        args: &clap::ArgMatches,
    ) -> Result<Report> {
        match placement.is_single() {
            true => bench::run(placement.first(), args),
            false => bench::slabs(placement, args),
        }
    }
}

impl SolverProblem for JacobiProblem {
    fn max_steps(&self) -> u64 {
        self.max_iterations
    }
    fn least_values_moved(&self) -> Option<f64> {
        Some(2.0 * self.cells() as f64 * self.max_iterations as f64)
    }
    fn restart_may_change(&self) -> &'static [&'static str] {
        &["max_iterations", "tolerance"]
    }
    fn decomposes(&self) -> bool {
        true
    }
    fn execute(&self, cx: &Execution) -> Result<Summary> {
        match cx.problem.precision {
            Precision::F32 => run::<f32>(self, cx),
            Precision::F64 => run::<f64>(self, cx),
        }
    }
}

fn run<T: Real>(p: &JacobiProblem, cx: &Execution) -> Result<Summary> {
    run_case(cx, |restart| {
        Ok(JacobiCase {
            p,
            engine: super::engine_placed::<T>(p, cx.placement, restart)?,
        })
    })
}

struct JacobiCase<'a, T: Real> {
    p: &'a JacobiProblem,
    engine: Placed<T>,
}

impl<T: Real> Case for JacobiCase<'_, T> {
    type Real = T;
    fn engine(&mut self) -> &mut dyn Engine<Real = T> {
        match &mut self.engine {
            Placed::One(e) => e.as_mut(),
            Placed::Slabs(e) => e.as_mut(),
        }
    }
    fn shape(&self) -> Vec<usize> {
        vec![self.p.m, self.p.n]
    }
    fn scalars(
        &self,
        step: u64,
        u: &Field<T>,
        residuals: &[f64],
    ) -> Result<Vec<(&'static str, f64)>> {
        let residual = crate::execute::residual_at(step, residuals).unwrap_or(f64::NAN);
        Ok(vec![
            ("residual", residual),
            ("solution_error", cpu::solution_error(self.p, &u.data)),
        ])
    }
    fn finish(&mut self, _: &LoopOutcome, _: Option<&Field<T>>, s: &mut Summary) -> Result<()> {
        s.solution_error = Some(match &mut self.engine {
            Placed::One(e) => e.solution_error()?,
            Placed::Slabs(e) => cpu::solution_error(self.p, &e.snapshot()?.data),
        });
        s.solution_error_meaning = Some("sqrt(Σ(u − u_exact)²)/(n·m), the study's measure");
        Ok(())
    }
}
