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
///
/// Two ways to move the data: *staged*, where the host gathers each input box into
/// [`BoxExecutor::stage`]'s buffer and scatters each whole result back, or *direct*, where
/// the executor copies inputs straight out of the grid and writes each task's early region
/// straight back (a pinned grid and DMA on CUDA), leaving the host only the late strips.
pub trait BoxExecutor<T: Real> {
    /// Whether the executor reads inputs from, and writes early regions to, the grid.
    fn direct(&self) -> bool;
    /// Staged only: the host buffer to fill with the next task's input box (waits until
    /// it is free).
    fn stage(&mut self, values: usize) -> Result<&mut [T]>;
    /// Queue a task: its input in (staged: from the buffer just filled; direct: from
    /// `grid`), `steps` steps (global step `step0` first), its result out. `next`: the
    /// task launched after it, whose `carried` part the executor may copy across.
    fn launch(
        &mut self,
        task: &Task,
        next: Option<&Task>,
        steps: usize,
        step0: u64,
        grid: GridView<T>,
    ) -> Result<Launched>;
    /// Direct only: wait until a launched task's input has been read out of the grid.
    fn wait_input(&mut self, input: usize) -> Result<()>;
    /// Wait for a launched task; what the host writes back: the whole result region
    /// (staged) or the late strips one after the other (direct), contiguous, row-major.
    fn result(&mut self, ticket: usize) -> Result<&[T]>;
    /// The ticket's buffer may be reused.
    fn release(&mut self, ticket: usize);
    /// The first global step that produced a non-finite value, if any.
    fn first_bad_step(&mut self) -> Result<Option<u64>>;
    /// Tasks that may be in flight before the host waits for the oldest one's result.
    fn depth(&self) -> usize;
    /// Let go of the grid (unpin it): it is about to be moved or freed.
    fn release_grid(&mut self) {}
}

/// What [`BoxExecutor::launch`] hands back: a ticket for the result and one for the
/// input copy.
#[derive(Debug, Clone, Copy)]
pub struct Launched {
    pub result: usize,
    pub input: usize,
}

/// The host grid during a pass, as raw parts: device copies read and write parts of it
/// while the host scatters into others, so no Rust reference to the whole grid is alive.
/// The plan keeps all of these accesses disjoint.
pub struct GridView<T> {
    ptr: *mut T,
    len: usize,
    shape: [usize; 3],
}

impl<T> Clone for GridView<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GridView<T> {}
// SAFETY: a view is only dereferenced through `gather` and `scatter`, whose callers keep
// the rows that parallel tasks touch disjoint.
unsafe impl<T: Send> Send for GridView<T> {}
unsafe impl<T: Send> Sync for GridView<T> {}

impl<T> GridView<T> {
    pub fn new(grid: &mut [T], shape: [usize; 3]) -> Self {
        assert_eq!(grid.len(), shape.iter().product::<usize>());
        Self {
            ptr: grid.as_mut_ptr(),
            len: grid.len(),
            shape,
        }
    }

    pub fn as_ptr(self) -> *mut T {
        self.ptr
    }

    pub fn shape(self) -> [usize; 3] {
        self.shape
    }

    /// Grid index of the first point of row `row` (counted z-major) of `region`.
    fn row_start(self, region: &Region, row: usize) -> usize {
        let by = region.hi[1] - region.lo[1];
        let (z, y) = (region.lo[0] + row / by, region.lo[1] + row % by);
        (z * self.shape[1] + y) * self.shape[2] + region.lo[2]
    }

    /// Rows per parallel work item: about 1 MiB, so rayon's overhead stays small.
    fn rows_per_item(row: usize) -> usize {
        ((1 << 20) / (row * std::mem::size_of::<T>()).max(1)).max(1)
    }

    fn check(self, region: &Region, values: usize) {
        assert!(region.hi.iter().zip(self.shape).all(|(h, n)| *h <= n));
        assert!(values >= region.len());
        debug_assert!(region.is_empty() || self.row_start(region, 0) < self.len);
    }
}

impl<T: Real> GridView<T> {
    /// `grid[region]` → out (contiguous).
    ///
    /// # Safety
    /// Nothing writes `region` of the grid meanwhile.
    pub unsafe fn gather(self, region: &Region, out: &mut [T]) {
        if region.is_empty() {
            return;
        }
        self.check(region, out.len());
        let bx = region.shape()[2];
        let k = Self::rows_per_item(bx);
        out[..region.len()]
            .par_chunks_mut(bx * k)
            .enumerate()
            .for_each(|(item, rows)| {
                for (r, dst) in rows.chunks_mut(bx).enumerate() {
                    let i = self.row_start(region, item * k + r);
                    // SAFETY: the row lies inside the grid (checked) and is not written
                    // meanwhile (the caller's promise).
                    unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(i), dst.as_mut_ptr(), bx) };
                }
            });
    }

    /// src (contiguous) → `grid[region]`.
    ///
    /// # Safety
    /// Nothing else reads or writes `region` of the grid meanwhile.
    pub unsafe fn scatter(self, src: &[T], region: &Region) {
        if region.is_empty() {
            return;
        }
        self.check(region, src.len());
        let bx = region.shape()[2];
        let k = Self::rows_per_item(bx);
        src[..region.len()]
            .par_chunks(bx * k)
            .enumerate()
            .for_each(|(item, rows)| {
                for (r, from) in rows.chunks(bx).enumerate() {
                    let i = self.row_start(region, item * k + r);
                    // SAFETY: rows of a region are disjoint and inside the grid (checked),
                    // and nothing else touches them (the caller's promise).
                    unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), self.ptr.add(i), bx) };
                }
            });
    }
}

/// The launches that advance a task `steps` steps: (first step, steps) in order, passes of
/// `levels` steps while a whole one is left, single steps for the rest (all single without
/// passes). The GPU executor launches them and the cost model prices them.
pub fn launches(steps: usize, levels: Option<usize>) -> impl Iterator<Item = (usize, usize)> {
    let levels = levels.unwrap_or(1).max(1);
    let mut k = 1;
    std::iter::from_fn(move || {
        let n = if k + levels - 1 <= steps { levels } else { 1 };
        (k <= steps).then(|| {
            k += n;
            (k - n, n)
        })
    })
}

/// Runs passes of a plan against an executor, keeping one copy of the grid on the host.
pub struct Scheduler {
    shape: [usize; 3],
}

impl Scheduler {
    pub fn new(shape: [usize; 3]) -> Self {
        Self { shape }
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
        // From here on the grid is touched only through the view (see GridView).
        let view = GridView::new(grid, self.shape);
        let direct = exec.direct();
        let mut pending: VecDeque<(usize, usize)> = VecDeque::new();
        let mut inputs = Vec::with_capacity(plan.tasks.len());
        let lag = exec.depth().saturating_sub(1);
        let mut trace = PassTrace::default();
        let start = Instant::now();
        for (i, task) in plan.tasks.iter().enumerate() {
            if !direct {
                let t = Instant::now();
                let buf = exec.stage(task.input.len())?;
                trace.stage_wait += t.elapsed().as_secs_f64();
                let t = Instant::now();
                // SAFETY: results are written back only after their last reader's input
                // has been read (below), and this task is the latest reader so far.
                unsafe { view.gather(&task.input, buf) };
                trace.gather += t.elapsed().as_secs_f64();
            }
            let t = Instant::now();
            let launched = exec.launch(task, plan.tasks.get(i + 1), steps, step0, view)?;
            trace.launch += t.elapsed().as_secs_f64();
            inputs.push(launched.input);
            pending.push_back((i, launched.result));
            // Write back results nobody will read old values from, oldest first, once
            // their last reader is far enough behind that its copy in has finished
            // (waiting on the newest copy would let the copy engine run dry).
            while let Some(&(j, t)) = pending.front() {
                if plan.last_reader[j] + lag > i {
                    break;
                }
                self.write_back(plan, j, t, &inputs, view, exec, &mut trace)?;
                pending.pop_front();
            }
        }
        while let Some((j, t)) = pending.pop_front() {
            self.write_back(plan, j, t, &inputs, view, exec, &mut trace)?;
        }
        if std::env::var_os("KEISAN_TRACE").is_some() {
            trace.total = start.elapsed().as_secs_f64();
            trace.print(plan.tasks.len());
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn write_back<T: Real>(
        &self,
        plan: &Plan,
        j: usize,
        ticket: usize,
        inputs: &[usize],
        view: GridView<T>,
        exec: &mut dyn BoxExecutor<T>,
        trace: &mut PassTrace,
    ) -> Result<()> {
        let task = &plan.tasks[j];
        let direct = exec.direct();
        let t = Instant::now();
        if direct {
            exec.wait_input(inputs[plan.last_reader[j]])?;
        }
        let res = exec.result(ticket)?;
        trace.result_wait += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let parts = if direct {
            &task.late[..]
        } else {
            std::slice::from_ref(&task.result)
        };
        let mut offset = 0;
        for part in parts {
            // SAFETY: every task that reads this part's old values has read them (the
            // scheduler's order, and `wait_input` for copies still in flight), and no
            // executor writes it (early regions and other tasks' results are disjoint).
            unsafe { view.scatter(&res[offset..], part) };
            offset += part.len();
        }
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
    total: f64,
    stage_wait: f64,
    gather: f64,
    launch: f64,
    result_wait: f64,
    scatter: f64,
}

impl PassTrace {
    fn print(&self, tasks: usize) {
        crate::say!(
            "pyramid pass, {tasks} tasks, {:.1} ms: stage wait {:.1} ms, gather {:.1} ms, \
             launch {:.1} ms, result wait {:.1} ms, scatter {:.1} ms",
            self.total * 1e3,
            self.stage_wait * 1e3,
            self.gather * 1e3,
            self.launch * 1e3,
            self.result_wait * 1e3,
            self.scatter * 1e3
        );
    }
}

/// The heat equation advanced out-of-core: grid on the host, passes of the pyramid plan.
pub struct PyramidHeat<T: Real> {
    p: HeatProblem,
    plan: Plan,
    // Declared before `grid`: fields drop in order, and the executor may hold the grid
    // pinned.
    exec: Box<dyn BoxExecutor<T>>,
    grid: Vec<T>,
    scheduler: Scheduler,
    steps: u64,
    status: Status,
}

impl<T: Real> PyramidHeat<T> {
    /// `grid`: the field after `step0` steps (0 for the initial field).
    pub fn new(
        p: &HeatProblem,
        grid: Vec<T>,
        step0: u64,
        plan: Plan,
        exec: Box<dyn BoxExecutor<T>>,
    ) -> Self {
        Self {
            scheduler: Scheduler::new(p.shape),
            p: p.clone(),
            grid,
            plan,
            exec,
            steps: step0,
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
        self.exec.release_grid();
        Ok(super::field_of(&self.p, std::mem::take(&mut self.grid)))
    }
}

#[cfg(test)]
mod tests {
    use super::launches;

    #[test]
    fn launches_take_whole_passes_then_single_steps() {
        let all = |steps, levels| launches(steps, levels).collect::<Vec<_>>();
        assert_eq!(all(9, Some(4)), [(1, 4), (5, 4), (9, 1)]);
        assert_eq!(all(6, Some(4)), [(1, 4), (5, 1), (6, 1)]);
        assert_eq!(all(3, Some(4)), [(1, 1), (2, 1), (3, 1)]);
        assert_eq!(all(3, None), [(1, 1), (2, 1), (3, 1)]);
        assert_eq!(all(0, Some(4)), []);
    }
}
