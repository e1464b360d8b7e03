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

/// What a decomposed run spends beyond one device's share of its work, per step, split
/// into the subdomains' own extra work and the exchange they do not hide, and the model
/// of the decomposed step built on it (compute + exposed part).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Exposure {
    /// One halo exchange timed alone (no compute beside it), per step.
    pub exchange_s_per_step: Option<f64>,
    /// The decomposed step's time beyond one device's time for the work each device
    /// holds: the decomposition's own work plus the exchange it does not hide.
    pub exposed_s_per_step: f64,
    /// The decomposed step timed with the exchange switched off ([`halo_times`]).
    pub without_exchange_s_per_step: Option<f64>,
    /// That time beyond one device's share: bands computed apart from the interior,
    /// extra launches and waits, halo layers recomputed — work, not communication.
    pub decomposition_s_per_step: Option<f64>,
    /// The decomposed step beyond the same step without the exchange: the exchange's
    /// exposed part.
    pub exposed_exchange_s_per_step: Option<f64>,
    /// 1 − exposed exchange ÷ exchange alone: the part of the exchange the overlapped
    /// pass hides (without the exchange-off timing, the whole exposed part counts).
    pub hidden_fraction: Option<f64>,
    /// T(P) = T(1)/P + exposed for the model's whole problem (slabs keep two neighbours at
    /// any count, so the exposed part stays), on 8 and on 64 devices.
    pub model_8_s_per_step: f64,
    pub model_64_s_per_step: f64,
}

/// A decomposed engine's halo exchange, per step: timed alone, and the engine's steps
/// timed with it switched off.
#[derive(Debug, Clone, Copy, Default)]
pub struct HaloTimes {
    pub alone_s: Option<f64>,
    pub without_s: Option<f64>,
}

impl Exposure {
    /// `share_s`: one device's time per step for the work each device of the decomposed
    /// run holds; `decomposed_s`: the decomposed run's per step; `whole_s`: one device's
    /// per step for the model's problem; `halo`: the decomposed engine's [`halo_times`].
    pub fn new(share_s: f64, decomposed_s: f64, whole_s: f64, halo: HaloTimes) -> Self {
        let exposed = (decomposed_s - share_s).max(0.0);
        let exposed_exchange = halo.without_s.map(|w| (decomposed_s - w).max(0.0));
        Self {
            exchange_s_per_step: halo.alone_s,
            exposed_s_per_step: exposed,
            without_exchange_s_per_step: halo.without_s,
            decomposition_s_per_step: halo.without_s.map(|w| (w - share_s).max(0.0)),
            exposed_exchange_s_per_step: exposed_exchange,
            hidden_fraction: halo
                .alone_s
                .filter(|&x| x > 0.0)
                .map(|x| (1.0 - exposed_exchange.unwrap_or(exposed) / x).clamp(0.0, 1.0)),
            model_8_s_per_step: whole_s / 8.0 + exposed,
            model_64_s_per_step: whole_s / 64.0 + exposed,
        }
    }

    /// The report line on the exchange: alone, what the decomposed step adds, and how
    /// that splits into the decomposition's work and the exchange's exposed part.
    pub fn exchange_line(&self, step: &str) -> String {
        let us = crate::units::seconds;
        let mut s = String::from("  ");
        if let Some(x) = self.exchange_s_per_step {
            s += &format!("halo exchange alone {} per {step}; ", us(x));
        }
        s += &format!(
            "beyond one device's share {} per {step}",
            us(self.exposed_s_per_step)
        );
        if let (Some(d), Some(e)) = (
            self.decomposition_s_per_step,
            self.exposed_exchange_s_per_step,
        ) {
            s += &format!(
                ": the slabs' own work {} (timed with the exchange off), the exchange {}",
                us(d),
                us(e)
            );
        }
        if let Some(h) = self.hidden_fraction {
            s += &format!(" — {:.0} % of the exchange hidden", 100.0 * h);
        }
        s + "\n"
    }

    /// Two report lines; `step` names the unit ("step", "sweep"), `whole` the model's
    /// problem.
    pub fn human(&self, step: &str, whole: &str) -> String {
        let us = crate::units::seconds;
        let mut s = self.exchange_line(step);
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

/// After a decomposed engine's timed runs: one halo exchange alone, and the median of
/// `reps` runs of `steps` with the exchange switched off, per step. That leaves the
/// engine's fields wrong (stale halos), so it comes last; engines without halos give
/// neither.
pub fn halo_times<T: crate::precision::Real>(
    engine: &mut dyn crate::run::Engine<Real = T>,
    steps: u64,
    reps: usize,
) -> Result<HaloTimes> {
    let alone_s = exchange_per_step(engine)?;
    if !engine.set_halo_exchange(false) {
        return Ok(HaloTimes {
            alone_s,
            without_s: None,
        });
    }
    let times = sorted_wall_seconds(engine, steps, reps);
    engine.set_halo_exchange(true);
    let times = times?;
    Ok(HaloTimes {
        alone_s,
        without_s: Some(times[times.len() / 2] / steps.max(1) as f64),
    })
}
