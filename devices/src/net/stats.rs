//! virtio-net counters: written by the queue pair's handler on its iothread (one writer, so
//! relaxed loads and stores), read lock-free by anyone (tests, the API).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one queue pair.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Frames delivered to the guest.
    pub rx_frames: AtomicU64,
    /// Bytes delivered to the guest (virtio-net header excluded).
    pub rx_bytes: AtomicU64,
    /// Frames read from the tap and dropped: shorter than a header, larger than the guest's
    /// buffers (without MRG_RXBUF), or offered to a broken rx chain.
    pub rx_dropped: AtomicU64,
    /// Times the tap had a frame and the guest had posted no rx buffer for it (the frame waits,
    /// one at most; later frames stay in the tap, which drops them when its queue is full).
    pub rx_no_buffers: AtomicU64,
    /// Frames sent to the tap.
    pub tx_frames: AtomicU64,
    /// Bytes sent to the tap (virtio-net header excluded).
    pub tx_bytes: AtomicU64,
    /// Guest frames dropped: malformed chains (a write-only descriptor, a buffer outside guest
    /// memory, too many descriptors), oversized or undersized frames.
    pub tx_malformed: AtomicU64,
    /// Guest frames the tap refused with an error other than a full queue (e.g. the tap was
    /// deleted): dropped.
    pub tx_errors: AtomicU64,
    /// Times the tap's queue was full: the frame stayed on the ring (back-pressure).
    pub tx_tap_full: AtomicU64,
    /// Times a rate limiter stopped the receive side.
    pub rx_throttled: AtomicU64,
    /// Times a rate limiter stopped the transmit side.
    pub tx_throttled: AtomicU64,
    /// Interrupts sent to the guest.
    pub notifications: AtomicU64,
}

/// A copy of [`NetStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetStatsSnapshot {
    /// See [`NetStats::rx_frames`].
    pub rx_frames: u64,
    /// See [`NetStats::rx_bytes`].
    pub rx_bytes: u64,
    /// See [`NetStats::rx_dropped`].
    pub rx_dropped: u64,
    /// See [`NetStats::rx_no_buffers`].
    pub rx_no_buffers: u64,
    /// See [`NetStats::tx_frames`].
    pub tx_frames: u64,
    /// See [`NetStats::tx_bytes`].
    pub tx_bytes: u64,
    /// See [`NetStats::tx_malformed`].
    pub tx_malformed: u64,
    /// See [`NetStats::tx_errors`].
    pub tx_errors: u64,
    /// See [`NetStats::tx_tap_full`].
    pub tx_tap_full: u64,
    /// See [`NetStats::rx_throttled`].
    pub rx_throttled: u64,
    /// See [`NetStats::tx_throttled`].
    pub tx_throttled: u64,
    /// See [`NetStats::notifications`].
    pub notifications: u64,
}

impl NetStats {
    /// Adds `n` to a counter with a single writer (no read-modify-write instruction).
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// The counters now.
    pub fn snapshot(&self) -> NetStatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NetStatsSnapshot {
            rx_frames: g(&self.rx_frames),
            rx_bytes: g(&self.rx_bytes),
            rx_dropped: g(&self.rx_dropped),
            rx_no_buffers: g(&self.rx_no_buffers),
            tx_frames: g(&self.tx_frames),
            tx_bytes: g(&self.tx_bytes),
            tx_malformed: g(&self.tx_malformed),
            tx_errors: g(&self.tx_errors),
            tx_tap_full: g(&self.tx_tap_full),
            rx_throttled: g(&self.rx_throttled),
            tx_throttled: g(&self.tx_throttled),
            notifications: g(&self.notifications),
        }
    }
}
