//! Several slab engines driven as one: exchange the halos, let every slab take the steps
//! its halo allows, repeat.
//!
//! Host slabs exchange by copying and then step. Device slabs overlap the exchange with
//! the computation (Oceananigans' interleave_communication_and_computation): each pass
//! first computes the bands of owned rows that neighbours read, then the interior,
//! while each slab's copy stream pulls its halo from its neighbours' bands as soon as
//! they are done. The host only queues work; events order every copy against the
//! kernels around it, so devices run side by side and never wait for the whole
//! neighbour, only for its bands.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

use super::Window;
use super::nccl::{self, Nccl};
use super::trace::PassTrace;
use super::world::{self, World, from_bytes, to_bytes};
use crate::device::Gpu;
use crate::device::{Halo, Placement};
use crate::error::{Error, Result};
use crate::run::{Diagnostics, Engine, Field, Piece, Status};

/// A slab's field buffer (the one the next step reads), where it lives.
pub enum Rows<'a, T> {
    Host(&'a mut [T]),
    /// `offset` values of padding come before buffer row 0.
    Device {
        gpu: &'a Arc<Gpu>,
        buf: &'a mut CudaSlice<T>,
        offset: usize,
    },
}

/// Steps of partial sums a device slab's ring holds (the run loop reads diagnostics at
/// least this often: [`Engine::max_steps_between_diagnostics`]).
pub const PARTIAL_STEPS: usize = 4096;

/// Under mpirun with `--halo auto` (and NCCL ready): the halo block from which a
/// time-stepping solver's halos go by NCCL rather than MPI.
const NCCL_FROM_BYTES: usize = 1 << 20;

/// Steps of sums a staged copy holds per slab: the most steps a pass takes with partial
/// sums (a Jacobi slab's pair).
const STAGED_STEPS: usize = 2;

/// How an iterative solver's per-step sums over a slab (squared residuals) reach the
/// total that decides, alike on every slab and rank, whether the solve stops.
pub enum Partials {
    /// Nothing to combine (a time-stepping solver).
    None,
    /// A host slab: [`Subdomain::take_partial`] after each step, `per_row` sums per
    /// owned row.
    Host { per_row: usize },
    /// A device slab: step k's sums land at device address `ring` + ((k mod
    /// [`PARTIAL_STEPS`])·`per_step` + c) values, c counting the step's compute calls;
    /// `step` steps have been queued.
    Device {
        ring: u64,
        per_step: usize,
        step: u64,
    },
}

/// An engine that computes the owned rows of its [`Window`] from a buffer whose halo
/// rows someone else fills. Between two exchanges it takes either one step or
/// [`Subdomain::steps_per_exchange`] steps (its halo is stale after anything else).
/// Iterative solvers also give per-step partial sums ([`Subdomain::partials`]); the run
/// adds them over all slabs in slab order and hands every slab the same total.
pub trait Subdomain: Engine {
    fn window(&self) -> &Window;
    /// Values per row.
    fn row_len(&self) -> usize;
    fn field(&mut self) -> Rows<'_, Self::Real>;
    /// Steps one exchange of the halo serves.
    fn steps_per_exchange(&self) -> u64;
    /// Steps of the next pass, `left` to go and `every` the most one exchange serves:
    /// `every` while that many are left (a slab whose passes must start at counts that
    /// are multiples of their length takes single steps until they do).
    fn steps_next(&self, left: u64, every: u64) -> u64 {
        if left >= every { every } else { 1 }
    }
    /// A device slab's bands run on its main stream ahead of the interior, not beside it
    /// on a stream of their own (`KEISAN_BANDS` overrides).
    fn bands_first(&self) -> bool {
        false
    }
    /// Told once, before the first pass, that the halos travel by NCCL, whose kernels
    /// share the multiprocessors with the slab's passes while they run.
    fn halos_by_nccl(&mut self) {}
    /// Queue `steps` (1 or [`Subdomain::steps_per_exchange`]) for the owned grid rows
    /// `rows` only, reading the current field and writing the next; a device slab
    /// launches on `stream` when given, else on its device's stream.
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()>;
    /// Every owned row has been computed: the next field becomes the current one.
    fn commit(&mut self, steps: u64);
    /// Values per row of what [`Subdomain::owned`] returns (a slab whose buffer keeps
    /// another layout than the field's says so).
    fn owned_row_len(&self) -> usize {
        self.row_len()
    }
    /// The owned rows, on the host, as the field lays them out.
    fn owned(&mut self) -> Result<Vec<Self::Real>>
    where
        Self: Sized,
    {
        let own = self.window().own_in_buffer();
        read_rows(self, own.start, own.len())
    }
    /// Where this slab's per-step sums go.
    fn partials(&mut self) -> Partials {
        Partials::None
    }
    /// A host slab's sums over the step just computed, `per_row` for each owned row in
    /// row order (each kind added up in row order over all slabs gives what one engine
    /// adds up alone, bit for bit).
    fn take_partial(&mut self) -> Vec<f64> {
        Vec::new()
    }
    /// A host slab: each kind's sum over all slabs of the step just computed.
    fn record_total(&mut self, _totals: &[f64]) {}
    /// False once the solve stopped (converged, non-finite): further steps change nothing.
    fn running(&self) -> bool {
        true
    }
    /// A device slab: queue on `stream` the book-keeping of the step just computed,
    /// adding up, in order, `per_step` values at each of the `count` device addresses in
    /// `sources` (rings of `ring_steps` steps laid out as [`Partials::Device`]).
    fn queue_record(
        &mut self,
        _sources: &CudaSlice<u64>,
        _count: usize,
        _ring_steps: usize,
        _stream: &Arc<CudaStream>,
    ) -> Result<()> {
        Ok(())
    }
}

/// `steps` of a device slab driven alone (its window the whole grid): each computed,
/// committed and recorded from its own sums, which are then the total.
pub fn advance_alone<S: Subdomain>(s: &mut S, gpu: &Gpu, steps: u64) -> Result<()> {
    let Partials::Device { ring, .. } = s.partials() else {
        return Err(Error::Parse(
            "internal: advance_alone drives device slabs only".into(),
        ));
    };
    let me = gpu.stream.clone_htod(&[ring])?;
    for _ in 0..steps {
        let own = s.window().own.clone();
        s.compute(1, own, None)?;
        s.commit(1);
        s.queue_record(&me, 1, PARTIAL_STEPS, &gpu.stream)?;
    }
    Ok(())
}

/// How device slabs' partial sums are combined each step.
struct DeviceTotals {
    per_step: usize,
    /// Per local slab: the addresses its record kernel reads, and, when the sums travel
    /// through the host (other ranks, devices without peer access), where they land.
    sources: Vec<CudaSlice<u64>>,
    staged: Option<Vec<CudaSlice<f64>>>,
    /// Per local slab, recorded after its step's kernels.
    done: Vec<CudaEvent>,
}

/// A device slab's streams and events: the interior on the device's stream, the bands on
/// a high-priority stream beside it (their few blocks go ahead of the interior's, and
/// the device stays full while they run), halo pulls on a stream of their own.
struct DeviceSync {
    ctx: Arc<CudaContext>,
    compute: Arc<CudaStream>,
    bands: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    /// Recorded when a pass may start (its halo pulled, its readers done).
    start: CudaEvent,
    /// Recorded after the bands neighbours read.
    bands_done: CudaEvent,
    /// Recorded after this slab's halo pulls.
    pulled: CudaEvent,
    /// `KEISAN_PASS_TRACE=1`: timed events of each pass (a diagnosis knob).
    trace: Option<PassTrace>,
    /// Recorded on the bands stream before its kernels (`KEISAN_BANDS=gated`).
    gate: CudaEvent,
    bands_mode: BandsMode,
    /// `KEISAN_PULL=kernel`: the copy kernel.
    copier: Option<cudarc::driver::CudaFunction>,
}

/// Where a device slab's bands run (the slab's choice, [`Subdomain::bands_first`];
/// `KEISAN_BANDS`, a diagnosis knob, overrides it).
#[derive(Debug, Clone, Copy, PartialEq)]
enum BandsMode {
    /// On the high-priority stream beside the interior.
    Beside,
    /// The same, the interior launched only once the bands stream reached its kernels.
    Gated,
    /// On the compute stream before the interior.
    First,
}

/// One halo block: `rows` rows from buffer row `from` of slab `src` to buffer row `to` of
/// slab `dst`.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    src: usize,
    from: usize,
    dst: usize,
    to: usize,
    rows: usize,
}

/// Turns the gathered owned rows into the solver's field.
type FieldOf<T> = Box<dyn Fn(Vec<T>) -> Field<T> + Send>;

/// Slabs of one grid, each on its own engine, as one [`Engine`].
pub struct Distributed<S: Subdomain> {
    parts: Vec<S>,
    transfers: Vec<Transfer>,
    every: u64,
    /// The halos hold what the neighbours' owned rows hold now.
    fresh: bool,
    /// Off only while `keisan bench` times the slabs without their exchange.
    exchange_on: bool,
    /// How halo blocks cross between devices of this process.
    pull_by: PullBy,
    /// `--halo nccl`: every halo block by NCCL, in one process and between ranks.
    nccl: Option<Nccl>,
    /// `KEISAN_HOST_TRACE=1` (a diagnosis knob): seconds the host spent queuing device
    /// passes, of them in the pulls' calls, and passes; printed when dropped.
    host_trace: Option<[f64; 3]>,
    /// Per slab: the owned grid rows neighbours read (computed first), and the rest.
    bands: Vec<Vec<Range<usize>>>,
    interior: Vec<Range<usize>>,
    /// Device slabs in one process only.
    sync: Option<Vec<DeviceSync>>,
    /// The run-wide number of each of this process's slabs, and the ranks (mpirun).
    ids: Vec<usize>,
    world: Option<World>,
    /// Rows each slab of the run owns (the gathers' counts).
    own_rows: Vec<usize>,
    field_of: FieldOf<S::Real>,
    /// Iterative solvers: partial sums per owned row combine per step (host slabs).
    per_row: Option<usize>,
    /// Iterative solvers on devices: the sums combine on the devices.
    totals: Option<DeviceTotals>,
    /// Device slabs under mpirun with halos by MPI: a page-locked host block per
    /// transfer this rank sends or receives, made at its first pass.
    staging: Vec<Option<PinnedHostSlice<u8>>>,
}

impl<S: Subdomain> Distributed<S> {
    /// The run's slabs `all` over `placement`: `build(k, window)` makes the engine of
    /// this process's k-th subdomain (its halos filled from the whole field); under
    /// mpirun slab r is rank r's. `field_of` turns the gathered owned rows into the
    /// solver's field.
    pub fn on(
        placement: &Placement,
        all: Vec<Window>,
        mut build: impl FnMut(usize, Window) -> Result<S>,
        field_of: impl Fn(Vec<S::Real>) -> Field<S::Real> + Send + 'static,
    ) -> Result<Self> {
        let ids = placement.ids();
        let parts = (ids.iter().enumerate())
            .map(|(k, &i)| build(k, all[i].clone()))
            .collect::<Result<Vec<_>>>()?;
        let world = placement.world;
        let mut transfers = Vec::new();
        for (dst, window) in all.iter().enumerate() {
            for (to, rows) in window.halos() {
                let src = all
                    .iter()
                    .position(|w| w.own.contains(&rows.start))
                    .filter(|&s| all[s].own.contains(&(rows.end - 1)))
                    .ok_or_else(|| {
                        Error::Parse(format!(
                            "internal: no single slab owns the halo rows {rows:?} of slab {dst}"
                        ))
                    })?;
                let from = all[src].buffer_row(rows.start as isize);
                transfers.push(Transfer {
                    src,
                    from,
                    dst,
                    to,
                    rows: rows.len(),
                });
            }
        }
        let every = parts
            .iter()
            .map(|p| p.steps_per_exchange())
            .min()
            .unwrap_or(1)
            .max(1);
        let mut parts = parts;
        let (bands, interior) = ids
            .iter()
            .map(|&i| split_bands(&all[i], &transfers, i))
            .unzip();
        let first: Vec<bool> = parts.iter().map(|p| p.bands_first()).collect();
        let own_rows = all.iter().map(|w| w.own.len()).collect();
        let pull_by = crate::tuning::knob("KEISAN_PULL", "peer, unified or kernel", |v| match v {
            "peer" => Some(PullBy::Peer),
            "unified" => Some(PullBy::Unified),
            "kernel" => Some(PullBy::Kernel),
            _ => None,
        })?
        .unwrap_or(PullBy::Peer);
        let sync = parts
            .iter_mut()
            .map(|p| match p.field() {
                Rows::Device { gpu, .. } => Some(gpu.clone()),
                Rows::Host(_) => None,
            })
            .collect::<Option<Vec<_>>>()
            .filter(|g| !g.is_empty())
            .map(|gpus| {
                let trace = crate::tuning::switch("KEISAN_PASS_TRACE")?.unwrap_or(false);
                let copy_first = crate::tuning::switch("KEISAN_COPY_FIRST")?.unwrap_or(true);
                let bands_mode =
                    crate::tuning::knob("KEISAN_BANDS", "beside, gated or first", |v| match v {
                        "beside" => Some(BandsMode::Beside),
                        "gated" => Some(BandsMode::Gated),
                        "first" => Some(BandsMode::First),
                        _ => None,
                    })?;
                gpus.iter()
                    .zip(&first)
                    .map(|(g, &first)| -> Result<DeviceSync> {
                        g.ctx.bind_to_thread()?;
                        let (_, greatest) = cudarc::driver::result::stream::get_priority_range()?;
                        Ok(DeviceSync {
                            ctx: g.ctx.clone(),
                            compute: g.stream.clone(),
                            bands: g.ctx.new_stream_with_priority(greatest)?,
                            copy: if copy_first {
                                g.ctx.new_stream_with_priority(greatest)?
                            } else {
                                g.ctx.new_stream()?
                            },
                            start: g.ctx.new_event(None)?,
                            bands_done: g.ctx.new_event(None)?,
                            pulled: g.ctx.new_event(None)?,
                            trace: trace.then(|| PassTrace::new(&g.ctx)).transpose()?,
                            gate: g.ctx.new_event(None)?,
                            bands_mode: bands_mode.unwrap_or(match first {
                                true => BandsMode::First,
                                false => BandsMode::Beside,
                            }),
                            copier: match pull_by {
                                PullBy::Kernel => Some(g.function(
                                    &crate::device::ceilings::KERNELS,
                                    crate::precision::Precision::F64,
                                    &[],
                                    "ceiling_copy",
                                )?),
                                _ => None,
                            },
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        if let (PullBy::Kernel, Some(sync)) = (pull_by, &sync) {
            for a in sync {
                for b in sync {
                    if !Arc::ptr_eq(&a.ctx, &b.ctx)
                        && !crate::device::cuda::peer_access(&a.ctx, &b.ctx)?
                    {
                        return Err(Error::invalid(
                            "KEISAN_PULL",
                            "kernel",
                            "devices whose memory every other device's kernels may read \
                             (peer access); these lack it: use peer or unified",
                        ));
                    }
                }
            }
        }
        let by_nccl = match placement.halo {
            Halo::Nccl => true,
            Halo::Mpi => false,
            // Measured on 2 H200s under mpirun (docs/PERFORMANCE.md): NCCL won by 2.6×
            // for 3D heat's 1.6 MB planes and by 2.2× for electrostatics, and for Jacobi's
            // small rows through its residual sums (no host wait a pass); MPI won by 3 %
            // for advection's rows of 32 KiB.
            Halo::Auto => {
                let row = parts.first().map_or(0, |p| p.row_len()) * size_of::<S::Real>();
                let largest = transfers.iter().map(|t| t.rows * row).max().unwrap_or(0);
                let iterative = parts
                    .first_mut()
                    .is_some_and(|p| matches!(p.partials(), Partials::Device { .. }));
                placement.nccl_ready && (iterative || largest >= NCCL_FROM_BYTES)
            }
        };
        let nccl = match (&sync, by_nccl) {
            (Some(sync), true) => Some(match world {
                Some(w) => Nccl::across_ranks(w, &sync[0].ctx)?,
                None => Nccl::in_process(&sync.iter().map(|s| s.ctx.clone()).collect::<Vec<_>>())?,
            }),
            _ => None,
        };
        if nccl.is_some() {
            for p in &mut parts {
                p.halos_by_nccl();
            }
        }
        if let (Some(n), Some(sync)) = (&nccl, &sync) {
            // NCCL connects two ranks at their first send and receive (long between
            // processes): here, outside the run's time, on halos that already hold their
            // neighbours' rows, so the exchange changes no value.
            let bases: Vec<_> = parts.iter_mut().map(device_base).collect();
            n.exchange(&nccl_blocks(&transfers, &ids, sync, &bases))?;
            for s in sync {
                s.copy.synchronize()?;
            }
        }
        let per_row = match parts.first_mut().map(|p| p.partials()) {
            Some(Partials::Host { per_row }) => Some(per_row),
            _ => None,
        };
        let device_sums = matches!(
            parts.first_mut().map(|p| p.partials()),
            Some(Partials::Device { .. })
        );
        let totals = match (&sync, device_sums) {
            (Some(sync), true) => {
                Some(device_totals(&mut parts, sync, all.len(), world.is_some())?)
            }
            _ => None,
        };
        Ok(Self {
            per_row,
            totals,
            parts,
            transfers,
            every,
            fresh: true,
            exchange_on: true,
            pull_by,
            nccl,
            host_trace: crate::tuning::switch("KEISAN_HOST_TRACE")?
                .unwrap_or(false)
                .then_some([0.0; 3]),
            bands,
            interior,
            sync,
            ids,
            world,
            own_rows,
            field_of: Box::new(field_of),
            staging: Vec::new(),
        })
    }

    /// Under mpirun: fill every halo, sending and receiving blocks between ranks (device
    /// slabs stage them through the host) and copying those within this process.
    fn exchange_world(&mut self) -> Result<()> {
        let local = |id: usize| self.ids.iter().position(|&i| i == id);
        let size = std::mem::size_of::<S::Real>();
        let mut sends = Vec::new();
        let mut receives = Vec::new();
        let mut landing = Vec::new();
        for (k, t) in self.transfers.iter().enumerate() {
            match (local(t.src), local(t.dst)) {
                (Some(s), Some(d)) => {
                    let rows = read_rows(&mut self.parts[s], t.from, t.rows)?;
                    write_rows(&mut self.parts[d], t.to, &rows)?;
                }
                (Some(s), None) => {
                    let rows = read_rows(&mut self.parts[s], t.from, t.rows)?;
                    sends.push((t.dst, k as i32, to_bytes(&rows)));
                }
                (None, Some(d)) => {
                    let n = t.rows * self.parts[d].row_len() * size;
                    receives.push((t.src, k as i32, n));
                    landing.push((d, t.to));
                }
                (None, None) => {}
            }
        }
        let got = world::exchange(&sends, &receives)?;
        for ((d, to), bytes) in landing.into_iter().zip(got) {
            write_rows(&mut self.parts[d], to, &from_bytes::<S::Real>(&bytes))?;
        }
        self.fresh = true;
        Ok(())
    }

    /// One pass of `k` steps on device slabs, the halo pulls overlapped with the interior.
    fn overlapped_pass(&mut self, k: u64) -> Result<()> {
        let sync = self.sync.as_ref().expect("device slabs");
        let ids = &self.ids;
        let local = |id: usize| ids.iter().position(|&i| i == id);
        // A slab reads its halo only once pulled, and overwrites the rows it sent only
        // once its readers have pulled them (events never recorded wait for nothing;
        // rows sent to other ranks were copied out before their pull was recorded).
        for (i, s) in sync.iter().enumerate() {
            s.compute.wait(&s.pulled)?;
            for t in self.transfers.iter().filter(|t| t.src == ids[i]) {
                if let Some(d) = local(t.dst) {
                    s.compute.wait(&sync[d].pulled)?;
                }
            }
            s.start.record(&s.compute)?;
            if let Some(t) = &s.trace {
                t.pass()?.start.record(&s.compute)?;
            }
            s.bands.wait(&s.start)?;
        }
        for (i, s) in sync.iter().enumerate() {
            let stream = match s.bands_mode {
                BandsMode::First => &s.compute,
                _ => &s.bands,
            };
            if s.bands_mode == BandsMode::Gated {
                s.gate.record(&s.bands)?;
            }
            for band in &self.bands[i] {
                self.parts[i].compute(k, band.clone(), Some(stream))?;
            }
            s.bands_done.record(stream)?;
            if let Some(t) = &s.trace {
                t.current().bands.record(stream)?;
            }
        }
        for (i, s) in sync.iter().enumerate() {
            if s.bands_mode == BandsMode::Gated {
                s.compute.wait(&s.gate)?;
            }
            self.parts[i].compute(k, self.interior[i].clone(), None)?;
            if let Some(t) = &s.trace {
                t.current().interior.record(&s.compute)?;
            }
            s.compute.wait(&s.bands_done)?;
            self.parts[i].commit(k);
        }
        // Pull into the new field's halo rows, which no kernel of this pass touches.
        let bases: Vec<_> = self.parts.iter_mut().map(device_base).collect();
        // Blocks to and from other ranks: (transfer, slab, device address, bytes).
        let (mut sends, mut receives) = (Vec::new(), Vec::new());
        for (i, s) in sync.iter().enumerate() {
            s.copy.wait(&s.bands_done)?;
            s.ctx.bind_to_thread()?;
            if self.nccl.is_some() {
                continue; // NCCL pairs each receive with its send: no wait on the sender
            }
            // The bench's pass without its exchange (`exchange_on` false) moves no data
            // but keeps every ordering the pulls impose.
            let on = self.exchange_on;
            for (n, t) in self.transfers.iter().enumerate() {
                let (from_here, to_here) = (local(t.src), local(t.dst));
                let bytes = t.rows * bases[i].1;
                if on && to_here == Some(i) && from_here.is_none() {
                    receives.push((n, i, bases[i].0 + t.to as u64 * bases[i].1 as u64, bytes));
                }
                if on && from_here == Some(i) && to_here.is_none() {
                    sends.push((n, i, bases[i].0 + t.from as u64 * bases[i].1 as u64, bytes));
                }
                let (Some(src), true) = (from_here, to_here == Some(i)) else {
                    continue;
                };
                s.copy.wait(&sync[src].bands_done)?;
                if !on {
                    continue;
                }
                let pulling = std::time::Instant::now();
                pull(sync, &bases, t, src, i, self.pull_by)?;
                if let Some(h) = &mut self.host_trace {
                    h[1] += pulling.elapsed().as_secs_f64();
                }
            }
        }
        if let (Some(nccl), true) = (&self.nccl, self.exchange_on) {
            nccl.exchange(&nccl_blocks(&self.transfers, ids, sync, &bases))?;
        }
        if !sends.is_empty() || !receives.is_empty() {
            self.exchange_staged(&sends, &receives)?;
        }
        let sync = self.sync.as_ref().expect("device slabs");
        for s in sync {
            s.pulled.record(&s.copy)?;
            if let Some(t) = &s.trace {
                t.current().pulled.record(&s.copy)?;
            }
        }
        Ok(())
    }

    /// Device slabs under mpirun: rows for other ranks out to page-locked host blocks
    /// once this pass's bands are done (the copy streams waited for them), the MPI
    /// exchange, the rows received in to the halos; the host blocks here while the
    /// devices go on with the interior. Each block is (transfer, slab, device address,
    /// bytes).
    fn exchange_staged(
        &mut self,
        sends: &[(usize, usize, u64, usize)],
        receives: &[(usize, usize, u64, usize)],
    ) -> Result<()> {
        let sync = self.sync.as_ref().expect("device slabs");
        if self.staging.len() < self.transfers.len() {
            self.staging.resize_with(self.transfers.len(), || None);
        }
        for &(n, i, _, bytes) in sends.iter().chain(receives) {
            if self.staging[n].is_none() {
                // SAFETY: every byte is written (by a copy or a receive) before it is read.
                self.staging[n] =
                    Some(unsafe { sync[i].ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }?);
            }
        }
        for &(n, i, at, _) in sends {
            let s = &sync[i];
            s.ctx.bind_to_thread()?;
            let block = self.staging[n]
                .as_mut()
                .expect("made above")
                .as_mut_slice()?;
            // SAFETY: the range lies inside this slab's live buffer; the copy stream is
            // synchronised before the block is read.
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(block, at, s.copy.cu_stream())?;
            }
        }
        for &(_, i, _, _) in sends {
            sync[i].copy.synchronize()?;
        }
        // Each transfer's block once, sends and receives apart.
        let mut blocks: Vec<Option<&mut PinnedHostSlice<u8>>> =
            self.staging.iter_mut().map(Option::as_mut).collect();
        let mut out = Vec::new();
        for &(n, _, _, _) in sends {
            let b = blocks[n].take().expect("made above").as_mut_slice()?;
            out.push((self.transfers[n].dst, n as i32, &*b));
        }
        let mut into = Vec::new();
        for &(n, _, _, _) in receives {
            let b = blocks[n].take().expect("made above").as_mut_slice()?;
            into.push((self.transfers[n].src, n as i32, b));
        }
        world::exchange_in_place(&out, &mut into)?;
        drop((out, into));
        for &(n, i, to, _) in receives {
            let s = &sync[i];
            s.ctx.bind_to_thread()?;
            let block = self.staging[n].as_ref().expect("made above").as_slice()?;
            // SAFETY: the halo rows lie inside this slab's live buffer; the stream is
            // synchronised before the block is written again.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(to, block, s.copy.cu_stream())?;
            }
        }
        for &(_, i, _, _) in receives {
            sync[i].copy.synchronize()?;
        }
        Ok(())
    }

    /// Host slabs: add up each kind of the step's row sums over every slab in row order
    /// (all ranks' under mpirun) and hand each slab the totals.
    fn combine_on_host(&mut self, per_row: usize) -> Result<()> {
        let mine: Vec<f64> = (self.parts.iter_mut())
            .flat_map(|p| p.take_partial())
            .collect();
        let all = match self.world {
            Some(_) => {
                let counts: Vec<usize> = self.own_rows.iter().map(|r| 8 * per_row * r).collect();
                from_bytes::<f64>(&world::all_gather(&to_bytes(&mine), &counts)?)
            }
            None => mine,
        };
        let totals = row_totals(&all, per_row);
        for p in &mut self.parts {
            p.record_total(&totals);
        }
        Ok(())
    }

    /// Device slabs: each slab's record kernels add up every slab's sums of the pass's
    /// `steps` steps in slab order, straight from their rings (one process, peer access)
    /// or from a copy the host staged (other ranks), once every slab's pass is done.
    fn combine_on_devices(&mut self, steps: u64) -> Result<()> {
        let (Some(sync), Some(t)) = (&self.sync, &mut self.totals) else {
            return Ok(());
        };
        for (s, done) in sync.iter().zip(&t.done) {
            done.record(&s.compute)?;
        }
        let Some(staged) = &mut t.staged else {
            for (i, s) in sync.iter().enumerate() {
                for (j, done) in t.done.iter().enumerate() {
                    if j != i {
                        s.compute.wait(done)?;
                    }
                }
                let count = t.sources[i].len();
                self.parts[i].queue_record(&t.sources[i], count, PARTIAL_STEPS, &s.compute)?;
            }
            return Ok(());
        };
        if let (Some(nccl), Some(w), 1) = (&self.nccl, self.world, sync.len()) {
            // Ranks joined by NCCL: every rank's sums of the pass straight into every
            // rank's staged slots, on the compute streams, with no wait on the host.
            let s = &sync[0];
            let Partials::Device {
                ring,
                per_step,
                step,
            } = self.parts[0].partials()
            else {
                unreachable!("device slabs have device partials");
            };
            let (me, bytes) = (self.ids[0], per_step * 8);
            let (base, _sync) = staged[0].device_ptr(&s.compute);
            let mut blocks = Vec::new();
            for k in step - steps..step {
                let from = ring + ((k as usize % PARTIAL_STEPS) * bytes) as u64;
                let slot = |slab: usize| {
                    base + ((slab * STAGED_STEPS + k as usize % STAGED_STEPS) * bytes) as u64
                };
                // SAFETY: both ranges lie inside live buffers of this slab's device, and
                // the stream orders the copy after the pass that wrote the ring.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        slot(me),
                        from,
                        bytes,
                        s.compute.cu_stream(),
                    )?;
                }
                for peer in (0..w.size).filter(|&r| r != me) {
                    for (at, send) in [(from, true), (slot(peer), false)] {
                        blocks.push(nccl::Block {
                            slab: 0,
                            peer,
                            at,
                            bytes,
                            send,
                            stream: &s.compute,
                        });
                    }
                }
            }
            nccl.exchange(&blocks)?;
            drop(_sync);
            let count = t.sources[0].len();
            return self.parts[0].queue_record(&t.sources[0], count, STAGED_STEPS, &s.compute);
        }
        // Through the host: the pass's sums of every local slab, then every rank's.
        let mut mine = Vec::new();
        let mut first = 0;
        for (i, s) in sync.iter().enumerate() {
            let Partials::Device {
                ring,
                per_step,
                step,
            } = self.parts[i].partials()
            else {
                unreachable!("device slabs have device partials");
            };
            first = step - steps;
            s.ctx.bind_to_thread()?;
            s.compute.synchronize()?;
            for k in first..step {
                let at = ring + ((k as usize % PARTIAL_STEPS) * per_step * 8) as u64;
                let mut v = vec![0.0f64; per_step];
                // SAFETY: the slot lies inside the slab's ring; the stream is synchronised
                // before `v` is read.
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        &mut v[..],
                        at,
                        s.compute.cu_stream(),
                    )?;
                }
                s.compute.synchronize()?;
                mine.extend(v);
            }
        }
        let per_pass = t.per_step * steps as usize;
        let all = match self.world {
            Some(w) => from_bytes::<f64>(&world::all_gather(
                &to_bytes(&mine),
                &vec![8 * per_pass; w.size],
            )?),
            None => mine,
        };
        // Step k's sums at slot k mod STAGED_STEPS of every slab's staged ring, where the
        // record kernels read them.
        let slabs = all.len() / per_pass;
        let mut laid = vec![0.0f64; slabs * STAGED_STEPS * t.per_step];
        for slab in 0..slabs {
            for j in 0..steps as usize {
                let slot = (first as usize + j) % STAGED_STEPS;
                let from = (slab * steps as usize + j) * t.per_step;
                let to = (slab * STAGED_STEPS + slot) * t.per_step;
                laid[to..to + t.per_step].copy_from_slice(&all[from..from + t.per_step]);
            }
        }
        for (i, s) in sync.iter().enumerate() {
            s.compute.memcpy_htod(&laid, &mut staged[i])?;
            let count = t.sources[i].len();
            self.parts[i].queue_record(&t.sources[i], count, STAGED_STEPS, &s.compute)?;
        }
        Ok(())
    }

    /// Host slabs: fill every halo from the slab that owns its rows.
    fn exchange(&mut self) -> Result<()> {
        for t in self.transfers.clone() {
            let (src, dst) = two_mut(&mut self.parts, t.src, t.dst);
            let n = src.row_len();
            let (Rows::Host(a), Rows::Host(b)) = (src.field(), dst.field()) else {
                return Err(Error::Parse(
                    "internal: device slabs exchange in overlapped passes".into(),
                ));
            };
            b[t.to * n..(t.to + t.rows) * n].copy_from_slice(&a[t.from * n..(t.from + t.rows) * n]);
        }
        self.fresh = true;
        Ok(())
    }

    /// The whole field's owned rows in slab order, on every process.
    fn gather(&mut self) -> Result<Vec<S::Real>> {
        let pieces = (self.parts.iter_mut())
            .map(|p| p.owned())
            .collect::<Result<Vec<_>>>()?;
        let mine = concatenated(pieces);
        if self.world.is_none() {
            return Ok(mine);
        }
        let size = std::mem::size_of::<S::Real>();
        let row_bytes = self.parts[0].owned_row_len() * size;
        let counts: Vec<usize> = self.own_rows.iter().map(|r| r * row_bytes).collect();
        Ok(from_bytes(&world::all_gather(&to_bytes(&mine), &counts)?))
    }
}

/// The per-step combination of device slabs' sums: straight from each other's rings when
/// every pair of local slabs shares a device or has peer access, else staged by the host.
fn device_totals<S: Subdomain>(
    parts: &mut [S],
    sync: &[DeviceSync],
    slabs: usize,
    mpi: bool,
) -> Result<DeviceTotals> {
    let mut rings = Vec::new();
    let mut per_step = 0;
    for p in parts.iter_mut() {
        let Partials::Device {
            ring, per_step: n, ..
        } = p.partials()
        else {
            return Err(Error::Parse(
                "internal: a device slab keeps its partial sums on the host".into(),
            ));
        };
        rings.push(ring);
        per_step = n;
    }
    // KEISAN_TOTALS_THROUGH_HOST=1 stages the sums through the host even where the devices
    // could read each other's rings (a diagnosis knob).
    let mut direct = !mpi && std::env::var_os("KEISAN_TOTALS_THROUGH_HOST").is_none();
    for a in sync {
        for b in sync {
            if !Arc::ptr_eq(&a.ctx, &b.ctx) && !crate::device::cuda::peer_access(&a.ctx, &b.ctx)? {
                direct = false;
            }
        }
    }
    let mut sources = Vec::new();
    let mut staged = Vec::new();
    let mut done = Vec::new();
    for s in sync {
        s.ctx.bind_to_thread()?;
        done.push(s.ctx.new_event(None)?);
        if direct {
            sources.push(s.compute.clone_htod(&rings)?);
        } else {
            let buf = s
                .compute
                .alloc_zeros::<f64>(slabs * STAGED_STEPS * per_step)?;
            let (base, _sync) = buf.device_ptr(&s.compute);
            let at: Vec<u64> = (0..slabs)
                .map(|k| base + (k * STAGED_STEPS * per_step * 8) as u64)
                .collect();
            drop(_sync);
            sources.push(s.compute.clone_htod(&at)?);
            staged.push(buf);
        }
    }
    Ok(DeviceTotals {
        per_step,
        sources,
        staged: (!direct).then_some(staged),
        done,
    })
}

/// How a halo block moves between two devices (`KEISAN_PULL`, a diagnosis knob).
#[derive(Debug, Clone, Copy, PartialEq)]
enum PullBy {
    /// cuMemcpyPeerAsync, naming both contexts (the default).
    Peer,
    /// cuMemcpyDtoDAsync on the two unified addresses (peer access is on).
    Unified,
    /// A copy kernel on the receiving device reading the sender's memory, where both
    /// ranges are 16-byte aligned (refused at placement unless every device's memory is
    /// open to every other's kernels).
    Kernel,
}

/// Copy transfer `t` from local device slab `src` into local slab `dst` on `dst`'s copy
/// stream (a peer copy between devices), ordered by the caller's events.
fn pull(
    sync: &[DeviceSync],
    bases: &[(u64, usize)],
    t: &Transfer,
    src: usize,
    dst: usize,
    by: PullBy,
) -> Result<()> {
    let (a, b) = (bases[src], bases[dst]);
    let row = a.1 as u64;
    let bytes = t.rows * a.1;
    let (from, to) = (a.0 + t.from as u64 * row, b.0 + t.to as u64 * row);
    let s = &sync[dst];
    s.ctx.bind_to_thread()?;
    if let (PullBy::Kernel, Some(f)) = (by, &s.copier)
        && (from | to | bytes as u64).is_multiple_of(16)
    {
        use cudarc::driver::{LaunchConfig, PushKernelArg};
        let n = bytes as u64 / 16;
        let blocks = n.div_ceil(1024).clamp(1, 128) as u32;
        let mut l = s.copy.launch_builder(f);
        l.arg(&from).arg(&to).arg(&n);
        // SAFETY: as the copies' below; the kernel reads n 16-byte values at `from` (the
        // sender's memory is open to this device's kernels: checked at placement) and
        // writes them at `to`.
        unsafe {
            l.launch(LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }?;
        return Ok(());
    }
    // SAFETY: both ranges lie inside live buffers of their slabs (halo and owned rows of
    // windows built together); the caller's events order the copy after the kernels that
    // wrote the source and before those that read or overwrite either range.
    unsafe {
        if Arc::ptr_eq(&sync[src].ctx, &s.ctx) || by == PullBy::Unified {
            cudarc::driver::result::memcpy_dtod_async(to, from, bytes, s.copy.cu_stream())?;
        } else {
            cudarc::driver::result::memcpy_peer_async(
                s.ctx.cu_ctx(),
                to,
                sync[src].ctx.cu_ctx(),
                from,
                bytes,
                s.copy.cu_stream(),
            )?;
        }
    }
    Ok(())
}

/// This process's halo blocks for NCCL, in the run's transfer order: a send where the
/// source slab is here, a receive where the destination is, each on its slab's copy
/// stream.
fn nccl_blocks<'a>(
    transfers: &[Transfer],
    ids: &[usize],
    sync: &'a [DeviceSync],
    bases: &[(u64, usize)],
) -> Vec<nccl::Block<'a>> {
    let local = |id: usize| ids.iter().position(|&i| i == id);
    let mut blocks = Vec::new();
    for t in transfers {
        // (this end's slab, the other end's, this end's buffer row, a send)
        for (here, peer, row0, send) in [(t.src, t.dst, t.from, true), (t.dst, t.src, t.to, false)]
        {
            if let Some(i) = local(here) {
                let (base, row) = bases[i];
                blocks.push(nccl::Block {
                    slab: i,
                    peer,
                    at: base + (row0 * row) as u64,
                    bytes: t.rows * row,
                    send,
                    stream: &sync[i].copy,
                });
            }
        }
    }
    blocks
}

/// The owned grid rows of slab `i` that other slabs pull, as disjoint bands in order,
/// and the rows between them (empty when the bands cover the slab).
fn split_bands(w: &Window, transfers: &[Transfer], i: usize) -> (Vec<Range<usize>>, Range<usize>) {
    let to_grid = |l: usize| (w.base + l as isize) as usize;
    let (lo, hi) = (w.own.start, w.own.end);
    let mut below = lo; // rows lo..below are read from below
    let mut above = hi; // rows above..hi are read from above
    for t in transfers.iter().filter(|t| t.src == i) {
        let (a, b) = (to_grid(t.from), to_grid(t.from + t.rows));
        if a == lo {
            below = below.max(b);
        }
        if b == hi {
            above = above.min(a);
        }
    }
    if below >= above {
        return (std::iter::once(lo..hi).collect(), hi..hi);
    }
    let bands = [lo..below, above..hi]
        .into_iter()
        .filter(|r| !r.is_empty())
        .collect();
    (bands, below..above)
}

/// A device slab's buffer: the address of its buffer row 0 and the bytes per row.
fn device_base<S: Subdomain>(p: &mut S) -> (u64, usize) {
    let row = p.row_len() * std::mem::size_of::<S::Real>();
    match p.field() {
        Rows::Device { gpu, buf, offset } => {
            let (ptr, _sync) = buf.device_ptr(&gpu.stream);
            (ptr + (offset * std::mem::size_of::<S::Real>()) as u64, row)
        }
        Rows::Host(_) => unreachable!("device slabs only"),
    }
}

impl<S: Subdomain> Drop for Distributed<S> {
    fn drop(&mut self) {
        // Pulls still in flight read and write the slabs' buffers: let them land first.
        if let Some(sync) = &self.sync {
            for s in sync {
                let _ = s.copy.synchronize();
            }
            self.report_trace();
        }
        if let Some([all, pulls, passes]) = self.host_trace.filter(|h| h[2] > 0.0) {
            crate::say!(
                "host trace: {:.1} µs to queue a pass, {:.1} µs of it in the halo pulls' calls \
                 (mean of {passes} passes)",
                1e6 * all / passes,
                1e6 * pulls / passes
            );
        }
    }
}

impl<S: Subdomain> Distributed<S> {
    /// Seconds the host has waited to read the pass traces' times, over every slab.
    fn trace_waits(&self) -> f64 {
        let sync = self.sync.iter().flatten();
        sync.filter_map(|s| s.trace.as_ref())
            .map(|t| t.waited.get())
            .sum()
    }

    /// `KEISAN_PASS_TRACE=1`: each slab's pass times so far, then afresh (once every pass
    /// queued has ended).
    fn report_trace(&self) {
        let Some(sync) = &self.sync else { return };
        if sync.iter().all(|s| s.trace.is_none()) {
            return;
        }
        let what = match self.exchange_on {
            true => "",
            false => " (exchange off)",
        };
        for (s, id) in sync.iter().zip(&self.ids) {
            let _ = s.compute.synchronize();
            if let Some(t) = &s.trace {
                t.report(*id, what);
            }
        }
    }
}

/// The pieces one after another: the one piece itself, else one allocation filled by all
/// threads (extending a vector piece by piece copied each piece once more on one thread
/// as it grew: two slabs of contest 5 came to the host in 0.48 s against 0.05 s for one).
fn concatenated<T: crate::precision::Real>(mut pieces: Vec<Vec<T>>) -> Vec<T> {
    if pieces.len() == 1 {
        return pieces.pop().expect("one piece");
    }
    let mut out = vec![T::zero(); pieces.iter().map(Vec::len).sum()];
    let mut rest = &mut out[..];
    for piece in &pieces {
        let (head, tail) = rest.split_at_mut(piece.len());
        crate::memory::par_copy(head, piece);
        rest = tail;
    }
    out
}

/// Rows `from..from + rows` of a slab's buffer, on the host.
fn read_rows<S: Subdomain>(p: &mut S, from: usize, rows: usize) -> Result<Vec<S::Real>> {
    let n = p.row_len();
    Ok(match p.field() {
        Rows::Host(b) => b[from * n..(from + rows) * n].to_vec(),
        Rows::Device { gpu, buf, offset } => {
            let at = offset + from * n;
            gpu.download(&buf.slice(at..at + rows * n))?
        }
    })
}

/// Write `values` into a slab's buffer from row `to`.
fn write_rows<S: Subdomain>(p: &mut S, to: usize, values: &[S::Real]) -> Result<()> {
    let n = p.row_len();
    match p.field() {
        Rows::Host(b) => b[to * n..to * n + values.len()].copy_from_slice(values),
        Rows::Device { gpu, buf, offset } => {
            let at = offset + to * n;
            gpu.stream
                .memcpy_htod(values, &mut buf.slice_mut(at..at + values.len()))?;
        }
    }
    Ok(())
}

/// Each kind's total of row sums laid out `per_row` per row ([`Subdomain::take_partial`]),
/// added in row order: what one engine alone and every slab of a decomposed run record.
pub fn row_totals(sums: &[f64], per_row: usize) -> Vec<f64> {
    (0..per_row)
        .map(|c| sums.iter().skip(c).step_by(per_row).sum())
        .collect()
}

/// Mutable borrows of two different elements.
fn two_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "a slab never sends to itself");
    if a < b {
        let (lo, hi) = v.split_at_mut(b);
        (&mut lo[a], &mut hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(a);
        (&mut hi[0], &mut lo[b])
    }
}

impl<S: Subdomain> Engine for Distributed<S> {
    type Real = S::Real;

    fn advance(&mut self, steps: u64) -> Result<()> {
        let mut left = steps;
        while left > 0 {
            let k = self.parts[0].steps_next(left, self.every);
            if self.sync.is_some() {
                let (queued, waited) = (std::time::Instant::now(), self.trace_waits());
                if let Some(h) = &mut self.host_trace {
                    h[2] += 1.0;
                }
                self.overlapped_pass(k)?;
                if self.totals.is_some() {
                    self.combine_on_devices(k)?;
                }
                // The host's own time: its waits to read the pass traces' times left out.
                let host = queued.elapsed().as_secs_f64() - (self.trace_waits() - waited);
                if let Some(t) = self.sync.as_ref().and_then(|s| s[0].trace.as_ref()) {
                    t.host_time(host, 1);
                }
                if let Some(h) = &mut self.host_trace {
                    h[0] += host;
                }
            } else {
                if self.per_row.is_some() && !self.parts.iter().all(|p| p.running()) {
                    break;
                }
                // Host slabs.
                if !self.fresh && self.exchange_on {
                    match self.world {
                        Some(_) => self.exchange_world()?,
                        None => self.exchange()?,
                    }
                }
                for p in &mut self.parts {
                    p.compute(k, p.window().own.clone(), None)?;
                    p.commit(k);
                }
                self.fresh = false;
                if let Some(per_row) = self.per_row {
                    self.combine_on_host(per_row)?;
                }
            }
            left -= k;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        if let Some(sync) = &self.sync {
            for s in sync {
                s.copy.synchronize()?;
            }
        }
        // Running slabs agree on the step; a slab that stopped (a non-finite value) ends
        // the run at the earliest step any slab stopped at.
        let mut running = None;
        let mut stopped: Option<(u64, Status)> = None;
        let mut residuals = None;
        for p in &mut self.parts {
            let d = p.diagnostics()?;
            if self.per_row.is_none() && self.totals.is_none() && !d.new_residuals.is_empty() {
                return Err(Error::Parse(
                    "internal: a decomposed engine reported residuals the slabs do not combine"
                        .into(),
                ));
            }
            // Every slab recorded the same totals: one copy is the run's.
            residuals.get_or_insert(d.new_residuals);
            if d.status == Status::Running {
                if *running.get_or_insert(d.steps) != d.steps {
                    return Err(Error::Parse("internal: slabs disagree on the step".into()));
                }
            } else if stopped.is_none_or(|(s, _)| d.steps < s) {
                stopped = Some((d.steps, d.status));
            }
        }
        let (mut steps, mut status) = stopped.unwrap_or((running.unwrap_or(0), Status::Running));
        if let Some(w) = self.world {
            // Every rank decides alike: the earliest stop of any rank, else the step.
            let mine = [steps, status.device_flag()];
            let all = from_bytes::<u64>(&world::all_gather(&to_bytes(&mine), &vec![16; w.size])?);
            let stops = all.chunks(2).filter(|r| r[1] != 0).min_by_key(|r| r[0]);
            if let Some(r) = stops {
                (steps, status) = (r[0], Status::from_device_flag(r[1]));
            }
        }
        Ok(Diagnostics {
            steps,
            new_residuals: residuals.unwrap_or_default(),
            status,
        })
    }

    fn snapshot(&mut self) -> Result<Field<Self::Real>> {
        let all = self.gather()?;
        Ok((self.field_of)(all))
    }

    fn piece(&mut self) -> Result<Option<Piece<Self::Real>>> {
        let Some(w) = self.world else {
            return Ok(None);
        };
        // Under mpirun slab r is rank r's, one per rank.
        let [part] = &mut self.parts[..] else {
            return Err(Error::Parse(
                "internal: a rank holds more than one slab".into(),
            ));
        };
        let data = part.owned()?;
        let row_len = part.owned_row_len();
        let mut ranks = Vec::with_capacity(w.size);
        let mut at = 0;
        for &n in &self.own_rows {
            ranks.push(at..at + n);
            at += n;
        }
        // The next rank's first row, for the points VTK pieces share.
        let sends: Vec<world::Send> = if w.rank > 0 {
            vec![(w.rank - 1, PIECE_TAG, to_bytes(&data[..row_len]))]
        } else {
            Vec::new()
        };
        let receives: Vec<world::Receive> = if w.rank + 1 < w.size {
            vec![(
                w.rank + 1,
                PIECE_TAG,
                row_len * std::mem::size_of::<S::Real>(),
            )]
        } else {
            Vec::new()
        };
        let got = world::exchange(&sends, &receives)?;
        let next_row = got.first().map(|b| from_bytes(b)).unwrap_or_default();
        Ok(Some(Piece {
            whole: (self.field_of)(Vec::new()),
            rank: w.rank,
            ranks,
            data,
            next_row,
        }))
    }

    fn max_steps_between_diagnostics(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| p.max_steps_between_diagnostics())
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The slabs, the first one's engine, and how halos travel.
    fn describe(&self) -> Option<String> {
        let halos = match (&self.nccl, self.world, &self.sync) {
            (Some(_), _, _) => "halos by NCCL",
            (None, Some(_), Some(_)) => "halos by MPI through page-locked host memory",
            (None, Some(_), None) => "halos by MPI",
            (None, None, Some(_)) => "halos by peer copies",
            (None, None, None) => "halos copied on the host",
        };
        let slabs = self.own_rows.len();
        Some(match self.parts.first().and_then(|p| p.describe()) {
            Some(d) => format!("{slabs} slabs, each {d}; {halos}"),
            None => format!("{slabs} slabs; {halos}"),
        })
    }

    fn steps_per_halo_exchange(&self) -> u64 {
        self.every
    }

    fn set_halo_exchange(&mut self, on: bool) -> bool {
        if on != self.exchange_on {
            self.report_trace();
        }
        self.exchange_on = on;
        true
    }

    fn halo_exchange_seconds(&mut self, reps: usize) -> Result<Option<f64>> {
        if self.world.is_some() || reps == 0 {
            return Ok(None);
        }
        self.diagnostics()?;
        let t = std::time::Instant::now();
        match &self.sync {
            Some(sync) => {
                let bases: Vec<_> = self.parts.iter_mut().map(device_base).collect();
                for _ in 0..reps {
                    match &self.nccl {
                        Some(nccl) => {
                            nccl.exchange(&nccl_blocks(&self.transfers, &self.ids, sync, &bases))?
                        }
                        None => {
                            for tr in &self.transfers {
                                pull(sync, &bases, tr, tr.src, tr.dst, self.pull_by)?;
                            }
                        }
                    }
                    // One exchange as a pass sees it: every pull landed.
                    for s in sync {
                        s.copy.synchronize()?;
                    }
                }
            }
            None => {
                for _ in 0..reps {
                    self.exchange()?;
                }
            }
        }
        Ok(Some(t.elapsed().as_secs_f64() / reps as f64))
    }
}

/// The message tag of the rows pieces share (halo blocks use their transfer's index).
const PIECE_TAG: i32 = 1 << 20;

/// [`slab_of`] without a copy where the buffer's rows lie in order within the grid (a
/// whole grid's window, any slab of a non-periodic one).
pub fn slab_view<'a, T: Copy>(w: &Window, full: &'a [T], row_len: usize) -> Cow<'a, [T]> {
    match usize::try_from(w.base) {
        Ok(first) if first + w.rows <= w.n => {
            Cow::Borrowed(&full[first * row_len..(first + w.rows) * row_len])
        }
        _ => Cow::Owned(slab_of(w, full, row_len)),
    }
}

/// The buffer of `w` cut from the whole field `full` (rows of `row_len` values): its
/// owned rows and its halo rows, wrapped where the grid is periodic.
pub fn slab_of<T: Copy>(w: &Window, full: &[T], row_len: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(w.rows * row_len);
    for l in 0..w.rows {
        let g = w.grid_row(l);
        out.extend_from_slice(&full[g * row_len..(g + 1) * row_len]);
    }
    out
}
