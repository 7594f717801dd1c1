//! virtio-blk counters: written by the queue handlers on their iothread, read lock-free by
//! anyone (tests, the API).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one virtqueue.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Kicks received (ioeventfd writes, as counted by the eventfd).
    pub kicks: AtomicU64,
    /// Requests completed (any status).
    pub requests: AtomicU64,
    /// Bytes read by the guest.
    pub read_bytes: AtomicU64,
    /// Bytes written by the guest.
    pub write_bytes: AtomicU64,
    /// Flushes completed.
    pub flushes: AtomicU64,
    /// Requests completed with IOERR (I/O errors and malformed requests).
    pub io_errors: AtomicU64,
    /// Requests completed with UNSUPP.
    pub unsupported: AtomicU64,
    /// Malformed requests (a subset of the errors above, plus broken chains).
    pub malformed: AtomicU64,
    /// Guest notifications (interrupts) sent.
    pub notifications: AtomicU64,
    /// Times the engine was full and requests stayed on the ring.
    pub engine_full: AtomicU64,
}

impl QueueStats {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A snapshot of one queue's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStatsSnapshot {
    /// See [`QueueStats::kicks`].
    pub kicks: u64,
    /// See [`QueueStats::requests`].
    pub requests: u64,
    /// See [`QueueStats::read_bytes`].
    pub read_bytes: u64,
    /// See [`QueueStats::write_bytes`].
    pub write_bytes: u64,
    /// See [`QueueStats::flushes`].
    pub flushes: u64,
    /// See [`QueueStats::io_errors`].
    pub io_errors: u64,
    /// See [`QueueStats::unsupported`].
    pub unsupported: u64,
    /// See [`QueueStats::malformed`].
    pub malformed: u64,
    /// See [`QueueStats::notifications`].
    pub notifications: u64,
    /// See [`QueueStats::engine_full`].
    pub engine_full: u64,
}

impl QueueStats {
    /// Reads every counter.
    pub fn snapshot(&self) -> QueueStatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        QueueStatsSnapshot {
            kicks: g(&self.kicks),
            requests: g(&self.requests),
            read_bytes: g(&self.read_bytes),
            write_bytes: g(&self.write_bytes),
            flushes: g(&self.flushes),
            io_errors: g(&self.io_errors),
            unsupported: g(&self.unsupported),
            malformed: g(&self.malformed),
            notifications: g(&self.notifications),
            engine_full: g(&self.engine_full),
        }
    }
}
