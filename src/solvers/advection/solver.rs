//! The advection solver's entry in the registry: its table, its run and its bench.

use rayon::prelude::*;

use super::cuda::VelocitySource;
use super::{AdvectionConfig, AdvectionProblem, bench, presets};
use crate::device::cuda::KernelSource;
use crate::device::{Device, Placement};
use crate::error::Result;
use crate::execute::{Case, Execution, run_case};
use crate::output::OutputSet;
use crate::output::gif::Animation;
use crate::parallel::world;
use crate::precision::{Precision, Real};
use crate::problem::Source;
use crate::run::{Engine, Field, LoopOutcome};
use crate::solver::{Report, Solver, SolverProblem};
use crate::summary::Summary;

pub struct Advection;
pub static ADVECTION: Advection = Advection;

impl Solver for Advection {
    fn name(&self) -> &'static str {
        "advection"
    }
    fn table_hint(&self) -> &'static str {
        "nx, ny, steps, dt or cfl, [advection.velocity], [advection.initial]"
    }
    fn kernels(&self) -> Vec<KernelSource> {
        vec![super::cuda::KERNELS]
    }
    fn problem(&self, table: toml::Value, src: &Source) -> Result<Box<dyn SolverProblem>> {
        let mut cfg: AdvectionConfig = src.deserialize("advection", table)?;
        super::resolve(&mut cfg, &|key, p| src.path(key, p));
        Ok(Box::new(cfg.validate(src.precision)?))
    }
    fn bench_args(&self, cmd: clap::Command) -> clap::Command {
        <bench::AdvectionBenchArgs as clap::Args>::augment_args(cmd).about(
            "The GPU Challenge 2010 problems (contest 5 by default): passes against the copy \
             bandwidth measured in the same run, beside the study's times",
        )
    }
    fn bench(&self, device: &Device, args: &clap::ArgMatches) -> Result<Report> {
        bench::run(&Placement::single(device.clone()), args)
    }
    fn bench_placed(&self, placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
        bench::run(placement, args)
    }
}

impl SolverProblem for AdvectionProblem {
    fn max_steps(&self) -> u64 {
        self.steps
    }
    fn least_values_moved(&self) -> Option<f64> {
        Some(2.0 * (self.nx * self.ny) as f64 * self.steps as f64)
    }
    fn dt(&self) -> Option<f64> {
        Some(self.dt)
    }
    fn restart_may_change(&self) -> &'static [&'static str] {
        &["steps", "steps_per_pass"]
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

fn run<T: Real>(p: &AdvectionProblem, cx: &Execution) -> Result<Summary> {
    // Built once: the mass drift's reference, and the engine's start unless restarting.
    let (f0, mass0) = start::<T>(p, cx.placement)?;
    run_case(cx, |restart| {
        Ok(AdvectionCase {
            p,
            engine: super::engine::<T>(p, cx.placement, restart, f0)?,
            mass0,
            animation: Animation::new(ANIMATION_SIDE, ANIMATION_FRAMES),
        })
    })
}

/// The initial mass and the scale its drift is measured against: Σ f and Σ |f| (a
/// field of both signs, a sine mode say, has a mass near 0 that would make any drift
/// look huge; for a field of one sign the two agree).
#[derive(Debug, Clone, Copy)]
struct Mass0 {
    sum: f64,
    abs: f64,
}

/// The initial field as this process needs it, and its mass (Σ f, Σ |f|): whole, or under
/// mpirun only the rows this rank's slab holds (the whole-size buffer's other rows zero
/// and unmapped, so no rank holds the whole grid), the mass then added up from every
/// rank's row sums in row order: the same bits as one process.
fn start<T: Real>(p: &AdvectionProblem, placement: &Placement) -> Result<(Vec<T>, Mass0)> {
    let total = |sums: &[f64]| Mass0 {
        sum: sums.iter().step_by(2).sum(),
        abs: sums.iter().skip(1).step_by(2).sum(),
    };
    let Some(w) = placement.world else {
        let f0 = presets::initial_field::<T>(p)?;
        let mass0 = total(&row_sums(&f0, p.nx));
        return Ok((f0, mass0));
    };
    let all = super::slab_windows::<T>(p, placement, VelocitySource::Kernel)?;
    let mine = &all[w.rank];
    let mut rows: Vec<usize> = (0..mine.rows).map(|l| mine.grid_row(l)).collect();
    rows.sort_unstable();
    rows.dedup();
    let f0 = presets::initial_rows::<T>(p, &rows)?;
    let own = row_sums(&f0[mine.own.start * p.nx..mine.own.end * p.nx], p.nx);
    let counts: Vec<usize> = all.iter().map(|w| w.own.len() * 16).collect();
    let sums = world::from_bytes::<f64>(&world::all_gather(&world::to_bytes(&own), &counts)?);
    Ok((f0, total(&sums)))
}

/// Σ f and Σ |f| of each row of `nx` values, in f64, interleaved: added up in row order,
/// the same bits on every run, thread count and decomposition.
fn row_sums<T: Real>(v: &[T], nx: usize) -> Vec<f64> {
    v.par_chunks(nx)
        .flat_map_iter(|c| {
            let s = c.iter().map(|x| x.as_f64()).sum::<f64>();
            let a = c.iter().map(|x| x.as_f64().abs()).sum::<f64>();
            [s, a]
        })
        .collect()
}

struct AdvectionCase<'a, T: Real> {
    p: &'a AdvectionProblem,
    engine: Box<dyn Engine<Real = T>>,
    mass0: Mass0,
    /// The output schedule's fields, for f.gif.
    animation: Animation,
}

/// Mass, its drift, min/max, and the L1/L2/L∞ errors where the exact field is known: one
/// pass of all threads over the rows, each row's sums in f64 added in row order (the
/// same on every run, thread count and decomposition; a 134 M-cell field took 0.8 s on
/// 16 threads through whole-field vectors of f, the exact field and its errors).
fn measures<T: Real>(
    p: &AdvectionProblem,
    step: u64,
    f: &[T],
    mass0: Mass0,
) -> Vec<(&'static str, f64)> {
    let exact = presets::exact_cells(p, step as f64 * p.dt).ok().flatten();
    // Per row: Σf, min, max, and where the exact field is known Σ|e|, Σe², max |e|.
    let rows: Vec<[f64; 6]> = f
        .par_chunks(p.nx)
        .enumerate()
        .map(|(j, row)| {
            let mass = row.iter().map(|x| x.as_f64()).sum::<f64>();
            let (lo, hi) = row.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                (a.0.min(v.as_f64()), a.1.max(v.as_f64()))
            });
            let Some(exact) = &exact else {
                return [mass, lo, hi, 0.0, 0.0, 0.0];
            };
            // Σ|e|, Σe² and max |e| in one pass, in the row's order.
            let (l1, l2, linf) =
                row.iter()
                    .enumerate()
                    .fold((0.0, 0.0, 0.0f64), |(l1, l2, linf), (i, v)| {
                        let e = (v.as_f64() - exact.at(i, j)).abs();
                        (l1 + e, l2 + e * e, linf.max(e))
                    });
            [mass, lo, hi, l1, l2, linf]
        })
        .collect();
    let total = |k: usize| rows.iter().map(|r| r[k]).sum::<f64>();
    let mass = total(0);
    let lo = rows.iter().map(|r| r[1]).fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| r[2]).fold(f64::NEG_INFINITY, f64::max);
    let drift = if mass0.abs != 0.0 {
        (mass - mass0.sum) / mass0.abs
    } else {
        mass - mass0.sum
    };
    let mut s = vec![
        ("mass", mass * p.dx * p.dy),
        ("mass_drift", drift),
        ("min", lo),
        ("max", hi),
    ];
    if exact.is_some() {
        let n = f.len() as f64;
        s.push(("l1_error", total(3) / n));
        s.push(("l2_error", (total(4) / n).sqrt()));
        s.push(("linf_error", rows.iter().map(|r| r[5]).fold(0.0, f64::max)));
    }
    s
}

impl<T: Real> Case for AdvectionCase<'_, T> {
    type Real = T;
    fn engine(&mut self) -> &mut dyn Engine<Real = T> {
        self.engine.as_mut()
    }
    fn shape(&self) -> Vec<usize> {
        self.p.shape()
    }
    fn scalars(&self, step: u64, u: &Field<T>, _: &[f64]) -> Result<Vec<(&'static str, f64)>> {
        Ok(measures(self.p, step, &u.data, self.mass0))
    }
    fn finish(&mut self, o: &LoopOutcome, u: Option<&Field<T>>, s: &mut Summary) -> Result<()> {
        let Some(u) = u else { return Ok(()) };
        let m = measures(self.p, o.steps, &u.data, self.mass0);
        let get = |name: &str| m.iter().find(|(k, _)| *k == name).map(|m| m.1);
        let time = o.steps as f64 * self.p.dt;
        s.solution_error = get("linf_error");
        s.solution_error_meaning = s.solution_error.map(|_| "max |f − f_exact|");
        if let (Some(l1), Some(l2), Some(linf)) =
            (get("l1_error"), get("l2_error"), get("linf_error"))
        {
            s.highlights.push((
                "errors".into(),
                format!(
                    "L1 {l1:.4e}, L2 {l2:.4e}, L∞ {linf:.4e} (mean, root mean square and max \
                     of |f − f_exact| over the cells at t = {time})"
                ),
            ));
        }
        if let (Some(mass), Some(drift), Some(lo), Some(hi)) =
            (get("mass"), get("mass_drift"), get("min"), get("max"))
        {
            // mass_drift is relative to the initial Σ|f| unless that is 0.
            let of = if self.mass0.abs != 0.0 {
                " of the initial Σ|f|"
            } else {
                ""
            };
            s.highlights.push((
                "mass".into(),
                format!("{mass:.6e} (Σf·ΔxΔy), drift {drift:+.4e}{of}; min {lo:.4e}, max {hi:.4e}"),
            ));
        }
        let map: serde_json::Map<String, serde_json::Value> = m
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        let mut results = serde_json::Value::Object(map);
        results["time"] = serde_json::json!(time);
        results["dt"] = serde_json::json!(self.p.dt);
        s.results = Some(results);
        Ok(())
    }
    fn needs_final_field(&self) -> bool {
        true
    }
    fn series_extras(&mut self, _: u64, _: &str, u: &Field<T>, _: &mut OutputSet) -> Result<()> {
        self.animation.push(self.p.ny, self.p.nx, &u.data);
        Ok(())
    }
    fn extra_outputs(&mut self, u: &Field<T>, set: &mut OutputSet) -> Result<()> {
        self.animation.push_last(self.p.ny, self.p.nx, &u.data);
        self.animation.write(set, "f.gif", 10)?;
        Ok(())
    }
}

/// The animation's frames: at most 320 pixels on the long side, at most 200 frames
/// (≤ 164 MB of f64 on a square grid, half that on the contest's 1:2 grids).
const ANIMATION_SIDE: usize = 320;
const ANIMATION_FRAMES: usize = 200;
