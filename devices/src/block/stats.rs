//! virtio-blk counters: written by the queue handlers on their iothread (one writer each, so
//! relaxed loads and stores, no atomic read-modify-write), read lock-free by anyone (tests, the
//! API). `reset_pending` alone is written by the device (the vCPU thread that resets it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use osprey_metrics::Histogram;

/// Upper bounds of the batch-size histogram buckets (requests per submission call); the last
/// bucket counts everything larger.
pub const BATCH_BUCKETS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

osprey_metrics::metric_set! {
    /// Counters of one virtqueue. Each field is declared once here: its doc comment is the help
    /// text, its `#[metric]` attribute the kind and unit; a drive's JSON (its queues combined),
    /// the Prometheus view and docs/api/metrics.md derive from it (`osprey_metrics`).
    #[derive(Debug, Default)]
    pub struct QueueStats {
        /// Guest notifications (queue kicks) seen: wake-ups by the queue's ioeventfd
        /// (edge-triggered, so kicks that arrive before the thread looks count once).
        #[metric(counter)]
        pub kicks: AtomicU64,
        /// Requests completed (any status).
        #[metric(counter)]
        pub requests: AtomicU64,
        /// Bytes read by the guest.
        #[metric(counter, bytes)]
        pub read_bytes: AtomicU64,
        /// Bytes written by the guest.
        #[metric(counter, bytes)]
        pub write_bytes: AtomicU64,
        /// Flush requests completed.
        #[metric(counter)]
        pub flushes: AtomicU64,
        /// Requests completed with VIRTIO_BLK_S_IOERR (I/O errors and malformed requests).
        #[metric(counter)]
        pub io_errors: AtomicU64,
        /// Requests completed with VIRTIO_BLK_S_UNSUPP.
        #[metric(counter)]
        pub unsupported: AtomicU64,
        /// Malformed requests and broken descriptor chains.
        #[metric(counter)]
        pub malformed: AtomicU64,
        /// Interrupts sent to the guest.
        #[metric(counter)]
        pub notifications: AtomicU64,
        /// Turns that stopped because the I/O engine was full (requests stayed on the ring).
        #[metric(counter)]
        pub engine_full: AtomicU64,
        /// Submission calls to the I/O engine (commits that handed it at least one request).
        #[metric(counter)]
        pub submissions: AtomicU64,
        /// Requests per submission call.
        #[metric(histogram, name = "batch_size", bounds = &BATCH_BUCKETS,
                 bounds_key = "batch_bounds", sum_key = "batch_sum")]
        pub batch_hist: Histogram<{ BATCH_BUCKETS.len() + 1 }>,
        /// Most requests in flight at once so far.
        #[metric(gauge, max)]
        pub inflight_max: AtomicU64,
        /// Requests the engine held at the queue's last drain or broken-queue turn: what a
        /// pending reset waits for.
        #[metric(gauge)]
        pub in_flight: AtomicU64,
        /// A guest reset waits for in-flight requests the backing store has not completed
        /// (written by the device).
        #[metric(flag)]
        pub reset_pending: AtomicU64,
        /// Auto engine: reads and writes completed inline (RWF_NOWAIT) on the iothread.
        #[metric(counter)]
        pub inline_requests: AtomicU64,
        /// Auto engine: reads and writes handed to the asynchronous engine.
        #[metric(counter)]
        pub deferred_requests: AtomicU64,
        /// Auto engine: buffered writes run by one io_submit per turn (also counted in
        /// deferred_requests).
        #[metric(counter)]
        pub batched_writes: AtomicU64,
        /// Auto engine, direct: reads and writes handed to Linux AIO beside the ring while
        /// fewer than 4 requests were in flight (also counted in deferred_requests).
        #[metric(counter)]
        pub shallow_requests: AtomicU64,
        /// Times a queue stopped taking requests because a rate limiter's bucket was dry.
        #[metric(counter)]
        pub throttled_events: AtomicU64,
        /// Time the queues spent stopped by a rate limiter.
        #[metric(counter, ns)]
        pub throttled_ns: AtomicU64,
        /// The I/O engine in force, as it describes itself.
        #[metric(text)]
        pub engine: Mutex<String>,
    }
}

impl QueueStats {
    /// Adds `n` to `counter`. Only the queue's iothread writes these counters, so a relaxed load
    /// and store do (no lock-prefixed read-modify-write on the request path).
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Records one submission call of `n` requests.
    pub fn record_batch(&self, n: u64) {
        if n == 0 {
            return;
        }
        Self::add(&self.submissions, 1);
        self.batch_hist.observe(&BATCH_BUCKETS, n);
    }

    /// Raises the in-flight high-water mark to `n` if it is higher.
    pub fn record_inflight(&self, n: u64) {
        if n > self.inflight_max.load(Ordering::Relaxed) {
            self.inflight_max.store(n, Ordering::Relaxed);
        }
    }

    /// The largest batch bound with a non-zero count (`u64::MAX` for the overflow bucket).
    pub fn largest_batch_bound(&self) -> Option<u64> {
        self.batch_hist
            .counts()
            .iter()
            .rposition(|&c| c > 0)
            .map(|i| BATCH_BUCKETS.get(i).copied().unwrap_or(u64::MAX))
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
    /// See [`QueueStats::submissions`].
    pub submissions: u64,
    /// See [`QueueStats::batch_hist`].
    pub batch_hist: [u64; BATCH_BUCKETS.len() + 1],
    /// See [`QueueStats::inflight_max`].
    pub inflight_max: u64,
    /// See [`QueueStats::in_flight`].
    pub in_flight: u64,
    /// See [`QueueStats::reset_pending`].
    pub reset_pending: bool,
    /// See [`QueueStats::inline_requests`].
    pub inline_requests: u64,
    /// See [`QueueStats::deferred_requests`].
    pub deferred_requests: u64,
    /// See [`QueueStats::batched_writes`].
    pub batched_writes: u64,
    /// See [`QueueStats::shallow_requests`].
    pub shallow_requests: u64,
    /// See [`QueueStats::throttled_events`].
    pub throttled_events: u64,
    /// See [`QueueStats::throttled_ns`].
    pub throttled_ns: u64,
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
            submissions: g(&self.submissions),
            batch_hist: self.batch_hist.counts(),
            inflight_max: g(&self.inflight_max),
            in_flight: g(&self.in_flight),
            reset_pending: g(&self.reset_pending) != 0,
            inline_requests: g(&self.inline_requests),
            deferred_requests: g(&self.deferred_requests),
            batched_writes: g(&self.batched_writes),
            shallow_requests: g(&self.shallow_requests),
            throttled_events: g(&self.throttled_events),
            throttled_ns: g(&self.throttled_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_land_in_their_buckets() {
        let s = QueueStats::default();
        assert_eq!(s.largest_batch_bound(), None);
        for n in [0, 1, 3, 4, 5, 32, 33, 300] {
            s.record_batch(n);
        }
        let snap = s.snapshot();
        assert_eq!(snap.submissions, 7, "empty commits are not submissions");
        assert_eq!(snap.batch_hist, [1, 0, 2, 1, 0, 1, 1, 0, 0, 1]);
        assert_eq!(s.largest_batch_bound(), Some(u64::MAX));
        s.record_inflight(5);
        s.record_inflight(3);
        assert_eq!(s.snapshot().inflight_max, 5);
    }
}
