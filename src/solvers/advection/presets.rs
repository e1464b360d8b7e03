//! Velocity fields and initial fields: presets, arrays from .npy, and the exact solution
//! where a preset has one.

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::AdvectionProblem;
use crate::error::{Error, Result};
use crate::input::{self, Kind};
use crate::memory::try_filled;
use crate::precision::Real;

/// The velocity (u, v), constant in time unless said otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Velocity {
    Uniform {
        u: f64,
        v: f64,
    },
    /// Solid-body rotation about `center` (default: the middle of the domain), `omega`
    /// radians per unit time (default 2π: one turn per unit time), counter-clockwise.
    Rotation {
        #[serde(default)]
        omega: Option<f64>,
        #[serde(default)]
        center: Option<[f64; 2]>,
    },
    /// LeVeque's deformation flow on the domain mapped to the unit square:
    /// u = Lx·sin²(πX)·sin(2πY)·cos(πt/T), v = −Ly·sin²(πY)·sin(2πX)·cos(πt/T). The field
    /// swirls, stops at T/2 and comes back to where it started at t = T.
    Swirl {
        period: f64,
    },
    /// u and v per node from .npy arrays of shape (ny, nx), float32 or float64.
    File {
        u: PathBuf,
        v: PathBuf,
    },
}

/// The initial field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "preset", rename_all = "snake_case", deny_unknown_fields)]
pub enum Initial {
    /// amplitude·exp(−r²/(2·width²)), 0 where that is below amplitude·e⁻⁶⁰.
    Gaussian {
        #[serde(default)]
        center: Option<[f64; 2]>,
        #[serde(default)]
        width: Option<f64>,
        #[serde(default = "one")]
        amplitude: f64,
    },
    /// amplitude·(1 + cos(πr/radius))/2 inside the radius, 0 outside.
    CosineBell {
        #[serde(default)]
        center: Option<[f64; 2]>,
        #[serde(default)]
        radius: Option<f64>,
        #[serde(default = "one")]
        amplitude: f64,
    },
    /// Zalesak's slotted disk: 1 inside the disk except a slot of `slot_width` cut from
    /// its bottom edge `slot_depth` up, 0 elsewhere. The defaults are Zalesak's (1979) on
    /// a 100 × 100 domain, as fractions of the smaller side: centre at (½, ¾) of the
    /// domain, radius 0.15, slot 0.05 wide and 0.25 deep, which leaves a bridge of 0.05.
    Zalesak {
        #[serde(default)]
        center: Option<[f64; 2]>,
        #[serde(default)]
        radius: Option<f64>,
        #[serde(default)]
        slot_width: Option<f64>,
        #[serde(default)]
        slot_depth: Option<f64>,
    },
    /// sin(2π·kx·x/Lx)·sin(2π·ky·y/Ly): smooth and periodic.
    Sine {
        #[serde(default = "unit_modes")]
        modes: [u32; 2],
    },
    /// A .npy array of shape (ny, nx), float32 or float64.
    File { path: PathBuf },
}

fn one() -> f64 {
    1.0
}
fn unit_modes() -> [u32; 2] {
    [1, 1]
}

const GRID: &str = "the grid (ny, nx)";

fn finite_pair(field: &str, c: &Option<[f64; 2]>) -> Result<()> {
    match c {
        Some(c) if !c.iter().all(|v| v.is_finite()) => {
            Err(Error::invalid(field, format!("{c:?}"), "must be finite"))
        }
        _ => Ok(()),
    }
}

fn finite(field: &str, v: f64) -> Result<()> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(field, v, "must be finite"))
    }
}

fn positive(field: &str, v: &Option<f64>) -> Result<()> {
    match v {
        Some(v) if !(*v > 0.0 && v.is_finite()) => {
            Err(Error::invalid(field, v, "must be finite and > 0"))
        }
        _ => Ok(()),
    }
}

/// Read a float .npy of the grid's shape, refusing NaN and infinities by index.
fn read_floats(field: &str, path: &Path, p: &AdvectionProblem) -> Result<Vec<f64>> {
    read_float_rows(field, path, p, &(0..p.ny).collect::<Vec<_>>())
}

/// Rows `rows` (grid rows, in any order) of a float .npy of the grid's shape, one after
/// another, refusing NaN and infinities by index.
fn read_float_rows(
    field: &str,
    path: &Path,
    p: &AdvectionProblem,
    rows: &[usize],
) -> Result<Vec<f64>> {
    let f = input::open(field, path, &p.shape(), GRID, Kind::Float)?;
    let out = if rows.iter().copied().eq(0..p.ny) {
        let mut out = try_filled(p.cells(), 0.0f64, field)?;
        input::fill_floats(field, path, f, &mut out)?;
        out
    } else {
        input::read_float_rows(field, path, f, p.nx, rows)?
    };
    if let Some(n) = out.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(
            field,
            path.display(),
            format!(
                "holds {} at (j, i) = ({}, {}); values must be finite",
                out[n],
                rows[n / p.nx],
                n % p.nx
            ),
        ));
    }
    Ok(out)
}

impl Velocity {
    pub fn validate(&self, p: &AdvectionProblem) -> Result<()> {
        match self {
            Velocity::Uniform { u, v } => {
                if !(u.is_finite() && v.is_finite()) {
                    return Err(Error::invalid(
                        "advection.velocity",
                        format!("u = {u}, v = {v}"),
                        "must be finite",
                    ));
                }
            }
            Velocity::Rotation { omega, center } => {
                if let Some(w) = omega {
                    finite("advection.velocity.omega", *w)?;
                }
                finite_pair("advection.velocity.center", center)?;
            }
            Velocity::Swirl { period } => positive("advection.velocity.period", &Some(*period))?,
            Velocity::File { u, v } => {
                input::open("advection.velocity.u", u, &p.shape(), GRID, Kind::Float)?;
                input::open("advection.velocity.v", v, &p.shape(), GRID, Kind::Float)?;
            }
        }
        Ok(())
    }

    /// The largest |u|/Δx and |v|/Δy over the grid and the run: Δt times it is the
    /// largest |du|, |dv|.
    pub fn max_rate(&self, p: &AdvectionProblem) -> Result<f64> {
        Ok(match self {
            Velocity::Uniform { u, v } => (u.abs() / p.dx).max(v.abs() / p.dy),
            Velocity::Rotation { .. } => {
                let (w, [xc, yc]) = self.rotation(p);
                let (xs, ys) = ((p.nx - 1) as f64 * p.dx, (p.ny - 1) as f64 * p.dy);
                let (rx, ry) = (xc.abs().max((xs - xc).abs()), yc.abs().max((ys - yc).abs()));
                (w.abs() * ry / p.dx).max(w.abs() * rx / p.dy)
            }
            // |sin²(πX)·sin(2πY)·cos| ≤ 1, reached at X = 1/2, Y = 1/4, t = 0.
            Velocity::Swirl { .. } => {
                let [lx, ly] = p.extent();
                (lx / p.dx).max(ly / p.dy)
            }
            Velocity::File { u, v } => {
                let rate = |field, path: &PathBuf, h: f64| -> Result<f64> {
                    Ok(read_floats(field, path, p)?
                        .par_iter()
                        .map(|x| x.abs() / h)
                        .reduce(|| 0.0, f64::max))
                };
                rate("advection.velocity.u", u, p.dx)?.max(rate("advection.velocity.v", v, p.dy)?)
            }
        })
    }

    /// ω and the centre of a rotation.
    pub fn rotation(&self, p: &AdvectionProblem) -> (f64, [f64; 2]) {
        let Velocity::Rotation { omega, center } = self else {
            return (0.0, [0.0; 2]);
        };
        let middle = [
            (p.nx - 1) as f64 * p.dx / 2.0,
            (p.ny - 1) as f64 * p.dy / 2.0,
        ];
        (omega.unwrap_or(2.0 * PI), center.unwrap_or(middle))
    }

    /// Whether the velocity is evaluated per step (it depends on time).
    pub fn is_time_dependent(&self) -> bool {
        matches!(self, Velocity::Swirl { .. })
    }
}

/// How the engines get du, dv at a node: from arrays, or from a formula with these
/// coefficients (the CUDA kernel evaluates the same formula, kernels.cu: displacement).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Displacement {
    /// du, dv arrays (uniform, rotation with arrays, files).
    Arrays,
    /// `du = c[0]`, `dv = c[1]`.
    Uniform([f64; 2]),
    /// du = a·(j − jc), dv = −b·(i − ic): c = [a, jc, b, ic].
    Rotation([f64; 4]),
    /// du = −(Δt/Δx)·Lx·sin²(πX)·sin(2πY)·cos(πt/T) at X = i/nx, Y = j/ny, and likewise dv.
    Swirl { period: f64 },
}

impl Displacement {
    /// The formula of the problem's velocity (file velocities are arrays).
    pub fn of(p: &AdvectionProblem) -> Self {
        match &p.velocity {
            Velocity::Uniform { u, v } => {
                Displacement::Uniform([-u * p.dt / p.dx, -v * p.dt / p.dy])
            }
            Velocity::Rotation { .. } => {
                let (w, [xc, yc]) = p.velocity.rotation(p);
                // u = −ω(y − yc) → du = ωΔt·Δy/Δx·(j − yc/Δy); v = ω(x − xc) → dv = −ωΔt·Δx/Δy·(i − xc/Δx).
                Displacement::Rotation([
                    w * p.dt * p.dy / p.dx,
                    yc / p.dy,
                    w * p.dt * p.dx / p.dy,
                    xc / p.dx,
                ])
            }
            Velocity::Swirl { period } => Displacement::Swirl { period: *period },
            Velocity::File { .. } => Displacement::Arrays,
        }
    }

    /// du, dv at node (i, j) for the step from t to t + Δt, in T's arithmetic where the
    /// CUDA kernel's is the same (uniform, rotation); the swirl in f64.
    pub fn at<T: Real>(&self, p: &AdvectionProblem, i: usize, j: usize, t: f64) -> (T, T) {
        match *self {
            Displacement::Uniform([a, b]) => (T::lit(a), T::lit(b)),
            Displacement::Rotation([a, jc, b, ic]) => (
                T::lit(a) * (T::lit(j as f64) - T::lit(jc)),
                -(T::lit(b) * (T::lit(i as f64) - T::lit(ic))),
            ),
            Displacement::Swirl { period } => swirl(
                p,
                swirl_sines(i, p.nx),
                swirl_sines(j, p.ny),
                swirl_cos(p, t, period),
            ),
            Displacement::Arrays => unreachable!("array displacements are read, not evaluated"),
        }
    }
}

/// sin(πX) and sin(2πX) at X = k/n: the swirl's factors of column k (n = nx) or row k.
fn swirl_sines(k: usize, n: usize) -> [f64; 2] {
    let x = k as f64 / n as f64;
    [(PI * x).sin(), (2.0 * PI * x).sin()]
}

/// cos(πt/T) at the middle of the step from t.
fn swirl_cos(p: &AdvectionProblem, t: f64, period: f64) -> f64 {
    (PI * (t + 0.5 * p.dt) / period).cos()
}

/// The swirl's du, dv from its factors: column [sin(πX), sin(2πX)], row [sin(πY),
/// sin(2πY)] and the time's cosine.
fn swirl<T: Real>(
    p: &AdvectionProblem,
    [sx, s2x]: [f64; 2],
    [sy, s2y]: [f64; 2],
    c: f64,
) -> (T, T) {
    let [lx, ly] = p.extent();
    let u = lx * sx * sx * s2y * c;
    let v = -ly * sy * sy * s2x * c;
    (T::lit(-u * p.dt / p.dx), T::lit(-v * p.dt / p.dy))
}

/// The swirl's sines of every column and row, taken once: [`Displacement::at`] takes
/// three sines and a cosine a node, these tables give its values (the same operations on
/// the same numbers, so the same bits) for a cosine a step.
pub struct SwirlTables {
    period: f64,
    columns: Vec<[f64; 2]>,
    rows: Vec<[f64; 2]>,
}

impl SwirlTables {
    /// The tables of the problem's swirl; `None` for any other velocity.
    pub fn of(p: &AdvectionProblem) -> Option<Self> {
        match Displacement::of(p) {
            Displacement::Swirl { period } => Some(Self {
                period,
                columns: (0..p.nx).map(|i| swirl_sines(i, p.nx)).collect(),
                rows: (0..p.ny).map(|j| swirl_sines(j, p.ny)).collect(),
            }),
            _ => None,
        }
    }

    /// The cosine of the step from t, for [`SwirlTables::at`].
    pub fn cos(&self, p: &AdvectionProblem, t: f64) -> f64 {
        swirl_cos(p, t, self.period)
    }

    /// du, dv at node (i, j) in the step whose cosine is `c`: `Displacement::at`'s values.
    pub fn at<T: Real>(&self, p: &AdvectionProblem, i: usize, j: usize, c: f64) -> (T, T) {
        swirl(p, self.columns[i], self.rows[j], c)
    }
}

/// du and dv per node as arrays (for the CPU engine, and the CUDA engine's array mode).
pub fn displacement_arrays<T: Real>(p: &AdvectionProblem) -> Result<(Vec<T>, Vec<T>)> {
    displacement_rows(p, &(0..p.ny).collect::<Vec<_>>())
}

/// The displacement arrays' rows `rows` (grid rows, one after another): what a slab
/// holds. From files only these rows are read.
pub fn displacement_rows<T: Real>(
    p: &AdvectionProblem,
    rows: &[usize],
) -> Result<(Vec<T>, Vec<T>)> {
    if let Velocity::File { u, v } = &p.velocity {
        let scale = |field, path: &PathBuf, h: f64| -> Result<Vec<T>> {
            Ok(read_float_rows(field, path, p, rows)?
                .par_iter()
                .map(|x| T::lit(-x * p.dt / h))
                .collect())
        };
        return Ok((
            scale("advection.velocity.u", u, p.dx)?,
            scale("advection.velocity.v", v, p.dy)?,
        ));
    }
    let d = Displacement::of(p);
    let len = rows.len() * p.nx;
    let mut du = try_filled(len, T::zero(), "the advection displacements (du)")?;
    let mut dv = try_filled(len, T::zero(), "the advection displacements (dv)")?;
    du.par_iter_mut()
        .zip(dv.par_iter_mut())
        .enumerate()
        .for_each(|(n, (a, b))| (*a, *b) = d.at::<T>(p, n % p.nx, rows[n / p.nx], 0.0));
    Ok((du, dv))
}

impl Initial {
    pub fn validate(&self, p: &AdvectionProblem) -> Result<()> {
        match self {
            Initial::Gaussian {
                center,
                width,
                amplitude,
            } => {
                finite_pair("advection.initial.center", center)?;
                positive("advection.initial.width", width)?;
                finite("advection.initial.amplitude", *amplitude)?;
            }
            Initial::CosineBell {
                center,
                radius,
                amplitude,
            } => {
                finite_pair("advection.initial.center", center)?;
                positive("advection.initial.radius", radius)?;
                finite("advection.initial.amplitude", *amplitude)?;
            }
            Initial::Zalesak {
                center,
                radius,
                slot_width,
                slot_depth,
            } => {
                finite_pair("advection.initial.center", center)?;
                positive("advection.initial.radius", radius)?;
                positive("advection.initial.slot_width", slot_width)?;
                positive("advection.initial.slot_depth", slot_depth)?;
            }
            Initial::Sine { modes } => {
                // sin(2πk·i/n) on n nodes: k ≥ n/2 aliases to a lower mode (n/2 is zero
                // at every node), and k = 0 is the zero field.
                let too_high = modes
                    .iter()
                    .zip([p.nx, p.ny])
                    .any(|(&k, n)| 2 * k as usize >= n);
                if modes.contains(&0) || too_high {
                    return Err(Error::invalid(
                        "advection.initial.modes",
                        format!("{modes:?}"),
                        format!(
                            "each mode must be in [1, n/2) for that axis's n cells (the grid \
                             of {} × {} cells cannot carry higher modes)",
                            p.nx, p.ny
                        ),
                    ));
                }
            }
            Initial::File { path } => {
                input::open(
                    "advection.initial.path",
                    path,
                    &p.shape(),
                    GRID,
                    Kind::Float,
                )?;
            }
        }
        Ok(())
    }

    /// The preset's value at (x, y); periodic problems measure distances to the nearest
    /// image of the centre.
    pub fn value(&self, p: &AdvectionProblem, x: f64, y: f64) -> f64 {
        let [lx, ly] = p.extent();
        let middle = [lx / 2.0, ly / 2.0];
        let small = lx.min(ly);
        let offset = |c: [f64; 2]| {
            let (mut dx, mut dy) = (x - c[0], y - c[1]);
            if p.periodic() {
                dx -= lx * (dx / lx).round();
                dy -= ly * (dy / ly).round();
            }
            (dx, dy)
        };
        match self {
            Initial::Gaussian {
                center,
                width,
                amplitude,
            } => {
                let (dx, dy) = offset(center.unwrap_or(middle));
                let w = width.unwrap_or(small / 20.0);
                let e = (dx * dx + dy * dy) / (2.0 * w * w);
                // Beyond 60 widths² the tail (< 1e-26) is set to 0: f32 would carry it as
                // subnormals, which some CPUs compute a hundred times slower.
                if e > 60.0 {
                    0.0
                } else {
                    amplitude * (-e).exp()
                }
            }
            Initial::CosineBell {
                center,
                radius,
                amplitude,
            } => {
                let (dx, dy) = offset(center.unwrap_or(middle));
                let (r, rr) = ((dx * dx + dy * dy).sqrt(), radius.unwrap_or(small / 6.0));
                if r < rr {
                    amplitude * 0.5 * (1.0 + (PI * r / rr).cos())
                } else {
                    0.0
                }
            }
            Initial::Zalesak {
                center,
                radius,
                slot_width,
                slot_depth,
            } => {
                let c = center.unwrap_or([middle[0], 0.75 * ly]);
                let r = radius.unwrap_or(0.15 * small);
                let (dx, dy) = offset(c);
                let w = slot_width.unwrap_or(r / 3.0);
                let depth = slot_depth.unwrap_or(r * 5.0 / 3.0);
                let inside = dx * dx + dy * dy <= r * r;
                let in_slot = dx.abs() <= w / 2.0 && dy <= -r + depth;
                if inside && !in_slot { 1.0 } else { 0.0 }
            }
            Initial::Sine { modes } => {
                (2.0 * PI * modes[0] as f64 * x / lx).sin()
                    * (2.0 * PI * modes[1] as f64 * y / ly).sin()
            }
            Initial::File { .. } => unreachable!("file fields are read whole"),
        }
    }
}

/// The initial field's rows `rows` in a whole-size buffer whose other rows stay zero
/// (zeroed memory is mapped lazily, so only these rows take pages): what a rank under
/// mpirun needs. From a file only these rows are read.
pub fn initial_rows<T: Real>(p: &AdvectionProblem, rows: &[usize]) -> Result<Vec<T>> {
    crate::memory::ensure_host_fits(
        (rows.len() * p.nx * T::PRECISION.bytes()) as u128,
        "this rank's rows of the advection field",
    )?;
    let mut f = vec![T::zero(); p.cells()];
    if let Initial::File { path } = &p.initial {
        let read = read_float_rows("advection.initial.path", path, p, rows)?;
        for (&j, row) in rows.iter().zip(read.chunks(p.nx)) {
            for (v, &x) in f[j * p.nx..(j + 1) * p.nx].iter_mut().zip(row) {
                *v = T::lit(x);
            }
        }
        return Ok(f);
    }
    for &j in rows {
        f[j * p.nx..(j + 1) * p.nx]
            .par_iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = T::lit(p.initial.value(p, i as f64 * p.dx, j as f64 * p.dy)));
    }
    Ok(f)
}

/// The initial field, [ny, nx].
pub fn initial_field<T: Real>(p: &AdvectionProblem) -> Result<Vec<T>> {
    if let Initial::File { path } = &p.initial {
        let f = read_floats("advection.initial.path", path, p)?;
        return Ok(f.par_iter().map(|&v| T::lit(v)).collect());
    }
    // Refused before anything is allocated when the machine could never hold it (the
    // engines check their whole need next).
    crate::memory::ensure_host_fits(
        (p.cells() * T::PRECISION.bytes()) as u128,
        "the advection field",
    )?;
    crate::memory::try_from_fn(p.cells(), "the advection field", |n| {
        T::lit(
            p.initial
                .value(p, (n % p.nx) as f64 * p.dx, (n / p.nx) as f64 * p.dy),
        )
    })
}

/// The exact field where it is known, cell by cell (column i, row j: no index divided
/// per cell) or whole (rows of `nx`).
pub enum Exact<'a> {
    Cells(Box<dyn Fn(usize, usize) -> f64 + Sync + 'a>),
    Field { values: Vec<f64>, nx: usize },
}

impl Exact<'_> {
    /// The exact value of cell (i, j).
    pub fn at(&self, i: usize, j: usize) -> f64 {
        match self {
            Exact::Cells(f) => f(i, j),
            Exact::Field { values, nx } => values[j * nx + i],
        }
    }
}

/// The exact field at time t where it is known: a uniform translation on a periodic
/// domain, a rotation (any time; for a file, whole turns), the swirl at whole periods.
/// Cells the contest boundary holds keep their initial values.
pub fn exact(p: &AdvectionProblem, t: f64) -> Result<Option<Vec<f64>>> {
    Ok(exact_cells(p, t)?.map(|e| match e {
        Exact::Field { values, .. } => values,
        e => (0..p.cells())
            .into_par_iter()
            .map(|n| e.at(n % p.nx, n / p.nx))
            .collect(),
    }))
}

/// [`exact`] cell by cell: a preset's value is computed where it is asked for, without
/// a field of them (only an initial field from a file is read whole).
pub fn exact_cells(p: &AdvectionProblem, t: f64) -> Result<Option<Exact<'_>>> {
    let whole = |period: f64| {
        let turns = t / period;
        (turns - turns.round()).abs() < 1e-9
    };
    let identity = match &p.velocity {
        Velocity::Uniform { u, v } => *u == 0.0 && *v == 0.0,
        Velocity::Rotation { .. } => {
            let (w, _) = p.velocity.rotation(p);
            w == 0.0 || whole(2.0 * PI / w.abs())
        }
        Velocity::Swirl { period } => whole(*period),
        Velocity::File { .. } => false,
    };
    let at = |i: usize, j: usize| (i as f64 * p.dx, j as f64 * p.dy);
    if identity {
        return Ok(Some(match &p.initial {
            Initial::File { .. } => Exact::Field {
                values: initial_field::<f64>(p)?,
                nx: p.nx,
            },
            _ => Exact::Cells(Box::new(move |i, j| {
                let (x, y) = at(i, j);
                p.initial.value(p, x, y)
            })),
        }));
    }
    if matches!(p.initial, Initial::File { .. }) {
        return Ok(None);
    }
    let departure: Box<dyn Fn(f64, f64) -> (f64, f64) + Sync> = match &p.velocity {
        Velocity::Uniform { u, v } if p.periodic() => {
            let (u, v) = (*u, *v);
            Box::new(move |x, y| (x - u * t, y - v * t))
        }
        Velocity::Rotation { .. } => {
            let (w, [xc, yc]) = p.velocity.rotation(p);
            let (c, s) = ((w * t).cos(), (w * t).sin());
            Box::new(move |x, y| {
                let (dx, dy) = (x - xc, y - yc);
                (xc + c * dx + s * dy, yc - s * dx + c * dy)
            })
        }
        _ => return Ok(None),
    };
    // A preset here (files returned above): held cells take its value where they are.
    Ok(Some(Exact::Cells(Box::new(move |i, j| {
        let (x, y) = at(i, j);
        let (x, y) = if p.updated(i, j) {
            departure(x, y)
        } else {
            (x, y)
        };
        p.initial.value(p, x, y)
    }))))
}
