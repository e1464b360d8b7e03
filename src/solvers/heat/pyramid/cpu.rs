//! The pyramid executor on the CPU: a capped workspace of two boxes stands in for device
//! memory, so the scheduler, both decompositions and every edge case run in CI.

use rayon::prelude::*;

use super::{BoxExecutor, GridView, Launched, Region, Task};
use crate::error::Result;
use crate::memory::try_filled;
use crate::precision::Real;
use crate::solvers::heat::HeatProblem;
use crate::solvers::heat::cpu::{neighbour_rows, row_step};

/// Values of a box a thread takes at least, in whole rows (see `step_box`).
const ROW_JOB_VALUES: usize = 1 << 15;

/// One step inside a box: write `region` (local indices) of `dst` from `src`. Points on the
/// grid's boundary are copied (Dirichlet), the rest updated. False if a value is non-finite.
pub fn step_box<T: Real>(
    p: &HeatProblem,
    origin: [usize; 3],
    shape: [usize; 3],
    region: &Region,
    src: &[T],
    dst: &mut [T],
) -> bool {
    let r = p.r();
    let (rz, ry, rx) = (T::lit(r[0]), T::lit(r[1]), T::lit(r[2]));
    let dims = p.dims;
    let [_, by, bx] = shape;
    let plane = by * bx;
    let edge = |a: usize, local: usize| {
        a >= 3 - dims && {
            let g = origin[a] + local;
            g == 0 || g + 1 == p.shape[a]
        }
    };
    let len = shape.iter().product::<usize>();
    // Rows shared out in jobs of at least ROW_JOB_VALUES values: a pyramid's boxes are
    // small, and one job per row spent most of a step in the thread pool's hand-offs
    // (a 1024² grid through 2 threads, 2026-11-29: 6× the cost model's time).
    dst[..len]
        .par_chunks_mut(bx)
        .enumerate()
        .with_min_len(ROW_JOB_VALUES.div_ceil(bx))
        .map(|(row, out)| {
            let (z, y) = (row / by, row % by);
            if z < region.lo[0] || z >= region.hi[0] || y < region.lo[1] || y >= region.hi[1] {
                return true;
            }
            let (lo, hi) = (region.lo[2], region.hi[2]);
            let base = row * bx;
            let c = &src[base..base + bx];
            if edge(0, z) || edge(1, y) {
                out[lo..hi].copy_from_slice(&c[lo..hi]);
                return c[lo..hi].iter().all(|v| v.is_finite());
            }
            // Cells on the grid's x edges are copied; a..b, the others, updated.
            let a = lo.max(usize::from(origin[2] == 0)).min(hi);
            let b = hi.min(p.shape[2] - 1 - origin[2]).max(a);
            let mut finite = true;
            for x in (lo..a).chain(b..hi) {
                out[x] = c[x];
                finite &= c[x].is_finite();
            }
            if a < b {
                let (_, y, z) = neighbour_rows(src, base, bx, plane, dims);
                finite &= row_step::widest(out, c, y, z, [rz, ry, rx], a, b);
            }
            finite
        })
        .reduce(|| true, |a, b| a && b)
}

/// Copy the `region` (local indices of a box of `shape`) of `src` into contiguous `out`.
pub fn pack<T: Real>(shape: [usize; 3], region: &Region, src: &[T], out: &mut [T]) {
    if region.is_empty() {
        return;
    }
    let [_, ry, rx] = region.shape();
    for (row, dst) in out[..region.len()].chunks_mut(rx).enumerate() {
        let (z, y) = (region.lo[0] + row / ry, region.lo[1] + row % ry);
        let i = (z * shape[1] + y) * shape[2] + region.lo[2];
        dst.copy_from_slice(&src[i..i + rx]);
    }
}

pub struct CpuBoxes<T> {
    p: HeatProblem,
    work: [Vec<T>; 2],
    results: Vec<Vec<T>>,
    free: Vec<usize>,
    bad: Option<u64>,
    /// Read inputs from and write early regions to the grid itself, as the CUDA executor
    /// does with a pinned grid (so CI checks the plan's early/late split bit for bit).
    direct: bool,
    early: Vec<T>,
    launched: usize,
}

impl<T: Real> CpuBoxes<T> {
    /// Workspace for boxes of `box_values` values (two boxes: the step ping-pongs).
    pub fn new(p: &HeatProblem, box_values: usize, direct: bool) -> Result<Self> {
        Ok(Self {
            p: p.clone(),
            work: [
                try_filled(box_values, T::zero(), "the pyramid workspace")?,
                try_filled(box_values, T::zero(), "the pyramid workspace")?,
            ],
            results: Vec::new(),
            free: Vec::new(),
            bad: None,
            direct,
            early: Vec::new(),
            launched: 0,
        })
    }

    /// Values of workspace the executor needs per box of capacity: two boxes.
    pub const BOXES: usize = 2;
}

impl<T: Real> BoxExecutor<T> for CpuBoxes<T> {
    fn stage(&mut self, values: usize) -> Result<&mut [T]> {
        Ok(&mut self.work[0][..values])
    }

    fn direct(&self) -> bool {
        self.direct
    }

    fn launch(
        &mut self,
        task: &Task,
        _next: Option<&Task>,
        steps: usize,
        step0: u64,
        grid: GridView<T>,
    ) -> Result<Launched> {
        let shape = task.input.shape();
        if self.direct {
            // SAFETY: the scheduler writes back no region a later task reads before that
            // task is launched, and this executor is synchronous.
            unsafe { grid.gather(&task.input, &mut self.work[0]) };
        }
        for k in 1..=steps {
            let [a, b] = &mut self.work;
            let (src, dst) = if k % 2 == 1 { (&*a, b) } else { (&*b, a) };
            let finite = step_box(&self.p, task.input.lo, shape, &task.valid_at(k), src, dst);
            if !finite {
                let s = step0 + k as u64 - 1;
                self.bad = Some(self.bad.map_or(s, |b| b.min(s)));
            }
        }
        let ticket = match self.free.pop() {
            Some(t) => t,
            None => {
                self.results.push(Vec::new());
                self.results.len() - 1
            }
        };
        let done = &self.work[steps % 2];
        let out = &mut self.results[ticket];
        if self.direct {
            self.early.resize(task.early.len(), T::zero());
            pack(shape, &task.local(&task.early), done, &mut self.early);
            // SAFETY: no later task reads the early region; earlier ones have read it.
            unsafe { grid.scatter(&self.early, &task.early) };
            out.resize(task.late.iter().map(Region::len).sum(), T::zero());
            let mut offset = 0;
            for part in &task.late {
                pack(shape, &task.local(part), done, &mut out[offset..]);
                offset += part.len();
            }
        } else {
            out.resize(task.result.len(), T::zero());
            pack(shape, &task.local(&task.result), done, out);
        }
        self.launched += 1;
        Ok(Launched {
            result: ticket,
            input: self.launched - 1,
        })
    }

    fn wait_input(&mut self, _input: usize) -> Result<()> {
        Ok(())
    }

    fn result(&mut self, ticket: usize) -> Result<&[T]> {
        Ok(&self.results[ticket])
    }

    fn release(&mut self, ticket: usize) {
        self.free.push(ticket);
    }

    fn first_bad_step(&mut self) -> Result<Option<u64>> {
        Ok(self.bad)
    }

    fn depth(&self) -> usize {
        1
    }
}
