//! `keisan bench electrostatics --devices …` (or `--subdomains N`): weak and strong
//! scaling of the red-black iteration on slabs, the halo exchange alone and how much of
//! it the pass hides, and the model of a decomposed iteration (compute + exposed
//! exchange) for 8 and 64 devices.

use clap::FromArgMatches;
use serde::Serialize;

use super::bench::{ElectrostaticsBenchArgs, problem_cells};
use super::geometry::{Body, Shape};
use super::{ElectrostaticsProblem, Geometry, SweepKernel, Update, engine_placed};
use crate::bench::{Exposure, HaloTimes, ceilings_for, sorted_wall_seconds};
use crate::device::ceilings::Ceilings;
use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::solver::Report;

#[derive(Debug, Serialize)]
pub struct ElectrostaticsScaling {
    pub placement: String,
    pub precision: String,
    /// "classic" (per-colour sweeps) or "table" (`--kernel blocked`: the blocked kernel,
    /// one iteration a pass on slabs, two on one device).
    pub update: String,
    pub subdomains: usize,
    pub devices: usize,
    /// Nodes per axis of the cube one subdomain holds in the weak case.
    pub nodes_per_axis: usize,
    pub iterations: u64,
    /// The cube on the first device alone.
    pub one_device_s_per_iteration: f64,
    /// One such cube per subdomain, stacked in z, on the slabs.
    pub weak_s_per_iteration: f64,
    /// One device's time for the work each device holds (subdomains ÷ devices cubes),
    /// over the weak time.
    pub weak_efficiency: f64,
    /// The cube on the slabs.
    pub strong_s_per_iteration: f64,
    pub strong_speedup: f64,
    /// The weak case against one device, per iteration: the exchange alone (None under
    /// mpirun), what the slabs add (their own work, timed with the exchange off, and
    /// the exchange's exposed part), the model's strong figures.
    pub exposure: Exposure,
    /// The model: a slab keeps at most two neighbours at any count, so a weak iteration
    /// costs one device's plus the exposed part; the cube on P devices T(1)/P + exposed.
    pub model_weak_s_per_iteration: f64,
    pub model_strong_8_s_per_iteration: f64,
    pub model_strong_64_s_per_iteration: f64,
    pub ceilings: Ceilings,
}

pub fn run(placement: &Placement, args: &clap::ArgMatches) -> Result<Report> {
    let a =
        ElectrostaticsBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let update = match a.kernel.as_deref().map(SweepKernel::from_name) {
        None => Some(Update::Classic),
        Some(Some(SweepKernel::Blocked)) => Some(Update::Table),
        Some(_) => None,
    };
    let (Some(update), false) = (update, a.poisson) else {
        return Err(Error::invalid(
            "--devices",
            placement.describe(),
            "the slab bench times the default per-colour sweeps (or, with --kernel blocked, \
             the table form) on the bench problem; --poisson and the other kernels run on \
             one device",
        ));
    };
    let device = placement.first();
    let gpu = matches!(device, Device::Cuda(_));
    let cells = a.cells.unwrap_or(if gpu { 511 } else { 48 });
    let iterations = a.iterations.unwrap_or(if gpu { 200 } else { 10 });
    if !(2..=2048).contains(&cells) || iterations == 0 || a.repetitions == 0 {
        return Err(Error::invalid(
            "--cells/--iterations/--repetitions",
            format!("{cells}/{iterations}/{}", a.repetitions),
            "cells in [2, 2048], at least 1 iteration and 1 repetition",
        ));
    }
    let b = match a.precision {
        Precision::F32 => scaling::<f32>(placement, update, cells, iterations, a.repetitions)?,
        Precision::F64 => scaling::<f64>(placement, update, cells, iterations, a.repetitions)?,
    };
    let us = |s: f64| crate::units::seconds(s);
    let n = b.nodes_per_axis;
    let mut human = format!(
        "electrostatics on slabs: {} ({} update)\n{}  {} per subdomain, {}, {} red-black iterations, median of {}\n",
        b.placement,
        b.update,
        b.ceilings.human(),
        format_args!("{n}³"),
        b.precision,
        b.iterations,
        a.repetitions,
    );
    human += &format!(
        "  one device, {n}³: {} per iteration\n  weak, {n} × {n} × {} on {} subdomains: {} per iteration, efficiency {:.1} %\n  strong, {n}³ on {} subdomains: {} per iteration, {:.2}× one device\n",
        us(b.one_device_s_per_iteration),
        n * b.subdomains,
        b.subdomains,
        us(b.weak_s_per_iteration),
        100.0 * b.weak_efficiency,
        b.subdomains,
        us(b.strong_s_per_iteration),
        b.strong_speedup,
    );
    human += &b.exposure.exchange_line("iteration");
    human += &format!(
        "  model (one device's iteration + the exposed part; two neighbours per slab at any count): weak {} per iteration on any number of devices; {n}³ on 8 devices {}, on 64 {}\n",
        us(b.model_weak_s_per_iteration),
        us(b.model_strong_8_s_per_iteration),
        us(b.model_strong_64_s_per_iteration),
    );
    Ok(Report {
        human,
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

/// Seconds per iteration of the bench problem with `cells` on `placement` (wall clock,
/// median), and one halo exchange alone when decomposed.
/// The bench problem of `cells[0]` cells a side, stacked along z node for node up to
/// `cells[2]` cells (whole copies of `cells[0] + 1` planes): the same spacing, the plates
/// through the whole stack and the sphere repeated in each copy, so that each slab of a
/// weak-scaling run holds what one device holds alone. (Squeezing the stack into the unit
/// cube instead, as before 2026-11-26, makes the mesh 4× finer in z on four slabs: other
/// values, and the sweep's time depends on the values — 4 slabs of it on one H200 took
/// 4.14 ms per iteration against 4 × 0.944 ms for the cube.)
fn stacked(cells: [usize; 3], iterations: u64) -> ElectrostaticsProblem {
    let (c, n) = (cells[0], cells[0] + 1);
    let mut p = problem_cells(cells, iterations);
    p.nodes[2] = (0..=cells[2]).map(|k| k as f64 / c as f64).collect();
    let top = p.nodes[2][cells[2]];
    let (spheres, mut plates): (Vec<Shape>, Vec<Shape>) = p
        .shapes
        .drain(..)
        .partition(|s| matches!(s.body, Body::Sphere { .. }));
    for plate in &mut plates {
        if let Body::Box { max, .. } = &mut plate.body {
            max[2] = top;
        }
    }
    for copy in 0..(cells[2] + 1) / n {
        for sphere in &spheres {
            let mut sphere = sphere.clone();
            if let Body::Sphere { center, .. } = &mut sphere.body {
                center[2] += (copy * n) as f64 / c as f64;
            }
            p.shapes.push(sphere);
        }
    }
    p.shapes.extend(plates);
    p.omega = super::optimal_omega(&p.nodes, &p.faces);
    p
}

fn per_iteration<T: Real>(
    placement: &Placement,
    update: Update,
    cells: [usize; 3],
    iterations: u64,
    reps: usize,
) -> Result<(f64, HaloTimes)> {
    let mut p = stacked(cells, iterations);
    p.update = update;
    let g = Geometry::build(&p)?;
    let mut e = engine_placed::<T>(&p, &g, placement, None)?;
    e.advance(1)?;
    e.diagnostics()?;
    let times = sorted_wall_seconds(e.as_mut(), iterations, reps)?;
    let halo = crate::bench::halo_times(e.as_mut(), iterations, reps)?;
    Ok((times[times.len() / 2] / iterations as f64, halo))
}

fn scaling<T: Real>(
    placement: &Placement,
    update: Update,
    cells: usize,
    iterations: u64,
    reps: usize,
) -> Result<ElectrostaticsScaling> {
    let parts = placement.parts.len();
    let one = Placement::single(placement.first().clone());
    let (t1, _) = per_iteration::<T>(&one, update, [cells; 3], iterations, reps)?;
    // One cube of (cells + 1)³ nodes per subdomain, stacked in z.
    let weak_z = (cells + 1) * parts - 1;
    let (tw, halo) =
        per_iteration::<T>(placement, update, [cells, cells, weak_z], iterations, reps)?;
    let (ts, _) = per_iteration::<T>(placement, update, [cells; 3], iterations, reps)?;
    // Subdomains sharing a device share its time: the reference is one device's time
    // for the work each device holds.
    let share = parts as f64 / placement.distinct_devices().len() as f64;
    let x = Exposure::new(t1 * share, tw, t1, halo);
    Ok(ElectrostaticsScaling {
        placement: placement.describe(),
        precision: T::PRECISION.to_string(),
        update: update.word().into(),
        subdomains: parts,
        devices: placement.distinct_devices().len(),
        nodes_per_axis: cells + 1,
        iterations,
        one_device_s_per_iteration: t1,
        weak_s_per_iteration: tw,
        weak_efficiency: t1 * share / tw,
        strong_s_per_iteration: ts,
        strong_speedup: t1 / ts,
        model_weak_s_per_iteration: t1 + x.exposed_s_per_step,
        model_strong_8_s_per_iteration: x.model_8_s_per_step,
        model_strong_64_s_per_iteration: x.model_64_s_per_step,
        exposure: x,
        ceilings: ceilings_for(placement.first())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One copy is the one-device bench problem itself; P copies keep its spacing and
    /// put, in every copy's planes, the nodes one copy has (its sphere and plates).
    #[test]
    fn the_stacked_problem_repeats_the_cube_node_for_node() {
        let (c, n) = (15, 16);
        assert_eq!(stacked([c; 3], 7), problem_cells([c; 3], 7));
        let one = Geometry::build(&stacked([c; 3], 7)).unwrap();
        let p = stacked([c, c, 3 * n - 1], 7);
        let h = p.nodes[2].windows(2).map(|w| w[1] - w[0]);
        assert!(h.into_iter().all(|d| (d - 1.0 / c as f64).abs() < 1e-12));
        let three = Geometry::build(&p).unwrap();
        let plane = n * n;
        for copy in 0..3 {
            let at = copy * n * plane;
            let copy_of = |a: &[u8]| a[at..at + n * plane].to_vec();
            assert_eq!(
                copy_of(&three.id_volt),
                one.id_volt,
                "copy {copy}: electrodes"
            );
            assert_eq!(
                copy_of(&three.id_epsr),
                one.id_epsr,
                "copy {copy}: dielectrics"
            );
        }
    }
}
