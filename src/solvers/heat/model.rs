//! Cost model of the pyramid method (seed 002, adapted to overlapped transfers) and the
//! automatic choice of pyramid height and decomposition.
//!
//! The seed's model for a 1D decomposition of a 2D grid, τ ≈ K(I−1)²·(R−n)/(R−2n)·(2τc/n + τa),
//! adds transfer and compute. keisan overlaps them: a task's copy in, its compute, its copy
//! out and the host's copies (gather and scatter, or only the late strips when the grid is
//! pinned) run in four pipelined stages, with a fifth for the host memory the copy engines
//! and the host's copies share, so a pass costs about
//! Σ_tasks max(stage times) plus filling and draining the pipeline. Stage times come from
//! the actual task geometry (edges, remainders, the shrinking valid region) and from
//! per-value costs measured on the device at start-up.

use std::time::Instant;

use serde::Serialize;

use super::pyramid::plan::plan;
use super::pyramid::{Decomposition, Plan, Region, launches};

/// Measured per-value costs, in seconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Costs {
    /// Host → device copy, per byte (τc in).
    pub h2d: f64,
    /// Device → host copy, per byte (τc out).
    pub d2h: f64,
    /// One step of one value on the device (τa).
    pub compute: f64,
    /// Host copy of a box out of the grid (staged gather), per byte.
    pub gather: f64,
    /// Host copy of a box into the grid (scatter), per byte.
    pub scatter: f64,
    /// Fixed cost per kernel launch.
    pub launch: f64,
    /// Several-step passes through a box, where the executor makes them.
    pub passes: Option<BoxPasses>,
}

/// How the several-step box pass (`heat_tb3_pass`) tiles a region: the launch and the work
/// it does, redundant halo and partial tiles included.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PassShape {
    /// Steps per pass.
    pub levels: usize,
    /// Values per vector: a box takes passes if its rows are whole vectors.
    pub vec: usize,
    /// Output columns (x) and rows (y) of a tile.
    pub out_x: usize,
    pub out_y: usize,
    /// Values of a tile in one plane, halo included.
    pub tile: usize,
    /// Planes a block marches at most, and the blocks that fill the device.
    pub chunk: usize,
    pub enough_blocks: usize,
}

impl PassShape {
    /// Tiles along x and y, planes per chunk and chunks along z for `region` (local).
    pub fn grid(&self, region: &Region) -> [usize; 4] {
        let [ez, ey, _] = region.shape();
        let x_from = region.lo[2] / self.vec * self.vec;
        let tx = (region.hi[2] - x_from).div_ceil(self.out_x);
        let ty = ey.div_ceil(self.out_y);
        // Short chunks where a box has few tiles, so that the blocks fill the device.
        let chunk = self
            .chunk
            .min(ez.div_ceil(self.enough_blocks.div_ceil(tx * ty)))
            .max(16);
        [tx, ty, chunk, ez.div_ceil(chunk)]
    }

    /// Tile values × planes × levels a pass writing `region` computes.
    pub fn work(&self, region: &Region) -> f64 {
        let [tx, ty, _, chunks] = self.grid(region);
        let planes = region.shape()[0] + chunks * self.levels;
        (tx * ty * self.tile) as f64 * planes as f64 * self.levels as f64
    }
}

/// Several-step box passes and their measured cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BoxPasses {
    pub shape: PassShape,
    /// Seconds per unit of [`PassShape::work`].
    pub per_value: f64,
}

/// How the executor moves data, as far as the model cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pipeline {
    /// Copies in, compute and copies out of successive tasks overlap (false: the study's
    /// one-after-another schedule, the trivial baseline).
    pub overlap: bool,
    /// Inputs come straight from a pinned grid and early regions go straight back; the
    /// host copies only the late strips (false: it gathers every input and scatters
    /// every result).
    pub direct: bool,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Prediction {
    pub seconds: f64,
    /// Which stage bounds the steady state: "copy-in", "copy-out", "compute", "host" or
    /// "host-memory" (copy engines and host copies sharing the host's memory).
    pub bound: &'static str,
}

/// Time of `steps` steps of the whole grid with `plan`, values of `bytes` bytes.
pub fn predict(plan: &Plan, steps: u64, bytes: usize, costs: &Costs, how: Pipeline) -> Prediction {
    let n = plan.height as u64;
    let full = steps / n;
    let rest = (steps % n) as usize;
    let (pass, bound) = pass_time(plan, plan.height, bytes, costs, how);
    let mut seconds = full as f64 * pass;
    if rest > 0 {
        seconds += pass_time(plan, rest, bytes, costs, how).0;
    }
    Prediction { seconds, bound }
}

fn pass_time(
    plan: &Plan,
    steps: usize,
    bytes: usize,
    c: &Costs,
    how: Pipeline,
) -> (f64, &'static str) {
    let overlap = how.overlap;
    let b = bytes as f64;
    // Seconds the host copies for a task: only the late strips when the grid is pinned.
    let host_time = |t: &super::pyramid::Task| {
        if how.direct {
            t.late.iter().map(|r| r.len()).sum::<usize>() as f64 * b * c.scatter
        } else {
            (t.input.len() as f64 * c.gather + t.result.len() as f64 * c.scatter) * b
        }
    };
    // A task's compute: several-step passes while a whole one is left (boxes of whole
    // vectors), single steps for the rest, as the executor runs them.
    let compute = |t: &super::pyramid::Task| {
        let passes = c
            .passes
            .filter(|b| t.input.shape()[2].is_multiple_of(b.shape.vec));
        launches(steps, passes.map(|b| b.shape.levels))
            .map(|(k, n)| {
                let region = t.valid_at(k + n - 1);
                c.launch
                    + match passes.filter(|_| n > 1) {
                        Some(b) => b.shape.work(&region) * b.per_value,
                        None => region.len() as f64 * c.compute,
                    }
            })
            .sum::<f64>()
    };
    let mut total = 0.0;
    let mut sums = [0.0f64; 5];
    for t in &plan.tasks {
        // Overlapping executors copy the part shared with the previous input across.
        let fetched = if overlap { t.fetched() } else { t.input };
        let inp = fetched.len() as f64 * b;
        let out = t.result.len() as f64 * b;
        // The copy engines and the host's copies share the host's memory: DMA traffic
        // at the host copy rate's bandwidth (a copy reads and writes each byte), on top of
        // the host's own copies.
        let memory = (inp + out) * c.scatter / 2.0 + host_time(t);
        let stages = [inp * c.h2d, out * c.d2h, compute(t), host_time(t), memory];
        for (s, v) in sums.iter_mut().zip(stages) {
            *s += v;
        }
        total += if overlap {
            stages.iter().cloned().fold(0.0, f64::max)
        } else {
            stages.iter().sum()
        };
    }
    if overlap {
        // Filling and draining: the first task's way in and the last one's way out.
        if let (Some(first), Some(last)) = (plan.tasks.first(), plan.tasks.last()) {
            let gather = if how.direct { 0.0 } else { c.gather };
            total += first.input.len() as f64 * b * (c.h2d + gather)
                + last.result.len() as f64 * b * c.d2h
                + host_time(last);
        }
    }
    let names = ["copy-in", "copy-out", "compute", "host", "host-memory"];
    let bound = names[sums
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
        .unwrap_or(2)];
    (total, bound)
}

/// Heights worth trying: every n up to 64, then every 8th up to `max`.
pub fn candidate_heights(max: usize) -> impl Iterator<Item = usize> {
    (1..=max).filter(|&n| n <= 64 || n % 8 == 0)
}

/// The plan with the least predicted time over `decompositions` and `heights`.
#[allow(clippy::too_many_arguments)]
pub fn best_plan(
    shape: [usize; 3],
    dims: usize,
    decompositions: &[Decomposition],
    heights: &[usize],
    capacity: usize,
    steps: u64,
    bytes: usize,
    costs: &Costs,
    how: Pipeline,
) -> Option<(Plan, Prediction)> {
    let mut best: Option<(Plan, Prediction)> = None;
    for &d in decompositions.iter().filter(|d| d.fits(dims)) {
        for &n in heights {
            if n as u64 > steps.max(1) && n > 1 {
                continue;
            }
            let Some(p) = plan(shape, dims, d, n, capacity) else {
                continue;
            };
            let pred = predict(&p, steps, bytes, costs, how);
            if best.as_ref().is_none_or(|(_, b)| pred.seconds < b.seconds) {
                best = Some((p, pred));
            }
        }
    }
    best
}

/// Seconds each of the CPU executor's cost probes runs.
const PROBE_S: f64 = 0.02;

/// Per-value costs of the CPU executor, and its fixed cost per box step (the thread
/// pool's hand-offs), measured here (about 60 ms).
pub fn measure_cpu<T: crate::precision::Real>(p: &super::HeatProblem) -> Costs {
    use super::pyramid::Region;
    // The median of repeated runs over at least PROBE_S: one run of a few milliseconds
    // on a shared machine varied by 1.5× from call to call.
    fn median(mut once: impl FnMut()) -> f64 {
        let start = Instant::now();
        let mut times = Vec::new();
        while start.elapsed().as_secs_f64() < PROBE_S || times.len() < 3 {
            let t = Instant::now();
            once();
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    }
    // One box step's seconds and its updated values, for a box of `side` values an axis.
    let step = |side: usize| {
        let mut shape = [1; 3];
        for (a, n) in shape.iter_mut().enumerate() {
            if a >= 3 - p.dims {
                *n = side;
            }
        }
        let len: usize = shape.iter().product();
        let src = vec![T::lit(1.0); len];
        let mut dst = src.clone();
        let real = |a: usize| a >= 3 - p.dims;
        let region = Region {
            lo: [0, 1, 2].map(|a| usize::from(real(a))),
            hi: [0, 1, 2].map(|a| shape[a] - usize::from(real(a))),
        };
        let mut probe = p.clone();
        probe.shape = shape;
        let t = median(|| {
            super::pyramid::cpu::step_box(&probe, [0; 3], shape, &region, &src, &mut dst);
        });
        (t, region.len() as f64)
    };
    // Two sizes, for the cost per value and the fixed cost per step of a box.
    let (small, large) = match p.dims {
        1 => (1 << 12, 1 << 18),
        2 => (64, 512),
        _ => (16, 64),
    };
    let ((t0, n0), (t1, n1)) = (step(small), step(large));
    let compute = ((t1 - t0) / (n1 - n0)).max(t1 / n1 / 2.0);
    let launch = (t0 - compute * n0).max(0.0);
    let values = 1 << 18;
    let src = vec![T::lit(1.0); values];
    let mut copy = src.clone();
    let host = median(|| copy.copy_from_slice(&src)) / (values * std::mem::size_of::<T>()) as f64;
    Costs {
        h2d: host,
        d2h: host,
        gather: host,
        scatter: host,
        compute,
        launch,
        passes: None,
    }
}
