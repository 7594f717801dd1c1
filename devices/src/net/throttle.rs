//! A NIC's rate limits: one limiter per direction (Firecracker's `rx_rate_limiter` and
//! `tx_rate_limiter`: a bandwidth bucket in frame bytes and an ops bucket in frames), the
//! disks' token-bucket limiter from `dataplane::rate_limit`. A refused frame waits (a tx chain
//! stays on the ring, an rx frame in the handler) until the deadline the bucket gave, and the
//! handler tells its iothread when to look again.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use dataplane::rate_limit::{admit, RateLimiter};

use super::stats::NetStats;

/// The limiters of one NIC, shared by its queue pairs (inactive ones by default; `PATCH` may set
/// them later through [`RateLimiter::set`]).
#[derive(Debug, Clone, Default)]
pub struct NetRateLimits {
    /// Frames the guest receives.
    pub rx: Arc<RateLimiter>,
    /// Frames the guest sends.
    pub tx: Arc<RateLimiter>,
}

/// One direction's state: its limiter and the deadline it stopped the direction until.
#[derive(Debug, Default)]
pub struct DirectionThrottle {
    limiter: Arc<RateLimiter>,
    stopped: Option<(Instant, Instant)>,
}

impl DirectionThrottle {
    /// A direction governed by `limiter`.
    pub fn new(limiter: Arc<RateLimiter>) -> Self {
        Self {
            limiter,
            stopped: None,
        }
    }

    /// The deadline the direction waits for, if stopped.
    pub fn until(&self) -> Option<Instant> {
        self.stopped.map(|(_, until)| until)
    }

    /// Admits one frame of `bytes`; on refusal the direction is stopped until the bucket allows
    /// it (counted once per stop in `throttled`) and false is returned.
    pub fn admit(&mut self, bytes: u64, throttled: &AtomicU64) -> bool {
        if !self.limiter.is_active() {
            self.resume(Instant::now);
            return true;
        }
        let now = Instant::now();
        match admit(&[&self.limiter], bytes, now) {
            Ok(()) => {
                self.resume(|| now);
                true
            }
            Err((wait, _)) => {
                let since = match self.stopped {
                    Some((since, _)) => since,
                    None => {
                        NetStats::add(throttled, 1);
                        self.limiter.record_throttle_start();
                        now
                    }
                };
                self.stopped = Some((since, now + wait));
                false
            }
        }
    }

    fn resume(&mut self, now: impl FnOnce() -> Instant) {
        if let Some((since, _)) = self.stopped.take() {
            self.limiter
                .record_throttle_end(now().saturating_duration_since(since));
        }
    }
}
