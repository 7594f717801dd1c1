//! Per-iothread statistics, written by the thread and read lock-free by anyone (the API, tests):
//! what the poll policy is doing (window, hits, misses) and where the thread's time goes
//! (polling, working, sleeping; its CPU time). Declared with `osprey_metrics::metric_set!`.

use std::sync::atomic::{AtomicU64, Ordering};

osprey_metrics::metric_set! {
    /// Counters of one iothread. Each field is declared once here: its doc comment is the help
    /// text, its `#[metric]` attribute the kind and unit; the API's JSON, the Prometheus view and
    /// docs/api/metrics.md derive from it (`osprey_metrics`).
    #[derive(Debug, Default)]
    pub struct IoThreadStats {
        /// Returns from epoll_wait with at least one event.
        #[metric(counter)]
        pub wakeups: AtomicU64,
        /// Handler turns run.
        #[metric(counter)]
        pub handler_runs: AtomicU64,
        /// Control commands processed (attach, detach, poll parameters, shutdown).
        #[metric(counter)]
        pub commands: AtomicU64,
        /// Handlers attached.
        #[metric(gauge)]
        pub handlers: AtomicU64,
        /// File descriptors the thread watches for its handlers (the command fd not counted).
        #[metric(gauge)]
        pub watched_fds: AtomicU64,
        /// Handlers without a cheap check: while non-zero, the thread does not poll.
        #[metric(gauge)]
        pub poll_disabled_handlers: AtomicU64,
        /// The poll window of the last iteration.
        #[metric(gauge, ns)]
        pub poll_window_ns: AtomicU64,
        /// Iterations whose polling found work.
        #[metric(counter)]
        pub poll_hits: AtomicU64,
        /// Iterations that polled the whole window and found nothing.
        #[metric(counter)]
        pub poll_misses: AtomicU64,
        /// Iterations whose polling ended because a watched fd (a tap, a host socket) had
        /// work: the peek at the epoll set for handlers with such sources.
        #[metric(counter)]
        pub poll_fd_hits: AtomicU64,
        /// Times the poll loop yielded its CPU (sched_yield) to let other runnable work in.
        #[metric(counter)]
        pub poll_yields: AtomicU64,
        /// Adaptive, polling suspended: times the thread spun on in-flight completions before
        /// sleeping.
        #[metric(counter)]
        pub completion_spins: AtomicU64,
        /// Adaptive: completion spins that found work, a completion or a new request (the
        /// thread did not sleep).
        #[metric(counter)]
        pub completion_spin_hits: AtomicU64,
        /// Adaptive: time spent spinning on in-flight completions.
        #[metric(counter, ns)]
        pub completion_spin_ns: AtomicU64,
        /// Adaptive: 1 while polling is suspended because the host is busy.
        #[metric(gauge)]
        pub poll_suspended: AtomicU64,
        /// Adaptive: times polling was suspended because the host was busy.
        #[metric(counter)]
        pub poll_suspensions: AtomicU64,
        /// Adaptive: how long the current suspension lasts (0: not backing off).
        #[metric(gauge, ns)]
        pub poll_backoff_ns: AtomicU64,
        /// Adaptive: times the poll loop's yields were stopped because the host was busy.
        #[metric(counter)]
        pub poll_yield_stops: AtomicU64,
        /// Adaptive: 1 while the poll loop does not yield its CPU.
        #[metric(gauge)]
        pub poll_yields_off: AtomicU64,
        /// Adaptive: the share of the last 10 ms window's runnable time the thread spent
        /// waiting for a CPU.
        #[metric(gauge, permille)]
        pub cpu_wait_permille: AtomicU64,
        /// Adaptive: the thread's cumulative run delay (runnable, waiting for a CPU).
        #[metric(counter, ns)]
        pub run_delay_ns: AtomicU64,
        /// Adaptive: conclusive payoff trials (a segment in the other mode, polling or
        /// sleeping, bracketed by the current mode).
        #[metric(counter)]
        pub payoff_trials: AtomicU64,
        /// Adaptive: payoff trials skipped because threads on the host rarely waited for a CPU
        /// (polling took too little of anyone's CPU to matter; counted as kept).
        #[metric(counter)]
        pub payoff_skips: AtomicU64,
        /// Adaptive: payoff trials brought forward because the workload's rate moved more than
        /// 2× away from the rate the verdict was reached at (a bulk phase ended, or began).
        #[metric(counter)]
        pub payoff_shifts: AtomicU64,
        /// Adaptive: at the last due payoff trial, the share of the host's samples since the
        /// one before that saw a thread waiting for a CPU.
        #[metric(gauge, permille)]
        pub cpu_queue_waiting_permille: AtomicU64,
        /// Adaptive: threads runnable on the whole host at the last sample (`/proc/loadavg`,
        /// this one included; 0: not read).
        #[metric(gauge)]
        pub host_runnable: AtomicU64,
        /// Adaptive: payoff trials the other mode won.
        #[metric(counter)]
        pub payoff_wins: AtomicU64,
        /// Adaptive: switches between polling and sleeping (two won trials in a row).
        #[metric(counter)]
        pub payoff_switches: AtomicU64,
        /// Adaptive: the last payoff trial's request rate in the other mode against the
        /// current mode's.
        #[metric(gauge, permille, name = "payoff_rate")]
        pub payoff_ratio_permille: AtomicU64,
        /// Adaptive: the current interval between payoff trials.
        #[metric(gauge, ns)]
        pub payoff_interval_ns: AtomicU64,
        /// Adaptive: 1 while sleeping between events completes more requests than polling.
        #[metric(gauge)]
        pub payoff_sleeping: AtomicU64,
        /// 1 while the thread runs one nice step lighter because its policy polls (dynamic
        /// weights).
        #[metric(gauge)]
        pub thread_light: AtomicU64,
        /// Switches between the light and the base weight (dynamic weights).
        #[metric(counter)]
        pub weight_switches: AtomicU64,
        /// Times the thread changed the CPUs it runs on to keep off those of the vCPUs
        /// (`thread_placement` `Apart`).
        #[metric(counter)]
        pub placement_moves: AtomicU64,
        /// Times the thread went to sleep in epoll_wait.
        #[metric(counter)]
        pub sleeps: AtomicU64,
        /// Handler wake-ups by fd (epoll events, the command fd not counted).
        #[metric(counter)]
        pub fd_events: AtomicU64,
        /// Time spent polling.
        #[metric(counter, ns)]
        pub poll_ns: AtomicU64,
        /// Time spent running handlers.
        #[metric(counter, ns)]
        pub work_ns: AtomicU64,
        /// Time spent asleep in epoll_wait.
        #[metric(counter, ns)]
        pub sleep_ns: AtomicU64,
        /// The thread's CPU time (CLOCK_THREAD_CPUTIME_ID), sampled before a sleep at most
        /// every 5 ms.
        #[metric(counter, ns)]
        pub cpu_ns: AtomicU64,
    }
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

    /// A snapshot of every counter, as (name, value) pairs in declaration order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        use osprey_metrics::MetricSet;
        self.read_all()
            .into_iter()
            .map(|(m, r)| (m.field, r.number().unwrap_or(0)))
            .collect()
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
