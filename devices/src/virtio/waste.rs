//! What a guest's chains that carry nothing may cost the host. A tx chain that is no frame, a
//! vsock packet that leads nowhere: each costs the iothread a little, and a guest that posts
//! nothing else as fast as the device hands them back keeps a core busy (a NIC's flood of
//! malformed tx chains: 75 % of one here). [`WasteBudget`] counts them per period: past its
//! limit the device stops reading that ring until the period ends, and the guest's ring fills.
//! Well-behaved guests waste a chain now and then, far below any budget.
//!
//! The clock is read when a period starts and when the budget runs out, never per chain.

use std::time::{Duration, Instant};

/// The budget of one ring (or one device).
#[derive(Debug)]
pub struct WasteBudget {
    /// Chains per period before the ring waits for the next.
    limit: u32,
    period: Duration,
    /// For the log: whose chains ("virtio-net tx", ...).
    what: &'static str,
    /// When the current period started (`None`: nothing counted since the last one ended).
    start: Option<Instant>,
    wasted: u32,
    /// The ring waits until then.
    paused_until: Option<Instant>,
    /// Periods cut short by the budget.
    pauses: u64,
}

impl WasteBudget {
    /// `limit` wasted chains per `period`; `what` names the ring in the log.
    pub fn new(limit: u32, period: Duration, what: &'static str) -> Self {
        Self {
            limit,
            period,
            what,
            start: None,
            wasted: 0,
            paused_until: None,
            pauses: 0,
        }
    }

    /// Counts a chain that carried nothing; the one that spends the budget pauses the ring
    /// until the period ends. Returns whether the ring waits now.
    pub fn wasted(&mut self) -> bool {
        if self.start.is_none() {
            self.start = Some(Instant::now());
        }
        self.wasted = self.wasted.saturating_add(1);
        if self.wasted < self.limit || self.paused_until.is_some() {
            return self.paused_until.is_some();
        }
        let now = Instant::now();
        if self
            .start
            .is_some_and(|s| now.duration_since(s) >= self.period)
        {
            // The period was over: this chain opens the next one.
            self.start = Some(now);
            self.wasted = 1;
            return false;
        }
        self.paused_until = self.start.map(|s| s + self.period);
        self.pauses += 1;
        if self.pauses == 1 {
            log::warn!(
                "{}: the guest wasted {} chains within {:?}: its ring waits out each such \
                 period (logged once)",
                self.what,
                self.limit,
                self.period
            );
        }
        true
    }

    /// Whether the ring waits (see [`WasteBudget::paused_until`]).
    pub fn paused(&self) -> bool {
        self.paused_until.is_some()
    }

    /// Until when the ring waits, if it does.
    pub fn paused_until(&self) -> Option<Instant> {
        self.paused_until
    }

    /// Ends a pause whose period is over by `now`.
    pub fn resume_if_due(&mut self, now: Instant) {
        if self.paused_until.is_some_and(|at| at <= now) {
            self.paused_until = None;
            self.start = None;
            self.wasted = 0;
        }
    }

    /// Periods cut short so far.
    pub fn pauses(&self) -> u64 {
        self.pauses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_millis(100);

    #[test]
    fn the_budget_pauses_the_ring_until_the_period_ends() {
        let mut b = WasteBudget::new(10, PERIOD, "test");
        let t0 = Instant::now();
        for _ in 0..9 {
            assert!(!b.wasted());
        }
        assert!(!b.paused(), "below the budget");
        assert!(b.wasted(), "the tenth spends it");
        let until = b.paused_until().expect("paused");
        assert!(until > t0 && until <= Instant::now() + PERIOD);
        b.resume_if_due(until - Duration::from_millis(1));
        assert!(b.paused(), "not before the period ends");
        b.resume_if_due(until);
        assert!(!b.paused());
        assert_eq!(b.pauses(), 1);
        for _ in 0..9 {
            assert!(!b.wasted(), "a new period: the budget is whole again");
        }
    }

    #[test]
    fn a_slow_trickle_never_pauses() {
        let mut b = WasteBudget::new(10, PERIOD, "test");
        for _ in 0..8 {
            b.wasted();
        }
        std::thread::sleep(PERIOD);
        for _ in 0..8 {
            b.wasted();
        }
        assert!(!b.paused());
        assert_eq!(b.pauses(), 0);
    }
}
