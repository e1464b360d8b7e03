//! The heat solver's entry in the registry: its table, its run, its bench and model.

use super::{HeatConfig, HeatProblem, Initial, Layout, Strategy, bench};
use crate::device::cuda::KernelSource;
use crate::device::{Device, Placement};
use crate::error::Result;
use crate::execute::{Case, Execution, run_case};
use crate::precision::{Precision, Real};
use crate::problem::{Problem, Source};
use crate::run::{Engine, Field, LoopOutcome};
use crate::solver::{Report, Solver, SolverProblem};
use crate::summary::Summary;

pub struct Heat;
pub static HEAT: Heat = Heat;

impl Solver for Heat {
    fn name(&self) -> &'static str {
        "heat"
    }
    fn table_hint(&self) -> &'static str {
        "shape, dt, steps, diffusivity, [heat.initial]"
    }
    fn kernels(&self) -> Vec<KernelSource> {
        vec![super::step_kernel::KERNELS]
    }
    fn problem(&self, table: toml::Value, src: &Source) -> Result<Box<dyn SolverProblem>> {
        let mut cfg: HeatConfig = src.deserialize("heat", table)?;
        if let Initial::File { path } = &mut cfg.initial {
            *path = src.path("heat.initial.path", path);
        }
        let p = cfg.validate(src.precision)?;
        // A wrong file fails here, before any work and before any output folder exists.
        super::initial::check(&p)?;
        Ok(Box::new(p))
    }
    fn bench_args(&self, cmd: clap::Command) -> clap::Command {
        <bench::HeatBenchArgs as clap::Args>::augment_args(cmd).about(
            "In-core passes against the copy-bandwidth floor, and out-of-core pyramid passes \
             under a device-memory budget",
        )
    }
    fn bench(&self, device: &Device, args: &clap::ArgMatches) -> Result<Report> {
        bench::run(device, args)
    }
    fn bench_placed(&self, placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
        match placement.is_single() {
            true => bench::run(placement.first(), args),
            false => bench::slabs(placement, args),
        }
    }
    fn model_args(&self, cmd: clap::Command) -> Option<clap::Command> {
        Some(
            <bench::HeatModelArgs as clap::Args>::augment_args(cmd).about(
                "The out-of-core cost model: predicted against measured time for each pyramid height",
            ),
        )
    }
    fn model(
        &self,
        problem: &Problem,
        placement: &Placement,
        args: &clap::ArgMatches,
    ) -> Result<Report> {
        let p = problem.spec_as::<HeatProblem>().expect("a heat problem");
        bench::model(p, problem.precision, placement.first(), args)
    }
}

impl SolverProblem for HeatProblem {
    fn max_steps(&self) -> u64 {
        self.steps
    }
    fn least_values_moved(&self) -> Option<f64> {
        Some(2.0 * self.cells() as f64 * self.steps as f64)
    }
    fn dt(&self) -> Option<f64> {
        Some(self.dt)
    }
    fn set_device_memory(&mut self, bytes: u64) -> Result<()> {
        self.ooc.device_memory = Some(bytes);
        self.ooc.device_memory_from = "--device-memory";
        Ok(())
    }
    fn restart_may_change(&self) -> &'static [&'static str] {
        &["steps", "ooc", "temporal_block"]
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

fn run<T: Real>(p: &HeatProblem, cx: &Execution) -> Result<Summary> {
    run_case(cx, |restart| {
        let (engine, layout) = super::engine_placed::<T>(p, cx.placement, restart)?;
        if layout.strategy != Strategy::InCore {
            cx.notice(&layout.human());
        }
        Ok(HeatCase { p, engine, layout })
    })
}

struct HeatCase<'a, T: Real> {
    p: &'a HeatProblem,
    engine: Box<dyn Engine<Real = T>>,
    layout: Layout,
}

impl<T: Real> HeatCase<'_, T> {
    /// max |u − exact| at `step`, where the exact solution is known.
    fn error(&self, step: u64, u: &[T]) -> Option<f64> {
        use rayon::prelude::*;
        // HeatProblem::exact point by point, the initial field from its table.
        let decay = self.p.decay(step as f64 * self.p.dt)?;
        let sine = super::initial::SineField::of(self.p)?;
        Some(
            u.par_iter()
                .enumerate()
                .map(|(i, v)| (v.as_f64() - sine.at(i) * decay).abs())
                .reduce(|| 0.0f64, f64::max),
        )
    }
}

impl<T: Real> Case for HeatCase<'_, T> {
    type Real = T;
    fn engine(&mut self) -> &mut dyn Engine<Real = T> {
        self.engine.as_mut()
    }
    fn shape(&self) -> Vec<usize> {
        self.p.user_shape()
    }
    fn scalars(&self, step: u64, u: &Field<T>, _: &[f64]) -> Result<Vec<(&'static str, f64)>> {
        use rayon::prelude::*;
        // Chunk results combined in order: the same sum on every run and thread count.
        let parts: Vec<(f64, f64, f64)> = u
            .data
            .par_chunks(1 << 16)
            .map(|c| {
                c.iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY, 0.0), |a, v| {
                        let v = v.as_f64();
                        (a.0.min(v), a.1.max(v), a.2 + v)
                    })
            })
            .collect();
        let (lo, hi, sum) = parts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY, 0.0), |a, b| {
                (a.0.min(b.0), a.1.max(b.1), a.2 + b.2)
            });
        let mut s = vec![
            ("min", lo),
            ("max", hi),
            ("mean", sum / u.data.len() as f64),
        ];
        if let Some(e) = self.error(step, &u.data) {
            s.push(("max_error", e));
        }
        Ok(s)
    }
    fn finish(&mut self, o: &LoopOutcome, u: Option<&Field<T>>, s: &mut Summary) -> Result<()> {
        s.solution_error = u.and_then(|u| self.error(o.steps, &u.data));
        s.solution_error_meaning = s.solution_error.map(|_| "max |u − u_exact|");
        Ok(())
    }
    fn needs_final_field(&self) -> bool {
        // An exact solution to measure against exists where the decay does.
        self.p.decay(0.0).is_some()
    }
    fn layout(&self) -> Option<serde_json::Value> {
        Some(serde_json::to_value(&self.layout).expect("layout serialises"))
    }
}
