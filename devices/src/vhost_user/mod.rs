//! vhost-user: serving a [`crate::virtio::VirtioDevice`] (virtio-blk) to a frontend in another
//! process (QEMU, Cloud Hypervisor), which shares guest memory and hands over each queue's kick
//! and call eventfds. The protocol's framing and fd passing are rust-vmm's `vhost` crate; this
//! module is the transport between its messages and the device (`docs/ARCHITECTURE.md`,
//! "vhost-user-blk backend"): the frontend's memory table ([`memory`]), each ring's state
//! ([`ring`]), the call eventfds as the device's interrupt ([`interrupt`]), the inflight region
//! a restarted backend resubmits from ([`inflight`]), the message handler ([`transport`]),
//! the socket loop ([`server`]) and the zero pages over memory a frontend shrank under running
//! rings ([`fault`]).

pub mod fault;
pub mod inflight;
pub mod interrupt;
pub mod memory;
pub mod ring;
pub mod server;
pub mod transport;

pub use server::{serve_connection, VhostUserServer};
pub use transport::VhostUserDevice;

/// What the vhost-user transport fails with.
#[derive(Debug, thiserror::Error)]
pub enum VhostUserError {
    /// `SET_MEM_TABLE` could not be mapped.
    #[error("memory table: {0}")]
    MemoryTable(String),
    /// Two regions of `SET_MEM_TABLE` overlap, in guest or in frontend addresses.
    #[error(
        "memory table: region at {gpa:#x} (frontend {frontend_va:#x}, {len:#x} bytes) overlaps \
         the one at {other_gpa:#x} (frontend {other_frontend_va:#x}, {other_len:#x} bytes)"
    )]
    RegionOverlap {
        /// The later region's guest-physical address.
        gpa: u64,
        /// Its address in the frontend.
        frontend_va: u64,
        /// Its size.
        len: u64,
        /// The earlier region's guest-physical address.
        other_gpa: u64,
        /// Its address in the frontend.
        other_frontend_va: u64,
        /// Its size.
        other_len: u64,
    },
    /// A ring cannot start as configured.
    #[error("ring {index}: {why}")]
    Ring {
        /// The ring.
        index: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A memory region could not be mapped.
    #[error("memory table: mmap of {gpa:#x}: {source}")]
    MapRegion {
        /// The region's guest-physical address.
        gpa: u64,
        /// Why.
        source: vm_memory::mmap::MmapRegionError,
    },
    /// The mapped regions do not make one guest memory (they overlap, for one).
    #[error("memory table: {0}")]
    Regions(#[source] vm_memory::GuestRegionCollectionError),
    /// virtio-queue refused a ring's configuration.
    #[error("ring {index}: {what}: {source}")]
    RingConfig {
        /// The ring.
        index: usize,
        /// The setting refused (and its value).
        what: String,
        /// What virtio-queue said.
        source: virtio_queue::Error,
    },
    /// A ring's kick eventfd could not be duplicated.
    #[error("ring {index}: dup of the kick eventfd: {source}")]
    RingKick {
        /// The ring.
        index: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// `GET_INFLIGHT_FD` or `SET_INFLIGHT_FD` cannot be served as asked.
    #[error("inflight region: {0}")]
    Inflight(String),
    /// An OS call for the inflight region failed.
    #[error("inflight region: {what}: {source}")]
    InflightOs {
        /// The call.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The inflight region could not be mapped.
    #[error("inflight region: mmap: {0}")]
    InflightMap(#[source] vm_memory::mmap::MmapRegionError),
    /// The device refused to start.
    #[error("activation: {0}")]
    Activate(#[source] crate::virtio::ActivateError),
    /// The device did not finish its in-flight I/O in time to stop.
    #[error("stopping the device: {in_flight} requests still in flight")]
    Draining {
        /// Requests still in flight.
        in_flight: usize,
    },
    /// The socket could not be set up or accepted on.
    #[error("socket {path}: {source}")]
    Socket {
        /// The socket's path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
