//! `keisan bench electrostatics`: red-black iterations on a cube with a dielectric sphere
//! between two electrodes, against the copy bandwidth measured in the same run.

use clap::FromArgMatches;
use serde::Serialize;

use super::{ElectrostaticsProblem, Geometry, Shape, geometry::Body};
use crate::bench::{Timer, ceilings_for};
use crate::device::Device;
use crate::device::ceilings::Ceilings;
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::solver::Report;

#[derive(clap::Args, Debug)]
pub struct ElectrostaticsBenchArgs {
    /// Cells per axis of the cube (default: 511 on a GPU, i.e. 512³ nodes; 96 on the CPU).
    #[arg(long)]
    cells: Option<usize>,
    /// Red-black iterations timed (default: 200 on a GPU, 10 on the CPU).
    #[arg(long)]
    iterations: Option<u64>,
    #[arg(long, default_value_t = 3)]
    repetitions: usize,
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
}

#[derive(Debug, Serialize)]
pub struct ElectrostaticsBench {
    pub device: String,
    pub precision: String,
    pub nodes: usize,
    pub iterations: u64,
    pub seconds: f64,
    pub gnodes_per_s: f64,
    /// Bytes one red-black iteration must move per node in the study's layout: each colour
    /// reads V and both id arrays whole, and every node is written once.
    pub bytes_per_node: usize,
    pub fraction_of_copy_bandwidth: f64,
    /// The performance model: seconds per iteration if the layout's bytes moved at the
    /// copy bandwidth measured in this run (the single-pass floor).
    pub predicted_s_per_iteration: f64,
    pub measured_s_per_iteration: f64,
    pub ceilings: Ceilings,
}

/// The bench problem: a unit cube, a dielectric sphere (εr 4) between two plate
/// electrodes (1 V and 0 V) on the x faces.
pub fn problem(cells: usize, iterations: u64) -> ElectrostaticsProblem {
    let axis: Vec<f64> = (0..=cells).map(|i| i as f64 / cells as f64).collect();
    let plate = |x0: f64, x1: f64, e: u8| Shape {
        body: Body::Box {
            min: [x0, 0.0, 0.0],
            max: [x1, 1.0, 1.0],
        },
        electrode: Some(e),
        dielectric: None,
    };
    let nodes = [axis.clone(), axis.clone(), axis];
    ElectrostaticsProblem {
        omega: super::optimal_omega(&nodes, &[None; 6]),
        nodes,
        voltages: vec![1.0, 0.0],
        permittivities: vec![4.0],
        shapes: vec![
            Shape {
                body: Body::Sphere {
                    center: [0.5, 0.5, 0.5],
                    radius: 0.25,
                },
                electrode: None,
                dielectric: Some(1),
            },
            plate(0.0, 0.05, 1),
            plate(0.95, 1.0, 2),
        ],
        faces: [None; 6],
        charge_density: 0.0,
        omega_auto: true,
        tolerance: 0.0,
        max_iterations: iterations,
        capacitance: false,
    }
}

pub fn run(device: &Device, args: &clap::ArgMatches) -> Result<Report> {
    let a =
        ElectrostaticsBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let gpu = matches!(device, Device::Cuda(_));
    let cells = a.cells.unwrap_or(if gpu { 511 } else { 96 });
    let iterations = a.iterations.unwrap_or(if gpu { 200 } else { 10 });
    if !(2..=2048).contains(&cells) || !(1..=1 << 40).contains(&iterations) || a.repetitions == 0 {
        return Err(Error::invalid(
            "--cells/--iterations/--repetitions",
            format!("{cells}/{iterations}/{}", a.repetitions),
            "cells in [2, 2048], at least 1 iteration and 1 repetition",
        ));
    }
    let p = problem(cells, iterations);
    let b = match a.precision {
        Precision::F32 => case::<f32>(device, &p, a.repetitions)?,
        Precision::F64 => case::<f64>(device, &p, a.repetitions)?,
    };
    let human = format!(
        "electrostatics bench on {}\n{}  {}³ nodes {}, {} red-black iterations, median of {}: {}\n  {:.3} Gnode/s, {} B/node/iteration, {:.1} % of copy bandwidth\n  model: {} per iteration at the copy bandwidth (nodes × B/node ÷ copy); measured {} ({:.2}× the model)\n",
        b.device,
        b.ceilings.human(),
        cells + 1,
        b.precision,
        b.iterations,
        a.repetitions,
        crate::units::seconds(b.seconds),
        b.gnodes_per_s,
        b.bytes_per_node,
        100.0 * b.fraction_of_copy_bandwidth,
        crate::units::seconds(b.predicted_s_per_iteration),
        crate::units::seconds(b.measured_s_per_iteration),
        b.measured_s_per_iteration / b.predicted_s_per_iteration
    );
    Ok(Report {
        human,
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

fn case<T: Real>(
    device: &Device,
    p: &ElectrostaticsProblem,
    reps: usize,
) -> Result<ElectrostaticsBench> {
    let ceilings = ceilings_for(device)?;
    let mut e = super::engine::<T>(p, &Geometry::build(p), device, None)?;
    e.advance(1)?;
    e.diagnostics()?;
    let timer = Timer::new(device)?;
    let mut times = Vec::new();
    for _ in 0..reps {
        times.push(timer.time(|| e.advance(p.max_iterations))?);
        e.diagnostics()?;
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let nodes = p.points();
    let bytes_per_node = 3 * std::mem::size_of::<T>() + 4;
    let rate = nodes as f64 * p.max_iterations as f64 / seconds;
    Ok(ElectrostaticsBench {
        device: device.describe(),
        precision: T::PRECISION.to_string(),
        nodes,
        iterations: p.max_iterations,
        seconds,
        gnodes_per_s: rate * 1e-9,
        bytes_per_node,
        fraction_of_copy_bandwidth: rate * bytes_per_node as f64 / ceilings.copy_bandwidth,
        predicted_s_per_iteration: nodes as f64 * bytes_per_node as f64 / ceilings.copy_bandwidth,
        measured_s_per_iteration: seconds / p.max_iterations as f64,
        ceilings,
    })
}
