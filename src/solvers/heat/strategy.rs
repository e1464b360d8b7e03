//! How a heat problem meets the device: in-core when both time layers fit the device
//! budget, else the pyramid method with a plan chosen by the cost model; or as asked.

use serde::{Deserialize, Serialize};

use super::model::{self, Costs, Prediction};
use super::pyramid::{self, BoxExecutor, Decomposition, Plan, PyramidHeat};
use super::{HeatProblem, cpu, cuda};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::precision::Real;
use crate::run::Engine;
use crate::units;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// In-core when the grid fits the device budget, else the pyramid method.
    #[default]
    Auto,
    InCore,
    /// Out-of-core pyramid method with overlapped transfers.
    Pyramid,
    /// Out-of-core baseline of the study: each step, every task in, one step, out.
    Trivial,
}

/// The out-of-core settings of a heat problem.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfCore {
    pub strategy: Strategy,
    pub decomposition: Option<Decomposition>,
    pub pyramid_height: Option<usize>,
    /// Device memory the solver may use, bytes; default: what is free minus a margin.
    pub device_memory: Option<u64>,
    /// Copy boxes straight to and from a page-locked host grid (see `HeatConfig`).
    pub pin_host_grid: bool,
    /// Who set `device_memory`, for messages: the problem's field or the flag.
    #[serde(skip)]
    pub device_memory_from: &'static str,
}

impl Default for OutOfCore {
    fn default() -> Self {
        Self {
            strategy: Strategy::Auto,
            decomposition: None,
            pyramid_height: None,
            device_memory: None,
            pin_host_grid: true,
            device_memory_from: "heat.device_memory",
        }
    }
}

/// Task slots of the CUDA executor (plus a scratch box): one coming in, one computing,
/// one going out.
const CUDA_SLOTS: usize = 3;
/// Workspace of the CPU pyramid when none is given.
const CPU_DEFAULT_WORKSPACE: u64 = 256 << 20;

/// What was decided, for the summary and `keisan model`.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    pub strategy: Strategy,
    pub decomposition: Option<Decomposition>,
    pub pyramid_height: Option<usize>,
    pub tasks: Option<usize>,
    pub device_memory: u64,
    pub predicted_s: Option<f64>,
    pub bound: Option<&'static str>,
    pub costs: Option<Costs>,
    /// Out-of-core: whether boxes move straight to and from a pinned host grid.
    pub direct: Option<bool>,
    /// Out-of-core on a GPU: seconds spent page-locking the host grid.
    pub pin_seconds: Option<f64>,
    /// The run is on the CPU: its boxes are a workspace in host memory, nothing pinned.
    #[serde(skip)]
    pub on_cpu: bool,
}

impl Layout {
    /// In-core, within `device_memory` bytes.
    pub fn in_core(device_memory: u64) -> Self {
        Self {
            strategy: Strategy::InCore,
            decomposition: None,
            pyramid_height: None,
            tasks: None,
            device_memory,
            predicted_s: None,
            bound: None,
            costs: None,
            direct: None,
            pin_seconds: None,
            on_cpu: false,
        }
    }

    pub fn human(&self) -> String {
        match self.strategy {
            Strategy::InCore | Strategy::Auto => "in-core".into(),
            s => format!(
                "{} ({} decomposition, n = {}, {} tasks per pass, {} {}{}; predicted {}, {}-bound)",
                if s == Strategy::Trivial {
                    "trivial out-of-core"
                } else {
                    "pyramid out-of-core"
                },
                self.decomposition.map_or("?", |d| d.label()),
                self.pyramid_height.unwrap_or(0),
                self.tasks.unwrap_or(0),
                match self.on_cpu {
                    false => "device budget",
                    true => "box workspace",
                },
                units::bytes(self.device_memory as u128),
                match (self.on_cpu, self.direct) {
                    (false, Some(true)) => ", host grid pinned",
                    (false, _) => ", host copies staged",
                    (true, _) => "",
                },
                units::seconds(self.predicted_s.unwrap_or(0.0)),
                self.bound.unwrap_or("?"),
            ),
        }
    }
}

/// The device budget: as given, or free memory less max(5 %, 512 MiB) on a GPU.
fn budget(p: &HeatProblem, device: &Device) -> Result<u64> {
    if let Some(b) = p.ooc.device_memory {
        return Ok(b);
    }
    Ok(match device {
        Device::Cpu { .. } => CPU_DEFAULT_WORKSPACE,
        Device::Cuda(gpu) => {
            let free = gpu.free_memory()? as u64;
            free.saturating_sub((free / 20).max(512 << 20))
        }
    })
}

/// Choose the plan: the user's decomposition/height where given, else the model's best.
pub fn choose_plan(
    p: &HeatProblem,
    capacity: usize,
    bytes: usize,
    costs: &Costs,
    how: model::Pipeline,
    (budget, on_cpu): (u64, bool),
    boxes: usize,
) -> Result<(Plan, Prediction)> {
    let decompositions: Vec<Decomposition> = match p.ooc.decomposition {
        Some(d) if !d.fits(p.dims) => {
            return Err(Error::invalid(
                "heat.decomposition",
                d.label(),
                format!("a {}D grid can only be cut into bands (\"1d\")", p.dims),
            ));
        }
        Some(d) => vec![d],
        None => Decomposition::ALL.to_vec(),
    };
    let min_values = decompositions
        .iter()
        .filter(|d| d.fits(p.dims))
        .map(|&d| pyramid::plan::min_capacity(p.shape, p.dims, d))
        .min()
        .unwrap_or(usize::MAX);
    if capacity < min_values {
        let why = format!(
            "too small for even pyramid height 1 with the smallest task: {boxes} boxes of \
             {min_values} values need at least {}",
            units::bytes((boxes * min_values * bytes) as u128)
        );
        return Err(match p.ooc.device_memory {
            Some(_) => Error::invalid(p.ooc.device_memory_from, units::bytes(budget as u128), why),
            None if on_cpu => Error::TooLarge(format!(
                "the CPU run's default box workspace ({}) is {why}; give a larger one with \
                 heat.device_memory or --device-memory",
                units::bytes(budget as u128)
            )),
            None => Error::TooLarge(format!(
                "the device's free memory less a margin ({}) is {why}; free device memory or \
                 use --backend cpu",
                units::bytes(budget as u128)
            )),
        });
    }
    // The trivial baseline is the one that does not overlap: one step per pass.
    let heights: Vec<usize> = match (!how.overlap, p.ooc.pyramid_height) {
        (true, _) => vec![1],
        (false, Some(n)) => vec![n],
        (false, None) => model::candidate_heights(512).collect(),
    };
    model::best_plan(
        p.shape,
        p.dims,
        &decompositions,
        &heights,
        capacity,
        p.steps,
        bytes,
        costs,
        how,
    )
    .ok_or_else(|| {
        Error::DoesNotFit(format!(
            "heat.pyramid_height = {}: no task fits the device budget of {} at this height: \
             the input box grows by 2n per split axis; use a smaller pyramid_height or a \
             larger device_memory",
            heights[0],
            units::bytes(budget as u128)
        ))
    })
}

/// Build the engine the problem's strategy asks for, starting from `u0`, the field after
/// `step0` steps.
pub fn build<T: Real>(
    p: &HeatProblem,
    device: &Device,
    u0: Vec<T>,
    step0: u64,
) -> Result<(Box<dyn Engine<Real = T>>, Layout)> {
    let budget = budget(p, device)?;
    let in_core_fits = p.field_bytes(T::PRECISION) <= budget as u128;
    let strategy = match (p.ooc.strategy, device) {
        // The CPU holds any grid the host does, unless a budget says otherwise.
        (Strategy::Auto, Device::Cpu { .. }) if p.ooc.device_memory.is_none() => Strategy::InCore,
        (Strategy::Auto, _) if in_core_fits => Strategy::InCore,
        (Strategy::Auto, _) => Strategy::Pyramid,
        (s, _) => s,
    };
    let in_core = Layout::in_core(budget);
    if strategy == Strategy::InCore {
        let engine: Box<dyn Engine<Real = T>> = match device {
            Device::Cpu { .. } => Box::new(cpu::CpuHeat::new(p, u0, step0)?),
            Device::Cuda(gpu) => Box::new(cuda::CudaHeat::new(gpu.clone(), p, u0, step0)?),
        };
        return Ok((engine, in_core));
    }
    let trivial = strategy == Strategy::Trivial;
    let bytes = T::PRECISION.bytes();
    // Task slots of the CUDA executor: the trivial baseline runs one task at a time.
    let slots = if trivial { 1 } else { CUDA_SLOTS };
    let (boxes, costs) = match device {
        Device::Cpu { .. } => (
            pyramid::cpu::CpuBoxes::<T>::BOXES,
            model::measure_cpu::<T>(p),
        ),
        Device::Cuda(gpu) => {
            let boxes = pyramid::cuda::CudaBoxes::<T>::boxes(slots);
            let capacity = (budget as usize / bytes / boxes).max(1);
            (
                boxes,
                pyramid::cuda::measure::<T>(gpu, p, capacity, p.ooc.pin_host_grid)?,
            )
        }
    };
    // Unless the budget was given: boxes beyond 1/64 of the grid (or the smallest task,
    // on small grids) only lengthen the pipeline's fill and drain (and the pinned host
    // buffers beside the grid).
    let mut capacity = budget as usize / bytes / boxes;
    if p.ooc.device_memory.is_none() {
        let smallest = Decomposition::ALL
            .iter()
            .filter(|d| d.fits(p.dims) && p.ooc.decomposition.is_none_or(|x| x == **d))
            .map(|&d| pyramid::plan::min_capacity(p.shape, p.dims, d))
            .min()
            .unwrap_or(1);
        capacity = capacity.min(p.cells().div_ceil(64).max(smallest));
    }
    let mut u0 = u0;
    let choose = |direct| {
        let how = model::Pipeline {
            overlap: !trivial,
            direct,
        };
        let on_cpu = matches!(device, Device::Cpu { .. });
        choose_plan(p, capacity, bytes, &costs, how, (budget, on_cpu), boxes)
    };
    let (mut plan, mut prediction) = choose(p.ooc.pin_host_grid)?;
    let mut pin_seconds = None;
    let exec: Box<dyn BoxExecutor<T>> = match device {
        Device::Cpu { .. } => {
            crate::memory::ensure_host_fits(
                p.field_bytes(T::PRECISION) / 2 + (2 * plan.box_values * bytes) as u128,
                "the host grid and the pyramid's workspace",
            )?;
            Box::new(pyramid::cpu::CpuBoxes::<T>::new(
                p,
                plan.box_values,
                p.ooc.pin_host_grid,
            )?)
        }
        Device::Cuda(gpu) => {
            let pin = if p.ooc.pin_host_grid {
                let t = std::time::Instant::now();
                // SAFETY: the guard goes to the executor, which the engine drops (or
                // tells to let go) before the grid.
                match unsafe {
                    gpu.pin_host(u0.as_mut_ptr().cast(), std::mem::size_of_val(&u0[..]))
                } {
                    Ok(pin) => {
                        pin_seconds = Some(t.elapsed().as_secs_f64());
                        Some(pin)
                    }
                    Err(e) => {
                        crate::say!(
                            "note: could not page-lock the {} host grid ({e}); the host \
                             gathers and scatters every box instead (slower)",
                            units::bytes(p.field_bytes(T::PRECISION) / 2)
                        );
                        (plan, prediction) = choose(false)?;
                        None
                    }
                }
            } else {
                None
            };
            // Pinned staging (staged mode) and result buffers beside the grid: a result
            // waits for its last reader, behind as many tasks as are in flight.
            let pending = plan.write_back_lag() + 2 * slots + 1;
            let staging = if pin.is_some() { 0 } else { slots };
            // What a result buffer holds: the late strips only, when the grid is pinned.
            let result_values = if pin.is_some() {
                plan.late_values().max(1)
            } else {
                plan.result_values
            };
            crate::memory::ensure_host_fits(
                p.field_bytes(T::PRECISION) / 2
                    + (staging * plan.box_values + pending * result_values) as u128 * bytes as u128,
                "the host grid and the pyramid's pinned buffers",
            )?;
            Box::new(pyramid::cuda::CudaBoxes::<T>::new(
                gpu.clone(),
                p,
                slots,
                plan.box_values,
                result_values,
                !trivial,
                pin,
                pending,
            )?)
        }
    };
    let layout = Layout {
        strategy,
        decomposition: Some(plan.decomposition),
        pyramid_height: Some(plan.height),
        tasks: Some(plan.tasks.len()),
        device_memory: budget,
        predicted_s: Some(prediction.seconds),
        bound: Some(prediction.bound),
        costs: Some(costs),
        direct: Some(exec.direct()),
        pin_seconds,
        on_cpu: matches!(device, Device::Cpu { .. }),
    };
    Ok((Box::new(PyramidHeat::new(p, u0, step0, plan, exec)), layout))
}
