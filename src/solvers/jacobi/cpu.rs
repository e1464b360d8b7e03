//! CPU reference engine: rayon over rows. Row residual sums are added in row order, so
//! the result does not depend on the number of threads. The engine works on a
//! [`Window`] of rows: the whole grid, or a slab of a decomposed run whose residual sums
//! the run adds up over the slabs.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use rayon::prelude::*;

use super::{Coefficients, Fields, JacobiEngine, JacobiProblem, Manufactured};
use crate::error::Result;
use crate::memory::{ensure_host_fits, try_filled};
use crate::parallel::{Partials, Rows, Subdomain, Window, row_totals, slab_of};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Iterations, Status};

pub struct CpuJacobi<T> {
    problem: JacobiProblem,
    c: Coefficients,
    /// The rows computed and the rows the buffers hold (one halo row each side).
    window: Window,
    u: Vec<T>,
    unew: Vec<T>,
    f: Vec<T>,
    it: Iterations,
    /// Σ resid² per owned row of the step being computed (0 on boundary rows).
    partial: Vec<f64>,
}

impl<T: Real> CpuJacobi<T> {
    pub fn new(problem: &JacobiProblem, fields: Fields<T>) -> Result<Self> {
        let (n, m) = (problem.n, problem.m);
        let what = "the Jacobi fields on the host";
        ensure_host_fits(problem.field_bytes(T::PRECISION), what)?;
        let (u, f) = match fields {
            Fields::Manufactured => {
                let mut f = try_filled(n * m, T::zero(), what)?;
                fill_forcing(problem, &Window::whole(m, false), &mut f);
                (try_filled(n * m, T::zero(), what)?, f)
            }
            Fields::Given { f, u0 } => (u0, f),
        };
        Self::on_buffers(problem, Window::whole(m, false), u, f, 0, Status::Running)
    }

    /// An engine for the rows `window` owns, from the whole iterate `u` after `step`
    /// sweeps in `status` (f is rebuilt from the manufactured solution).
    pub fn on_window(
        problem: &JacobiProblem,
        window: Window,
        u: &[T],
        step: u64,
        status: Status,
    ) -> Result<Self> {
        let n = problem.n;
        let mut f = try_filled(window.rows * n, T::zero(), "the Jacobi forcing of a slab")?;
        fill_forcing(problem, &window, &mut f);
        let u = slab_of(&window, u, n);
        Self::on_buffers(problem, window, u, f, step, status)
    }

    fn on_buffers(
        problem: &JacobiProblem,
        window: Window,
        u: Vec<T>,
        f: Vec<T>,
        step: u64,
        status: Status,
    ) -> Result<Self> {
        let mut unew = try_filled(u.len(), T::zero(), "the Jacobi fields on the host")?;
        unew.copy_from_slice(&u);
        Ok(Self {
            problem: problem.clone(),
            c: problem.coefficients(),
            u,
            unew,
            f,
            partial: vec![0.0; window.own.len()],
            window,
            it: Iterations::new(step, status),
        })
    }

    /// One sweep u → unew over the interior rows among grid rows `rows`; Σ resid² of
    /// each row goes to `partial`.
    fn sweep(&mut self, rows: Range<usize>) {
        let n = self.problem.n;
        let m = self.problem.m;
        // Interior rows only: the boundary rows keep their values.
        let rows = rows.start.max(1)..rows.end.min(m - 1);
        if rows.is_empty() {
            return;
        }
        let first = self.window.buffer_row(rows.start as isize);
        let (ax, ay, b, rb, omega) = (
            T::lit(self.c.ax),
            T::lit(self.c.ay),
            T::lit(self.c.b),
            T::lit(self.c.rb),
            T::lit(self.problem.relax),
        );
        let u = &self.u;
        let f = &self.f;
        let at = rows.start - self.window.own.start;
        let sums = &mut self.partial[at..at + rows.len()];
        self.unew[first * n..(first + rows.len()) * n]
            .par_chunks_mut(n)
            .zip(sums.par_iter_mut())
            .enumerate()
            .for_each(|(r, (out, sum))| {
                let j = first + r;
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
                *sum = acc;
            });
    }
}

/// f of the manufactured solution on the rows of `window`, row by row in parallel.
fn fill_forcing<T: Real>(problem: &JacobiProblem, window: &Window, f: &mut [T]) {
    let kind: Manufactured = problem.exact;
    f.par_chunks_mut(problem.n)
        .enumerate()
        .for_each(|(l, row)| {
            let j = window.grid_row(l);
            for (i, v) in row.iter_mut().enumerate() {
                let (x, y) = problem.point(i, j);
                *v = T::lit(kind.forcing(problem.alpha, x, y));
            }
        });
}

impl<T: Real> Engine for CpuJacobi<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            if !self.it.running() {
                break;
            }
            self.compute(1, self.window.own.clone(), None)?;
            self.commit(1);
            let totals = row_totals(&self.take_partial(), 1);
            self.record_total(&totals);
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(self.it.diagnostics())
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(field_of(&self.problem, data))
    }
}

impl<T: Real> Subdomain for CpuJacobi<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.problem.n
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
        assert_eq!(steps, 1, "the CPU engine takes one sweep between exchanges");
        if self.it.running() {
            self.sweep(rows);
        }
        Ok(())
    }
    fn commit(&mut self, _steps: u64) {
        if self.it.running() {
            std::mem::swap(&mut self.u, &mut self.unew);
        }
    }
    fn partials(&mut self) -> Partials {
        Partials::Host { per_row: 1 }
    }
    fn take_partial(&mut self) -> Vec<f64> {
        let zeros = vec![0.0; self.partial.len()];
        std::mem::replace(&mut self.partial, zeros)
    }
    fn record_total(&mut self, totals: &[f64]) {
        if self.it.running() {
            let err = totals[0].sqrt() / self.problem.cells() as f64;
            self.it.record(err, self.problem.tolerance);
        }
    }
    fn running(&self) -> bool {
        self.it.running()
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
