//! Rate limiting in the dataplane: a [`RateLimiter`] (an operations bucket and a bandwidth
//! bucket, either optional) shared by the queues it governs, a drive's or a group's, and
//! [`admit`], which lets a request pass every limiter that governs it or none.
//!
//! There is no timer thread: a queue asks [`admit`] before it takes a request; when a bucket is
//! dry it leaves the request on the ring and tells its iothread when to look again
//! ([`crate::TurnEnd::wake_at`]). Limits change live ([`RateLimiter::set`]); the owner
//! then wakes the iothreads ([`crate::IoThread::wake_throttled`]) so throttled queues re-check
//! at once instead of at their old deadline.

pub mod bucket;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use bucket::{BucketConfig, BucketLevel, TokenBucket};

/// The limits of one limiter: either bucket may be absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitConfig {
    /// Bytes per `refill_time` (reads and writes; discard, write-zeroes and flush move none).
    pub bandwidth: Option<BucketConfig>,
    /// Requests per `refill_time` (every request counts one).
    pub ops: Option<BucketConfig>,
}

#[derive(Debug, Default)]
struct Buckets {
    ops: Option<TokenBucket>,
    bandwidth: Option<TokenBucket>,
}

impl Buckets {
    /// Ns until one request of `bytes` can pass both buckets (0: now).
    fn wait_for(&mut self, bytes: u64, now_ns: u64) -> u64 {
        let ops = self.ops.as_mut().map_or(0, |t| t.wait_for(1, now_ns));
        let bw = self
            .bandwidth
            .as_mut()
            .map_or(0, |t| t.wait_for(bytes, now_ns));
        ops.max(bw)
    }

    /// Spends one request of `bytes` (after `wait_for` said 0 at the same time).
    fn spend(&mut self, bytes: u64) {
        if let Some(t) = self.ops.as_mut() {
            t.spend(1);
        }
        if let Some(t) = self.bandwidth.as_mut() {
            t.spend(bytes);
        }
    }
}

osprey_metrics::metric_set! {
    /// What a limiter reports (declared once: help, kind and unit for the API and Prometheus).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct LimiterStats {
        /// Times a queue stopped taking requests because a bucket of this limiter was dry.
        #[metric(counter)]
        pub throttled_events: u64,
        /// Time queues spent stopped by this limiter, summed over queues.
        #[metric(counter, ns)]
        pub throttled_ns: u64,
        /// Operations left in the ops bucket, burst included (null: no ops bucket).
        #[metric(gauge)]
        pub ops_tokens: Option<u64>,
        /// Bytes left in the bandwidth bucket, burst included (null: no bandwidth bucket).
        #[metric(gauge, bytes)]
        pub bandwidth_tokens: Option<u64>,
    }
}

/// One set of limits, shared by every queue it governs (a drive's, or a group's).
#[derive(Debug)]
pub struct RateLimiter {
    buckets: Mutex<Buckets>,
    config: Mutex<LimitConfig>,
    /// Whether any bucket limits anything: the hot path's only check when none does.
    active: AtomicBool,
    throttled_events: AtomicU64,
    throttled_ns: AtomicU64,
    epoch: Instant,
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self::new(LimitConfig::default())
    }
}

impl RateLimiter {
    /// A limiter with full buckets.
    pub fn new(config: LimitConfig) -> Self {
        let limiter = Self {
            buckets: Mutex::new(Buckets::default()),
            config: Mutex::new(LimitConfig::default()),
            active: AtomicBool::new(false),
            throttled_events: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        };
        limiter.set(config);
        limiter
    }

    fn now_ns(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, Buckets> {
        // A panic elsewhere while holding the lock leaves plain numbers behind: keep going.
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the limits, with full buckets (as Firecracker's update does); takes effect at
    /// the next request of every queue it governs.
    pub fn set(&self, config: LimitConfig) {
        let now = self.now_ns(Instant::now());
        let mut b = self.lock();
        b.ops = config.ops.and_then(|c| TokenBucket::new(c, now));
        b.bandwidth = config.bandwidth.and_then(|c| TokenBucket::new(c, now));
        self.active
            .store(b.ops.is_some() || b.bandwidth.is_some(), Ordering::Release);
        *self.config.lock().unwrap_or_else(|p| p.into_inner()) = config;
    }

    /// Each bucket's level now (ops, bandwidth; `None` for a bucket that limits nothing), for
    /// a snapshot.
    pub fn levels(&self) -> (Option<BucketLevel>, Option<BucketLevel>) {
        let now = self.now_ns(Instant::now());
        let mut b = self.lock();
        (
            b.ops.as_mut().map(|t| t.level(now)),
            b.bandwidth.as_mut().map(|t| t.level(now)),
        )
    }

    /// Sets the levels a snapshot saved (as [`RateLimiter::levels`] gives them) on the buckets
    /// of the same limits; a bucket this limiter lacks ignores its level.
    pub fn set_levels(&self, ops: Option<BucketLevel>, bandwidth: Option<BucketLevel>) {
        let now = self.now_ns(Instant::now());
        let mut b = self.lock();
        if let (Some(t), Some(l)) = (b.ops.as_mut(), ops) {
            t.set_level(l, now);
        }
        if let (Some(t), Some(l)) = (b.bandwidth.as_mut(), bandwidth) {
            t.set_level(l, now);
        }
    }

    /// The limits in force.
    pub fn config(&self) -> LimitConfig {
        *self.config.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any bucket limits anything.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// [`admit`] for a request governed by this limiter alone.
    fn admit_alone(&self, bytes: u64, now: Instant) -> Result<(), Duration> {
        if !self.is_active() {
            return Ok(());
        }
        let now_ns = self.now_ns(now);
        let mut b = self.lock();
        match b.wait_for(bytes, now_ns) {
            0 => {
                b.spend(bytes);
                Ok(())
            }
            wait => Err(Duration::from_nanos(wait)),
        }
    }

    /// A queue stopped because of this limiter.
    pub fn record_throttle_start(&self) {
        self.throttled_events.fetch_add(1, Ordering::Relaxed);
    }

    /// A queue stopped because of this limiter took requests again after `waited`.
    pub fn record_throttle_end(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.throttled_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Counters and tokens left.
    pub fn stats(&self) -> LimiterStats {
        let now = self.now_ns(Instant::now());
        let mut b = self.lock();
        let left = |bucket: &mut Option<TokenBucket>| {
            bucket.as_mut().map(|t| {
                t.wait_for(0, now);
                t.tokens()
            })
        };
        LimiterStats {
            throttled_events: self.throttled_events.load(Ordering::Relaxed),
            throttled_ns: self.throttled_ns.load(Ordering::Relaxed),
            ops_tokens: left(&mut b.ops),
            bandwidth_tokens: left(&mut b.bandwidth),
        }
    }
}

/// Lets one request (`bytes` of data, counted against bandwidth) pass every limiter in
/// `limiters`, or none: on refusal nothing is spent and the answer is how long to wait and the
/// index of the limiter that refused (the longest wait).
pub fn admit(limiters: &[&RateLimiter], bytes: u64, now: Instant) -> Result<(), (Duration, usize)> {
    if let [only] = limiters {
        // A drive without a group: one lock, no bookkeeping of which limiter refused.
        return only.admit_alone(bytes, now).map_err(|wait| (wait, 0));
    }
    // Lock in the given order (a drive's own limiter before its group's, everywhere): no cycle.
    let mut guards: smallvec::SmallVec<[(usize, MutexGuard<'_, Buckets>, u64); 2]> = limiters
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_active())
        .map(|(i, l)| (i, l.lock(), l.now_ns(now)))
        .collect();
    let mut worst: Option<(u64, usize)> = None;
    for (i, b, now_ns) in guards.iter_mut() {
        let wait = b.wait_for(bytes, *now_ns);
        if wait > 0 && worst.is_none_or(|(w, _)| wait > w) {
            worst = Some((wait, *i));
        }
    }
    if let Some((wait, i)) = worst {
        return Err((Duration::from_nanos(wait), i));
    }
    for (_, b, _) in guards.iter_mut() {
        b.spend(bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(size: u64, refill_time_ms: u64) -> LimitConfig {
        LimitConfig {
            ops: Some(BucketConfig {
                size,
                one_time_burst: 0,
                refill_time_ms,
            }),
            bandwidth: None,
        }
    }

    #[test]
    fn inactive_limiters_let_everything_pass() {
        let l = RateLimiter::default();
        assert!(!l.is_active());
        for _ in 0..1000 {
            assert!(admit(&[&l], 1 << 20, Instant::now()).is_ok());
        }
        assert_eq!(l.stats().ops_tokens, None);
    }

    #[test]
    fn all_or_nothing_across_a_drive_and_its_group() {
        let drive = RateLimiter::new(ops(10, 1000));
        let group = RateLimiter::new(ops(3, 1000));
        let now = Instant::now();
        for _ in 0..3 {
            assert!(admit(&[&drive, &group], 0, now).is_ok());
        }
        let (wait, by) = admit(&[&drive, &group], 0, now).expect_err("group dry");
        assert_eq!(by, 1, "the group refused");
        assert!(wait > Duration::from_millis(300) && wait <= Duration::from_millis(334));
        assert_eq!(
            drive.stats().ops_tokens,
            Some(7),
            "the drive spent nothing on the refusal"
        );
    }

    #[test]
    fn bandwidth_counts_bytes_and_ops_count_requests() {
        let l = RateLimiter::new(LimitConfig {
            bandwidth: Some(BucketConfig {
                size: 8192,
                one_time_burst: 0,
                refill_time_ms: 1000,
            }),
            ops: Some(BucketConfig {
                size: 100,
                one_time_burst: 0,
                refill_time_ms: 1000,
            }),
        });
        let now = Instant::now();
        assert!(admit(&[&l], 4096, now).is_ok());
        assert!(admit(&[&l], 0, now).is_ok(), "a flush moves no bytes");
        assert!(admit(&[&l], 4096, now).is_ok());
        assert!(admit(&[&l], 1, now).is_err());
        let s = l.stats();
        assert_eq!(s.ops_tokens, Some(97));
        assert_eq!(s.bandwidth_tokens, Some(0));
    }

    #[test]
    fn set_replaces_limits_with_full_buckets_and_none_turns_them_off() {
        let l = RateLimiter::new(ops(1, 1000));
        let now = Instant::now();
        assert!(admit(&[&l], 0, now).is_ok());
        assert!(admit(&[&l], 0, now).is_err());
        l.set(ops(5, 1000));
        assert_eq!(l.config(), ops(5, 1000));
        assert_eq!(l.stats().ops_tokens, Some(5));
        l.set(LimitConfig::default());
        assert!(!l.is_active());
        assert!(admit(&[&l], 0, now).is_ok());
    }
}
