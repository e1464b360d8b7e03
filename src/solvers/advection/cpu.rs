//! CPU reference engine: the study's two-branch cubic interpolation, rayon over rows.

use rayon::prelude::*;

use super::AdvectionProblem;
use super::presets::{Displacement, displacement_arrays};
use crate::error::Result;
use crate::memory::try_filled;
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

/// The cubic upwind interpolation of f_{i−2..i+2} at offset d (d ≤ 0: the departure
/// point lies on the i−1 side, the u ≥ 0 branch), in Horner form.
#[inline(always)]
pub fn cubic<T: Real>(fm2: T, fm1: T, f0: T, fp1: T, fp2: T, d: T) -> T {
    let (h, s3, s6) = (T::lit(0.5), T::lit(1.0 / 3.0), T::lit(1.0 / 6.0));
    let c2 = h * fp1 - f0 + h * fm1;
    let (c3, c1) = if d <= T::zero() {
        (
            s6 * fp1 - h * f0 + h * fm1 - s6 * fm2,
            s3 * fp1 + h * f0 - fm1 + s6 * fm2,
        )
    } else {
        (
            -(s6 * fm1) + h * f0 - h * fp1 + s6 * fp2,
            -(s3 * fm1) - h * f0 + fp1 - s6 * fp2,
        )
    };
    ((c3 * d + c2) * d + c1) * d + f0
}

/// One step f → g of the whole grid; `d(i, j)` gives du, dv at a node.
pub fn step<T: Real>(
    p: &AdvectionProblem,
    f: &[T],
    g: &mut [T],
    d: impl Fn(usize, usize) -> (T, T) + Sync,
) {
    let (nx, ny) = (p.nx, p.ny);
    let wrap = |a: isize, n: usize| a.rem_euclid(n as isize) as usize;
    g.par_chunks_mut(nx).enumerate().for_each(|(j, out)| {
        let rows: [usize; 5] = std::array::from_fn(|o| wrap(j as isize + o as isize - 2, ny));
        for (i, slot) in out.iter_mut().enumerate() {
            if !p.updated(i, j) {
                *slot = f[j * nx + i];
                continue;
            }
            // Columns i-2..i+2: wrapped only near a periodic edge (the division is slow).
            let cols: [usize; 5] = if i >= 2 && i + 2 < nx {
                [i - 2, i - 1, i, i + 1, i + 2]
            } else {
                std::array::from_fn(|o| wrap(i as isize + o as isize - 2, nx))
            };
            let (du, dv) = d(i, j);
            let x: [T; 5] = std::array::from_fn(|r| {
                let row = &f[rows[r] * nx..(rows[r] + 1) * nx];
                cubic(
                    row[cols[0]],
                    row[cols[1]],
                    row[cols[2]],
                    row[cols[3]],
                    row[cols[4]],
                    du,
                )
            });
            *slot = cubic(x[0], x[1], x[2], x[3], x[4], dv);
        }
    });
}

pub struct CpuAdvection<T> {
    p: AdvectionProblem,
    f: Vec<T>,
    g: Vec<T>,
    /// du, dv per node when the velocity does not change in time.
    arrays: Option<(Vec<T>, Vec<T>)>,
    steps: u64,
}

impl<T: Real> CpuAdvection<T> {
    /// `f0`: the field after `step0` steps.
    pub fn new(p: &AdvectionProblem, f0: Vec<T>, step0: u64) -> Result<Self> {
        let bytes = (4 * p.cells() * std::mem::size_of::<T>()) as u128;
        crate::memory::ensure_host_fits(bytes, "the advection fields and velocities")?;
        let g = try_filled(p.cells(), T::zero(), "the advection fields")?;
        let arrays = if p.velocity.is_time_dependent() {
            None
        } else {
            Some(displacement_arrays::<T>(p)?)
        };
        Ok(Self {
            p: p.clone(),
            f: f0,
            g,
            arrays,
            steps: step0,
        })
    }
}

impl<T: Real> Engine for CpuAdvection<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            let p = &self.p;
            let nx = p.nx;
            let t = self.steps as f64 * p.dt;
            match &self.arrays {
                Some((du, dv)) => step(p, &self.f, &mut self.g, |i, j| {
                    (du[j * nx + i], dv[j * nx + i])
                }),
                None => {
                    let d = Displacement::of(p);
                    step(p, &self.f, &mut self.g, |i, j| d.at::<T>(p, i, j, t))
                }
            }
            std::mem::swap(&mut self.f, &mut self.g);
            self.steps += 1;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(Diagnostics::steps_only(self.steps, Status::Running))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        Ok(super::field_of(&self.p, self.f.clone()))
    }
}
