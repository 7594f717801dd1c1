//! Per-iothread statistics, written by the thread and read lock-free by anyone (the API, tests):
//! what the poll policy is doing (window, hits, misses) and where the thread's time goes
//! (polling, working, sleeping; its CPU time).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one iothread.
#[derive(Debug, Default)]
pub struct IoThreadStats {
    /// Returns from epoll_wait with at least one event.
    pub wakeups: AtomicU64,
    /// Handler turns.
    pub handler_runs: AtomicU64,
    /// Control commands processed (attach, detach, poll parameters, shutdown).
    pub commands: AtomicU64,
    /// Handlers currently attached.
    pub handlers: AtomicU64,
    /// Fds the thread watches for its handlers (the command fd not counted).
    pub watched_fds: AtomicU64,
    /// Handlers without a cheap check: while non-zero, the thread does not poll.
    pub poll_disabled_handlers: AtomicU64,
    /// The poll window of the last iteration, in ns.
    pub poll_window_ns: AtomicU64,
    /// Iterations whose polling found work.
    pub poll_hits: AtomicU64,
    /// Iterations that polled the whole window and found nothing.
    pub poll_misses: AtomicU64,
    /// Times the poll loop yielded its CPU (`sched_yield`) to let other runnable work in.
    pub poll_yields: AtomicU64,
    /// Adaptive, polling suspended: times the thread spun before sleeping because requests
    /// were in flight.
    pub completion_spins: AtomicU64,
    /// Adaptive: completion spins that found work, a completion or a new request (the thread
    /// did not sleep).
    pub completion_spin_hits: AtomicU64,
    /// Adaptive: time spent spinning on completions, in ns.
    pub completion_spin_ns: AtomicU64,
    /// Adaptive: the thread's cumulative run delay (runnable, waiting for a CPU), in ns.
    pub run_delay_ns: AtomicU64,
    /// Adaptive: the share of the last 10 ms window's runnable time spent waiting for a CPU, in ‰.
    pub cpu_wait_permille: AtomicU64,
    /// Adaptive: times polling was suspended because the host was busy.
    pub poll_suspensions: AtomicU64,
    /// Adaptive: 1 while polling is suspended.
    pub poll_suspended: AtomicU64,
    /// Adaptive: the current suspension back-off, in ns (0: not backing off).
    pub poll_backoff_ns: AtomicU64,
    /// Adaptive: times the poll loop's yields were stopped because the host was busy.
    pub poll_yield_stops: AtomicU64,
    /// Adaptive: 1 while the poll loop does not yield its CPU.
    pub poll_yields_off: AtomicU64,
    /// Adaptive: conclusive payoff trials (a segment in the other mode, polling or sleeping,
    /// bracketed by the current mode).
    pub payoff_trials: AtomicU64,
    /// Adaptive: payoff trials the other mode won.
    pub payoff_wins: AtomicU64,
    /// Adaptive: switches between polling and sleeping (two won trials in a row).
    pub payoff_switches: AtomicU64,
    /// Adaptive: the last payoff trial's other mode's request rate against the current one's, ‰.
    pub payoff_ratio_permille: AtomicU64,
    /// Adaptive: the current interval between payoff trials, in ns.
    pub payoff_interval_ns: AtomicU64,
    /// Adaptive: 1 while sleeping between events completes more requests than polling.
    pub payoff_sleeping: AtomicU64,
    /// 1 while the thread runs one step lighter because its policy polls (dynamic weights).
    pub thread_light: AtomicU64,
    /// Switches between light and base weight (dynamic weights).
    pub weight_switches: AtomicU64,
    /// Times the thread went to sleep in epoll (blocking).
    pub sleeps: AtomicU64,
    /// Handler wake-ups by fd (epoll events, not counting the command fd).
    pub fd_events: AtomicU64,
    /// Time spent polling, in ns.
    pub poll_ns: AtomicU64,
    /// Time spent running handlers, in ns.
    pub work_ns: AtomicU64,
    /// Time spent asleep in epoll, in ns.
    pub sleep_ns: AtomicU64,
    /// The thread's CPU time (CLOCK_THREAD_CPUTIME_ID), sampled before a sleep at most every
    /// 5 ms, in ns.
    pub cpu_ns: AtomicU64,
}

impl IoThreadStats {
    /// Adds `n` to `counter`. Only the iothread writes its counters, so a relaxed load and store
    /// do (no lock-prefixed read-modify-write in the loop).
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Sets a gauge.
    pub fn set(gauge: &AtomicU64, v: u64) {
        gauge.store(v, Ordering::Relaxed);
    }

    /// A snapshot of every counter, as (name, value) pairs in a fixed order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = Self::get;
        vec![
            ("wakeups", g(&self.wakeups)),
            ("handler_runs", g(&self.handler_runs)),
            ("commands", g(&self.commands)),
            ("handlers", g(&self.handlers)),
            ("watched_fds", g(&self.watched_fds)),
            ("poll_disabled_handlers", g(&self.poll_disabled_handlers)),
            ("poll_window_ns", g(&self.poll_window_ns)),
            ("poll_hits", g(&self.poll_hits)),
            ("poll_misses", g(&self.poll_misses)),
            ("poll_yields", g(&self.poll_yields)),
            ("completion_spins", g(&self.completion_spins)),
            ("completion_spin_hits", g(&self.completion_spin_hits)),
            ("completion_spin_ns", g(&self.completion_spin_ns)),
            ("poll_suspended", g(&self.poll_suspended)),
            ("poll_suspensions", g(&self.poll_suspensions)),
            ("poll_backoff_ns", g(&self.poll_backoff_ns)),
            ("poll_yield_stops", g(&self.poll_yield_stops)),
            ("poll_yields_off", g(&self.poll_yields_off)),
            ("cpu_wait_permille", g(&self.cpu_wait_permille)),
            ("run_delay_ns", g(&self.run_delay_ns)),
            ("payoff_trials", g(&self.payoff_trials)),
            ("payoff_wins", g(&self.payoff_wins)),
            ("payoff_switches", g(&self.payoff_switches)),
            ("payoff_ratio_permille", g(&self.payoff_ratio_permille)),
            ("payoff_interval_ns", g(&self.payoff_interval_ns)),
            ("payoff_sleeping", g(&self.payoff_sleeping)),
            ("thread_light", g(&self.thread_light)),
            ("weight_switches", g(&self.weight_switches)),
            ("sleeps", g(&self.sleeps)),
            ("fd_events", g(&self.fd_events)),
            ("poll_ns", g(&self.poll_ns)),
            ("work_ns", g(&self.work_ns)),
            ("sleep_ns", g(&self.sleep_ns)),
            ("cpu_ns", g(&self.cpu_ns)),
        ]
    }
}

/// This thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
