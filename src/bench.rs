//! `keisan bench`: timing discipline (warm-up, CUDA events, median of several runs) and
//! a report that puts each figure beside the device ceiling measured in the same run.

use std::time::Instant;

use serde::Serialize;

use crate::device::Device;
use crate::device::ceilings::{self, Ceilings};
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::solvers::jacobi::{self, Fields, JacobiProblem, Manufactured};

#[derive(Debug, Clone, Serialize)]
pub struct JacobiBench {
    pub device: String,
    /// Sweeps per pass through memory: 1 = single-pass kernel, 2 = temporal blocking.
    pub sweeps_per_pass: u32,
    pub precision: String,
    pub n: usize,
    pub m: usize,
    pub iterations: u64,
    pub repetitions: usize,
    /// Median seconds for `iterations` sweeps (device time on CUDA, from events).
    pub seconds: f64,
    pub seconds_min: f64,
    pub seconds_max: f64,
    pub gcells_per_s: f64,
    /// Bytes a single-pass sweep must move per cell: read u and f, write u_new.
    pub bytes_per_cell: usize,
    pub effective_bandwidth: f64,
    pub ceilings: Ceilings,
    /// effective_bandwidth / measured copy bandwidth.
    pub fraction_of_copy_bandwidth: f64,
    /// Time the sweeps would take at the measured copy bandwidth.
    pub floor_seconds: f64,
}

pub struct JacobiBenchOptions {
    pub n: usize,
    pub m: usize,
    pub iterations: u64,
    pub repetitions: usize,
    pub precision: Precision,
}

/// One report per engine variant: on CUDA the single-pass kernel and temporal blocking.
pub fn jacobi(device: &Device, o: &JacobiBenchOptions) -> Result<Vec<JacobiBench>> {
    let ceilings = match device {
        Device::Cpu { .. } => ceilings::measure_cpu(),
        Device::Cuda(gpu) => ceilings::measure_gpu(gpu)?,
    };
    let variants: &[u32] = match device {
        Device::Cpu { .. } => &[1],
        Device::Cuda(_) => &[1, 2],
    };
    variants
        .iter()
        .map(|&spp| match o.precision {
            Precision::F32 => jacobi_typed::<f32>(device, o, spp, ceilings),
            Precision::F64 => jacobi_typed::<f64>(device, o, spp, ceilings),
        })
        .collect()
}

fn jacobi_typed<T: Real>(
    device: &Device,
    o: &JacobiBenchOptions,
    sweeps_per_pass: u32,
    ceilings: Ceilings,
) -> Result<JacobiBench> {
    let problem = JacobiProblem {
        n: o.n,
        m: o.m,
        alpha: 1.0,
        relax: 0.5,
        tolerance: 0.0, // never stop early: every sweep is timed work
        max_iterations: o.iterations,
        exact: Manufactured::Polynomial,
    };
    let mut engine =
        jacobi::engine_with::<T>(&problem, device, Fields::Manufactured, sweeps_per_pass)?;
    let mut times = Vec::with_capacity(o.repetitions);
    match device {
        Device::Cuda(gpu) => {
            let (start, stop) = (gpu.timing_event()?, gpu.timing_event()?);
            engine.advance(o.iterations.min(10))?; // warm-up
            engine.diagnostics()?;
            for _ in 0..o.repetitions {
                start.record(&gpu.stream)?;
                engine.advance(o.iterations)?;
                stop.record(&gpu.stream)?;
                times.push(start.elapsed_ms(&stop)? as f64 * 1e-3);
                engine.diagnostics()?;
            }
        }
        Device::Cpu { .. } => {
            engine.advance(1)?;
            for _ in 0..o.repetitions {
                let t = Instant::now();
                engine.advance(o.iterations)?;
                times.push(t.elapsed().as_secs_f64());
                engine.diagnostics()?;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let cells = (o.n * o.m) as f64 * o.iterations as f64;
    let bytes_per_cell = 3 * T::PRECISION.bytes();
    let effective_bandwidth = cells * bytes_per_cell as f64 / seconds;
    Ok(JacobiBench {
        device: device.describe(),
        sweeps_per_pass,
        precision: T::PRECISION.to_string(),
        n: o.n,
        m: o.m,
        iterations: o.iterations,
        repetitions: o.repetitions,
        seconds,
        seconds_min: times[0],
        seconds_max: times[times.len() - 1],
        gcells_per_s: cells / seconds * 1e-9,
        bytes_per_cell,
        effective_bandwidth,
        fraction_of_copy_bandwidth: effective_bandwidth / ceilings.copy_bandwidth,
        floor_seconds: cells * bytes_per_cell as f64 / ceilings.copy_bandwidth,
        ceilings,
    })
}

/// The report table: ceilings once, then one block per variant.
pub fn jacobi_human(reports: &[JacobiBench]) -> String {
    let mut r = String::new();
    for (i, b) in reports.iter().enumerate() {
        r += &b.human(i == 0);
    }
    r
}

impl JacobiBench {
    pub fn human(&self, with_ceilings: bool) -> String {
        let c = &self.ceilings;
        let mut r = String::new();
        if !with_ceilings {
            return r + &self.figures();
        }
        r += &format!("jacobi bench on {}\n", self.device);
        r += &format!(
            "  ceilings (measured now): copy {:.1} GB/s",
            c.copy_bandwidth * 1e-9
        );
        if c.fma_f64 > 0.0 {
            r += &format!(
                ", FMA f32 {:.1} TFLOP/s, f64 {:.1} TFLOP/s",
                c.fma_f32 * 1e-12,
                c.fma_f64 * 1e-12
            );
        }
        r += "\n";
        r + &self.figures()
    }

    fn figures(&self) -> String {
        use crate::units::seconds as s;
        let how = match self.sweeps_per_pass {
            1 => "single pass".to_string(),
            k => format!("{k} sweeps per pass"),
        };
        let mut r = format!("  [{how}]\n");
        r += &format!(
            "  {} × {} {}, {} iterations, median of {}: {} (min {}, max {})\n",
            self.n,
            self.m,
            self.precision,
            self.iterations,
            self.repetitions,
            s(self.seconds),
            s(self.seconds_min),
            s(self.seconds_max)
        );
        r += &format!(
            "  {:.2} Gcell/s, {} B/cell, effective {:.1} GB/s = {:.1} % of copy bandwidth; single-pass floor {}\n",
            self.gcells_per_s,
            self.bytes_per_cell,
            self.effective_bandwidth * 1e-9,
            100.0 * self.fraction_of_copy_bandwidth,
            s(self.floor_seconds)
        );
        r
    }
}
