//! One queue pair of a virtio-net device on an iothread: a `dataplane::Handler` that serves the
//! tx ring and the tap's receive side in each turn, and a `Poll` whose cheap check looks at the
//! tx ring (and, when the receive side waits for buffers, the rx ring), so the thread polls a
//! NIC under the same adaptive policy and knobs (`poll_max_ns`, `poll_weight`, `max_batch`) as
//! a disk. Frames arriving on the tap wake the thread through the tap's fd (watched
//! edge-triggered like a kick): a tap has no memory to look at without a syscall.
//!
//! Guest notifications: the tx ring's are on while the thread sleeps and off while it polls or
//! spins for the guest's answer to frames it received ([`super::answer`]); the rx ring's are
//! on only while the receive side waits for buffers (a driver that refills its rx ring need not
//! kick a device that has nothing for it).

use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use dataplane::{CompletionState, Handler, Poll, ThreadTurn, TurnEnd, Watch};
use virtio_queue::Queue;
use vmm_sys_util::eventfd::EventFd;

use super::answer::{AnswerWatch, ANSWER_SPIN_NS};
use super::mq::PairGate;
use super::rx::{RxPath, RxStop};
use super::stats::NetStats;
use super::tap::Tap;
use super::throttle::{DirectionThrottle, NetRateLimits};
use super::tx::{TxPath, TxStop};
use super::PathIo;
use crate::virtio::hold::Hold;
use crate::virtio::host_ring::{HostMemory, HostRing};
use crate::virtio::{ActivatedQueue, GuestMemory, VirtioInterrupt};

/// Where the pair is in its life on the iothread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Moving frames.
    Running,
    /// The device is leaving the iothread (reset): move nothing more.
    Draining,
    /// The guest broke a ring (DEVICE_NEEDS_RESET): move nothing until the device is reset.
    Broken,
}

/// One ring of the pair.
#[derive(Debug)]
struct Side {
    index: u16,
    queue: Queue,
    ring: Option<HostRing>,
    kick: EventFd,
    /// Used entries added since the last notification check.
    used: bool,
}

impl Side {
    fn new(q: ActivatedQueue, mem: &HostMemory) -> (Self, Option<String>) {
        let (ring, err) = match HostRing::new(&q.queue, mem) {
            Ok(ring) => (Some(ring), None),
            Err(e) => (
                None,
                Some(format!("queue {}: unusable rings: {e}", q.index)),
            ),
        };
        (
            Self {
                index: q.index,
                queue: q.queue,
                ring,
                kick: q.kick,
                used: false,
            },
            err,
        )
    }

    fn into_queue(mut self) -> ActivatedQueue {
        if let Some(ring) = self.ring.as_mut() {
            ring.publish_used();
            ring.sync_to(&mut self.queue);
        }
        ActivatedQueue {
            index: self.index,
            queue: self.queue,
            kick: self.kick,
            inflight: None,
        }
    }
}

/// Signals the guest for `side`'s used entries when its suppression rules ask for it.
fn signal(stats: &NetStats, interrupt: &dyn VirtioInterrupt, side: &mut Side) {
    if !std::mem::take(&mut side.used) {
        return;
    }
    let Some(ring) = side.ring.as_mut() else {
        return;
    };
    if ring.needs_notification() {
        NetStats::add(&stats.notifications, 1);
        if let Err(e) = interrupt.notify_queue(side.index) {
            log::warn!("virtio-net queue {}: interrupt failed: {e}", side.index);
        }
    }
}

/// One rx/tx queue pair of a virtio-net device and its tap queue.
pub struct NetQueuePair {
    owner: u64,
    rx: Side,
    tx: Side,
    mem: HostMemory,
    interrupt: Arc<dyn VirtioInterrupt>,
    tap: Tap,
    rx_path: RxPath,
    tx_path: TxPath,
    rx_throttle: DirectionThrottle,
    tx_throttle: DirectionThrottle,
    stats: Arc<NetStats>,
    lifecycle: Lifecycle,
    /// The receive side waits for the guest's buffers (rx notifications are on).
    rx_starved: bool,
    /// The rx ring's avail index when the receive side found too few buffers: it has work
    /// again only once the guest posts past it (the chains it saw and put back cannot take the
    /// waiting frame, so looking at them again would spin).
    rx_seen: u16,
    /// The tap's queue was full at the last try (the thread retries on a timer).
    tap_full: bool,
    polling: bool,
    /// Whether the guest's answer to frames it received is awaited.
    answer: AnswerWatch,
    /// For pair `k` > 0 of a multi-queue NIC: moves frames only while the gate is open for `k`.
    gate: Option<(u16, PairGate)>,
    /// A snapshot holds the NIC still while this is held.
    hold: Hold,
    owner_end: Option<Sender<ActivatedQueue>>,
}

impl std::fmt::Debug for NetQueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetQueuePair")
            .field("owner", &self.owner)
            .field("rx", &self.rx.index)
            .field("tx", &self.tx.index)
            .finish()
    }
}

impl NetQueuePair {
    /// A pair serving `rx` and `tx` over `tap`, owned by device `owner`; `mergeable`: the
    /// driver accepted MRG_RXBUF.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        owner: u64,
        (rx, tx): (ActivatedQueue, ActivatedQueue),
        mem: &GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        tap: Tap,
        mergeable: bool,
        limits: &NetRateLimits,
        stats: Arc<NetStats>,
    ) -> Self {
        let mem = HostMemory::new(mem);
        let (rx, rx_err) = Side::new(rx, &mem);
        let (tx, tx_err) = Side::new(tx, &mem);
        let mut pair = Self {
            owner,
            rx,
            tx,
            mem,
            interrupt,
            tap,
            rx_path: RxPath::new(mergeable),
            tx_path: TxPath::default(),
            rx_throttle: DirectionThrottle::new(limits.rx.clone()),
            tx_throttle: DirectionThrottle::new(limits.tx.clone()),
            stats,
            lifecycle: Lifecycle::Running,
            rx_starved: false,
            rx_seen: 0,
            tap_full: false,
            polling: false,
            answer: AnswerWatch::default(),
            gate: None,
            hold: Hold::default(),
            owner_end: None,
        };
        if let Some(why) = rx_err.or(tx_err) {
            pair.fail(&why);
        }
        if let Some(ring) = pair.rx.ring.as_mut() {
            ring.disable_notification();
        }
        pair
    }

    /// Sends the queues to `owner_end` when the handler leaves the iothread (a device reset).
    pub fn returning_to(mut self, owner_end: Sender<ActivatedQueue>) -> Self {
        self.owner_end = Some(owner_end);
        self
    }

    /// Makes this pair `k` of a multi-queue NIC: it moves frames only while `gate` is open for
    /// `k` (the guest's PAIRS_SET enabled it).
    pub fn gated(mut self, k: u16, gate: PairGate) -> Self {
        self.gate = Some((k, gate));
        self
    }

    /// Makes the pair do nothing while `hold` is held (a snapshot reading the NIC's state).
    pub fn held_by(mut self, hold: Hold) -> Self {
        self.hold = hold;
        self
    }

    /// The guest enabled this pair (always, for a single pair).
    fn enabled(&self) -> bool {
        self.gate.as_ref().is_none_or(|(k, g)| g.open(*k))
    }

    fn fail(&mut self, why: &str) {
        if self.lifecycle != Lifecycle::Broken {
            log::error!("virtio-net: {why}; the device needs a reset");
            self.lifecycle = Lifecycle::Broken;
            self.interrupt.set_needs_reset();
        }
    }

    fn running(&self) -> bool {
        self.lifecycle == Lifecycle::Running
    }

    /// Turns rx notifications on (starved) or off; true when buffers raced in.
    fn set_rx_starved(&mut self, starved: bool) -> bool {
        self.rx_starved = starved;
        let Some(ring) = self.rx.ring.as_mut() else {
            return false;
        };
        if starved {
            self.rx_seen = ring.avail_seen();
            ring.enable_notification_past(self.rx_seen)
        } else {
            ring.disable_notification();
            false
        }
    }

    /// The cheap check of the tx side: chains the pair can send now.
    fn poll_tx(&self) -> bool {
        !self.tap_full
            && self.tx_throttle.until().is_none()
            && self.tx_path.paused_until().is_none()
            && self.tx.ring.as_ref().is_some_and(HostRing::has_avail)
    }

    /// Starts or ends the thread's spin for the guest's answer (`Watch::Completions`): tx
    /// notifications off while the thread spins on the ring; at the end back on (unless the
    /// thread polls) and one more look, true when chains raced in.
    fn watch_answer(&mut self, on: bool) -> bool {
        if !on {
            self.answer.watch_ended();
        }
        if !self.running() || self.polling {
            return false;
        }
        self.set_tx_notifications(!on)
    }

    /// Turns the tx ring's guest notifications off, or on again with one more look: true when
    /// chains the pair may send raced in.
    fn set_tx_notifications(&mut self, on: bool) -> bool {
        let Some(tx) = self.tx.ring.as_mut() else {
            return false;
        };
        // A ring waiting out its malformed-chain budget takes no kicks: the timer resumes it.
        if !on || self.tx_path.paused_until().is_some() {
            tx.disable_notification();
            return false;
        }
        tx.enable_notification() && self.tx_throttle.until().is_none()
    }

    fn wake_at(&self) -> Option<Instant> {
        [
            self.rx_throttle.until(),
            self.tx_throttle.until(),
            self.tx_path.paused_until(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Handler for NetQueuePair {
    fn owner(&self) -> u64 {
        self.owner
    }

    fn wake_fds(&self) -> Vec<RawFd> {
        // The rx kick, the tx kick, the tap (frames arrived).
        vec![
            self.rx.kick.as_raw_fd(),
            self.tx.kick.as_raw_fd(),
            self.tap.as_raw_fd(),
        ]
    }

    fn run(&mut self, max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        if !self.running() {
            return TurnEnd {
                stopped: self.lifecycle == Lifecycle::Broken,
                ..TurnEnd::IDLE
            };
        }
        if !self.enabled() {
            // A pair the guest has not enabled: its tap queue is detached; the control queue
            // kicks it when the guest enables it.
            return TurnEnd::IDLE;
        }
        if self.hold.is_held() {
            // A snapshot is reading the rings: the wakes of this turn are spent, the release
            // nudges the queues.
            return TurnEnd::IDLE;
        }
        let budget = max_batch.max(1);
        self.tap_full = false;
        // The clock is read only while the tx ring waits out its malformed-chain budget.
        if self.tx_path.paused_until().is_some()
            && !self.tx_path.resume_if_due(Instant::now())
            && !self.polling
        {
            self.set_tx_notifications(true);
        }
        let mut tx_stop = TxStop::Empty;
        if let Some(ring) = self.tx.ring.as_mut() {
            let io = PathIo {
                ring,
                mem: &self.mem,
                tap: &self.tap,
                throttle: &mut self.tx_throttle,
                stats: &self.stats,
                used: &mut self.tx.used,
            };
            tx_stop = self.tx_path.run(io, budget);
        }
        let mut rx_stop = RxStop::Empty;
        if let Some(ring) = self.rx.ring.as_mut() {
            let io = PathIo {
                ring,
                mem: &self.mem,
                tap: &self.tap,
                throttle: &mut self.rx_throttle,
                stats: &self.stats,
                used: &mut self.rx.used,
            };
            rx_stop = self.rx_path.run(io, budget);
        }
        if self.tx.used || self.rx.used {
            let now = Instant::now();
            if self.tx.used {
                self.answer.answered(now);
            }
            if self.rx.used {
                self.answer.delivered(now);
            }
        }
        signal(&self.stats, &*self.interrupt, &mut self.tx);
        signal(&self.stats, &*self.interrupt, &mut self.rx);
        let mut more = false;
        match tx_stop {
            TxStop::Broken(e) => self.fail(&format!("tx ring: {e}")),
            TxStop::Budget => more = true,
            TxStop::TapFull => self.tap_full = true,
            TxStop::Paused => {
                self.set_tx_notifications(false);
            }
            TxStop::Empty | TxStop::Throttled => {}
        }
        match rx_stop {
            RxStop::Broken(e) => self.fail(&format!("rx ring: {e}")),
            RxStop::Budget => {
                more = true;
                self.set_rx_starved(false);
            }
            RxStop::NoBuffers => more |= self.set_rx_starved(true),
            RxStop::Empty | RxStop::Throttled => {
                self.set_rx_starved(false);
            }
        }
        if !self.running() {
            return TurnEnd {
                stopped: true,
                ..TurnEnd::IDLE
            };
        }
        TurnEnd {
            more,
            retry: self.tap_full,
            wake_at: self.wake_at(),
            stopped: false,
        }
    }

    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        // Every frame is copied or written synchronously: nothing is ever in flight.
        if self.running() {
            self.lifecycle = Lifecycle::Draining;
        }
        0
    }

    fn resume(&mut self) {
        if self.lifecycle == Lifecycle::Draining {
            self.lifecycle = Lifecycle::Running;
        }
    }

    fn detach(mut self: Box<Self>) {
        let owner_end = self.owner_end.take();
        let this = *self;
        for side in [this.rx, this.tx] {
            let q = side.into_queue();
            if let Some(end) = &owner_end {
                if end.send(q).is_err() {
                    log::warn!("virtio-net: a queue left its iothread after its device was gone");
                }
            }
        }
    }

    fn poller(&mut self) -> Option<&mut dyn Poll> {
        Some(self)
    }
}

impl Poll for NetQueuePair {
    fn poll(&mut self) -> bool {
        if !self.running() || !self.enabled() || self.hold.is_held() {
            return false;
        }
        let tx = self.poll_tx();
        let rx = self.rx_starved
            && self.rx_throttle.until().is_none()
            && self
                .rx
                .ring
                .as_ref()
                .is_some_and(|r| r.avail_idx(Ordering::Acquire) != self.rx_seen);
        tx || rx
    }

    fn completion_state(&self) -> CompletionState {
        if !self.running() || !self.enabled() || !self.answer.expecting() {
            return CompletionState::Idle;
        }
        if self.poll_tx() {
            CompletionState::Ready
        } else {
            CompletionState::Pending
        }
    }

    fn completion_spin_cap_ns(&self) -> Option<u64> {
        Some(ANSWER_SPIN_NS)
    }

    fn watch(&mut self, what: Watch, on: bool) -> bool {
        if what == Watch::Completions {
            return self.watch_answer(on);
        }
        self.polling = on;
        if !self.running() {
            return false;
        }
        let held = self.hold.is_held();
        if self.tx.ring.is_none() {
            return false;
        }
        if on {
            self.set_tx_notifications(false)
        } else {
            let tx_more = self.set_tx_notifications(true);
            let rx_more = self.rx_starved && self.set_rx_starved(true);
            // Held, work that raced in waits for the release's nudge.
            (tx_more || rx_more) && !held
        }
    }

    fn completed(&self) -> u64 {
        let s = &self.stats;
        s.rx_frames.load(std::sync::atomic::Ordering::Relaxed)
            + s.tx_frames.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Frames from the host arrive on the tap's fd.
    fn has_fd_sources(&self) -> bool {
        true
    }
}
