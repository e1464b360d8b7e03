//! What every `keisan bench` shares: the device ceilings measured in the same run, and
//! timing — CUDA events around device work, the wall clock on the CPU. Each solver's
//! cases live in its own folder (`solvers/<name>/bench.rs`).

use std::time::Instant;

use cudarc::driver::CudaEvent;

use crate::device::Device;
use crate::device::ceilings::{self, Ceilings};
use crate::error::Result;

/// The copy bandwidth (and on a GPU the FMA rates) of `device`, measured now.
pub fn ceilings_for(device: &Device) -> Result<Ceilings> {
    match device {
        Device::Cpu { .. } => Ok(ceilings::measure_cpu()),
        Device::Cuda(gpu) => ceilings::measure_gpu(gpu),
    }
}

/// Times work queued on a device: events on its stream (CUDA), the wall clock (CPU).
pub struct Timer<'a> {
    events: Option<(&'a crate::device::Gpu, CudaEvent, CudaEvent)>,
}

impl<'a> Timer<'a> {
    pub fn new(device: &'a Device) -> Result<Self> {
        Ok(Self {
            events: match device {
                Device::Cuda(gpu) => Some((gpu.as_ref(), gpu.timing_event()?, gpu.timing_event()?)),
                Device::Cpu { .. } => None,
            },
        })
    }

    /// Seconds the device spent on what `work` queued (waits for it to finish).
    pub fn time(&self, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        match &self.events {
            Some((gpu, start, stop)) => {
                start.record(&gpu.stream)?;
                work()?;
                stop.record(&gpu.stream)?;
                Ok(start.elapsed_ms(stop)? as f64 * 1e-3)
            }
            None => {
                let t = Instant::now();
                work()?;
                Ok(t.elapsed().as_secs_f64())
            }
        }
    }
}

/// The device times `engine` takes for `steps` more steps, `repetitions` times (the engine
/// already warmed up), sorted: the median is the middle one. Diagnostics are read between
/// repetitions, as a run reads them between chunks.
/// As [`sorted_seconds`], for an engine spread over several devices: the wall clock from
/// a synchronised start to a synchronised end (its diagnostics wait for every device).
pub fn sorted_wall_seconds<T: crate::precision::Real>(
    engine: &mut dyn crate::run::Engine<Real = T>,
    steps: u64,
    repetitions: usize,
) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(repetitions);
    for _ in 0..repetitions {
        engine.diagnostics()?;
        let t = std::time::Instant::now();
        engine.advance(steps)?;
        engine.diagnostics()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

pub fn sorted_seconds<T: crate::precision::Real>(
    device: &Device,
    engine: &mut dyn crate::run::Engine<Real = T>,
    steps: u64,
    repetitions: usize,
) -> Result<Vec<f64>> {
    let timer = Timer::new(device)?;
    let mut times = Vec::with_capacity(repetitions);
    for _ in 0..repetitions {
        times.push(timer.time(|| engine.advance(steps))?);
        engine.diagnostics()?;
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}
