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
                let base = row * nx;
                let mut finite = true;
                for (x, slot) in out.iter_mut().enumerate().take(nx - 1).skip(1) {
                    let i = base + x;
                    let c = u[i];
                    let (ym, yp) = if dims >= 2 {
                        (u[i - nx], u[i + nx])
                    } else {
                        (c, c)
                    };
                    let (zm, zp) = if dims >= 3 {
                        (u[i - plane], u[i + plane])
                    } else {
                        (c, c)
                    };
                    let v = update(c, u[i - 1], u[i + 1], ym, yp, zm, zp, rx, ry, rz);
                    finite &= v.is_finite();
                    *slot = v;
                }
                finite
            })
            .reduce(|| true, |a, b| a && b)
    }
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
