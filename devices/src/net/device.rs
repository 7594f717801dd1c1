//! The virtio-net device model: features (the offloads Firecracker offers, MRG_RXBUF, the MAC
//! when one is set), the config space, and activation, which sets the tap's offloads for what
//! the driver accepted and moves the queue pair onto the NIC's iothread; reset takes the queues
//! back. One queue pair (rx 0, tx 1).

use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

use dataplane::{Detach, IoThread};

use super::handler::NetQueuePair;
use super::stats::NetStats;
use super::tap::Tap;
use super::throttle::NetRateLimits;
use super::{encode_config, features, read_config, Mac, CONFIG_LEN, QUEUE_SIZE};
use crate::block::queue::next_owner_id;
use crate::virtio::{
    device_type, ActivateError, ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice,
    VirtioInterrupt, VIRTIO_F_VERSION_1, VIRTIO_RING_F_EVENT_IDX,
};

/// How long the guest's reset waits for the pair to leave its iothread.
const RESET_WAIT: Duration = Duration::from_millis(500);

/// What the VMM decided about a NIC.
#[derive(Debug)]
pub struct NetDeviceConfig {
    /// The interface id (`iface_id`).
    pub iface_id: String,
    /// The opened tap (opened before the sandbox).
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
    queue_sizes: [u16; 2],
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
        Self {
            owner: next_owner_id(),
            iface_id: cfg.iface_id,
            tap: cfg.tap,
            queue_sizes: [QUEUE_SIZE; 2],
            offered,
            acked: 0,
            config_space: encode_config(cfg.mac, 1),
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
        let mut queues = queues.into_iter();
        let (Some(rx), Some(tx), None) = (queues.next(), queues.next(), queues.next()) else {
            return Err(ActivateError::BadConfig(
                "virtio-net needs its rx and tx queues (0 and 1) ready".into(),
            ));
        };
        if (rx.index, tx.index) != (0, 1) {
            return Err(ActivateError::BadConfig(format!(
                "virtio-net queues {} and {} are not a pair",
                rx.index, tx.index
            )));
        }
        if let Err(e) = self.tap.set_offloads(self.acked) {
            log::warn!(
                "virtio-net {}: {e}; the tap keeps no offloads",
                self.iface_id
            );
        }
        let tap = self.tap.try_clone().map_err(|source| ActivateError::Os {
            what: "dup tap",
            source,
        })?;
        let (owner_end, returned) = mpsc::channel();
        let pair = NetQueuePair::new(
            self.owner,
            (rx, tx),
            &mem,
            interrupt,
            tap,
            self.acked & features::MRG_RXBUF != 0,
            &self.rate_limits,
            self.stats.clone(),
        )
        .returning_to(owner_end);
        self.iothread.attach(vec![Box::new(pair)])?;
        self.state = State::Active;
        self.returned = Some(returned);
        log::info!(
            "virtio-net {}: tap {} active on iothread {} (features {:#x})",
            self.iface_id,
            self.tap.name(),
            self.iothread.name(),
            self.acked
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
