//! CUDA engine: V and one class byte per node, split by colour (kernels.cu), and the class
//! table stay on the device. By default an iteration is two launches per colour (faces,
//! interior), in place (`SweepKernel::Staged`: the same with the operands staged through
//! shared memory); or (`SweepKernel::Fused`) one fused launch over the interior, both
//! colours in one pass from one buffer of V into the other, between the red and the black
//! face launches (both measured slower on the H100 so far: docs/PERFORMANCE.md). The residual
//! is reduced inside the interior launches and a device-side stop flag lets the host
//! queue many iterations and read a few scalars now and then (as the Jacobi engine does).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;

use super::{ElectrostaticsProblem, Geometry, Launch, SweepKernel, cpu};
use crate::device::cuda::{Gpu, KernelArgs, KernelSource, launch_with_args};
use crate::error::{Error, Result};
use crate::parallel::{Window, slab_of};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Restart};

pub const KERNELS: KernelSource = KernelSource {
    name: "electrostatics/kernels.cu",
    code: include_str!("kernels.cu"),
};

/// Residual history slots on the device; the run loop reads them at least this often.
const HISTORY: usize = 4096;

/// Iterations between the run loop's reads of the stop flag, at most (launched
/// iterations, not the persistent kernel's).
pub(super) const STOP_CHECK: u64 = 64;

/// Whether meshes of at most 16 classes get 4-bit codes without being asked: yes, since
/// they are the faster (512³ f32 on the H100, 2026-11-26: 794 against 831 µs per
/// iteration, docs/PERFORMANCE.md); KEISAN_ES_CLASS_BITS=8 asks for bytes.
const PACK_BY_DEFAULT: bool = true;

/// Bits per class code for `kernel` over a mesh of `classes` classes: 4 (both colours'
/// codes of a compact index in one byte: one byte of codes per node and iteration instead
/// of two, one stream instead of two) for the kernels that read packed codes when the
/// codes fit (and [`PACK_BY_DEFAULT`]), else 8; `asked` (KEISAN_ES_CLASS_BITS) asks for
/// one.
pub(super) fn class_bits(kernel: SweepKernel, asked: Option<u8>, classes: usize) -> Result<u8> {
    let packed = matches!(kernel, SweepKernel::PerColour | SweepKernel::Persistent);
    match asked {
        Some(4) if !packed || classes > 16 => Err(Error::invalid(
            "KEISAN_ES_CLASS_BITS",
            "4",
            format!(
                "4-bit class codes need the per-colour or persistent kernel and at most 16 \
                 classes ({classes} here, kernel {})",
                kernel.name()
            ),
        )),
        Some(bits @ (4 | 8)) => Ok(bits),
        Some(bits) => Err(Error::invalid(
            "KEISAN_ES_CLASS_BITS",
            bits,
            "4 or 8 bits per class code",
        )),
        None => Ok(if PACK_BY_DEFAULT && packed && classes <= 16 {
            4
        } else {
            8
        }),
    }
}

/// Both colours' codes (below 16) at each compact index in one byte: colour 0's in bits
/// 0–3, colour 1's in bits 4–7 (kernels.cu's ES_CBITS 4).
fn paired(c0: &[u8], c1: &[u8]) -> Vec<u8> {
    c0.iter().zip(c1).map(|(&a, &b)| pair(a, b)).collect()
}

fn pair(c0: u8, c1: u8) -> u8 {
    c0 | c1 << 4
}

/// Interleaved planes of codes (a slab's: colour 0's half, then colour 1's, `half` codes
/// each) with both colours' codes of a compact index in one byte, as [`paired`], in both
/// halves.
pub(super) fn paired_halves(planes: &mut [u8], half: usize) {
    for plane in planes.chunks_exact_mut(2 * half) {
        let (a, b) = plane.split_at_mut(half);
        for (x, y) in a.iter_mut().zip(b.iter_mut()) {
            *x = pair(*x, *y);
            *y = *x;
        }
    }
}

/// The class table for [`paired`] codes: 256 entries per colour, entry 256·oe + b the
/// class of colour oe's code in byte b (kernels.cu's ES_TABLE), so the sweeps look codes
/// up from their bytes with no shift or mask. `table`: (εr, held) per class.
pub(super) fn paired_table<T: Copy>(table: &[T]) -> Vec<T> {
    (0..2)
        .flat_map(|oe| (0..256usize).map(move |b| (b >> (4 * oe)) & 15))
        .flat_map(|class| [table[2 * class], table[2 * class + 1]])
        .collect()
}

/// Waves of resident blocks a sweep aims for; the z-chunk per block follows from it
/// (at least MIN_PLANES: a block reads 3 planes before its first update). Fewer waves mean
/// longer chunks, a block's setup and sums spread over more planes, and a longer tail:
/// 512³ f32 on the H100, 30 / 43-45 / 60 / 90 planes (16 / 11 / 8 / 6 waves): 886 / 856 /
/// 866 / 892 µs per iteration (2026-11-26).
const WAVES: usize = 11;
const MIN_PLANES: usize = 16;

/// Blocks per sweep below which chunks get shorter than MIN_PLANES. A tiny mesh is one
/// wave of a few blocks, each walking its planes one after another, so its iteration
/// lasts as long as one block's chunk. The examples (H100, f64, 2026-11-27), per iteration
/// at 16 planes against the best: the microstrip (one tile a plane, 41 planes) 20.6
/// against 12.9 µs at 1 plane; the spheres (24 tiles, 47 planes) 21.1 against 15.9 µs at
/// 3 (4 / 5 / 6 planes: 16.8 / 17.0 / 17.0 µs; 1 plane, 1128 blocks: 29.0 µs).
const SMALL_GRID: usize = 384;

/// Planes of a sweep's chunk at most: its z coefficients sit in a shared table this long
/// (ES_ZCAP in kernels.cu).
pub(super) const MAX_PLANES: usize = 256;

/// The class byte per node: one entry per (held or free, εr) pair present, so a node's
/// update reads one id byte instead of the study's two.
pub(super) struct Classes {
    pub code: Vec<u8>,
    /// The table, padded to 256 entries; `present` of them occur in the mesh.
    pub eps: Vec<f64>,
    pub fixed: Vec<u8>,
    pub present: usize,
}

impl Classes {
    /// (εr, held) per class, as the kernels read the table.
    pub(super) fn table<T: Real>(&self) -> Vec<T> {
        (self.eps.iter().zip(&self.fixed))
            .flat_map(|(&e, &f)| [T::lit(e), T::lit(f as f64)])
            .collect()
    }

    pub fn of(g: &Geometry) -> Result<Self> {
        Self::of_ids(g, &g.id_volt, &g.id_epsr)
    }

    /// The classes of the planes a slab's buffer holds (its code covers those only).
    pub fn of_window(g: &Geometry, window: &Window) -> Result<Self> {
        let plane = g.counts[0] * g.counts[1];
        let volt = slab_of(window, &g.id_volt, plane);
        Self::of_ids(g, &volt, &slab_of(window, &g.id_epsr, plane))
    }

    fn of_ids(g: &Geometry, id_volt: &[u8], id_epsr: &[u8]) -> Result<Self> {
        let key = |v: u8, e: u8| 2 * e as usize + (v != 0) as usize;
        // Classes are numbered in the order the nodes first show them: each plane's
        // first showings, in plane order (a plane per thread: set-up time on large meshes).
        let plane = (g.counts[0] * g.counts[1]).max(1);
        let firsts: Vec<Vec<usize>> = id_volt
            .par_chunks(plane)
            .zip(id_epsr.par_chunks(plane))
            .map(|(volt, eps)| {
                let mut seen = [false; 2 * 256];
                let mut keys = Vec::new();
                for (&v, &e) in volt.iter().zip(eps) {
                    let k = key(v, e);
                    if !seen[k] {
                        seen[k] = true;
                        keys.push(k);
                    }
                }
                keys
            })
            .collect();
        let mut index = vec![u16::MAX; 2 * 256];
        let (mut eps, mut fixed) = (Vec::new(), Vec::new());
        for k in firsts.into_iter().flatten() {
            if index[k] != u16::MAX {
                continue;
            }
            if eps.len() == 256 {
                return Err(Error::invalid(
                    "electrostatics.permittivities",
                    g.epsr.len() - 1,
                    "the CUDA engine holds at most 256 (dielectric, electrode or free) \
                     combinations; use fewer dielectrics or the CPU",
                ));
            }
            index[k] = eps.len() as u16;
            eps.push(g.epsr[k / 2]);
            fixed.push((k % 2) as u8);
        }
        let code: Vec<u8> = id_volt
            .par_iter()
            .zip(id_epsr)
            .map(|(&v, &e)| index[key(v, e)] as u8)
            .collect();
        let present = eps.len();
        eps.resize(256, 1.0);
        fixed.resize(256, 1);
        Ok(Self {
            code,
            eps,
            fixed,
            present,
        })
    }
}

/// Values per row of a colour array (kernels.cu): node nx-1's column and the one past
/// it (a lane beyond the mesh feeds its neighbour's shuffle), rounded to whole 128-byte
/// lines of `bytes`-byte values (rows that start mid-line were measured 8 % slower at
/// 512³ f32).
fn compact_pitch(nx: usize, xoff: usize, bytes: usize) -> usize {
    (((nx - 1 + xoff) >> 1) + 2).next_multiple_of(128 / bytes)
}

/// Compact columns of a row holding interior nodes (threads per row of a sweep).
pub(super) fn interior_columns(nx: usize, xoff: usize) -> usize {
    ((nx - 2 + xoff) >> 1) + 1 - xoff
}

/// One row of nodes into its colours' compact rows: node i goes to colour (i + s) & 1
/// (`a` for 0, `b` for 1) at (i + xoff)/2; s is the row's parity (j + k) & 1.
fn split_row<T: Copy>(src: &[T], s: usize, xoff: usize, a: &mut [T], b: &mut [T]) {
    for (i, &x) in src.iter().enumerate() {
        let to = if (i + s) & 1 == 0 { &mut *a } else { &mut *b };
        to[(i + xoff) / 2] = x;
    }
}

/// The inverse of [`split_row`].
fn merge_row<T: Copy>(dst: &mut [T], s: usize, xoff: usize, a: &[T], b: &[T]) {
    for (i, x) in dst.iter_mut().enumerate() {
        let h = (i + xoff) / 2;
        *x = if (i + s) & 1 == 0 { a[h] } else { b[h] };
    }
}

/// The colour-split layout: node (i, j, k) to array (i + j + k) & 1 at
/// shift + (k·ny + j)·ph + (i + xoff)/2. Each array has nz + 2 planes (the last two pad
/// the sweeps' prefetches). xoff = 1 (the per-colour kernels) pairs the nodes (1, 2),
/// (3, 4), ...: a row's interior then fills ⌈(nx − 2)/2⌉ columns, where xoff = 0 needs
/// one more when nx is even (65 for the 128³ Poisson case's 130 nodes: a third warp per
/// row with one lane at work). Their warps start at column 1, so `shift` puts column 1
/// of every row on a 128-byte line (a warp's row segment one line, not two).
///
/// Interleaved (a slab's buffer, [`Split::interleaved`]): both colours in one array,
/// colour c of plane k at shift + k·2·ny·ph + c·ny·ph, so that a plane is one contiguous
/// row for the halo exchange; the kernels see two arrays of plane stride 2·ny·ph.
pub(super) struct Split {
    counts: [usize; 3],
    pub(super) ph: usize,
    xoff: usize,
    pub(super) shift: usize,
    interleaved: bool,
}

impl Split {
    pub(super) fn new(counts: [usize; 3], xoff: usize, bytes: usize) -> Self {
        Self {
            counts,
            ph: compact_pitch(counts[0], xoff, bytes),
            xoff,
            shift: xoff * (128 / bytes - 1),
            interleaved: false,
        }
    }

    pub(super) fn interleaved(self) -> Self {
        Self {
            interleaved: true,
            ..self
        }
    }

    /// Values from colour 0's array to colour 1's (interleaved) and between planes.
    pub(super) fn colour_offset(&self) -> usize {
        self.counts[1] * self.ph
    }

    fn plane_stride(&self) -> usize {
        self.colour_offset() * (1 + self.interleaved as usize)
    }

    /// Values per array (both colours when interleaved).
    pub(super) fn len(&self) -> usize {
        self.shift + (self.counts[2] + 2) * self.plane_stride()
    }

    /// The kernels' layout defines with the launch's block and blocks per multiprocessor.
    pub(super) fn defines(
        &self,
        block: (u32, u32),
        min_blocks: u32,
    ) -> Vec<(&'static str, String)> {
        vec![
            ("ES_BX", block.0.to_string()),
            ("ES_BY", block.1.to_string()),
            ("ES_MINB", min_blocks.to_string()),
            ("ES_XOFF", self.xoff.to_string()),
            ("ES_SHIFT", self.shift.to_string()),
            ("ES_HJ", self.ph.to_string()),
            ("ES_HK", self.plane_stride().to_string()),
            ("ES_ZCAP", MAX_PLANES.to_string()),
        ]
    }

    /// `data` (whole planes of nodes, x fastest) in the interleaved layout; `parity`: the
    /// grid index of its first plane, mod 2.
    pub(super) fn interleave<T: Copy + Default + Send + Sync>(
        &self,
        data: &[T],
        parity: usize,
    ) -> Vec<T> {
        let [nx, ny, _] = self.counts;
        let (ph, xoff, half) = (self.ph, self.xoff, self.colour_offset());
        let mut out = vec![T::default(); self.len()];
        out[self.shift..]
            .par_chunks_mut(2 * half)
            .zip(data.par_chunks(nx * ny))
            .enumerate()
            .for_each(|(k, (dst, src))| {
                let (a, b) = dst.split_at_mut(half);
                let rows = a.chunks_mut(ph).zip(b.chunks_mut(ph));
                for (j, (row, (a, b))) in src.chunks(nx).zip(rows).enumerate() {
                    split_row(row, (j + k + parity) & 1, xoff, a, b);
                }
            });
        out
    }

    /// Whole interleaved planes (no shift before them) back to nodes, x fastest.
    pub(super) fn deinterleave<T: Copy + Default + Send + Sync>(
        &self,
        planes: &[T],
        parity: usize,
    ) -> Vec<T> {
        let [nx, ny, _] = self.counts;
        let (ph, xoff, half) = (self.ph, self.xoff, self.colour_offset());
        let mut out = vec![T::default(); planes.len() / (2 * half) * nx * ny];
        out.par_chunks_mut(nx * ny)
            .zip(planes.par_chunks(2 * half))
            .enumerate()
            .for_each(|(k, (dst, src))| {
                let (a, b) = src.split_at(half);
                let rows = a.chunks(ph).zip(b.chunks(ph));
                for (j, (row, (a, b))) in dst.chunks_mut(nx).zip(rows).enumerate() {
                    merge_row(row, (j + k + parity) & 1, xoff, a, b);
                }
            });
        out
    }

    fn split<T: Copy + Default + Send + Sync>(&self, data: &[T]) -> [Vec<T>; 2] {
        let [nx, ny, _] = self.counts;
        let (ph, xoff) = (self.ph, self.xoff);
        let mut out = [
            vec![T::default(); self.len()],
            vec![T::default(); self.len()],
        ];
        let [a, b] = &mut out;
        a[self.shift..]
            .par_chunks_mut(ph)
            .zip(b[self.shift..].par_chunks_mut(ph))
            .zip(data.par_chunks(nx))
            .enumerate()
            .for_each(|(r, ((a, b), src))| split_row(src, (r % ny + r / ny) & 1, xoff, a, b));
        out
    }

    fn merge<T: Copy + Default + Send + Sync>(&self, parts: [&[T]; 2]) -> Vec<T> {
        let [nx, ny, nz] = self.counts;
        let (ph, xoff) = (self.ph, self.xoff);
        let mut out = vec![T::default(); nx * ny * nz];
        out.par_chunks_mut(nx)
            .zip(
                parts[0][self.shift..]
                    .par_chunks(ph)
                    .zip(parts[1][self.shift..].par_chunks(ph)),
            )
            .enumerate()
            .for_each(|(r, (dst, (a, b)))| merge_row(dst, (r % ny + r / ny) & 1, xoff, a, b));
        out
    }
}

pub struct CudaElectrostatics<T: Real> {
    gpu: Arc<Gpu>,
    p: ElectrostaticsProblem,
    /// V per buffer and colour (kernels.cu): the fused sweep reads buffer `steps % 2`
    /// and writes the other; the per-colour sweeps work in buffer 0 (buffer 1 is then a
    /// 1-value placeholder).
    v: [[CudaSlice<T>; 2]; 2],
    /// Per colour: the class bytes, and 2ρ/ε0 per node when ρ varies (a 1-value
    /// placeholder otherwise).
    code: [CudaSlice<u8>; 2],
    qnode: [CudaSlice<T>; 2],
    /// (εr, held) per class.
    classes: CudaSlice<T>,
    has_qnode: i32,
    q: T,
    coefficients: Vec<CudaSlice<T>>,
    partials: CudaSlice<f64>,
    ticket: CudaSlice<u32>,
    /// The persistent kernel's grid barrier (arrivals, barriers passed).
    bar: CudaSlice<u32>,
    ctl: CudaSlice<u64>,
    acc: CudaSlice<f64>,
    hist: CudaSlice<f64>,
    sweep: CudaFunction,
    faces: CudaFunction,
    kernel: SweepKernel,
    cfg: LaunchConfig,
    faces_cfg: Option<LaunchConfig>,
    /// The sweep's tiles per axis (its grid, but for the persistent kernel's).
    tiles: (u32, u32, u32),
    layout: Split,
    planes: usize,
    /// Bits per class code in `code` (kernels.cu's ES_CBITS).
    class_bits: u8,
    /// es_sweep launched as a programmatic dependent launch (see `launch_sweep`).
    programmatic: bool,
    launched: u64,
    reported: u64,
}

impl<T: Real> CudaElectrostatics<T> {
    pub fn new(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        g: &Geometry,
        restart: Option<Restart<T>>,
        launch: Launch,
    ) -> Result<Self> {
        let kernel = launch.kernel_for(T::PRECISION, g);
        if kernel == SweepKernel::Blocked {
            return Err(Error::invalid(
                "KEISAN_ES_KERNEL",
                "blocked",
                "the blocked kernel has its own engine (cuda_blocked.rs; electrostatics::engine picks it)",
            ));
        }
        let block = launch
            .block
            .unwrap_or_else(|| kernel.default_block(T::PRECISION, p.points()));
        let min_rows = match kernel {
            SweepKernel::Fused => 3,
            SweepKernel::PerColour
            | SweepKernel::Persistent
            | SweepKernel::Staged
            | SweepKernel::Blocked => 1,
        };
        if !block.0.is_multiple_of(32) || block.1 < min_rows || block.0 * block.1 > 1024 {
            return Err(Error::invalid(
                "KEISAN_ES_BLOCK",
                format!("{}x{}", block.0, block.1),
                format!(
                    "x threads a multiple of 32 (a warp walks one row), at least {min_rows} \
                     rows, at most 1024 threads in all"
                ),
            ));
        }
        if kernel == SweepKernel::Staged {
            // kernels.cu: 6 StagedPlane per warp (184 values and 152 class bytes each) and
            // the class table, in the 48 KB of static shared memory.
            let t = std::mem::size_of::<T>();
            let plane = (184 * t + 152).next_multiple_of(t);
            let warps = (block.0 / 32 * block.1) as usize;
            let most = (48 * 1024 - 512 * t) / (6 * plane);
            if warps > most {
                return Err(Error::invalid(
                    "KEISAN_ES_BLOCK",
                    format!("{}x{}", block.0, block.1),
                    format!(
                        "the staged kernel's shared rings fit at most {most} warps per block \
                         in {}",
                        T::PRECISION
                    ),
                ));
            }
        }
        let [nx, ny, nz] = g.counts;
        // The fused and staged kernels index columns as i/2.
        let xoff = match kernel {
            SweepKernel::PerColour | SweepKernel::Persistent | SweepKernel::Blocked => 1,
            SweepKernel::Fused | SweepKernel::Staged => 0,
        };
        let layout = Split::new(g.counts, xoff, std::mem::size_of::<T>());
        if layout.len() > u32::MAX as usize {
            return Err(Error::invalid(
                "electrostatics mesh",
                format!("{nx}x{ny}x{nz}"),
                "the CUDA engine indexes each colour with 32 bits: at most about 8.5e9 nodes",
            ));
        }
        let qnode = cpu::charge_per_node::<T>(g);
        let per_node = std::mem::size_of::<T>() * (1 + qnode.is_some() as usize) + 1;
        let buffers = match kernel {
            SweepKernel::Fused => 2,
            SweepKernel::PerColour
            | SweepKernel::Persistent
            | SweepKernel::Staged
            | SweepKernel::Blocked => 1,
        };
        gpu.ensure_fits(
            (2 * layout.len() * (per_node + (buffers - 1) * std::mem::size_of::<T>())) as u128,
            "the potential (two buffers with the fused sweep), the class bytes and the \
             charge density",
        )?;
        let min_blocks = launch
            .min_blocks
            .unwrap_or_else(|| kernel.default_min_blocks(T::PRECISION, block));
        // KEISAN_ES_FUSED_UNROLL=4: planes per trip of the fused march (a tuning knob).
        let unroll = crate::tuning::knob("KEISAN_ES_FUSED_UNROLL", "2 or 4", |v| {
            v.parse().ok().filter(|u: &u32| [2, 4].contains(u))
        })?
        .unwrap_or(2);
        // The staged kernel's shared rings exceed 48 KB for some shapes of the others: it
        // is compiled only when used.
        let staged = (kernel == SweepKernel::Staged) as u8;
        let classes = Classes::of(g)?;
        let class_bits = class_bits(kernel, launch.class_bits, classes.present)?;
        let mut defines = layout.defines(block, min_blocks);
        defines.push(("ES_CBITS", class_bits.to_string()));
        defines.push(("ES_FUSED_UNROLL", unroll.to_string()));
        defines.push(("ES_STAGED", staged.to_string()));
        defines.push(("ES_QNODE", (qnode.is_some() as u8).to_string()));
        // The per-colour sweep does its colour's face nodes itself (kernels.cu ES_FACES).
        let free_faces = has_free_face_nodes(g.counts, &classes, 0);
        let sweep_faces = kernel == SweepKernel::PerColour && free_faces;
        defines.push(("ES_FACES", (sweep_faces as u8).to_string()));
        defines.push(("ES_NX_ODD", (nx % 2).to_string()));
        let templated = launch.colour_templated_for(kernel, T::PRECISION, p.points());
        defines.push(("ES_COLOUR_T", (templated as u8).to_string()));
        // Columns holding interior nodes (a thread each), from column xoff. The fused
        // kernel's blocks own 30 pairs per warp and all rows but the first and last.
        let (bx, by) = (block.0 as usize, block.1 as usize);
        let (pairs_per_block, rows_per_block) = match kernel {
            SweepKernel::Fused => (30 * bx / 32, by - 2),
            SweepKernel::PerColour
            | SweepKernel::Persistent
            | SweepKernel::Staged
            | SweepKernel::Blocked => (bx, by),
        };
        let (gx, gy) = (
            interior_columns(nx, xoff).div_ceil(pairs_per_block),
            (ny - 2).div_ceil(rows_per_block),
        );
        let per_thread = face_entries_per_thread()?;
        // The blocks the device surely holds at once: min_blocks per multiprocessor.
        let held = gpu.multiprocessors * min_blocks as usize;
        let face_layers = match sweep_faces {
            true => face_layers(g.counts, &(0..nz), (gx * gy, bx * by), held, per_thread),
            false => 0,
        };
        defines.push(("ES_FACE_LAYERS", face_layers.max(1).to_string()));
        let sweep_name = match kernel {
            SweepKernel::Fused => "es_fused",
            SweepKernel::PerColour | SweepKernel::Blocked => "es_sweep",
            SweepKernel::Persistent => "es_persist",
            SweepKernel::Staged => "es_staged",
        };
        let sweep = gpu.function(&KERNELS, T::PRECISION, &defines, sweep_name)?;
        let faces = gpu.function(&KERNELS, T::PRECISION, &defines, "es_faces")?;
        // KEISAN_ES_PDL=0: the per-colour sweeps as plain launches (a tuning knob).
        let programmatic = crate::tuning::switch("KEISAN_ES_PDL")?.unwrap_or(true);
        let resident = resident_blocks(&gpu, &sweep, block)?;
        let planes = launch
            .planes
            .unwrap_or(default_planes(resident, gx * gy, nz - 2))
            .clamp(1, nz - 2)
            .min(MAX_PLANES);
        let tiles = (gx as u32, gy as u32, (nz - 2).div_ceil(planes) as u32);
        // The persistent kernel: as many blocks as the device holds at once (a cooperative
        // launch refuses more), each taking every such tile in turn.
        let grid_dim = match kernel {
            SweepKernel::Persistent => {
                let all = tiles.0 as usize * tiles.1 as usize * tiles.2 as usize;
                (
                    launch
                        .persistent_blocks
                        .unwrap_or(resident)
                        .min(resident)
                        .min(all) as u32,
                    1,
                    1,
                )
            }
            // The per-colour sweep's last layers of blocks copy face nodes (ES_FACES).
            _ => (tiles.0, tiles.1, tiles.2 + face_layers),
        };
        let cfg = LaunchConfig {
            grid_dim,
            block_dim: (block.0, block.1, 1),
            shared_mem_bytes: 0,
        };
        let faces_cfg = (free_faces && !sweep_faces).then(|| faces_config(g.counts, &(0..nz)));
        let blocks = (cfg.grid_dim.0 * cfg.grid_dim.1 * cfg.grid_dim.2) as usize;
        let s = &gpu.stream;
        let (v0, step, status) = cpu::starting_state(g, restart)?;
        let coefficients = upload_coefficients(s, p)?;
        let flag = status.device_flag();
        let upload = |parts: &[Vec<T>; 2]| -> Result<[CudaSlice<T>; 2]> {
            let [a, b] = parts;
            Ok([gpu.upload(a)?, gpu.upload(b)?])
        };
        let (qnode, has_qnode) = match qnode {
            Some(q) => (upload(&layout.split(&q))?, 1),
            None => ([s.alloc_zeros::<T>(1)?, s.alloc_zeros::<T>(1)?], 0),
        };
        // 4-bit codes: one array for both colours in code[0] (see `codes`).
        let [c0, c1] = layout.split(&classes.code);
        let code = match class_bits {
            4 => [gpu.upload(&paired(&c0, &c1))?, s.alloc_zeros::<u8>(1)?],
            _ => [gpu.upload(&c0)?, gpu.upload(&c1)?],
        };
        // Held nodes are written by no launch, so both buffers start from the same V; the
        // state after `step` iterations lives in buffer step % 2.
        let parts = layout.split(&v0);
        let first = upload(&parts)?;
        let second = match buffers {
            2 => [s.clone_dtod(&first[0])?, s.clone_dtod(&first[1])?],
            _ => [s.alloc_zeros::<T>(1)?, s.alloc_zeros::<T>(1)?],
        };
        let v = [first, second];
        Ok(Self {
            v,
            code,
            classes: s.clone_htod(&match class_bits {
                4 => paired_table(&classes.table::<T>()),
                _ => classes.table::<T>(),
            })?,
            qnode,
            has_qnode,
            q: T::lit(g.q_uniform),
            coefficients,
            // Two values per block; the persistent kernel's four per block and iteration
            // parity.
            partials: s.alloc_zeros::<f64>(8 * blocks)?,
            bar: s.alloc_zeros::<u32>(2)?,
            ticket: s.alloc_zeros::<u32>(1)?,
            ctl: s.clone_htod(&[step, flag])?,
            acc: s.alloc_zeros::<f64>(2)?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            sweep,
            faces,
            kernel,
            cfg,
            faces_cfg,
            tiles,
            layout,
            planes,
            class_bits,
            programmatic,
            launched: step,
            reported: step,
            gpu,
            p: p.clone(),
        })
    }

    /// The sweep's launch as run: grid, block, planes per block, registers, occupancy,
    /// bits per class code.
    pub fn launch_summary(&self) -> Result<String> {
        let threads = self.cfg.block_dim.0 * self.cfg.block_dim.1;
        Ok(format!(
            "grid {:?}, block {:?}, {} planes per block, {} registers/thread, {} blocks/SM, \
             {}-bit class codes",
            self.cfg.grid_dim,
            self.cfg.block_dim,
            self.planes,
            self.sweep.num_regs()?,
            self.sweep
                .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)?,
            self.class_bits
        ))
    }

    /// Bits per class code on the device (4: two codes a byte).
    pub fn class_bits(&self) -> u8 {
        self.class_bits
    }

    /// The face launch of colour `oe`: from the other colour's values in buffer `read`,
    /// into this colour's in buffers `write` (both buffers for the fused sweep's red
    /// faces). `after`: run only once iteration `after` is done (see kernels.cu).
    fn launch_faces(
        &mut self,
        oe: usize,
        read: usize,
        write: [usize; 2],
        after: Option<u64>,
    ) -> Result<()> {
        let Some(cfg) = self.faces_cfg else {
            return Ok(());
        };
        let [nx, ny, nz] = self.p.counts().map(|c| c as i32);
        // Every plane of the whole mesh, whose arrays start at plane 0.
        let (kfirst, kend, kbase) = (0i32, nz, 0i32);
        let after = after.map_or(-1i64, |a| a as i64);
        let oe_arg = oe as i32;
        let v = &self.v;
        let mut l = self.gpu.stream.launch_builder(&self.faces);
        l.arg(&v[write[0]][oe])
            .arg(&v[write[1]][oe])
            .arg(&v[read][1 - oe])
            .arg(codes(&self.code, self.class_bits, oe).0)
            .arg(&self.classes);
        l.arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&kfirst)
            .arg(&kend)
            .arg(&kbase)
            .arg(&oe_arg)
            .arg(&self.ctl)
            .arg(&after);
        // SAFETY: each colour's V and class bytes hold (nz+2)·ny rows of `ph` values in
        // every buffer used; the kernel touches face nodes only.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The scalars every sweep launch passes (kernel argument types), for a launch that
    /// ends after `done` iterations (the stop test's tolerance there).
    fn scalars(&self, done: u64) -> SweepScalars<T> {
        let [nx, ny, nz] = self.p.counts().map(|c| c as i32);
        SweepScalars {
            nx,
            ny,
            nz,
            ph: self.layout.ph as i32,
            planes: self.planes as i32,
            omega: T::lit(self.p.omega),
            tol: self.p.tolerance_after(done),
            hist_len: HISTORY as u32,
        }
    }

    /// One colour's in-place sweep (per-colour kernel), in buffer 0.
    fn launch_sweep(&mut self, oe: i32, iteration: u64) -> Result<()> {
        let k = self.scalars(iteration + 1);
        let s = &self.gpu.stream;
        let own = oe as usize;
        let (cc, cd) = codes(&self.code, self.class_bits, own);
        let (vc, vd) = (&self.v[0][own], &self.v[0][1 - own]);
        let mut a = KernelArgs::default();
        a.slice(vc, s).slice(vd, s).slice(cc, s).slice(cd, s);
        a.slice(&self.classes, s)
            .slice(&self.qnode[own], s)
            .value(&self.has_qnode)
            .value(&self.q);
        for axis in &self.coefficients {
            a.slice(axis, s);
        }
        a.value(&k.nx)
            .value(&k.ny)
            .value(&k.nz)
            .value(&k.ph)
            .value(&k.planes)
            .value(&oe)
            .value(&k.omega)
            .value(&k.tol)
            .value(&iteration);
        a.slice(&self.partials, s)
            .slice(&self.ticket, s)
            .slice(&self.ctl, s);
        a.slice(&self.acc, s)
            .slice(&self.hist, s)
            .value(&k.hist_len);
        // The interior planes of the whole mesh; no slot: the sweep keeps its own books.
        let (kfirst, kend, kbase, slot) = (1i32, k.nz - 1, 0i32, 0u64);
        a.value(&kfirst).value(&kend).value(&kbase).value(&slot);
        // SAFETY: es_sweep's parameters in order. Each colour's V, class bytes and per-node
        // charge (when present) hold (nz+2)·ny rows of `ph` values, the class table 256
        // entries, each coefficient array its axis's nodes, partials two values per block,
        // hist HISTORY values; all live as long as the engine. A programmatic launch:
        // es_sweep reads nothing the previous launch writes before griddepcontrol.wait.
        unsafe { launch_with_args(s, &self.sweep, self.cfg, &a, self.programmatic) }
    }

    /// Both colours' interior in one pass, from buffer `iteration % 2` into the other.
    fn launch_fused(&mut self, iteration: u64) -> Result<()> {
        let k = self.scalars(iteration + 1);
        let c = &self.coefficients;
        let [b0, b1] = &mut self.v;
        let (input, output) = if iteration.is_multiple_of(2) {
            (b0, b1)
        } else {
            (b1, b0)
        };
        let [ro, bo] = output;
        let mut l = self.gpu.stream.launch_builder(&self.sweep);
        l.arg(&input[0]).arg(&input[1]).arg(ro).arg(bo);
        l.arg(&self.code[0])
            .arg(&self.code[1])
            .arg(&self.classes)
            .arg(&self.qnode[0])
            .arg(&self.qnode[1])
            .arg(&self.has_qnode)
            .arg(&self.q);
        for axis in c {
            l.arg(axis);
        }
        l.arg(&k.nx)
            .arg(&k.ny)
            .arg(&k.nz)
            .arg(&k.ph)
            .arg(&k.planes)
            .arg(&k.omega)
            .arg(&k.tol)
            .arg(&iteration);
        l.arg(&mut self.partials)
            .arg(&mut self.ticket)
            .arg(&mut self.ctl);
        l.arg(&mut self.hist).arg(&k.hist_len);
        // SAFETY: as launch_sweep, for both buffers of V; the kernel writes only the
        // output buffer's interior.
        unsafe { l.launch(self.cfg) }?;
        Ok(())
    }

    /// Iterations `launched` .. `launched + steps` in one cooperative launch (es_persist),
    /// in buffer 0; it stops early where the stop flag is set.
    fn launch_persistent(&mut self, steps: u64) -> Result<()> {
        // The kernel tests convergence every `every` iterations itself.
        let k = SweepScalars {
            tol: self.p.tolerance,
            ..self.scalars(0)
        };
        let every = self.p.check_interval() as u32;
        let (tx, ty, tz) = (
            self.tiles.0 as i32,
            self.tiles.1 as i32,
            self.tiles.2 as i32,
        );
        let has_faces = self.faces_cfg.is_some() as i32;
        let (first, last) = (self.launched, self.launched + steps);
        let (c0, c1) = codes(&self.code, self.class_bits, 0);
        let [v0, v1] = &mut self.v[0];
        let mut l = self.gpu.stream.launch_builder(&self.sweep);
        l.arg(v0).arg(v1).arg(c0).arg(c1);
        l.arg(&self.classes)
            .arg(&self.qnode[0])
            .arg(&self.qnode[1])
            .arg(&self.has_qnode)
            .arg(&self.q);
        for axis in &self.coefficients {
            l.arg(axis);
        }
        l.arg(&k.nx).arg(&k.ny).arg(&k.nz).arg(&k.ph).arg(&k.planes);
        l.arg(&tx).arg(&ty).arg(&tz).arg(&has_faces);
        l.arg(&k.omega).arg(&k.tol).arg(&first).arg(&last);
        l.arg(&mut self.partials)
            .arg(&mut self.bar)
            .arg(&mut self.ctl);
        l.arg(&mut self.hist).arg(&k.hist_len).arg(&every);
        // SAFETY: as launch_sweep for both colours; partials hold 8 values per block of
        // the grid, bar 2 zeroed counters; the grid is at most what the device holds at
        // once, which the cooperative launch checks.
        unsafe { l.launch_cooperative(self.cfg) }?;
        Ok(())
    }

    /// The buffer holding the state after the iterations the device has done.
    fn current(&self) -> Result<usize> {
        Ok(match self.kernel {
            SweepKernel::PerColour
            | SweepKernel::Persistent
            | SweepKernel::Staged
            | SweepKernel::Blocked => 0,
            SweepKernel::Fused => (self.gpu.stream.clone_dtoh(&self.ctl)?[0] % 2) as usize,
        })
    }
}

/// What every sweep kernel takes besides buffers: node counts, row pitch, planes per
/// block, ω, the stop tolerance and the history ring's length.
struct SweepScalars<T> {
    nx: i32,
    ny: i32,
    nz: i32,
    ph: i32,
    planes: i32,
    omega: T,
    tol: f64,
    hist_len: u32,
}

/// The arrays of codes of colour `oe` and of the other colour: with 4-bit codes the same
/// array, whose bytes hold both (in code[0]).
fn codes(code: &[CudaSlice<u8>; 2], class_bits: u8, oe: usize) -> (&CudaSlice<u8>, &CudaSlice<u8>) {
    match class_bits {
        4 => (&code[0], &code[0]),
        _ => (&code[oe], &code[1 - oe]),
    }
}

/// The mesh coefficients rxp, rxm, ryp, rym, rzp, rzm (cpu::axis_coefficients) on the
/// device, in the kernels' argument order.
pub(super) fn upload_coefficients<T: Real>(
    s: &Arc<cudarc::driver::CudaStream>,
    p: &ElectrostaticsProblem,
) -> Result<Vec<CudaSlice<T>>> {
    let mut out = Vec::new();
    for axis in &p.nodes {
        let (rp, rm) = cpu::axis_coefficients(axis);
        for r in [rp, rm] {
            let r: Vec<T> = r.iter().map(|&x| T::lit(x)).collect();
            out.push(s.clone_htod(&r)?);
        }
    }
    Ok(out)
}

/// Blocks of `sweep` the device holds at once.
fn resident_blocks(gpu: &Gpu, sweep: &CudaFunction, block: (u32, u32)) -> Result<usize> {
    let per_sm =
        sweep.occupancy_max_active_blocks_per_multiprocessor(block.0 * block.1, 0, None)?;
    Ok(gpu.multiprocessors * (per_sm as usize).max(1))
}

/// Planes per block for a sweep of `planes` planes in tiles of `tiles_xy` blocks per
/// plane: WAVES waves of the `resident` blocks, at least MIN_PLANES (or fewer where that
/// leaves fewer than SMALL_GRID blocks), at most MAX_PLANES.
fn default_planes(resident: usize, tiles_xy: usize, planes: usize) -> usize {
    let planes = planes.max(1);
    let chunks = (WAVES * resident).div_ceil(tiles_xy).clamp(1, planes);
    let floor = MIN_PLANES.min((planes * tiles_xy).div_ceil(SMALL_GRID));
    planes
        .div_ceil(chunks)
        .max(floor)
        .clamp(1, planes)
        .min(MAX_PLANES)
}

/// The default planes per block of `sweep` over `planes` planes (see [`default_planes`]).
pub(super) fn sweep_planes(
    gpu: &Gpu,
    sweep: &CudaFunction,
    block: (u32, u32),
    tiles_xy: usize,
    planes: usize,
) -> Result<usize> {
    Ok(default_planes(
        resident_blocks(gpu, sweep, block)?,
        tiles_xy,
        planes,
    ))
}

/// Layers of `tiles` blocks (blocks per layer, threads per block) after the per-colour
/// sweep's that copy the face nodes the lanes do not (ES_FACES): enough that each thread
/// takes about `per_thread` of es_sweep's [`face_entries`] on the planes `planes`, but no
/// more blocks than the device surely holds at once (`held`), at least one layer. One layer
/// left a small mesh's faces to a few blocks whose threads copy node after node: 87.6 µs
/// per iteration for the microstrip example (73 × 3 × 43 nodes, one block a layer), and
/// 128³ meshes 12 % slower in f64 than with about 4 entries a thread (H100, 2026-11-27).
pub(super) fn face_layers(
    counts: [usize; 3],
    planes: &Range<usize>,
    tiles: (usize, usize),
    held: usize,
    per_thread: usize,
) -> u32 {
    let (blocks, threads) = tiles;
    let wanted = face_entries(counts, planes).div_ceil(blocks * threads * per_thread);
    wanted.min(held / blocks).max(1) as u32
}

/// The entries of kernels.cu's copy_faces on the planes `planes`: max(nx, ny)·max(ny,
/// planes) for each x and y face and each z face among the planes.
fn face_entries(counts: [usize; 3], planes: &Range<usize>) -> usize {
    let [nx, ny, nz] = counts;
    let z_faces = planes.contains(&0) as usize + planes.contains(&(nz - 1)) as usize;
    (4 + z_faces) * nx.max(ny) * ny.max(planes.len())
}

/// Face entries per thread of the face layers: [`FACE_ENTRIES`], or the tuning knob
/// KEISAN_ES_FACE_ENTRIES=N.
pub(super) fn face_entries_per_thread() -> Result<usize> {
    Ok(crate::tuning::at_least("KEISAN_ES_FACE_ENTRIES", 1usize)?.unwrap_or(FACE_ENTRIES))
}

/// Face entries per thread that [`face_layers`] aims at by default. 128³ nodes with free
/// faces (H100, 2026-11-27, per iteration, 1 / 2 / 4 / 8 / 16 entries, one layer): f64
/// 37.0 / 37.0 / 36.2 / 37.5 / 41.5 µs (one layer 41.3), f32 33.9 / 33.2 / 32.2 / 32.2 /
/// 31.5 µs (31.8): a thread per entry costs the f32 sweep more blocks than it saves.
const FACE_ENTRIES: usize = 4;

/// The face launch's grid for the planes `planes`: blockIdx.z the face, (x, y) its two
/// in-plane indices (for the x and y faces the second is the plane, from planes.start;
/// the z faces need ny rows where the range holds one).
pub(super) fn faces_config(counts: [usize; 3], planes: &Range<usize>) -> LaunchConfig {
    let [nx, ny, nz] = counts;
    let z_face = planes.contains(&0) || planes.contains(&(nz - 1));
    let rows = planes.len().max(if z_face { ny } else { 0 });
    LaunchConfig {
        grid_dim: (
            nx.max(ny).div_ceil(32) as u32,
            rows.div_ceil(8).max(1) as u32,
            6,
        ),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    }
}

/// Whether any face node is free (else the face launches have nothing to do), among the
/// planes `c` covers, the first being plane `k0` of a mesh of `counts` nodes.
pub(super) fn has_free_face_nodes(counts: [usize; 3], c: &Classes, k0: usize) -> bool {
    let [nx, ny, nz] = counts;
    (0..c.code.len() / (nx * ny)).any(|l| {
        let k = k0 + l;
        (0..ny).any(|j| {
            let on =
                |i: usize| i == 0 || i == nx - 1 || j == 0 || j == ny - 1 || k == 0 || k == nz - 1;
            (0..nx).any(|i| on(i) && c.fixed[c.code[(l * ny + j) * nx + i] as usize] == 0)
        })
    })
}

impl<T: Real> Engine for CudaElectrostatics<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        if self.kernel == SweepKernel::Persistent {
            self.launch_persistent(steps)?;
            self.launched += steps;
            return Ok(());
        }
        for _ in 0..steps {
            let k = self.launched;
            match self.kernel {
                SweepKernel::PerColour
                | SweepKernel::Persistent
                | SweepKernel::Staged
                | SweepKernel::Blocked => {
                    for oe in 0..2 {
                        self.launch_faces(oe, 0, [0, 0], None)?;
                        self.launch_sweep(oe as i32, k)?;
                    }
                }
                SweepKernel::Fused => {
                    // Red faces from the black input into both buffers (the sweep reads
                    // them from the input, the next iteration from the output), the
                    // interior, then black faces from the new red values.
                    let (input, output) = ((k % 2) as usize, (1 - k % 2) as usize);
                    self.launch_faces(0, input, [input, output], None)?;
                    self.launch_fused(k)?;
                    self.launch_faces(1, output, [output, output], Some(k))?;
                }
            }
            self.launched += 1;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let d = Diagnostics::from_ctl(&self.gpu, &self.ctl, &self.hist, &mut self.reported)?;
        // Launches queued after a stop returned at once: the device count is the truth.
        self.launched = d.steps;
        Ok(d)
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let v = &self.v[self.current()?];
        let a = self.gpu.download(&v[0].as_view())?;
        let b = self.gpu.download(&v[1].as_view())?;
        Ok(cpu::field_of(&self.p, "V", self.layout.merge([&a, &b])))
    }

    fn describe(&self) -> Option<String> {
        let (b, g) = (self.cfg.block_dim, self.cfg.grid_dim);
        Some(format!(
            "{} (blocks of {}×{} threads, {} of them, {} plane{} each, {}-bit class codes)",
            self.kernel.name(),
            b.0,
            b.1,
            g.0 * g.1 * g.2,
            self.planes,
            if self.planes == 1 { "" } else { "s" },
            self.class_bits
        ))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        match self.kernel {
            // Stops inside its launch: nothing queued runs after convergence.
            SweepKernel::Persistent => HISTORY as u64,
            // Launches queued past the converged iteration still cost a few µs each; a
            // check at least every STOP_CHECK iterations bounds that waste (the run loop's
            // chunks would otherwise grow to hundreds) for ~20 µs per check.
            _ => STOP_CHECK,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Classes are numbered in the order the nodes first show them, node by node, as a
    /// serial scan numbers them, though each plane is scanned by its own thread: here a
    /// mesh whose later planes show new classes first and whose first plane shows them in
    /// an order of its own.
    #[test]
    fn classes_are_numbered_in_node_order() {
        let text = r#"
            solver = "electrostatics"
            [electrostatics]
            x = { range = [0.0, 1.0], cells = 12 }
            y = { range = [0.0, 1.0], cells = 9 }
            z = { range = [0.0, 1.0], cells = 14 }
            voltages = [1.0, -1.0]
            permittivities = [4.0, 2.5, 7.0]
            max_iterations = 10
            shapes = [
                { kind = "box", min = [0.5, 0.0, 0.0], max = [1.0, 0.3, 0.2], dielectric = 3 },
                { kind = "box", min = [0.0, 0.0, 0.4], max = [1.0, 1.0, 0.7], dielectric = 1 },
                { kind = "sphere", center = [0.5, 0.5, 0.8], radius = 0.15, electrode = 2 },
                { kind = "box", min = [0.2, 0.6, 0.85], max = [0.4, 0.9, 1.0], dielectric = 2 },
                { kind = "box", min = [0.1, 0.1, 0.5], max = [0.3, 0.3, 0.6], electrode = 1 },
            ]
            faces = { x_min = 0.0 }
        "#;
        let (_, g) = super::super::problem_of(text);
        // The serial numbering.
        let mut index = vec![u16::MAX; 512];
        let (mut eps, mut fixed, mut code) = (Vec::new(), Vec::new(), Vec::new());
        for (&v, &e) in g.id_volt.iter().zip(&g.id_epsr) {
            let k = 2 * e as usize + (v != 0) as usize;
            if index[k] == u16::MAX {
                index[k] = eps.len() as u16;
                eps.push(g.epsr[e as usize]);
                fixed.push((v != 0) as u8);
            }
            code.push(index[k] as u8);
        }
        let c = Classes::of(&g).unwrap();
        assert!(c.present >= 6, "{}", c.present);
        assert_eq!(c.present, eps.len());
        assert_eq!(c.code, code);
        assert_eq!(&c.eps[..c.present], &eps[..]);
        assert_eq!(&c.fixed[..c.present], &fixed[..]);
    }

    #[test]
    fn the_colour_split_puts_each_node_in_its_colour_and_merges_back() {
        for (counts, xoff) in [[5, 4, 3], [6, 5, 4], [7, 3, 6], [34, 5, 3]]
            .into_iter()
            .flat_map(|c| [(c, 0), (c, 1)])
        {
            let [nx, ny, nz] = counts;
            let layout = Split::new(counts, xoff, 4);
            let data: Vec<u32> = (1..=(nx * ny * nz) as u32).collect();
            let parts = layout.split(&data);
            for k in 0..nz {
                for j in 0..ny {
                    for i in 0..nx {
                        let n = (k * ny + j) * nx + i;
                        let at = layout.shift + (k * ny + j) * layout.ph + (i + xoff) / 2;
                        assert_eq!(
                            parts[(i + j + k) & 1][at],
                            data[n],
                            "{counts:?} ({i},{j},{k})"
                        );
                    }
                }
            }
            // Each node lands once: the nonzero entries are exactly the nodes.
            let placed = parts.iter().flatten().filter(|&&x| x != 0).count();
            assert_eq!(placed, data.len());
            assert_eq!(layout.merge([&parts[0], &parts[1]]), data);
        }
    }

    #[test]
    fn interleaved_planes_hold_both_colours_by_grid_parity_and_come_back() {
        for (counts, parity) in [([5, 4, 3], 0), ([6, 5, 4], 1), ([34, 5, 3], 1)] {
            let [nx, ny, nz] = counts;
            let layout = Split::new(counts, 1, 4).interleaved();
            let data: Vec<u32> = (1..=(nx * ny * nz) as u32).collect();
            let buf = layout.interleave(&data, parity);
            let half = ny * layout.ph;
            for k in 0..nz {
                for j in 0..ny {
                    for i in 0..nx {
                        let colour = (i + j + k + parity) & 1;
                        let at = layout.shift
                            + k * 2 * half
                            + colour * half
                            + j * layout.ph
                            + i.div_ceil(2);
                        assert_eq!(
                            buf[at],
                            data[(k * ny + j) * nx + i],
                            "{counts:?} ({i},{j},{k})"
                        );
                    }
                }
            }
            assert_eq!(buf.iter().filter(|&&x| x != 0).count(), data.len());
            let planes = &buf[layout.shift..layout.shift + nz * 2 * half];
            assert_eq!(layout.deinterleave(planes, parity), data);
        }
    }

    #[test]
    fn face_grids_cover_their_planes_and_the_z_faces_only_where_the_range_holds_one() {
        let counts = [40, 30, 100];
        let rows = |r: std::ops::Range<usize>| faces_config(counts, &r).grid_dim.1 as usize * 8;
        // The whole mesh: the x and y faces' planes (100) and the z faces' rows (30).
        assert!(rows(0..100) >= 100);
        // A slab's planes inside the mesh: its planes only.
        assert_eq!(rows(40..52), 16);
        // A range with a z face: that face's ny rows too.
        assert!(rows(0..5) >= 30 && rows(97..100) >= 30);
        for r in [0..100, 40..52, 0..5, 97..100] {
            let c = faces_config(counts, &r);
            assert_eq!((c.grid_dim.0, c.grid_dim.2), (2, 6));
        }
    }

    #[test]
    fn four_bit_codes_hold_both_colours_of_a_compact_index_colour_0_low() {
        assert_eq!(paired(&[1, 15, 0], &[2, 0, 7]), vec![0x21, 0x0f, 0x70]);
        // What kernels.cu's code_at reads back, colour by colour.
        let c0: Vec<u8> = (0..37).map(|n| (n * 7 % 16) as u8).collect();
        let c1: Vec<u8> = (0..37).map(|n| (n * 5 % 16) as u8).collect();
        let both = paired(&c0, &c1);
        // The table's entry for each colour's code from its byte (kernels.cu's code_at).
        let table: Vec<u32> = (0..16).flat_map(|c| [100 + c, c % 2]).collect();
        let paired = paired_table(&table);
        assert_eq!(paired.len(), 2 * 512);
        for (oe, c) in [&c0, &c1].into_iter().enumerate() {
            for (n, &code) in c.iter().enumerate() {
                assert_eq!((both[n] >> (4 * oe)) & 15, code, "colour {oe}, index {n}");
                let entry = 256 * oe + both[n] as usize;
                let class = code as usize;
                assert_eq!(
                    paired[2 * entry..2 * entry + 2],
                    table[2 * class..2 * class + 2],
                    "colour {oe}, index {n}"
                );
            }
        }
    }

    #[test]
    fn a_slabs_halves_both_hold_both_colours_codes() {
        // Two planes of three codes per colour: [c0 | c1] each.
        let mut planes = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        paired_halves(&mut planes, 3);
        let p0 = paired(&[1, 2, 3], &[4, 5, 6]);
        let p1 = paired(&[7, 8, 9], &[10, 11, 12]);
        assert_eq!(planes, [&p0[..], &p0, &p1, &p1].concat());
    }

    #[test]
    fn codes_are_packed_only_where_the_kernel_reads_them_so_and_they_fit() {
        let packs = if PACK_BY_DEFAULT { 4 } else { 8 };
        assert_eq!(class_bits(SweepKernel::PerColour, None, 16).unwrap(), packs);
        assert_eq!(class_bits(SweepKernel::Persistent, None, 3).unwrap(), packs);
        assert_eq!(class_bits(SweepKernel::PerColour, Some(4), 16).unwrap(), 4);
        assert_eq!(class_bits(SweepKernel::PerColour, None, 17).unwrap(), 8);
        assert_eq!(class_bits(SweepKernel::Fused, None, 2).unwrap(), 8);
        assert_eq!(class_bits(SweepKernel::Staged, None, 2).unwrap(), 8);
        assert_eq!(class_bits(SweepKernel::PerColour, Some(8), 2).unwrap(), 8);
        let err = class_bits(SweepKernel::Fused, Some(4), 2).unwrap_err();
        assert!(err.to_string().contains("KEISAN_ES_CLASS_BITS"), "{err}");
        assert!(class_bits(SweepKernel::PerColour, Some(4), 20).is_err());
        assert!(class_bits(SweepKernel::PerColour, Some(2), 2).is_err());
    }

    #[test]
    fn face_layers_give_each_thread_a_few_entries_within_one_wave() {
        // 512³ f32 (256 tiles of 512 threads, 2 blocks on each of 132 multiprocessors):
        // the one layer it had.
        assert_eq!(face_layers([512; 3], &(0..512), (256, 512), 264, 4), 1);
        // 130³ nodes in 64 tiles of 128 threads: 101 400 entries, about 4 a thread.
        assert_eq!(face_entries([130; 3], &(0..130)), 101_400);
        assert_eq!(face_layers([130; 3], &(0..130), (64, 128), 396, 4), 4);
        // The microstrip example: one tile per layer.
        assert_eq!(face_layers([73, 3, 43], &(0..43), (1, 128), 396, 4), 37);
        // Never beyond what the device surely holds at once, never none.
        assert_eq!(face_layers([73, 3, 43], &(0..43), (1, 128), 20, 4), 20);
        assert_eq!(face_layers([3; 3], &(0..3), (1, 128), 396, 4), 1);
        // A slab's planes: the z faces only where the slab holds them.
        assert_eq!(face_entries([9, 7, 20], &(5..10)), 4 * 9 * 7);
        assert_eq!(face_entries([9, 7, 20], &(12..20)), 5 * 9 * 8);
    }

    #[test]
    fn default_planes_make_whole_waves_within_the_table() {
        // Few tiles per plane: many chunks, at least MIN_PLANES planes each.
        assert_eq!(default_planes(528, 512, 510), 43);
        assert_eq!(default_planes(528, 64, 128), MIN_PLANES);
        // Many tiles per plane: one chunk, capped by the shared table.
        assert_eq!(default_planes(528, 100_000, 4094), MAX_PLANES);
        assert_eq!(default_planes(528, 100_000, 3), 3);
        // Tiny meshes: at most about SMALL_GRID blocks, in shorter chunks.
        assert_eq!(default_planes(2112, 1, 41), 1);
        assert_eq!(default_planes(2112, 24, 47), 3);
        assert_eq!(default_planes(2112, 48, 3), 1);
    }

    #[test]
    fn shifted_pairs_need_no_more_columns_and_one_fewer_for_even_rows() {
        for nx in 3..200 {
            let (plain, shifted) = (interior_columns(nx, 0), interior_columns(nx, 1));
            // Columns of the interior nodes 1 ..= nx - 2 under each pairing, counted.
            let count = |xoff: usize| {
                let mut h: Vec<usize> = (1..nx - 1).map(|i| (i + xoff) / 2).collect();
                h.dedup();
                h.len()
            };
            assert_eq!(plain, count(0), "nx {nx}");
            assert_eq!(shifted, count(1), "nx {nx}");
            assert_eq!(shifted, (nx - 2).div_ceil(2), "nx {nx}");
            assert_eq!(plain - shifted, (nx % 2 == 0) as usize, "nx {nx}");
            for xoff in [0, 1] {
                // The last node's column and the one past it fit in a row.
                assert!(compact_pitch(nx, xoff, 8) >= (nx - 1 + xoff) / 2 + 2);
            }
        }
    }
}
