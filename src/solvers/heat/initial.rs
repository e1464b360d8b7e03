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

/// The sine preset's factor on axis `a` at index `i` along it.
fn sine_factor(p: &HeatProblem, k: &[f64; 3], a: usize, i: usize) -> f64 {
    let x = i as f64 * p.spacing[a];
    let len = (p.shape[a] - 1) as f64 * p.spacing[a];
    (k[a] * std::f64::consts::PI * x / len).sin()
}

pub fn value(p: &HeatProblem, idx: usize) -> f64 {
    let (x, len) = coords(p, idx);
    let active = 3 - p.dims..3;
    match &p.initial {
        Initial::Sine { modes, amplitude } => {
            let k = sine_modes(p, modes);
            let ijk = ijk(p, idx);
            amplitude
                * active
                    .map(|a| sine_factor(p, &k, a, ijk[a]))
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
    let sine = SineField::of(p);
    let at = |i| sine.as_ref().map_or_else(|| value(p, i), |s| s.at(i));
    for &r in rows {
        u[r * layer..(r + 1) * layer]
            .par_iter_mut()
            .enumerate()
            .for_each(|(k, v)| *v = T::lit(at(r * layer + k)));
    }
    Ok(u)
}

/// The initial field, row-major.
pub fn field<T: Real>(p: &HeatProblem) -> Result<Vec<T>> {
    // One time layer: the out-of-core engine keeps only this one on the host.
    crate::memory::ensure_host_fits(p.field_bytes(T::PRECISION) / 2, "the heat grid")?;
    if let Initial::File { path } = &p.initial {
        return read_npy(p, path);
    }
    let what = "the heat initial field";
    if let Some(sine) = SineField::of(p) {
        return crate::memory::try_from_fn(p.cells(), what, |i| T::lit(sine.at(i)));
    }
    crate::memory::try_from_fn(p.cells(), what, |i| T::lit(value(p, i)))
}

/// The sine preset point by point from a table of each axis's factors, multiplied as
/// [`value`] multiplies them: its bits without three sines a point (a 640³ field took
/// 1.6 s on 16 threads).
pub struct SineField<'a> {
    p: &'a HeatProblem,
    factors: [Vec<f64>; 3],
    amplitude: f64,
}

impl<'a> SineField<'a> {
    /// None unless the initial field is the sine preset.
    pub fn of(p: &'a HeatProblem) -> Option<Self> {
        let Initial::Sine { modes, amplitude } = &p.initial else {
            return None;
        };
        let k = sine_modes(p, modes);
        Some(Self {
            p,
            factors: std::array::from_fn(|a| {
                (0..p.shape[a]).map(|i| sine_factor(p, &k, a, i)).collect()
            }),
            amplitude: *amplitude,
        })
    }

    /// [`value`] at point `idx`.
    pub fn at(&self, idx: usize) -> f64 {
        let ijk = ijk(self.p, idx);
        let active = 3 - self.p.dims..3;
        self.amplitude * active.map(|a| self.factors[a][ijk[a]]).product::<f64>()
    }
}

impl HeatProblem {
    /// The exact solution of the continuous problem at time t, where one is known
    /// (the sine preset); None otherwise.
    pub fn exact(&self, idx: usize, t: f64) -> Option<f64> {
        // The decay first: it says whether there is an exact solution (value() has none
        // for a file).
        let decay = self.decay(t)?;
        Some(value(self, idx) * decay)
    }

    /// The factor by which the sine preset's field has decayed at time t (the exact
    /// solution is the initial field times it); None for other presets.
    pub fn decay(&self, t: f64) -> Option<f64> {
        let Initial::Sine { modes, .. } = &self.initial else {
            return None;
        };
        let k = sine_modes(self, modes);
        let (_, len) = coords(self, 0);
        let rate: f64 = (3 - self.dims..3)
            .map(|a| (k[a] * std::f64::consts::PI / len[a]).powi(2))
            .sum();
        Some((-self.diffusivity * rate * t).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bulk sine field (a table of factors per axis) has `value`'s bits at every
    /// point, in one, two and three dimensions on uneven grids.
    #[test]
    fn the_sine_field_in_bulk_equals_value_point_by_point() {
        for (shape, spacing, modes) in [
            ("[37]", "[0.3]", "[2]"),
            ("[19, 23]", "[0.1, 0.07]", "[1, 3]"),
            ("[11, 13, 17]", "[1.0, 0.5, 0.25]", "[3, 1, 2]"),
        ] {
            let text = format!(
                "solver = \"heat\"\n[heat]\nshape = {shape}\nspacing = {spacing}\ndt = 1e-6\n\
                 steps = 1\ninitial = {{ preset = \"sine\", modes = {modes}, amplitude = 1.7 }}\n"
            );
            let p = crate::problem::parse(&text, "test", None, &Default::default())
                .unwrap()
                .spec_as::<HeatProblem>()
                .unwrap()
                .clone();
            let bulk = field::<f64>(&p).unwrap();
            assert_eq!(bulk.len(), p.cells());
            for (i, v) in bulk.iter().enumerate() {
                assert_eq!(v.to_bits(), value(&p, i).to_bits(), "{shape} at {i}");
            }
            assert!(
                bulk.iter().any(|v| v.abs() > 1.0),
                "{shape}: a field, not zeros"
            );
            let (sine, decay) = (SineField::of(&p).unwrap(), p.decay(0.3).unwrap());
            assert!(decay < 1.0);
            for i in 0..p.cells() {
                let exact = p.exact(i, 0.3).unwrap();
                assert_eq!(exact.to_bits(), (sine.at(i) * decay).to_bits());
            }
            let axis = super::super::slab_axis(p.dims);
            let some: Vec<usize> = (0..p.shape[axis]).step_by(2).collect();
            let layers = layers::<f64>(&p, &some).unwrap();
            let layer = super::super::layer_len(&p);
            for &r in &some {
                assert!(layers[r * layer..(r + 1) * layer] == bulk[r * layer..(r + 1) * layer]);
            }
        }
    }
}
