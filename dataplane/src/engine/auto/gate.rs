//! The inline gate: whether reads and writes are tried inline now. Attempts are judged in
//! windows of [`WINDOW_ATTEMPTS`]; a window in which most failed (EAGAIN, a short transfer, or
//! a call slower than its [`Call`] allows) switches inline off. While off, the requests are
//! counted and a new window opens after a gap that starts at [`MIN_REPROBE_GAP_REQUESTS`] and
//! doubles with each failed window, up to [`MAX_REPROBE_GAP_REQUESTS`]; a passing window
//! resets it.

use super::tuning::AutoTuning;

/// Attempts per decision window: enough that one slow call does not decide, few enough that a
/// store where inline never pays is found within a few dozen requests.
pub(super) const WINDOW_ATTEMPTS: u32 = 64;
/// Failed attempts a window may hold before inline is switched off: three in four (a partly
/// cached file still gains from the hits).
pub(super) const MAX_FAILED_ATTEMPTS: u32 = WINDOW_ATTEMPTS * 3 / 4;
/// Requests on the deferred path before the first new window after inline went off: a window
/// that failed once (a device warming up) costs this few requests without inline.
pub(super) const MIN_REPROBE_GAP_REQUESTS: u32 = 256;
/// The longest gap, in requests, between two windows while they keep failing: it bounds the
/// failed attempts a store where inline never pays costs (one window in this many requests).
pub(super) const MAX_REPROBE_GAP_REQUESTS: u32 = 4096;

/// Why a request goes inline: what its call may take before it counts as failed, and whether
/// it samples the CPU clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// One of a turn's requests: every request inline, or a page-cache copy.
    Turn,
    /// O_DIRECT: the first of a turn, to learn what the device does (its CPU share is sampled).
    Probe,
    /// A request alone on the thread ([`AutoTuning::slow_lone_call_ns`]); on a page-cache
    /// file, a miss is retried without RWF_NOWAIT (it waits for the device on the thread).
    Lone,
}

impl Call {
    /// Whether a call that took `took_ns` blocked the thread too long, and counts as failed.
    pub(super) fn too_slow(self, took_ns: u64, tuning: &AutoTuning) -> bool {
        took_ns
            > match self {
                Call::Lone => tuning.slow_lone_call_ns,
                Call::Turn | Call::Probe => tuning.slow_call_ns,
            }
    }
}

/// Whether inline is tried now, and the counts that decide when that changes.
#[derive(Debug)]
pub(super) struct InlineGate {
    /// Reads and writes are tried inline now.
    pub(super) trying: bool,
    /// Attempts in the current window.
    pub(super) attempts: u32,
    /// Failed attempts in the current window.
    pub(super) failures: u32,
    /// Requests since inline was switched off.
    skipped: u32,
    /// Requests to skip before the next window (0 while inline passes its windows).
    reprobe_after: u32,
}

impl InlineGate {
    /// A gate open (`trying`) or closed until the first re-probe.
    pub(super) fn new(trying: bool) -> Self {
        Self {
            trying,
            attempts: 0,
            failures: 0,
            skipped: 0,
            reprobe_after: 0,
        }
    }

    /// Whether reads and writes are tried inline now.
    pub(super) fn is_open(&self) -> bool {
        self.trying
    }

    /// Counts a request while inline is off; opens a new window once the gap has passed.
    pub(super) fn count_request(&mut self) {
        if !self.trying {
            self.skipped += 1;
            if self.skipped >= self.reprobe_after {
                self.trying = true;
                self.attempts = 0;
                self.failures = 0;
            }
        }
    }

    /// Records one attempt, `failed` or not; at the end of a window, switches inline off when
    /// too many failed (doubling the gap to the next window) or keeps it on (resetting it).
    pub(super) fn record(&mut self, failed: bool) {
        self.attempts += 1;
        if failed {
            self.failures += 1;
        }
        if self.attempts >= WINDOW_ATTEMPTS {
            if self.failures > MAX_FAILED_ATTEMPTS {
                log::debug!(
                    "auto engine: {} of {} inline attempts failed; deferring",
                    self.failures,
                    self.attempts
                );
                self.trying = false;
                self.skipped = 0;
                self.reprobe_after = (self.reprobe_after * 2)
                    .clamp(MIN_REPROBE_GAP_REQUESTS, MAX_REPROBE_GAP_REQUESTS);
            } else {
                self.reprobe_after = 0;
            }
            self.attempts = 0;
            self.failures = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_call_may_wait_for_the_device_longer_than_one_that_holds_up_others() {
        let t = AutoTuning::default();
        // A loop device's read at QD1 on a busy host: preempted, 100 µs.
        assert!(
            !Call::Lone.too_slow(100_000, &t),
            "nothing else waits for it"
        );
        assert!(
            Call::Probe.too_slow(100_000, &t),
            "the turn's other requests wait"
        );
        assert!(Call::Turn.too_slow(t.slow_call_ns + 1, &t));
        assert!(!Call::Turn.too_slow(t.slow_call_ns, &t));
        // A disk or a network store: even alone, requests arriving meanwhile wait too long.
        assert!(Call::Lone.too_slow(t.slow_lone_call_ns + 1, &t));
    }
}
