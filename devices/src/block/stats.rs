//! virtio-blk counters: written by the queue handlers on their iothread (one writer each, so
//! relaxed loads and stores, no atomic read-modify-write), read lock-free by anyone (tests, the
//! API). `reset_pending` alone is written by the device (the vCPU thread that resets it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dataplane::engine::EngineInfo;
use osprey_metrics::{Histogram, Read, Reading, Snap};

/// Upper bounds of the batch-size histogram buckets (requests per submission call); the last
/// bucket counts everything larger.
pub const BATCH_BUCKETS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

osprey_metrics::metric_set! {
    snapshot QueueStatsSnapshot;
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
        /// The I/O engine in force, in one line (e.g. `Auto: inline, then IoUring`).
        #[metric(text)]
        pub engine: EngineInForce,
    }
}

/// The engine a queue built, set on its iothread ([`EngineInForce::set`]): typed in a
/// snapshot ([`EngineInfo`]), one short line as a metric (its `Display`).
#[derive(Debug, Default)]
pub struct EngineInForce(Mutex<Option<EngineInfo>>);

impl EngineInForce {
    /// The queue's engine is now `info`.
    pub fn set(&self, info: EngineInfo) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(info);
    }

    /// The engine in force (none before the queue's first attach).
    pub fn get(&self) -> Option<EngineInfo> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Read for EngineInForce {
    fn read(&self) -> Reading {
        Reading::Text(self.get().map(|i| i.to_string()).unwrap_or_default())
    }
}

impl Snap for EngineInForce {
    type Value = Option<EngineInfo>;
    fn snap(&self) -> Option<EngineInfo> {
        self.get()
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
