//! `keisan bench electrostatics`: red-black iterations on a cube with a dielectric sphere
//! between two electrodes, against the copy bandwidth measured in the same run.

use clap::FromArgMatches;
use serde::Serialize;

use super::{ElectrostaticsProblem, Geometry, Shape, SweepKernel, geometry::Body};
use crate::bench::{ceilings_for, sorted_seconds};
use crate::device::Device;
use crate::device::ceilings::Ceilings;
use crate::error::{Error, Result};
use crate::precision::{Precision, Real};
use crate::solver::Report;

#[derive(clap::Args, Debug)]
pub struct ElectrostaticsBenchArgs {
    /// Cells per axis of the cube (default: 511 on a GPU, i.e. 512³ nodes; 96 on the CPU).
    #[arg(long)]
    pub(super) cells: Option<usize>,
    /// Red-black iterations timed (default on a GPU: 1000, the case, or 200 on
    /// slabs (--devices); 10 on the CPU).
    #[arg(long)]
    pub(super) iterations: Option<u64>,
    /// Timed runs of each case; the report gives their median.
    #[arg(long, default_value_t = 3)]
    pub(super) repetitions: usize,
    /// The precision of the potential.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub(super) precision: Precision,
    /// Time to solution instead: a grounded box with a random charge density
    /// (examples/electrostatics-poisson-128.toml), to ‖b − Av‖/‖b‖ ≤ 1e-8 (set
    /// --precision f64 for the case).
    #[arg(long)]
    pub(super) poisson: bool,
    /// The CUDA kernel timed (per-colour, persistent, fused, staged, blocked); default:
    /// all of them, per-colour first. `blocked` is the table form (`update = "table"`):
    /// with --devices it times the table form's slabs, on the CPU backend its CPU engine.
    #[arg(long)]
    pub(super) kernel: Option<String>,
}

/// The time-to-solution problem: the unit cube with every face grounded, 128³ interior
/// nodes, ρ uniform in [−1e-9, 1e-9] C/m³ (seed 1); stops on ‖ΔV‖/‖V‖ ≤ 2e-9, which on
/// this problem leaves ‖b − Av‖/‖b‖ ≈ 6e-9 (the figure checked).
pub const POISSON_EXAMPLE: &str = include_str!("../../../examples/electrostatics-poisson-128.toml");

#[derive(Debug, Serialize)]
pub struct PoissonBench {
    pub device: String,
    pub precision: String,
    pub nodes: usize,
    pub iterations: u64,
    pub converged: bool,
    /// Wall time from the first launch to the host knowing the run converged.
    pub seconds_to_solution: f64,
    pub true_relative_residual: f64,
    pub bytes_per_node: f64,
    pub fraction_of_copy_bandwidth: f64,
    pub ceilings: Ceilings,
}

#[derive(Debug, Serialize)]
pub struct ElectrostaticsBench {
    pub device: String,
    pub precision: String,
    pub nodes: usize,
    pub iterations: u64,
    /// "per-colour" (one pass per colour), "persistent" (the same, many iterations per
    /// launch), "staged", "fused" (one pass per iteration), "blocked" (one pass per two
    /// iterations) or "cpu".
    pub kernel: String,
    pub seconds: f64,
    pub gnodes_per_s: f64,
    /// Bytes one red-black iteration must move per node (see [`bytes_per_node`]).
    pub bytes_per_node: f64,
    pub fraction_of_copy_bandwidth: f64,
    /// The performance model: seconds per iteration if the layout's bytes moved at the
    /// copy bandwidth measured in this run (the single-pass floor).
    pub predicted_s_per_iteration: f64,
    pub measured_s_per_iteration: f64,
    pub launch: String,
    pub ceilings: Ceilings,
}

/// Every CUDA kernel (or the CPU engine) measured in one run.
#[derive(Debug, Serialize)]
pub struct ElectrostaticsBenches {
    pub cases: Vec<ElectrostaticsBench>,
}

/// The bench problem: a unit cube, a dielectric sphere (εr 4) between two plate
/// electrodes (1 V and 0 V) on the x faces.
pub fn problem(cells: usize, iterations: u64) -> ElectrostaticsProblem {
    problem_cells([cells; 3], iterations)
}

/// [`problem`] with `cells` per axis, x, y, z (the same unit cube).
pub fn problem_cells(cells: [usize; 3], iterations: u64) -> ElectrostaticsProblem {
    let axis = |c: usize| (0..=c).map(|i| i as f64 / c as f64).collect::<Vec<f64>>();
    let plate = |x0: f64, x1: f64, e: u8| Shape {
        body: Body::Box {
            min: [x0, 0.0, 0.0],
            max: [x1, 1.0, 1.0],
        },
        electrode: Some(e),
        dielectric: None,
    };
    let nodes = cells.map(axis);
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
        charge: super::Charge::None,
        electrode_ids: None,
        dielectric_ids: None,
        omega_auto: true,
        tolerance: 0.0,
        max_iterations: iterations,
        capacitance: false,
        update: super::Update::Classic,
        check_every: None,
    }
}

pub fn run(device: &Device, args: &clap::ArgMatches) -> Result<Report> {
    let a =
        ElectrostaticsBenchArgs::from_arg_matches(args).map_err(|e| Error::Parse(e.to_string()))?;
    let gpu = matches!(device, Device::Cuda(_));
    let cells = a.cells.unwrap_or(if gpu { 511 } else { 96 });
    let iterations = a.iterations.unwrap_or(if gpu { 1000 } else { 10 });
    if !(2..=2048).contains(&cells) || !(1..=1 << 40).contains(&iterations) || a.repetitions == 0 {
        return Err(Error::invalid(
            "--cells/--iterations/--repetitions",
            format!("{cells}/{iterations}/{}", a.repetitions),
            "cells in [2, 2048], at least 1 iteration and 1 repetition",
        ));
    }
    if a.poisson {
        return poisson(device, a.precision, a.repetitions);
    }
    let p = problem(cells, iterations);
    let only = match &a.kernel {
        None => None,
        Some(name) => Some(
            SweepKernel::from_name(name)
                .ok_or_else(|| Error::invalid("--kernel", name, SweepKernel::NAMES))?,
        ),
    };
    let kernels: Vec<Option<SweepKernel>> = match device {
        Device::Cuda(_) => SweepKernel::ALL
            .into_iter()
            .filter(|&k| only.is_none_or(|o| o == k))
            .map(Some)
            .collect(),
        // The CPU engine of the classic update, or with `--kernel blocked` of the table form.
        Device::Cpu { .. } => vec![only.filter(|&k| k == SweepKernel::Blocked)],
    };
    let mut cases = Vec::new();
    for kernel in kernels {
        cases.push(match a.precision {
            Precision::F32 => case::<f32>(device, &p, kernel, a.repetitions)?,
            Precision::F64 => case::<f64>(device, &p, kernel, a.repetitions)?,
        });
    }
    let mut human = format!(
        "electrostatics bench on {}\n{}  {}³ nodes {}, {} red-black iterations, median of {}\n",
        cases[0].device,
        cases[0].ceilings.human(),
        cells + 1,
        cases[0].precision,
        cases[0].iterations,
        a.repetitions,
    );
    for b in &cases {
        human += &format!(
            "  {}: {}, {} per iteration, {:.3} Gnode/s\n    {:.1} B/node/iteration, {:.1} % of copy bandwidth; model {} per iteration at the copy bandwidth (nodes × B/node ÷ copy), measured {:.2}× the model\n    launch: {}\n",
            b.kernel,
            crate::units::seconds(b.seconds),
            crate::units::seconds(b.measured_s_per_iteration),
            b.gnodes_per_s,
            b.bytes_per_node,
            100.0 * b.fraction_of_copy_bandwidth,
            crate::units::seconds(b.predicted_s_per_iteration),
            b.measured_s_per_iteration / b.predicted_s_per_iteration,
            b.launch
        );
    }
    if let [per_colour, others @ ..] = &cases[..] {
        for b in others {
            human += &format!(
                "  {} vs per-colour: {:.2}× faster; {:.2}× the per-colour kernel's floor ({} per iteration)\n",
                b.kernel,
                per_colour.seconds / b.seconds,
                b.measured_s_per_iteration / per_colour.predicted_s_per_iteration,
                crate::units::seconds(per_colour.predicted_s_per_iteration),
            );
        }
    }
    Ok(Report {
        human,
        json: serde_json::to_value(ElectrostaticsBenches { cases }).expect("serialises"),
    })
}

fn case<T: Real>(
    device: &Device,
    p: &ElectrostaticsProblem,
    kernel: Option<SweepKernel>,
    reps: usize,
) -> Result<ElectrostaticsBench> {
    let ceilings = ceilings_for(device)?;
    let g = Geometry::build(p)?;
    let (mut e, launch, class_bits): (Box<dyn crate::run::Engine<Real = T>>, String, u8) =
        match device {
            // The table form's engine, on either backend.
            _ if kernel == Some(SweepKernel::Blocked) => {
                let table = ElectrostaticsProblem {
                    update: super::Update::Table,
                    ..p.clone()
                };
                let e = super::engine::<T>(&table, &g, device, None)?;
                let s = e.describe().unwrap_or_default();
                (e, s, 8)
            }
            Device::Cuda(gpu) => {
                let c = super::cuda::CudaElectrostatics::<T>::new(
                    gpu.clone(),
                    p,
                    &g,
                    None,
                    super::Launch {
                        kernel,
                        ..super::Launch::from_env()?
                    },
                )?;
                let (s, bits) = (c.launch_summary()?, c.class_bits());
                (Box::new(c), s, bits)
            }
            Device::Cpu { .. } => (
                super::engine::<T>(p, &g, device, None)?,
                "rayon over z-planes".into(),
                8,
            ),
        };
    e.advance(1)?;
    e.diagnostics()?;
    let times = sorted_seconds(device, e.as_mut(), p.max_iterations, reps)?;
    let seconds = times[times.len() / 2];
    let nodes = p.points();
    let bytes_per_node =
        bytes_per_node::<T>(kernel.unwrap_or(SweepKernel::PerColour), false, class_bits);
    let rate = nodes as f64 * p.max_iterations as f64 / seconds;
    Ok(ElectrostaticsBench {
        device: device.describe(),
        precision: T::PRECISION.to_string(),
        nodes,
        iterations: p.max_iterations,
        kernel: match (device, kernel) {
            (Device::Cpu { .. }, Some(_)) => "cpu (table form)",
            (_, k) => k.map_or("cpu", SweepKernel::name),
        }
        .into(),
        seconds,
        gnodes_per_s: rate * 1e-9,
        bytes_per_node,
        fraction_of_copy_bandwidth: rate * bytes_per_node / ceilings.copy_bandwidth,
        predicted_s_per_iteration: nodes as f64 * bytes_per_node / ceilings.copy_bandwidth,
        measured_s_per_iteration: seconds / p.max_iterations as f64,
        launch,
        ceilings,
    })
}

/// Bytes one red-black iteration must move per node in keisan's colour-split layout. Per
/// colour (and on the CPU): each colour's sweep reads V and the class codes whole (its own
/// half, and the other colour's half as neighbours, once if the caches keep the rows j±1)
/// and writes back only its own half of V: 3T + 2 with a byte per code, 3T + 1 with 4-bit
/// codes (`class_bits` 4). Fused: V read once from one buffer and written once to the
/// other, the code read once: 2T + 1. Blocked (natural layout, 16-bit ids): per pass of
/// two iterations V read and written once and the id read once, 2T + 2 over two. A per-node
/// charge adds its value once a pass. (An
/// interleaved in-place layout moves a value more per colour: each sweep writes back every
/// sector of V.)
pub fn bytes_per_node<T: Real>(kernel: SweepKernel, charge_per_node: bool, class_bits: u8) -> f64 {
    let t = std::mem::size_of::<T>() as f64;
    // A pass's bytes per node, and the iterations it does.
    let (v, iterations) = match kernel {
        SweepKernel::Fused => (2.0 * t + 1.0, 1.0),
        // V read and written once, the 16-bit id read once, per pass of two iterations.
        SweepKernel::Blocked => (2.0 * t + 2.0, 2.0),
        SweepKernel::PerColour | SweepKernel::Persistent | SweepKernel::Staged => {
            (3.0 * t + 2.0 * class_bits as f64 / 8.0, 1.0)
        }
    };
    (v + if charge_per_node { t } else { 0.0 }) / iterations
}

fn poisson(device: &Device, precision: Precision, reps: usize) -> Result<Report> {
    let problem = crate::problem::parse(
        POISSON_EXAMPLE,
        "examples/electrostatics-poisson-128.toml",
        None,
        &crate::problem::Overrides {
            precision: Some(precision),
            ..Default::default()
        },
    )?;
    let p = problem
        .spec_as::<ElectrostaticsProblem>()
        .expect("the example is an electrostatics problem");
    let b = match precision {
        Precision::F32 => poisson_case::<f32>(device, p, reps)?,
        Precision::F64 => poisson_case::<f64>(device, p, reps)?,
    };
    let human = format!(
        "electrostatics time to solution on {}\n{}  grounded box, {}³ interior nodes, random ρ, {}, median of {}\n  {} iterations ({}), {} to solution, ‖b − Av‖/‖b‖ = {:.2e}\n  {:.1} % of copy bandwidth over the iterations ({:.1} B/node/iteration)\n",
        b.device,
        b.ceilings.human(),
        p.counts()[0] - 2,
        b.precision,
        reps,
        b.iterations,
        if b.converged {
            "converged"
        } else {
            "NOT converged"
        },
        crate::units::seconds(b.seconds_to_solution),
        b.true_relative_residual,
        100.0 * b.fraction_of_copy_bandwidth,
        b.bytes_per_node,
    );
    Ok(Report {
        human,
        json: serde_json::to_value(&b).expect("serialises"),
    })
}

fn poisson_case<T: Real>(
    device: &Device,
    p: &ElectrostaticsProblem,
    reps: usize,
) -> Result<PoissonBench> {
    let ceilings = ceilings_for(device)?;
    let g = Geometry::build(p)?;
    let hidden = crate::run::progress_bar(0, true);
    // One untimed solve compiles the kernels and warms the caches.
    let mut runs = Vec::new();
    for _ in 0..=reps {
        let mut e = super::engine::<T>(p, &g, device, None)?;
        e.diagnostics()?;
        let t = std::time::Instant::now();
        let out = crate::run::drive(e.as_mut(), p.max_iterations, &hidden)?;
        let seconds = t.elapsed().as_secs_f64();
        let v = e.snapshot()?;
        runs.push((seconds, out, super::cpu::true_residual(p, &g, &v.data)));
    }
    runs.remove(0);
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (seconds, out, residual) = runs.swap_remove(runs.len() / 2);
    let (kernel, class_bits) = match device {
        Device::Cuda(_) => {
            let launch = super::Launch::from_env()?;
            let classes = super::cuda::Classes::of(&g)?.present;
            let kernel = launch.kernel_for(T::PRECISION, &g);
            (
                kernel,
                super::cuda::class_bits(kernel, launch.class_bits, classes)?,
            )
        }
        Device::Cpu { .. } => (SweepKernel::PerColour, 8),
    };
    let bytes_per_node = bytes_per_node::<T>(kernel, true, class_bits);
    let nodes = p.points();
    Ok(PoissonBench {
        device: device.describe(),
        precision: T::PRECISION.to_string(),
        nodes,
        iterations: out.steps,
        converged: out.status == crate::run::Status::Converged,
        seconds_to_solution: seconds,
        true_relative_residual: residual,
        bytes_per_node,
        fraction_of_copy_bandwidth: nodes as f64 * out.steps as f64 * bytes_per_node
            / seconds
            / ceilings.copy_bandwidth,
        ceilings,
    })
}
