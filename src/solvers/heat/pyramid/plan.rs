//! Geometry of the pyramid method: how the grid is cut into tasks for a given pyramid
//! height n and a box capacity, and which task is the last to read each result region.
//!
//! A task's *result* region is a block of the grid; its *input* box is that block grown by
//! n points on every side that is not the grid's edge (the halo). Advancing n steps inside
//! the box, the valid region shrinks by one point per step on the halo sides only, so after
//! n steps exactly the result region is valid.

use serde::{Deserialize, Serialize};

/// How the grid is cut: bands along the slowest axis, or blocks over the two slowest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decomposition {
    /// Bands of rows (2D) or slabs (3D): R = r + 2n along the slowest axis.
    #[serde(rename = "1d")]
    Bands,
    /// Blocks over the two slowest axes: B = b + 2n on each.
    #[serde(rename = "2d")]
    Blocks,
}

impl Decomposition {
    pub const ALL: [Decomposition; 2] = [Decomposition::Bands, Decomposition::Blocks];

    pub fn label(self) -> &'static str {
        match self {
            Decomposition::Bands => "1d",
            Decomposition::Blocks => "2d",
        }
    }

    /// Whether this decomposition applies to a grid of `dims` dimensions.
    pub fn fits(self, dims: usize) -> bool {
        match self {
            Decomposition::Bands => true,
            Decomposition::Blocks => dims >= 2,
        }
    }
}

/// A half-open box of grid indices, axes padded to three (slowest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub lo: [usize; 3],
    pub hi: [usize; 3],
}

impl Region {
    pub fn shape(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.hi[a] - self.lo[a])
    }

    pub fn len(&self) -> usize {
        self.shape().iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn intersects(&self, other: &Region) -> bool {
        (0..3).all(|a| self.lo[a] < other.hi[a] && other.lo[a] < self.hi[a])
    }
}

/// One unit of work: copy `input` in, advance, copy `result` out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    pub input: Region,
    pub result: Region,
    /// Sides of the input box that are halo (shrink each step), per axis.
    pub halo_lo: [bool; 3],
    pub halo_hi: [bool; 3],
    /// The part of the result no later task reads: it may go back to the grid as soon as
    /// it is computed. The rest of the result is `late` (up to two boxes, maybe empty).
    pub early: Region,
    /// The strips of the result later tasks read as halo (old values): written back only
    /// once the task's last reader has copied its input in.
    pub late: [Region; 2],
    /// The part of the input box the previous task's input box also holds: consecutive
    /// tasks along the last split axis overlap by their halos, so the device copies it
    /// across (before the previous task's steps overwrite it) instead of over the bus.
    /// None for the first task of a row.
    pub carried: Option<Region>,
}

impl Task {
    /// The region of the input box (local indices) written at step `k` (1-based) of a pass.
    pub fn valid_at(&self, k: usize) -> Region {
        let shape = self.input.shape();
        Region {
            lo: [0, 1, 2].map(|a| if self.halo_lo[a] { k } else { 0 }),
            hi: [0, 1, 2].map(|a| shape[a] - if self.halo_hi[a] { k } else { 0 }),
        }
    }

    /// The part of the input box that comes from the host: all of it but `carried`.
    pub fn fetched(&self) -> Region {
        let mut r = self.input;
        if let Some(c) = self.carried {
            let a = (0..3).find(|&a| c.hi[a] != r.hi[a]).unwrap_or(0);
            r.lo[a] = c.hi[a];
        }
        r
    }

    /// The result region in local indices of the input box.
    pub fn result_local(&self) -> Region {
        self.local(&self.result)
    }

    /// A region of the grid inside the input box, in the box's local indices.
    pub fn local(&self, r: &Region) -> Region {
        Region {
            lo: [0, 1, 2].map(|a| r.lo[a] - self.input.lo[a]),
            hi: [0, 1, 2].map(|a| r.hi[a] - self.input.lo[a]),
        }
    }
}

/// The tasks of one pass, in the order they run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub decomposition: Decomposition,
    /// Pyramid height n: steps per pass.
    pub height: usize,
    /// Tasks per split axis (the second is 1 for bands).
    pub counts: [usize; 2],
    pub tasks: Vec<Task>,
    /// For each task j, the last task (in run order) whose input reads j's result region:
    /// j's new values may only be written back to the host grid after that task's input
    /// has been gathered, so one host copy of the grid suffices.
    pub last_reader: Vec<usize>,
    /// Largest input box, in values.
    pub box_values: usize,
    /// Largest result region, in values.
    pub result_values: usize,
}

impl Plan {
    /// Values computed over a pass (the shrinking regions of every task, n steps).
    pub fn computed_values(&self, steps: usize) -> u128 {
        self.tasks
            .iter()
            .map(|t| {
                (1..=steps)
                    .map(|k| t.valid_at(k).len() as u128)
                    .sum::<u128>()
            })
            .sum()
    }

    /// The most values of late strips one task has.
    pub fn late_values(&self) -> usize {
        self.tasks
            .iter()
            .map(|t| t.late.iter().map(Region::len).sum::<usize>())
            .max()
            .unwrap_or(0)
    }

    /// The most tasks a result waits, after its own, for its last reader.
    pub fn write_back_lag(&self) -> usize {
        self.last_reader
            .iter()
            .enumerate()
            .map(|(j, &r)| r - j)
            .max()
            .unwrap_or(0)
    }

    pub fn input_values(&self) -> u128 {
        self.tasks.iter().map(|t| t.input.len() as u128).sum()
    }

    pub fn result_values_total(&self) -> u128 {
        self.tasks.iter().map(|t| t.result.len() as u128).sum()
    }
}

/// Result ranges of `count` nearly equal parts of 0..n (the first `n % count` one longer).
fn split(n: usize, count: usize) -> Vec<(usize, usize)> {
    let (base, extra) = (n / count, n % count);
    let mut start = 0;
    (0..count)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = (start, start + len);
            start += len;
            r
        })
        .collect()
}

/// An upper bound on the largest input extent along an axis of `n_axis` points cut into
/// `count` parts with halo `h` (exact except where a halo is clipped by the grid's edge).
fn box_extent(n_axis: usize, count: usize, h: usize) -> usize {
    let part = n_axis.div_ceil(count);
    let halos = match count {
        1 => 0,
        2 => 1,
        _ => 2,
    };
    (part + halos * h).min(n_axis)
}

/// Fewest parts of an axis whose largest input extent is at most `limit`.
fn min_count(n_axis: usize, h: usize, limit: usize) -> Option<usize> {
    if limit == 0 {
        return None;
    }
    for c in 1..=n_axis.min(2) {
        if box_extent(n_axis, c, h) <= limit {
            return Some(c);
        }
    }
    if n_axis < 3 || box_extent(n_axis, n_axis, h) > limit {
        return None;
    }
    // box_extent is non-increasing in the count from 3 parts on.
    let (mut lo, mut hi) = (3, n_axis);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if box_extent(n_axis, mid, h) <= limit {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// Cut a grid of `shape` (padded, `dims` real axes) for pyramid height `n`, with input
/// boxes of at most `capacity` values. None when no cut fits.
pub fn plan(
    shape: [usize; 3],
    dims: usize,
    decomposition: Decomposition,
    n: usize,
    capacity: usize,
) -> Option<Plan> {
    if n == 0 || !decomposition.fits(dims) {
        return None;
    }
    let a0 = 3 - dims;
    let counts = match decomposition {
        Decomposition::Bands => {
            let plane: usize = (0..3).filter(|&a| a != a0).map(|a| shape[a]).product();
            [min_count(shape[a0], n, capacity / plane)?, 1]
        }
        Decomposition::Blocks => {
            let a1 = a0 + 1;
            let line: usize = (0..3)
                .filter(|&a| a != a0 && a != a1)
                .map(|a| shape[a])
                .product();
            let area = capacity / line;
            // The cut with the least input volume (transfer and redundant work).
            let mut best: Option<([usize; 2], usize)> = None;
            let mut c0 = 1;
            while c0 <= shape[a0] {
                let e0 = box_extent(shape[a0], c0, n);
                if let Some(c1) = min_count(shape[a1], n, area / e0) {
                    let volume = c0 * c1 * e0 * box_extent(shape[a1], c1, n);
                    if best.is_none_or(|(_, v)| volume < v) {
                        best = Some(([c0, c1], volume));
                    }
                }
                c0 += 1;
            }
            best?.0
        }
    };
    let split_axes: Vec<usize> = match decomposition {
        Decomposition::Bands => vec![a0],
        Decomposition::Blocks => vec![a0, a0 + 1],
    };
    let ranges: Vec<Vec<(usize, usize)>> = split_axes
        .iter()
        .zip(counts)
        .map(|(&a, c)| split(shape[a], c))
        .collect();
    let mut tasks = Vec::new();
    let second = ranges.get(1).cloned().unwrap_or_else(|| vec![(0, 0)]);
    for &r0 in &ranges[0] {
        for &r1 in &second {
            let mut input = Region {
                lo: [0; 3],
                hi: shape,
            };
            let mut result = input;
            let (mut halo_lo, mut halo_hi) = ([false; 3], [false; 3]);
            for (&a, &(s, e)) in split_axes.iter().zip([r0, r1].iter()) {
                result.lo[a] = s;
                result.hi[a] = e;
                input.lo[a] = s.saturating_sub(n);
                input.hi[a] = (e + n).min(shape[a]);
                halo_lo[a] = input.lo[a] > 0;
                halo_hi[a] = input.hi[a] < shape[a];
            }
            let (early, late) = split_early(&result, &split_axes, shape, n);
            tasks.push(Task {
                input,
                result,
                halo_lo,
                halo_hi,
                early,
                late,
                carried: None,
            });
        }
    }
    let last_axis = *split_axes.last().expect("one split axis at least");
    for i in 1..tasks.len() {
        let (p, c) = (tasks[i - 1].input, tasks[i].input);
        let a = last_axis;
        let same_elsewhere = (0..3).all(|b| b == a || (p.lo[b] == c.lo[b] && p.hi[b] == c.hi[b]));
        if same_elsewhere && p.lo[a] <= c.lo[a] && c.lo[a] < p.hi[a] && p.hi[a] < c.hi[a] {
            let mut carried = c;
            carried.hi[a] = p.hi[a];
            tasks[i].carried = Some(carried);
        }
    }
    // Tasks run in row-major order, so input boxes start no earlier along the first
    // split axis as i grows: the tasks from j whose input can still reach j's result are
    // a run, found by bisection, and the last reader the last of them that does, found
    // from the run's end (a forward scan of every such task took the cost model's search
    // 2 s for a 1024² grid at a small budget: tall pyramids over thin bands).
    let last_reader = (0..tasks.len())
        .map(|j| {
            let end = tasks[j].result.hi[a0];
            let reach = j + tasks[j..].partition_point(|t| t.input.lo[a0] < end);
            (j..reach)
                .rev()
                .find(|&i| tasks[i].input.intersects(&tasks[j].result))
                .unwrap_or(j)
        })
        .collect();
    Some(Plan {
        decomposition,
        height: n,
        counts,
        box_values: tasks.iter().map(|t| t.input.len()).max().unwrap_or(0),
        result_values: tasks.iter().map(|t| t.result.len()).max().unwrap_or(0),
        tasks,
        last_reader,
    })
}

/// Split a result region into the part no later task reads and the strips that later
/// tasks read. Tasks run in row-major order over the split axes, so every later task lies
/// beyond `result` along the first split axis, or in the same row beyond it along the
/// second; its input reaches back at most `n` points. The strips are therefore the last
/// `n` points along the first axis (whole width) and, before them, the last `n` along the
/// second.
fn split_early(
    result: &Region,
    split_axes: &[usize],
    shape: [usize; 3],
    n: usize,
) -> (Region, [Region; 2]) {
    let cut = |a: usize| {
        if result.hi[a] < shape[a] {
            result.hi[a].saturating_sub(n).max(result.lo[a])
        } else {
            result.hi[a]
        }
    };
    let a0 = split_axes[0];
    let c0 = cut(a0);
    let mut early = *result;
    early.hi[a0] = c0;
    let mut late0 = *result;
    late0.lo[a0] = c0;
    let mut late1 = early;
    if let Some(&a1) = split_axes.get(1) {
        let c1 = cut(a1);
        early.hi[a1] = c1;
        late1.lo[a1] = c1;
    } else {
        late1.hi = late1.lo;
    }
    (early, [late0, late1])
}

/// The smallest box capacity (values) with which `decomposition` can run at height 1.
pub fn min_capacity(shape: [usize; 3], dims: usize, decomposition: Decomposition) -> usize {
    let a0 = 3 - dims;
    let total: usize = shape.iter().product();
    match decomposition {
        Decomposition::Bands => total / shape[a0] * shape[a0].min(3),
        Decomposition::Blocks => {
            total / (shape[a0] * shape[a0 + 1]) * shape[a0].min(3) * shape[a0 + 1].min(3)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers_once(p: &Plan, shape: [usize; 3]) {
        let mut hits = vec![0u8; shape.iter().product()];
        for t in &p.tasks {
            for z in t.result.lo[0]..t.result.hi[0] {
                for y in t.result.lo[1]..t.result.hi[1] {
                    for x in t.result.lo[2]..t.result.hi[2] {
                        hits[(z * shape[1] + y) * shape[2] + x] += 1;
                    }
                }
            }
        }
        assert!(
            hits.iter().all(|&h| h == 1),
            "result regions must tile the grid"
        );
    }

    #[test]
    fn results_tile_the_grid_and_boxes_fit() {
        for (shape, dims) in [([1, 1, 101], 1), ([1, 37, 29], 2), ([13, 11, 7], 3)] {
            for d in Decomposition::ALL.into_iter().filter(|d| d.fits(dims)) {
                for n in [1, 2, 3, 7] {
                    let total: usize = shape.iter().product();
                    let cap = total / 5;
                    if let Some(p) = plan(shape, dims, d, n, cap) {
                        covers_once(&p, shape);
                        assert!(p.box_values <= cap);
                        assert!(p.tasks.len() > 1);
                        for t in &p.tasks {
                            assert_eq!(
                                t.valid_at(n)
                                    .lo
                                    .iter()
                                    .zip(t.result_local().lo)
                                    .filter(|(a, b)| **a > *b)
                                    .count(),
                                0
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn early_regions_are_read_by_no_later_task() {
        for (shape, dims) in [([1, 1, 101], 1), ([1, 37, 29], 2), ([13, 11, 7], 3)] {
            for d in Decomposition::ALL.into_iter().filter(|d| d.fits(dims)) {
                for n in [1, 2, 3, 7] {
                    let total: usize = shape.iter().product();
                    let Some(p) = plan(shape, dims, d, n, total / 5) else {
                        continue;
                    };
                    for (j, t) in p.tasks.iter().enumerate() {
                        let parts = [t.early, t.late[0], t.late[1]];
                        let inside = |r: &Region| {
                            r.is_empty()
                                || (0..3)
                                    .all(|a| t.result.lo[a] <= r.lo[a] && r.hi[a] <= t.result.hi[a])
                        };
                        assert!(parts.iter().all(inside), "{d:?} n={n} task {j}");
                        let sum: usize = parts.iter().map(Region::len).sum();
                        assert_eq!(sum, t.result.len(), "{d:?} n={n} task {j}");
                        for (a, b) in [(0, 1), (0, 2), (1, 2)] {
                            assert!(parts[a].is_empty() || !parts[a].intersects(&parts[b]));
                        }
                        for later in &p.tasks[j + 1..] {
                            assert!(
                                t.early.is_empty() || !later.input.intersects(&t.early),
                                "{d:?} n={n}: task {j}'s early region is read later"
                            );
                        }
                        assert!(p.last_reader[j] > j || t.early == t.result);
                        if let Some(c) = t.carried {
                            let prev = p.tasks[j - 1].input;
                            assert!((0..3).all(|a| prev.lo[a] <= c.lo[a] && c.hi[a] <= prev.hi[a]));
                            assert_eq!(c.len() + t.fetched().len(), t.input.len());
                            assert!(!c.intersects(&t.fetched()));
                        }
                    }
                }
            }
        }
    }

    /// The last reader of each task's result, found by bisection, is the last task of
    /// all (in run order, from j) whose input intersects it.
    #[test]
    fn the_last_reader_is_the_last_task_reading_the_result() {
        for (shape, dims) in [
            ([1, 1, 101], 1),
            ([1, 37, 29], 2),
            ([1, 64, 48], 2),
            ([13, 11, 7], 3),
            ([9, 16, 12], 3),
        ] {
            for d in Decomposition::ALL.into_iter().filter(|d| d.fits(dims)) {
                for n in [1, 2, 3, 5, 7, 12] {
                    for share in [2, 5, 11] {
                        let total: usize = shape.iter().product();
                        let Some(p) = plan(shape, dims, d, n, total / share) else {
                            continue;
                        };
                        for (j, t) in p.tasks.iter().enumerate() {
                            let last = (j..p.tasks.len())
                                .filter(|&i| p.tasks[i].input.intersects(&t.result))
                                .max()
                                .unwrap_or(j);
                            assert_eq!(p.last_reader[j], last, "{d:?} n={n} 1/{share} task {j}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn too_small_capacity_has_no_plan() {
        let shape = [1, 100, 100];
        assert!(
            plan(
                shape,
                2,
                Decomposition::Bands,
                1,
                min_capacity(shape, 2, Decomposition::Bands) - 1
            )
            .is_none()
        );
        assert!(
            plan(
                shape,
                2,
                Decomposition::Bands,
                1,
                min_capacity(shape, 2, Decomposition::Bands)
            )
            .is_some()
        );
        assert!(
            plan(
                shape,
                2,
                Decomposition::Blocks,
                1,
                min_capacity(shape, 2, Decomposition::Blocks)
            )
            .is_some()
        );
    }

    #[test]
    fn whole_grid_fits_in_one_task_without_halo() {
        let p = plan([1, 10, 10], 2, Decomposition::Bands, 4, 100).unwrap();
        assert_eq!(p.tasks.len(), 1);
        assert_eq!(p.tasks[0].halo_lo, [false; 3]);
    }
}
