//! Network interfaces on the PCI bus: each `network-interfaces` entry becomes a virtio-net
//! device over the tap the preflight opened, served by its iothread, with its rx/tx rate
//! limiters (kept in the [`NicHandle`] for a live `PATCH`).

use std::sync::{Arc, Mutex};

use dataplane::rate_limit::RateLimiter;
use dataplane::IoThread;
use devices::net::mq::PairGate;
use devices::net::throttle::NetRateLimits;
use devices::net::{NetDeviceConfig, NetStats, Tap, VirtioNet};
use devices::virtio::hold::Hold;
use devices::virtio::pci::VirtioPciDevice;

use super::{AttachError, Attached, DeviceError, PciWiring};
use crate::net::NetworkInterfaceConfig;

/// Why a network interface could not be put on the bus.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    /// It could not be put on the PCI bus.
    #[error(transparent)]
    Attach(AttachError),
    /// It names an iothread that was not started (the config's defaults were not filled in).
    #[error("iothread `{0}` missing")]
    NoIoThread(String),
}

/// A network interface as the rest of the VMM sees it.
#[derive(Debug)]
pub struct NicHandle {
    /// `iface_id`.
    pub id: String,
    /// Its PCI slot.
    pub slot: u8,
    /// Its counters.
    pub stats: Arc<NetStats>,
    /// Its rx and tx limiters (set live with `RateLimiter::set`, then wake `iothread`).
    pub rate_limits: NetRateLimits,
    /// The iothread serving it.
    pub iothread: Arc<IoThread>,
    /// Its virtio-pci function (a snapshot saves and restores its state).
    pub transport: Arc<Mutex<VirtioPciDevice>>,
    /// The queue pairs the guest enabled (1 without multi-queue; a snapshot saves it).
    pub pairs: PairGate,
    /// The queue pairs the device has (`num_queues / 2`).
    pub max_pairs: u16,
    /// Set while a snapshot reads its state ([`NicHandle::hold`]).
    pub hold: Hold,
}

impl NicHandle {
    /// Holds the NIC still: once this returns, its pairs read no frame from the tap and write
    /// nothing to guest memory until [`NicHandle::release`] (a turn in progress when the hold
    /// was set has ended: the iothread ran a no-op between two turns).
    pub fn hold(&self) -> Result<(), dataplane::IoThreadError> {
        self.hold.hold_on(&self.iothread)
    }

    /// Ends a hold; the queues are nudged so the pairs look at what waited (frames in the
    /// tap, chains on the tx ring).
    pub fn release(&self) {
        self.hold.release(&self.transport);
    }
}

impl PciWiring<'_> {
    /// Interface `i` as a virtio-net device over `tap`, on the next PCI slot.
    pub(super) fn add_nic(
        &mut self,
        i: usize,
        n: &NetworkInterfaceConfig,
        tap: Tap,
        iothreads: &std::collections::BTreeMap<String, Arc<IoThread>>,
    ) -> Result<NicHandle, DeviceError> {
        let err = |source| DeviceError::Nic { index: i, source };
        let thread_id = n.iothread.clone().unwrap_or_default();
        let thread = iothreads
            .get(&thread_id)
            .cloned()
            .ok_or_else(|| err(NicError::NoIoThread(thread_id.clone())))?;
        let limiter = |c: &Option<crate::rate_limit::RateLimiterConfig>| -> Arc<RateLimiter> {
            Arc::new(RateLimiter::new(c.unwrap_or_default().to_dataplane()))
        };
        let rate_limits = NetRateLimits {
            rx: limiter(&n.rx_rate_limiter),
            tx: limiter(&n.tx_rate_limiter),
        };
        let tap_name = tap.name().to_string();
        let net = VirtioNet::new(
            NetDeviceConfig {
                iface_id: n.iface_id.clone(),
                tap,
                mac: n.mac(),
                rate_limits: rate_limits.clone(),
            },
            thread.clone(),
        );
        let stats = net.stats();
        let (pairs, max_pairs, hold) = (net.pair_gate(), net.max_pairs(), net.hold());
        let Attached { slot, transport } = self
            .attach(Box::new(net))
            .map_err(|e| err(NicError::Attach(e)))?;
        log::info!(
            "network-interfaces[{i}] {}: virtio-net at 00:{slot:02x}.0 on tap {tap_name}, iothread {thread_id}",
            n.iface_id
        );
        Ok(NicHandle {
            id: n.iface_id.clone(),
            slot,
            stats,
            rate_limits,
            iothread: thread,
            transport,
            pairs,
            max_pairs,
            hold,
        })
    }
}
