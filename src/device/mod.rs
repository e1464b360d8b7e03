//! Where a solve runs: the CPU (rayon) or one CUDA device.

pub mod ceilings;
pub mod cuda;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use cuda::Gpu;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// CUDA if a device is usable, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// The device chosen for a run.
#[derive(Debug, Clone)]
pub enum Device {
    Cpu { threads: usize },
    Cuda(Arc<Gpu>),
}

impl Device {
    pub fn describe(&self) -> String {
        match self {
            Device::Cpu { threads: 1 } => "CPU (1 thread)".to_string(),
            Device::Cpu { threads } => format!("CPU ({threads} threads)"),
            Device::Cuda(gpu) => format!(
                "CUDA device {}: {} (sm_{}{})",
                gpu.ordinal, gpu.name, gpu.compute_capability.0, gpu.compute_capability.1
            ),
        }
    }
}

/// Pick the device for `backend`. `notice` receives a line to show the user when
/// `auto` falls back to the CPU.
pub fn select(backend: Backend, ordinal: usize, notice: &mut dyn FnMut(String)) -> Result<Device> {
    let cpu = || Device::Cpu {
        threads: rayon::current_num_threads(),
    };
    match backend {
        Backend::Cpu => Ok(cpu()),
        Backend::Cuda => Ok(Device::Cuda(Gpu::open(ordinal)?)),
        Backend::Auto => match Gpu::open(ordinal) {
            Ok(gpu) => Ok(Device::Cuda(gpu)),
            Err(e @ Error::InvalidField { .. }) => Err(e),
            Err(e) => {
                notice(format!("{e}; running on the CPU"));
                Ok(cpu())
            }
        },
    }
}

/// One line per CUDA device (name, compute capability, memory), for `keisan info`.
#[derive(Debug, Clone, Serialize)]
pub struct CudaDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: String,
    pub total_memory_bytes: usize,
    pub free_memory_bytes: usize,
    pub multiprocessors: usize,
}

pub fn list_cuda_devices() -> Result<Vec<CudaDeviceInfo>> {
    let n = cuda::device_count()?;
    (0..n)
        .map(|i| {
            let gpu = Gpu::open(i)?;
            Ok(CudaDeviceInfo {
                ordinal: i,
                name: gpu.name.clone(),
                compute_capability: format!(
                    "{}.{}",
                    gpu.compute_capability.0, gpu.compute_capability.1
                ),
                total_memory_bytes: gpu.total_memory,
                free_memory_bytes: gpu.free_memory()?,
                multiprocessors: gpu.multiprocessors,
            })
        })
        .collect()
}
