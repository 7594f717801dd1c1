//! The `Adaptive` policy's payoff check, as pure code: does polling make this thread complete
//! more requests than sleeping between events would? Now and then it tries the other mode and
//! keeps whichever completed more: the signals a thread can read (its run delay, the load, PSI)
//! do not tell a neighbour in another scheduling group from its own helpers, and the requests
//! completed are what the guest sees.
//!
//! A trial alternates [`SEGMENT_NS`] segments, [`ROUNDS`] in the other mode each between two in
//! the current one (the brackets cancel a trend in the load). Two trials in a row won by
//! [`MARGIN_PERMILLE`] switch the mode, since one segment on a busy host can be far off; a
//! polling thread that finds sleeping ahead by [`DECISIVE_PERMILLE`] sleeps at once (a mistaken
//! sleep costs requests until the next trial, a mistaken poll costs requests and CPU). Trials
//! cost what the wrong mode loses, so the interval between them doubles while the verdict holds
//! (quadruples after a lopsided one), and an inconclusive trial (under [`MIN_REQUESTS`] per
//! segment) is retried after [`RETRY_NS`]. A polling thread skips a due trial, as if polling had
//! won it, when the host's samples since the last one rarely saw a thread waiting for a CPU (at
//! most [`QUIET_PERMILLE`] of at least [`QUIET_MIN_SAMPLES`]): its polling then took too little
//! of anyone's CPU for sleeping to complete the margin more, and the trial's sleeping segments
//! would only cost the guest latency. The verdict belongs to the workload it was reached on:
//! when the requests completed per [`SEGMENT_NS`] stay more than [`SHIFT_FACTOR`] times above or
//! below the current mode's rate in that trial for [`SHIFT_SEGMENTS`] live segments in a row
//! (a bulk transfer ended and a latency-bound exchange began, or the reverse), the next trial
//! comes at once and the intervals start again from the shortest. Measurements:
//! docs/performance.md.

/// The length of one segment (ns).
pub const SEGMENT_NS: u64 = 10_000_000;
/// Segments in the other mode per trial.
pub const ROUNDS: u32 = 3;
/// Segments per trial.
pub const TRIAL_SEGMENTS: u32 = 2 * ROUNDS + 1;
/// The first interval between trials, and the interval after a switch (ns).
pub const MIN_INTERVAL_NS: u64 = 100_000_000;
/// The longest interval between trials (ns): the check looks again at least this often.
pub const MAX_INTERVAL_NS: u64 = 3_200_000_000;
/// The other mode must complete this much more (‰) than the current one to take over.
pub const MARGIN_PERMILLE: u64 = 100;
/// Sleeping that completes this much more (‰) than polling in one trial takes over at once,
/// without a confirming trial.
pub const DECISIVE_PERMILLE: u64 = 250;
/// An inconclusive trial is retried after this (ns).
pub const RETRY_NS: u64 = 20_000_000;
/// A trial whose segments in either mode completed fewer than this many requests per segment
/// on average says nothing.
pub const MIN_REQUESTS: u64 = 16;
/// A due trial is skipped only after this many host samples since the last trial or skip.
pub const QUIET_MIN_SAMPLES: u64 = 50;
/// ... and when at most this share of them (‰) saw a thread waiting for a CPU: the margin a
/// switch needs. Sleeping frees the CPU the waiting threads want for at most the share of the
/// time they wait, too little to complete [`MARGIN_PERMILLE`] more (kernel workers and the
/// VMM's own threads that run for a moment now and then are 2-7.5 % of the samples here).
pub const QUIET_PERMILLE: u64 = MARGIN_PERMILLE;

/// The workload shifted when its rate is more than this many times above or below the rate
/// the verdict was reached at ...
pub const SHIFT_FACTOR: u64 = 2;
/// ... in this many live segments (at least [`MIN_REQUESTS`] each) in a row.
pub const SHIFT_SEGMENTS: u32 = 3;

/// Whether rate `a` is ahead of rate `b` by `permille` ‰ or more.
fn ahead_by(a: u64, b: u64, permille: u64) -> bool {
    a.saturating_mul(1000) >= b.saturating_mul(1000 + permille)
}

/// How the thread waits for work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Poll for the window the classic windows give, then sleep.
    #[default]
    Poll,
    /// Sleep between events, without polling.
    Sleep,
}

impl Mode {
    fn other(self) -> Self {
        match self {
            Mode::Poll => Mode::Sleep,
            Mode::Sleep => Mode::Poll,
        }
    }
}

/// Requests completed over a span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    requests: u64,
    ns: u64,
}

impl Span {
    fn plus(self, o: Span) -> Span {
        Span {
            requests: self.requests.saturating_add(o.requests),
            ns: self.ns.saturating_add(o.ns),
        }
    }

    /// Requests per second.
    fn rate(self) -> u64 {
        self.requests
            .saturating_mul(1_000_000_000)
            .checked_div(self.ns)
            .unwrap_or(0)
    }
}

/// Where a trial is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    /// Between trials.
    #[default]
    Steady,
    /// In segment `segment` (even: current mode; odd: the other), which began at `start_ns`
    /// with `start_requests` completed, with what the segments before it completed in each mode.
    Trial {
        segment: u32,
        start_ns: u64,
        start_requests: u64,
        current: Span,
        other: Span,
    },
}

/// What the check saw and did, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PayoffStats {
    /// Conclusive trials.
    pub trials: u64,
    /// Trials the other mode won.
    pub wins: u64,
    /// Switches of the current mode (two wins in a row).
    pub switches: u64,
    /// The last conclusive trial: the other mode's rate against the current mode's (‰).
    pub ratio_permille: u64,
    /// The current interval between trials (ns; 0 before the first reading).
    pub interval_ns: u64,
    /// Trials skipped because threads on the host rarely waited for a CPU.
    pub skips: u64,
    /// Trials brought forward because the workload's rate moved away from the verdict's.
    pub shifts: u64,
    /// At the last due trial: the share of the host's samples since the one before that saw
    /// a thread waiting for a CPU (‰).
    pub queue_waiting_permille: u64,
    /// The current mode is sleeping.
    pub sleeping: bool,
}

/// The host's samples since the last trial or skip: how many, and how many saw a thread
/// waiting for a CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CpuQueueTally {
    samples: u64,
    waiting: u64,
}

impl CpuQueueTally {
    /// The share of the samples (‰) that saw a thread wait (0 without samples).
    fn waiting_permille(self) -> u64 {
        self.waiting
            .saturating_mul(1000)
            .checked_div(self.samples)
            .unwrap_or(0)
    }

    /// Enough samples, and (almost) none saw a thread wait.
    fn quiet(self) -> bool {
        self.samples >= QUIET_MIN_SAMPLES
            && self.waiting.saturating_mul(1000) <= self.samples.saturating_mul(QUIET_PERMILLE)
    }
}

/// Decides between polling and sleeping by the requests each completes.
#[derive(Debug, Clone, Default)]
pub struct PayoffCheck {
    mode: Mode,
    phase: Phase,
    /// When the next trial begins.
    next_trial_ns: u64,
    interval_ns: u64,
    /// The other mode won the last trial: one more win switches.
    won_once: bool,
    /// The host's run queue since the last trial or skip.
    cpu_queue: CpuQueueTally,
    /// Between trials: what the workload does against the verdict's rate.
    shift: ShiftWatch,
    stats: PayoffStats,
}

/// Between trials, watches the rate of completed requests per [`SEGMENT_NS`] against the
/// current mode's rate at the last conclusive trial.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ShiftWatch {
    /// The current mode's rate at the last conclusive trial (0: nothing to compare with).
    verdict_rate: u64,
    /// Where the running segment began: (ns, requests).
    start: Option<(u64, u64)>,
    /// Live segments in a row whose rate was off by more than [`SHIFT_FACTOR`].
    off: u32,
}

impl ShiftWatch {
    /// Compares with `rate` from now on.
    fn arm(&mut self, rate: u64) {
        *self = Self {
            verdict_rate: rate,
            ..Self::default()
        };
    }

    /// Takes a reading; true when the workload has shifted (the watch disarms itself).
    fn observe(&mut self, now_ns: u64, requests: u64) -> bool {
        if self.verdict_rate == 0 {
            return false;
        }
        let Some((start_ns, start_requests)) = self.start else {
            self.start = Some((now_ns, requests));
            return false;
        };
        if now_ns.saturating_sub(start_ns) < SEGMENT_NS {
            return false;
        }
        self.start = Some((now_ns, requests));
        let span = Span {
            requests: requests.saturating_sub(start_requests),
            ns: now_ns - start_ns,
        };
        if span.requests < MIN_REQUESTS {
            // Idle segments say nothing about the next workload.
            return false;
        }
        let rate = span.rate();
        let off = rate.saturating_mul(SHIFT_FACTOR) < self.verdict_rate
            || rate > self.verdict_rate.saturating_mul(SHIFT_FACTOR);
        self.off = if off { self.off + 1 } else { 0 };
        if self.off < SHIFT_SEGMENTS {
            return false;
        }
        *self = Self::default();
        true
    }
}

impl PayoffCheck {
    /// Notes one sample of the host's run queue: whether a thread was waiting for a CPU (more
    /// threads runnable on the host than CPUs this thread may use). Without such samples every
    /// due trial runs.
    pub fn note_cpu_queue(&mut self, waiting: bool) {
        self.cpu_queue.samples = self.cpu_queue.samples.saturating_add(1);
        self.cpu_queue.waiting = self.cpu_queue.waiting.saturating_add(u64::from(waiting));
    }

    /// Takes a reading: the caller's monotonic clock and the thread's cumulative completed
    /// requests. `polling_possible` is false while something else (the contention guard) keeps
    /// the thread from polling; a trial then gives up, since its polling segments would not be.
    pub fn observe(&mut self, now_ns: u64, requests: u64, polling_possible: bool) {
        if self.interval_ns == 0 {
            self.interval_ns = MIN_INTERVAL_NS;
            self.next_trial_ns = now_ns.saturating_add(MIN_INTERVAL_NS);
        }
        let Phase::Trial {
            segment,
            start_ns,
            start_requests,
            mut current,
            mut other,
        } = self.phase
        else {
            if self.shift.observe(now_ns, requests) {
                self.stats.shifts += 1;
                self.interval_ns = MIN_INTERVAL_NS;
                self.next_trial_ns = now_ns;
            }
            if now_ns >= self.next_trial_ns && polling_possible {
                self.stats.queue_waiting_permille = self.cpu_queue.waiting_permille();
                if self.mode == Mode::Poll && !self.won_once && self.cpu_queue.quiet() {
                    // Polling took too little of anyone's CPU to lose: kept, without the trial.
                    self.stats.skips += 1;
                    self.cpu_queue = CpuQueueTally::default();
                    self.interval_ns = self.interval_ns.saturating_mul(2).min(MAX_INTERVAL_NS);
                    self.next_trial_ns = now_ns.saturating_add(self.interval_ns);
                    return;
                }
                self.phase = Phase::Trial {
                    segment: 0,
                    start_ns: now_ns,
                    start_requests: requests,
                    current: Span::default(),
                    other: Span::default(),
                };
            }
            return;
        };
        if !polling_possible {
            self.end_trial(now_ns, None);
            return;
        }
        if now_ns.saturating_sub(start_ns) < SEGMENT_NS {
            return;
        }
        let span = Span {
            requests: requests.saturating_sub(start_requests),
            ns: now_ns - start_ns,
        };
        if segment % 2 == 0 {
            current = current.plus(span);
        } else {
            other = other.plus(span);
        }
        if segment + 1 >= TRIAL_SEGMENTS {
            self.end_trial(now_ns, Some((current, other)));
        } else {
            self.phase = Phase::Trial {
                segment: segment + 1,
                start_ns: now_ns,
                start_requests: requests,
                current,
                other,
            };
        }
    }

    /// Closes a trial: `spans` holds what the current and the other mode's segments completed
    /// (None: abandoned).
    fn end_trial(&mut self, now_ns: u64, spans: Option<(Span, Span)>) {
        self.phase = Phase::Steady;
        self.cpu_queue = CpuQueueTally::default();
        let min = u64::from(ROUNDS) * MIN_REQUESTS;
        let conclusive =
            spans.filter(|(current, other)| current.requests >= min && other.requests >= min);
        if let Some((bracket, trial)) = conclusive {
            let (current, other) = (bracket.rate(), trial.rate());
            // The other mode's rate in thousandths, for the ratio and the (strict) margin test.
            let other_permille = other.saturating_mul(1000);
            self.stats.trials += 1;
            self.stats.ratio_permille = other_permille.checked_div(current).unwrap_or(u64::MAX);
            if other_permille > current.saturating_mul(1000 + MARGIN_PERMILLE) {
                self.stats.wins += 1;
                let decisive =
                    self.mode == Mode::Poll && ahead_by(other, current, DECISIVE_PERMILLE);
                if std::mem::take(&mut self.won_once) || decisive {
                    self.mode = self.mode.other();
                    self.stats.switches += 1;
                    self.interval_ns = MIN_INTERVAL_NS;
                    self.shift.arm(other);
                } else {
                    // Confirm at once.
                    self.won_once = true;
                    self.next_trial_ns = now_ns;
                    return;
                }
            } else {
                self.won_once = false;
                // The current mode ahead by the decisive margin: back off twice as fast.
                let growth = if ahead_by(current, other, DECISIVE_PERMILLE) {
                    4
                } else {
                    2
                };
                self.interval_ns = self.interval_ns.saturating_mul(growth).min(MAX_INTERVAL_NS);
                self.shift.arm(current);
            }
        } else if spans.is_some() {
            self.next_trial_ns = now_ns.saturating_add(RETRY_NS);
            return;
        }
        self.next_trial_ns = now_ns.saturating_add(self.interval_ns);
    }

    /// How the thread should wait now: the current mode, or the other one during a trial's
    /// segments in the other mode.
    pub fn mode(&self) -> Mode {
        match self.phase {
            Phase::Trial { segment, .. } if segment % 2 == 1 => self.mode.other(),
            _ => self.mode,
        }
    }

    /// What the check saw and did.
    pub fn stats(&self) -> PayoffStats {
        PayoffStats {
            interval_ns: self.interval_ns,
            sleeping: self.mode == Mode::Sleep,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// One trial, in ms.
    const TRIAL_MS: u64 = TRIAL_SEGMENTS as u64 * SEGMENT_NS / MS;
    /// The shortest interval and the trial after it, with a little slack (ms): from a fresh
    /// check or a switch, the time to the next verdict.
    const NEXT_VERDICT_MS: u64 = MIN_INTERVAL_NS / MS + TRIAL_MS + 2;

    /// A fresh check, run through its first trial with the guest completing `poll_rate`
    /// requests per second while the thread polls and `sleep_rate` while it sleeps.
    fn after_first_trial(poll_rate: u64, sleep_rate: u64) -> (PayoffCheck, Host) {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        h.run(&mut c, NEXT_VERDICT_MS, poll_rate, sleep_rate);
        (c, h)
    }

    /// A thread whose guest completes `poll_rate` requests per second while the thread polls
    /// and `sleep_rate` while it sleeps, sampled every millisecond.
    struct Host {
        t: u64,
        requests: u64,
        /// Fractional requests carried between samples (thousandths).
        carry: u64,
        /// The run queue's samples: none (`None`), or one per ms, every `n`-th seeing a thread
        /// wait for a CPU (`Some(n)`; `Some(0)`: none waits).
        queue: Option<u64>,
    }

    impl Host {
        fn new() -> Self {
            Self {
                t: 1,
                requests: 0,
                carry: 0,
                queue: None,
            }
        }

        fn with_queue(waiting_every: u64) -> Self {
            Self {
                queue: Some(waiting_every),
                ..Self::new()
            }
        }

        fn run(&mut self, c: &mut PayoffCheck, ms: u64, poll_rate: u64, sleep_rate: u64) {
            for _ in 0..ms {
                let rate = match c.mode() {
                    Mode::Poll => poll_rate,
                    Mode::Sleep => sleep_rate,
                };
                // requests per ms, in thousandths
                self.carry += rate;
                self.requests += self.carry / 1000;
                self.carry %= 1000;
                self.t += MS;
                if let Some(n) = self.queue {
                    c.note_cpu_queue(n > 0 && (self.t / MS).is_multiple_of(n));
                }
                c.observe(self.t, self.requests, true);
            }
        }
    }

    /// The share of `ms` milliseconds spent in `mode`.
    fn share(c: &mut PayoffCheck, h: &mut Host, ms: u64, poll: u64, sleep: u64, mode: Mode) -> u64 {
        let mut n = 0;
        for _ in 0..ms {
            h.run(c, 1, poll, sleep);
            if c.mode() == mode {
                n += 1;
            }
        }
        n * 100 / ms
    }

    #[test]
    fn keeps_polling_where_it_pays_and_backs_its_trials_off() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        // Idle host: polling completes 3× more.
        let polled = share(&mut c, &mut h, 10_000, 60_000, 20_000, Mode::Poll);
        assert_eq!(c.stats().switches, 0);
        assert!(c.stats().trials >= 5, "{:?}", c.stats());
        assert_eq!(c.stats().ratio_permille, 333);
        assert!(
            polled >= 97,
            "sleeping trials took {}% of the time",
            100 - polled
        );
        assert_eq!(c.stats().interval_ns, MAX_INTERVAL_NS);
        assert!(!c.stats().sleeping);
    }

    #[test]
    fn sleeps_where_sleeping_completes_more_and_comes_back_when_polling_pays_again() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        // A neighbour takes the CPU polling would burn: sleeping completes 30 % more.
        h.run(
            &mut c,
            MIN_INTERVAL_NS / MS + 2 * TRIAL_MS + 2,
            7_000,
            9_100,
        );
        assert_eq!(c.stats().switches, 1, "{:?}", c.stats());
        assert!(c.stats().sleeping);
        let slept = share(&mut c, &mut h, 5_000, 7_000, 9_100, Mode::Sleep);
        assert!(slept >= 95, "{slept}%");
        assert_eq!(c.stats().switches, 1, "no flapping: {:?}", c.stats());
        // The neighbour leaves: polling wins 3× again, found at the next trial.
        h.run(
            &mut c,
            MAX_INTERVAL_NS / MS + 2 * TRIAL_MS + 2,
            60_000,
            20_000,
        );
        assert_eq!(c.stats().switches, 2);
        assert!(!c.stats().sleeping);
    }

    #[test]
    fn one_won_trial_is_not_enough() {
        // The first trial's sleeping segments are lucky (by less than the decisive margin)...
        let (mut c, mut h) = after_first_trial(7_000, 8_400);
        let st = c.stats();
        assert_eq!((st.wins, st.switches), (1, 0), "{st:?}");
        assert_eq!(c.mode(), Mode::Poll);
        // ...the confirmation follows at once, and is not (nor lopsided: 1.17× for polling).
        h.run(&mut c, TRIAL_MS + 4, 7_000, 6_000);
        let st = c.stats();
        assert_eq!((st.trials, st.switches), (2, 0), "{st:?}");
        assert_eq!(c.mode(), Mode::Poll);
        assert_eq!(c.stats().interval_ns, 2 * MIN_INTERVAL_NS);
    }

    #[test]
    fn a_lopsided_trial_for_sleeping_switches_at_once_but_one_for_polling_does_not() {
        // Sleeping completes 1.3× more: one trial decides.
        let (mut c, mut h) = after_first_trial(7_000, 9_100);
        let st = c.stats();
        assert_eq!((st.trials, st.wins, st.switches), (1, 1, 1), "{st:?}");
        assert_eq!(c.mode(), Mode::Sleep);
        assert_eq!(st.interval_ns, MIN_INTERVAL_NS);
        // Polling completing 3× more needs its confirming trial before the thread polls again
        // (the sleeping rate stays where the verdict found it: no shift of the workload).
        h.run(&mut c, NEXT_VERDICT_MS, 30_000, 9_100);
        let st = c.stats();
        assert_eq!((st.wins, st.switches, st.shifts), (2, 1, 0), "{st:?}");
        assert_eq!(c.mode(), Mode::Sleep);
        h.run(&mut c, TRIAL_MS + 2, 30_000, 9_100);
        let st = c.stats();
        assert_eq!((st.wins, st.switches), (3, 2), "{st:?}");
        assert_eq!(c.mode(), Mode::Poll);
    }

    #[test]
    fn a_lopsided_keep_backs_off_twice_as_fast_as_a_close_one() {
        // Polling completes 1.3× more: the next trial is four intervals away.
        let (c, _) = after_first_trial(9_100, 7_000);
        let st = c.stats();
        assert_eq!((st.trials, st.wins), (1, 0), "{st:?}");
        assert_eq!(st.interval_ns, 4 * MIN_INTERVAL_NS);
        // 1.2× more: two intervals away.
        let (c, _) = after_first_trial(8_400, 7_000);
        let st = c.stats();
        assert_eq!((st.trials, st.wins), (1, 0), "{st:?}");
        assert_eq!(st.interval_ns, 2 * MIN_INTERVAL_NS);
        // A sleeping thread backs off the same way when polling loses by that much.
        let (mut c, mut h) = after_first_trial(7_000, 9_100);
        assert_eq!(c.mode(), Mode::Sleep);
        h.run(&mut c, NEXT_VERDICT_MS, 7_000, 9_100);
        let st = c.stats();
        assert_eq!((st.trials, st.switches), (2, 1), "{st:?}");
        assert_eq!(st.interval_ns, 4 * MIN_INTERVAL_NS);
    }

    #[test]
    fn an_inconclusive_trial_is_retried_soon_so_the_first_verdict_follows_the_load() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        // The guest boots for a second (2 requests per segment), then sleeping pays 1.3×.
        h.run(&mut c, 1_000, 200, 200);
        assert_eq!(c.stats().trials, 0);
        assert_eq!(c.mode(), Mode::Poll);
        // A trial may be under way: it ends, the retry follows within RETRY_NS, and that one
        // decides.
        h.run(&mut c, 2 * TRIAL_MS + RETRY_NS / MS + 2, 7_000, 9_100);
        let st = c.stats();
        assert_eq!(st.switches, 1, "{st:?}");
        assert_eq!(c.mode(), Mode::Sleep);
    }

    #[test]
    fn a_difference_within_the_margin_changes_nothing() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        h.run(&mut c, 5_000, 10_000, 10_900);
        assert_eq!(c.stats().switches, 0);
        assert!(c.stats().trials >= 4);
        assert_eq!(c.stats().ratio_permille, 1090);
    }

    #[test]
    fn an_idle_guest_says_nothing_and_keeps_the_interval_short() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        // One request every 5 ms, whatever the thread does: 2 per segment.
        h.run(&mut c, 2_000, 200, 200);
        assert_eq!(c.stats().trials, 0);
        assert_eq!(c.stats().interval_ns, MIN_INTERVAL_NS);
        assert_eq!(c.mode(), Mode::Poll);
    }

    #[test]
    fn the_bracket_cancels_a_rising_load() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        // The guest's load grows 15 % per segment and polling makes no difference. Against
        // the segment before it alone, the trial segment would win (1.15 > 1.1); between a
        // slower and a faster one, it must not.
        let mut rate = 5_000;
        for _ in 0..50 {
            h.run(&mut c, SEGMENT_NS / MS, rate, rate);
            rate = rate * 115 / 100;
        }
        assert_eq!(c.stats().switches, 0, "{:?}", c.stats());
        assert!(c.stats().trials > 0);
    }

    #[test]
    fn a_trial_gives_up_when_polling_is_not_possible() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        h.run(
            &mut c,
            MIN_INTERVAL_NS / MS + SEGMENT_NS / MS + 2,
            7_000,
            9_100,
        );
        assert_eq!(c.mode(), Mode::Sleep, "in the trial segment");
        c.observe(h.t + MS, h.requests, false);
        assert_eq!(c.mode(), Mode::Poll, "abandoned: back to the current mode");
        assert_eq!(c.stats().trials, 0);
        // No trial starts while polling is impossible.
        for i in 0..200 {
            c.observe(h.t + (2 + i) * MS, h.requests + i * 9, false);
            assert_eq!(c.mode(), Mode::Poll);
        }
    }

    #[test]
    fn hostile_readings_never_panic() {
        let mut c = PayoffCheck::default();
        // A clock that jumps back and a counter that wraps.
        for (t, r) in [
            (u64::MAX, u64::MAX),
            (0, 0),
            (5, u64::MAX),
            (u64::MAX, 3),
            (1, 1),
        ] {
            for _ in 0..4 {
                c.observe(t, r, true);
                let _ = c.mode();
            }
        }
    }

    #[test]
    fn a_quiet_host_skips_the_trials_and_never_sleeps() {
        // Nobody waits for a CPU (or one sample in 100 or in 20 does: kernel workers): the
        // trials are skipped, as if polling had won them, and the interval grows as it would.
        for waiting_every in [0, 100, 20] {
            let (mut c, mut h) = (PayoffCheck::default(), Host::with_queue(waiting_every));
            let polled = share(&mut c, &mut h, 10_000, 60_000, 20_000, Mode::Poll);
            let st = c.stats();
            assert_eq!(polled, 100, "{st:?}");
            assert_eq!((st.trials, st.switches), (0, 0), "{st:?}");
            assert!(st.skips >= 5, "{st:?}");
            assert_eq!(st.interval_ns, MAX_INTERVAL_NS);
        }
    }

    #[test]
    fn a_queued_host_runs_the_trials_and_sleeps_where_sleeping_pays() {
        // A thread waits in one sample of 5 (20 %): the trials run, and sleeping that completes
        // 30 % more takes over as without the samples.
        let (mut c, mut h) = (PayoffCheck::default(), Host::with_queue(5));
        h.run(&mut c, NEXT_VERDICT_MS, 7_000, 9_100);
        let st = c.stats();
        assert_eq!((st.trials, st.skips, st.switches), (1, 0, 1), "{st:?}");
        assert_eq!(c.mode(), Mode::Sleep);
    }

    #[test]
    fn a_sleeping_thread_tries_polling_again_even_on_a_quiet_host() {
        // Busy first: sleeping wins. Then the host goes quiet (the sleeper frees the CPU):
        // polling's trials still run, and win it back.
        let (mut c, mut h) = (PayoffCheck::default(), Host::with_queue(1));
        h.run(&mut c, NEXT_VERDICT_MS, 7_000, 9_100);
        assert_eq!(c.mode(), Mode::Sleep);
        h.queue = Some(0);
        h.run(&mut c, 2 * NEXT_VERDICT_MS + TRIAL_MS, 60_000, 20_000);
        let st = c.stats();
        assert_eq!((st.switches, st.wins), (2, 3), "{st:?}");
        assert_eq!(c.mode(), Mode::Poll);
    }

    #[test]
    fn too_few_samples_do_not_skip_a_trial() {
        let mut c = PayoffCheck::default();
        c.observe(1, 0, true);
        for i in 0..QUIET_MIN_SAMPLES - 1 {
            c.note_cpu_queue(false);
            c.observe(2 + i, 0, true);
        }
        c.observe(1 + MIN_INTERVAL_NS, 100, true);
        assert_eq!(c.stats().skips, 0);
        assert_ne!(c.phase, Phase::Steady, "the trial began");
    }

    /// A sleeping verdict reached on a bulk workload: once the workload turns latency-bound
    /// (a quarter of the rate, where polling completes 3× more), the next trial follows within a
    /// few segments instead of the backed-off interval.
    #[test]
    fn a_shift_of_the_workload_brings_the_next_trial_forward() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        // Bulk: sleeping completes 1.3× more; the verdict holds for a while, so the interval
        // backs off to its longest.
        h.run(&mut c, 20_000, 70_000, 91_000);
        assert!(c.stats().sleeping);
        assert_eq!(c.stats().interval_ns, MAX_INTERVAL_NS, "{:?}", c.stats());
        let trials = c.stats().trials;
        // Latency-bound: 20k/s sleeping (a quarter of 91k), 60k/s polling.
        h.run(
            &mut c,
            (u64::from(SHIFT_SEGMENTS) + 1) * SEGMENT_NS / MS + 2 * TRIAL_MS + 4,
            60_000,
            20_000,
        );
        let st = c.stats();
        assert_eq!(st.shifts, 1, "{st:?}");
        assert_eq!(
            st.trials,
            trials + 2,
            "the trial and its confirmation: {st:?}"
        );
        assert!(!st.sleeping, "{st:?}");
    }

    /// A workload whose rate wanders within the factor, or pauses, brings no trial forward.
    #[test]
    fn a_steady_or_idle_workload_is_no_shift() {
        let (mut c, mut h) = (PayoffCheck::default(), Host::new());
        h.run(&mut c, 5_000, 70_000, 91_000);
        assert!(c.stats().sleeping);
        // ±40 % around the verdict's rate, 100 ms at a time, and idle stretches.
        for rate in [91_000, 55_000, 127_000, 0, 91_000, 0, 60_000, 120_000] {
            h.run(&mut c, 100, rate * 7 / 9, rate);
        }
        assert_eq!(c.stats().shifts, 0, "{:?}", c.stats());
    }
}
