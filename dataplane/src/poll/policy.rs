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

//!
//! Each policy is a type with only its own state ([`Classic`], [`Weighted`], [`Adaptive`]);
//! [`PollPolicy`] holds the parameters and the one in force.

use super::contention::{ContentionGuard, ContentionStats, HostSample};
pub use super::params::{
    PolicyKind, PollParamError, PollParams, DEFAULT_MAX_NS, DEFAULT_WEIGHT, FIRST_STEP_NS,
    IDLE_EVICT_NS, MAX_FACTOR, MAX_MAX_NS, MAX_WEIGHT,
};
use super::payoff::{Mode, PayoffCheck, PayoffStats};

/// Classic's state of one handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClassicHandler {
    /// The handler's window.
    window_ns: u64,
    /// When it last had an event (the caller's monotonic ns).
    last_event_ns: u64,
    /// In the poll set (not idle for [`IDLE_EVICT_NS`]).
    in_poll_set: bool,
}

/// The classic policy: a window per handler, the thread polling for the largest.
#[derive(Debug, Clone, Default)]
pub struct Classic {
    handlers: Vec<Option<ClassicHandler>>,
}

impl Classic {
    fn add(&mut self, slot: usize, now_ns: u64) {
        put(
            &mut self.handlers,
            slot,
            ClassicHandler {
                window_ns: 0,
                last_event_ns: now_ns,
                in_poll_set: true,
            },
        );
    }

    fn window(&self) -> u64 {
        self.handlers
            .iter()
            .flatten()
            .filter(|h| h.in_poll_set)
            .map(|h| h.window_ns)
            .max()
            .unwrap_or(0)
    }

    fn update(&mut self, block_ns: u64, events: &[usize], now_ns: u64, p: &PollParams) {
        for (slot, h) in self.handlers.iter_mut().enumerate() {
            let Some(h) = h.as_mut() else { continue };
            if events.contains(&slot) {
                h.last_event_ns = now_ns;
                h.in_poll_set = true;
                h.window_ns = classic_adjust(h.window_ns, block_ns, p);
            } else if h.in_poll_set && now_ns.saturating_sub(h.last_event_ns) >= IDLE_EVICT_NS {
                h.in_poll_set = false;
                h.window_ns = 0;
            }
        }
    }

    /// The handlers as they are, windows back to 0 (a live change of the parameters).
    fn reset(&mut self) {
        for h in self.handlers.iter_mut().flatten() {
            h.window_ns = 0;
        }
    }
}

/// The weighted policy: an event-interval estimate per handler, one window for the thread.
#[derive(Debug, Clone, Default)]
pub struct Weighted {
    /// Each handler's estimate.
    estimates: Vec<Option<u64>>,
    /// The thread window.
    thread_ns: u64,
}

impl Weighted {
    fn update(&mut self, block_ns: u64, events: &[usize], p: &PollParams) {
        let w = p.weight;
        let mut adj: Option<u64> = None;
        for (slot, ns) in self.estimates.iter_mut().enumerate() {
            let Some(ns) = ns.as_mut() else { continue };
            if events.contains(&slot) {
                *ns = if *ns == 0 {
                    block_ns
                } else {
                    *ns - (*ns >> w) + (block_ns >> w)
                };
                if *ns >= p.max_ns {
                    *ns = 0;
                }
                adj = Some(adj.map_or(*ns, |a| a.max(*ns)));
            } else if *ns != 0 {
                *ns = ns.saturating_add(block_ns);
                if *ns >= p.max_ns {
                    *ns = 0;
                }
            }
        }
        if let Some(adj) = adj {
            self.thread_ns = weighted_adjust(self.thread_ns, adj, p);
        }
    }

    /// The handlers as they are, estimates and window back to 0.
    fn reset(&mut self) {
        self.thread_ns = 0;
        for ns in self.estimates.iter_mut().flatten() {
            *ns = 0;
        }
    }
}

/// Osprey's policy: classic windows, suspended while the host is busy or while sleeping
/// between events completes more requests.
#[derive(Debug, Clone, Default)]
pub struct Adaptive {
    windows: Classic,
    /// Whether the host is busy, and what it saw.
    guard: ContentionGuard,
    /// Whether polling completes more requests than sleeping.
    payoff: PayoffCheck,
    /// Polling is suspended (as of the last `update` or sample).
    suspended: bool,
}

impl Adaptive {
    /// Polling is suspended by the guard, or sleeping pays more.
    fn suspended_at(&self, now_ns: u64) -> bool {
        self.guard.suspended(now_ns) || self.payoff.mode() == Mode::Sleep
    }

    fn observe_host(&mut self, sample: HostSample) {
        self.guard.observe(sample);
        if let Some(waiting) = sample.cpu_queue {
            self.payoff.note_cpu_queue(waiting);
        }
        let guard_suspended = self.guard.suspended(sample.now_ns);
        self.payoff
            .observe(sample.now_ns, sample.requests, !guard_suspended);
        self.suspended = self.suspended_at(sample.now_ns);
    }

    /// The handlers as they are, windows at 0, the host's verdicts forgotten.
    fn reset(&mut self) {
        self.windows.reset();
        self.guard.reset();
        self.payoff = PayoffCheck::default();
        self.suspended = false;
    }
}

/// The policy in force, with its own state. One per iothread, never moved on the hot path: the
/// size of the Adaptive variant costs nothing a box would save.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
enum Policy {
    Classic(Classic),
    Weighted(Weighted),
    Adaptive(Adaptive),
}

impl Policy {
    fn new(kind: PolicyKind) -> Self {
        match kind {
            PolicyKind::Classic => Policy::Classic(Classic::default()),
            PolicyKind::Weighted => Policy::Weighted(Weighted::default()),
            PolicyKind::Adaptive => Policy::Adaptive(Adaptive::default()),
        }
    }

    fn kind(&self) -> PolicyKind {
        match self {
            Policy::Classic(_) => PolicyKind::Classic,
            Policy::Weighted(_) => PolicyKind::Weighted,
            Policy::Adaptive(_) => PolicyKind::Adaptive,
        }
    }

    /// The classic windows (Classic's own, Adaptive's), if the policy keeps them.
    fn classic(&self) -> Option<&Classic> {
        match self {
            Policy::Classic(c) => Some(c),
            Policy::Adaptive(a) => Some(&a.windows),
            Policy::Weighted(_) => None,
        }
    }

    fn classic_mut(&mut self) -> Option<&mut Classic> {
        match self {
            Policy::Classic(c) => Some(c),
            Policy::Adaptive(a) => Some(&mut a.windows),
            Policy::Weighted(_) => None,
        }
    }

    fn adaptive(&self) -> Option<&Adaptive> {
        match self {
            Policy::Adaptive(a) => Some(a),
            _ => None,
        }
    }
}

/// Puts `v` in `slot` of `list`, growing it as needed.
fn put<T: Clone>(list: &mut Vec<Option<T>>, slot: usize, v: T) {
    if list.len() <= slot {
        list.resize(slot + 1, None);
    }
    list[slot] = Some(v);
}

/// The policy state of one iothread.
#[derive(Debug, Clone)]
pub struct PollPolicy {
    params: PollParams,
    policy: Policy,
}

impl PollPolicy {
    /// A policy with `params` and no handlers.
    pub fn new(params: PollParams) -> Self {
        Self {
            params,
            policy: Policy::new(params.policy),
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> PollParams {
        self.params
    }

    /// Replaces the parameters and resets every window to 0 (as QEMU does on a live change).
    /// The handlers stay tracked; a change of policy starts them afresh in the new one, as if
    /// they had arrived at `now_ns`.
    pub fn set_params(&mut self, params: PollParams, now_ns: u64) {
        if params.policy != self.policy.kind() {
            let mut next = Policy::new(params.policy);
            for slot in self.tracked() {
                Self::track(&mut next, slot, now_ns);
            }
            self.policy = next;
        }
        self.params = params;
        match &mut self.policy {
            Policy::Classic(c) => c.reset(),
            Policy::Weighted(w) => w.reset(),
            Policy::Adaptive(a) => a.reset(),
        }
    }

    /// The slots of the handlers tracked.
    fn tracked(&self) -> Vec<usize> {
        let slots = |v: Vec<bool>| {
            v.into_iter()
                .enumerate()
                .filter_map(|(slot, on)| on.then_some(slot))
                .collect()
        };
        match &self.policy {
            Policy::Weighted(w) => slots(w.estimates.iter().map(Option::is_some).collect()),
            p => slots(
                p.classic()
                    .map(|c| c.handlers.iter().map(Option::is_some).collect())
                    .unwrap_or_default(),
            ),
        }
    }

    fn track(policy: &mut Policy, slot: usize, now_ns: u64) {
        match policy {
            Policy::Weighted(w) => put(&mut w.estimates, slot, 0),
            p => {
                if let Some(c) = p.classic_mut() {
                    c.add(slot, now_ns);
                }
            }
        }
    }

    /// Starts tracking handler `slot` (at time `now_ns`).
    pub fn add(&mut self, slot: usize, now_ns: u64) {
        Self::track(&mut self.policy, slot, now_ns);
    }

    /// Stops tracking handler `slot`.
    pub fn remove(&mut self, slot: usize) {
        match &mut self.policy {
            Policy::Weighted(w) => {
                if let Some(e) = w.estimates.get_mut(slot) {
                    *e = None;
                }
            }
            p => {
                if let Some(h) = p.classic_mut().and_then(|c| c.handlers.get_mut(slot)) {
                    *h = None;
                }
            }
        }
    }

    /// Handler `slot`'s window (Classic, Adaptive) or event-interval estimate (Weighted), if
    /// it is tracked.
    pub fn handler_ns(&self, slot: usize) -> Option<u64> {
        match &self.policy {
            Policy::Weighted(w) => w.estimates.get(slot).copied().flatten(),
            p => p
                .classic()
                .and_then(|c| c.handlers.get(slot).copied().flatten())
                .map(|h| h.window_ns),
        }
    }

    /// Adaptive: feeds the contention guard a sample of the thread's run delay, and the payoff
    /// check its completed requests (the caller takes one every
    /// [`super::contention::SAMPLE_PERIOD_NS`] or so). Other policies ignore it.
    pub fn observe_host(&mut self, sample: HostSample) {
        if !self.observes_host() {
            return;
        }
        if let Policy::Adaptive(a) = &mut self.policy {
            a.observe_host(sample);
        }
    }

    /// Whether [`PollPolicy::observe_host`] uses its samples (Adaptive, polling on): the caller
    /// may skip reading what only the policy needs.
    pub fn observes_host(&self) -> bool {
        self.params.max_ns > 0 && self.policy.adaptive().is_some()
    }

    /// Whether polling is suspended (Adaptive only), because the host is busy or because
    /// sleeping completed more requests: the thread then sleeps between events, without even
    /// the first-step probe.
    pub fn suspended(&self) -> bool {
        self.policy.adaptive().is_some_and(|a| a.suspended)
    }

    /// Whether the poll loop may yield its CPU at `now_ns`: always, except when Adaptive's guard
    /// stopped the yields on a busy host.
    pub fn yields_allowed(&self, now_ns: u64) -> bool {
        self.policy
            .adaptive()
            .is_none_or(|a| a.guard.yields_allowed(now_ns))
    }

    /// The contention guard's view (Adaptive; nothing seen for the others).
    pub fn contention(&self) -> ContentionStats {
        self.policy
            .adaptive()
            .map(|a| a.guard.stats())
            .unwrap_or_else(|| ContentionGuard::default().stats())
    }

    /// The payoff check's view (Adaptive; nothing seen for the others).
    pub fn payoff(&self) -> PayoffStats {
        self.policy
            .adaptive()
            .map(|a| a.payoff.stats())
            .unwrap_or_else(|| PayoffCheck::default().stats())
    }

    /// Whether handler `slot` is polled (classic: in the poll set; weighted: always).
    pub fn is_polled(&self, slot: usize) -> bool {
        match &self.policy {
            Policy::Weighted(w) => w.estimates.get(slot).is_some_and(Option::is_some),
            p => p
                .classic()
                .and_then(|c| c.handlers.get(slot).copied().flatten())
                .is_some_and(|h| h.in_poll_set),
        }
    }

    /// The window to poll for before sleeping, in ns (0: do not poll).
    pub fn window(&self) -> u64 {
        if self.params.max_ns == 0 {
            return 0;
        }
        match &self.policy {
            Policy::Classic(c) => c.window(),
            Policy::Adaptive(a) if a.suspended => 0,
            Policy::Adaptive(a) => a.windows.window(),
            Policy::Weighted(w) => w.thread_ns,
        }
    }

    /// How long to spin on the completions of requests in flight before sleeping, in ns (0:
    /// not at all). Adaptive only, and only while its polling is suspended: the thread then
    /// leaves the queues' notifications on (no guest request waits for it) but, having just
    /// submitted, watches the completion and avail rings for up to `poll_max_ns` (a new request
    /// also ends the watch), so a completion that follows within that does not pay for the
    /// thread's wake-up (on a nested host, much of a QD1 request's time: docs/performance.md).
    /// Classic and Weighted never do: they stay as QEMU defines them.
    pub fn completion_window(&self) -> u64 {
        if self.suspended() {
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
        match &mut self.policy {
            Policy::Classic(c) => c.update(block_ns, events, now_ns, &p),
            Policy::Adaptive(a) => {
                a.suspended = a.suspended_at(now_ns);
                a.windows.update(block_ns, events, now_ns, &p);
            }
            Policy::Weighted(w) => w.update(block_ns, events, &p),
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
        assert_eq!(pol.handler_ns(0), Some(8_000));
        assert_eq!(
            pol.handler_ns(1),
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
        assert_eq!(pol.handler_ns(0), Some(8_000));
        assert_eq!(pol.window(), 8_000);
        pol.update(16_000, &[0], 2); // ns = 8000 - 2000 + 4000 = 10000; grow: max(10000, 16000) = 16000
        assert_eq!(pol.handler_ns(0), Some(10_000));
        assert_eq!(pol.window(), 16_000);
        pol.update(1_000, &[0], 3); // ns = 10000 - 2500 + 250 = 7750 < 16000/2: halve
        assert_eq!(pol.handler_ns(0), Some(7_750));
        assert_eq!(pol.window(), 8_000);
        pol.update(1_000, &[0], 4); // ns = 7750 - 1937 + 250 = 6063 ≥ 8000/2: unchanged
        assert_eq!(pol.handler_ns(0), Some(6_063));
        assert_eq!(pol.window(), 8_000);
        // A sample at or beyond poll_max_ns resets the estimate; with no event the window stays.
        pol.update(200_000, &[0], 5);
        assert_eq!(pol.handler_ns(0), Some(0));
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
        assert_eq!(pol.handler_ns(1), Some(10_000));
        // Handler 1 has no more events: its estimate accumulates block_ns until poll_max_ns.
        pol.update(10_000, &[0], 2);
        assert_eq!(pol.handler_ns(1), Some(20_000));
        pol.update(13_000, &[0], 3);
        assert_eq!(pol.handler_ns(1), Some(0), "33000 ≥ 32768: dropped");
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
        pol.set_params(
            PollParams {
                max_ns: 0,
                ..classic()
            },
            2,
        );
        assert_eq!(pol.window(), 0);
        pol.update(1_000, &[0], 2);
        assert_eq!(pol.window(), 0, "polling off stays off");
        pol.set_params(classic(), 2);
        assert_eq!(pol.handler_ns(0), Some(0), "a live change resets windows");
    }

    #[test]
    fn a_live_change_of_policy_keeps_every_handler_polled() {
        let mut pol = PollPolicy::new(classic());
        pol.add(0, 0);
        pol.add(2, 0);
        pol.remove(0);
        pol.update(1_000, &[2], 1);
        let weighted = PollParams {
            policy: PolicyKind::Weighted,
            ..classic()
        };
        pol.set_params(weighted, 2);
        assert_eq!(pol.params(), weighted);
        assert!(!pol.is_polled(0) && pol.is_polled(2));
        assert_eq!((pol.handler_ns(2), pol.window()), (Some(0), 0));
        pol.update(8_000, &[2], 3);
        assert_eq!(pol.window(), 8_000, "weighted from the change on");
        // Back to Classic long after the handler's last event: it arrives anew, not idle.
        let back = PollParams {
            policy: PolicyKind::Classic,
            ..classic()
        };
        pol.set_params(back, IDLE_EVICT_NS + 10);
        pol.update(1_000, &[], IDLE_EVICT_NS + 20);
        assert!(pol.is_polled(2));
        assert_eq!(pol.handler_ns(2), Some(0));
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
            cpu_queue: None,
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
                    cpu_queue: None,
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
        adaptive.set_params(PollParams::default(), 0);
        assert!(!adaptive.suspended());
        assert!(!adaptive.payoff().sleeping);
        assert_eq!(adaptive.completion_window(), 0);
    }
}
