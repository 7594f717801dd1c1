//! Virtio device models and the contract between a device model and its transport.
//!
//! A device model ([`VirtioDevice`], e.g. virtio-blk) knows the virtio semantics of its queues
//! and config space; a transport (virtio-pci, in [`pci`]) knows the register layout and owns the
//! queues until the driver sets `DRIVER_OK`. Then the transport moves the configured queues, their
//! ioeventfds and an interrupt handle into the device ([`VirtioDevice::activate`]); on reset the
//! device stops, drains in-flight I/O and hands them back ([`VirtioDevice::reset`]).

use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

pub mod hold;
pub mod host_ring;
pub mod inflight;
pub mod pci;
pub mod waste;

/// The guest memory type every device uses.
pub type GuestMemory = vm_memory::GuestMemoryMmap<()>;

use virtio_bindings::{virtio_config, virtio_ids, virtio_ring};

/// Feature bit: virtio 1.x (modern) device.
pub const VIRTIO_F_VERSION_1: u64 = 1 << virtio_config::VIRTIO_F_VERSION_1;
/// Feature bit: indirect descriptors.
pub const VIRTIO_RING_F_INDIRECT_DESC: u64 = 1 << virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;
/// Feature bit: `used_event`/`avail_event` notification suppression.
pub const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << virtio_ring::VIRTIO_RING_F_EVENT_IDX;

/// Device status bits (virtio 1.2, 2.1), from `virtio-bindings`' `VIRTIO_CONFIG_S_*`.
pub mod status {
    use virtio_bindings::virtio_config as vc;

    /// The guest noticed the device.
    pub const ACKNOWLEDGE: u8 = vc::VIRTIO_CONFIG_S_ACKNOWLEDGE as u8;
    /// The guest has a driver for it.
    pub const DRIVER: u8 = vc::VIRTIO_CONFIG_S_DRIVER as u8;
    /// The driver is ready: the device may process queues.
    pub const DRIVER_OK: u8 = vc::VIRTIO_CONFIG_S_DRIVER_OK as u8;
    /// Feature negotiation is complete.
    pub const FEATURES_OK: u8 = vc::VIRTIO_CONFIG_S_FEATURES_OK as u8;
    /// The device hit an error it cannot recover from without a reset.
    pub const DEVICE_NEEDS_RESET: u8 = vc::VIRTIO_CONFIG_S_NEEDS_RESET as u8;
    /// The driver gave up on the device.
    pub const FAILED: u8 = vc::VIRTIO_CONFIG_S_FAILED as u8;
}

/// Device type ids (virtio 1.2, 5).
pub mod device_type {
    /// virtio-blk.
    pub const BLOCK: u32 = super::virtio_ids::VIRTIO_ID_BLOCK;
    /// virtio-net.
    pub const NET: u32 = super::virtio_ids::VIRTIO_ID_NET;
}

/// How a device model signals the guest. Implemented by the transport (MSI-X for virtio-pci).
/// Cheap and callable from any thread (the dataplane thread calls it once per round per queue).
pub trait VirtioInterrupt: Send + Sync {
    /// Signals a used-buffer notification for queue `queue`.
    fn notify_queue(&self, queue: u16) -> std::io::Result<()>;
    /// Signals a configuration change (e.g. after `DEVICE_NEEDS_RESET`).
    fn notify_config(&self) -> std::io::Result<()>;
    /// Sets `DEVICE_NEEDS_RESET` in the device status and signals a configuration change.
    fn set_needs_reset(&self);
}

/// A configured queue moved from the transport into the device at activation.
#[derive(Debug)]
pub struct ActivatedQueue {
    /// Queue index.
    pub index: u16,
    /// The queue, with size, ring addresses, ready bit and EVENT_IDX set by the driver.
    pub queue: virtio_queue::Queue,
    /// The queue's notification eventfd (already registered as a KVM ioeventfd on its notify
    /// address; a `try_clone` of the transport's fd, so both see the same counter).
    pub kick: EventFd,
    /// Inflight tracking in memory the frontend keeps (vhost-user with `INFLIGHT_SHMFD`; `None`
    /// otherwise). The device hands it back with the queue at reset.
    pub inflight: Option<inflight::InflightQueue>,
}

/// Why activation failed.
#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    /// The driver left the device unusable (e.g. no queue is ready).
    #[error("Bad driver configuration: {0}")]
    BadConfig(String),
    /// The driver configured a queue the device cannot use.
    #[error("Bad driver configuration: queue {index}: {source}")]
    Queue {
        /// The queue.
        index: usize,
        /// What virtio-queue refused.
        source: virtio_queue::Error,
    },
    /// An OS call setting up the backend failed (duplicating a file or an eventfd).
    #[error("Backend set-up failed: {what}: {source}")]
    Os {
        /// The step.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The iothread refused the device's queues (their engines, their fds) or did not answer.
    #[error("Backend set-up failed: {0}")]
    IoThread(#[from] dataplane::IoThreadError),
    /// The device is already active (it must be reset first).
    #[error("The device is already active")]
    AlreadyActive,
}

/// What a device reset achieved.
#[derive(Debug)]
pub enum ResetOutcome {
    /// The device was not active: nothing to stop.
    Inactive,
    /// The device stopped and its in-flight I/O finished; its queues come back.
    Done(Vec<ActivatedQueue>),
    /// Requests are still in flight and may yet write guest memory: the reset is not done, and
    /// the transport must not report it done to the driver. Call `reset` again later.
    Pending {
        /// Requests still in flight.
        in_flight: usize,
    },
}

/// A virtio device model, independent of its transport.
pub trait VirtioDevice: Send {
    /// The virtio device type id ([`device_type`]).
    fn device_type(&self) -> u32;
    /// The maximum size of each queue; its length is the number of queues.
    fn queue_max_sizes(&self) -> &[u16];
    /// The features the device offers (including transport bits like VERSION_1 and EVENT_IDX).
    fn features(&self) -> u64;
    /// The features the driver accepted, once it sets `FEATURES_OK` (a subset of `features`).
    fn ack_features(&mut self, features: u64);
    /// Reads the device-specific config space.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Writes the device-specific config space.
    fn write_config(&mut self, offset: u64, data: &[u8]);
    /// Starts processing: the driver set `DRIVER_OK`. `queues` holds every queue the driver marked
    /// ready, in index order.
    fn activate(
        &mut self,
        mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActivatedQueue>,
    ) -> Result<(), ActivateError>;
    /// Stops processing and waits (bounded) for in-flight requests to complete. A `Pending`
    /// answer means the device keeps draining: the transport calls `reset` again until it is
    /// `Done` (or `Inactive`), and only then reports the reset complete.
    fn reset(&mut self) -> ResetOutcome;
}
