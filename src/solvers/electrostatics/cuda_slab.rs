//! A CUDA slab of z-planes for decomposed runs: the one-device engine's per-colour
//! sweep (kernels.cu es_sweep, which copies its colour's free face nodes of the planes it
//! is given too: ES_FACES) on a window with two halo planes each side,
//! so one exchange serves a red-black iteration. Both colours of a plane sit side by side
//! in one buffer (colour 0's rows, then colour 1's), so the halo exchange copies whole
//! planes. An iteration: red over the owned planes and the plane beyond each end (from
//! the halo's black values, as their owner computes them) on the slab's main stream, then
//! black over the planes of each compute call the run makes (the bands neighbours read,
//! then the interior, on two streams: both wait for red, neither writes what the other
//! reads). Fields equal the
//! one-device engine's bit for bit. Each sweep's (res², V²) over the owned planes lands in
//! a ring; es_record adds every slab's in slab order, so every slab stops at the same
//! iteration without the host waiting. Red is one launch over the owned planes and the
//! planes beyond (ES_SUM_RANGE: only the owned planes' nodes count in its sums).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};

use super::cuda::{
    Classes, KERNELS, MAX_PLANES, STOP_CHECK, Split, face_entries_per_thread, face_layers,
    has_free_face_nodes, interior_columns, paired_halves, paired_table, sweep_planes,
    upload_coefficients,
};
use super::{ElectrostaticsProblem, Geometry, Launch, cpu};
use crate::device::cuda::Gpu;
use crate::error::Result;
use crate::parallel::{PARTIAL_STEPS, Partials, Rows, Subdomain, Window, advance_alone, slab_of};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Status};

/// Compute calls per iteration at most (two bands and the interior).
const CALLS: usize = 3;
/// Ring values per iteration: per call, red's (res², V²) (written by call 0 only) and
/// black's.
const PER_STEP: usize = CALLS * 4;
const HISTORY: usize = PARTIAL_STEPS;

pub struct CudaElectrostaticsSlab<T: Real> {
    gpu: Arc<Gpu>,
    p: ElectrostaticsProblem,
    window: Window,
    /// The window's planes; colour c of buffer plane l at shift + l·2·ny·ph + c·ny·ph.
    layout: Split,
    v: CudaSlice<T>,
    code: CudaSlice<u8>,
    /// 2ρ/ε0 per node (interleaved like V) when ρ varies, else a 1-value placeholder.
    qnode: CudaSlice<T>,
    classes: CudaSlice<T>,
    /// Bits per class code (4: both colours' codes in each byte, kernels.cu's ES_CBITS).
    class_bits: u8,
    has_qnode: i32,
    q: T,
    coefficients: Vec<CudaSlice<T>>,
    /// Per compute call (they may run side by side): block partials and ticket.
    scratch: Vec<(CudaSlice<f64>, CudaSlice<u32>)>,
    /// Iteration k's sums at (k mod PARTIAL_STEPS)·PER_STEP (see PER_STEP).
    ring: CudaSlice<f64>,
    /// [iterations done, stop flag (1 converged, 2 non-finite)]
    ctl: CudaSlice<u64>,
    hist: CudaSlice<f64>,
    sweep: CudaFunction,
    record: CudaFunction,
    block: (u32, u32),
    /// Sweep tiles in x and y; planes per tile in z.
    tiles: (u32, u32),
    planes: usize,
    /// Layers of blocks after each sweep's that copy the face nodes its lanes do not
    /// (kernels.cu ES_FACE_LAYERS); 0 where no face node is free.
    face_layers: u32,
    /// Recorded after red: black calls on other streams wait for it.
    red_done: CudaEvent,
    launched: u64,
    calls: usize,
    reported: u64,
}

impl<T: Real> CudaElectrostaticsSlab<T> {
    /// The slab `window` of the problem, from the whole potential `v` after `step`
    /// iterations in `status`.
    pub fn on_window(
        gpu: Arc<Gpu>,
        p: &ElectrostaticsProblem,
        g: &Geometry,
        window: Window,
        v: &[T],
        step: u64,
        status: Status,
    ) -> Result<Self> {
        let [nx, ny, _] = g.counts;
        let plane = nx * ny;
        let layout = Split::new([nx, ny, window.rows], 1, std::mem::size_of::<T>()).interleaved();
        let parity = window.base as usize & 1;
        let qnode = cpu::charge_of_window::<T>(g, &window);
        // V, the class byte and (when ρ varies) the charge term, per layout slot.
        let per_node = std::mem::size_of::<T>() * (1 + qnode.is_some() as usize) + 1;
        gpu.ensure_fits(
            (layout.len() * per_node) as u128,
            "a slab's potential, class bytes and charge density",
        )?;
        let launch = Launch::from_env()?;
        let block = launch.block.unwrap_or_else(|| {
            super::SweepKernel::PerColour.default_block(T::PRECISION, p.points())
        });
        let min_blocks = launch.min_blocks.unwrap_or_else(|| {
            super::SweepKernel::PerColour.default_min_blocks(T::PRECISION, block)
        });
        // The slab's planes only: its class codes, charges and whether its face nodes
        // need the face launches.
        let classes = Classes::of_window(g, &window)?;
        let class_bits = super::cuda::class_bits(
            super::SweepKernel::PerColour,
            launch.class_bits,
            classes.present,
        )?;
        let tiles = (
            interior_columns(nx, 1).div_ceil(block.0 as usize) as u32,
            (ny - 2).div_ceil(block.1 as usize) as u32,
        );
        // The sweeps copy their colour's free face nodes (ES_FACES), as on one device:
        // separate face launches cost about 45 µs of a 512³ f32 iteration there. Layers
        // for red's planes, the most a call sweeps.
        let face_layers = match has_free_face_nodes(g.counts, &classes, window.base as usize) {
            true => face_layers(
                g.counts,
                &super::red_planes(&window, &window.own),
                ((tiles.0 * tiles.1) as usize, (block.0 * block.1) as usize),
                gpu.multiprocessors * min_blocks as usize,
                face_entries_per_thread()?,
            ),
            false => 0,
        };
        let mut defines = layout.defines(block, min_blocks);
        defines.push(("ES_CBITS", class_bits.to_string()));
        defines.push(("ES_SUM_RANGE", "1".into()));
        defines.push(("ES_QNODE", (g.q_node.is_some() as u8).to_string()));
        defines.push(("ES_FACES", ((face_layers > 0) as u8).to_string()));
        defines.push(("ES_FACE_LAYERS", face_layers.max(1).to_string()));
        defines.push(("ES_NX_ODD", (nx % 2).to_string()));
        // Compiled once per colour where the one-device sweep is (the same rule, the same
        // knob KEISAN_ES_COLOUR_T).
        let templated =
            launch.colour_templated_for(super::SweepKernel::PerColour, T::PRECISION, p.points());
        defines.push(("ES_COLOUR_T", (templated as u8).to_string()));
        let sweep = gpu.function(&KERNELS, T::PRECISION, &defines, "es_sweep")?;
        let record = gpu.function(&KERNELS, T::PRECISION, &defines, "es_record")?;
        let planes = launch
            .planes
            .unwrap_or(sweep_planes(
                &gpu,
                &sweep,
                block,
                (tiles.0 * tiles.1) as usize,
                window.own.len(),
            )?)
            .clamp(1, MAX_PLANES);
        let s = &gpu.stream;
        let qnode = match &qnode {
            Some(q) => gpu.upload(&layout.interleave(q, parity))?,
            None => s.alloc_zeros::<T>(1)?,
        };
        let mut code = layout.interleave(&classes.code, parity);
        let table = classes.table::<T>();
        let table = match class_bits {
            // Both colours' 4-bit codes in each half of a plane (each sweep reads its own).
            4 => {
                paired_halves(&mut code[layout.shift..], layout.colour_offset());
                paired_table(&table)
            }
            _ => table,
        };
        let coefficients = upload_coefficients(s, p)?;
        let most = tiles.0 as usize
            * tiles.1 as usize
            * (window.rows.div_ceil(planes) + face_layers as usize);
        let scratch = (0..CALLS)
            .map(|_| Ok((s.alloc_zeros::<f64>(2 * most)?, s.alloc_zeros::<u32>(1)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            v: gpu.upload(&layout.interleave(&slab_of(&window, v, plane), parity))?,
            code: gpu.upload(&code)?,
            qnode,
            classes: s.clone_htod(&table)?,
            class_bits,
            has_qnode: g.q_node.is_some() as i32,
            q: T::lit(g.q_uniform),
            coefficients,
            scratch,
            ring: s.alloc_zeros::<f64>(PARTIAL_STEPS * PER_STEP)?,
            ctl: s.clone_htod(&[step, status.device_flag()])?,
            hist: s.alloc_zeros::<f64>(HISTORY)?,
            red_done: gpu.ctx.new_event(None)?,
            sweep,
            record,
            block,
            tiles,
            planes,
            face_layers,
            layout,
            window,
            launched: step,
            calls: 0,
            reported: step,
            gpu,
            p: p.clone(),
        })
    }

    /// The interior planes (1..nz-1, where the sweeps work) of the grid planes `r`.
    fn interior(&self, r: Range<usize>) -> Range<usize> {
        let (start, nz) = (r.start.max(1), self.p.counts()[2]);
        start..r.end.min(nz - 1).max(start)
    }

    fn address<U>(&self, s: &CudaSlice<U>) -> u64 {
        let (ptr, _sync) = s.device_ptr(&self.gpu.stream);
        ptr
    }

    /// Colour `oe`'s and the other colour's base addresses in an interleaved array of
    /// `bytes`-byte values.
    fn colours(&self, base: u64, oe: usize, bytes: usize) -> (u64, u64) {
        let half = (self.layout.colour_offset() * bytes) as u64;
        let at = |c: usize| base + c as u64 * half;
        (at(oe), at(1 - oe))
    }

    /// Colour `oe`'s nodes on the grid planes `faces`: the interior ones, and the free
    /// face nodes; the (res², V²) sums of the nodes on the planes `counted` into `slot`,
    /// with block partials `scratch`.
    fn launch_sweep(
        &mut self,
        oe: usize,
        faces: Range<usize>,
        counted: Range<usize>,
        slot: u64,
        scratch: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let t = std::mem::size_of::<T>();
        let (vc, vd) = self.colours(self.address(&self.v), oe, t);
        let (cc, cd) = self.colours(self.address(&self.code), oe, 1);
        // 4-bit codes: the other colour's from the same bytes (one stream of codes).
        let cd = if self.class_bits == 4 { cc } else { cd };
        let qc = match self.has_qnode {
            0 => self.address(&self.qnode),
            _ => self.colours(self.address(&self.qnode), oe, t).0,
        };
        let [nx, ny, nz] = self.p.counts().map(|c| c as i32);
        let (ph, chunk) = (self.layout.ph as i32, self.planes as i32);
        let (oe_arg, omega, tol) = (oe as i32, T::lit(self.p.omega), self.p.tolerance);
        let (iteration, hist_len) = (self.launched, HISTORY as u32);
        let planes = self.interior(faces.clone());
        let (kfirst, kend, kbase) = (
            planes.start as i32,
            planes.end as i32,
            self.window.base as i32,
        );
        let (sfirst, send) = (counted.start as i32, counted.end as i32);
        let (ffirst, fend) = (faces.start as i32, faces.end as i32);
        let cfg = LaunchConfig {
            grid_dim: (
                self.tiles.0,
                self.tiles.1,
                planes.len().div_ceil(self.planes).max(1) as u32 + self.face_layers,
            ),
            block_dim: (self.block.0, self.block.1, 1),
            shared_mem_bytes: 0,
        };
        let (partials, ticket) = &mut self.scratch[scratch];
        let mut l = stream.launch_builder(&self.sweep);
        l.arg(&vc).arg(&vd).arg(&cc).arg(&cd).arg(&self.classes);
        l.arg(&qc).arg(&self.has_qnode).arg(&self.q);
        for axis in &self.coefficients {
            l.arg(axis);
        }
        l.arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&ph)
            .arg(&chunk)
            .arg(&oe_arg);
        l.arg(&omega).arg(&tol).arg(&iteration);
        // acc (colour 0's sums of a whole-mesh sweep) is never read when a slot is given.
        l.arg(partials).arg(ticket).arg(&self.ctl).arg(&slot);
        l.arg(&self.hist).arg(&hist_len);
        l.arg(&kfirst).arg(&kend).arg(&kbase).arg(&slot);
        l.arg(&sfirst).arg(&send).arg(&ffirst).arg(&fend);
        // SAFETY: planes kfirst - 1 .. kend + 1 lie in the buffer (red sweeps at most one
        // plane past the owned ones, the buffer holds two halo planes and two more past
        // its top for the prefetches), and so do the face planes ffirst..fend (the swept
        // ones and the mesh's end planes among them); partials hold two values per block;
        // slot is two values.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// Where call `call`'s sums of colour `oe` for the iteration being queued go.
    fn slot(&self, call: usize, oe: usize) -> u64 {
        let at = (self.launched as usize % PARTIAL_STEPS) * PER_STEP + call * 4 + oe * 2;
        self.address(&self.ring) + (at * std::mem::size_of::<f64>()) as u64
    }

    /// Red over the owned planes and one beyond each end (within the mesh), in one
    /// launch; only the owned planes' sums count.
    fn red(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        let own = self.window.own.clone();
        let red = super::red_planes(&self.window, &own);
        let (counted, slot) = (self.interior(own), self.slot(0, 0));
        self.launch_sweep(0, red, counted, slot, 0, stream)?;
        self.red_done.record(stream)?;
        Ok(())
    }
}

impl<T: Real> Engine for CudaElectrostaticsSlab<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let gpu = self.gpu.clone();
        advance_alone(self, &gpu, steps)
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        let ctl = self.gpu.stream.clone_dtoh(&self.ctl)?;
        if ctl[1] != 0 {
            // Iterations queued after the stop changed nothing.
            self.launched = ctl[0];
        }
        Diagnostics::from_device(&self.gpu, ctl[0], ctl[1], &self.hist, &mut self.reported)
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(cpu::field_of(&self.p, "V", data))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        STOP_CHECK
    }
}

impl<T: Real> Subdomain for CudaElectrostaticsSlab<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        2 * self.layout.colour_offset()
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Device {
            gpu: &self.gpu,
            buf: &mut self.v,
            offset: self.layout.shift,
        }
    }
    fn steps_per_exchange(&self) -> u64 {
        1
    }
    /// Red once per iteration (in its first call), then black on `rows`.
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert_eq!(
            steps, 1,
            "an electrostatics slab takes one iteration between exchanges"
        );
        let main = self.gpu.stream.clone();
        let stream = stream.unwrap_or(&main).clone();
        let call = self.calls;
        assert!(call < CALLS, "at most {CALLS} compute calls per iteration");
        self.calls += 1;
        // Red on the slab's main stream, where the interior's black follows it with no
        // event between them (the interior is the pass's longest path); bands on other
        // streams wait for it.
        if call == 0 {
            self.red(&main)?;
        }
        if !Arc::ptr_eq(&stream, &main) {
            stream.wait(&self.red_done)?;
        }
        let (inner, slot) = (self.interior(rows.clone()), self.slot(call, 1));
        self.launch_sweep(1, rows, inner, slot, call, &stream)
    }
    fn commit(&mut self, steps: u64) {
        self.launched += steps;
        self.calls = 0;
    }
    fn owned_row_len(&self) -> usize {
        let [nx, ny, _] = self.p.counts();
        nx * ny
    }
    fn owned(&mut self) -> Result<Vec<T>> {
        let own = self.window.own_in_buffer();
        let (row, shift) = (self.row_len(), self.layout.shift);
        let planes = self
            .gpu
            .download(&self.v.slice(shift + own.start * row..shift + own.end * row))?;
        Ok(self.layout.deinterleave(&planes, self.window.own.start & 1))
    }
    fn partials(&mut self) -> Partials {
        Partials::Device {
            ring: self.address(&self.ring),
            per_step: PER_STEP,
            step: self.launched,
        }
    }
    fn queue_record(
        &mut self,
        sources: &CudaSlice<u64>,
        count: usize,
        ring_steps: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let slab = RecordArgs {
            per_step: PER_STEP,
            tolerance: self.p.tolerance_after(self.launched),
            ctl: &self.ctl,
            hist: &self.hist,
            measured: true,
        };
        queue_es_record(
            &self.record,
            stream,
            sources,
            count,
            ring_steps,
            self.launched - 1,
            &slab,
        )
    }
}

/// What es_record reads of a slab besides the step: its ring's values per step, the
/// tolerance the step is tested against (`ElectrostaticsProblem::tolerance_after`: −1
/// where the run does not test), its ctl and history (HISTORY values), and whether the
/// slabs computed the step's sums.
pub(super) struct RecordArgs<'a> {
    pub per_step: usize,
    pub tolerance: f64,
    pub ctl: &'a CudaSlice<u64>,
    pub hist: &'a CudaSlice<f64>,
    pub measured: bool,
}

/// Queue es_record (`record`) of iteration `k` on `stream`: every slab's sums from the
/// `count` rings of `ring_steps` steps whose addresses `sources` holds.
pub(super) fn queue_es_record(
    record: &CudaFunction,
    stream: &Arc<CudaStream>,
    sources: &CudaSlice<u64>,
    count: usize,
    ring_steps: usize,
    k: u64,
    slab: &RecordArgs,
) -> Result<()> {
    let (count, per_step, ring) = (count as i32, slab.per_step as i32, ring_steps as u32);
    let (hist_len, measured) = (HISTORY as u32, slab.measured as i32);
    let mut l = stream.launch_builder(record);
    l.arg(sources).arg(&count).arg(&per_step).arg(&ring).arg(&k);
    l.arg(&slab.tolerance)
        .arg(slab.ctl)
        .arg(slab.hist)
        .arg(&hist_len)
        .arg(&measured);
    // SAFETY: sources holds `count` addresses of rings of `ring` steps × per_step values;
    // ctl holds 2 counters and hist HISTORY values.
    unsafe { l.launch(LaunchConfig::for_num_elems(1)) }?;
    Ok(())
}
