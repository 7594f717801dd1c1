//! The `Adaptive` policy's contention guard, as pure code: it is fed samples of the iothread's
//! run delay (the time it spent runnable but waiting for a CPU, from the kernel's schedstat) and
//! decides whether polling is being paid for by someone else.
//!
//! Polling only pays when the CPU it burns was free. On a busy host (the guest's vCPU, other
//! tenants, the kernel worker completing our own I/O all wanting the cores), a thread that polls
//! is runnable all the time and the scheduler shares the CPUs out in slices of milliseconds: the
//! vCPU that would submit the next request, or the worker that would complete it, waits while we
//! spin, and latency jumps from microseconds to a slice. Measured on the 2-core development host
//! with one CPU-bound process on the other core: 4k QD1 reads fell to 1.8k IOPS with classic
//! polling against 6k with polling off. When the thread waited for a CPU for more than
//! [`BUSY_PERMILLE`] of a sample period, the guard suspends polling (the thread sleeps between
//! events, and a sleeper's wake-up preempts a CPU hog), for a back-off that doubles while the
//! contention lasts and restarts from [`MIN_BACKOFF_NS`] once a period is clean.

/// How often the caller samples the run delay (ns): often enough to react within a few ms, rare
/// enough that the read (one `pread`) costs nothing per request.
pub const SAMPLE_PERIOD_NS: u64 = 1_000_000;
/// Waiting for a CPU this share of a period (‰) means the host is busy.
pub const BUSY_PERMILLE: u64 = 100;
/// The first suspension of polling (ns).
pub const MIN_BACKOFF_NS: u64 = 10_000_000;
/// The longest suspension (ns): the guard looks again at least this often.
pub const MAX_BACKOFF_NS: u64 = 1_000_000_000;

/// One reading of the thread's scheduler statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSample {
    /// The caller's monotonic clock (ns).
    pub now_ns: u64,
    /// The thread's cumulative run delay (ns): time runnable but not running.
    pub run_delay_ns: u64,
}

/// Why the guard decided as it did, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentionStats {
    /// The share of the last sample period spent waiting for a CPU (‰).
    pub wait_permille: u64,
    /// Times polling was suspended.
    pub suspensions: u64,
    /// The current back-off (ns).
    pub backoff_ns: u64,
}

/// Suspends polling while the host is busy.
#[derive(Debug, Clone, Default)]
pub struct ContentionGuard {
    last: Option<HostSample>,
    suspended_until_ns: u64,
    backoff_ns: u64,
    stats: ContentionStats,
}

impl ContentionGuard {
    /// Takes a sample; the decision holds until the next one.
    pub fn observe(&mut self, s: HostSample) {
        let Some(prev) = self.last.replace(s) else {
            return;
        };
        let wall = s.now_ns.saturating_sub(prev.now_ns);
        if wall == 0 {
            return;
        }
        let waited = s.run_delay_ns.saturating_sub(prev.run_delay_ns);
        let permille = waited.saturating_mul(1000) / wall;
        self.stats.wait_permille = permille;
        let suspended = s.now_ns < self.suspended_until_ns;
        if permille >= BUSY_PERMILLE {
            if !suspended {
                // Busy again right after a suspension: wait longer next time.
                self.backoff_ns = if self.backoff_ns == 0 {
                    MIN_BACKOFF_NS
                } else {
                    self.backoff_ns.saturating_mul(2).min(MAX_BACKOFF_NS)
                };
                self.suspended_until_ns = s.now_ns.saturating_add(self.backoff_ns);
                self.stats.suspensions += 1;
            }
        } else if !suspended {
            self.backoff_ns = 0;
        }
        self.stats.backoff_ns = self.backoff_ns;
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

    fn feed(g: &mut ContentionGuard, t_ms: u64, delay_ms_per_ms: f64, from_ms: u64) {
        // A run delay that grew by `delay_ms_per_ms` per ms since `from_ms`.
        let delay = ((t_ms - from_ms) as f64 * delay_ms_per_ms * MS as f64) as u64;
        g.observe(HostSample {
            now_ns: t_ms * MS,
            run_delay_ns: delay,
        });
    }

    #[test]
    fn an_idle_host_never_suspends_polling() {
        let mut g = ContentionGuard::default();
        for t in 0..100 {
            feed(&mut g, t, 0.01, 0); // 1 % waiting
            assert!(!g.suspended(t * MS));
        }
        assert_eq!(g.stats().suspensions, 0);
        assert_eq!(g.stats().wait_permille, 10);
    }

    #[test]
    fn a_busy_host_suspends_polling_with_a_growing_back_off() {
        let mut g = ContentionGuard::default();
        feed(&mut g, 0, 0.5, 0);
        feed(&mut g, 1, 0.5, 0); // 50 % waiting
        assert!(g.suspended(MS));
        assert!(g.suspended(10 * MS));
        assert!(!g.suspended(11 * MS), "the first back-off is 10 ms");
        assert_eq!(g.stats().suspensions, 1);
        // Samples during the suspension do not extend it.
        feed(&mut g, 5, 0.5, 0);
        assert!(!g.suspended(11 * MS));
        // Still busy when it ends: twice as long.
        feed(&mut g, 11, 0.5, 0);
        assert!(g.suspended(30 * MS) && !g.suspended(31 * MS));
        assert_eq!(g.stats().backoff_ns, 20 * MS);
        // A clean period after it ends: the next contention starts from 10 ms again.
        let base = (31.0 * 0.5) as u64;
        g.observe(HostSample {
            now_ns: 31 * MS,
            run_delay_ns: base * MS,
        });
        g.observe(HostSample {
            now_ns: 32 * MS,
            run_delay_ns: base * MS,
        });
        assert_eq!(g.stats().backoff_ns, 0);
        assert!(!g.suspended(32 * MS));
    }

    #[test]
    fn the_back_off_is_capped() {
        let mut g = ContentionGuard::default();
        let mut t = 0;
        g.observe(HostSample {
            now_ns: 0,
            run_delay_ns: 0,
        });
        for _ in 0..20 {
            t += 1 + g.stats().backoff_ns / MS;
            g.observe(HostSample {
                now_ns: t * MS,
                run_delay_ns: t * MS / 2,
            });
        }
        assert_eq!(g.stats().backoff_ns, MAX_BACKOFF_NS);
    }
}
