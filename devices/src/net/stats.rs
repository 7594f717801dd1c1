//! virtio-net counters: written by the queue pair's handler on its iothread (one writer, so
//! relaxed loads and stores), read lock-free by anyone (tests, the API). Declared once with
//! `osprey_metrics::metric_set!`: each field's doc comment and `#[metric]` attribute feed a NIC's
//! JSON in `GET /metrics`, the Prometheus view and docs/api/metrics.md; Firecracker's `net`
//! groups of the metrics file are mapped from these fields (`vmm_config::metrics::firecracker`).

use std::sync::atomic::{AtomicU64, Ordering};

osprey_metrics::metric_set! {
    snapshot NetStatsSnapshot;
    /// Counters of one queue pair.
    #[derive(Debug, Default)]
    pub struct NetStats {
        /// Frames delivered to the guest.
        #[metric(counter)]
        pub rx_frames: AtomicU64,
        /// Bytes delivered to the guest (virtio-net header excluded).
        #[metric(counter, bytes)]
        pub rx_bytes: AtomicU64,
        /// Frames read from the tap and dropped: shorter than a header, larger than the
        /// guest's buffers (without MRG_RXBUF), or offered to a broken rx chain.
        #[metric(counter)]
        pub rx_dropped: AtomicU64,
        /// Times the tap had a frame and the guest had posted no rx buffer for it (the frame
        /// waits, one at most; later frames stay in the tap, which drops them when its queue is
        /// full).
        #[metric(counter)]
        pub rx_no_buffers: AtomicU64,
        /// Frames sent to the tap.
        #[metric(counter)]
        pub tx_frames: AtomicU64,
        /// Bytes sent to the tap (virtio-net header excluded).
        #[metric(counter, bytes)]
        pub tx_bytes: AtomicU64,
        /// Guest frames dropped: malformed chains (a write-only descriptor, a buffer outside
        /// guest memory, too many descriptors), oversized or undersized frames.
        #[metric(counter)]
        pub tx_malformed: AtomicU64,
        /// Guest frames the tap refused with an error other than a full queue (e.g. the tap
        /// was deleted): dropped.
        #[metric(counter)]
        pub tx_errors: AtomicU64,
        /// Times the tap's queue was full: the frame stayed on the ring (back-pressure).
        #[metric(counter)]
        pub tx_tap_full: AtomicU64,
        /// Times a rate limiter stopped the receive side.
        #[metric(counter)]
        pub rx_throttled: AtomicU64,
        /// Times a rate limiter stopped the transmit side.
        #[metric(counter)]
        pub tx_throttled: AtomicU64,
        /// Interrupts sent to the guest.
        #[metric(counter)]
        pub notifications: AtomicU64,
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_metrics::{Kind, MetricSet, Unit};

    #[test]
    fn every_counter_is_declared_and_read_in_order() {
        let s = NetStats::default();
        NetStats::add(&s.rx_frames, 3);
        NetStats::add(&s.tx_bytes, 1500);
        NetStats::add(&s.tx_throttled, 1);
        let fields: Vec<&str> = NetStats::METRICS.iter().map(|m| m.field).collect();
        assert_eq!(fields.len(), 12);
        assert!(NetStats::METRICS.iter().all(|m| m.kind == Kind::Counter));
        let unit = |f: &str| {
            NetStats::METRICS
                .iter()
                .find(|m| m.field == f)
                .map(|m| m.unit)
        };
        assert_eq!(unit("rx_bytes"), Some(Unit::Bytes));
        assert_eq!(unit("rx_frames"), Some(Unit::Count));
        let read: Vec<Option<u64>> = s.readings().iter().map(|r| r.number()).collect();
        let at = |f: &str| fields.iter().position(|x| *x == f).expect(f);
        assert_eq!(read[at("rx_frames")], Some(3));
        assert_eq!(read[at("tx_bytes")], Some(1500));
        assert_eq!(read[at("tx_throttled")], Some(1));
        assert_eq!(read[at("rx_bytes")], Some(0));
        let snap = s.snapshot();
        assert_eq!((snap.rx_frames, snap.tx_bytes), (3, 1500));
    }
}
