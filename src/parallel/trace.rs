//! `KEISAN_PASS_TRACE=1`, a diagnosis knob of device slabs' overlapped passes: timed
//! events per pass and slab, read a few passes later so they do not stall the pipeline.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent};

use crate::error::Result;

/// Timed events of one pass on one slab: its start, its bands done, its interior done,
/// its halo pulled.
pub(super) struct PassEvents {
    pub(super) start: CudaEvent,
    pub(super) bands: CudaEvent,
    pub(super) interior: CudaEvent,
    pub(super) pulled: CudaEvent,
}

/// Passes a slab's trace keeps in flight: reading a pass's times waits for it, so they
/// are read this many passes later, when the pass has long finished.
const TRACED: usize = 16;

/// `KEISAN_PASS_TRACE=1`: when each pass's bands, interior and halo pull end, on average,
/// after the pass starts, how long from one pass's start to the next's (the median: runs
/// of the bench are apart), and how long the host takes to queue a pass (a diagnosis
/// knob; printed when the engine is dropped).
pub(super) struct PassTrace {
    ring: Vec<PassEvents>,
    next: std::cell::Cell<usize>,
    /// Microseconds after the start, summed over `passes`: bands, interior, pulled.
    sums: std::cell::Cell<[f64; 3]>,
    passes: std::cell::Cell<u64>,
    /// Microseconds from each pass's start to the next's.
    periods: std::cell::RefCell<Vec<f64>>,
    /// Microseconds the host spent queuing passes (and their sums' records), and passes.
    host: std::cell::Cell<(f64, u64)>,
    /// Seconds the host waited to read these times.
    pub(super) waited: std::cell::Cell<f64>,
}

impl PassTrace {
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let timed = || ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT));
        let ring = (0..TRACED)
            .map(|_| -> Result<PassEvents> {
                Ok(PassEvents {
                    start: timed()?,
                    bands: timed()?,
                    interior: timed()?,
                    pulled: timed()?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            ring,
            next: Default::default(),
            sums: Default::default(),
            passes: Default::default(),
            periods: Default::default(),
            host: Default::default(),
            waited: Default::default(),
        })
    }

    /// The events of the pass about to be queued (the times of the pass that last used
    /// them added first).
    pub(super) fn pass(&self) -> Result<&PassEvents> {
        let n = self.next.get();
        self.next.set(n + 1);
        if n >= TRACED {
            // Reading the times waits for that pass: not the host's own queuing time.
            let waiting = std::time::Instant::now();
            self.add(n % TRACED, true)?;
            self.waited
                .set(self.waited.get() + waiting.elapsed().as_secs_f64());
        }
        Ok(&self.ring[n % TRACED])
    }

    /// The times of the pass in `slot`; with `followed`, the pass after it (in the next
    /// slot) has been queued too.
    fn add(&self, slot: usize, followed: bool) -> Result<()> {
        let e = &self.ring[slot];
        let at = |x: &CudaEvent| -> Result<f64> { Ok(1e3 * e.start.elapsed_ms(x)? as f64) };
        let mut sums = self.sums.get();
        for (sum, x) in sums.iter_mut().zip([&e.bands, &e.interior, &e.pulled]) {
            *sum += at(x)?;
        }
        if followed {
            let period = at(&self.ring[(slot + 1) % TRACED].start)?;
            self.periods.borrow_mut().push(period);
        }
        self.sums.set(sums);
        self.passes.set(self.passes.get() + 1);
        Ok(())
    }

    /// `seconds` more of the host's time queuing `passes` more passes.
    pub(super) fn host_time(&self, seconds: f64, passes: u64) {
        let (t, n) = self.host.get();
        self.host.set((t + 1e6 * seconds, n + passes));
    }

    /// The current pass's events (those [`PassTrace::pass`] handed out last).
    pub(super) fn current(&self) -> &PassEvents {
        &self.ring[(self.next.get() + TRACED - 1) % TRACED]
    }

    /// Prints the times so far (`what`: the passes they are of) and starts afresh.
    pub(super) fn report(&self, slab: usize, what: &str) {
        let n = self.next.get();
        for k in n.saturating_sub(TRACED)..n {
            if self.add(k % TRACED, k + 1 < n).is_err() {
                return;
            }
        }
        let passes = self.passes.get().max(1) as f64;
        let [b, i, p] = self.sums.get().map(|t| t / passes);
        let mut periods = self.periods.take();
        periods.sort_by(f64::total_cmp);
        let period = periods.get(periods.len() / 2).copied().unwrap_or(f64::NAN);
        let host = match self.host.get() {
            (_, 0) => String::new(),
            (t, n) => format!(
                "; the host queued a pass in {:.1} µs (its reads of these times not counted)",
                t / n as f64
            ),
        };
        crate::say!(
            "pass trace, slab {slab}{what}: bands done {b:.1} µs, halo pulled {p:.1} µs, \
             interior done {i:.1} µs after the pass's start (mean of {} passes), the next \
             pass's start {period:.1} µs (median){host}",
            self.passes.get()
        );
        self.next.set(0);
        self.sums.set([0.0; 3]);
        self.passes.set(0);
        self.host.set((0.0, 0));
    }
}
