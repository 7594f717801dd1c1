//! virtio-blk: the device model ([`device`]), its config space ([`config`]), request parsing
//! against hostile guest memory ([`request`]), the per-queue handler that runs on an iothread
//! ([`queue`]), its rate-limit state ([`throttle`]), its counters ([`stats`]) and the live swap
//! of its backing file ([`swap`]).

pub mod config;
pub mod device;
pub mod queue;
pub mod request;
#[cfg(feature = "stage-stamps")]
pub mod stage_stamps;
pub mod stats;
pub mod swap;
pub mod throttle;

pub use device::{BlockDeviceConfig, VirtioBlock};
pub use swap::{DriveSwap, SwapError};

use virtio_bindings::virtio_blk as vb;

/// Sector size of the virtio-blk protocol.
pub const SECTOR_SIZE: u64 = 512;
/// Bytes of the serial number GET_ID returns.
pub const ID_BYTES: usize = vb::VIRTIO_BLK_ID_BYTES as usize;

/// Feature bits (virtio 1.2, 5.2.3), as masks of the bit numbers in `virtio-bindings`.
pub mod features {
    use super::vb;

    /// `seg_max` is valid.
    pub const SEG_MAX: u64 = 1 << vb::VIRTIO_BLK_F_SEG_MAX;
    /// Read-only device.
    pub const RO: u64 = 1 << vb::VIRTIO_BLK_F_RO;
    /// `blk_size` is valid.
    pub const BLK_SIZE: u64 = 1 << vb::VIRTIO_BLK_F_BLK_SIZE;
    /// FLUSH is supported.
    pub const FLUSH: u64 = 1 << vb::VIRTIO_BLK_F_FLUSH;
    /// `num_queues` is valid.
    pub const MQ: u64 = 1 << vb::VIRTIO_BLK_F_MQ;
    /// DISCARD is supported.
    pub const DISCARD: u64 = 1 << vb::VIRTIO_BLK_F_DISCARD;
    /// WRITE_ZEROES is supported.
    pub const WRITE_ZEROES: u64 = 1 << vb::VIRTIO_BLK_F_WRITE_ZEROES;
}

/// Request types (`virtio-bindings`' `VIRTIO_BLK_T_*`).
pub mod request_type {
    use super::vb;

    /// Read.
    pub const IN: u32 = vb::VIRTIO_BLK_T_IN;
    /// Write.
    pub const OUT: u32 = vb::VIRTIO_BLK_T_OUT;
    /// Flush.
    pub const FLUSH: u32 = vb::VIRTIO_BLK_T_FLUSH;
    /// Device id string.
    pub const GET_ID: u32 = vb::VIRTIO_BLK_T_GET_ID;
    /// Discard.
    pub const DISCARD: u32 = vb::VIRTIO_BLK_T_DISCARD;
    /// Write zeroes.
    pub const WRITE_ZEROES: u32 = vb::VIRTIO_BLK_T_WRITE_ZEROES;
}

/// Status values (`virtio-bindings`' `VIRTIO_BLK_S_*`, as the status byte the device writes).
pub mod status {
    use super::vb;

    /// Success.
    pub const OK: u8 = vb::VIRTIO_BLK_S_OK as u8;
    /// I/O error, or a malformed request.
    pub const IOERR: u8 = vb::VIRTIO_BLK_S_IOERR as u8;
    /// Unsupported request.
    pub const UNSUPP: u8 = vb::VIRTIO_BLK_S_UNSUPP as u8;
}
