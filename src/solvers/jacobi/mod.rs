//! Jacobi iteration for the 2D Helmholtz equation u_xx + u_yy − αu = f on [−1,1]²
//! with u = 0 on the boundary (seed 004, the PGI accelerator study).
//!
//! Grid: n points in x, m in y, stored row-major with x fastest (`u[j*n + i]`, a NumPy
//! array of shape (m, n)). Each sweep over the interior computes
//! `resid = (ax(u[i−1,j]+u[i+1,j]) + ay(u[i,j−1]+u[i,j+1]) + b·u[i,j] − f[i,j]) / b` and
//! `u_new = u − ω·resid`; the residual norm is sqrt(Σ resid²)/(n·m).

pub mod bench;
pub mod cpu;
pub mod cuda;
pub mod cuda_slab;
mod manufactured;
mod solver;

use serde::{Deserialize, Serialize};

pub use manufactured::Manufactured;
pub use solver::JACOBI;

use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::parallel::{Distributed, windows};
use crate::precision::{Precision, Real};
use crate::run::{Engine, Restart};

/// The `[jacobi]` table of a problem file, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JacobiConfig {
    pub n: i64,
    pub m: i64,
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    #[serde(default = "default_relax")]
    pub relax: f64,
    #[serde(default)]
    pub tolerance: f64,
    pub max_iterations: i64,
    #[serde(default)]
    pub exact: Manufactured,
}

fn default_alpha() -> f64 {
    1.0
}
fn default_relax() -> f64 {
    1.0
}

/// Largest extent along one axis: kernels index a row or a column with 32-bit ints.
pub const MAX_EXTENT: i64 = i32::MAX as i64;

impl JacobiConfig {
    /// Check every field; `precision` is the one the run will use (coefficients must be
    /// finite in it).
    pub fn validate(self, precision: Precision) -> Result<JacobiProblem> {
        for (field, v) in [("jacobi.n", self.n), ("jacobi.m", self.m)] {
            if !(3..=MAX_EXTENT).contains(&v) {
                return Err(Error::invalid(
                    field,
                    v,
                    format!(
                        "grid points per axis must be in [3, {MAX_EXTENT}] \
                         (the boundary takes two of them)"
                    ),
                ));
            }
        }
        if !(self.relax > 0.0 && self.relax < 2.0) {
            return Err(Error::invalid(
                "jacobi.relax",
                self.relax,
                "the relaxation factor ω must lie in the open interval (0, 2)",
            ));
        }
        if !(self.tolerance >= 0.0 && self.tolerance.is_finite()) {
            return Err(Error::invalid(
                "jacobi.tolerance",
                self.tolerance,
                "the residual tolerance must be a finite number ≥ 0 (0 stops only at an exactly zero residual)",
            ));
        }
        if self.max_iterations < 1 {
            return Err(Error::invalid(
                "jacobi.max_iterations",
                self.max_iterations,
                "at least 1 iteration is needed",
            ));
        }
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return Err(Error::invalid(
                "jacobi.alpha",
                self.alpha,
                "α must be a finite number ≥ 0 (for α < 0 the Jacobi iteration may diverge)",
            ));
        }
        crate::units::checked_cells(
            "jacobi.n × jacobi.m",
            &[self.m as usize, self.n as usize],
            3 * precision.bytes(),
        )?;
        let p = JacobiProblem {
            n: self.n as usize,
            m: self.m as usize,
            alpha: self.alpha,
            relax: self.relax,
            tolerance: self.tolerance,
            max_iterations: self.max_iterations as u64,
            exact: self.exact,
        };
        let c = p.coefficients();
        let limit = match precision {
            Precision::F32 => f32::MAX as f64,
            Precision::F64 => f64::MAX,
        };
        if c.b.is_nan() || c.b.abs() >= limit {
            return Err(Error::invalid(
                "jacobi.alpha",
                crate::units::num(self.alpha),
                format!(
                    "the diagonal coefficient −2/dx² − 2/dy² − α = {} overflows {precision}; \
                     use a smaller α or precision = \"f64\"",
                    crate::units::num(c.b)
                ),
            ));
        }
        Ok(p)
    }
}

/// A validated Jacobi problem.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JacobiProblem {
    pub n: usize,
    pub m: usize,
    pub alpha: f64,
    pub relax: f64,
    pub tolerance: f64,
    pub max_iterations: u64,
    pub exact: Manufactured,
}

/// Stencil coefficients; `rb = 1/b` so that no sweep divides.
#[derive(Debug, Clone, Copy)]
pub struct Coefficients {
    pub dx: f64,
    pub dy: f64,
    pub ax: f64,
    pub ay: f64,
    pub b: f64,
    pub rb: f64,
}

impl JacobiProblem {
    pub fn coefficients(&self) -> Coefficients {
        let dx = 2.0 / (self.n - 1) as f64;
        let dy = 2.0 / (self.m - 1) as f64;
        let ax = 1.0 / (dx * dx);
        let ay = 1.0 / (dy * dy);
        let b = -2.0 * ax - 2.0 * ay - self.alpha;
        Coefficients {
            dx,
            dy,
            ax,
            ay,
            b,
            rb: 1.0 / b,
        }
    }

    pub fn cells(&self) -> usize {
        self.n * self.m
    }

    /// Bytes of the three fields (u, u_new, f) in `precision`.
    pub fn field_bytes(&self, precision: Precision) -> u128 {
        3 * self.cells() as u128 * precision.bytes() as u128
    }

    /// The study's solution error sqrt(Σ(u − u_exact)²)/(n·m), from the sum of squares.
    pub fn solution_error_from_sum(&self, sum_sq: f64) -> f64 {
        sum_sq.sqrt() / self.cells() as f64
    }

    /// x and y of grid point (i, j).
    pub fn point(&self, i: usize, j: usize) -> (f64, f64) {
        let c = self.coefficients();
        (-1.0 + i as f64 * c.dx, -1.0 + j as f64 * c.dy)
    }
}

/// Where the initial fields come from.
pub enum Fields<T> {
    /// u = 0, f from the manufactured solution, built on the device itself.
    Manufactured,
    /// Given f and initial u (boundary values of u0 stay fixed), row-major n·m each.
    Given { f: Vec<T>, u0: Vec<T> },
}

/// What a Jacobi engine offers beyond [`Engine`].
pub trait JacobiEngine: Engine {
    /// sqrt(Σ(u − u_exact)²)/(n·m) of the current iterate, computed where the data lives.
    fn solution_error(&mut self) -> Result<f64>;
    /// Continue from iterate `u` after `step` sweeps (a checkpoint), in `status`.
    fn resume(&mut self, step: u64, status: crate::run::Status, u: &[Self::Real]) -> Result<()>;
}

/// Sweeps per pass through device memory on CUDA: 2 = temporal blocking.
pub const DEFAULT_SWEEPS_PER_PASS: u32 = 2;

/// Build the engine for `device`.
pub fn engine<T: Real>(
    problem: &JacobiProblem,
    device: &Device,
    fields: Fields<T>,
) -> Result<Box<dyn JacobiEngine<Real = T>>> {
    engine_with(problem, device, fields, DEFAULT_SWEEPS_PER_PASS)
}

/// The engine for the manufactured problem, continuing from a checkpoint's state when
/// given (u at that sweep; f is rebuilt from the problem).
pub fn engine_resumed<T: Real>(
    problem: &JacobiProblem,
    device: &Device,
    restart: Option<Restart<T>>,
) -> Result<Box<dyn JacobiEngine<Real = T>>> {
    let mut e = engine(problem, device, Fields::Manufactured)?;
    if let Some(mut r) = restart {
        let u = r.take("u")?;
        if u.len() != problem.cells() {
            return Err(Error::Parse(format!(
                "the checkpoint's u holds {} values; the problem has n·m = {}",
                u.len(),
                problem.cells()
            )));
        }
        e.resume(r.step, r.status, &u)?;
    }
    Ok(e)
}

/// The engine for `placement`: one device's, or CPU slabs of rows (one halo row each
/// side) whose row sums of squared residuals are added up over all slabs in row order
/// each sweep: residuals and the stopping sweep are those of one engine, bit for bit.
pub fn engine_placed<T: Real>(
    problem: &JacobiProblem,
    placement: &Placement,
    restart: Option<Restart<T>>,
) -> Result<Placed<T>> {
    if placement.is_single() {
        return Ok(Placed::One(engine_resumed(
            problem,
            placement.first(),
            restart,
        )?));
    }
    let restarted = restart.is_some();
    let (u, step, status) = match restart {
        Some(mut r) => (r.take("u")?, r.step, r.status),
        None => (
            vec![T::zero(); problem.cells()],
            0,
            crate::run::Status::Running,
        ),
    };
    if u.len() != problem.cells() {
        return Err(Error::Parse(format!(
            "the checkpoint's u holds {} values; the problem has n·m = {}",
            u.len(),
            problem.cells()
        )));
    }
    let q = problem.clone();
    let field_of = move |data| cpu::field_of(&q, data);
    if let Some(gpus) = placement.gpus()? {
        // CUDA slabs take two sweeps between exchanges: a halo of two rows.
        let halo = cuda_slab::SWEEPS_PER_EXCHANGE as usize;
        let all = windows(
            problem.m,
            placement.total(),
            halo,
            false,
            placement.parts_field(),
        )?;
        // A fresh start leaves u to the slabs' init kernel (zeros): uploading the
        // whole-grid zeros cost 10 ns a cell, 0.25 s for the seed case on 2 GPUs.
        let from = restarted.then_some((&u[..], step, status));
        let build =
            |k: usize, w| cuda_slab::CudaJacobiSlab::on_window(gpus[k].clone(), problem, w, from);
        return Ok(Placed::Slabs(Box::new(Distributed::on(
            placement, all, build, field_of,
        )?)));
    }
    let all = windows(
        problem.m,
        placement.total(),
        1,
        false,
        placement.parts_field(),
    )?;
    let build = |_, w| cpu::CpuJacobi::on_window(problem, w, &u, step, status);
    Ok(Placed::Slabs(Box::new(Distributed::on(
        placement, all, build, field_of,
    )?)))
}

/// A Jacobi run's engine: one device's, or slabs (whose solution error is taken from
/// the gathered iterate).
pub enum Placed<T: Real> {
    One(Box<dyn JacobiEngine<Real = T>>),
    Slabs(Box<dyn Engine<Real = T>>),
}

/// As [`engine`], choosing how many sweeps the CUDA engine does per pass (1 or 2); the
/// CPU engine always does one.
pub fn engine_with<T: Real>(
    problem: &JacobiProblem,
    device: &Device,
    fields: Fields<T>,
    sweeps_per_pass: u32,
) -> Result<Box<dyn JacobiEngine<Real = T>>> {
    if let Fields::Given { f, u0 } = &fields {
        for (name, v) in [("f", f), ("u0", u0)] {
            if v.len() != problem.cells() {
                return Err(Error::invalid(
                    name,
                    format!("{} values", v.len()),
                    format!("expected n·m = {}", problem.cells()),
                ));
            }
        }
    }
    Ok(match device {
        Device::Cpu { .. } => Box::new(cpu::CpuJacobi::new(problem, fields)?),
        Device::Cuda(gpu) => Box::new(cuda::CudaJacobi::new(
            gpu.clone(),
            problem,
            fields,
            sweeps_per_pass,
        )?),
    })
}
