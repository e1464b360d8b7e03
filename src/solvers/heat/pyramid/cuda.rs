//! The pyramid executor on a CUDA device. Device memory holds `slots` input boxes plus one
//! scratch box the steps ping-pong with. Three streams (host→device copies, compute,
//! device→host copies) chained by events let task i+1 come in and task i−1 go out while
//! task i computes.
//!
//! With the host grid pinned (the default), the copy engines move each input box straight
//! out of the grid and each early region straight back (strided 3D copies); only the late
//! strips, which later tasks still read as halo, go through pinned buffers for the host to
//! scatter. Without it, the host gathers inputs into pinned staging buffers and scatters
//! whole results.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUDA_MEMCPY3D, CUmemorytype};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

use super::{BoxExecutor, GridView, Launched, Task};
use crate::device::cuda::{Gpu, HostPin};
use crate::error::Result;
use crate::precision::Real;
use crate::solvers::heat::HeatProblem;
use crate::solvers::heat::model::{BoxPasses, Costs};
use crate::solvers::heat::pyramid::launches;
use crate::solvers::heat::step_kernel::{BoxKernels, NONE, Span, TemporalBlock, default_levels};

struct Slot<T> {
    buf: CudaSlice<T>,
    /// Staged mode only, allocated on first use.
    staging: Option<PinnedHostSlice<T>>,
    copied_in: CudaEvent,
    computed: CudaEvent,
    copied_out: CudaEvent,
}

struct ResultBuf<T> {
    host: PinnedHostSlice<T>,
    ready: CudaEvent,
}

pub struct CudaBoxes<T: Real> {
    gpu: Arc<Gpu>,
    kernels: BoxKernels<T>,
    /// Several steps per pass through a box (3D, rows of whole vectors), if enabled.
    blocked: Option<TemporalBlock<T>>,
    h2d: Arc<CudaStream>,
    compute: Arc<CudaStream>,
    d2h: Arc<CudaStream>,
    slots: Vec<Slot<T>>,
    scratch: CudaSlice<T>,
    results: Vec<ResultBuf<T>>,
    free: Vec<usize>,
    result_values: usize,
    bad: CudaSlice<u64>,
    launched: usize,
    overlap: bool,
    box_values: usize,
    /// The pinned host grid, in direct mode.
    pin: Option<HostPin>,
}

fn event(gpu: &Gpu) -> Result<CudaEvent> {
    Ok(gpu.ctx.new_event(None)?)
}

impl<T: Real> CudaBoxes<T> {
    /// Device boxes the executor allocates for `slots` slots (plus the scratch box).
    pub fn boxes(slots: usize) -> usize {
        slots + 1
    }

    /// `overlap = false` runs each task's copy in, steps and copy out one after another
    /// (the study's schedule, used for the trivial baseline). `pin`: the host grid,
    /// registered ([`Gpu::pin_host`]); the executor then copies to and from it directly.
    /// `pending`: results that may wait for write-back at once, allocated (pinned) now.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: Arc<Gpu>,
        p: &HeatProblem,
        slots: usize,
        box_values: usize,
        result_values: usize,
        overlap: bool,
        pin: Option<HostPin>,
        pending: usize,
    ) -> Result<Self> {
        let bytes = Self::boxes(slots) as u128 * box_values as u128 * T::PRECISION.bytes() as u128;
        gpu.ensure_fits(bytes, "the pyramid's device boxes")?;
        let kernels = BoxKernels::new(&gpu, p)?;
        let blocked = box_passes(&gpu, p)?;
        let s = &gpu.stream;
        let mut list = Vec::with_capacity(slots);
        for _ in 0..slots {
            list.push(Slot {
                // SAFETY: every value a kernel reads was copied in or written before.
                buf: unsafe { s.alloc::<T>(box_values) }?,
                staging: None,
                copied_in: event(&gpu)?,
                computed: event(&gpu)?,
                copied_out: event(&gpu)?,
            });
        }
        // Zeros: a several-step pass reads the whole box, and values it has not written
        // yet must be finite for its bad-step probe.
        let scratch = s.alloc_zeros::<T>(box_values)?;
        let bad = s.clone_htod(&[NONE])?;
        s.synchronize()?;
        let mut me = Self {
            h2d: gpu.ctx.new_stream()?,
            compute: gpu.ctx.new_stream()?,
            d2h: gpu.ctx.new_stream()?,
            gpu,
            kernels,
            blocked,
            slots: list,
            scratch,
            results: Vec::new(),
            free: Vec::new(),
            result_values,
            bad,
            launched: 0,
            overlap,
            box_values,
            pin,
        };
        // Pinned allocations take milliseconds each: not in the middle of a pass.
        let tickets = (0..pending)
            .map(|_| me.result_ticket())
            .collect::<Result<Vec<_>>>()?;
        me.free.extend(tickets);
        Ok(me)
    }

    fn result_ticket(&mut self) -> Result<usize> {
        if let Some(t) = self.free.pop() {
            return Ok(t);
        }
        self.results.push(ResultBuf {
            // SAFETY: filled by a device copy before the host reads it; plain (cached)
            // pinned memory because the host reads it back.
            host: unsafe {
                self.gpu
                    .ctx
                    .alloc_pinned_with_flags::<T>(self.result_values, 0)
            }?,
            ready: event(&self.gpu)?,
        });
        Ok(self.results.len() - 1)
    }
}

/// Two distinct elements of a slice, both mutable.
fn pair_mut<S>(v: &mut [S], i: usize, j: usize) -> [&mut S; 2] {
    v.get_disjoint_mut([i, j]).expect("two distinct slots")
}

/// Host or device memory, for [`copy_box`].
#[derive(Clone, Copy)]
enum Mem {
    Host(*mut std::ffi::c_void),
    Device(sys::CUdeviceptr),
}

/// One side of a box copy: a row-major buffer of `shape` and the box's corner in it.
#[derive(Clone, Copy)]
struct Side {
    mem: Mem,
    shape: [usize; 3],
    lo: [usize; 3],
}

impl Side {
    fn whole(mem: Mem, shape: [usize; 3]) -> Self {
        Self {
            mem,
            shape,
            lo: [0; 3],
        }
    }
}

/// Queue a copy of a box of `extent` values of `T` between two buffers, by the copy
/// engines (strided rows; one linear copy when the box is a single row).
///
/// # Safety
/// Both boxes lie inside their buffers; host memory is pinned; both stay alive and
/// untouched by others until the stream has passed the copy.
unsafe fn copy_box<T>(stream: &CudaStream, src: Side, dst: Side, extent: [usize; 3]) -> Result<()> {
    if extent.contains(&0) {
        return Ok(());
    }
    let sz = std::mem::size_of::<T>();
    if extent[0] == 1 && extent[1] == 1 {
        let offset = |s: &Side| ((s.lo[0] * s.shape[1] + s.lo[1]) * s.shape[2] + s.lo[2]) * sz;
        let (so, d_o, bytes) = (offset(&src), offset(&dst), extent[2] * sz);
        let st = stream.cu_stream();
        // SAFETY: the caller's promise.
        let r = unsafe {
            match (src.mem, dst.mem) {
                (Mem::Host(h), Mem::Device(d)) => {
                    sys::cuMemcpyHtoDAsync_v2(d + d_o as u64, h.byte_add(so), bytes, st)
                }
                (Mem::Device(d), Mem::Host(h)) => {
                    sys::cuMemcpyDtoHAsync_v2(h.byte_add(d_o), d + so as u64, bytes, st)
                }
                (Mem::Device(a), Mem::Device(b)) => {
                    sys::cuMemcpyDtoDAsync_v2(b + d_o as u64, a + so as u64, bytes, st)
                }
                (Mem::Host(_), Mem::Host(_)) => unreachable!("host-to-host copies are the host's"),
            }
        };
        r.result()?;
        return Ok(());
    }
    let side = |s: &Side| match s.mem {
        Mem::Host(h) => (CUmemorytype::CU_MEMORYTYPE_HOST, h, 0),
        Mem::Device(d) => (CUmemorytype::CU_MEMORYTYPE_DEVICE, std::ptr::null_mut(), d),
    };
    let (src_type, src_host, src_dev) = side(&src);
    let (dst_type, dst_host, dst_dev) = side(&dst);
    let c = CUDA_MEMCPY3D {
        srcXInBytes: src.lo[2] * sz,
        srcY: src.lo[1],
        srcZ: src.lo[0],
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_dev,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: src.shape[2] * sz,
        srcHeight: src.shape[1],
        dstXInBytes: dst.lo[2] * sz,
        dstY: dst.lo[1],
        dstZ: dst.lo[0],
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host,
        dstDevice: dst_dev,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: dst.shape[2] * sz,
        dstHeight: dst.shape[1],
        WidthInBytes: extent[2] * sz,
        Height: extent[1],
        Depth: extent[0],
    };
    // SAFETY: the caller's promise.
    unsafe { sys::cuMemcpy3DAsync_v2(&c, stream.cu_stream()) }.result()?;
    Ok(())
}

impl<T: Real> BoxExecutor<T> for CudaBoxes<T> {
    fn direct(&self) -> bool {
        self.pin.is_some()
    }

    fn stage(&mut self, values: usize) -> Result<&mut [T]> {
        let i = self.launched % self.slots.len();
        let slot = &mut self.slots[i];
        // The staging buffer is free once its previous copy in has finished.
        slot.copied_in.synchronize()?;
        if slot.staging.is_none() {
            // SAFETY: the host fills it before each copy.
            slot.staging = Some(unsafe { staging_buffer::<T>(&self.gpu, self.box_values) }?);
        }
        let staging = slot.staging.as_mut().expect("allocated above");
        Ok(&mut staging.as_mut_slice()?[..values])
    }

    fn launch(
        &mut self,
        task: &Task,
        next: Option<&Task>,
        steps: usize,
        step0: u64,
        grid: GridView<T>,
    ) -> Result<Launched> {
        let ticket = self.result_ticket()?;
        let n_slots = self.slots.len();
        let direct = self.pin.is_some();
        // The overlap with the previous task's input comes across on the device; with one
        // slot there is nowhere for it to wait.
        let carry = n_slots > 1;
        let fetched = if carry { task.fetched() } else { task.input };
        let this = self.launched % n_slots;
        let shape = task.input.shape();
        let host_grid = |lo| Side {
            mem: Mem::Host(grid.as_ptr().cast()),
            shape: grid.shape(),
            lo,
        };
        let slot = &mut self.slots[this];
        // The host runs at most one round of slots ahead of the copy engine, so the
        // write-backs it does meanwhile overlap the device's work instead of trailing it.
        slot.copied_in.synchronize()?;
        // In: after the slot's previous result has left.
        self.h2d.wait(&slot.copied_out)?;
        {
            let (dst, _g) = slot.buf.device_ptr(&self.h2d);
            let local = task.local(&fetched).lo;
            let src = if direct {
                host_grid(fetched.lo)
            } else {
                let staging = slot.staging.as_ref().expect("staged mode stages first");
                let host = Mem::Host(staging.as_ptr()?.cast_mut().cast());
                Side {
                    mem: host,
                    shape,
                    lo: local,
                }
            };
            let to = Side {
                mem: Mem::Device(dst),
                shape,
                lo: local,
            };
            // SAFETY: the box fits both buffers; the grid is pinned and its input box is
            // not written until `wait_input` says this copy is done; staging is pinned and
            // not written until `copied_in` has passed (see `stage`).
            unsafe { copy_box::<T>(&self.h2d, src, to, fetched.shape()) }?;
        }
        slot.copied_in.record(&self.h2d)?;
        self.compute.wait(&slot.copied_in)?;
        // Across: the next task's overlap with this input, before the steps overwrite it,
        // into the next slot once that slot's previous result has left.
        if let Some((next, part)) = next.and_then(|t| Some((t, t.carried?))).filter(|_| carry) {
            let [a, b] = pair_mut(&mut self.slots, this, (this + 1) % n_slots);
            self.compute.wait(&b.copied_out)?;
            let (src, _g) = a.buf.device_ptr(&self.compute);
            let (dst, _h) = b.buf.device_ptr(&self.compute);
            let from = Side {
                mem: Mem::Device(src),
                shape,
                lo: task.local(&part).lo,
            };
            let to = Side {
                mem: Mem::Device(dst),
                shape: next.input.shape(),
                lo: next.local(&part).lo,
            };
            // SAFETY: `part` lies in both input boxes (the plan's promise); the next slot
            // is free (its copy out has passed) and its own copy in writes only `fetched`.
            unsafe { copy_box::<T>(&self.compute, from, to, part.shape()) }?;
        }
        let slot = &mut self.slots[this];
        // Passes: slot → scratch → slot …, several steps each while a whole pass is left
        // (the region valid after it), single steps for the rest; an odd number of
        // passes leaves the result in scratch.
        let blocked = self.blocked.as_ref().filter(|b| b.takes(shape));
        let mut passes = 0;
        for (k, n) in launches(steps, blocked.map(|b| b.levels())) {
            let step = step0 + k as u64 - 1;
            let (src, dst) = if passes % 2 == 0 {
                (&slot.buf, &mut self.scratch)
            } else {
                (&self.scratch, &mut slot.buf)
            };
            passes += 1;
            let (o, region, bad) = (task.input.lo, task.valid_at(k + n - 1), &mut self.bad);
            match blocked.filter(|_| n > 1) {
                Some(tb) => {
                    let done =
                        tb.pass_box(&self.compute, src, dst, o, shape, &region, step, bad)?;
                    debug_assert!(done, "the box was checked to take passes");
                }
                None => {
                    let kernels = &self.kernels;
                    kernels.step(&self.compute, src, dst, o, shape, &region, step, bad)?
                }
            }
        }
        if passes % 2 == 1 {
            let local = task.result_local();
            self.kernels
                .copy(&self.compute, &self.scratch, &mut slot.buf, shape, &local)?;
        }
        slot.computed.record(&self.compute)?;
        // Out: the early region straight to the grid, the rest into a pinned buffer.
        self.d2h.wait(&slot.computed)?;
        {
            let res = &mut self.results[ticket];
            let (src, _g) = slot.buf.device_ptr(&self.d2h);
            let from = |r| Side {
                mem: Mem::Device(src),
                shape,
                lo: task.local(r).lo,
            };
            let host = res.host.as_mut_ptr()?;
            let parts = if direct {
                // SAFETY: no later task reads the early region and earlier tasks' copies
                // in are done (the h2d stream's order); the grid is pinned.
                unsafe {
                    copy_box::<T>(
                        &self.d2h,
                        from(&task.early),
                        host_grid(task.early.lo),
                        task.early.shape(),
                    )
                }?;
                &task.late[..]
            } else {
                std::slice::from_ref(&task.result)
            };
            let mut offset = 0;
            for part in parts {
                // SAFETY: the result buffer holds the parts' values (the late strips, or
                // the result); it is pinned and not read before `ready`.
                let to = Side::whole(Mem::Host(unsafe { host.add(offset) }.cast()), part.shape());
                unsafe { copy_box::<T>(&self.d2h, from(part), to, part.shape()) }?;
                offset += part.len();
            }
            res.ready.record(&self.d2h)?;
        }
        slot.copied_out.record(&self.d2h)?;
        if !self.overlap {
            self.d2h.synchronize()?;
        }
        self.launched += 1;
        Ok(Launched {
            result: ticket,
            input: self.launched - 1,
        })
    }

    fn wait_input(&mut self, input: usize) -> Result<()> {
        // The slot's event may since mark a later copy in; waiting for that one is safe
        // (the h2d stream runs in order).
        Ok(self.slots[input % self.slots.len()]
            .copied_in
            .synchronize()?)
    }

    fn result(&mut self, ticket: usize) -> Result<&[T]> {
        let res = &self.results[ticket];
        res.ready.synchronize()?;
        Ok(res.host.as_slice()?)
    }

    fn release(&mut self, ticket: usize) {
        self.free.push(ticket);
    }

    fn first_bad_step(&mut self) -> Result<Option<u64>> {
        self.compute.synchronize()?;
        let bad = self.gpu.stream.clone_dtoh(&self.bad)?[0];
        Ok((bad != NONE).then_some(bad))
    }

    fn depth(&self) -> usize {
        if self.overlap { self.slots.len() } else { 1 }
    }

    fn release_grid(&mut self) {
        for s in [&self.h2d, &self.compute, &self.d2h] {
            let _ = s.synchronize();
        }
        self.pin = None;
    }
}

impl<T: Real> Drop for CudaBoxes<T> {
    fn drop(&mut self) {
        // Pinned buffers must not be freed under a copy in flight.
        for s in [&self.h2d, &self.compute, &self.d2h] {
            let _ = s.synchronize();
        }
    }
}

/// A pinned buffer the host fills and the device reads: write-combined, which suits
/// sequential host writes and device reads (cached pinned staging measured within 5 %
/// on the H100, 2026-11-22).
///
/// # Safety
/// The contents are uninitialised.
unsafe fn staging_buffer<T: Real>(gpu: &Gpu, values: usize) -> Result<PinnedHostSlice<T>> {
    // SAFETY: passed on to the caller.
    Ok(unsafe { gpu.ctx.alloc_pinned::<T>(values) }?)
}

/// Per-value costs on this device (about 0.2 s): copies and steps on a box shaped like a
/// task's (whole rows, as deep along the slowest axes as `capacity` allows), the copies
/// strided out of and into a page-locked host array when `direct` (the grid will be
/// pinned), else linear through a pinned buffer; and the host's copy rate from cold
/// memory.
pub fn measure<T: Real>(
    gpu: &Arc<Gpu>,
    p: &HeatProblem,
    capacity: usize,
    direct: bool,
) -> Result<Costs> {
    use crate::solvers::heat::pyramid::Region;
    let bytes = std::mem::size_of::<T>();
    let box_values = capacity.clamp(1 << 16, (256 << 20) / bytes);
    let a0 = 3 - p.dims;
    let mut shape = p.shape;
    if p.dims == 3 {
        let side = ((box_values / p.shape[2]) as f64).sqrt() as usize;
        shape[0] = side.clamp(3, p.shape[0]);
        shape[1] = (box_values / p.shape[2] / shape[0]).clamp(3, p.shape[1]);
    } else {
        let plane: usize = (0..3).filter(|&a| a != a0).map(|a| p.shape[a]).product();
        shape[a0] = (box_values / plane).clamp(3, p.shape[a0]);
    }
    let len: usize = shape.iter().product();
    let s = gpu.ctx.new_stream()?;
    let (start, end) = (gpu.timing_event()?, gpu.timing_event()?);
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?; // warm-up
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            start.record(&s)?;
            f()?;
            end.record(&s)?;
            best = best.min(start.elapsed_ms(&end)? as f64 * 1e-3);
        }
        Ok(best)
    };

    // A host array far larger than the caches: the source of the host's copy rate, and
    // with the grid pinned, the array the boxes are copied out of and into.
    let mut cold = vec![T::lit(1.0); ((512 << 20) / bytes).max(2 * len)];
    let src = s.clone_htod(&vec![T::lit(1.0); len])?;
    let n_bytes = (len * bytes) as f64;
    let (h2d, d2h) = {
        let (d, _g) = src.device_ptr(&s);
        let dev = Side::whole(Mem::Device(d), shape);
        let mut host_pinned = None;
        // SAFETY: `cold` outlives the guard (dropped at the end of this block). Where it
        // cannot be pinned, neither can the grid: time the staged copies instead.
        let pin = direct
            .then(|| unsafe { gpu.pin_host(cold.as_mut_ptr().cast(), size_of_val(&cold[..])) })
            .and_then(|r| r.ok());
        let host = if pin.is_some() {
            // Rows of the box twice apart, as a task's rows are in the grid (3D).
            let mut grid = shape;
            grid[1] = (shape[1] * 2).min(cold.len() / (shape[0] * shape[2]));
            Side::whole(Mem::Host(cold.as_mut_ptr().cast()), grid)
        } else {
            // SAFETY: only timed, never read as numbers.
            let buf = host_pinned.insert(unsafe { gpu.ctx.alloc_pinned_with_flags::<T>(len, 0) }?);
            Side::whole(Mem::Host(buf.as_mut_ptr()?.cast()), shape)
        };
        // SAFETY: the box fits both sides; host memory is pinned and outlives the copies
        // (the stream is synchronised by `time`).
        let h2d = time(&mut || unsafe { copy_box::<T>(&s, host, dev, shape) })? / n_bytes;
        // SAFETY: as above.
        let d2h = time(&mut || unsafe { copy_box::<T>(&s, dev, host, shape) })? / n_bytes;
        s.synchronize()?;
        drop(pin);
        (h2d, d2h)
    };

    // Compute: the step kernel on that box.
    let kernels = BoxKernels::<T>::new(gpu, p)?;
    let mut dst = s.clone_htod(&vec![T::lit(1.0); len])?;
    let mut bad = s.clone_htod(&[NONE])?;
    let region = Region {
        lo: [0, 1, 2].map(|a| usize::from(a >= a0)),
        hi: [0, 1, 2].map(|a| shape[a] - usize::from(a >= a0)),
    };
    let steps = 4;
    let compute = time(&mut || {
        for k in 0..steps {
            kernels.step(&s, &src, &mut dst, [0; 3], shape, &region, k, &mut bad)?;
        }
        Ok(())
    })? / (steps as usize * region.len()) as f64;
    // Several-step passes: one over the box less its halo, per unit of tile work.
    let mut passes = None;
    if let Some(tb) = box_passes::<T>(gpu, p)? {
        let geometry = tb.shape().expect("box passes use the register tile");
        let levels = geometry.levels;
        let inset = |a: usize| if a >= a0 { levels.min(shape[a] / 2) } else { 0 };
        let out = Region {
            lo: [0, 1, 2].map(inset),
            hi: [0, 1, 2].map(|a| shape[a] - inset(a)),
        };
        if shape[2].is_multiple_of(geometry.vec) && !out.is_empty() {
            let t = time(&mut || {
                tb.pass_box(&s, &src, &mut dst, [0; 3], shape, &out, 0, &mut bad)?;
                Ok(())
            })?;
            passes = Some(BoxPasses {
                shape: geometry,
                per_value: t / geometry.work(&out),
            });
        }
    }
    let tiny = Region {
        lo: [0; 3],
        hi: [1, 1, 1],
    };
    let launches = 50;
    let launch = time(&mut || {
        for k in 0..launches {
            kernels.step(&s, &src, &mut dst, [0; 3], shape, &tiny, k, &mut bad)?;
        }
        Ok(())
    })? / launches as f64;
    s.synchronize()?;

    // Host copies: the scheduler gathers from and scatters into a grid far larger than
    // the host's caches, so time copies out of and into a different (cold) window of the
    // array each time, against the kinds of pinned buffer it uses; the mean of three.
    let windows = 3;
    let window = len.min(cold.len() / (2 * windows));
    // SAFETY: written before read.
    let mut staging = unsafe { staging_buffer::<T>(gpu, window) }?;
    // SAFETY: as above; plain (cached) pinned memory, like the result buffers.
    let mut results = unsafe { gpu.ctx.alloc_pinned_with_flags::<T>(window, 0) }?;
    results.as_mut_slice()?.fill(T::lit(1.0));
    let (staged, result) = (staging.as_mut_slice()?, results.as_slice()?);
    let par_copy = |d: &mut [T], s: &[T]| {
        use rayon::prelude::*;
        d.par_chunks_mut(1 << 18)
            .zip(s.par_chunks(1 << 18))
            .for_each(|(d, s)| d.copy_from_slice(s));
    };
    let per_byte =
        |t: std::time::Instant| t.elapsed().as_secs_f64() / (windows * window * bytes) as f64;
    let mut cold_windows = cold.chunks_exact_mut(window);
    let t = std::time::Instant::now();
    for w in cold_windows.by_ref().take(windows) {
        par_copy(staged, w);
    }
    let gather = per_byte(t);
    let t = std::time::Instant::now();
    for w in cold_windows.take(windows) {
        par_copy(w, result);
    }
    let scatter = per_byte(t);
    Ok(Costs {
        h2d,
        d2h,
        compute,
        gather,
        scatter,
        launch,
        passes,
    })
}

/// The several-step box pass the executor uses: `heat.temporal_block` steps (default: the
/// in-core default) where the register tile takes them, else none.
fn box_passes<T: Real>(gpu: &Gpu, p: &HeatProblem) -> Result<Option<TemporalBlock<T>>> {
    let levels = p
        .temporal_block
        .unwrap_or_else(|| default_levels(p.dims, T::PRECISION));
    if levels < 2 {
        return Ok(None);
    }
    TemporalBlock::for_boxes(gpu, p, levels, Span::Boxes)
}
