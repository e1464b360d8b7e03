//! CPU reference engine: the study's two-branch cubic interpolation, rayon over rows.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;

use rayon::prelude::*;

use super::AdvectionProblem;
use super::presets::{Displacement, displacement_rows};
use crate::error::Result;
use crate::memory::try_filled;
use crate::parallel::{Rows, Subdomain, Window, slab_of};
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

/// One step f → g of the grid rows `rows` (owned by `w`; buffers of `w.rows` rows);
/// `d(i, j)` gives du, dv at node (i, j) of the grid.
pub fn step<T: Real>(
    p: &AdvectionProblem,
    w: &Window,
    rows: Range<usize>,
    f: &[T],
    g: &mut [T],
    d: impl Fn(usize, usize) -> (T, T) + Sync,
) {
    let nx = p.nx;
    let wrap = |a: isize, n: usize| a.rem_euclid(n as isize) as usize;
    let first = w.buffer_row(rows.start as isize);
    let out = &mut g[first * nx..(first + rows.len()) * nx];
    out.par_chunks_mut(nx).enumerate().for_each(|(r, out)| {
        let j = rows.start + r;
        let rows: [usize; 5] = std::array::from_fn(|o| w.buffer_row(j as isize + o as isize - 2));
        for (i, slot) in out.iter_mut().enumerate() {
            if !p.updated(i, j) {
                *slot = f[rows[2] * nx + i];
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
    /// The rows this engine computes and the rows its buffers hold.
    window: Window,
    f: Vec<T>,
    g: Vec<T>,
    /// du, dv per owned node when the velocity does not change in time.
    arrays: Option<(Vec<T>, Vec<T>)>,
    steps: u64,
}

impl<T: Real> CpuAdvection<T> {
    /// `f0`: the field after `step0` steps.
    pub fn new(p: &AdvectionProblem, f0: Vec<T>, step0: u64) -> Result<Self> {
        let bytes = (4 * p.cells() * std::mem::size_of::<T>()) as u128;
        crate::memory::ensure_host_fits(bytes, "the advection fields and velocities")?;
        Self::with_buffer(p, Window::whole(p.ny, p.periodic()), f0, step0)
    }

    /// An engine for the rows `window` owns (a halo of 2 rows a step); `full`: the whole
    /// field after `step0` steps.
    pub fn on_window(p: &AdvectionProblem, window: Window, full: &[T], step0: u64) -> Result<Self> {
        let f = slab_of(&window, full, p.nx);
        Self::with_buffer(p, window, f, step0)
    }

    fn with_buffer(p: &AdvectionProblem, window: Window, f: Vec<T>, step0: u64) -> Result<Self> {
        let g = try_filled(f.len(), T::zero(), "the advection fields")?;
        let arrays = if p.velocity.is_time_dependent() {
            None
        } else {
            let own: Vec<usize> = window.own.clone().collect();
            Some(displacement_rows::<T>(p, &own)?)
        };
        Ok(Self {
            p: p.clone(),
            window,
            f,
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
            self.compute(1, self.window.own.clone(), None)?;
            self.commit(1);
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(Diagnostics::steps_only(self.steps, Status::Running))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(super::field_of(&self.p, data))
    }
}

impl<T: Real> Subdomain for CpuAdvection<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.p.nx
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Host(&mut self.f)
    }
    fn steps_per_exchange(&self) -> u64 {
        // Each step computes the owned rows only: their halo is stale after one.
        1
    }
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        _: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert_eq!(steps, 1, "the CPU engine takes one step between exchanges");
        let p = &self.p;
        let nx = p.nx;
        let t = self.steps as f64 * p.dt;
        let w = &self.window;
        let j0 = w.own.start;
        match &self.arrays {
            Some((du, dv)) => step(p, w, rows, &self.f, &mut self.g, |i, j| {
                let n = (j - j0) * nx + i;
                (du[n], dv[n])
            }),
            None => {
                let d = Displacement::of(p);
                step(p, w, rows, &self.f, &mut self.g, |i, j| {
                    d.at::<T>(p, i, j, t)
                })
            }
        }
        Ok(())
    }
    fn commit(&mut self, steps: u64) {
        std::mem::swap(&mut self.f, &mut self.g);
        self.steps += steps;
    }
}
