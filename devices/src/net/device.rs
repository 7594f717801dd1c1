//! The virtio-net device model: features (the offloads Firecracker offers, MRG_RXBUF, the MAC
//! when one is set, MQ and the control queue when the tap has several queues), the config
//! space, and activation, which sets the tap's offloads for what the driver accepted and moves
//! the queue pairs (rx 2k, tx 2k+1) and the control queue (2N) onto the NIC's iothread; reset
//! takes the queues back. Pairs after the first move frames only once the guest enabled them
//! (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, [`super::mq`]).

use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

use dataplane::{Detach, IoThread};

use super::handler::NetQueuePair;
use super::mq::{steer, CtrlHandler, PairGate};
use super::stats::NetStats;
use super::tap::Tap;
use super::throttle::NetRateLimits;
use super::{encode_config, features, read_config, LogLimit, Mac, CONFIG_LEN, QUEUE_SIZE};
use crate::block::queue::next_owner_id;
use crate::virtio::hold::Hold;
use crate::virtio::{
    device_type, ActivateError, ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice,
    VirtioInterrupt, VIRTIO_F_VERSION_1, VIRTIO_RING_F_EVENT_IDX,
};

/// How long the guest's reset waits for the pair to leave its iothread.
const RESET_WAIT: Duration = Duration::from_millis(500);

/// The queue pairs (rx, tx) and the control queue of an activation.
type SortedQueues = (
    Vec<(ActivatedQueue, ActivatedQueue)>,
    Option<ActivatedQueue>,
);

/// What the VMM decided about a NIC.
#[derive(Debug)]
pub struct NetDeviceConfig {
    /// The interface id (`iface_id`).
    pub iface_id: String,
    /// The opened tap (opened before the sandbox); a multi-queue tap's queues make as many
    /// queue pairs ([`Tap::open_queues`]).
    pub tap: Tap,
    /// The guest's MAC, if set (offered with VIRTIO_NET_F_MAC).
    pub mac: Option<Mac>,
    /// The rate limiters (inactive ones by default).
    pub rate_limits: NetRateLimits,
}

/// A virtio-net device.
pub struct VirtioNet {
    owner: u64,
    iface_id: String,
    tap: Tap,
    pairs: u16,
    queue_sizes: Vec<u16>,
    gate: PairGate,
    hold: Hold,
    offered: u64,
    acked: u64,
    config_space: [u8; CONFIG_LEN],
    rate_limits: NetRateLimits,
    stats: Arc<NetStats>,
    iothread: Arc<IoThread>,
    state: State,
    returned: Option<Receiver<ActivatedQueue>>,
}

/// Where the device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not activated (or reset).
    Inactive,
    /// The pair is on the iothread.
    Active,
    /// A reset waits for the pair to leave the iothread.
    Resetting,
}

impl std::fmt::Debug for VirtioNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioNet")
            .field("iface_id", &self.iface_id)
            .field("tap", &self.tap.name())
            .finish()
    }
}

impl VirtioNet {
    /// A device for `cfg`, served by `iothread`.
    pub fn new(cfg: NetDeviceConfig, iothread: Arc<IoThread>) -> Self {
        let mut offered =
            VIRTIO_F_VERSION_1 | VIRTIO_RING_F_EVENT_IDX | features::OFFLOADS | features::MRG_RXBUF;
        if cfg.mac.is_some() {
            offered |= features::MAC;
        }
        let pairs = u16::try_from(cfg.tap.queue_count()).unwrap_or(1).max(1);
        let mut queues = 2;
        if pairs > 1 {
            offered |= features::MQ | features::CTRL_VQ;
            queues = 2 * usize::from(pairs) + 1;
        }
        Self {
            owner: next_owner_id(),
            iface_id: cfg.iface_id,
            tap: cfg.tap,
            pairs,
            queue_sizes: vec![QUEUE_SIZE; queues],
            gate: PairGate::new(1),
            hold: Hold::default(),
            offered,
            acked: 0,
            config_space: encode_config(cfg.mac, pairs),
            rate_limits: cfg.rate_limits,
            stats: Arc::new(NetStats::default()),
            iothread,
            state: State::Inactive,
            returned: None,
        }
    }

    /// The NIC's counters, readable from any thread.
    pub fn stats(&self) -> Arc<NetStats> {
        self.stats.clone()
    }

    /// The NIC's rate limiters (set them live with `RateLimiter::set`, then wake the iothread
    /// with [`IoThread::wake_throttled`]).
    pub fn rate_limits(&self) -> &NetRateLimits {
        &self.rate_limits
    }

    /// The features the driver accepted.
    pub fn acked_features(&self) -> u64 {
        self.acked
    }

    /// The queue pairs the device offers (1 without MQ).
    pub fn max_pairs(&self) -> u16 {
        self.pairs
    }

    /// The pairs the guest enabled (1 until its PAIRS_SET).
    pub fn enabled_pairs(&self) -> u16 {
        self.gate.enabled()
    }

    /// The enabled pair count, shared with the device's queues (a snapshot reads it; a restore
    /// sets it before the function's state activates the device).
    pub fn pair_gate(&self) -> PairGate {
        self.gate.clone()
    }

    /// Restores the enabled pair count of a snapshot, before the restored device is activated
    /// (at most [`VirtioNet::max_pairs`]).
    pub fn restore_enabled_pairs(&mut self, enabled: u16) {
        self.gate.set(enabled.min(self.pairs));
    }

    /// The hold a snapshot sets to keep the NIC's pairs still ([`crate::virtio::hold`]).
    pub fn hold(&self) -> Hold {
        self.hold.clone()
    }

    /// The driver negotiated several pairs (MQ with its control queue).
    fn multi_queue(&self) -> bool {
        let both = features::MQ | features::CTRL_VQ;
        self.pairs > 1 && self.acked & both == both
    }

    /// Splits the activated queues into pairs (rx 2k, tx 2k+1) and the control queue (2N, with
    /// MQ): every pair the driver may use and nothing else.
    fn sort_queues(&self, queues: Vec<ActivatedQueue>) -> Result<SortedQueues, ActivateError> {
        let pairs = if self.multi_queue() { self.pairs } else { 1 };
        let mut slots: Vec<Option<ActivatedQueue>> = Vec::new();
        slots.resize_with(2 * usize::from(pairs) + 1, || None);
        for q in queues {
            let i = usize::from(q.index);
            let ctrl = i == 2 * usize::from(pairs);
            match slots.get_mut(i) {
                Some(slot) if slot.is_none() && (!ctrl || pairs > 1) => *slot = Some(q),
                _ => {
                    return Err(ActivateError::BadConfig(format!(
                        "virtio-net: queue {i} is not one of the {pairs} pair(s) negotiated"
                    )))
                }
            }
        }
        let ctrl = if pairs > 1 {
            slots.pop().flatten()
        } else {
            None
        };
        let mut out = Vec::with_capacity(usize::from(pairs));
        let mut it = slots.into_iter();
        for k in 0..pairs {
            match (it.next().flatten(), it.next().flatten()) {
                (Some(rx), Some(tx)) => out.push((rx, tx)),
                _ => {
                    return Err(ActivateError::BadConfig(format!(
                        "virtio-net needs the rx and tx queues of pair {k} ({} and {}) ready",
                        2 * k,
                        2 * k + 1
                    )))
                }
            }
        }
        if pairs > 1 && ctrl.is_none() {
            return Err(ActivateError::BadConfig(format!(
                "virtio-net needs its control queue ({}) ready",
                2 * pairs
            )));
        }
        Ok((out, ctrl))
    }
}

impl VirtioDevice for VirtioNet {
    fn device_type(&self) -> u32 {
        device_type::NET
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn features(&self) -> u64 {
        self.offered
    }

    fn ack_features(&mut self, features: u64) {
        self.acked = features & self.offered;
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        read_config(&self.config_space, offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        // The MAC is writable only with VIRTIO_NET_F_CTRL_MAC_ADDR-less legacy drivers; not
        // offered.
        log::debug!(
            "virtio-net {}: ignored config write at {offset} ({} bytes)",
            self.iface_id,
            data.len()
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActivatedQueue>,
    ) -> Result<(), ActivateError> {
        if self.state != State::Inactive {
            return Err(ActivateError::AlreadyActive);
        }
        let (pairs, ctrl) = self.sort_queues(queues)?;
        if let Err(e) = self.tap.set_offloads(self.acked) {
            log::warn!(
                "virtio-net {}: {e}; the tap keeps no offloads",
                self.iface_id
            );
        }
        let dup = |tap: &Tap| {
            tap.try_clone().map_err(|source| ActivateError::Os {
                what: "dup tap",
                source,
            })
        };
        if self.pairs > 1 {
            // Pairs the guest has not enabled get no frames (pair 0 always does).
            steer(
                (0..usize::from(self.pairs)).filter_map(|k| self.tap.queue(k)),
                self.gate.enabled(),
                &mut LogLimit::default(),
            );
        }
        let (owner_end, returned) = mpsc::channel();
        let mut handlers: Vec<Box<dyn dataplane::Handler>> = Vec::new();
        let mut pair_kicks = Vec::new();
        let mut ctrl_taps = Vec::new();
        for (k, (rx, tx)) in pairs.into_iter().enumerate() {
            let tap_q = self.tap.queue(k).ok_or_else(|| {
                ActivateError::BadConfig(format!("virtio-net: no tap queue for pair {k}"))
            })?;
            if ctrl.is_some() {
                pair_kicks.push(rx.kick.try_clone().map_err(|source| ActivateError::Os {
                    what: "dup kick",
                    source,
                })?);
                ctrl_taps.push(dup(tap_q)?);
            }
            let mut pair = NetQueuePair::new(
                self.owner,
                (rx, tx),
                &mem,
                interrupt.clone(),
                dup(tap_q)?,
                self.acked & features::MRG_RXBUF != 0,
                &self.rate_limits,
                self.stats.clone(),
            )
            .returning_to(owner_end.clone())
            .held_by(self.hold.clone());
            if k > 0 {
                pair = pair.gated(u16::try_from(k).unwrap_or(u16::MAX), self.gate.clone());
            }
            handlers.push(Box::new(pair));
        }
        if let Some(q) = ctrl {
            handlers.push(Box::new(
                CtrlHandler::new(
                    self.owner,
                    q,
                    &mem,
                    interrupt,
                    self.gate.clone(),
                    (ctrl_taps, pair_kicks),
                )
                .returning_to(owner_end),
            ));
        }
        self.iothread.attach(handlers)?;
        self.state = State::Active;
        self.returned = Some(returned);
        log::info!(
            "virtio-net {}: tap {} active on iothread {} (features {:#x}, {} of {} queue pairs enabled)",
            self.iface_id,
            self.tap.name(),
            self.iothread.name(),
            self.acked,
            self.gate.enabled(),
            self.pairs
        );
        Ok(())
    }

    fn reset(&mut self) -> ResetOutcome {
        if self.state == State::Inactive {
            return ResetOutcome::Inactive;
        }
        let wait = if self.state == State::Resetting {
            Duration::ZERO
        } else {
            RESET_WAIT
        };
        self.state = State::Resetting;
        match self.iothread.detach(self.owner, wait) {
            Ok(Detach::Done(_)) => {}
            Ok(Detach::Draining { in_flight }) => return ResetOutcome::Pending { in_flight },
            Err(e) => {
                log::error!("virtio-net {}: reset: {e}", self.iface_id);
                return ResetOutcome::Pending { in_flight: 0 };
            }
        }
        self.state = State::Inactive;
        // After a reset the driver starts again from one pair: the other tap queues take no
        // frames until it enables them.
        self.gate.set(1);
        if self.pairs > 1 {
            steer(
                (0..usize::from(self.pairs)).filter_map(|k| self.tap.queue(k)),
                1,
                &mut LogLimit::default(),
            );
        }
        let mut queues: Vec<ActivatedQueue> = self
            .returned
            .take()
            .map(|r| r.try_iter().collect())
            .unwrap_or_default();
        queues.sort_by_key(|q| q.index);
        ResetOutcome::Done(queues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tap::frame_pair;
    use crate::net::VNET_HDR_LEN;
    use crate::test_utils::queue::{desc, guest_memory, FakeInterrupt, F_NEXT, F_WRITE};
    use std::io::{Read, Write};
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{Address, Bytes, GuestAddress};
    use vmm_sys_util::eventfd::EventFd;

    fn wait_used(mem: &GuestMemory, vq: &MockSplitQueue<GuestMemory>, n: u16) {
        for _ in 0..2000 {
            let idx: u16 = mem
                .read_obj(vq.used_addr().unchecked_add(2))
                .expect("used idx");
            if idx == n {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("used idx never reached {n}");
    }

    /// Frames cross both ways through the iothread: a kicked tx chain reaches the tap, a frame
    /// written to the tap wakes the thread (the tap's fd) and lands in the rx ring; reset hands
    /// both queues back and a second activation is refused until then.
    #[test]
    fn frames_cross_both_ways_on_the_iothread_and_reset_returns_the_queues() {
        let mem = guest_memory(0x100_0000);
        let (dev_end, mut host) = frame_pair().expect("pair");
        let thread = IoThread::spawn("net-dev", 0).expect("iothread");
        let mut dev = VirtioNet::new(
            NetDeviceConfig {
                iface_id: "eth0".into(),
                tap: Tap::from_file(dev_end, "pair"),
                mac: Some([2, 0, 0, 0, 0, 1]),
                rate_limits: NetRateLimits::default(),
            },
            thread.clone(),
        );
        assert_eq!(dev.device_type(), 1);
        assert_ne!(dev.features() & features::MAC, 0);
        dev.ack_features(dev.features());
        let rx = MockSplitQueue::create(&mem, GuestAddress(0), 16);
        let tx = MockSplitQueue::create(&mem, GuestAddress(0x1000), 16);
        rx.add_desc_chains(&[desc(0x20_0000, 2048, F_WRITE, 0)], 0)
            .expect("rx chain");
        let tx_kick = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
        let queues = vec![
            ActivatedQueue {
                index: 0,
                queue: rx.create_queue().expect("q"),
                kick: EventFd::new(libc::EFD_NONBLOCK).expect("efd"),
                inflight: None,
            },
            ActivatedQueue {
                index: 1,
                queue: tx.create_queue().expect("q"),
                kick: tx_kick.try_clone().expect("dup"),
                inflight: None,
            },
        ];
        let irq = FakeInterrupt::new();
        dev.activate(mem.clone(), irq.clone(), queues)
            .expect("activate");
        assert!(matches!(
            dev.activate(mem.clone(), irq.clone(), Vec::new()),
            Err(ActivateError::AlreadyActive)
        ));

        let out: Vec<u8> = (0..100u8).collect();
        mem.write_slice(&out, GuestAddress(0x30_0000)).expect("w");
        tx.add_desc_chains(
            &[
                desc(0x30_0000, VNET_HDR_LEN as u32, F_NEXT, 1),
                desc(0x30_0000 + VNET_HDR_LEN as u64, 88, 0, 0),
            ],
            0,
        )
        .expect("tx chain");
        tx_kick.write(1).expect("kick");
        wait_used(&mem, &tx, 1);
        let mut buf = [0u8; 256];
        let n = host.read(&mut buf).expect("the frame reached the tap");
        assert_eq!(&buf[..n], &out[..]);

        let inbound: Vec<u8> = (0..80u8).rev().collect();
        host.write_all(&inbound).expect("to the guest");
        wait_used(&mem, &rx, 1);
        let mut got = vec![0u8; inbound.len()];
        mem.read_slice(&mut got, GuestAddress(0x20_0000))
            .expect("r");
        assert_eq!(&got[VNET_HDR_LEN..], &inbound[VNET_HDR_LEN..]);
        let s = dev.stats().snapshot();
        assert_eq!((s.tx_frames, s.rx_frames), (1, 1));

        assert!(matches!(dev.reset(), ResetOutcome::Done(q) if q.len() == 2));
        assert!(matches!(dev.reset(), ResetOutcome::Inactive));
        thread.shutdown();
    }
}
