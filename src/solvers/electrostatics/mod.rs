//! Electrostatics in 3D by red-black SOR (seed 003): ∇·(ε0 εr ∇V) = −ρ on a box, on a
//! rectilinear (possibly nonuniform) mesh of nodes. Electrodes are nodes of known
//! voltage; dielectrics set εr per node; the face between two nodes takes the mean of
//! their εr (the study's `e + ε(neighbour)`), so an interface between two materials is
//! one cell of the mean value. Box faces hold zero normal field (a free face node copies
//! its inner neighbour, as in the study) unless a face is given a fixed voltage.
//!
//! Fields are stored x fastest: `V[(k·(Ny+1) + j)·(Nx+1) + i]`, a NumPy array of shape
//! (Nz+1, Ny+1, Nx+1).

pub mod bench;
mod bench_slabs;
pub mod cpu;
pub mod cuda;
pub mod cuda_blocked;
mod cuda_slab;
mod gauss;
mod geometry;
mod solver;
pub mod stencil_table;

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use geometry::{Geometry, Shape};
pub use solver::ELECTROSTATICS;

use crate::device::{Device, Placement};
use crate::error::{Error, Result};
use crate::parallel::{Distributed, Window, windows};
use crate::precision::{Precision, Real};
use crate::run::{Engine, Restart};

/// The CUDA sweep's launch shape: threads per block in x (compact columns of a colour, a
/// multiple of 32: a warp walks one row) and y (rows), and z-planes each block walks
/// (None: enough blocks for many waves). The result does not depend on it (tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Threads per block (x a multiple of 32; the fused kernel needs y >= 3); None: the
    /// kernel's default (see [`SweepKernel::default_block`]).
    pub block: Option<(u32, u32)>,
    pub planes: Option<usize>,
    /// Blocks per multiprocessor the compiler must fit (caps registers per thread); None:
    /// the best measured on the H100 for the kernel and precision.
    pub min_blocks: Option<u32>,
    /// The persistent kernel's blocks (None: as many as the device holds at once); fewer
    /// make each block take several tiles per colour.
    pub persistent_blocks: Option<usize>,
    /// How an iteration runs (see [`SweepKernel`]); None: the one measured fastest for
    /// the mesh ([`SweepKernel::default_for`]).
    pub kernel: Option<SweepKernel>,
    /// Bits per class code on the device, 4 or 8; None: 4 where the kernel reads packed
    /// codes (per-colour, persistent) and the mesh has at most 16 classes, else 8.
    pub class_bits: Option<u8>,
    /// The per-colour and persistent sweeps compiled once per colour (kernels.cu's
    /// ES_COLOUR_T); None: where that was measured faster
    /// ([`SweepKernel::colour_templated`]).
    pub colour_templated: Option<bool>,
}

impl SweepKernel {
    pub const ALL: [SweepKernel; 5] = [
        SweepKernel::PerColour,
        SweepKernel::Persistent,
        SweepKernel::Fused,
        SweepKernel::Staged,
        SweepKernel::Blocked,
    ];

    /// What KEISAN_ES_KERNEL and `bench --kernel` accept.
    pub const NAMES: &str = "per-colour, persistent, fused, staged or blocked";

    /// The kernel named `name` (see [`SweepKernel::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The name KEISAN_ES_KERNEL and the bench use.
    pub fn name(self) -> &'static str {
        match self {
            SweepKernel::PerColour => "per-colour",
            SweepKernel::Persistent => "persistent",
            SweepKernel::Fused => "fused",
            SweepKernel::Staged => "staged",
            SweepKernel::Blocked => "blocked",
        }
    }

    /// The launch shape measured best on the H100 for a mesh of `nodes`: for the fused
    /// kernel 8 rows owned between 2 halo rows; the staged kernel's f64 rings fit 4 warps
    /// in 48 KB; the per-colour sweeps of small meshes (the 128³ Poisson case) fill the
    /// device best with blocks of two 2-warp rows (15.4–15.8 ms against 18.7 at 32×8;
    /// 512³ is 10 % slower so); large f32 meshes with 16 rows of one warp, two blocks per
    /// multiprocessor (512³, 2026-11-26: 764.2–764.5 µs per iteration against 777.0–778.8
    /// at 32×8, four blocks; 64×8 767.6–767.8), whose tiles read fewer halo rows.
    pub fn default_block(self, precision: Precision, nodes: usize) -> (u32, u32) {
        match (self, precision) {
            (SweepKernel::Fused, _) => (32, 10),
            (SweepKernel::PerColour, _) if nodes <= SMALL_MESH => (64, 2),
            (SweepKernel::PerColour, Precision::F32) => (32, 16),
            (SweepKernel::PerColour | SweepKernel::Persistent, _)
            | (SweepKernel::Staged, Precision::F32) => (32, 8),
            (SweepKernel::Staged, Precision::F64) => (32, 4),
            // Its own shape (cuda_blocked.rs); the per-colour engine never runs it.
            (SweepKernel::Blocked, _) => (32, 12),
        }
    }

    /// The kernel measured fastest for a mesh of `nodes` (H100, 2026-11-27,
    /// docs/PERFORMANCE.md): the persistent kernel where launches set the pace and no
    /// per-node charge lengthens its sweep — f32 meshes of 2¹⁸ (64³) to 2²⁴ (256³) nodes,
    /// f64 ones of 2¹⁸ to 2²² (per iteration against the per-colour sweeps: 64³
    /// 14.6 / 19.0 µs, 128³ 22.2 / 31.3 µs in f32, 26.2 / 35.6 µs in f64, 256³ f32 120 /
    /// 131 µs, but 256³ f64 216 / 199 µs); else the per-colour sweeps (the 128³ Poisson
    /// case with its charge per node: 36.6 / 32.6 µs; the examples' meshes of 10⁴–10⁵
    /// nodes, whose few blocks end each launch quickly: coax 19.7 / 15.6 µs).
    pub fn default_for(precision: Precision, nodes: usize, charge_per_node: bool) -> Self {
        let most = match precision {
            Precision::F32 => 1 << 24,
            Precision::F64 => SMALL_MESH,
        };
        if !charge_per_node && (1 << 18..=most).contains(&nodes) {
            SweepKernel::Persistent
        } else {
            SweepKernel::PerColour
        }
    }

    /// Whether the sweep is compiled once per colour (kernels.cu's ES_COLOUR_T): faster
    /// for the f32 per-colour sweep of large meshes and the f32 persistent kernel, slower
    /// for f64 and the small meshes' per-colour sweep (H100, 2026-11-27,
    /// docs/PERFORMANCE.md).
    pub fn colour_templated(self, precision: Precision, nodes: usize) -> bool {
        precision == Precision::F32
            && match self {
                SweepKernel::Persistent => true,
                SweepKernel::PerColour => nodes > SMALL_MESH,
                SweepKernel::Fused | SweepKernel::Staged | SweepKernel::Blocked => false,
            }
    }

    /// Blocks per multiprocessor the compiler must fit by default (measured on the H100,
    /// docs/PERFORMANCE.md): 4 in f32, 3 in f64 (512³ per-colour, 2026-11-26: 1.33–1.37
    /// against 1.40–1.42 ms per iteration at 2, in four calls; it spilled at 3 before the
    /// sweep's rewrite), 2 for the fused kernel and for the per-colour sweep's blocks of
    /// 512 threads or more in f32 (the large meshes' default 32×16: the same registers
    /// and warps per multiprocessor as 4 blocks of 256), for `block`, the launch's. Never
    /// more than 1024 threads (f32) or 768 (f64) per multiprocessor, the defaults' most:
    /// larger blocks (KEISAN_ES_BLOCK) would otherwise get too few registers and spill
    /// (32 × 32 in f32 at 2 blocks: 2.61 ms per 512³ iteration, H100, 2026-11-27).
    pub fn default_min_blocks(self, precision: Precision, block: (u32, u32)) -> u32 {
        let wanted = match (self, precision) {
            (SweepKernel::Fused, _) => 2,
            (SweepKernel::PerColour, Precision::F32) if block.0 * block.1 >= 512 => 2,
            (_, Precision::F32) => 4,
            (_, Precision::F64) => 3,
        };
        let most = match precision {
            Precision::F32 => 1024,
            Precision::F64 => 768,
        };
        wanted.min(most / (block.0 * block.1)).max(1)
    }
}

/// Nodes up to which a mesh counts as small for the default launch (about 161³).
const SMALL_MESH: usize = 1 << 22;

/// How a red-black iteration runs on a CUDA device (see kernels.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepKernel {
    /// One launch per iteration: red at plane k + 1 and black at plane k in one march.
    Fused,
    /// One launch per colour, in place (the single-pass floor's kernel).
    PerColour,
    /// The per-colour sweeps of many iterations in one cooperative launch, with a grid
    /// barrier between colours: for meshes small enough that launches set the pace.
    Persistent,
    /// As PerColour, each warp's operands staged through shared memory by asynchronous
    /// copies several planes ahead.
    Staged,
    /// Passes of two iterations with the update from a stencil table (cuda_blocked.rs,
    /// stencil_table.rs): one device, a table that fits shared memory; V differs from the
    /// other kernels' in the last bits.
    Blocked,
}

pub const DEFAULT_LAUNCH: Launch = Launch {
    block: None,
    planes: None,
    min_blocks: None,
    persistent_blocks: None,
    kernel: None,
    class_bits: None,
    colour_templated: None,
};

impl Launch {
    /// The kernel this launch runs in `precision` on the mesh of `g`: the one asked for,
    /// else [`SweepKernel::default_for`] the mesh.
    pub fn kernel_for(&self, precision: Precision, g: &Geometry) -> SweepKernel {
        self.kernel.unwrap_or_else(|| {
            SweepKernel::default_for(precision, g.counts.iter().product(), g.q_node.is_some())
        })
    }

    /// Whether `kernel`'s sweep is compiled once per colour (kernels.cu ES_COLOUR_T) in
    /// `precision` on a mesh of `nodes`: as asked, else [`SweepKernel::colour_templated`].
    pub fn colour_templated_for(
        &self,
        kernel: SweepKernel,
        precision: Precision,
        nodes: usize,
    ) -> bool {
        self.colour_templated
            .unwrap_or_else(|| kernel.colour_templated(precision, nodes))
    }

    /// DEFAULT_LAUNCH, or KEISAN_ES_BLOCK=BXxBY, KEISAN_ES_PLANES=K (at most 256), KEISAN_ES_MINB=M,
    /// KEISAN_ES_PERSISTENT_BLOCKS=B, KEISAN_ES_KERNEL=per-colour|persistent|fused|staged,
    /// KEISAN_ES_CLASS_BITS=4|8 and KEISAN_ES_COLOUR_T=0|1 for tuning runs; a value that does
    /// not parse is an error naming its variable.
    pub fn from_env() -> Result<Self> {
        use crate::tuning::{at_least, knob, number, pair};
        let block = pair(
            "KEISAN_ES_BLOCK",
            'x',
            "BXxBY with BX a multiple of 32 and at most 1024 threads, e.g. 32x8",
            |&x: &u32, &y: &u32| {
                x.is_multiple_of(32)
                    && x > 0
                    && y >= 1
                    && x.checked_mul(y).is_some_and(|t| t <= 1024)
            },
        )?;
        let planes = at_least("KEISAN_ES_PLANES", 1usize)?;
        let min_blocks = number("KEISAN_ES_MINB", 1..=32u32)?;
        let persistent_blocks = at_least("KEISAN_ES_PERSISTENT_BLOCKS", 1usize)?;
        let kernel = knob(
            "KEISAN_ES_KERNEL",
            SweepKernel::NAMES,
            SweepKernel::from_name,
        )?;
        let class_bits = knob("KEISAN_ES_CLASS_BITS", "4 or 8", |v| match v {
            "4" => Some(4u8),
            "8" => Some(8u8),
            _ => None,
        })?;
        let colour_templated = crate::tuning::switch("KEISAN_ES_COLOUR_T")?;
        Ok(Self {
            block,
            planes,
            min_blocks,
            persistent_blocks,
            kernel,
            class_bits,
            colour_templated,
        })
    }
}

/// The engine for `device`, from the geometry's voltages (or a checkpoint's state).
pub fn engine<T: Real>(
    p: &ElectrostaticsProblem,
    g: &Geometry,
    device: &Device,
    restart: Option<Restart<T>>,
) -> Result<Box<dyn Engine<Real = T>>> {
    Ok(match device {
        Device::Cpu { .. } if p.is_table() => {
            Box::new(stencil_table::CpuTable::new(p, g, restart)?)
        }
        Device::Cpu { .. } => Box::new(cpu::CpuElectrostatics::new(p, g.clone(), restart)?),
        Device::Cuda(gpu) => {
            // The table form, or the tuning knob's blocked kernel on a classic problem.
            let launch = match p.is_table() {
                true => None,
                false => Some(Launch::from_env()?),
            };
            match launch {
                Some(l) if l.kernel != Some(SweepKernel::Blocked) => Box::new(
                    cuda::CudaElectrostatics::new(gpu.clone(), p, g, restart, l)?,
                ),
                _ => Box::new(cuda_blocked::CudaBlocked::new(gpu.clone(), p, g, restart)?),
            }
        }
    })
}

/// The engine for `placement`: one device's, or slabs of z-planes (halos of two planes,
/// four in the table form: `slab_windows`), of either update. CPU slabs add their
/// per-plane residual sums up over all slabs in plane order: the potential, the residual
/// history and the stopping iteration are those of one engine, bit for bit. CUDA slabs
/// give the one-device engine's potential bit for bit; their residual sums are added per
/// slab and sweep (per call, in the table form), so the history agrees with it to
/// rounding.
pub fn engine_placed<T: Real>(
    p: &ElectrostaticsProblem,
    g: &Geometry,
    placement: &Placement,
    restart: Option<Restart<T>>,
) -> Result<Box<dyn Engine<Real = T>>> {
    if placement.is_single() {
        return engine(p, g, placement.first(), restart);
    }
    let (v, step, status) = cpu::starting_state(g, restart)?;
    if v.len() != p.points() {
        return Err(Error::Parse(format!(
            "the checkpoint's V holds {} values; the mesh has {}",
            v.len(),
            p.points()
        )));
    }
    let all = slab_windows(g.counts[2], placement, p.is_table())?;
    let q = p.clone();
    let field_of = move |data| cpu::field_of(&q, "V", data);
    if p.is_table() {
        let t = stencil_table::build_or_refuse::<T>(p, g)?;
        if let Some(gpus) = placement.gpus()? {
            let build = |k: usize, w| {
                cuda_blocked::CudaBlocked::on_window(
                    gpus[k].clone(),
                    p,
                    &t,
                    g.counts,
                    w,
                    &v,
                    step,
                    status,
                )
            };
            return Ok(Box::new(Distributed::on(placement, all, build, field_of)?));
        }
        let build = |_, w| {
            Ok(stencil_table::CpuTable::on_window(
                p, &t, g.counts, w, &v, step, status,
            ))
        };
        return Ok(Box::new(Distributed::on(placement, all, build, field_of)?));
    }
    if let Some(gpus) = placement.gpus()? {
        let build = |k: usize, w| {
            cuda_slab::CudaElectrostaticsSlab::on_window(gpus[k].clone(), p, g, w, &v, step, status)
        };
        return Ok(Box::new(Distributed::on(placement, all, build, field_of)?));
    }
    let build = |_, w| cpu::CpuElectrostatics::on_window(p, g, w, &v, step, status);
    Ok(Box::new(Distributed::on(placement, all, build, field_of)?))
}

/// The slabs of `nz` z-planes over `placement`: two halo planes each side (one exchange
/// per red-black iteration), four in the table form (`table`; its GPU slabs take two
/// iterations per exchange).
pub(crate) fn slab_windows(nz: usize, placement: &Placement, table: bool) -> Result<Vec<Window>> {
    let halo = if table { 4 } else { 2 };
    windows(nz, placement.total(), halo, false, placement.parts_field())
}

/// The planes a slab's red sweep covers for its black sweep over `rows`: those and one
/// beyond each end, within the planes its buffer holds (not past the mesh), so the black
/// sweep reads red values of this iteration without a second exchange.
pub(crate) fn red_planes(w: &Window, rows: &Range<usize>) -> Range<usize> {
    let held = w.base.max(0) as usize..(w.base + w.rows as isize) as usize;
    rows.start.saturating_sub(1).max(held.start)..(rows.end + 1).min(held.end)
}

/// ε0 in F/m.
pub const EPSILON_0: f64 = 8.854_187_812_8e-12;

/// One axis of the mesh as written: uniform (`range` + `cells`) or nonuniform
/// (`breakpoints` + `divisions`, each segment divided evenly).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisConfig {
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    #[serde(default)]
    pub cells: Option<i64>,
    #[serde(default)]
    pub breakpoints: Option<Vec<f64>>,
    #[serde(default)]
    pub divisions: Option<Vec<i64>>,
}

/// The most cells along one axis (kernels index a plane with 32-bit ints).
pub const MAX_CELLS: i64 = 1 << 20;

impl AxisConfig {
    /// The node coordinates, ascending.
    pub fn nodes(&self, field: &str) -> Result<Vec<f64>> {
        let (breaks, divisions): (Vec<f64>, Vec<i64>) = match self {
            AxisConfig {
                range: Some(r),
                cells: Some(c),
                breakpoints: None,
                divisions: None,
            } => (r.to_vec(), vec![*c]),
            AxisConfig {
                range: None,
                cells: None,
                breakpoints: Some(b),
                divisions: Some(d),
            } => (b.clone(), d.clone()),
            _ => {
                return Err(Error::invalid(
                    field,
                    "as given",
                    "give range = [lo, hi] with cells = N, or breakpoints = [...] with \
                     divisions = [...] (one per segment)",
                ));
            }
        };
        if breaks.len() < 2 || divisions.len() != breaks.len() - 1 {
            return Err(Error::invalid(
                &format!("{field}.divisions"),
                format!("{divisions:?}"),
                format!(
                    "give one division count per segment ({})",
                    breaks.len().saturating_sub(1)
                ),
            ));
        }
        if breaks
            .windows(2)
            .any(|w| !(w[0].is_finite() && w[1].is_finite() && w[0] < w[1]))
        {
            return Err(Error::invalid(
                &format!("{field}.breakpoints"),
                format!("{breaks:?}"),
                "must be finite and strictly increasing",
            ));
        }
        if let Some(d) = divisions.iter().find(|&&d| !(1..=MAX_CELLS).contains(&d)) {
            return Err(Error::invalid(
                &format!("{field}.divisions"),
                d,
                format!("cells per segment must be in [1, {MAX_CELLS}]"),
            ));
        }
        let total: i64 = divisions.iter().sum();
        if !(2..=MAX_CELLS).contains(&total) {
            return Err(Error::invalid(
                field,
                format!("{total} cells"),
                format!("an axis needs at least 3 nodes (2 cells) and at most {MAX_CELLS} cells"),
            ));
        }
        let mut nodes = vec![breaks[0]];
        for (s, &d) in divisions.iter().enumerate() {
            let (a, b) = (breaks[s], breaks[s + 1]);
            for c in 1..=d {
                nodes.push(if c == d {
                    b
                } else {
                    a + (b - a) * c as f64 / d as f64
                });
            }
        }
        check_spacing(field, &nodes)?;
        Ok(nodes)
    }
}

/// The thinnest cell an axis may have, as a fraction of its length: the stencil's
/// coefficients then span at most (1/this)² ≈ 1e18, where a double still separates them
/// from the coarser cells' (thinner cells make the equations numerically meaningless and
/// the iteration stall).
pub const THINNEST_CELL: f64 = 1e-9;

/// Refuse an axis whose cells the arithmetic cannot carry: a length that overflows, a
/// cell whose 1/h² is not a normal double, or one thinner than [`THINNEST_CELL`] of the
/// axis.
fn check_spacing(field: &str, nodes: &[f64]) -> Result<()> {
    let length = nodes[nodes.len() - 1] - nodes[0];
    let widths = nodes.windows(2).map(|w| w[1] - w[0]);
    let thinnest = widths.clone().fold(f64::INFINITY, f64::min);
    let widest = widths.fold(0.0, f64::max);
    let usable = |h: f64| h > 0.0 && (1.0 / (h * h)).is_normal() && (h * h).is_normal();
    if !length.is_finite() || !usable(thinnest) || !usable(widest) {
        return Err(Error::invalid(
            field,
            format!("cells from {thinnest:e} to {widest:e} over a length of {length:e}"),
            "cell widths h must keep h² and 1/h² normal doubles (about 1e-150 < h < 1e150) \
             and the axis length finite",
        ));
    }
    if thinnest < THINNEST_CELL * length {
        return Err(Error::invalid(
            field,
            format!("a cell of width {thinnest:e} on an axis of length {length:e}"),
            format!(
                "cells thinner than {THINNEST_CELL:e} of the axis length make the equations \
                 numerically meaningless (the iteration stalls): merge the breakpoints or \
                 coarsen"
            ),
        ));
    }
    Ok(())
}

/// What holds on a box face: zero normal field (default) or a fixed voltage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Face {
    Voltage(f64),
    Named(FaceKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaceKind {
    ZeroField,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacesConfig {
    pub x_min: Option<Face>,
    pub x_max: Option<Face>,
    pub y_min: Option<Face>,
    pub y_max: Option<Face>,
    pub z_min: Option<Face>,
    pub z_max: Option<Face>,
}

/// The relaxation factor: given, or estimated from the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Omega {
    Given(f64),
    Auto(AutoWord),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoWord {
    Auto,
}

/// A number, or one word: what a face (a voltage or "zero_field") and ω (a factor or
/// "auto") accept; an error says which values are accepted (serde's untagged enums
/// only say that none matched).
struct NumberOr {
    word: &'static str,
    number: &'static str,
}

impl<'de> serde::de::Visitor<'de> for NumberOr {
    type Value = Option<f64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} or \"{}\"", self.number, self.word)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v as f64))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v as f64))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        match v == self.word {
            true => Ok(None),
            false => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
        }
    }
}

impl<'de> Deserialize<'de> for Face {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = d.deserialize_any(NumberOr {
            word: "zero_field",
            number: "a voltage (a number, in volts)",
        })?;
        Ok(v.map_or(Face::Named(FaceKind::ZeroField), Face::Voltage))
    }
}

impl<'de> Deserialize<'de> for Omega {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = d.deserialize_any(NumberOr {
            word: "auto",
            number: "a relaxation factor (a number in [0.1, 2))",
        })?;
        Ok(v.map_or(Omega::Auto(AutoWord::Auto), Omega::Given))
    }
}

/// How a node's SOR step is computed (`electrostatics.update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Update {
    /// The default: the table form where it measured faster on a GPU, meshes of
    /// [`AUTO_TABLE_NODES`] whose distinct stencils fit a GPU's table in the run's
    /// precision; else classic. The choice depends on the problem only, not on the
    /// backend, so CPU and GPU runs take the same update
    /// ([`ElectrostaticsProblem::resolve_update`]; an engine built from an unresolved
    /// problem takes the classic form).
    #[default]
    Auto,
    /// From the node's and its neighbours' εr and the mesh coefficients, every iteration
    /// (the study's form): every engine, any problem.
    Classic,
    /// From a table of each distinct stencil's weights made once (stencil_table.rs): on a
    /// GPU passes of two iterations (the blocked kernel), on the CPU the same arithmetic;
    /// decomposed too (slabs with halos of four planes: two iterations per exchange on
    /// GPUs). On a GPU at most about 5700 distinct stencils in f32, 1500 in f64 (the
    /// table sits in shared memory). V differs from the classic form's in the last bits;
    /// a run tests convergence at even counts only (by default every
    /// [`TABLE_CHECK_EVERY`]).
    Table,
}

impl Update {
    /// The word a problem file gives it.
    pub fn word(self) -> &'static str {
        match self {
            Update::Auto => "auto",
            Update::Classic => "classic",
            Update::Table => "table",
        }
    }
}

/// The node counts for which `update = "auto"` takes the table form: from 2²² nodes
/// (about 161³). Since its passes between convergence tests skip the residual sums it
/// measured 1.24–1.84× the best classic kernel's speed per iteration on the H100 from 161³
/// to 512³ nodes, in f32 and f64, and since its set-up became cheaper than the classic
/// engine's (one upload of V, no host copies of the ids) it is faster end to end there
/// too: set-up, solve, check and download of runs to solution at 162³–192³ on an H200.
/// At 128³ it is 1.2× per iteration in f32 but 0.76× in f64, and the runs to solution
/// there were level or classic (docs/PERFORMANCE.md). Up to 2³⁰ nodes: past that the
/// table form's two buffers of V are the larger cost.
pub const AUTO_TABLE_NODES: std::ops::RangeInclusive<usize> = 1 << 22..=1 << 30;

/// The `[electrostatics]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElectrostaticsConfig {
    pub x: AxisConfig,
    pub y: AxisConfig,
    pub z: AxisConfig,
    /// Volts of electrodes 1, 2, … (`electrode = k` in a shape).
    #[serde(default)]
    pub voltages: Vec<f64>,
    /// εr of dielectrics 1, 2, … (`dielectric = k`; 0 is vacuum).
    #[serde(default)]
    pub permittivities: Vec<f64>,
    #[serde(default)]
    pub shapes: Vec<geometry::ShapeConfig>,
    #[serde(default)]
    pub faces: FacesConfig,
    /// Volume charge density ρ in C/m³: a number (uniform), `{ random = A, seed = S }`
    /// (per node, uniform in [−A, A]) or `{ file = "rho.npy" }` (per node, shape
    /// (Nz+1, Ny+1, Nx+1), float64 or float32).
    #[serde(default)]
    pub charge_density: Option<toml::Value>,
    /// The study's idVolt as a uint8 .npy of the node shape (0 free, k electrode k),
    /// applied before the shapes.
    #[serde(default)]
    pub electrode_ids: Option<PathBuf>,
    /// The study's idEpsr as a uint8 .npy of the node shape (0 vacuum, k dielectric k).
    #[serde(default)]
    pub dielectric_ids: Option<PathBuf>,
    #[serde(default = "auto_omega")]
    pub omega: Omega,
    /// Stop when ‖ΔV‖₂/‖V‖₂ of an iteration is at most this.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    pub max_iterations: i64,
    /// Also solve once per electrode at 1 V (others 0 V): the capacitance matrix.
    #[serde(default)]
    pub capacitance: bool,
    /// "auto" (the default), "classic" or "table" (see [`Update`]).
    #[serde(default)]
    pub update: Update,
    /// Iterations between convergence tests (default: every iteration in the classic
    /// update, [`TABLE_CHECK_EVERY`] in the table form; see
    /// [`ElectrostaticsProblem::check_interval`]).
    #[serde(default)]
    pub check_every: Option<i64>,
}

fn auto_omega() -> Omega {
    Omega::Auto(AutoWord::Auto)
}
fn default_tolerance() -> f64 {
    1e-8
}

/// A run whose stopping test (‖ΔV‖/‖V‖ ≤ tolerance) passed is reported converged only if
/// its true residual ‖b − Av‖/‖b‖ is at most this many times the tolerance (or at most
/// [`RESIDUAL_FLOOR_ULPS`] units of roundoff of the precision, for tolerances below what
/// it can reach): converged SOR runs measure 0.6–40× the tolerance, a stalled one (a tiny
/// ω, cells too thin for the arithmetic) stays near its initial residual.
pub const TRUE_RESIDUAL_FACTOR: f64 = 100.0;

/// The true residual a converged run may keep from roundoff alone, in units of the
/// precision's epsilon.
pub const RESIDUAL_FLOOR_ULPS: f64 = 1e3;

impl ElectrostaticsProblem {
    /// The largest true residual a converged run may have (see [`TRUE_RESIDUAL_FACTOR`]).
    pub fn accepted_true_residual(&self, precision: Precision) -> f64 {
        let eps = match precision {
            Precision::F32 => f32::EPSILON as f64,
            Precision::F64 => f64::EPSILON,
        };
        (TRUE_RESIDUAL_FACTOR * self.tolerance).max(RESIDUAL_FLOOR_ULPS * eps)
    }
}

/// The smallest ω a problem may give.
pub const MIN_OMEGA: f64 = 0.1;

/// A validated electrostatics problem.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ElectrostaticsProblem {
    /// Node coordinates per axis, x, y, z.
    pub nodes: [Vec<f64>; 3],
    pub voltages: Vec<f64>,
    pub permittivities: Vec<f64>,
    pub shapes: Vec<Shape>,
    /// x_min, x_max, y_min, y_max, z_min, z_max.
    pub faces: [Option<f64>; 6],
    pub charge: Charge,
    /// Id arrays from .npy files (paths resolved), applied before the shapes.
    pub electrode_ids: Option<PathBuf>,
    pub dielectric_ids: Option<PathBuf>,
    pub omega: f64,
    /// Whether ω was estimated from the mesh.
    pub omega_auto: bool,
    pub tolerance: f64,
    pub max_iterations: u64,
    pub capacitance: bool,
    pub update: Update,
    /// `check_every` as written (None: the update's default).
    pub check_every: Option<u64>,
}

/// The table form's default interval between convergence tests: its GPU passes without
/// the residual sums ran 6 % (f32) and 18 % (f64) faster at 512³ on the H100, and a run
/// then takes at most 14 iterations past the one that met the tolerance
/// (docs/PERFORMANCE.md).
pub const TABLE_CHECK_EVERY: u64 = 16;

/// The most iterations `check_every` may name.
const MOST_CHECK_EVERY: i64 = 1 << 20;

/// The volume charge density ρ.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Charge {
    None,
    /// ρ in C/m³ at every free node.
    Uniform {
        density: f64,
    },
    /// Per node, uniform in [−amplitude, amplitude] from a counter-based generator:
    /// the same values on every device and thread count.
    Random {
        amplitude: f64,
        seed: u64,
    },
    /// Per node from a .npy of the node shape.
    File {
        path: PathBuf,
    },
}

const CHARGE_FIELD: &str = "electrostatics.charge_density";

/// The largest |ρ| accepted (C/m³): far above any physical density, far below overflow.
const MAX_DENSITY: f64 = 1e30;

fn density(field: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v.abs() <= MAX_DENSITY {
        Ok(v)
    } else {
        Err(Error::invalid(
            field,
            crate::units::num(v),
            format!("must be finite and at most {MAX_DENSITY:e} C/m³ in magnitude"),
        ))
    }
}

impl Charge {
    /// From the value of `charge_density`; `resolve` turns a file name into a path.
    fn parse(v: Option<toml::Value>, resolve: &dyn Fn(&Path) -> PathBuf) -> Result<Self> {
        use toml::Value;
        let number = |v: &Value| v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
        let hint = "give a number (C/m³), { random = A, seed = S } or { file = \"rho.npy\" }";
        Ok(match v {
            None => Charge::None,
            Some(ref x) if number(x).is_some() => {
                match density(CHARGE_FIELD, number(x).unwrap())? {
                    0.0 => Charge::None,
                    d => Charge::Uniform { density: d },
                }
            }
            Some(Value::Table(t)) => {
                let keys: Vec<&str> = t.keys().map(|k| k.as_str()).collect();
                match keys.as_slice() {
                    ["random"] | ["random", "seed"] | ["seed", "random"] => {
                        let field = format!("{CHARGE_FIELD}.random");
                        let a = number(&t["random"]).ok_or_else(|| {
                            Error::invalid(&field, &t["random"], "must be a number")
                        })?;
                        let amplitude = density(&field, a)?;
                        let seed = match t.get("seed") {
                            None => 0,
                            Some(s) => s.as_integer().filter(|&s| s >= 0).ok_or_else(|| {
                                Error::invalid(
                                    &format!("{CHARGE_FIELD}.seed"),
                                    s,
                                    "must be an integer ≥ 0",
                                )
                            })? as u64,
                        };
                        Charge::Random { amplitude, seed }
                    }
                    ["file"] => {
                        let f = t["file"].as_str().ok_or_else(|| {
                            Error::invalid(
                                &format!("{CHARGE_FIELD}.file"),
                                &t["file"],
                                "must be a path",
                            )
                        })?;
                        Charge::File {
                            path: resolve(Path::new(f)),
                        }
                    }
                    _ => {
                        return Err(Error::invalid(
                            CHARGE_FIELD,
                            format!("{{ {} }}", keys.join(", ")),
                            hint,
                        ));
                    }
                }
            }
            Some(other) => return Err(Error::invalid(CHARGE_FIELD, other, hint)),
        })
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Charge::None)
    }
}

pub const FACE_NAMES: [&str; 6] = ["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"];

impl ElectrostaticsConfig {
    /// `resolve(key, path)`: a file named at `key` as a path (relative to the problem
    /// file's folder, see [`crate::problem::Source::path`]).
    pub fn validate(
        self,
        precision: Precision,
        resolve: &dyn Fn(&str, &Path) -> PathBuf,
    ) -> Result<ElectrostaticsProblem> {
        let nodes = [
            self.x.nodes("electrostatics.x")?,
            self.y.nodes("electrostatics.y")?,
            self.z.nodes("electrostatics.z")?,
        ];
        let dims: Vec<usize> = nodes.iter().rev().map(|n| n.len()).collect();
        // V, and the two id arrays of a byte each.
        crate::units::checked_cells("electrostatics mesh", &dims, precision.bytes() + 2)?;
        let most = match precision {
            Precision::F32 => f32::MAX as f64 / 16.0,
            Precision::F64 => f64::MAX / 16.0,
        };
        // What is derived from a voltage must stay finite too: ‖V‖² over every node, and
        // a coefficient (about 1/h² of the thinnest cell) times it in the stencil's sums.
        let nodes_total = dims.iter().map(|&n| n as f64).product::<f64>();
        let thinnest = nodes
            .iter()
            .flat_map(|a| a.windows(2).map(|w| w[1] - w[0]))
            .fold(f64::INFINITY, f64::min);
        let limit = most
            .min((most / nodes_total).sqrt())
            .min(most * thinnest * thinnest / 12.0);
        let too_large = format!(
            "must be finite and at most {} in magnitude for this mesh in {precision} (‖V‖² and \
             the stencil's sums must stay finite)",
            crate::units::num(limit)
        );
        for (k, v) in self.voltages.iter().enumerate() {
            if !(v.is_finite() && v.abs() <= limit) {
                return Err(Error::invalid(
                    &format!("electrostatics.voltages[{k}]"),
                    crate::units::num(*v),
                    too_large,
                ));
            }
        }
        for (k, e) in self.permittivities.iter().enumerate() {
            if !(e.is_finite() && *e > 0.0 && *e <= 1e6) {
                return Err(Error::invalid(
                    &format!("electrostatics.permittivities[{k}]"),
                    crate::units::num(*e),
                    "εr must be finite and in (0, 1e6]",
                ));
            }
        }
        if self.voltages.len() > 200 || self.permittivities.len() > 255 {
            return Err(Error::invalid(
                "electrostatics.voltages",
                self.voltages.len(),
                "at most 200 electrodes and 255 dielectrics (ids are bytes)",
            ));
        }
        let f = &self.faces;
        let faces = [f.x_min, f.x_max, f.y_min, f.y_max, f.z_min, f.z_max].map(|f| match f {
            Some(Face::Voltage(v)) => Some(v),
            _ => None,
        });
        for (name, v) in FACE_NAMES.iter().zip(faces) {
            if let Some(v) = v.filter(|v| !(v.is_finite() && v.abs() <= limit)) {
                return Err(Error::invalid(
                    &format!("electrostatics.faces.{name}"),
                    crate::units::num(v),
                    too_large,
                ));
            }
        }
        let shapes = self
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| s.validate(i, &nodes, self.voltages.len(), self.permittivities.len()))
            .collect::<Result<Vec<_>>>()?;
        if let Some(i) = shapes.iter().position(|s| !s.marks_a_node(&nodes)) {
            return Err(Error::invalid(
                &format!("electrostatics.shapes[{i}]"),
                self.shapes[i].kind.clone(),
                "contains no node of the mesh (smaller than the spacing between nodes there, \
                 or outside the box), so it would be dropped: refine the mesh around it or \
                 enlarge it",
            ));
        }
        let charge = Charge::parse(self.charge_density, &|p| {
            resolve("electrostatics.charge_density.file", p)
        })?;
        let grid = "the mesh's nodes (z, y, x)";
        let shape: Vec<usize> = nodes.iter().rev().map(|n| n.len()).collect();
        if let Charge::File { path } = &charge {
            crate::input::open(
                &format!("{CHARGE_FIELD}.file"),
                path,
                &shape,
                grid,
                crate::input::Kind::Float,
            )?;
        }
        let electrode_ids = self
            .electrode_ids
            .map(|p| resolve("electrostatics.electrode_ids", &p));
        let dielectric_ids = self
            .dielectric_ids
            .map(|p| resolve("electrostatics.dielectric_ids", &p));
        for (field, path) in [
            ("electrostatics.electrode_ids", &electrode_ids),
            ("electrostatics.dielectric_ids", &dielectric_ids),
        ] {
            if let Some(path) = path {
                crate::input::open(field, path, &shape, grid, crate::input::Kind::Byte)?;
            }
        }
        let has_electrode = electrode_ids.is_some()
            || shapes.iter().any(|s| s.electrode.is_some())
            || faces.iter().any(|f| f.is_some());
        if !has_electrode && charge.is_none() {
            return Err(Error::invalid(
                "electrostatics.shapes",
                "no electrode and no charge",
                "nothing to solve: mark a shape `electrode = k`, fix a face's voltage, or give \
                 a charge_density",
            ));
        }
        if !has_electrode {
            return Err(Error::invalid(
                "electrostatics.faces",
                "no fixed voltage anywhere",
                "with zero normal field on every face and no electrode the potential is not \
                 determined: fix at least one face (e.g. faces.z_min = 0.0) or add an electrode",
            ));
        }
        let (omega, omega_auto) = match self.omega {
            Omega::Given(w) if !(MIN_OMEGA..2.0).contains(&w) => {
                return Err(Error::invalid(
                    "electrostatics.omega",
                    crate::units::num(w),
                    format!(
                        "the relaxation factor ω must lie in [{MIN_OMEGA}, 2), or be \"auto\" \
                         (below {MIN_OMEGA} each update is so small that the stopping test on \
                         ‖ΔV‖ passes long before V converges)"
                    ),
                ));
            }
            Omega::Given(w) => (w, false),
            Omega::Auto(_) => (optimal_omega(&nodes, &faces), true),
        };
        if !(self.tolerance.is_finite() && self.tolerance >= 0.0) {
            return Err(Error::invalid(
                "electrostatics.tolerance",
                crate::units::num(self.tolerance),
                "must be finite and ≥ 0",
            ));
        }
        if self.max_iterations < 1 {
            return Err(Error::invalid(
                "electrostatics.max_iterations",
                self.max_iterations,
                "at least 1 iteration",
            ));
        }
        if let Some(k) = self
            .check_every
            .filter(|k| !(1..=MOST_CHECK_EVERY).contains(k))
        {
            return Err(Error::invalid(
                "electrostatics.check_every",
                k,
                format!("iterations between convergence tests: from 1 to {MOST_CHECK_EVERY}"),
            ));
        }
        Ok(ElectrostaticsProblem {
            nodes,
            voltages: self.voltages,
            permittivities: self.permittivities,
            shapes,
            faces,
            charge,
            electrode_ids,
            dielectric_ids,
            omega,
            omega_auto,
            tolerance: self.tolerance,
            max_iterations: self.max_iterations as u64,
            capacitance: self.capacitance,
            update: self.update,
            check_every: self.check_every.map(|k| k as u64),
        })
    }
}

/// ω = 2/(1 + sqrt(1 − ρ²)) with ρ the Jacobi spectral radius of the Laplacian on a
/// uniform mesh of the same node counts and mean spacings h_a (ρ = Σ cos(π/N_a)/h_a² /
/// Σ 1/h_a²), the classical optimum for red-black SOR; an estimate for nonuniform meshes.
/// An axis whose faces both hold zero normal field behaves like one twice as long
/// (its lowest mode is a quarter wave), so it counts 2N cells.
pub fn optimal_omega(nodes: &[Vec<f64>; 3], faces: &[Option<f64>; 6]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (a, n) in nodes.iter().enumerate() {
        let free = faces[2 * a].is_none() && faces[2 * a + 1].is_none();
        let h = (n[n.len() - 1] - n[0]) / (n.len() - 1) as f64;
        let cells = (n.len() - 1) as f64 * if free { 2.0 } else { 1.0 };
        num += (std::f64::consts::PI / cells).cos() / (h * h);
        den += 1.0 / (h * h);
    }
    let rho = num / den;
    2.0 / (1.0 + (1.0 - rho * rho).sqrt())
}

impl ElectrostaticsProblem {
    /// Nodes per axis, x, y, z.
    pub fn counts(&self) -> [usize; 3] {
        [
            self.nodes[0].len(),
            self.nodes[1].len(),
            self.nodes[2].len(),
        ]
    }

    pub fn points(&self) -> usize {
        self.counts().iter().product()
    }

    /// The NumPy shape (z, y, x).
    pub fn shape(&self) -> Vec<usize> {
        let [nx, ny, nz] = self.counts();
        vec![nz, ny, nx]
    }

    /// Node coordinates in the order of [`ElectrostaticsProblem::shape`].
    pub fn coords(&self) -> Vec<Vec<f64>> {
        vec![
            self.nodes[2].clone(),
            self.nodes[1].clone(),
            self.nodes[0].clone(),
        ]
    }

    /// Whether the engines take the table form (an unresolved "auto" takes the classic).
    pub fn is_table(&self) -> bool {
        self.update == Update::Table
    }

    /// This problem in the table form, as its engines run it (whatever its `update`
    /// says, so that they measure and test at the table form's iterations).
    pub fn as_table(&self) -> Self {
        Self {
            update: Update::Table,
            ..self.clone()
        }
    }

    /// Iterations between convergence tests: a run stops at a multiple of this (or at
    /// `max_iterations`). `check_every`, or by default 1 in the classic update and
    /// [`TABLE_CHECK_EVERY`] in the table form, whose GPU passes take two iterations: there
    /// an odd `check_every` counts twice.
    pub fn check_interval(&self) -> u64 {
        match (self.is_table(), self.check_every) {
            (false, k) => k.unwrap_or(1),
            (true, None) => TABLE_CHECK_EVERY,
            (true, Some(k)) if k % 2 == 1 => 2 * k,
            (true, Some(k)) => k,
        }
    }

    /// Whether the run tests convergence after `done` iterations.
    pub fn tests_after(&self, done: u64) -> bool {
        done.is_multiple_of(self.check_interval())
    }

    /// Whether the engines compute the residual of the iteration that ends at `done`:
    /// every iteration in the classic update (its sums cost little); in the table form
    /// where the run tests convergence, and at `max_iterations` (the run's last residual).
    pub fn measures_after(&self, done: u64) -> bool {
        !self.is_table() || self.tests_after(done) || done == self.max_iterations
    }

    /// The tolerance a kernel's stop test applies after `done` iterations: the problem's
    /// where the run tests convergence, else −1, which no residual meets (a non-finite one
    /// still stops the run).
    pub fn tolerance_after(&self, done: u64) -> f64 {
        if self.tests_after(done) {
            self.tolerance
        } else {
            -1.0
        }
    }

    /// This problem with the update a run in `precision` takes on the geometry `g`, and a
    /// line saying why where "auto" chose on a mesh of [`AUTO_TABLE_NODES`] or more; as
    /// written where it names one. Under mpirun every rank must call it (the ranks'
    /// stencils are gathered where each holds only its slab's planes).
    pub fn resolve_update(
        &self,
        g: &Geometry,
        precision: Precision,
    ) -> Result<(Self, Option<String>)> {
        let mut p = self.clone();
        if p.update != Update::Auto {
            return Ok((p, None));
        }
        let nodes = p.points();
        let entries = match AUTO_TABLE_NODES.contains(&nodes) {
            true => Some(stencil_table::count_entries(
                self,
                g,
                cuda_blocked::most_entries(precision),
            )?),
            false => None,
        };
        let (update, why) = auto_update(p.counts(), entries, precision);
        p.update = update;
        let why = match p.is_table() {
            true => why.map(|w| {
                format!(
                    "{w}; it tests convergence every {} iterations (electrostatics.check_every)",
                    p.check_interval()
                )
            }),
            false => why,
        };
        Ok((p, why))
    }
}

/// What `update = "auto"` takes on a mesh of `counts` nodes with the table's entries
/// counted (Some where the mesh is of [`AUTO_TABLE_NODES`]; Err: why it has no table), and
/// why.
fn auto_update(
    counts: [usize; 3],
    entries: Option<std::result::Result<usize, String>>,
    precision: Precision,
) -> (Update, Option<String>) {
    let nodes: usize = counts.iter().product();
    let mesh = format!("{} × {} × {}", counts[0], counts[1], counts[2]);
    let classic = |why: String| {
        let line = format!("update = \"classic\" ({why}; set electrostatics.update to choose)");
        (Update::Classic, Some(line))
    };
    match entries {
        _ if nodes < *AUTO_TABLE_NODES.start() => (Update::Classic, None),
        _ if nodes > *AUTO_TABLE_NODES.end() => classic(format!(
            "a mesh of {mesh} nodes: past {} nodes the table form's two buffers of V cost \
             more than it gains",
            AUTO_TABLE_NODES.end()
        )),
        None => (Update::Classic, None),
        Some(Err(why)) => classic(format!("no stencil table: {why}")),
        Some(Ok(n)) if !cuda_blocked::table_fits(n, precision) => classic(format!(
            "more than the {} distinct stencils a GPU's table holds in {precision}",
            cuda_blocked::most_entries(precision)
        )),
        Some(Ok(n)) => (
            Update::Table,
            Some(format!(
                "update = \"table\" for this mesh of {mesh} nodes and {n} stencils: 1.2–1.8× \
                 faster per iteration than \"classic\" on an H100 (the same scheme, its weights \
                 rounded once; set electrostatics.update to choose)"
            )),
        ),
    }
}

/// A problem file's text as a problem and its geometry (the unit tests' problems).
#[cfg(test)]
pub(crate) fn problem_of(text: &str) -> (ElectrostaticsProblem, Geometry) {
    let p = crate::problem::parse(text, "test", None, &Default::default())
        .unwrap()
        .spec_as::<ElectrostaticsProblem>()
        .unwrap()
        .clone();
    let g = Geometry::build(&p).unwrap();
    (p, g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_per_multiprocessor_leave_every_block_shape_its_registers() {
        use Precision::{F32, F64};
        use SweepKernel::*;
        // The defaults as measured.
        assert_eq!(PerColour.default_min_blocks(F32, (32, 16)), 2);
        assert_eq!(PerColour.default_min_blocks(F32, (64, 2)), 4);
        assert_eq!(PerColour.default_min_blocks(F64, (32, 8)), 3);
        assert_eq!(Persistent.default_min_blocks(F32, (32, 8)), 4);
        assert_eq!(Fused.default_min_blocks(F32, (32, 10)), 2);
        assert_eq!(Fused.default_min_blocks(F64, (32, 10)), 2);
        // Larger blocks: at most 1024 threads (f32) or 768 (f64) per multiprocessor.
        for kernel in [PerColour, Persistent, Fused, Staged] {
            for (bx, by) in [(32, 24), (32, 32), (64, 16), (1024, 1), (32, 1)] {
                for (precision, most) in [(F32, 1024), (F64, 768)] {
                    let m = kernel.default_min_blocks(precision, (bx, by));
                    assert!(m >= 1, "{kernel:?} {bx}x{by}");
                    assert!(
                        m == 1 || m * bx * by <= most,
                        "{kernel:?} {precision} {bx}x{by}: {m} blocks"
                    );
                }
            }
        }
    }

    #[test]
    fn auto_takes_the_table_form_on_large_meshes_whose_table_fits() {
        use Precision::{F32, F64};
        let cube = |n: usize| [n, n, n];
        let fits = |n| Some(Ok(n));
        for (counts, entries, precision, update, says) in [
            // Small meshes (the examples, the 128³ Poisson case): classic, silently.
            (cube(130), fits(200), F64, Update::Classic, false),
            (
                [(1 << 22) - 1, 1, 1],
                fits(200),
                F32,
                Update::Classic,
                false,
            ),
            (cube(161), fits(200), F64, Update::Classic, false),
            ([1 << 22, 1, 1], fits(200), F32, Update::Table, true),
            (cube(162), fits(200), F64, Update::Table, true),
            (cube(256), fits(200), F32, Update::Table, true),
            (cube(512), fits(136), F32, Update::Table, true),
            (cube(512), fits(136), F64, Update::Table, true),
            (cube(1024), fits(136), F32, Update::Table, true),
            ([1025, 1024, 1024], fits(136), F32, Update::Classic, true),
            // Tables a GPU's shared memory does not hold, or none at all.
            (cube(512), fits(3000), F32, Update::Table, true),
            (cube(512), fits(3000), F64, Update::Classic, true),
            (cube(512), fits(20000), F32, Update::Classic, true),
            (
                cube(512),
                Some(Err("too many".into())),
                F32,
                Update::Classic,
                true,
            ),
        ] {
            let (u, why) = auto_update(counts, entries.clone(), precision);
            assert_eq!(u, update, "{counts:?} nodes, {entries:?}, {precision}");
            assert_eq!(
                why.is_some(),
                says,
                "{counts:?} nodes, {entries:?}, {precision}"
            );
        }
        // The limits are the GPU engine's: f32 about 5700 stencils, f64 1560.
        assert!(cuda_blocked::table_fits(5690, F32) && !cuda_blocked::table_fits(5700, F32));
        assert!(cuda_blocked::table_fits(1560, F64) && !cuda_blocked::table_fits(1575, F64));
    }

    #[test]
    fn the_persistent_kernel_is_the_default_only_where_it_was_measured_faster() {
        use Precision::{F32, F64};
        use SweepKernel::{PerColour, Persistent};
        let cube = |n: usize| n * n * n;
        for (precision, nodes, charge, kernel) in [
            (F32, cube(64), false, Persistent),
            (F32, cube(128), false, Persistent),
            (F64, cube(128), false, Persistent),
            (F32, cube(256), false, Persistent),
            // The 128³ Poisson case (a charge per node), 256³ f64, 512³, the examples.
            (F64, cube(130), true, PerColour),
            (F32, cube(128), true, PerColour),
            (F64, cube(256), false, PerColour),
            (F32, cube(512), false, PerColour),
            (F64, cube(49), false, PerColour),
        ] {
            assert_eq!(
                SweepKernel::default_for(precision, nodes, charge),
                kernel,
                "{precision} {nodes} nodes, charge per node {charge}"
            );
        }
    }
}
