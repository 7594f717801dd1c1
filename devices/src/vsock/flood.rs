//! What a guest's packets that lead nowhere may cost the host. A REQUEST no host program takes,
//! a packet for no connection, a spoofed or malformed one: each costs the iothread a little
//! (a `connect` that walks a path, for a REQUEST), and a guest that sends nothing else could
//! keep a core busy. [`FloodGuard`] counts them per [`PERIOD`]: past [`WASTED_PER_PERIOD`] the
//! device stops reading the guest's tx ring until the period ends. A `connect` that fails (no
//! program listens on `<uds_path>_<port>`: ~8 µs of path walk here) is the dearest of them:
//! past [`FAILED_CONNECTS_PER_PERIOD`] a REQUEST is refused without trying. Guest connects that
//! succeed are the guest's own work, like its disk I/O; past [`CONNECTS_PER_PERIOD`] of them
//! (more than [`MAX_CONNS`] in 100 ms: churn, not a burst of opens) a REQUEST is refused too.
//! Well-behaved traffic wastes a packet or two per connection it closes, and a guest retrying
//! a connect until its host service listens a few per period, far below every budget. The
//! wasted-packet budget is the one every device's rings use ([`WasteBudget`]).
//!
//! [`MAX_CONNS`]: super::muxer::MAX_CONNS
//!
//! The clock is read when a period starts and when a budget runs out, never per packet.

use std::time::{Duration, Instant};

use crate::virtio::waste::WasteBudget;

/// The budgets' period.
pub const PERIOD: Duration = Duration::from_millis(100);
/// Packets that lead nowhere per period before the tx ring waits for the next.
pub const WASTED_PER_PERIOD: u32 = 100;
/// Guest-initiated connects (each a `connect` on `<uds_path>_<port>`) per period: a guest may
/// open as many connections at once as the device holds.
pub const CONNECTS_PER_PERIOD: u32 = super::muxer::MAX_CONNS as u32;
/// Of those, connects that failed per period.
pub const FAILED_CONNECTS_PER_PERIOD: u32 = 20;

/// The budgets of one device.
#[derive(Debug)]
pub struct FloodGuard {
    /// Packets that lead nowhere: past the budget the tx ring waits out the period.
    waste: WasteBudget,
    /// [`PERIOD`], unless a test needs a longer one.
    period: Duration,
    /// When the connects' current period started (`None`: none counted since the last one).
    start: Option<Instant>,
    connects: u32,
    failed_connects: u32,
}

impl Default for FloodGuard {
    fn default() -> Self {
        Self::with_period(PERIOD)
    }
}

impl FloodGuard {
    /// Budgets per `period` instead of [`PERIOD`].
    pub fn with_period(period: Duration) -> Self {
        Self {
            waste: WasteBudget::new(WASTED_PER_PERIOD, period, "virtio-vsock tx"),
            period,
            start: None,
            connects: 0,
            failed_connects: 0,
        }
    }

    /// Counts a packet that led nowhere; the one that spends the budget pauses the tx ring until
    /// the period ends.
    pub fn wasted(&mut self) {
        self.waste.wasted();
    }

    /// Whether a guest REQUEST may become a `connect` (and counts it if so).
    pub fn may_connect(&mut self) -> bool {
        if self.start.is_none() {
            self.start = Some(Instant::now());
        }
        let spent = self.connects >= CONNECTS_PER_PERIOD
            || self.failed_connects >= FAILED_CONNECTS_PER_PERIOD;
        if spent && !self.roll(Instant::now()) {
            return false;
        }
        self.connects += 1;
        true
    }

    /// The `connect` [`FloodGuard::may_connect`] allowed failed.
    pub fn connect_failed(&mut self) {
        self.failed_connects = self.failed_connects.saturating_add(1);
    }

    /// Whether the tx ring waits (see [`FloodGuard::paused_until`]).
    pub fn paused(&self) -> bool {
        self.waste.paused()
    }

    /// Until when the tx ring waits, if it does.
    pub fn paused_until(&self) -> Option<Instant> {
        self.waste.paused_until()
    }

    /// Ends a pause whose period is over by `now`.
    pub fn resume_if_due(&mut self, now: Instant) {
        self.waste.resume_if_due(now);
    }

    /// Periods cut short so far.
    pub fn pauses(&self) -> u64 {
        self.waste.pauses()
    }

    /// Starts a new connects period if the current one is over by `now`; true if it did.
    fn roll(&mut self, now: Instant) -> bool {
        if self
            .start
            .is_some_and(|s| now.duration_since(s) < self.period)
        {
            return false;
        }
        self.start = Some(now);
        self.connects = 0;
        self.failed_connects = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wasted_budget_pauses_the_ring_until_the_period_ends() {
        let mut g = FloodGuard::default();
        let t0 = Instant::now();
        for _ in 0..WASTED_PER_PERIOD - 1 {
            g.wasted();
        }
        assert!(!g.paused(), "below the budget");
        g.wasted();
        let until = g.paused_until().expect("the budget is spent");
        assert!(until > t0 && until <= Instant::now() + PERIOD);
        g.resume_if_due(until - Duration::from_millis(1));
        assert!(g.paused(), "not before the period ends");
        g.resume_if_due(until);
        assert!(!g.paused());
        assert_eq!(g.pauses(), 1);
        // A new period: the budget is whole again.
        for _ in 0..WASTED_PER_PERIOD - 1 {
            g.wasted();
        }
        assert!(!g.paused());
    }

    #[test]
    fn connects_past_the_budget_are_refused_until_the_period_ends() {
        let mut g = FloodGuard::default();
        for _ in 0..CONNECTS_PER_PERIOD {
            assert!(g.may_connect());
        }
        assert!(!g.may_connect(), "the budget is spent");
        std::thread::sleep(PERIOD);
        assert!(g.may_connect(), "a new period");
    }

    #[test]
    fn failed_connects_have_a_budget_of_their_own() {
        let mut g = FloodGuard::with_period(Duration::from_secs(600));
        for _ in 0..FAILED_CONNECTS_PER_PERIOD {
            assert!(g.may_connect());
            g.connect_failed();
        }
        assert!(!g.may_connect(), "no more tries this period");
        assert!(!g.paused(), "the ring itself goes on");
    }

    #[test]
    fn a_slow_trickle_never_pauses() {
        let mut g = FloodGuard::default();
        // Two bursts just under the budget, a period apart: the count starts again.
        for _ in 0..WASTED_PER_PERIOD - 10 {
            g.wasted();
        }
        std::thread::sleep(PERIOD);
        for _ in 0..WASTED_PER_PERIOD - 10 {
            g.wasted();
        }
        assert!(!g.paused());
        assert_eq!(g.pauses(), 0);
    }
}
