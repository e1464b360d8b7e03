//! CPU reference engine: rayon over rows. Row residual sums are added in row order, so
//! the result does not depend on the number of threads.

use rayon::prelude::*;

use super::{Coefficients, Fields, JacobiEngine, JacobiProblem, Manufactured};
use crate::error::Result;
use crate::memory::{ensure_host_fits, try_filled};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Iterations, Status};

pub struct CpuJacobi<T> {
    problem: JacobiProblem,
    c: Coefficients,
    u: Vec<T>,
    unew: Vec<T>,
    f: Vec<T>,
    it: Iterations,
}

impl<T: Real> CpuJacobi<T> {
    pub fn new(problem: &JacobiProblem, fields: Fields<T>) -> Result<Self> {
        let (n, m) = (problem.n, problem.m);
        let what = "the Jacobi fields on the host";
        ensure_host_fits(problem.field_bytes(T::PRECISION), what)?;
        let (u, f) = match fields {
            Fields::Manufactured => {
                let mut f = try_filled(n * m, T::zero(), what)?;
                fill_forcing(problem, &mut f);
                (try_filled(n * m, T::zero(), what)?, f)
            }
            Fields::Given { f, u0 } => (u0, f),
        };
        let mut unew = try_filled(n * m, T::zero(), what)?;
        unew.copy_from_slice(&u);
        Ok(Self {
            problem: problem.clone(),
            c: problem.coefficients(),
            u,
            unew,
            f,
            it: Iterations::new(0, Status::Running),
        })
    }

    /// One sweep u → unew over the interior; returns Σ resid².
    fn sweep(&mut self) -> f64 {
        let n = self.problem.n;
        let m = self.problem.m;
        let (ax, ay, b, rb, omega) = (
            T::lit(self.c.ax),
            T::lit(self.c.ay),
            T::lit(self.c.b),
            T::lit(self.c.rb),
            T::lit(self.problem.relax),
        );
        let u = &self.u;
        let f = &self.f;
        let row_sums: Vec<f64> = self
            .unew
            .par_chunks_mut(n)
            .enumerate()
            .skip(1)
            .take(m - 2)
            .map(|(j, out)| {
                let up = &u[(j - 1) * n..j * n];
                let mid = &u[j * n..(j + 1) * n];
                let dn = &u[(j + 1) * n..(j + 2) * n];
                let fr = &f[j * n..(j + 1) * n];
                let mut acc = 0.0f64;
                for i in 1..n - 1 {
                    let resid =
                        (ax * (mid[i - 1] + mid[i + 1]) + ay * (up[i] + dn[i]) + b * mid[i]
                            - fr[i])
                            * rb;
                    out[i] = mid[i] - omega * resid;
                    let r = resid.as_f64();
                    acc += r * r;
                }
                acc
            })
            .collect();
        std::mem::swap(&mut self.u, &mut self.unew);
        row_sums.iter().sum()
    }
}

/// f of the manufactured solution, row by row in parallel.
fn fill_forcing<T: Real>(problem: &JacobiProblem, f: &mut [T]) {
    let kind: Manufactured = problem.exact;
    f.par_chunks_mut(problem.n)
        .enumerate()
        .for_each(|(j, row)| {
            for (i, v) in row.iter_mut().enumerate() {
                let (x, y) = problem.point(i, j);
                *v = T::lit(kind.forcing(problem.alpha, x, y));
            }
        });
}

impl<T: Real> Engine for CpuJacobi<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let norm = self.problem.cells() as f64;
        for _ in 0..steps {
            if !self.it.running() {
                break;
            }
            let err = self.sweep().sqrt() / norm;
            self.it.record(err, self.problem.tolerance);
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(self.it.diagnostics())
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        Ok(field_of(&self.problem, self.u.clone()))
    }
}

/// Wrap a host copy of u with the grid's geometry (axes in (y, x) order).
pub(super) fn field_of<T>(p: &JacobiProblem, data: Vec<T>) -> Field<T> {
    let c = p.coefficients();
    Field {
        name: "u",
        shape: vec![p.m, p.n],
        spacing: vec![c.dy, c.dx],
        origin: vec![-1.0, -1.0],
        coords: None,
        data,
    }
}

impl<T: Real> JacobiEngine for CpuJacobi<T> {
    fn solution_error(&mut self) -> Result<f64> {
        Ok(solution_error(&self.problem, &self.u))
    }

    fn resume(&mut self, step: u64, status: Status, u: &[T]) -> Result<()> {
        self.u.copy_from_slice(u);
        self.unew.copy_from_slice(u);
        self.it = Iterations::new(step, status);
        Ok(())
    }
}

/// sqrt(Σ(u − u_exact)²)/(n·m) of a host copy of u, summed row by row in row order.
pub fn solution_error<T: Real>(p: &JacobiProblem, u: &[T]) -> f64 {
    let sum: f64 = u
        .par_chunks(p.n)
        .enumerate()
        .map(|(j, row)| {
            row.iter()
                .enumerate()
                .map(|(i, v)| {
                    let (x, y) = p.point(i, j);
                    let e = v.as_f64() - p.exact.exact(x, y);
                    e * e
                })
                .sum::<f64>()
        })
        .collect::<Vec<_>>()
        .iter()
        .sum();
    p.solution_error_from_sum(sum)
}
