//! The electrostatics solver's entry in the registry: its table, its run (charges and the
//! capacitance matrix after the solve), its bench.

use super::{ElectrostaticsConfig, ElectrostaticsProblem, Geometry, bench, cpu, gauss};
use crate::device::{Device, Placement, cuda::KernelSource};
use crate::error::Result;
use crate::execute::{Case, Execution, run_case};
use crate::output::{self, OutputSet, csv, npy, png, vtr};
use crate::precision::{Precision, Real};
use crate::problem::Source;
use crate::run::{self, Engine, Field, LoopOutcome};
use crate::solver::{Report, Solver, SolverProblem};
use crate::summary::Summary;
use rayon::prelude::*;

pub struct Electrostatics;
pub static ELECTROSTATICS: Electrostatics = Electrostatics;

impl Solver for Electrostatics {
    fn name(&self) -> &'static str {
        "electrostatics"
    }
    fn table_hint(&self) -> &'static str {
        "x, y, z meshes, voltages, permittivities, [[electrostatics.shapes]], max_iterations"
    }
    fn kernels(&self) -> Vec<KernelSource> {
        vec![super::cuda::KERNELS]
    }
    fn problem(&self, table: toml::Value, src: &Source) -> Result<Box<dyn SolverProblem>> {
        let cfg: ElectrostaticsConfig = src.deserialize("electrostatics", table)?;
        Ok(Box::new(
            cfg.validate(src.precision, &|key, p| src.path(key, p))?,
        ))
    }
    fn bench_args(&self, cmd: clap::Command) -> clap::Command {
        <bench::ElectrostaticsBenchArgs as clap::Args>::augment_args(cmd).about(
            "Red-black SOR on a 512³ cube (a dielectric sphere between two plate electrodes), \
             every kernel, against the copy bandwidth measured in the same run; --poisson: \
             time to solution",
        )
    }
    fn bench(&self, device: &Device, args: &clap::ArgMatches) -> Result<Report> {
        bench::run(device, args)
    }
    fn bench_placed(&self, placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
        if placement.is_single() {
            return bench::run(placement.first(), args);
        }
        super::bench_slabs::run(placement, args)
    }
}

impl SolverProblem for ElectrostaticsProblem {
    fn max_steps(&self) -> u64 {
        self.max_iterations
    }
    fn least_values_moved(&self) -> Option<f64> {
        let nodes: usize = self.shape().iter().product();
        Some(2.0 * nodes as f64 * self.max_iterations as f64)
    }
    fn decomposes(&self) -> bool {
        true
    }
    fn restart_may_change(&self) -> &'static [&'static str] {
        &["max_iterations", "tolerance", "capacitance", "check_every"]
    }
    fn execute(&self, cx: &Execution) -> Result<Summary> {
        match cx.problem.precision {
            Precision::F32 => run::<f32>(self, cx),
            Precision::F64 => run::<f64>(self, cx),
        }
    }
}

fn run<T: Real>(p: &ElectrostaticsProblem, cx: &Execution) -> Result<Summary> {
    // Before the geometry takes its time to build; ranks under mpirun may hold only
    // their slab's planes.
    if cx.placement.world.is_none() {
        cpu::ensure_host_holds::<T>(p)?;
    }
    if p.omega_auto {
        cx.notice(&format!(
            "ω = {:.4} (estimated from the mesh; set electrostatics.omega to choose)",
            p.omega
        ));
    }
    run_case(cx, |restart| {
        let g = Geometry::build_planes(p, held_planes::<T>(p, cx)?)?;
        let update_chosen = p.update == super::Update::Auto;
        let (p, why) = p.resolve_update(&g, T::PRECISION)?;
        if let Some(why) = why {
            cx.notice(&why);
        }
        Ok(ElectrostaticsCase {
            engine: super::engine_placed::<T>(&p, &g, cx.placement, restart)?,
            update_chosen,
            p,
            g,
            placement: cx.placement,
            quiet: cx.opts.quiet,
            charges: Vec::new(),
            capacitance: None,
        })
    })
}

/// Under mpirun, when V will be written in pieces (too large to gather, so no measure
/// needs the whole mesh): the z-planes this rank's slab holds, the only ones whose
/// geometry it builds. None: the whole mesh.
fn held_planes<T: Real>(p: &ElectrostaticsProblem, cx: &Execution) -> Result<Option<Vec<bool>>> {
    let Some(w) = cx.placement.world else {
        return Ok(None);
    };
    if cx.gathers::<T>(&p.shape())? {
        return Ok(None);
    }
    let nz = p.counts()[2];
    // An "auto" update is chosen from the geometry built here: hold the table form's
    // wider halos, which either form's slab can use.
    let table = match p.update {
        super::Update::Auto => super::AUTO_TABLE_NODES.contains(&p.points()),
        u => u == super::Update::Table,
    };
    let mine = &super::slab_windows(nz, cx.placement, table)?[w.rank];
    let mut held = vec![false; nz];
    for l in 0..mine.rows {
        held[mine.grid_row(l)] = true;
    }
    Ok(Some(held))
}

struct ElectrostaticsCase<'a, T: Real> {
    /// With its update resolved (`ElectrostaticsProblem::resolve_update`).
    p: ElectrostaticsProblem,
    /// Whether the update was "auto" (the summary says which it took).
    update_chosen: bool,
    engine: Box<dyn Engine<Real = T>>,
    g: Geometry,
    placement: &'a Placement,
    /// No progress on stderr (`--quiet`, and ranks other than the first).
    quiet: bool,
    /// Computed once in `finish`, for the summary and the CSVs.
    charges: Vec<f64>,
    capacitance: Option<Capacitance>,
}

/// Charges and capacitance for the summary and the CSVs.
fn charge_table(g: &Geometry, q: &[f64]) -> Vec<serde_json::Value> {
    g.electrodes()
        .iter()
        .map(|&k| {
            serde_json::json!({
                "id": k, "label": g.labels[k as usize], "voltage": g.volts[k as usize],
                "charge_c": q[k as usize],
            })
        })
        .collect()
}

/// Matrices with more electrodes than this are left to capacitance.csv in the human summary.
const CAPACITANCE_LINES: usize = 8;

/// The human summary's lines: the true residual, each electrode's charge and the
/// capacitance matrix (`results` holds the same numbers).
fn highlights(
    g: &Geometry,
    q: &[f64],
    capacitance: Option<&Capacitance>,
    true_residual: f64,
) -> Vec<(String, String)> {
    let mut lines = vec![(
        "true residual".to_string(),
        format!("{true_residual:.6e} (‖b − Av‖/‖b‖ at the interior free nodes)"),
    )];
    let electrodes = g.electrodes();
    for (n, &k) in electrodes.iter().enumerate() {
        let k = k as usize;
        lines.push((
            if n == 0 { "charges" } else { "" }.to_string(),
            format!("{} at {} V: {:+.6e} C", g.labels[k], g.volts[k], q[k]),
        ));
    }
    if let Some(Capacitance { matrix: c, short }) = capacitance {
        for (n, solve) in short.iter().enumerate() {
            lines.push((
                if n == 0 { "NOT CONVERGED" } else { "" }.to_string(),
                solve.human(),
            ));
        }
        let names: Vec<&str> = electrodes
            .iter()
            .map(|&k| g.labels[k as usize].as_str())
            .collect();
        if c.len() > CAPACITANCE_LINES {
            lines.push((
                "capacitance".to_string(),
                format!(
                    "{0} × {0} matrix in capacitance.csv and summary.json",
                    c.len()
                ),
            ));
        } else {
            lines.push((
                "capacitance".to_string(),
                format!("F, rows and columns in the order {}", names.join(", ")),
            ));
            for row in c {
                let row: Vec<String> = row.iter().map(|x| format!("{x:>+14.6e}")).collect();
                lines.push((String::new(), row.join(" ")));
            }
        }
    }
    lines
}

/// The capacitance matrix, C[i][j] = the charge on electrode i with j at 1 V and the
/// others at 0 V, and the solves that stopped short of the tolerance (their columns are
/// from their last iterate, or NaN after a non-finite value).
struct Capacitance {
    matrix: Vec<Vec<f64>>,
    short: Vec<ShortSolve>,
}

/// A capacitance solve that did not converge: it is reported, and the field of the main
/// solve and every output are still written.
#[derive(Debug, serde::Serialize)]
struct ShortSolve {
    electrode: String,
    iterations: u64,
    /// The last measured relative residual (none after a non-finite value).
    residual: Option<f64>,
    status: run::Status,
}

impl ShortSolve {
    fn human(&self) -> String {
        match self.status {
            run::Status::NonFinite => format!(
                "the solve with {} at 1 V stopped at a non-finite value after {} iterations \
                 (its column is NaN)",
                self.electrode, self.iterations
            ),
            run::Status::Stalled => format!(
                "the solve with {} at 1 V stalled after {} iterations (its update met the \
                 tolerance, its true residual did not; its column is from the last iterate)",
                self.electrode, self.iterations
            ),
            _ => format!(
                "the solve with {} at 1 V did not converge in {} iterations (residual {:.3e}; \
                 its column is from the last iterate): raise max_iterations",
                self.electrode,
                self.iterations,
                self.residual.unwrap_or(f64::NAN)
            ),
        }
    }
}

impl<T: Real> ElectrostaticsCase<'_, T> {
    /// One solve per electrode at 1 V, the others at 0 V: C[i][j] = Q_i with j at 1 V.
    fn capacitance(&self) -> Result<Capacitance> {
        let electrodes = self.g.electrodes();
        let mut columns = Vec::new();
        let mut short = Vec::new();
        for &j in &electrodes {
            let mut g = self.g.without_charge();
            g.volts
                .iter_mut()
                .enumerate()
                .for_each(|(k, v)| *v = if k == j as usize { 1.0 } else { 0.0 });
            let mut e = super::engine_placed::<T>(&self.p, &g, self.placement, None)?;
            if !self.quiet {
                crate::say!(
                    "keisan: capacitance solve {} of {}: {} at 1 V, the others at 0 V",
                    columns.len() + 1,
                    electrodes.len(),
                    self.g.labels[j as usize]
                );
            }
            let bar = run::progress_bar(self.p.max_iterations, self.quiet);
            let mut l = run::Loop::new(e.as_mut(), Vec::new())?;
            l.run_to(e.as_mut(), self.p.max_iterations, &bar)?;
            bar.finish_and_clear();
            // A signal stops the run loop as it stops the main solve's: the run ends
            // there, not with the solve reported as short.
            if let Some(signal) = crate::signals::agreed()? {
                return Err(crate::error::Error::Interrupted {
                    signal,
                    message: format!(
                        "interrupted by {} in the capacitance solve with {} at 1 V; no final \
                         outputs written",
                        crate::signals::name(signal),
                        self.g.labels[j as usize]
                    ),
                });
            }
            // The solve's V, on the host once: for its true residual and its charges.
            let v = match l.status {
                run::Status::NonFinite => None,
                _ => Some(e.snapshot()?),
            };
            let mut status = l.status;
            if let Some(v) = v.as_ref().filter(|_| status == run::Status::Converged) {
                let r = cpu::true_residual(&self.p, &g, &v.data);
                // A NaN residual is no convergence either.
                let met = r <= self.p.accepted_true_residual(T::PRECISION);
                if !met {
                    status = run::Status::Stalled;
                }
            }
            if status != run::Status::Converged {
                short.push(ShortSolve {
                    electrode: self.g.labels[j as usize].clone(),
                    iterations: l.steps,
                    residual: run::last_measured(&l.residuals).filter(|r| r.is_finite()),
                    // Running (at the limit: "iteration_limit"), Stalled or NonFinite.
                    status,
                });
            }
            columns.push(match &v {
                None => vec![f64::NAN; electrodes.len()],
                Some(v) => {
                    let q = gauss::charges(&self.p, &g, &v.data);
                    electrodes.iter().map(|&i| q[i as usize]).collect()
                }
            });
        }
        // Columns were solves; the matrix is C[i][j] = charge on i with j at 1 V.
        let n = electrodes.len();
        Ok(Capacitance {
            matrix: (0..n)
                .map(|i| (0..n).map(|j| columns[j][i]).collect())
                .collect(),
            short,
        })
    }
}

impl<T: Real> Case for ElectrostaticsCase<'_, T> {
    type Real = T;
    fn engine(&mut self) -> &mut dyn Engine<Real = T> {
        self.engine.as_mut()
    }
    fn shape(&self) -> Vec<usize> {
        self.p.shape()
    }
    fn scalars(
        &self,
        step: u64,
        u: &Field<T>,
        residuals: &[f64],
    ) -> Result<Vec<(&'static str, f64)>> {
        let r = crate::execute::residual_at(step, residuals);
        let (lo, hi) = u
            .data
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v.as_f64()), b.max(v.as_f64()))
            });
        Ok(vec![
            ("residual", r.unwrap_or(f64::NAN)),
            ("v_min", lo),
            ("v_max", hi),
        ])
    }
    fn needs_final_field(&self) -> bool {
        true // the charges are summed on the host
    }
    fn layout(&self) -> Option<serde_json::Value> {
        // The CUDA kernel the mesh got (SweepKernel::default_for or KEISAN_ES_KERNEL).
        let kernel = self.engine.describe()?;
        Some(serde_json::json!({ "kernel": kernel }))
    }
    fn finish(&mut self, o: &LoopOutcome, u: Option<&Field<T>>, s: &mut Summary) -> Result<()> {
        let mut results = serde_json::json!({
            "omega": self.p.omega, "omega_estimated": self.p.omega_auto,
            "update": self.p.update.word(), "update_chosen": self.update_chosen,
            "converged": o.status == run::Status::Converged,
            "relative_residual": run::last_measured(&o.residuals),
            "relative_residual_meaning": "‖ΔV‖/‖V‖ of the last iteration measured (the stopping test)",
            "check_every": self.p.check_interval(),
        });
        let Some(v) = u else {
            // V was written in pieces, too large to gather: no measures of the whole field.
            results["charges"] = serde_json::Value::Null;
            results["capacitance_f"] = serde_json::Value::Null;
            results["charges_meaning"] = serde_json::json!(
                "not computed (nor the capacitance): V does not fit one process, so it was \
                 written in pieces"
            );
            s.results = Some(results);
            return Ok(());
        };
        self.charges = gauss::charges(&self.p, &self.g, &v.data);
        if self.p.capacitance {
            self.capacitance = Some(self.capacitance()?);
        }
        let g = &self.g;
        let true_residual = cpu::true_residual(&self.p, g, &v.data);
        let accepted = self.p.accepted_true_residual(T::PRECISION);
        let met = true_residual <= accepted;
        if o.status == run::Status::Converged && !met {
            s.status = run::Status::Stalled;
            results["converged"] = serde_json::json!(false);
            s.warnings.push(format!(
                "the stopping test (‖ΔV‖/‖V‖ ≤ {:e}) passed at iteration {}, but the true \
                 residual ‖b − Av‖/‖b‖ is {:.3e}, above the {:.1e} a converged run reaches \
                 ({}× the tolerance): the iteration stalled; V is not the solution (check \
                 electrostatics.omega and the mesh spacing)",
                self.p.tolerance,
                o.steps,
                true_residual,
                accepted,
                super::TRUE_RESIDUAL_FACTOR
            ));
        }
        results["true_relative_residual_accepted"] = serde_json::json!(accepted);
        s.highlights = highlights(g, &self.charges, self.capacitance.as_ref(), true_residual);
        results["true_relative_residual"] = serde_json::json!(true_residual);
        results["true_relative_residual_meaning"] =
            serde_json::json!("‖b − Av‖/‖b‖ of the node equations at the interior free nodes");
        results["charges"] = serde_json::json!(charge_table(g, &self.charges));
        results["field_centring"] = serde_json::json!("node");
        if let Some(c) = &self.capacitance {
            results["capacitance_f"] = serde_json::json!(c.matrix);
            results["capacitance_converged"] = serde_json::json!(c.short.is_empty());
            if !c.short.is_empty() {
                results["capacitance_short_solves"] = serde_json::json!(c.short);
            }
            results["capacitance_electrodes"] = serde_json::json!(
                g.electrodes()
                    .iter()
                    .map(|&k| g.labels[k as usize].clone())
                    .collect::<Vec<_>>()
            );
        }
        s.results = Some(results);
        Ok(())
    }
    fn extra_outputs(&mut self, u: &Field<T>, set: &mut OutputSet) -> Result<()> {
        let g = &self.g;
        let coords = self.p.coords();
        let shape = self.p.shape();
        let (e, mag) = gauss::field(&self.p, &u.data);
        let magnitude = cpu::field_of(&self.p, "E_magnitude", mag);
        let eps: Vec<T> = g
            .id_epsr
            .par_iter()
            .map(|&d| T::lit(g.epsr[d as usize]))
            .collect();
        let mut e_shape = shape.clone();
        e_shape.push(3);
        let [e_vtr, geometry_vtr, volt_npy, epsr_npy, e_npy, mag_png] = [
            "E.vtr",
            "geometry.vtr",
            "electrode_id.npy",
            "dielectric_id.npy",
            "E.npy",
            "E_magnitude.png",
        ]
        .map(|name| set.file(name));
        let (coords, shape, e, eps) = (&coords, &shape, &e, &eps);
        let magnitude = &magnitude;
        output::in_parallel(vec![
            Box::new(move || {
                let arrays = [
                    vtr::Array::reals("E", 3, e),
                    vtr::Array::scalar("E_magnitude", &magnitude.data),
                ];
                vtr::write(&e_vtr, coords, &arrays)
            }),
            Box::new(move || {
                let arrays = [
                    vtr::Array::bytes("electrode_id", &g.id_volt),
                    vtr::Array::scalar("epsilon_r", eps),
                ];
                vtr::write(&geometry_vtr, coords, &arrays)
            }),
            Box::new(move || npy::write_any(&volt_npy, shape, &g.id_volt)),
            Box::new(move || npy::write_any(&epsr_npy, shape, &g.id_epsr)),
            Box::new(move || npy::write(&e_npy, &e_shape, e)),
            Box::new(move || png::write(&mag_png, magnitude)),
        ])?;
        let q = &self.charges;
        let rows: Vec<Vec<f64>> = g
            .electrodes()
            .iter()
            .map(|&k| vec![k as f64, g.volts[k as usize], q[k as usize]])
            .collect();
        let header = ["electrode", "voltage", "charge_c"].map(String::from);
        csv::write_table(&set.file("charges.csv"), &header, &rows)?;
        if let Some(Capacitance { matrix: c, .. }) = &self.capacitance {
            let header: Vec<String> = std::iter::once("electrode".to_string())
                .chain(g.electrodes().iter().map(|k| format!("c_{k}_f")))
                .collect();
            let rows: Vec<Vec<f64>> = g
                .electrodes()
                .iter()
                .zip(c)
                .map(|(&k, row)| {
                    std::iter::once(k as f64)
                        .chain(row.iter().copied())
                        .collect()
                })
                .collect();
            csv::write_table(&set.file("capacitance.csv"), &header, &rows)?;
        }
        Ok(())
    }
}
