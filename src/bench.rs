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

/// What a decomposed run spends beyond one device's share of its work, per step, and the
/// model of the decomposed step built on it (compute + exposed exchange).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Exposure {
    /// One halo exchange timed alone (no compute beside it), per step.
    pub exchange_s_per_step: Option<f64>,
    /// The decomposed step's time beyond one device's time for the work each device holds.
    pub exposed_s_per_step: f64,
    /// 1 − exposed ÷ exchange: the part of the exchange the overlapped pass hides.
    pub hidden_fraction: Option<f64>,
    /// T(P) = T(1)/P + exposed for the model's whole problem (slabs keep two neighbours at
    /// any count, so the exposed part stays), on 8 and on 64 devices.
    pub model_8_s_per_step: f64,
    pub model_64_s_per_step: f64,
}

impl Exposure {
    /// `share_s`: one device's time per step for the work each device of the decomposed
    /// run holds; `decomposed_s`: the decomposed run's per step; `whole_s`: one device's
    /// per step for the model's problem; `exchange_s`: one exchange alone, per step.
    pub fn new(share_s: f64, decomposed_s: f64, whole_s: f64, exchange_s: Option<f64>) -> Self {
        let exposed = (decomposed_s - share_s).max(0.0);
        Self {
            exchange_s_per_step: exchange_s,
            exposed_s_per_step: exposed,
            hidden_fraction: exchange_s
                .filter(|&x| x > 0.0)
                .map(|x| (1.0 - exposed / x).clamp(0.0, 1.0)),
            model_8_s_per_step: whole_s / 8.0 + exposed,
            model_64_s_per_step: whole_s / 64.0 + exposed,
        }
    }

    /// Two report lines; `step` names the unit ("step", "sweep"), `whole` the model's
    /// problem.
    pub fn human(&self, step: &str, whole: &str) -> String {
        let us = crate::units::seconds;
        let mut s = match (self.exchange_s_per_step, self.hidden_fraction) {
            (Some(x), Some(h)) => format!(
                "  halo exchange alone {} per {step}; exposed {} per {step}: {:.0} % of the exchange hidden\n",
                us(x),
                us(self.exposed_s_per_step),
                100.0 * h
            ),
            _ => format!("  exposed {} per {step}\n", us(self.exposed_s_per_step)),
        };
        s += &format!(
            "  model (one device's {step} ÷ P + the exposed part): {whole} on 8 devices {} per {step}, on 64 {}\n",
            us(self.model_8_s_per_step),
            us(self.model_64_s_per_step)
        );
        s
    }
}

/// One halo exchange of a decomposed engine timed alone, per step (None: no halos).
pub fn exchange_per_step<T: crate::precision::Real>(
    engine: &mut dyn crate::run::Engine<Real = T>,
) -> Result<Option<f64>> {
    let per = engine.steps_per_halo_exchange().max(1) as f64;
    Ok(engine.halo_exchange_seconds(20)?.map(|x| x / per))
}
