//! The `Adaptive` policy's contention guard, as pure code: fed samples of the iothread's
//! scheduler statistics (CPU time, and run delay: the time spent runnable but waiting for a CPU),
//! it decides whether polling is being paid for by someone else.
//!
//! A polling thread is always runnable, so on a busy host the vCPU about to submit or the worker
//! about to complete waits while it spins, and each `sched_yield` hands a CPU hog a whole slice.
//! When a window of [`WINDOW_NS`] spends [`BUSY_PERMILLE`] or more of the runnable time waiting,
//! the guard first stops the poll loop's yields; a window still busy without them suspends
//! polling (a sleeper's wake-up preempts a CPU hog). Both back-offs start at [`MIN_BACKOFF_NS`]
//! and double up to [`MAX_BACKOFF_NS`]; a window spent polling without contention clears the
//! suspension's, and one that also yielded clears the yields'. Measurements: docs/performance.md.

/// How often the caller samples the scheduler statistics (ns); the guard decides per window.
pub const SAMPLE_PERIOD_NS: u64 = 1_000_000;
/// The guard's decision window (ns).
pub const WINDOW_NS: u64 = 10_000_000;
/// Waiting this share of the runnable time (‰) means the CPU is someone else's.
pub const BUSY_PERMILLE: u64 = 800;
/// The first suspension of polling (ns).
pub const MIN_BACKOFF_NS: u64 = 10_000_000;
/// The longest suspension (ns): the guard looks again at least this often.
pub const MAX_BACKOFF_NS: u64 = 1_000_000_000;

/// One reading of the thread's scheduler statistics (`/proc/thread-self/schedstat`), of the
/// host's run queue (`/proc/loadavg`) and of its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSample {
    /// The caller's monotonic clock (ns).
    pub now_ns: u64,
    /// The thread's cumulative CPU time (ns).
    pub cpu_ns: u64,
    /// The thread's cumulative run delay (ns): time runnable but not running.
    pub run_delay_ns: u64,
    /// The requests the thread's handlers have completed (cumulative; for the payoff check).
    pub requests: u64,
    /// Whether a thread was waiting for a CPU: more threads runnable on the host than CPUs
    /// this thread may use (for the payoff check; `None`: not known).
    pub cpu_queue: Option<bool>,
}

/// What the guard saw and did, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentionStats {
    /// The share of the runnable time of the last window spent waiting for a CPU (‰).
    pub wait_permille: u64,
    /// Times polling was suspended.
    pub suspensions: u64,
    /// The current back-off (ns).
    pub backoff_ns: u64,
    /// Times the poll loop's yields were stopped.
    pub yield_stops: u64,
    /// The current back-off of the yields (ns; 0: yielding).
    pub yield_backoff_ns: u64,
}

/// Suspends polling while the host is busy.
#[derive(Debug, Clone, Default)]
pub struct ContentionGuard {
    /// The start of the current window.
    window: Option<HostSample>,
    /// The poll loop does not yield until then.
    no_yields_until_ns: u64,
    yield_backoff_ns: u64,
    suspended_until_ns: u64,
    backoff_ns: u64,
    stats: ContentionStats,
}

/// The back-off after `current` (0: none yet).
fn next_backoff(current: u64) -> u64 {
    if current == 0 {
        MIN_BACKOFF_NS
    } else {
        current.saturating_mul(2).min(MAX_BACKOFF_NS)
    }
}

impl ContentionGuard {
    /// Takes a sample; a decision is made when a window is complete and holds until the next.
    pub fn observe(&mut self, s: HostSample) {
        let Some(start) = self.window else {
            self.window = Some(s);
            return;
        };
        if s.now_ns.saturating_sub(start.now_ns) < WINDOW_NS {
            return;
        }
        self.window = Some(s);
        let waited = s.run_delay_ns.saturating_sub(start.run_delay_ns);
        let ran = s.cpu_ns.saturating_sub(start.cpu_ns);
        let runnable = waited.saturating_add(ran);
        let permille = waited
            .saturating_mul(1000)
            .checked_div(runnable)
            .unwrap_or(0);
        self.stats.wait_permille = permille;
        if s.now_ns < self.suspended_until_ns {
            return; // still suspended: the thread was sleeping, not polling
        }
        let polled_whole_window = start.now_ns >= self.suspended_until_ns;
        // The window began with yields off (they go off at a window's end, for at least one
        // window's length).
        let without_yields = start.now_ns < self.no_yields_until_ns;
        if permille >= BUSY_PERMILLE && !without_yields {
            self.yield_backoff_ns = next_backoff(self.yield_backoff_ns);
            self.no_yields_until_ns = s.now_ns.saturating_add(self.yield_backoff_ns);
            self.stats.yield_stops += 1;
        } else if permille >= BUSY_PERMILLE {
            self.backoff_ns = next_backoff(self.backoff_ns);
            self.suspended_until_ns = s.now_ns.saturating_add(self.backoff_ns);
            self.stats.suspensions += 1;
        } else if polled_whole_window {
            self.backoff_ns = 0;
            if !without_yields {
                self.yield_backoff_ns = 0;
            }
        }
        self.stats.backoff_ns = self.backoff_ns;
        self.stats.yield_backoff_ns = self.yield_backoff_ns;
    }

    /// Whether the poll loop may yield its CPU at `now_ns`.
    pub fn yields_allowed(&self, now_ns: u64) -> bool {
        now_ns >= self.no_yields_until_ns
    }

    /// Whether polling is suspended at `now_ns`.
    pub fn suspended(&self, now_ns: u64) -> bool {
        now_ns < self.suspended_until_ns
    }

    /// What the guard saw and did.
    pub fn stats(&self) -> ContentionStats {
        self.stats
    }

    /// Forgets everything (a live change of the parameters).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A thread that, from `t_ms` on, runs `ran` and waits `waited` (shares of wall time).
    struct Clock {
        t: u64,
        cpu: u64,
        delay: u64,
    }

    impl Clock {
        fn advance(&mut self, g: &mut ContentionGuard, ms: u64, ran: f64, waited: f64) {
            for _ in 0..ms {
                self.t += MS;
                self.cpu += (ran * MS as f64) as u64;
                self.delay += (waited * MS as f64) as u64;
                g.observe(HostSample {
                    now_ns: self.t,
                    cpu_ns: self.cpu,
                    run_delay_ns: self.delay,
                    requests: 0,
                    cpu_queue: None,
                });
            }
        }
    }

    fn start() -> (ContentionGuard, Clock) {
        let mut g = ContentionGuard::default();
        let mut c = Clock {
            t: 0,
            cpu: 0,
            delay: 0,
        };
        c.advance(&mut g, 1, 0.0, 0.0);
        (g, c)
    }

    #[test]
    fn a_polling_thread_that_shares_its_core_with_its_own_helpers_keeps_polling() {
        // Idle host, classic polling: runs 55 %, waits 45 % (its yields let the vCPU and the
        // loop worker in).
        let (mut g, mut c) = start();
        c.advance(&mut g, 200, 0.55, 0.45);
        assert_eq!(g.stats().suspensions, 0);
        assert!(!g.suspended(c.t));
        assert_eq!(g.stats().wait_permille, 450);
    }

    #[test]
    fn a_starved_thread_stops_yielding_then_polling_and_backs_off_longer_each_time() {
        let (mut g, mut c) = start();
        c.advance(&mut g, 10, 0.04, 0.96); // a CPU hog beside us, polling with yields
        assert!(!g.yields_allowed(c.t), "first answer: no more yields");
        assert!(!g.suspended(c.t), "still polling");
        assert_eq!(
            (g.stats().yield_stops, g.stats().yield_backoff_ns),
            (1, 10 * MS)
        );
        // Without yields the thread keeps its CPU: half its runnable time waiting, not busy.
        c.advance(&mut g, 5, 0.5, 0.5);
        assert!(!g.yields_allowed(c.t));
        c.advance(&mut g, 5, 0.5, 0.5);
        assert!(g.yields_allowed(c.t), "the 10 ms without yields ended");
        // Yields again, starved again: twice as long without them.
        c.advance(&mut g, 10, 0.04, 0.96);
        assert!(!g.yields_allowed(c.t));
        assert_eq!(g.stats().yield_backoff_ns, 20 * MS);
        // Starved even without yields: polling is suspended.
        c.advance(&mut g, 10, 0.04, 0.96);
        assert!(
            g.suspended(c.t),
            "suspended after a busy window without yields"
        );
        assert_eq!((g.stats().suspensions, g.stats().backoff_ns), (1, 10 * MS));
        // Asleep between events: little runnable time, mostly running.
        c.advance(&mut g, 10, 0.05, 0.02);
        assert!(!g.suspended(c.t), "the 10 ms back-off ended");
        // The 20 ms without yields ended meanwhile: yields go off again, for 40 ms...
        assert!(g.yields_allowed(c.t));
        c.advance(&mut g, 10, 0.04, 0.96);
        assert_eq!(g.stats().yield_backoff_ns, 40 * MS);
        // ...and starved without them, polling is suspended twice as long.
        c.advance(&mut g, 10, 0.04, 0.96);
        assert!(g.suspended(c.t));
        assert_eq!(g.stats().backoff_ns, 20 * MS);
        // A quiet window during the suspension does not clear the back-off...
        c.advance(&mut g, 20, 0.05, 0.0);
        assert_eq!(g.stats().backoff_ns, 20 * MS);
        // ...a quiet window spent polling does, and one with yields clears theirs too.
        c.advance(&mut g, 20, 0.9, 0.1);
        assert_eq!(g.stats().backoff_ns, 0);
        assert!(!g.suspended(c.t));
        assert!(g.yields_allowed(c.t));
        c.advance(&mut g, 10, 0.9, 0.1);
        assert_eq!(g.stats().yield_backoff_ns, 0);
        assert_eq!(g.stats().suspensions, 2);
    }

    #[test]
    fn the_back_off_is_capped() {
        let (mut g, mut c) = start();
        for _ in 0..20 {
            let wait = 1 + g.stats().backoff_ns / MS;
            c.advance(&mut g, wait, 0.04, 0.96);
            c.advance(&mut g, 10, 0.04, 0.96);
        }
        assert_eq!(g.stats().backoff_ns, MAX_BACKOFF_NS);
    }
}
