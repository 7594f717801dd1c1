//! The adaptive poll-window policies, as pure code: fed the `block_ns` of each loop iteration and
//! which handlers had events, they produce the next window. No clock or thread in here, so unit
//! tests check every window they produce.
//!
//! - **Classic** (QEMU 2.9–10.x): a window per handler. After an iteration, each handler with an
//!   event adjusts its window: unchanged if `block_ns <= window` (polling would have caught it);
//!   shrink (`/= poll_shrink`, or to 0 when `poll_shrink` is 0) if `block_ns > poll_max_ns`; else
//!   grow (`*= poll_grow` or 2, starting at 4 µs) up to `poll_max_ns`. The thread polls for the
//!   largest window of the handlers in the poll set; a handler idle for 7 s leaves the set and
//!   rejoins when it has an event.
//! - **Weighted** (the 2026 poll-weight RFC): each handler keeps an EWMA of its event interval
//!   with weight 2^-W; handlers without an event accumulate `block_ns`; anything reaching
//!   `poll_max_ns` resets to 0. The thread window grows towards the largest estimate among the
//!   handlers with an event and shrinks by halving (`poll_shrink` or 2) rather than resetting.
//! - **Adaptive** (Osprey's, the default): the classic windows, adjusted while the host is busy
//!   ([`super::contention`]): when the thread's own run delay says that the CPU it would burn is
//!   wanted by someone else (the guest's vCPU, the worker completing our I/O, another tenant), the
//!   poll loop first stops yielding (a yield hands a CPU hog its slice), and if that is not enough
//!   polling stops; each resumes after a back-off. And polling goes on only while it pays
//!   ([`super::payoff`]): now and then the thread sleeps between events for a short segment
//!   instead, and keeps sleeping when that completed more requests (when polling, it tries
//!   polling again the same way). While its polling is suspended, the thread still spins for up
//!   to `poll_max_ns` while requests are in flight, notifications left on
//!   ([`PollPolicy::completion_window`]): the wake-up a completion would otherwise cost is much
//!   of a QD1 request's time on a busy host.

use super::contention::{ContentionGuard, ContentionStats, HostSample};
use super::payoff::{Mode, PayoffCheck, PayoffStats};

/// Which policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Per-handler windows, reset on a miss (QEMU's classic behaviour).
    Classic,
    /// One thread window from weighted event-interval estimates, shrinking gradually.
    Weighted,
    /// Classic windows, suspended while the host is busy (the thread waits for a CPU) or while
    /// sleeping between events completes more requests.
    Adaptive,
}

/// The tunable parameters (QMP: poll-max-ns, poll-grow, poll-shrink, poll-weight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollParams {
    /// Longest window in ns; 0 disables polling.
    pub max_ns: u64,
    /// Growth factor; 0 means 2.
    pub grow: u64,
    /// Shrink divisor; 0 means reset to 0 (classic) or 2 (weighted).
    pub shrink: u64,
    /// The policy.
    pub policy: PolicyKind,
    /// Weighted policy: the newest sample counts 2^-weight (a shift, 1..=16).
    pub weight: u32,
}

impl Default for PollParams {
    fn default() -> Self {
        Self {
            max_ns: DEFAULT_MAX_NS,
            grow: 0,
            shrink: 0,
            policy: PolicyKind::Adaptive,
            weight: DEFAULT_WEIGHT,
        }
    }
}

/// Default `poll_max_ns` (32 µs).
pub const DEFAULT_MAX_NS: u64 = 32_768;
/// Default `poll_weight`.
pub const DEFAULT_WEIGHT: u32 = 3;
/// Largest `poll_weight`.
pub const MAX_WEIGHT: u32 = 16;
/// Largest `poll_max_ns` (1 s): longer windows are a configuration mistake.
pub const MAX_MAX_NS: u64 = 1_000_000_000;
/// Largest `poll_grow` / `poll_shrink`.
pub const MAX_FACTOR: u64 = 1 << 16;
/// The classic policy's first step.
pub const FIRST_STEP_NS: u64 = 4_000;
/// A classic handler with no event for this long leaves the poll set.
pub const IDLE_EVICT_NS: u64 = 7_000_000_000;

/// A polling parameter out of range: the field (our spelling; QMP's in the docs) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PollParamError {
    /// `poll_max_ns`, `poll_grow`, `poll_shrink` or `poll_weight`.
    pub field: &'static str,
    /// What the value must be, and what it was.
    pub reason: String,
}

impl PollParams {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PollParamError> {
        let err = |field, reason| Err(PollParamError { field, reason });
        if self.max_ns > MAX_MAX_NS {
            return err(
                "poll_max_ns",
                format!("must be at most {MAX_MAX_NS}, got {}", self.max_ns),
            );
        }
        if self.grow > MAX_FACTOR {
            return err(
                "poll_grow",
                format!("must be at most {MAX_FACTOR}, got {}", self.grow),
            );
        }
        if self.shrink > MAX_FACTOR {
            return err(
                "poll_shrink",
                format!("must be at most {MAX_FACTOR}, got {}", self.shrink),
            );
        }
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return err(
                "poll_weight",
                format!(
                    "must be a shift from 1 to {MAX_WEIGHT}, got {}",
                    self.weight
                ),
            );
        }
        Ok(())
    }

    fn grow_factor(&self) -> u64 {
        if self.grow == 0 {
            2
        } else {
            self.grow
        }
    }
}

/// Poll state of one handler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerPoll {
    /// Classic: the handler's window. Weighted: its event-interval estimate.
    pub ns: u64,
    /// When it last had an event (the caller's monotonic ns).
    pub last_event_ns: u64,
    /// Classic: in the poll set (not idle for 7 s).
    pub in_poll_set: bool,
}

/// The policy state of one iothread.
#[derive(Debug, Clone)]
pub struct PollPolicy {
    params: PollParams,
    handlers: Vec<Option<HandlerPoll>>,
    /// Weighted: the thread window.
    thread_ns: u64,
    /// Adaptive: whether the host is busy, and what it saw.
    guard: ContentionGuard,
    /// Adaptive: whether polling completes more requests than sleeping.
    payoff: PayoffCheck,
    /// Adaptive: polling is suspended (as of the last `update` or sample).
    suspended: bool,
}

impl PollPolicy {
    /// A policy with `params` and no handlers.
    pub fn new(params: PollParams) -> Self {
        Self {
            params,
            handlers: Vec::new(),
            thread_ns: 0,
            guard: ContentionGuard::default(),
            payoff: PayoffCheck::default(),
            suspended: false,
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> PollParams {
        self.params
    }

    /// Replaces the parameters and resets every window to 0 (as QEMU does on a live change).
    pub fn set_params(&mut self, params: PollParams) {
        self.params = params;
        self.thread_ns = 0;
        self.guard.reset();
        self.payoff = PayoffCheck::default();
        self.suspended = false;
        for h in self.handlers.iter_mut().flatten() {
            h.ns = 0;
        }
    }

    /// Starts tracking handler `slot` (at time `now_ns`).
    pub fn add(&mut self, slot: usize, now_ns: u64) {
        if self.handlers.len() <= slot {
            self.handlers.resize(slot + 1, None);
        }
        self.handlers[slot] = Some(HandlerPoll {
            ns: 0,
            last_event_ns: now_ns,
            in_poll_set: true,
        });
    }

    /// Stops tracking handler `slot`.
    pub fn remove(&mut self, slot: usize) {
        if let Some(h) = self.handlers.get_mut(slot) {
            *h = None;
        }
    }

    /// The state of handler `slot`.
    pub fn handler(&self, slot: usize) -> Option<HandlerPoll> {
        self.handlers.get(slot).copied().flatten()
    }

    /// Adaptive: feeds the contention guard a sample of the thread's run delay, and the payoff
    /// check its completed requests (the caller takes one every
    /// [`super::contention::SAMPLE_PERIOD_NS`] or so). Other policies ignore it.
    pub fn observe_host(&mut self, sample: HostSample) {
        if self.params.policy != PolicyKind::Adaptive || self.params.max_ns == 0 {
            return;
        }
        self.guard.observe(sample);
        let guard_suspended = self.guard.suspended(sample.now_ns);
        self.payoff
            .observe(sample.now_ns, sample.requests, !guard_suspended);
        self.suspended = self.adaptive_suspended(sample.now_ns);
    }

    /// Adaptive: polling is suspended by the guard, or sleeping pays more.
    fn adaptive_suspended(&self, now_ns: u64) -> bool {
        self.guard.suspended(now_ns) || self.payoff.mode() == Mode::Sleep
    }

    /// Whether polling is suspended (Adaptive only), because the host is busy or because
    /// sleeping completed more requests: the thread then sleeps between events, without even
    /// the first-step probe.
    pub fn suspended(&self) -> bool {
        self.suspended
    }

    /// Whether the poll loop may yield its CPU at `now_ns`: always, except when Adaptive's guard
    /// stopped the yields on a busy host.
    pub fn yields_allowed(&self, now_ns: u64) -> bool {
        self.params.policy != PolicyKind::Adaptive || self.guard.yields_allowed(now_ns)
    }

    /// The contention guard's view (Adaptive).
    pub fn contention(&self) -> ContentionStats {
        self.guard.stats()
    }

    /// The payoff check's view (Adaptive).
    pub fn payoff(&self) -> PayoffStats {
        self.payoff.stats()
    }

    /// Whether handler `slot` is polled (classic: in the poll set; weighted: always).
    pub fn is_polled(&self, slot: usize) -> bool {
        self.handler(slot)
            .is_some_and(|h| h.in_poll_set || self.params.policy == PolicyKind::Weighted)
    }

    /// The window to poll for before sleeping, in ns (0: do not poll).
    pub fn window(&self) -> u64 {
        if self.params.max_ns == 0 || self.suspended {
            return 0;
        }
        match self.params.policy {
            PolicyKind::Classic | PolicyKind::Adaptive => self
                .handlers
                .iter()
                .flatten()
                .filter(|h| h.in_poll_set)
                .map(|h| h.ns)
                .max()
                .unwrap_or(0),
            PolicyKind::Weighted => self.thread_ns,
        }
    }

    /// How long to spin on the completions of requests in flight before sleeping, in ns (0:
    /// not at all). Adaptive only, and only while its polling is suspended: the thread then
    /// leaves the queues' notifications on (no guest request waits for it) but, having just
    /// submitted, watches the completion and avail rings for up to `poll_max_ns` (a new request
    /// also ends the watch), so a completion that
    /// follows within that does not pay for the thread's wake-up (on a nested host, much of a
    /// QD1 request's time: docs/performance.md). Classic and Weighted never do: they stay as QEMU defines them.
    pub fn completion_window(&self) -> u64 {
        if self.params.policy == PolicyKind::Adaptive && self.suspended {
            self.params.max_ns
        } else {
            0
        }
    }

    /// Adjusts after an iteration that blocked (polled and/or slept) for `block_ns`, in which
    /// the handlers in `events` had work; `now_ns` is the caller's monotonic clock.
    pub fn update(&mut self, block_ns: u64, events: &[usize], now_ns: u64) {
        if self.params.max_ns == 0 {
            return;
        }
        let p = self.params;
        if p.policy == PolicyKind::Adaptive {
            self.suspended = self.adaptive_suspended(now_ns);
        }
        match p.policy {
            PolicyKind::Classic | PolicyKind::Adaptive => {
                for (slot, h) in self.handlers.iter_mut().enumerate() {
                    let Some(h) = h.as_mut() else { continue };
                    if events.contains(&slot) {
                        h.last_event_ns = now_ns;
                        h.in_poll_set = true;
                        h.ns = classic_adjust(h.ns, block_ns, &p);
                    } else if h.in_poll_set
                        && now_ns.saturating_sub(h.last_event_ns) >= IDLE_EVICT_NS
                    {
                        h.in_poll_set = false;
                        h.ns = 0;
                    }
                }
            }
            PolicyKind::Weighted => {
                let w = p.weight;
                let mut adj: Option<u64> = None;
                for (slot, h) in self.handlers.iter_mut().enumerate() {
                    let Some(h) = h.as_mut() else { continue };
                    if events.contains(&slot) {
                        h.last_event_ns = now_ns;
                        h.ns = if h.ns == 0 {
                            block_ns
                        } else {
                            h.ns - (h.ns >> w) + (block_ns >> w)
                        };
                        if h.ns >= p.max_ns {
                            h.ns = 0;
                        }
                        adj = Some(adj.map_or(h.ns, |a| a.max(h.ns)));
                    } else if h.ns != 0 {
                        h.ns = h.ns.saturating_add(block_ns);
                        if h.ns >= p.max_ns {
                            h.ns = 0;
                        }
                    }
                }
                if let Some(adj) = adj {
                    self.thread_ns = weighted_adjust(self.thread_ns, adj, &p);
                }
            }
        }
    }
}

/// One classic adjustment of a handler window.
pub fn classic_adjust(ns: u64, block_ns: u64, p: &PollParams) -> u64 {
    if block_ns <= ns {
        ns
    } else if block_ns > p.max_ns {
        // poll_shrink 0 means reset.
        ns.checked_div(p.shrink).unwrap_or(0)
    } else if ns < p.max_ns && block_ns < p.max_ns {
        let grown = if ns == 0 {
            FIRST_STEP_NS
        } else {
            ns.saturating_mul(p.grow_factor())
        };
        grown.min(p.max_ns)
    } else {
        ns
    }
}

/// One weighted adjustment of the thread window towards `adj`.
pub fn weighted_adjust(poll_ns: u64, adj: u64, p: &PollParams) -> u64 {
    if adj > poll_ns {
        let g = p.grow_factor();
        let grown = poll_ns.saturating_mul(g);
        let next = if adj > grown { adj } else { grown };
        next.min(p.max_ns)
    } else {
        let s = if p.shrink == 0 { 2 } else { p.shrink };
        if adj < poll_ns / s {
            poll_ns / s
        } else {
            poll_ns
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classic() -> PollParams {
        PollParams::default()
    }

    #[test]
    fn classic_grows_from_4us_doubling_to_the_max_and_resets_on_a_long_block() {
        let p = classic();
        let mut pol = PollPolicy::new(p);
        pol.add(0, 0);
        assert_eq!(pol.window(), 0);
        let mut seen = Vec::new();
        // Each block just outlasts the window (polling missed, then slept briefly): grow.
        for (i, block) in [1_000u64, 5_000, 9_000, 17_000, 32_500, 32_700]
            .into_iter()
            .enumerate()
        {
            pol.update(block, &[0], i as u64 + 1);
            seen.push(pol.window());
        }
        // 0 → 4000 → 8000 → 16000 → 32000 → 32768 (clamped) → 32.7 µs ≤ window: unchanged.
        assert_eq!(seen, vec![4_000, 8_000, 16_000, 32_000, 32_768, 32_768]);
        pol.update(40_000, &[0], 7); // longer than poll_max_ns: reset (shrink 0)
        assert_eq!(pol.window(), 0);
        pol.update(1_000, &[0], 8); // short block: grow again from 4 µs
        assert_eq!(pol.window(), 4_000);
        pol.update(3_000, &[0], 9); // caught by the window: unchanged
        assert_eq!(pol.window(), 4_000);
    }

    #[test]
    fn classic_shrink_divides_and_grow_factor_applies() {
        let p = PollParams {
            grow: 4,
            shrink: 2,
            max_ns: 100_000,
            ..classic()
        };
        assert_eq!(classic_adjust(0, 10, &p), 4_000);
        assert_eq!(classic_adjust(4_000, 5_000, &p), 16_000);
        assert_eq!(classic_adjust(16_000, 20_000, &p), 64_000);
        assert_eq!(classic_adjust(64_000, 70_000, &p), 100_000);
        assert_eq!(classic_adjust(100_000, 200_000, &p), 50_000);
        assert_eq!(classic_adjust(50_000, 200_000, &p), 25_000);
        // block == max: neither shrink nor grow.
        assert_eq!(classic_adjust(50_000, 100_000, &p), 50_000);
    }

    #[test]
    fn classic_thread_window_is_the_largest_handler_window_and_idle_handlers_leave() {
        let mut pol = PollPolicy::new(classic());
        pol.add(0, 0);
        pol.add(1, 0);
        pol.update(1_000, &[0], 10);
        pol.update(5_000, &[0], 20);
        assert_eq!(pol.handler(0).map(|h| h.ns), Some(8_000));
        assert_eq!(
            pol.handler(1).map(|h| h.ns),
            Some(0),
            "a handler without events is not adjusted"
        );
        assert_eq!(pol.window(), 8_000);
        // Handler 0 goes quiet for 7 s: it leaves the poll set and the window drops.
        pol.update(1_000, &[1], IDLE_EVICT_NS + 20);
        assert!(!pol.is_polled(0));
        assert_eq!(pol.window(), 4_000, "only handler 1's window remains");
        // An event brings it back.
        pol.update(1_000, &[0], IDLE_EVICT_NS + 30);
        assert!(pol.is_polled(0));
    }

    #[test]
    fn weighted_tracks_an_ewma_and_halves_instead_of_resetting() {
        let p = PollParams {
            policy: PolicyKind::Weighted,
            weight: 2,
            ..classic()
        };
        let mut pol = PollPolicy::new(p);
        pol.add(0, 0);
        pol.update(8_000, &[0], 1); // first sample: ns = block_ns, window grows to it
        assert_eq!(pol.handler(0).map(|h| h.ns), Some(8_000));
        assert_eq!(pol.window(), 8_000);
        pol.update(16_000, &[0], 2); // ns = 8000 - 2000 + 4000 = 10000; grow: max(10000, 16000) = 16000
        assert_eq!(pol.handler(0).map(|h| h.ns), Some(10_000));
        assert_eq!(pol.window(), 16_000);
        pol.update(1_000, &[0], 3); // ns = 10000 - 2500 + 250 = 7750 < 16000/2: halve
        assert_eq!(pol.handler(0).map(|h| h.ns), Some(7_750));
        assert_eq!(pol.window(), 8_000);
        pol.update(1_000, &[0], 4); // ns = 7750 - 1937 + 250 = 6063 ≥ 8000/2: unchanged
        assert_eq!(pol.handler(0).map(|h| h.ns), Some(6_063));
        assert_eq!(pol.window(), 8_000);
        // A sample at or beyond poll_max_ns resets the estimate; with no event the window stays.
        pol.update(200_000, &[0], 5);
        assert_eq!(pol.handler(0).map(|h| h.ns), Some(0));
        assert_eq!(pol.window(), 4_000, "adj 0 < 8000/2: halve");
    }

    #[test]
    fn weighted_sporadic_handlers_drop_out() {
        let p = PollParams {
            policy: PolicyKind::Weighted,
            ..classic()
        };
        let mut pol = PollPolicy::new(p);
        pol.add(0, 0);
        pol.add(1, 0);
        pol.update(10_000, &[1], 1);
        assert_eq!(pol.handler(1).map(|h| h.ns), Some(10_000));
        // Handler 1 has no more events: its estimate accumulates block_ns until poll_max_ns.
        pol.update(10_000, &[0], 2);
        assert_eq!(pol.handler(1).map(|h| h.ns), Some(20_000));
        pol.update(13_000, &[0], 3);
        assert_eq!(
            pol.handler(1).map(|h| h.ns),
            Some(0),
            "33000 ≥ 32768: dropped"
        );
        // No event at all: the window does not change.
        let before = pol.window();
        pol.update(5_000, &[], 4);
        assert_eq!(pol.window(), before);
    }

    #[test]
    fn zero_max_disables_and_live_change_resets() {
        let mut pol = PollPolicy::new(classic());
        pol.add(0, 0);
        pol.update(1_000, &[0], 1);
        assert_eq!(pol.window(), 4_000);
        pol.set_params(PollParams {
            max_ns: 0,
            ..classic()
        });
        assert_eq!(pol.window(), 0);
        pol.update(1_000, &[0], 2);
        assert_eq!(pol.window(), 0, "polling off stays off");
        pol.set_params(classic());
        assert_eq!(
            pol.handler(0).map(|h| h.ns),
            Some(0),
            "a live change resets windows"
        );
    }

    #[test]
    fn validation_names_the_field() {
        assert!(PollParams::default().validate().is_ok());
        let bad = PollParams {
            weight: 0,
            ..PollParams::default()
        };
        assert_eq!(
            bad.validate().expect_err("weight").to_string(),
            "poll_weight: must be a shift from 1 to 16, got 0"
        );
        let bad = PollParams {
            max_ns: MAX_MAX_NS + 1,
            ..PollParams::default()
        };
        let e = bad.validate().expect_err("max");
        assert_eq!(e.field, "poll_max_ns");
        assert!(e.reason.starts_with("must be at most"), "{e}");
        let bad = PollParams {
            grow: MAX_FACTOR + 1,
            ..PollParams::default()
        };
        assert_eq!(bad.validate().expect_err("grow").field, "poll_grow");
    }

    #[test]
    fn adaptive_polls_like_classic_until_the_host_is_busy() {
        use crate::poll::contention::{HostSample, WINDOW_NS};
        let p = PollParams {
            policy: PolicyKind::Adaptive,
            ..PollParams::default()
        };
        let classic_params = PollParams {
            policy: PolicyKind::Classic,
            ..PollParams::default()
        };
        let (mut adaptive, mut classic) = (PollPolicy::new(p), PollPolicy::new(classic_params));
        for pol in [&mut adaptive, &mut classic] {
            pol.add(0, 0);
            for i in 1..5 {
                pol.update(1_000, &[0], i * 1_000);
            }
        }
        assert_eq!(adaptive.window(), classic.window());
        assert!(adaptive.window() > 0);
        // A window in which the thread waited 96 % of its runnable time.
        let sample = |now: u64, cpu: u64, delay: u64| HostSample {
            now_ns: now,
            cpu_ns: cpu,
            run_delay_ns: delay,
            requests: 0,
        };
        adaptive.observe_host(sample(10_000, 0, 0));
        adaptive.observe_host(sample(10_000 + WINDOW_NS, 400_000, 9_600_000));
        // First the poll loop stops yielding; polling goes on.
        assert!(!adaptive.yields_allowed(10_000 + WINDOW_NS));
        assert!(!adaptive.suspended() && adaptive.window() > 0);
        // Still starved without yields: no polling on a busy host.
        adaptive.observe_host(sample(10_000 + 2 * WINDOW_NS, 800_000, 19_200_000));
        assert!(adaptive.suspended());
        assert_eq!(adaptive.window(), 0, "no polling on a busy host");
        assert_eq!(adaptive.contention().suspensions, 1);
        // It spins on its completions instead, for at most poll_max_ns.
        assert_eq!(adaptive.completion_window(), p.max_ns);
        // Classic ignores the host, and always yields.
        classic.observe_host(sample(10_000, 0, 0));
        classic.observe_host(sample(10_000 + WINDOW_NS, 400_000, 9_600_000));
        assert!(!classic.suspended() && classic.window() > 0);
        assert!(classic.yields_allowed(10_000 + WINDOW_NS));
        assert_eq!(classic.completion_window(), 0, "classic stays QEMU's");
        // The suspension ends with its back-off.
        adaptive.update(1_000, &[0], 10_000 + 3 * WINDOW_NS + 1);
        assert!(!adaptive.suspended());
        assert!(adaptive.window() > 0);
        assert_eq!(
            adaptive.completion_window(),
            0,
            "polling covers completions"
        );
    }

    #[test]
    fn adaptive_stops_polling_where_sleeping_completes_more_and_classic_does_not() {
        use crate::poll::payoff::{MIN_INTERVAL_NS, SEGMENT_NS, TRIAL_SEGMENTS};
        let classic_params = PollParams {
            policy: PolicyKind::Classic,
            ..PollParams::default()
        };
        let (mut adaptive, mut classic) = (
            PollPolicy::new(PollParams::default()),
            PollPolicy::new(classic_params),
        );
        for pol in [&mut adaptive, &mut classic] {
            pol.add(0, 0);
            // A guest that completes 8 requests per ms while the thread polls and 11 while it
            // sleeps; the thread neither waits for a CPU nor runs (the guard stays quiet).
            let mut requests = 0;
            // (Time for two trials; sleeping ahead by 37 % decides in the first.)
            let ms = MIN_INTERVAL_NS / 1_000_000
                + 2 * TRIAL_SEGMENTS as u64 * SEGMENT_NS / 1_000_000
                + 2;
            for i in 1..=ms {
                let now = i * 1_000_000;
                requests += if pol.suspended() { 11 } else { 8 };
                pol.update(1_000, &[0], now);
                pol.observe_host(HostSample {
                    now_ns: now,
                    cpu_ns: 0,
                    run_delay_ns: 0,
                    requests,
                });
            }
        }
        assert!(adaptive.suspended());
        assert_eq!(adaptive.window(), 0);
        assert_eq!(adaptive.payoff().switches, 1);
        assert!(adaptive.payoff().sleeping);
        assert_eq!(adaptive.completion_window(), DEFAULT_MAX_NS);
        assert_eq!(
            adaptive.contention().suspensions,
            0,
            "the guard did not do it"
        );
        assert!(!classic.suspended() && classic.window() > 0);
        assert_eq!(classic.payoff().trials, 0);
        assert_eq!(classic.completion_window(), 0);
        // A live change forgets the verdict.
        adaptive.set_params(PollParams::default());
        assert!(!adaptive.suspended());
        assert!(!adaptive.payoff().sleeping);
        assert_eq!(adaptive.completion_window(), 0);
    }
}
