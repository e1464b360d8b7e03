//! The out-of-core pyramid method (seed 002): the grid lives in host memory and the device
//! holds a few task boxes. One pass advances every task n steps; see [`plan`] for the
//! geometry and [`Scheduler`] for the order of copies and write-backs.
//!
//! The same scheduler drives a CPU executor with a capped workspace (so CI exercises every
//! decomposition and edge without a GPU) and the CUDA executor, which overlaps host
//! staging, both copy directions and compute.

pub mod cpu;
pub mod cuda;
pub mod plan;

use std::collections::VecDeque;
use std::time::Instant;

use rayon::prelude::*;

pub use plan::{Decomposition, Plan, Region, Task};

use super::HeatProblem;
use crate::error::Result;
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

/// A device (or stand-in) that runs tasks: input box in, n steps, result region out.
pub trait BoxExecutor<T: Real> {
    /// The host buffer to fill with the next task's input box (waits until it is free).
    fn stage(&mut self, values: usize) -> Result<&mut [T]>;
    /// Queue the staged task: copy in, advance `steps` steps (global step `step0` first),
    /// copy the result region out. Returns a ticket for [`BoxExecutor::result`].
    fn launch(&mut self, task: &Task, steps: usize, step0: u64) -> Result<usize>;
    /// Wait for a launched task; its result region, contiguous and row-major.
    fn result(&mut self, ticket: usize) -> Result<&[T]>;
    /// The ticket's buffer may be reused.
    fn release(&mut self, ticket: usize);
    /// The first global step that produced a non-finite value, if any.
    fn first_bad_step(&mut self) -> Result<Option<u64>>;
    /// Tasks that may be in flight before the host waits for the oldest one's result.
    fn depth(&self) -> usize;
}

/// Copies between the host grid and contiguous boxes, one x-row at a time.
struct Rows {
    shape: [usize; 3],
}

/// A pointer that rayon tasks may share; each task writes disjoint rows.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: used only to write disjoint rows from parallel tasks (see `scatter`).
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// Taking `self` makes closures capture the wrapper, not the bare pointer.
    fn get(self) -> *mut T {
        self.0
    }
}

impl Rows {
    /// Grid index of the first point of row `row` (counted z-major) of `region`.
    fn row_start(&self, region: &Region, row: usize) -> usize {
        let by = region.hi[1] - region.lo[1];
        let (z, y) = (region.lo[0] + row / by, region.lo[1] + row % by);
        (z * self.shape[1] + y) * self.shape[2] + region.lo[2]
    }

    /// Rows per parallel work item: about 1 MiB, so rayon's overhead stays small.
    fn rows_per_item<T>(row: usize) -> usize {
        ((1 << 20) / (row * std::mem::size_of::<T>()).max(1)).max(1)
    }

    /// grid[region] → out (contiguous).
    fn gather<T: Real>(&self, grid: &[T], region: &Region, out: &mut [T]) {
        let bx = region.shape()[2];
        let k = Self::rows_per_item::<T>(bx);
        out[..region.len()]
            .par_chunks_mut(bx * k)
            .enumerate()
            .for_each(|(item, rows)| {
                for (r, dst) in rows.chunks_mut(bx).enumerate() {
                    let i = self.row_start(region, item * k + r);
                    dst.copy_from_slice(&grid[i..i + bx]);
                }
            });
    }

    /// src (contiguous) → grid[region].
    fn scatter<T: Real>(&self, src: &[T], region: &Region, grid: &mut [T]) {
        let bx = region.shape()[2];
        assert!(region.hi.iter().zip(self.shape).all(|(h, n)| *h <= n));
        assert!(src.len() >= region.len());
        let base = SharedMut(grid.as_mut_ptr());
        let k = Self::rows_per_item::<T>(bx);
        src[..region.len()]
            .par_chunks(bx * k)
            .enumerate()
            .for_each(|(item, rows)| {
                for (r, from) in rows.chunks(bx).enumerate() {
                    let i = self.row_start(region, item * k + r);
                    // SAFETY: rows of a region are disjoint and inside the grid (asserted
                    // above).
                    unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), base.get().add(i), bx) };
                }
            });
    }
}

/// Runs passes of a plan against an executor, keeping one copy of the grid on the host.
pub struct Scheduler {
    rows: Rows,
}

impl Scheduler {
    pub fn new(shape: [usize; 3]) -> Self {
        Self {
            rows: Rows { shape },
        }
    }

    /// Advance the whole grid `steps` ≤ plan.height steps (global step `step0` first).
    pub fn pass<T: Real>(
        &self,
        plan: &Plan,
        grid: &mut [T],
        exec: &mut dyn BoxExecutor<T>,
        steps: usize,
        step0: u64,
    ) -> Result<()> {
        assert!(steps >= 1 && steps <= plan.height);
        let mut pending: VecDeque<(usize, usize)> = VecDeque::new();
        let lag = exec.depth().saturating_sub(1);
        let mut trace = PassTrace::default();
        for (i, task) in plan.tasks.iter().enumerate() {
            let t = Instant::now();
            let buf = exec.stage(task.input.len())?;
            trace.stage_wait += t.elapsed().as_secs_f64();
            let t = Instant::now();
            self.rows.gather(grid, &task.input, buf);
            trace.gather += t.elapsed().as_secs_f64();
            let ticket = exec.launch(task, steps, step0)?;
            pending.push_back((i, ticket));
            // Write back results nobody will read old values from, oldest first, once
            // they are far enough behind not to stall the pipeline.
            while let Some(&(j, t)) = pending.front() {
                if plan.last_reader[j] > i || j + lag > i {
                    break;
                }
                self.write_back(plan, j, t, grid, exec, &mut trace)?;
                pending.pop_front();
            }
        }
        while let Some((j, t)) = pending.pop_front() {
            self.write_back(plan, j, t, grid, exec, &mut trace)?;
        }
        if std::env::var_os("KEISAN_TRACE").is_some() {
            trace.print(plan.tasks.len());
        }
        Ok(())
    }

    fn write_back<T: Real>(
        &self,
        plan: &Plan,
        j: usize,
        ticket: usize,
        grid: &mut [T],
        exec: &mut dyn BoxExecutor<T>,
        trace: &mut PassTrace,
    ) -> Result<()> {
        let t = Instant::now();
        let res = exec.result(ticket)?;
        trace.result_wait += t.elapsed().as_secs_f64();
        let t = Instant::now();
        self.rows.scatter(res, &plan.tasks[j].result, grid);
        trace.scatter += t.elapsed().as_secs_f64();
        exec.release(ticket);
        Ok(())
    }
}

/// Where the host thread spent a pass (KEISAN_TRACE=1 prints it): waiting for a free
/// staging buffer, gathering inputs, waiting for results, scattering them back. Tells a
/// host-bound pass (gather + scatter ≈ pass) from a device-bound one (waits dominate).
#[derive(Default)]
struct PassTrace {
    stage_wait: f64,
    gather: f64,
    result_wait: f64,
    scatter: f64,
}

impl PassTrace {
    fn print(&self, tasks: usize) {
        eprintln!(
            "pyramid pass, {tasks} tasks: stage wait {:.1} ms, gather {:.1} ms, result wait \
             {:.1} ms, scatter {:.1} ms",
            self.stage_wait * 1e3,
            self.gather * 1e3,
            self.result_wait * 1e3,
            self.scatter * 1e3
        );
    }
}

/// The heat equation advanced out-of-core: grid on the host, passes of the pyramid plan.
pub struct PyramidHeat<T: Real> {
    p: HeatProblem,
    grid: Vec<T>,
    plan: Plan,
    exec: Box<dyn BoxExecutor<T>>,
    scheduler: Scheduler,
    steps: u64,
    status: Status,
}

impl<T: Real> PyramidHeat<T> {
    pub fn new(p: &HeatProblem, grid: Vec<T>, plan: Plan, exec: Box<dyn BoxExecutor<T>>) -> Self {
        Self {
            scheduler: Scheduler::new(p.shape),
            p: p.clone(),
            grid,
            plan,
            exec,
            steps: 0,
            status: Status::Running,
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The host grid (current state).
    pub fn grid(&self) -> &[T] {
        &self.grid
    }
}

impl<T: Real> Engine for PyramidHeat<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let mut left = steps;
        while left > 0 && self.status == Status::Running {
            let s = left.min(self.plan.height as u64);
            self.scheduler.pass(
                &self.plan,
                &mut self.grid,
                self.exec.as_mut(),
                s as usize,
                self.steps,
            )?;
            // A NaN is reported at its step; the pass it appeared in is not undone.
            if let Some(bad) = self.exec.first_bad_step()? {
                self.steps = bad + 1;
                self.status = Status::NonFinite;
                break;
            }
            self.steps += s;
            left -= s;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(Diagnostics::steps_only(self.steps, self.status))
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        Ok(super::field_of(&self.p, self.grid.clone()))
    }

    fn step_granularity(&self) -> u64 {
        self.plan.height as u64
    }

    fn take_snapshot(&mut self) -> Result<Field<T>> {
        Ok(super::field_of(&self.p, std::mem::take(&mut self.grid)))
    }
}
