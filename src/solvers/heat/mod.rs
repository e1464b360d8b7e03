//! Explicit (FTCS) heat equation in 1D, 2D and 3D (seed 002), in-core.
//!
//! `U ← U + Σ_a r_a·(U[p+e_a] + U[p−e_a] − 2U[p])`, `r_a = α²·Δt/h_a²`, Dirichlet boundaries
//! (boundary points keep their values). Stable for Σ_a r_a ≤ 1/2 (r ≤ 1/(2d) with equal
//! spacing). Fields are row-major, last axis fastest; the domain is `[0,1]` per axis unless
//! `spacing` says otherwise.
//!
//! Engines: in-core CPU ([`cpu`]) and CUDA ([`cuda`]); out-of-core by the pyramid method
//! ([`pyramid`]) on either, with the plan chosen by the cost model ([`model`]) as the
//! problem's [`strategy`] says.

pub mod bench;
pub mod cpu;
pub mod cuda;
pub mod cuda_slab;
pub mod initial;
pub mod model;
pub mod pyramid;
mod solver;
pub mod step_kernel;
pub mod strategy;

use serde::{Deserialize, Serialize};

pub use initial::Initial;
pub use pyramid::Decomposition;
pub use solver::HEAT;
pub use strategy::{Layout, OutOfCore, Strategy};

use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::parallel::{Distributed, windows};
use crate::precision::{Precision, Real};
use crate::run::{Engine, Restart};

/// The most steps per in-core temporal-blocking pass a problem may ask for.
pub const MAX_TEMPORAL_BLOCK: usize = 64;

/// The `[heat]` table of a problem file, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeatConfig {
    /// Points per axis, slowest first: `[nx]`, `[ny, nx]` or `[nz, ny, nx]`.
    pub shape: Vec<i64>,
    /// Grid spacing per axis (same order); default 1/(n−1), the unit interval.
    #[serde(default)]
    pub spacing: Option<Vec<f64>>,
    /// α² of the equation U_t = α²ΔU.
    #[serde(default = "one")]
    pub diffusivity: f64,
    pub dt: f64,
    pub steps: i64,
    #[serde(default)]
    pub initial: Initial,
    /// "auto" (in-core when it fits the device budget), "in-core", "pyramid", "trivial".
    #[serde(default)]
    pub strategy: Strategy,
    /// "1d" (bands) or "2d" (blocks); default: the cost model's choice.
    #[serde(default)]
    pub decomposition: Option<Decomposition>,
    /// Steps per pass of the pyramid; default: the cost model's choice.
    #[serde(default)]
    pub pyramid_height: Option<i64>,
    /// Device memory to use, e.g. "8GiB" or a number of bytes; default: free less a margin.
    #[serde(default)]
    pub device_memory: Option<crate::units::ByteSize>,
    /// Out-of-core on a GPU: page-lock the host grid so the copy engines move boxes to and
    /// from it directly (default true; false gathers and scatters through pinned buffers,
    /// for hosts where locking that much memory is unwelcome).
    #[serde(default)]
    pub pin_host_grid: Option<bool>,
    /// Steps per pass of the in-core CUDA engine's temporal blocking (1: single-step
    /// passes); default: the fastest measured for the grid's dimension and precision.
    #[serde(default)]
    pub temporal_block: Option<i64>,
}

fn one() -> f64 {
    1.0
}

/// A validated heat problem; axes padded to three, slowest first (unused axes have 1 point).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeatProblem {
    pub dims: usize,
    pub shape: [usize; 3],
    pub spacing: [f64; 3],
    pub diffusivity: f64,
    pub dt: f64,
    pub steps: u64,
    pub initial: Initial,
    pub ooc: OutOfCore,
    /// Steps per in-core CUDA pass; None: the default for the dimension and precision.
    pub temporal_block: Option<usize>,
}

/// The most steps per pyramid pass a problem may ask for.
pub const MAX_PYRAMID_HEIGHT: i64 = 1 << 20;

impl HeatConfig {
    /// Check every field; `precision` is the one the run will use (initial values must
    /// stay finite in its arithmetic).
    pub fn validate(self, precision: Precision) -> Result<HeatProblem> {
        let dims = self.shape.len();
        if !(1..=3).contains(&dims) {
            return Err(Error::invalid(
                "heat.shape",
                format!("{:?}", self.shape),
                "give 1, 2 or 3 extents, slowest axis first, e.g. [256, 256]",
            ));
        }
        let mut shape = [1usize; 3];
        for (k, &n) in self.shape.iter().enumerate() {
            if !(3..=i32::MAX as i64).contains(&n) {
                return Err(Error::invalid(
                    "heat.shape",
                    format!("{:?}", self.shape),
                    format!(
                        "each extent must be in [3, {}] (the boundary takes two points)",
                        i32::MAX
                    ),
                ));
            }
            shape[3 - dims + k] = n as usize;
        }
        crate::units::checked_cells("heat.shape", &shape, 2 * precision.bytes())?;
        let mut spacing = [1.0f64; 3];
        match &self.spacing {
            Some(h) if h.len() != dims => {
                return Err(Error::invalid(
                    "heat.spacing",
                    format!("{h:?}"),
                    format!("give one spacing per axis ({dims})"),
                ));
            }
            Some(h) => {
                for (k, &v) in h.iter().enumerate() {
                    if !(v > 0.0 && v.is_finite()) {
                        return Err(Error::invalid(
                            "heat.spacing",
                            format!("{h:?}"),
                            "spacings must be finite and > 0",
                        ));
                    }
                    spacing[3 - dims + k] = v;
                }
            }
            None => {
                for k in 3 - dims..3 {
                    spacing[k] = 1.0 / (shape[k] - 1) as f64;
                }
            }
        }
        if !(self.diffusivity > 0.0 && self.diffusivity.is_finite()) {
            return Err(Error::invalid(
                "heat.diffusivity",
                self.diffusivity,
                "must be finite and > 0",
            ));
        }
        if self.steps < 1 {
            return Err(Error::invalid(
                "heat.steps",
                self.steps,
                "at least 1 step is needed",
            ));
        }
        if let Some(n) = self.pyramid_height {
            if !(1..=MAX_PYRAMID_HEIGHT).contains(&n) {
                return Err(Error::invalid(
                    "heat.pyramid_height",
                    n,
                    format!("steps per pyramid pass must be in [1, {MAX_PYRAMID_HEIGHT}]"),
                ));
            }
            if n > self.steps {
                return Err(Error::invalid(
                    "heat.pyramid_height",
                    n,
                    format!(
                        "a pass cannot be taller than the run (heat.steps = {}); use at most {}",
                        self.steps, self.steps
                    ),
                ));
            }
        }
        if let Some(t) = self.temporal_block {
            if !(1..=MAX_TEMPORAL_BLOCK as i64).contains(&t) {
                return Err(Error::invalid(
                    "heat.temporal_block",
                    t,
                    format!(
                        "steps per pass must be in [1, {MAX_TEMPORAL_BLOCK}] (1: no temporal blocking)"
                    ),
                ));
            }
            if dims == 1 && t > 1 {
                return Err(Error::invalid(
                    "heat.temporal_block",
                    t,
                    "temporal blocking is for 2D and 3D grids; use 1 or leave it out",
                ));
            }
        }
        let device_memory = match self.device_memory {
            Some(b) => Some(b.bytes("heat.device_memory")?),
            None => None,
        };
        let p = HeatProblem {
            dims,
            shape,
            spacing,
            diffusivity: self.diffusivity,
            dt: self.dt,
            steps: self.steps as u64,
            initial: self.initial,
            ooc: OutOfCore {
                strategy: self.strategy,
                decomposition: self.decomposition,
                pyramid_height: self.pyramid_height.map(|n| n as usize),
                device_memory,
                pin_host_grid: self.pin_host_grid.unwrap_or(true),
                device_memory_from: "heat.device_memory",
            },
            temporal_block: self.temporal_block.map(|t| t as usize),
        };
        let max_dt = p.largest_stable_dt();
        if !(self.dt > 0.0 && self.dt <= max_dt) {
            return Err(Error::invalid(
                "heat.dt",
                crate::units::num(self.dt),
                format!(
                    "must be > 0 and within the FTCS stability limit Σ α²Δt/h² ≤ 1/2 \
                     (here Σ r = {:.4}); the largest stable dt is {max_dt:.6e}",
                    p.r().iter().sum::<f64>()
                ),
            ));
        }
        p.initial.validate(&p.user_shape(), precision)?;
        Ok(p)
    }
}

impl HeatProblem {
    /// r_a = α²Δt/h_a² per axis (0 for the padding axes).
    pub fn r(&self) -> [f64; 3] {
        let mut r = [0.0; 3];
        for (k, rk) in r.iter_mut().enumerate().skip(3 - self.dims) {
            *rk = self.diffusivity * self.dt / (self.spacing[k] * self.spacing[k]);
        }
        r
    }

    pub fn largest_stable_dt(&self) -> f64 {
        let s: f64 = (3 - self.dims..3)
            .map(|k| 1.0 / (self.spacing[k] * self.spacing[k]))
            .sum();
        0.5 / (self.diffusivity * s)
    }

    pub fn cells(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of the two time layers in `precision`.
    pub fn field_bytes(&self, precision: Precision) -> u128 {
        2 * self.cells() as u128 * precision.bytes() as u128
    }

    /// The shape without padding axes, slowest first (the NumPy shape).
    pub fn user_shape(&self) -> Vec<usize> {
        self.shape[3 - self.dims..].to_vec()
    }

    pub fn user_spacing(&self) -> Vec<f64> {
        self.spacing[3 - self.dims..].to_vec()
    }
}

/// Build the engine the problem's strategy asks for on `device`, from the initial field.
pub fn engine<T: Real>(
    problem: &HeatProblem,
    device: &Device,
) -> Result<(Box<dyn Engine<Real = T>>, Layout)> {
    engine_resumed::<T>(problem, device, None)
}

/// As [`engine`], continuing from a checkpoint's state when given.
pub fn engine_resumed<T: Real>(
    problem: &HeatProblem,
    device: &Device,
    restart: Option<Restart<T>>,
) -> Result<(Box<dyn Engine<Real = T>>, Layout)> {
    let (u0, step) = start_field(problem, restart)?;
    start_from(problem, device, u0, step)
}

/// [`engine_resumed`] over a placement: one device as before, or the grid in slabs of
/// the slowest axis (in-core on every slab), one per subdomain.
pub fn engine_placed<T: Real>(
    p: &HeatProblem,
    placement: &Placement,
    restart: Option<Restart<T>>,
) -> Result<(Box<dyn Engine<Real = T>>, Layout)> {
    if placement.is_single() {
        return engine_resumed(p, placement.first(), restart);
    }
    let n = placement.total();
    if p.dims == 1 {
        return Err(Error::invalid(
            placement.parts_field(),
            n,
            "a 1D heat grid runs on one device (slabs cut the slowest axis of 2D and 3D grids)",
        ));
    }
    if !matches!(p.ooc.strategy, Strategy::Auto | Strategy::InCore) {
        return Err(Error::invalid(
            placement.parts_field(),
            n,
            "decomposed heat runs are in-core on every slab: leave heat.strategy out",
        ));
    }
    let layers = p.shape[slab_axis(p.dims)];
    let q = p.clone();
    let field_of = move |data| field_of(&q, data);
    let gpus = placement.gpus()?;
    let halo = match &gpus {
        None => 1,
        Some(g) => cuda_slab::CudaHeatSlab::<T>::steps_per_pass(&g[0], p)? as usize,
    };
    let all = windows(layers, n, halo, false, placement.parts_field())?;
    // Under mpirun a rank computes only the layers its slab holds (the rest of the
    // whole-size buffer stays zero and unmapped), so no rank needs the whole grid.
    let held = placement.world.map(|_| {
        let mut rows: Vec<usize> = placement
            .ids()
            .iter()
            .flat_map(|&i| {
                let w = &all[i];
                (0..w.rows).map(move |l| w.grid_row(l))
            })
            .collect();
        rows.sort_unstable();
        rows.dedup();
        rows
    });
    let (u0, step) = match (restart, held) {
        (None, Some(rows)) => (initial::layers::<T>(p, &rows)?, 0),
        (restart, _) => start_field(p, restart)?,
    };
    let engine: Box<dyn Engine<Real = T>> = match gpus {
        None => {
            let build = |_, w| cpu::CpuHeat::on_window(p, w, &u0, step);
            Box::new(Distributed::on(placement, all, build, field_of)?)
        }
        Some(gpus) => {
            let build =
                |k: usize, w| cuda_slab::CudaHeatSlab::on_window(gpus[k].clone(), p, w, &u0, step);
            Box::new(Distributed::on(placement, all, build, field_of)?)
        }
    };
    Ok((engine, Layout::in_core(0)))
}

/// The field a run starts from and its step: the checkpoint's, or the initial field.
fn start_field<T: Real>(p: &HeatProblem, restart: Option<Restart<T>>) -> Result<(Vec<T>, u64)> {
    Ok(match restart {
        Some(mut r) => (r.take("u")?, r.step),
        None => (initial::field::<T>(p)?, 0),
    })
}

/// As [`engine`], from a given initial field (n values, row-major; boundary values stay).
pub fn engine_from<T: Real>(
    problem: &HeatProblem,
    device: &Device,
    u0: Vec<T>,
) -> Result<(Box<dyn Engine<Real = T>>, Layout)> {
    start_from(problem, device, u0, 0)
}

/// The engine with `u` as the field after `step` steps.
fn start_from<T: Real>(
    problem: &HeatProblem,
    device: &Device,
    u: Vec<T>,
    step: u64,
) -> Result<(Box<dyn Engine<Real = T>>, Layout)> {
    if u.len() != problem.cells() {
        return Err(Error::invalid(
            "initial field",
            u.len(),
            format!("expected {} values", problem.cells()),
        ));
    }
    strategy::build(problem, device, u, step)
}

/// The axis (of `shape`, slowest first) decomposed runs cut into slabs: z in 3D, y in 2D
/// (1D grids run whole).
pub fn slab_axis(dims: usize) -> usize {
    if dims == 3 { 0 } else { 1 }
}

/// Values per layer of the slab axis.
pub fn layer_len(p: &HeatProblem) -> usize {
    p.shape[slab_axis(p.dims) + 1..].iter().product()
}

/// Wrap a host copy of U with the grid's geometry.
pub(crate) fn field_of<T>(p: &HeatProblem, data: Vec<T>) -> crate::run::Field<T> {
    crate::run::Field {
        name: "u",
        shape: p.user_shape(),
        spacing: p.user_spacing(),
        origin: vec![0.0; p.dims],
        coords: None,
        data,
    }
}
