//! Multi-queue on the iothread: the enabled pair count the pairs' handlers share
//! ([`PairGate`]: pair `k` moves frames only while `k` < the count), and the control queue's
//! handler ([`CtrlHandler`]), which serves the guest's commands ([`super::ctrl`]) and, when
//! PAIRS_SET changes the count, attaches the tap queues of the enabled pairs, detaches the
//! others (TUNSETQUEUE: the kernel steers no frame to a pair the guest does not use) and kicks
//! the pairs it enabled so they look at their rings.

use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use dataplane::{Handler, ThreadTurn, TurnEnd};
use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::ctrl::CtrlQueue;
use super::tap::Tap;
use super::LogLimit;
use crate::virtio::{ActivatedQueue, GuestMemory, VirtioInterrupt};

/// The pairs the driver enabled, shared by the device, its pairs and its control queue.
#[derive(Debug, Clone)]
pub struct PairGate(Arc<AtomicU16>);

impl PairGate {
    /// A gate with `enabled` pairs open (at least 1).
    pub fn new(enabled: u16) -> Self {
        Self(Arc::new(AtomicU16::new(enabled.max(1))))
    }

    /// The enabled pair count.
    pub fn enabled(&self) -> u16 {
        self.0.load(Ordering::Acquire)
    }

    /// Sets the enabled pair count (at least 1).
    pub fn set(&self, enabled: u16) {
        self.0.store(enabled.max(1), Ordering::Release);
    }

    /// Pair `k` may move frames.
    pub fn open(&self, k: u16) -> bool {
        k < self.enabled()
    }
}

/// Attaches the tap queues of pairs below `enabled` and detaches the others (pair 0 stays);
/// errors are logged (a tap that is not multi-queue, e.g. a test's socket, refuses).
pub(crate) fn steer<'a>(taps: impl IntoIterator<Item = &'a Tap>, enabled: u16, log: &mut LogLimit) {
    for (k, tap) in taps.into_iter().enumerate().skip(1) {
        let on = k < usize::from(enabled);
        if let Err(e) = tap.set_attached(on) {
            if log.allow() {
                log::warn!("virtio-net pair {k}: {e}");
            }
        }
    }
}

/// Where the control queue is in its life on the iothread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Running,
    Draining,
    Broken,
}

/// The control queue of a multi-queue NIC, on the iothread of its pairs.
pub struct CtrlHandler {
    owner: u64,
    index: u16,
    queue: Queue,
    kick: EventFd,
    mem: GuestMemory,
    interrupt: Arc<dyn VirtioInterrupt>,
    ctrl: CtrlQueue,
    gate: PairGate,
    /// Every pair's tap queue (index: pair).
    taps: Vec<Tap>,
    /// Every pair's rx kick (index: pair), written to wake a pair the guest enabled.
    pair_kicks: Vec<EventFd>,
    lifecycle: Lifecycle,
    log: LogLimit,
    owner_end: Option<Sender<ActivatedQueue>>,
}

impl std::fmt::Debug for CtrlHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtrlHandler")
            .field("owner", &self.owner)
            .field("index", &self.index)
            .field("enabled", &self.gate.enabled())
            .finish()
    }
}

impl CtrlHandler {
    /// The control queue `q` of device `owner`, for pairs whose tap queues are `taps` and
    /// whose rx kicks are `pair_kicks`; `gate` holds the enabled count.
    pub fn new(
        owner: u64,
        q: ActivatedQueue,
        mem: &GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        gate: PairGate,
        (taps, pair_kicks): (Vec<Tap>, Vec<EventFd>),
    ) -> Self {
        let max = u16::try_from(taps.len()).unwrap_or(u16::MAX);
        Self {
            owner,
            index: q.index,
            queue: q.queue,
            kick: q.kick,
            mem: mem.clone(),
            interrupt,
            ctrl: CtrlQueue::new(max, gate.enabled()),
            gate,
            taps,
            pair_kicks,
            lifecycle: Lifecycle::Running,
            log: LogLimit::default(),
            owner_end: None,
        }
    }

    /// Sends the queue to `owner_end` when the handler leaves the iothread.
    pub fn returning_to(mut self, owner_end: Sender<ActivatedQueue>) -> Self {
        self.owner_end = Some(owner_end);
        self
    }

    fn apply_pairs(&mut self, before: u16) {
        let now = self.ctrl.enabled();
        self.gate.set(now);
        steer(&self.taps, now, &mut self.log);
        for k in usize::from(before)..usize::from(now) {
            if let Some(kick) = self.pair_kicks.get(k) {
                // A full counter still wakes the thread; nothing else can fail here.
                let _ = kick.write(1);
            }
        }
        log::info!("virtio-net: the guest enabled {now} queue pair(s)");
    }
}

impl Handler for CtrlHandler {
    fn owner(&self) -> u64 {
        self.owner
    }

    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.kick.as_raw_fd()]
    }

    fn run(&mut self, max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        if self.lifecycle != Lifecycle::Running {
            return TurnEnd {
                stopped: self.lifecycle == Lifecycle::Broken,
                ..TurnEnd::IDLE
            };
        }
        let before = self.ctrl.enabled();
        match self.ctrl.serve(&mut self.queue, &self.mem, max_batch) {
            Ok(served) => {
                if served.pairs_changed {
                    self.apply_pairs(before);
                }
                if served.chains > 0 && self.queue.needs_notification(&self.mem).unwrap_or(true) {
                    if let Err(e) = self.interrupt.notify_queue(self.index) {
                        log::warn!("virtio-net control queue: interrupt failed: {e}");
                    }
                }
                TurnEnd {
                    more: served.more,
                    ..TurnEnd::IDLE
                }
            }
            Err(e) => {
                log::error!("virtio-net control queue: {e}; the device needs a reset");
                self.lifecycle = Lifecycle::Broken;
                self.interrupt.set_needs_reset();
                TurnEnd {
                    stopped: true,
                    ..TurnEnd::IDLE
                }
            }
        }
    }

    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        if self.lifecycle == Lifecycle::Running {
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
        let q = ActivatedQueue {
            index: this.index,
            queue: this.queue,
            kick: this.kick,
            inflight: None,
        };
        if let Some(end) = owner_end {
            if end.send(q).is_err() {
                log::warn!("virtio-net: the control queue left its iothread after its device");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_opens_pairs_below_the_count_and_never_closes_pair_zero() {
        let gate = PairGate::new(0);
        assert_eq!(gate.enabled(), 1);
        assert!(gate.open(0) && !gate.open(1));
        gate.set(3);
        assert!(gate.clone().open(2) && !gate.open(3));
        gate.set(0);
        assert!(gate.open(0) && !gate.open(1));
    }
}
