//! A queue's side of rate limiting: the limiters that govern its drive (the drive's own and its
//! group's) and whether the queue is stopped waiting for them, with the counters that follow.
//!
//! A request is admitted before the queue hands it to the engine; a refused one stays on the
//! ring (the queue steps back) and the queue takes nothing until the deadline the buckets gave,
//! with guest notifications left off meanwhile: the guest need not kick a queue that is not
//! reading its ring, and the iothread neither polls nor runs the queue until then.

use std::sync::Arc;
use std::time::Instant;

use dataplane::rate_limit::{admit, RateLimiter};

use super::stats::QueueStats;

/// The limiters that govern one drive, shared by its queues (and the group's by its drives).
#[derive(Debug, Clone, Default)]
pub struct DriveRateLimits {
    /// The drive's own limits (inactive when it has none; `PATCH` may set them later).
    pub drive: Arc<RateLimiter>,
    /// The group the drive belongs to, if any.
    pub group: Option<Arc<RateLimiter>>,
}

impl DriveRateLimits {
    fn limiter(&self, i: usize) -> Option<&RateLimiter> {
        match i {
            0 => Some(&self.drive),
            _ => self.group.as_deref(),
        }
    }
}

/// Why and since when a queue stopped.
#[derive(Debug, Clone, Copy)]
struct Stopped {
    since: Instant,
    until: Instant,
    /// 0: the drive's limiter, 1: the group's.
    by: usize,
}

/// A queue's rate-limit state.
#[derive(Debug, Default)]
pub struct QueueThrottle {
    limits: DriveRateLimits,
    stopped: Option<Stopped>,
}

impl QueueThrottle {
    /// A queue governed by `limits`.
    pub fn new(limits: DriveRateLimits) -> Self {
        Self {
            limits,
            stopped: None,
        }
    }

    /// Whether any limiter governs the queue now (one relaxed load each when none does).
    pub fn is_active(&self) -> bool {
        self.limits.drive.is_active() || self.limits.group.as_ref().is_some_and(|g| g.is_active())
    }

    /// The deadline the queue waits for, if it is stopped.
    pub fn until(&self) -> Option<Instant> {
        self.stopped.map(|s| s.until)
    }

    /// Admits one request moving `bytes` of data; on refusal the queue is stopped until the
    /// buckets allow it (the caller leaves the request on the ring) and false is returned. `now`
    /// is the turn's clock, read on first use only (and only when a limiter is active), so the
    /// buckets are refilled up to the turn's start.
    pub fn admit(&mut self, bytes: u64, now: &mut Option<Instant>, stats: &QueueStats) -> bool {
        if !self.is_active() {
            self.resume(stats);
            return true;
        }
        let now = *now.get_or_insert_with(Instant::now);
        let result = match &self.limits.group {
            Some(g) => admit(&[&self.limits.drive, g], bytes, now),
            None => admit(&[&self.limits.drive], bytes, now),
        };
        match result {
            Ok(()) => {
                self.resume_at(now, stats);
                true
            }
            Err((wait, by)) => {
                let since = match self.stopped {
                    Some(s) => s.since,
                    None => {
                        QueueStats::add(&stats.throttled_events, 1);
                        if let Some(l) = self.limits.limiter(by) {
                            l.record_throttle_start();
                        }
                        now
                    }
                };
                self.stopped = Some(Stopped {
                    since,
                    until: now + wait,
                    by,
                });
                false
            }
        }
    }

    /// The queue takes requests again (limits removed, or a request was admitted).
    fn resume(&mut self, stats: &QueueStats) {
        if self.stopped.is_some() {
            self.resume_at(Instant::now(), stats);
        }
    }

    fn resume_at(&mut self, now: Instant, stats: &QueueStats) {
        if let Some(s) = self.stopped.take() {
            let waited = now.saturating_duration_since(s.since);
            QueueStats::add(
                &stats.throttled_ns,
                u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX),
            );
            if let Some(l) = self.limits.limiter(s.by) {
                l.record_throttle_end(waited);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::rate_limit::{BucketConfig, LimitConfig};
    use std::time::Duration;

    /// A queue whose drive allows `size` requests per `refill_time_ms`.
    fn ops_limited(size: u64, refill_time_ms: u64) -> (Arc<RateLimiter>, QueueThrottle) {
        let drive = Arc::new(RateLimiter::new(LimitConfig {
            ops: Some(BucketConfig {
                size,
                one_time_burst: 0,
                refill_time_ms,
            }),
            bandwidth: None,
        }));
        let t = QueueThrottle::new(DriveRateLimits {
            drive: drive.clone(),
            group: None,
        });
        (drive, t)
    }

    #[test]
    fn a_dry_bucket_stops_the_queue_until_it_refills_and_counts_once() {
        let (drive, mut t) = ops_limited(2, 20);
        let stats = QueueStats::default();
        assert!(t.admit(0, &mut None, &stats) && t.admit(0, &mut None, &stats));
        assert!(!t.admit(0, &mut None, &stats));
        assert!(!t.admit(0, &mut None, &stats), "still dry");
        let until = t.until().expect("stopped");
        assert!(until > Instant::now() && until <= Instant::now() + Duration::from_millis(10));
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        assert!(t.admit(0, &mut None, &stats));
        assert!(t.until().is_none());
        let s = stats.snapshot();
        assert_eq!(s.throttled_events, 1, "one stop, however many refusals");
        assert!(s.throttled_ns >= 5_000_000, "{}", s.throttled_ns);
        let d = drive.stats();
        assert_eq!(d.throttled_events, 1);
        assert_eq!(d.throttled_ns, s.throttled_ns);
    }

    #[test]
    fn removing_the_limits_resumes_at_once() {
        let (drive, mut t) = ops_limited(1, 60_000);
        let stats = QueueStats::default();
        assert!(t.admit(0, &mut None, &stats));
        assert!(!t.admit(0, &mut None, &stats));
        drive.set(LimitConfig::default());
        assert!(t.admit(0, &mut None, &stats));
        assert!(t.until().is_none());
    }
}
