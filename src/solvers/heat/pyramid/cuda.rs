//! The pyramid executor on a CUDA device. Device memory holds `slots` input boxes plus one
//! scratch box the steps ping-pong with. Three streams (host→device copies, compute,
//! device→host copies) chained by events let task i+1 come in and task i−1 go out while
//! task i computes; the host stages inputs in pinned buffers meanwhile.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUDA_MEMCPY3D, CUmemorytype};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

use super::{BoxExecutor, Region, Task};
use crate::device::cuda::Gpu;
use crate::error::Result;
use crate::precision::Real;
use crate::solvers::heat::HeatProblem;
use crate::solvers::heat::model::Costs;
use crate::solvers::heat::step_kernel::{BoxKernels, NONE};

struct Slot<T> {
    buf: CudaSlice<T>,
    staging: PinnedHostSlice<T>,
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
    /// (the study's schedule, used for the trivial baseline).
    pub fn new(
        gpu: Arc<Gpu>,
        p: &HeatProblem,
        slots: usize,
        box_values: usize,
        result_values: usize,
        overlap: bool,
    ) -> Result<Self> {
        let bytes = Self::boxes(slots) as u128 * box_values as u128 * T::PRECISION.bytes() as u128;
        gpu.ensure_fits(bytes, "the pyramid's device boxes")?;
        let kernels = BoxKernels::new(&gpu, p)?;
        let s = &gpu.stream;
        let mut list = Vec::with_capacity(slots);
        for _ in 0..slots {
            list.push(Slot {
                // SAFETY: every value a kernel reads was copied in or written before.
                buf: unsafe { s.alloc::<T>(box_values) }?,
                // SAFETY: the host fills it before each copy.
                staging: unsafe { staging_buffer::<T>(&gpu, box_values) }?,
                copied_in: event(&gpu)?,
                computed: event(&gpu)?,
                copied_out: event(&gpu)?,
            });
        }
        // SAFETY: as above.
        let scratch = unsafe { s.alloc::<T>(box_values) }?;
        let bad = s.clone_htod(&[NONE])?;
        s.synchronize()?;
        Ok(Self {
            h2d: gpu.ctx.new_stream()?,
            compute: gpu.ctx.new_stream()?,
            d2h: gpu.ctx.new_stream()?,
            gpu,
            kernels,
            slots: list,
            scratch,
            results: Vec::new(),
            free: Vec::new(),
            result_values,
            bad,
            launched: 0,
            overlap,
        })
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

/// Device box `region` (of a box of `shape` at `src`) → contiguous host memory at `dst`.
fn copy_region_out<T>(
    stream: &CudaStream,
    src: sys::CUdeviceptr,
    shape: [usize; 3],
    region: &Region,
    dst: *mut T,
) -> Result<()> {
    let sz = std::mem::size_of::<T>();
    let [rz, ry, rx] = region.shape();
    let c = CUDA_MEMCPY3D {
        srcXInBytes: region.lo[2] * sz,
        srcY: region.lo[1],
        srcZ: region.lo[0],
        srcLOD: 0,
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: shape[2] * sz,
        srcHeight: shape[1],
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_HOST,
        dstHost: dst.cast(),
        dstDevice: 0,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: rx * sz,
        dstHeight: ry,
        WidthInBytes: rx * sz,
        Height: ry,
        Depth: rz,
    };
    // SAFETY: the region lies inside the device box; dst holds region.len() values and is
    // pinned; the caller keeps both alive until the stream passes this copy.
    unsafe { sys::cuMemcpy3DAsync_v2(&c, stream.cu_stream()) }.result()?;
    Ok(())
}

impl<T: Real> BoxExecutor<T> for CudaBoxes<T> {
    fn stage(&mut self, values: usize) -> Result<&mut [T]> {
        let i = self.launched % self.slots.len();
        let slot = &mut self.slots[i];
        // The staging buffer is free once its previous copy in has finished.
        slot.copied_in.synchronize()?;
        Ok(&mut slot.staging.as_mut_slice()?[..values])
    }

    fn launch(&mut self, task: &Task, steps: usize, step0: u64) -> Result<usize> {
        let ticket = self.result_ticket()?;
        let n_slots = self.slots.len();
        let slot = &mut self.slots[self.launched % n_slots];
        let shape = task.input.shape();
        let bytes = task.input.len() * std::mem::size_of::<T>();
        // In: after the slot's previous result has left.
        self.h2d.wait(&slot.copied_out)?;
        {
            let (dst, _g) = slot.buf.device_ptr(&self.h2d);
            let src = slot.staging.as_ptr()?;
            // SAFETY: both hold the box; staging is pinned and not written until
            // `copied_in` has passed (see `stage`).
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, self.h2d.cu_stream()) }
                .result()?;
        }
        slot.copied_in.record(&self.h2d)?;
        // Steps: slot → scratch → slot …; an odd count leaves the result in scratch.
        self.compute.wait(&slot.copied_in)?;
        for k in 1..=steps {
            let region = task.valid_at(k);
            let step = step0 + k as u64 - 1;
            let (src, dst) = if k % 2 == 1 {
                (&slot.buf, &mut self.scratch)
            } else {
                (&self.scratch, &mut slot.buf)
            };
            self.kernels.step(
                &self.compute,
                src,
                dst,
                task.input.lo,
                shape,
                &region,
                step,
                &mut self.bad,
            )?;
        }
        let local = task.result_local();
        if steps % 2 == 1 {
            self.kernels
                .copy(&self.compute, &self.scratch, &mut slot.buf, shape, &local)?;
        }
        slot.computed.record(&self.compute)?;
        // Out: the result region into a pinned host buffer.
        self.d2h.wait(&slot.computed)?;
        {
            let res = &mut self.results[ticket];
            let (src, _g) = slot.buf.device_ptr(&self.d2h);
            let dst = res.host.as_mut_ptr()?;
            copy_region_out(&self.d2h, src, shape, &local, dst)?;
            res.ready.record(&self.d2h)?;
        }
        slot.copied_out.record(&self.d2h)?;
        if !self.overlap {
            self.d2h.synchronize()?;
        }
        self.launched += 1;
        Ok(ticket)
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

/// Per-value costs on this device, measured with pinned buffers, a band-shaped box of up
/// to `capacity` values and the step kernel (about 0.1 s).
pub fn measure<T: Real>(gpu: &Arc<Gpu>, p: &HeatProblem, capacity: usize) -> Result<Costs> {
    use crate::solvers::heat::pyramid::Region;
    let bytes = std::mem::size_of::<T>();
    let copy_values = capacity.clamp(1 << 16, (64 << 20) / bytes);
    let s = gpu.ctx.new_stream()?;
    // SAFETY: only timed, never read as numbers.
    let dev = unsafe { s.alloc::<T>(copy_values) }?;
    // SAFETY: as above.
    let mut host = unsafe { gpu.ctx.alloc_pinned_with_flags::<T>(copy_values, 0) }?;
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
    let n_bytes = copy_values * bytes;
    let h2d = time(&mut || {
        let (d, _g) = dev.device_ptr(&s);
        let src = host.as_ptr()?;
        // SAFETY: both hold copy_values values; host is pinned and outlives the stream work.
        unsafe { sys::cuMemcpyHtoDAsync_v2(d, src.cast(), n_bytes, s.cu_stream()) }.result()?;
        Ok(())
    })? / n_bytes as f64;
    let d2h = time(&mut || {
        let (d, _g) = dev.device_ptr(&s);
        let dst = host.as_mut_ptr()?;
        // SAFETY: as above.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), d, n_bytes, s.cu_stream()) }.result()?;
        Ok(())
    })? / n_bytes as f64;

    // Compute: the step kernel over a band of whole planes (or rows) of the real grid.
    let kernels = BoxKernels::<T>::new(gpu, p)?;
    let a0 = 3 - p.dims;
    let plane: usize = (0..3).filter(|&a| a != a0).map(|a| p.shape[a]).product();
    let mut shape = p.shape;
    shape[a0] = (copy_values / plane).clamp(3, p.shape[a0]);
    let len: usize = shape.iter().product();
    let src = s.clone_htod(&vec![T::lit(1.0); len])?;
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

    // Host staging: the scheduler gathers from a grid far larger than the host's caches,
    // so time copies out of a 512 MiB source, a different (cold) window each time, into
    // the same kind of pinned buffer; the mean of three.
    let windows = 3;
    let grid = vec![T::lit(1.0); (512 << 20) / bytes];
    // SAFETY: written before read.
    let mut staging = unsafe { staging_buffer::<T>(gpu, copy_values) }?;
    let dst = staging.as_mut_slice()?;
    let t = std::time::Instant::now();
    for w in grid.chunks_exact(copy_values).take(windows) {
        use rayon::prelude::*;
        dst.par_chunks_mut(1 << 18)
            .zip(w.par_chunks(1 << 18))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
    let host_cost = t.elapsed().as_secs_f64() / (windows * n_bytes) as f64;
    Ok(Costs {
        h2d,
        d2h,
        compute,
        host: host_cost,
        launch,
    })
}
