//! CPU reference engine for the heat equation: rayon over rows. It runs on the whole grid
//! or on a slab of it (src/parallel: planes in 3D, rows in 2D, one halo layer a step).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use rayon::prelude::*;

use super::HeatProblem;
use crate::error::Result;
use crate::memory::try_filled;
use crate::parallel::{Rows, Subdomain, Window, slab_of};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

pub struct CpuHeat<T> {
    p: HeatProblem,
    /// The layers along the slab axis ([`super::slab_axis`]) this engine computes.
    window: Window,
    u: Vec<T>,
    unew: Vec<T>,
    steps: u64,
    status: Status,
    /// A step has begun (some layers computed) and is not committed yet.
    in_step: bool,
}

impl<T: Real> CpuHeat<T> {
    /// `u0`: the field after `step0` steps (0 for the initial field).
    pub fn new(p: &HeatProblem, u0: Vec<T>, step0: u64) -> Result<Self> {
        crate::memory::ensure_host_fits(
            p.field_bytes(T::PRECISION),
            "the heat fields (two time layers)",
        )?;
        let window = Window::whole(p.shape[super::slab_axis(p.dims)], false);
        Self::with_buffer(p, window, u0, step0)
    }

    /// An engine for the layers `window` owns (a halo of one layer a step); `full`: the
    /// whole field after `step0` steps.
    pub fn on_window(p: &HeatProblem, window: Window, full: &[T], step0: u64) -> Result<Self> {
        let u = slab_of(&window, full, super::layer_len(p));
        Self::with_buffer(p, window, u, step0)
    }

    fn with_buffer(p: &HeatProblem, window: Window, u: Vec<T>, step0: u64) -> Result<Self> {
        let mut unew = try_filled(u.len(), T::zero(), "the heat fields")?;
        unew.copy_from_slice(&u);
        Ok(Self {
            p: p.clone(),
            window,
            u,
            unew,
            steps: step0,
            status: Status::Running,
            in_step: false,
        })
    }

    /// One step u → unew over the interior points of the grid layers `layers`; false if
    /// a non-finite value appeared.
    fn step(&mut self, layers: Range<usize>) -> bool {
        let [nz, ny, nx] = self.p.shape;
        let r = self.p.r();
        let (rz, ry, rx) = (T::lit(r[0]), T::lit(r[1]), T::lit(r[2]));
        let dims = self.p.dims;
        let w = &self.window;
        let axis = super::slab_axis(dims);
        // The buffer is the grid with the slab axis cut to the window's layers.
        let by = if axis == 1 { w.rows } else { ny };
        let plane = by * nx;
        let (z0, y0) = if axis == 0 {
            (w.base as usize, 0)
        } else {
            (0, w.base as usize)
        };
        let first = w.buffer_row(layers.start as isize);
        let lines = if axis == 0 { by } else { 1 };
        let u = &self.u;
        let out = &mut self.unew[first * lines * nx..(first + layers.len()) * lines * nx];
        let skip = first * lines;
        out.par_chunks_mut(nx)
            .enumerate()
            .map(|(line, out)| {
                let row = skip + line;
                let (z, y) = (z0 + row / by, y0 + row % by);
                let interior_y = dims < 2 || (y >= 1 && y + 1 < ny);
                let interior_z = dims < 3 || (z >= 1 && z + 1 < nz);
                if !(interior_y && interior_z) {
                    return true;
                }
                let (c, y, z) = neighbour_rows(u, row * nx, nx, plane, dims);
                row_step::widest(out, c, y, z, [rz, ry, rx], 1, nx - 1)
            })
            .reduce(|| true, |a, b| a && b)
    }
}

/// The row of `len` cells from index `base` of `grid` and its neighbour rows in y and z
/// (below, above), as `row_updates` takes them: the row itself on an axis a grid of
/// `dims` dimensions lacks; `plane` = the z stride.
pub fn neighbour_rows<T>(
    grid: &[T],
    base: usize,
    len: usize,
    plane: usize,
    dims: usize,
) -> (&[T], [&[T]; 2], [&[T]; 2]) {
    let c = &grid[base..base + len];
    let y = match dims >= 2 {
        true => [&grid[base - len..base], &grid[base + len..base + 2 * len]],
        false => [c, c],
    };
    let z = match dims >= 3 {
        true => [&grid[base - plane..][..len], &grid[base + plane..][..len]],
        false => [c, c],
    };
    (c, y, z)
}

/// The FTCS updates of cells lo..hi of one row into `out`: `c` the row, `y` and `z` its
/// neighbour rows below and above on those axes (the row itself on an axis the grid
/// lacks), `r` = [rz, ry, rx]; whether every new value is finite. Slices cut to the cells,
/// so the loop has no bound check and the compiler vectorises it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn row_updates<T: Real>(
    out: &mut [T],
    c: &[T],
    y: [&[T]; 2],
    z: [&[T]; 2],
    r: [T; 3],
    lo: usize,
    hi: usize,
) -> bool {
    let n = hi - lo;
    let out = &mut out[lo..hi];
    let (cc, xm, xp) = (&c[lo..hi], &c[lo - 1..hi - 1], &c[lo + 1..hi + 1]);
    let (ym, yp, zm, zp) = (&y[0][lo..hi], &y[1][lo..hi], &z[0][lo..hi], &z[1][lo..hi]);
    let [rz, ry, rx] = r;
    let mut finite = true;
    for x in 0..n {
        let v = update(cc[x], xm[x], xp[x], ym[x], yp[x], zm[x], zp[x], rx, ry, rz);
        finite &= v.is_finite();
        out[x] = v;
    }
    finite
}

crate::vector::vector_forms! {
    /// `row_updates` for SSE2, AVX2 and AVX-512 (`widest`: the widest this CPU runs).
    pub(crate) mod row_step = row_updates [T: Real] [T]
        (out: &mut [T], c: &[T], y: [&[T]; 2], z: [&[T]; 2], r: [T; 3], lo: usize, hi: usize)
            -> bool;
}

/// The FTCS update, in the one operation order every engine uses (kernels.cu too), so
/// engines agree bit for bit. Unused axes pass the centre value as both neighbours.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn update<T: Real>(c: T, xm: T, xp: T, ym: T, yp: T, zm: T, zp: T, rx: T, ry: T, rz: T) -> T {
    let two = T::lit(2.0);
    c + (rx * ((xm + xp) - two * c) + ry * ((ym + yp) - two * c) + rz * ((zm + zp) - two * c))
}

impl<T: Real> Engine for CpuHeat<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            if self.status != Status::Running {
                break;
            }
            self.compute(1, self.window.own.clone(), None)?;
            self.commit(1);
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(Diagnostics::steps_only(self.steps, self.status))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(super::field_of(&self.p, data))
    }
}

impl<T: Real> Subdomain for CpuHeat<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        super::layer_len(&self.p)
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Host(&mut self.u)
    }
    fn steps_per_exchange(&self) -> u64 {
        1
    }
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        _: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert_eq!(steps, 1, "the CPU engine takes one step between exchanges");
        // A step that has begun runs on all its layers even after one went non-finite.
        if self.status == Status::Running || self.in_step {
            self.in_step = true;
            if !self.step(rows) {
                self.status = Status::NonFinite;
            }
        }
        Ok(())
    }
    fn commit(&mut self, steps: u64) {
        if std::mem::take(&mut self.in_step) {
            std::mem::swap(&mut self.u, &mut self.unew);
            self.steps += steps;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::Form;

    /// Every compiled form of a row's updates: the bits of `update` cell by cell, and the
    /// finiteness verdict.
    #[test]
    fn row_forms_are_update_bit_for_bit() {
        let nx = 45;
        let row = |s: usize| -> Vec<f64> {
            (0..nx)
                .map(|i| (((i * 31 + s * 17) % 23) as f64 - 11.0) * 0.137)
                .collect()
        };
        let (c, ym, yp, zm, zp) = (row(0), row(1), row(2), row(3), row(4));
        let r = [0.11, 0.07, 0.13];
        let (lo, hi) = (3, nx - 2);
        let want: Vec<u64> = (lo..hi)
            .map(|x| {
                update(
                    c[x],
                    c[x - 1],
                    c[x + 1],
                    ym[x],
                    yp[x],
                    zm[x],
                    zp[x],
                    r[2],
                    r[1],
                    r[0],
                )
                .to_bits()
            })
            .collect();
        for form in Form::ALL {
            let mut out = vec![0.0; nx];
            match row_step::form(form, &mut out, &c, [&ym, &yp], [&zm, &zp], r, lo, hi) {
                Some(finite) => {
                    assert!(finite, "{form:?}");
                    let got: Vec<u64> = out[lo..hi].iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "{form:?}");
                    assert!(out[..lo].iter().chain(&out[hi..]).all(|&v| v == 0.0));
                }
                None => crate::say!("{form:?} does not run on this CPU: not checked"),
            }
            let mut bad = zp.clone();
            bad[hi - 1] = f64::INFINITY;
            let mut out = vec![0.0; nx];
            if let Some(finite) =
                row_step::form(form, &mut out, &c, [&ym, &yp], [&zm, &bad], r, lo, hi)
            {
                assert!(!finite, "{form:?} missed an infinite value");
            }
        }
    }
}
