//! An O_DIRECT file ([`Strategy::Direct`](super::Strategy)): an inline call waits for the device
//! (RWF_NOWAIT only keeps it from queueing), so what goes inline depends on the device, as the
//! [`CallSampler`] learns it. A fast device (its calls stay on the CPU, or average under
//! [`AutoTuning::fast_direct_call_ns`]) gets every request inline, or, wrapped around Linux AIO,
//! a turn of [`AutoTuning::batch_requests`] or more in one `io_submit`. Otherwise only a request
//! alone on the thread goes inline, and now and then the first of a turn as a probe of the
//! device; the rest go to the wrapped engine, or while the turn and the requests in flight are
//! fewer than [`AutoTuning::batch_requests`], to the Linux AIO engine beside the ring
//! ([`Shallow`]).
//!
//! [`AutoTuning::fast_direct_call_ns`]: super::tuning::AutoTuning::fast_direct_call_ns
//! [`AutoTuning::batch_requests`]: super::tuning::AutoTuning::batch_requests

use super::gate::Call;
use super::sampler::CallSampler;
use super::{AutoEngine, IoEngine, Strategy, ThreadTurn};

/// Turns whose requests are not inline before the first of a turn goes inline as a probe of
/// the device (its CPU share is sampled). A probe at depth waits behind the requests the device
/// already holds, and the thread with it, so probes are rare.
pub(super) const MIN_PROBE_GAP_TURNS: u32 = 256;
/// The longest gap, in turns, between two probes of a device that keeps sleeping in its calls
/// (each such probe doubles the gap): about one every few seconds at depth.
pub(super) const MAX_PROBE_GAP_TURNS: u32 = 65_536;

/// What the engine knows of an O_DIRECT file's device, and where its deferred requests go.
#[derive(Debug)]
pub(super) struct Direct {
    /// What the inline calls showed of the device.
    pub(super) sampler: CallSampler,
    /// Turns since the last probe.
    pub(super) turns_since_probe: u32,
    /// Turns between two probes now (doubles while probes find the device sleeping).
    pub(super) probe_gap_turns: u32,
    /// Where requests that do not go inline go.
    pub(super) handoff: Handoff,
}

/// Where an O_DIRECT file's deferred requests go, by the engine the file is wrapped around.
#[derive(Debug)]
pub(super) enum Handoff {
    /// Linux AIO (a device that completes in the caller's context, or no io_uring): a fast
    /// device's turn of [`AutoTuning::batch_requests`] or more goes to one `io_submit`, which
    /// is cheaper than a call per request.
    ///
    /// [`AutoTuning::batch_requests`]: super::tuning::AutoTuning::batch_requests
    AioBatches,
    /// The wrapped engine (io_uring, or Sync), with the Linux AIO engine beside io_uring
    /// when there is one.
    Wrapped(Option<Shallow>),
}

/// Beside a wrapped io_uring, for a device that sleeps for its completions: a Linux AIO engine
/// that takes a turn while it and the requests in flight are fewer than
/// [`AutoTuning::batch_requests`] (a request alone costs less there: its completion is written
/// to a ring this thread reads, where io_uring's needs task work run by this thread; a batch
/// costs less in the ring). Its requests count against the wrapped engine's depth.
///
/// [`AutoTuning::batch_requests`]: super::tuning::AutoTuning::batch_requests
pub(super) struct Shallow {
    /// The Linux AIO engine.
    pub(super) engine: Box<dyn IoEngine>,
    /// Its last `reap` began with nothing in flight ([`super::reap_unless_quiet`]).
    pub(super) quiet: bool,
}

impl std::fmt::Debug for Shallow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shallow")
            .field("engine", &self.engine.info())
            .finish_non_exhaustive()
    }
}

impl Direct {
    /// A device not known yet, its deferred requests going to `handoff`.
    pub(super) fn new(handoff: Handoff) -> Self {
        Self {
            sampler: CallSampler::default(),
            turns_since_probe: 0,
            probe_gap_turns: MIN_PROBE_GAP_TURNS,
            handoff,
        }
    }

    /// Counts a turn that is not all inline; returns whether its first request is a probe
    /// (always until the first CPU sample).
    fn probe_due(&mut self) -> bool {
        self.turns_since_probe = self.turns_since_probe.saturating_add(1);
        self.sampler.on_cpu_permille.is_none() || self.turns_since_probe >= self.probe_gap_turns
    }

    /// A probe ran: once the device has a CPU share, the next probe is due after the shortest
    /// gap if it works on the CPU, else after twice the gap (up to [`MAX_PROBE_GAP_TURNS`]).
    fn probed(&mut self) {
        if self.sampler.on_cpu_permille.is_some() {
            self.turns_since_probe = 0;
            self.probe_gap_turns = if self.sampler.on_cpu() {
                MIN_PROBE_GAP_TURNS
            } else {
                self.probe_gap_turns
                    .saturating_mul(2)
                    .min(MAX_PROBE_GAP_TURNS)
            };
        }
    }

    /// The Linux AIO engine beside the ring, if any.
    pub(super) fn shallow(&self) -> Option<&Shallow> {
        match &self.handoff {
            Handoff::Wrapped(shallow) => shallow.as_ref(),
            Handoff::AioBatches => None,
        }
    }

    /// The Linux AIO engine beside the ring, if any.
    pub(super) fn shallow_mut(&mut self) -> Option<&mut Shallow> {
        match &mut self.handoff {
            Handoff::Wrapped(shallow) => shallow.as_mut(),
            Handoff::AioBatches => None,
        }
    }
}

impl AutoEngine {
    /// Whether `op`, submitted after `self.held`, is known already to go to the wrapped engine
    /// at `commit`, so it may go there now: on a device that sleeps for its calls (not
    /// [`CallSampler::fast`]), the first request of a turn is held (it may go inline, alone or
    /// as a probe); a later one goes to the wrapped engine once the requests in flight (this
    /// turn's sent ones among them), the held ones and itself reach
    /// [`AutoTuning::batch_requests`] (below that the turn may go to the Linux AIO engine beside
    /// the ring).
    ///
    /// [`AutoTuning::batch_requests`]: super::tuning::AutoTuning::batch_requests
    pub(super) fn direct_straight_to_wrapped(&self, direct: &Direct) -> bool {
        !self.held.is_empty()
            && !direct.sampler.fast(&self.tuning)
            && (direct.shallow().is_none()
                || self.async_in_flight() + self.held.len() + 1 >= self.tuning.batch_requests)
    }

    /// An O_DIRECT turn: every request inline on a fast device; else a request alone (nothing
    /// else this turn, nothing in flight) or a due probe inline, the others to the wrapped
    /// engine, which overlaps them (or to the engine beside it, for a shallow turn).
    pub(super) fn release_direct(&mut self, thread: &ThreadTurn) {
        let batch_requests = self.tuning.batch_requests;
        // The turn's requests already sent to the ring count in `async_in_flight`.
        let turn = self.held.len();
        let Strategy::Direct(direct) = &mut self.strategy else {
            return;
        };
        let fast = direct.sampler.fast(&self.tuning);
        let aio_batches = matches!(direct.handoff, Handoff::AioBatches);
        if fast && aio_batches && turn >= batch_requests {
            // The device works in the caller's context: one io_submit for the whole turn (the
            // loop below) beats a call per request.
        } else if fast && self.gate.is_open() {
            // Inline costs no more than handing over: every request goes inline.
            // `spare` keeps its capacity turn after turn: no allocation.
            std::mem::swap(&mut self.held, &mut self.spare);
            let mut held = std::mem::take(&mut self.spare);
            for request in held.drain(..) {
                self.gate.count_request();
                if let Some(request) = self.inline(request, Call::Turn) {
                    self.held.push(request);
                }
            }
            self.spare = held;
            if self.held.is_empty() {
                return;
            }
        } else {
            // A request alone on the thread goes inline; so does the first of a turn now and
            // then, to learn whether the device completes in the caller's context: at depth no
            // request is ever alone.
            let probe = direct.probe_due();
            let lone = turn == 1 && self.alone_on_thread(thread);
            if lone {
                self.gate.count_request();
            }
            if self.gate.is_open() && (lone || probe) {
                let request = self.held.remove(0);
                let back = self.inline(request, if lone { Call::Lone } else { Call::Probe });
                if probe {
                    if let Strategy::Direct(direct) = &mut self.strategy {
                        direct.probed();
                    }
                }
                match back {
                    None if self.held.is_empty() => return,
                    None => {}
                    Some(request) => self.held.insert(0, request),
                }
            }
        }
        // Shallow: the turn and what this queue has in flight stay under the batch size (QD1
        // to QD3 by default); at depth every turn goes to the ring, without mixing two engines'
        // completions.
        let in_flight = self.async_in_flight();
        let Strategy::Direct(direct) = &mut self.strategy else {
            return;
        };
        let mut shallow = direct
            .shallow_mut()
            .filter(|_| in_flight + turn < batch_requests);
        for request in self.held.drain(..) {
            self.stats.deferred += 1;
            let engine = match shallow.as_deref_mut() {
                Some(shallow) => {
                    self.stats.shallow += 1;
                    &mut shallow.engine
                }
                None => &mut self.inner,
            };
            if engine.submit(request).is_err() {
                // `capacity` counted the held requests against the wrapped engine's room (the
                // shallow engine has the same depth, and its requests count there too).
                log::error!("auto engine: the wrapped engine refused a request");
            }
        }
    }

    /// The thread serves this queue alone and nothing is in flight: an inline call that waits
    /// for the device holds up no other request. With other queues on the thread, one that has
    /// no work when the call starts may get some while the call waits (on a busy host the
    /// device's worker may wait for a core meanwhile).
    pub(super) fn alone_on_thread(&self, thread: &ThreadTurn) -> bool {
        self.async_in_flight() == 0
            && thread.async_in_flight() == 0
            && thread.ready_handlers() <= 1
            && thread.handlers() <= 1
    }
}
