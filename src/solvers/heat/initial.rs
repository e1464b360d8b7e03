//! Initial conditions: presets, and the analytic solution of the sine preset.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::HeatProblem;
use crate::error::{Error, Result};
use crate::memory::try_filled;
use crate::precision::{Precision, Real};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "preset", rename_all = "snake_case", deny_unknown_fields)]
pub enum Initial {
    /// Π_a sin(k_a·π·x_a/L_a): zero on the boundary, decays as exp(−α²π²Σ(k_a/L_a)² t).
    Sine {
        #[serde(default)]
        modes: Option<Vec<u32>>,
        #[serde(default = "one")]
        amplitude: f64,
    },
    /// exp(−|x − centre|²/(2σ²)), σ = width (in domain units), boundary held at 0.
    Gaussian {
        #[serde(default = "tenth")]
        width: f64,
        #[serde(default = "one")]
        amplitude: f64,
    },
    /// `value` inside the central box covering `fraction` of each axis, 0 elsewhere.
    HotBox {
        #[serde(default = "half")]
        fraction: f64,
        #[serde(default = "one")]
        value: f64,
    },
    /// A NumPy .npy array of the grid's shape (float32 or float64, C order), e.g. from
    /// `np.save("u0.npy", u0)`; a relative path is taken from the problem file's folder.
    /// Its boundary values are the Dirichlet values.
    File { path: PathBuf },
}

fn one() -> f64 {
    1.0
}
fn half() -> f64 {
    0.5
}
fn tenth() -> f64 {
    0.1
}

impl Default for Initial {
    fn default() -> Self {
        Initial::Sine {
            modes: None,
            amplitude: 1.0,
        }
    }
}

/// The largest initial magnitude a precision carries through the update: (a + b) − 2c
/// of values up to this stays finite.
pub fn largest_value(precision: Precision) -> f64 {
    match precision {
        Precision::F32 => f32::MAX as f64 / 8.0,
        Precision::F64 => f64::MAX / 8.0,
    }
}

impl Initial {
    /// `shape`: the grid's points per axis, slowest first.
    pub fn validate(&self, shape: &[usize], precision: Precision) -> Result<()> {
        let dims = shape.len();
        let magnitude = |field: &str, v: f64| {
            let most = largest_value(precision);
            if v.is_finite() && v.abs() <= most {
                Ok(())
            } else {
                Err(Error::invalid(
                    field,
                    crate::units::num(v),
                    format!(
                        "must be finite and at most {} in magnitude in {precision} (larger \
                         values overflow the update)",
                        crate::units::num(most)
                    ),
                ))
            }
        };
        match self {
            Initial::Sine { modes, amplitude } => {
                if let Some(m) = modes {
                    let too_high = m.iter().zip(shape).any(|(&k, &n)| k as usize + 2 > n);
                    if m.len() != dims || m.contains(&0) || too_high {
                        return Err(Error::invalid(
                            "heat.initial.modes",
                            format!("{m:?}"),
                            format!(
                                "give one mode number per axis ({dims}), each in [1, n − 2] \
                                 for that axis's n points (the grid {shape:?} cannot carry \
                                 higher modes)"
                            ),
                        ));
                    }
                }
                magnitude("heat.initial.amplitude", *amplitude)
            }
            Initial::Gaussian { width, amplitude } => {
                if !(width.is_finite() && (2.0 * width * width).is_normal()) {
                    return Err(Error::invalid(
                        "heat.initial.width",
                        crate::units::num(*width),
                        "must be finite and > 0, with 2·width² a normal number (width ≥ 1e-150)",
                    ));
                }
                magnitude("heat.initial.amplitude", *amplitude)
            }
            Initial::HotBox { fraction, value } => {
                if !(*fraction > 0.0 && *fraction <= 1.0) {
                    return Err(Error::invalid(
                        "heat.initial.fraction",
                        crate::units::num(*fraction),
                        "must lie in (0, 1]",
                    ));
                }
                magnitude("heat.initial.value", *value)
            }
            Initial::File { .. } => Ok(()),
        }
    }
}

const FILE_FIELD: &str = "heat.initial.path";

/// Open an initial-field .npy and check its header against the grid.
fn open_npy(p: &HeatProblem, path: &Path) -> Result<crate::input::Opened> {
    crate::input::open(
        FILE_FIELD,
        path,
        &p.user_shape(),
        "the grid (heat.shape)",
        crate::input::Kind::Float,
    )
}

/// Check a file initial condition's header, so that a wrong file fails before any work.
pub fn check(p: &HeatProblem) -> Result<()> {
    match &p.initial {
        Initial::File { path } => open_npy(p, path).map(|_| ()),
        _ => Ok(()),
    }
}

fn read_npy<T: Real>(p: &HeatProblem, path: &Path) -> Result<Vec<T>> {
    let f = open_npy(p, path)?;
    let mut u = try_filled(p.cells(), T::zero(), "the heat initial field")?;
    crate::input::fill_floats(FILE_FIELD, path, f, &mut u)?;
    check_values(p, path, &u, 0)?;
    Ok(u)
}

/// The file's layers `rows` of the slab axis into their places of a whole-size buffer
/// whose other values stay zero: only these layers are read.
fn read_npy_layers<T: Real>(p: &HeatProblem, path: &Path, rows: &[usize]) -> Result<Vec<T>> {
    let layer = super::layer_len(p);
    let f = open_npy(p, path)?;
    let read = crate::input::read_float_rows(FILE_FIELD, path, f, layer, rows)?;
    let mut u = vec![T::zero(); p.cells()];
    for (&r, values) in rows.iter().zip(read.chunks(layer)) {
        let at = &mut u[r * layer..(r + 1) * layer];
        for (v, &x) in at.iter_mut().zip(values) {
            *v = T::lit(x);
        }
        check_values(p, path, at, r * layer)?;
    }
    Ok(u)
}

/// Refuse a value that is NaN or too large for the run's precision; `values` start at
/// point `first` of the grid.
fn check_values<T: Real>(p: &HeatProblem, path: &Path, values: &[T], first: usize) -> Result<()> {
    let shown = path.display();
    let u = values;
    let most = largest_value(T::PRECISION);
    if let Some(i) = u
        .iter()
        .position(|v| v.as_f64().is_nan() || v.as_f64().abs() > most)
    {
        let at = &ijk(p, first + i)[3 - p.dims..];
        return Err(Error::invalid(
            FILE_FIELD,
            &shown,
            format!(
                "holds {} at index {at:?}; the initial field must be finite and at most {} \
                 in magnitude in {}",
                crate::units::num(u[i].as_f64()),
                crate::units::num(most),
                T::PRECISION
            ),
        ));
    }
    Ok(())
}

/// Mode numbers of the sine preset, padded to three axes (1 where unused).
fn sine_modes(p: &HeatProblem, modes: &Option<Vec<u32>>) -> [f64; 3] {
    let mut k = [0.0; 3];
    for a in 3 - p.dims..3 {
        k[a] = modes.as_ref().map_or(1.0, |m| m[a - (3 - p.dims)] as f64);
    }
    k
}

/// The (z, y, x) index of row-major point `idx` (padded axes at 0).
fn ijk(p: &HeatProblem, idx: usize) -> [usize; 3] {
    let [_, ny, nx] = p.shape;
    [idx / (ny * nx), (idx / nx) % ny, idx % nx]
}

/// Coordinates of point `idx` (padded axes at 0) and the domain length per axis.
fn coords(p: &HeatProblem, idx: usize) -> ([f64; 3], [f64; 3]) {
    let ijk = ijk(p, idx);
    let mut x = [0.0; 3];
    let mut len = [1.0; 3];
    for a in 0..3 {
        x[a] = ijk[a] as f64 * p.spacing[a];
        len[a] = (p.shape[a] - 1) as f64 * p.spacing[a];
    }
    (x, len)
}

fn is_boundary(p: &HeatProblem, idx: usize) -> bool {
    let ijk = ijk(p, idx);
    (3 - p.dims..3).any(|a| ijk[a] == 0 || ijk[a] == p.shape[a] - 1)
}

pub fn value(p: &HeatProblem, idx: usize) -> f64 {
    let (x, len) = coords(p, idx);
    let active = 3 - p.dims..3;
    match &p.initial {
        Initial::Sine { modes, amplitude } => {
            let k = sine_modes(p, modes);
            amplitude
                * active
                    .map(|a| (k[a] * std::f64::consts::PI * x[a] / len[a]).sin())
                    .product::<f64>()
        }
        Initial::Gaussian { width, amplitude } => {
            if is_boundary(p, idx) {
                return 0.0;
            }
            let r2: f64 = active.map(|a| (x[a] - 0.5 * len[a]).powi(2)).sum();
            amplitude * (-r2 / (2.0 * width * width)).exp()
        }
        Initial::File { .. } => unreachable!("file initial fields are read whole, not per point"),
        Initial::HotBox { fraction, value } => {
            let inside = !is_boundary(p, idx)
                && active
                    .into_iter()
                    .all(|a| (x[a] - 0.5 * len[a]).abs() <= 0.5 * fraction * len[a]);
            if inside { *value } else { 0.0 }
        }
    }
}

/// The initial field's layers `rows` of the slab axis (ascending), in a whole-size buffer
/// whose other values stay zero: zeroed memory is mapped lazily, so only the layers
/// computed take pages. From a file only these layers are read.
pub fn layers<T: Real>(p: &HeatProblem, rows: &[usize]) -> Result<Vec<T>> {
    use rayon::prelude::*;
    if let Initial::File { path } = &p.initial {
        return read_npy_layers(p, path, rows);
    }
    let layer = super::layer_len(p);
    crate::memory::ensure_host_fits(
        (rows.len() * layer * T::PRECISION.bytes()) as u128,
        "this rank's heat layers",
    )?;
    let mut u = vec![T::zero(); p.cells()];
    for &r in rows {
        u[r * layer..(r + 1) * layer]
            .par_iter_mut()
            .enumerate()
            .for_each(|(k, v)| *v = T::lit(value(p, r * layer + k)));
    }
    Ok(u)
}

/// The initial field, row-major.
pub fn field<T: Real>(p: &HeatProblem) -> Result<Vec<T>> {
    use rayon::prelude::*;
    // One time layer: the out-of-core engine keeps only this one on the host.
    crate::memory::ensure_host_fits(p.field_bytes(T::PRECISION) / 2, "the heat grid")?;
    if let Initial::File { path } = &p.initial {
        return read_npy(p, path);
    }
    let mut u = try_filled(p.cells(), T::zero(), "the heat initial field")?;
    u.par_iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = T::lit(value(p, i)));
    Ok(u)
}

impl HeatProblem {
    /// The exact solution of the continuous problem at time t, where one is known
    /// (the sine preset); None otherwise.
    pub fn exact(&self, idx: usize, t: f64) -> Option<f64> {
        let Initial::Sine { modes, .. } = &self.initial else {
            return None;
        };
        let k = sine_modes(self, modes);
        let (_, len) = coords(self, idx);
        let rate: f64 = (3 - self.dims..3)
            .map(|a| (k[a] * std::f64::consts::PI / len[a]).powi(2))
            .sum();
        Some(value(self, idx) * (-self.diffusivity * rate * t).exp())
    }
}
