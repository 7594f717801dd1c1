//! virtio-blk: the device model ([`device`]), its config space ([`config`]), request parsing
//! against hostile guest memory ([`request`]), the per-queue handler that runs on an iothread
//! ([`queue`]), its rate-limit state ([`throttle`]) and its counters ([`stats`]).

pub mod config;
pub mod device;
pub mod queue;
pub mod request;
pub mod stats;
pub mod throttle;

pub use device::{BlockDeviceConfig, VirtioBlock};

/// Sector size of the virtio-blk protocol.
pub const SECTOR_SIZE: u64 = 512;
/// Bytes of the serial number GET_ID returns.
pub const ID_BYTES: usize = 20;

/// Feature bits (virtio 1.2, 5.2.3).
pub mod features {
    /// `seg_max` is valid.
    pub const SEG_MAX: u64 = 1 << 2;
    /// Read-only device.
    pub const RO: u64 = 1 << 5;
    /// `blk_size` is valid.
    pub const BLK_SIZE: u64 = 1 << 6;
    /// FLUSH is supported.
    pub const FLUSH: u64 = 1 << 9;
    /// `num_queues` is valid.
    pub const MQ: u64 = 1 << 12;
    /// DISCARD is supported.
    pub const DISCARD: u64 = 1 << 13;
    /// WRITE_ZEROES is supported.
    pub const WRITE_ZEROES: u64 = 1 << 14;
}

/// Request types.
pub mod request_type {
    /// Read.
    pub const IN: u32 = 0;
    /// Write.
    pub const OUT: u32 = 1;
    /// Flush.
    pub const FLUSH: u32 = 4;
    /// Device id string.
    pub const GET_ID: u32 = 8;
    /// Discard.
    pub const DISCARD: u32 = 11;
    /// Write zeroes.
    pub const WRITE_ZEROES: u32 = 13;
}

/// Status values.
pub mod status {
    /// Success.
    pub const OK: u8 = 0;
    /// I/O error, or a malformed request.
    pub const IOERR: u8 = 1;
    /// Unsupported request.
    pub const UNSUPP: u8 = 2;
}
