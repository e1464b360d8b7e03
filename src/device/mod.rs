//! Where a solve runs: the CPU (rayon) or one CUDA device.

pub mod ceilings;
pub mod cuda;
pub mod kernel_cache;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::parallel::World;
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

/// Where the subdomains of a run live: one device per subdomain, in slab order (a device
/// may hold several). One subdomain is the undecomposed run.
#[derive(Debug, Clone)]
pub struct Placement {
    /// This process's subdomains.
    pub parts: Vec<Device>,
    /// Under mpirun: this process's rank; every rank holds one subdomain.
    pub world: Option<World>,
    /// How halo blocks travel between GPUs (`--halo`).
    pub halo: Halo,
    /// Under mpirun with `--halo auto`: every rank runs on a GPU of its own and loads
    /// NCCL (the ranks voted), so a decomposed engine may take NCCL (`Distributed::on`).
    pub nccl_ready: bool,
}

/// How decomposed runs move halo blocks between GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Halo {
    /// Peer copies between the GPUs of one process. Between MPI ranks where every rank
    /// runs on a GPU of its own and NCCL loads on every rank, NCCL for iterative solvers
    /// (their residual sums then cross device to device too) and for halo blocks of
    /// 1 MiB or more; else MPI, staged through host memory.
    #[default]
    Auto,
    /// Peer copies between the GPUs of one process; MPI between ranks, staged through
    /// page-locked host memory (where NCCL is missing or not wanted).
    Mpi,
    /// NCCL send/receive between GPUs, in one process and between ranks (one GPU per
    /// slab, distinct).
    Nccl,
}

impl Placement {
    pub fn single(device: Device) -> Self {
        Self::local(vec![device])
    }

    /// Subdomains all in this process.
    pub fn local(parts: Vec<Device>) -> Self {
        Self {
            parts,
            world: None,
            halo: Halo::Auto,
            nccl_ready: false,
        }
    }

    /// The same placement with its halo blocks moved by `halo`: NCCL needs CUDA slabs,
    /// each on a GPU of its own.
    pub fn with_halo(mut self, halo: Halo) -> Result<Self> {
        if halo == Halo::Auto && self.world.is_some_and(|w| w.size > 1) {
            // Whether NCCL could join the ranks' GPUs; every rank must agree. Which runs
            // take it is the engine's choice (`Distributed::on`).
            let mine = self.parts.iter().all(|d| matches!(d, Device::Cuda(_)))
                && cuda::device_count().is_ok_and(|n| crate::parallel::world::local_size() <= n)
                && crate::parallel::nccl_require().is_ok();
            self.nccl_ready = crate::parallel::world::all(mine)?;
            return Ok(self);
        }
        if halo == Halo::Nccl {
            let refuse = |why: &str| Err(Error::invalid("--halo", "nccl", why));
            if !self.parts.iter().all(|d| matches!(d, Device::Cuda(_))) {
                return refuse("moves halos between GPUs; this run is on the CPU backend");
            }
            if self.world.is_none() && self.distinct_devices().len() < self.parts.len() {
                return refuse(
                    "takes one GPU per slab (NCCL has one rank per GPU); these slabs share \
                     a GPU: list distinct devices in --devices or leave --halo at auto",
                );
            }
            if self.world.is_some()
                && let Ok(n) = cuda::device_count()
                && crate::parallel::world::local_size() > n
            {
                return refuse(&format!(
                    "takes one GPU per rank (NCCL has one rank per GPU); this node runs {} \
                     ranks on {n} GPU(s): start at most {n} ranks a node or leave --halo at auto",
                    crate::parallel::world::local_size()
                ));
            }
            // Before any work, where NCCL will carry halos.
            if !self.is_single() {
                crate::parallel::nccl_require()?;
            }
        }
        self.halo = halo;
        Ok(self)
    }

    /// What set the number of subdomains, for messages: mpirun's process count, or
    /// `--subdomains` (or the devices listed).
    pub fn parts_field(&self) -> &'static str {
        match self.world {
            Some(_) => "mpirun -np",
            None => "--subdomains",
        }
    }

    pub fn is_single(&self) -> bool {
        self.parts.len() == 1 && self.world.is_none()
    }

    /// Subdomains of the whole run (all ranks).
    pub fn total(&self) -> usize {
        self.world.map_or(self.parts.len(), |w| w.size)
    }

    /// The run-wide numbers of this process's subdomains.
    pub fn ids(&self) -> Vec<usize> {
        match self.world {
            Some(w) => vec![w.rank],
            None => (0..self.parts.len()).collect(),
        }
    }

    /// The first subdomain's device (the whole run's when undecomposed).
    pub fn first(&self) -> &Device {
        &self.parts[0]
    }

    /// The devices the subdomains are on, each once, in order of first use.
    pub fn distinct_devices(&self) -> Vec<&Device> {
        let mut seen: Vec<&Device> = Vec::new();
        for d in &self.parts {
            if !seen.iter().any(|s| s.describe() == d.describe()) {
                seen.push(d);
            }
        }
        seen
    }

    /// The CUDA device of each subdomain, in order; None when all are on the CPU. A run
    /// is all on one kind.
    pub fn gpus(&self) -> Result<Option<Vec<Arc<Gpu>>>> {
        let gpus: Vec<_> = (self.parts.iter())
            .filter_map(|d| match d {
                Device::Cuda(g) => Some(g.clone()),
                Device::Cpu { .. } => None,
            })
            .collect();
        match gpus.len() {
            0 => Ok(None),
            n if n == self.parts.len() => Ok(Some(gpus)),
            _ => Err(Error::invalid(
                "--devices",
                self.parts.len(),
                "the subdomains of one run are all on CUDA devices or all on the CPU",
            )),
        }
    }

    pub fn describe(&self) -> String {
        if let Some(w) = self.world {
            let nccl = match self.halo {
                Halo::Nccl if w.size > 1 => ", halos by NCCL",
                Halo::Auto if w.size > 1 && self.nccl_ready => {
                    ", halos by NCCL for iterative solvers and blocks of 1 MiB or more, else MPI"
                }
                Halo::Mpi | Halo::Auto if w.size > 1 => ", halos by MPI",
                _ => "",
            };
            return format!(
                "{} MPI ranks, one subdomain each (rank 0 on {}{nccl})",
                w.size,
                self.parts[0].describe()
            );
        }
        if self.is_single() {
            return self.parts[0].describe();
        }
        let distinct: Vec<String> = (self.distinct_devices().iter())
            .map(|d| d.describe())
            .collect();
        format!("{} subdomains on {}", self.parts.len(), distinct.join(", "))
    }
}

/// `--devices`: `all` or CUDA ordinals separated by commas (an ordinal may repeat: its
/// device then holds several subdomains).
fn parse_devices(list: &str) -> Result<Option<Vec<usize>>> {
    if list.trim() == "all" {
        return Ok(None);
    }
    list.split(',')
        .map(|t| {
            t.trim().parse::<usize>().map_err(|_| {
                Error::invalid(
                    "--devices",
                    list,
                    "`all` or CUDA device ordinals separated by commas, e.g. 0,1",
                )
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The placement of a run: `device` as [`select`] picks it, or, with `devices` (CUDA
/// ordinals or all) and/or `subdomains`, that many slabs over those devices in turn. On
/// the CPU, `subdomains` slabs share the thread pool (the decomposed path without GPUs).
pub fn place(
    backend: Backend,
    ordinal: usize,
    devices: Option<&str>,
    subdomains: Option<usize>,
    notice: &mut dyn FnMut(String),
) -> Result<Placement> {
    if subdomains == Some(0) {
        return Err(Error::invalid("--subdomains", 0, "at least 1"));
    }
    if let Some(world) = World::current() {
        if devices.is_some() || subdomains.is_some() {
            return Err(Error::invalid(
                if devices.is_some() {
                    "--devices"
                } else {
                    "--subdomains"
                },
                devices.map_or_else(|| subdomains.unwrap_or(0).to_string(), str::to_string),
                "under mpirun every rank takes one subdomain (on GPU local-rank mod the \
                 node's GPUs); leave the option out",
            ));
        }
        if let Some((mine, share)) = crate::parallel::world::narrow_binding() {
            notice(format!(
                "each rank may use {mine} core(s) here, where its share of the node is {share}: \
                 mpirun binds ranks to cores by default, and keisan's work on the host (the \
                 problem's set-up, checks, outputs) then runs on {mine}. Start the ranks \
                 with `mpirun --bind-to none` (or `--map-by slot:PE={share}`): a 512³ \
                 electrostatics set-up on 2 ranks took 8.8–14.3 s bound, 2.0 s unbound"
            ));
        }
        let local = crate::parallel::world::local_rank();
        let device = match backend {
            Backend::Cpu => select(Backend::Cpu, 0, notice)?,
            _ => match cuda::device_count() {
                Ok(n) => select(backend, local % n, notice)?,
                Err(_) => select(backend, ordinal, notice)?,
            },
        };
        return Ok(Placement {
            parts: vec![device],
            world: Some(world),
            halo: Halo::Auto,
            nccl_ready: false,
        });
    }
    let Some(list) = devices else {
        let device = select(backend, ordinal, notice)?;
        let n = subdomains.unwrap_or(1);
        return Ok(Placement::local(vec![device; n]));
    };
    if backend == Backend::Cpu {
        return Err(Error::invalid(
            "--devices",
            list,
            "names CUDA devices; on the CPU backend give --subdomains N instead",
        ));
    }
    let listed = parse_devices(list)?;
    let count = cuda::device_count()?;
    let ordinals = listed.unwrap_or_else(|| (0..count).collect());
    if let Some(&bad) = ordinals.iter().find(|&&o| o >= count) {
        return Err(Error::invalid(
            "--devices",
            list,
            format!(
                "device {bad} does not exist: this machine has {count} CUDA device(s), 0..{}",
                count - 1
            ),
        ));
    }
    let n = subdomains.unwrap_or(ordinals.len());
    if n < ordinals.len() {
        return Err(Error::invalid(
            "--subdomains",
            n,
            format!(
                "fewer subdomains than the {} devices listed in --devices",
                ordinals.len()
            ),
        ));
    }
    let mut opened: Vec<(usize, Arc<Gpu>)> = Vec::new();
    for &o in &ordinals {
        if !opened.iter().any(|(p, _)| *p == o) {
            opened.push((o, Gpu::open(o)?));
        }
    }
    cuda::enable_peer_access(&opened.iter().map(|(_, g)| g.clone()).collect::<Vec<_>>())?;
    let parts = (0..n)
        .map(|k| {
            let o = ordinals[k % ordinals.len()];
            let gpu = &opened.iter().find(|(p, _)| *p == o).expect("opened").1;
            Device::Cuda(gpu.clone())
        })
        .collect();
    Ok(Placement::local(parts))
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
