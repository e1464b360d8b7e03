//! Cubic semi-Lagrangian advection in 2D (seed 000, the GPU Challenge 2010 problem).
//!
//! f^{n+1}(x, y) = f^n(x − uΔt, y − vΔt): with du = −uΔt/Δx and dv = −vΔt/Δy at the
//! arrival point, a cubic upwind interpolation in x on the five rows j−2..j+2, then one in
//! y. The contest keeps the outer two cells of every side at their initial values and
//! needs |du|, |dv| ≤ 1; periodic boundaries wrap instead. Fields are row-major [ny, nx]
//! (x fastest): NumPy shape (ny, nx). Node (i, j) sits at (i·Δx, j·Δy).
//!
//! Engines: CPU ([`cpu`], the two-branch form, the reference) and CUDA ([`cuda`], the
//! study's branch-free form).

pub mod bench;
pub mod cpu;
pub mod cuda;
pub mod presets;
mod solver;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use presets::{Initial, Velocity};
pub use solver::ADVECTION;

use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::parallel::{Distributed, Window, windows};
use crate::precision::{Precision, Real};
use crate::run::{Engine, Field, Restart};

/// Boundary treatment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Boundary {
    /// The contest's: the outer two cells of every side keep their initial values.
    #[default]
    Contest,
    /// Both axes wrap around.
    Periodic,
}

/// The `[advection]` table of a problem file, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvectionConfig {
    pub nx: i64,
    pub ny: i64,
    /// Cell sizes; default 1/nx and 1/ny (the unit square, periodic or not).
    #[serde(default)]
    pub dx: Option<f64>,
    #[serde(default)]
    pub dy: Option<f64>,
    pub steps: i64,
    /// The time step, or `cfl`: the largest |du|, |dv| over the grid (dt follows).
    #[serde(default)]
    pub dt: Option<f64>,
    #[serde(default)]
    pub cfl: Option<f64>,
    pub velocity: Velocity,
    pub initial: Initial,
    #[serde(default)]
    pub boundary: Boundary,
    /// CUDA steps per pass through device memory (1: one launch per step); default: the
    /// fastest measured for the precision. Steady velocities only (the swirl takes 1).
    #[serde(default)]
    pub steps_per_pass: Option<i64>,
}

/// The most steps per pass a problem may ask for.
pub const MAX_STEPS_PER_PASS: i64 = 8;

/// A validated advection problem.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdvectionProblem {
    pub nx: usize,
    pub ny: usize,
    pub dx: f64,
    pub dy: f64,
    pub dt: f64,
    pub steps: u64,
    pub velocity: Velocity,
    pub initial: Initial,
    pub boundary: Boundary,
    pub steps_per_pass: Option<usize>,
}

/// The smallest grid: the five-point stencil and two boundary cells per side.
pub const MIN_CELLS: i64 = 5;

impl AdvectionConfig {
    pub fn validate(self, precision: Precision) -> Result<AdvectionProblem> {
        for (field, n) in [("advection.nx", self.nx), ("advection.ny", self.ny)] {
            if !(MIN_CELLS..=i32::MAX as i64).contains(&n) {
                return Err(Error::invalid(
                    field,
                    n,
                    format!(
                        "must be in [{MIN_CELLS}, {}]: the stencil reaches two cells each way",
                        i32::MAX
                    ),
                ));
            }
        }
        let (nx, ny) = (self.nx as usize, self.ny as usize);
        crate::units::checked_cells("advection grid", &[ny, nx], 4 * precision.bytes())?;
        let spacing = |field: &str, h: Option<f64>, n: usize| match h {
            None => Ok(1.0 / n as f64),
            Some(h) if h > 0.0 && h.is_finite() => Ok(h),
            Some(h) => Err(Error::invalid(field, h, "must be finite and > 0")),
        };
        let dx = spacing("advection.dx", self.dx, nx)?;
        let dy = spacing("advection.dy", self.dy, ny)?;
        if let Some(n) = self.steps_per_pass {
            if !(1..=MAX_STEPS_PER_PASS).contains(&n) {
                return Err(Error::invalid(
                    "advection.steps_per_pass",
                    n,
                    format!("must be in [1, {MAX_STEPS_PER_PASS}] (1: one launch per step)"),
                ));
            }
            if n > 1 && self.velocity.is_time_dependent() {
                return Err(Error::invalid(
                    "advection.steps_per_pass",
                    n,
                    "several steps per pass need a velocity that does not change in time; \
                     the swirl takes 1",
                ));
            }
        }
        if self.steps < 1 {
            return Err(Error::invalid(
                "advection.steps",
                self.steps,
                "at least 1 step is needed",
            ));
        }
        let mut p = AdvectionProblem {
            nx,
            ny,
            dx,
            dy,
            dt: 0.0,
            steps: self.steps as u64,
            velocity: self.velocity,
            initial: self.initial,
            boundary: self.boundary,
            steps_per_pass: self.steps_per_pass.map(|n| n as usize),
        };
        p.velocity.validate(&p)?;
        // The largest |u|/Δx, |v|/Δy the run meets: dt times it is the largest |du|, |dv|.
        let rate = p.velocity.max_rate(&p)?;
        if !rate.is_finite() {
            return Err(Error::invalid(
                "advection.velocity",
                crate::units::num(rate),
                "the largest |u|/Δx or |v|/Δy overflows a double: the velocity is too large \
                 for this grid's spacing",
            ));
        }
        p.dt = match (self.dt, self.cfl) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "advection.cfl",
                    "given with advection.dt",
                    "give dt or cfl, not both",
                ));
            }
            (None, None) => {
                return Err(Error::invalid(
                    "advection.dt",
                    "missing",
                    "give dt, or cfl (the largest |du|, |dv|, at most 1)",
                ));
            }
            (Some(dt), None) => {
                if !(dt > 0.0 && dt.is_finite()) {
                    return Err(Error::invalid("advection.dt", dt, "must be finite and > 0"));
                }
                if dt * rate > 1.0 {
                    return Err(Error::invalid(
                        "advection.dt",
                        crate::units::num(dt),
                        format!(
                            "gives |du| or |dv| = {:.4} somewhere; the scheme needs |u|Δt/Δx and \
                             |v|Δt/Δy ≤ 1: the largest allowed dt is {:.6e}",
                            dt * rate,
                            1.0 / rate
                        ),
                    ));
                }
                dt
            }
            (None, Some(c)) => {
                if !(c > 0.0 && c <= 1.0) {
                    return Err(Error::invalid(
                        "advection.cfl",
                        c,
                        "must be in (0, 1]: the largest |du|, |dv| per step",
                    ));
                }
                if rate == 0.0 {
                    return Err(Error::invalid(
                        "advection.cfl",
                        c,
                        "the velocity is zero everywhere, so no dt gives this CFL number; give dt",
                    ));
                }
                c / rate
            }
        };
        // dt is derived (cfl / rate) or multiplied into the end time: both must be numbers
        // the steps can use.
        let end = p.dt * p.steps as f64;
        if !(p.dt.is_normal() && end.is_finite()) {
            let field = if self.cfl.is_some() {
                "advection.cfl"
            } else {
                "advection.dt"
            };
            return Err(Error::invalid(
                field,
                crate::units::num(self.cfl.or(self.dt).unwrap_or(0.0)),
                format!(
                    "gives dt = {:e} and an end time of {:e}: not numbers a run can step \
                     through (the velocity's largest |u|/Δx, |v|/Δy is {:e})",
                    p.dt, end, rate
                ),
            ));
        }
        p.initial.validate(&p)?;
        Ok(p)
    }
}

impl AdvectionProblem {
    pub fn cells(&self) -> usize {
        self.nx * self.ny
    }

    /// The NumPy shape of a field.
    pub fn shape(&self) -> Vec<usize> {
        vec![self.ny, self.nx]
    }

    pub fn periodic(&self) -> bool {
        self.boundary == Boundary::Periodic
    }

    /// Whether cell (i, j) is updated (not one of the contest's fixed outer cells).
    pub fn updated(&self, i: usize, j: usize) -> bool {
        self.periodic() || (i >= 2 && i + 2 < self.nx && j >= 2 && j + 2 < self.ny)
    }

    /// The domain's size (the period when periodic).
    pub fn extent(&self) -> [f64; 2] {
        [self.nx as f64 * self.dx, self.ny as f64 * self.dy]
    }
}

pub(crate) fn field_of<T>(p: &AdvectionProblem, data: Vec<T>) -> Field<T> {
    Field {
        name: "f",
        shape: p.shape(),
        spacing: vec![p.dy, p.dx],
        origin: vec![0.0, 0.0],
        coords: None,
        data,
    }
}

/// The engine for `device`, from `initial` (presets::initial_field, built by the caller,
/// who needs it too) or a checkpoint's state.
pub fn engine<T: Real>(
    p: &AdvectionProblem,
    placement: &Placement,
    restart: Option<Restart<T>>,
    initial: Vec<T>,
) -> Result<Box<dyn Engine<Real = T>>> {
    let (f0, step) = match restart {
        Some(mut r) => (r.take("f")?, r.step),
        None => (initial, 0),
    };
    if placement.is_single() {
        return Ok(match placement.first() {
            Device::Cpu { .. } => Box::new(cpu::CpuAdvection::new(p, f0, step)?),
            Device::Cuda(gpu) => Box::new(cuda::CudaAdvection::new(gpu.clone(), p, f0, step)?),
        });
    }
    slabs(p, placement, &f0, step, cuda::VelocitySource::Kernel)
}

/// The grid in row slabs, one per subdomain of `placement`, as one engine. A slab's halo
/// is 2 rows per step its launches take (CUDA passes of several steps exchange once).
pub fn slabs<T: Real>(
    p: &AdvectionProblem,
    placement: &Placement,
    f0: &[T],
    step: u64,
    source: cuda::VelocitySource,
) -> Result<Box<dyn Engine<Real = T>>> {
    let q = p.clone();
    let field_of = move |data| field_of(&q, data);
    let all = slab_windows::<T>(p, placement, source)?;
    Ok(match placement.gpus()? {
        None => {
            let build = |_, w| cpu::CpuAdvection::on_window(p, w, f0, step);
            Box::new(Distributed::on(placement, all, build, field_of)?)
        }
        Some(gpus) => {
            let build = |k: usize, w| {
                cuda::CudaAdvection::on_window(gpus[k].clone(), p, w, f0, step, source)
            };
            Box::new(Distributed::on(placement, all, build, field_of)?)
        }
    })
}

/// The row slabs of `placement`: a halo of 2 rows per step a launch takes (CUDA passes of
/// several steps exchange once).
pub(crate) fn slab_windows<T: Real>(
    p: &AdvectionProblem,
    placement: &Placement,
    source: cuda::VelocitySource,
) -> Result<Vec<Window>> {
    let steps = match placement.gpus()? {
        None => 1,
        Some(_) => cuda::CudaAdvection::<T>::steps_per_pass_for(p, source)? as usize,
    };
    windows(
        p.ny,
        placement.total(),
        2 * steps,
        p.periodic(),
        placement.parts_field(),
    )
}

/// Where a relative file path in the table is taken from.
pub(crate) fn resolve(cfg: &mut AdvectionConfig, resolve: &dyn Fn(&str, &PathBuf) -> PathBuf) {
    if let Initial::File { path } = &mut cfg.initial {
        *path = resolve("advection.initial.path", path);
    }
    if let Velocity::File { u, v } = &mut cfg.velocity {
        *u = resolve("advection.velocity.u", u);
        *v = resolve("advection.velocity.v", v);
    }
}
