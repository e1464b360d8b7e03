//! CPU reference engine: the study's two-branch cubic interpolation, rayon over rows. The
//! cells of a row away from its x edges take both branches and keep one (`cubic_select`:
//! the same operations, so the same bits as `cubic`), with no test per cell, so that the
//! compiler vectorises their loop; it is compiled for AVX-512 and AVX2 as well and picked
//! at run time (3.2× in f32, 2.1× in f64 on one AVX-512 core, docs/PERFORMANCE.md).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;

use rayon::prelude::*;

use super::AdvectionProblem;
use super::presets::{SwirlTables, displacement_rows};
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

/// `cubic` with both branches computed and one selected: the same operations, so the same
/// bits, but no branch, so that a loop of them vectorises (`interior_cells`).
#[inline(always)]
fn cubic_select<T: Real>(fm2: T, fm1: T, f0: T, fp1: T, fp2: T, d: T) -> T {
    let (h, s3, s6) = (T::lit(0.5), T::lit(1.0 / 3.0), T::lit(1.0 / 6.0));
    let c2 = h * fp1 - f0 + h * fm1;
    let (c3m, c1m) = (
        s6 * fp1 - h * f0 + h * fm1 - s6 * fm2,
        s3 * fp1 + h * f0 - fm1 + s6 * fm2,
    );
    let (c3p, c1p) = (
        -(s6 * fm1) + h * f0 - h * fp1 + s6 * fp2,
        -(s3 * fm1) - h * f0 + fp1 - s6 * fp2,
    );
    let minus = d <= T::zero();
    let c3 = if minus { c3m } else { c3p };
    let c1 = if minus { c1m } else { c1p };
    ((c3 * d + c2) * d + c1) * d + f0
}

/// The cells of one row away from the grid's x edges, all updated: `src[r]` holds rows
/// j − 2 + r from two cells before the first output cell to two after the last, `du`
/// and `dv` one entry per output cell.
#[inline(always)]
fn interior_cells<T: Real>(src: [&[T]; 5], du: &[T], dv: &[T], out: &mut [T]) {
    let n = out.len();
    let (du, dv) = (&du[..n], &dv[..n]);
    // Row r's cells i − 2 .. i + 2 are s[r][0][i] .. s[r][4][i]: every slice n long, so
    // the loop's indices need no bound checks.
    let s: [[&[T]; 5]; 5] = std::array::from_fn(|r| std::array::from_fn(|k| &src[r][k..k + n]));
    for i in 0..n {
        let d = du[i];
        let mut x = [T::zero(); 5];
        for (x, t) in x.iter_mut().zip(&s) {
            *x = cubic_select(t[0][i], t[1][i], t[2][i], t[3][i], t[4][i], d);
        }
        out[i] = cubic_select(x[0], x[1], x[2], x[3], x[4], dv[i]);
    }
}

crate::vector::vector_forms! {
    /// `interior_cells` for SSE2, AVX2 and AVX-512 (`widest`: the widest this CPU runs).
    mod interior_row = interior_cells [T: Real] [T]
        (src: [&[T]; 5], du: &[T], dv: &[T], out: &mut [T]) -> ();
}

/// Where a step takes each cell's du, dv from.
pub enum Displacements<'a, T, F> {
    /// Whole rows of a steady velocity, from grid row `w.own.start` of the step's window,
    /// `nx` a row: a row's interior reads them in place.
    Rows(&'a [T], &'a [T]),
    /// `F(i, j)` at node (i, j) of the grid.
    At(F),
}

/// One step f → g of the grid rows `rows` (owned by `w`; buffers of `w.rows` rows), with
/// the displacements `d`.
pub fn step<T: Real, F: Fn(usize, usize) -> (T, T) + Sync>(
    p: &AdvectionProblem,
    w: &Window,
    rows: Range<usize>,
    f: &[T],
    g: &mut [T],
    d: Displacements<'_, T, F>,
) {
    let nx = p.nx;
    let at = |i: usize, j: usize| match &d {
        Displacements::Rows(du, dv) => {
            let n = (j - w.own.start) * nx + i;
            (du[n], dv[n])
        }
        Displacements::At(d) => d(i, j),
    };
    let wrap = |a: isize, n: usize| a.rem_euclid(n as isize) as usize;
    let first = w.buffer_row(rows.start as isize);
    let out = &mut g[first * nx..(first + rows.len()) * nx];
    let scratch = || (Vec::<T>::with_capacity(nx), Vec::<T>::with_capacity(nx));
    out.par_chunks_mut(nx)
        .enumerate()
        .for_each_init(scratch, |(du, dv), (r, out)| {
            let j = rows.start + r;
            let rows: [usize; 5] =
                std::array::from_fn(|o| w.buffer_row(j as isize + o as isize - 2));
            // Cells 2..nx-2 wrap no column and are all updated or none (`updated`): one
            // loop with no test per cell.
            let span = if nx >= 5 && p.updated(2, j) {
                2..nx - 2
            } else {
                0..0
            };
            if !span.is_empty() {
                let (du, dv): (&[T], &[T]) = match &d {
                    Displacements::Rows(a, b) => {
                        let row = (j - w.own.start) * nx;
                        let cells = row + span.start..row + span.end;
                        (&a[cells.clone()], &b[cells])
                    }
                    Displacements::At(_) => {
                        du.clear();
                        dv.clear();
                        for i in span.clone() {
                            let (a, b) = at(i, j);
                            du.push(a);
                            dv.push(b);
                        }
                        (du, dv)
                    }
                };
                let src: [&[T]; 5] = std::array::from_fn(|o| {
                    &f[rows[o] * nx + span.start - 2..rows[o] * nx + span.end + 2]
                });
                interior_row::widest(src, du, dv, &mut out[span.clone()]);
            }
            // The rest: the end cells, or the whole row when it has no such span.
            for i in (0..span.start).chain(span.end..nx) {
                let slot = &mut out[i];
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
                let (du, dv) = at(i, j);
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
    velocity: Velocities<T>,
    steps: u64,
    /// Running, or NonFinite once a check between chunks found a NaN or infinity.
    status: Status,
}

/// Where the engine's steps take du, dv from.
enum Velocities<T> {
    /// A steady velocity: du, dv per owned node.
    Steady(Vec<T>, Vec<T>),
    /// The swirl, the one velocity that changes in time: its sines per column and row.
    Swirl(SwirlTables),
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
        let velocity = if p.velocity.is_time_dependent() {
            Velocities::Swirl(
                SwirlTables::of(p).expect("the swirl is the velocity that changes in time"),
            )
        } else {
            let own: Vec<usize> = window.own.clone().collect();
            let (du, dv) = displacement_rows::<T>(p, &own)?;
            Velocities::Steady(du, dv)
        };
        Ok(Self {
            p: p.clone(),
            window,
            f,
            g,
            velocity,
            steps: step0,
            status: Status::Running,
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
        // Between chunks, not per step: a value that went NaN or infinite stays so (the
        // interpolation carries it), and the stop names the chunk's last step.
        if self.status == Status::Running {
            use rayon::prelude::*;
            let own = self.window.own_in_buffer();
            let nx = self.p.nx;
            let owned = &self.f[own.start * nx..own.end * nx];
            if !owned.par_iter().all(|v| v.is_finite()) {
                self.status = Status::NonFinite;
            }
        }
        Ok(Diagnostics::steps_only(self.steps, self.status))
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
        let w = &self.window;
        match &self.velocity {
            Velocities::Steady(du, dv) => {
                let d = Displacements::<T, fn(usize, usize) -> (T, T)>::Rows(du, dv);
                step(p, w, rows, &self.f, &mut self.g, d)
            }
            Velocities::Swirl(s) => {
                let c = s.cos(p, self.steps as f64 * p.dt);
                let d = Displacements::At(|i, j| s.at::<T>(p, i, j, c));
                step(p, w, rows, &self.f, &mut self.g, d)
            }
        }
        Ok(())
    }
    fn commit(&mut self, steps: u64) {
        std::mem::swap(&mut self.f, &mut self.g);
        self.steps += steps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A row's interior by `cubic`, cell by cell: what `interior_row` must reproduce.
    fn by_cell<T: Real>(src: [&[T]; 5], du: &[T], dv: &[T]) -> Vec<T> {
        (0..du.len())
            .map(|i| {
                let x: [T; 5] = std::array::from_fn(|r| {
                    let s = &src[r][i..i + 5];
                    cubic(s[0], s[1], s[2], s[3], s[4], du[i])
                });
                cubic(x[0], x[1], x[2], x[3], x[4], dv[i])
            })
            .collect()
    }

    /// The bits (widened to f64: exact) of `interior_row::widest` and of `by_cell`.
    fn widest_and_by_cell<T: Real>(rows: &[Vec<T>], du: &[T], dv: &[T]) -> (Vec<u64>, Vec<u64>) {
        let src: [&[T]; 5] = std::array::from_fn(|r| &rows[r][..]);
        let mut out = vec![T::zero(); du.len()];
        interior_row::widest(src, du, dv, &mut out);
        let bits = |v: &[T]| v.iter().map(|x| x.as_f64().to_bits()).collect::<Vec<_>>();
        (bits(&out), bits(&by_cell(src, du, dv)))
    }

    proptest! {
        // Displacements on both sides of 0 and exactly 0, every vector width's tail.
        #[test]
        fn interior_row_is_cubic_bit_for_bit(
            n in 1usize..70,
            seed in any::<u64>(),
        ) {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let d = |rng: &mut rand::rngs::StdRng| match rng.random_range(0..8) {
                0 => 0.0,
                _ => rng.random_range(-1.0..=1.0),
            };
            let rows: Vec<Vec<f64>> =
                (0..5).map(|_| (0..n + 4).map(|_| rng.random_range(-2.0..2.0)).collect()).collect();
            let du: Vec<f64> = (0..n).map(|_| d(&mut rng)).collect();
            let dv: Vec<f64> = (0..n).map(|_| d(&mut rng)).collect();
            let (got, want) = widest_and_by_cell(&rows, &du, &dv);
            prop_assert_eq!(got, want);
            // f32 through the same rows.
            let narrow = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
            let rows32: Vec<Vec<f32>> = rows.iter().map(|r| narrow(r)).collect();
            let (got, want) = widest_and_by_cell(&rows32, &narrow(&du), &narrow(&dv));
            prop_assert_eq!(got, want);
        }
    }

    /// Each compiled form this CPU runs, not only the widest.
    #[test]
    fn every_form_gives_the_same_bits() {
        let n = 37;
        let rows: Vec<Vec<f32>> = (0..5)
            .map(|r| {
                (0..n + 4)
                    .map(|i| ((i * 7 + r * 13) % 11) as f32 * 0.37 - 1.3)
                    .collect()
            })
            .collect();
        let du: Vec<f32> = (0..n).map(|i| (i as f32 * 0.61).sin()).collect();
        let dv: Vec<f32> = (0..n).map(|i| (i as f32 * 0.43).cos()).collect();
        let src: [&[f32]; 5] = std::array::from_fn(|r| &rows[r][..]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let want = bits(&by_cell(src, &du, &dv));
        for form in crate::vector::Form::ALL {
            let mut out = vec![0.0f32; n];
            match interior_row::form(form, src, &du, &dv, &mut out) {
                Some(()) => assert_eq!(bits(&out), want, "{form:?}"),
                None => crate::say!("{form:?} does not run on this CPU: not checked"),
            }
        }
    }
}
