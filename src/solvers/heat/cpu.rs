//! CPU reference engine for the heat equation: rayon over rows.

use rayon::prelude::*;

use super::HeatProblem;
use crate::error::Result;
use crate::memory::try_filled;
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

pub struct CpuHeat<T> {
    p: HeatProblem,
    u: Vec<T>,
    unew: Vec<T>,
    steps: u64,
    status: Status,
}

impl<T: Real> CpuHeat<T> {
    /// `u0`: the field after `step0` steps (0 for the initial field).
    pub fn new(p: &HeatProblem, u0: Vec<T>, step0: u64) -> Result<Self> {
        crate::memory::ensure_host_fits(
            p.field_bytes(T::PRECISION),
            "the heat fields (two time layers)",
        )?;
        let mut unew = try_filled(u0.len(), T::zero(), "the heat fields")?;
        unew.copy_from_slice(&u0);
        Ok(Self {
            p: p.clone(),
            u: u0,
            unew,
            steps: step0,
            status: Status::Running,
        })
    }

    /// One step u → unew over the interior; false if a non-finite value appeared.
    fn step(&mut self) -> bool {
        let [nz, ny, nx] = self.p.shape;
        let r = self.p.r();
        let (rz, ry, rx) = (T::lit(r[0]), T::lit(r[1]), T::lit(r[2]));
        let dims = self.p.dims;
        let u = &self.u;
        let plane = ny * nx;
        let all_finite = self
            .unew
            .par_chunks_mut(nx)
            .enumerate()
            .map(|(row, out)| {
                let (z, y) = (row / ny, row % ny);
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
            .reduce(|| true, |a, b| a && b);
        std::mem::swap(&mut self.u, &mut self.unew);
        all_finite
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
            let finite = self.step();
            self.steps += 1;
            if !finite {
                self.status = Status::NonFinite;
            }
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(Diagnostics::steps_only(self.steps, self.status))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        Ok(super::field_of(&self.p, self.u.clone()))
    }
}
