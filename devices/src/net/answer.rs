//! Whether the queue pair waits for the guest's answer: after the device hands the guest frames,
//! a frame on the tx ring often follows within microseconds (an echo reply, an ACK, a
//! request's response). While the iothread's `Adaptive` policy has polling suspended, the pair
//! reports that answer as a pending completion (`Poll::completion_state`) and caps the thread's
//! spin for it at [`ANSWER_SPIN_NS`] (`Poll::completion_spin_cap_ns`): an answer that comes in
//! time costs neither the thread's sleep and wake-up nor the guest's kick (the tx ring's
//! notifications are off during the watch), one that does not costs that short spin.
//!
//! The wait is for guests measured to answer fast. A watch that ended without the answer, or
//! an answer found later than [`ANSWER_LATE_NS`] after the delivery (the thread lost its CPU
//! while it spun: on a host short of CPUs the spin holds the one the vCPU needs), is a miss;
//! after [`MAX_MISSES`] in a row the pair waits again only once every [`RETRY_EVERY`]
//! deliveries, until a fast answer comes.

use std::time::{Duration, Instant};

/// The longest the thread spins for an answer (ns): the test guest's answer comes 2-7 µs after
/// the delivery on this host (docs/network.md).
pub const ANSWER_SPIN_NS: u64 = 10_000;
/// An answer found later than this after its delivery is a miss (ns).
pub const ANSWER_LATE_NS: u64 = 20_000;
/// Misses in a row before the pair stops waiting for answers.
pub const MAX_MISSES: u32 = 4;
/// Once it stopped, the pair waits for an answer again after this many deliveries.
pub const RETRY_EVERY: u32 = 64;

/// What the pair waits for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Expect {
    /// Nothing: no frame went to the guest since its last answer, or answers stopped coming.
    #[default]
    Nothing,
    /// Frames went to the guest at this time and it has not answered yet.
    Answer(Instant),
}

/// The pair's wait for an answer, and how often it was in vain.
#[derive(Debug, Default)]
pub struct AnswerWatch {
    expect: Expect,
    /// Misses in a row.
    misses: u32,
    /// Deliveries since the pair stopped waiting.
    skipped: u32,
}

impl AnswerWatch {
    /// Frames went to the guest's rx ring at `now`.
    pub fn delivered(&mut self, now: Instant) {
        if self.misses < MAX_MISSES {
            self.expect = Expect::Answer(now);
            return;
        }
        self.skipped = self.skipped.saturating_add(1);
        if self.skipped >= RETRY_EVERY {
            self.skipped = 0;
            self.expect = Expect::Answer(now);
        }
    }

    /// The guest put frames on its tx ring, seen at `now`: a hit when it answered in time.
    pub fn answered(&mut self, now: Instant) {
        match self.expect {
            Expect::Answer(at)
                if now.duration_since(at) <= Duration::from_nanos(ANSWER_LATE_NS) =>
            {
                self.misses = 0;
                self.skipped = 0;
            }
            Expect::Answer(_) => self.misses = self.misses.saturating_add(1),
            Expect::Nothing => {}
        }
        self.expect = Expect::Nothing;
    }

    /// Whether an answer is awaited (the thread may spin for it).
    pub fn expecting(&self) -> bool {
        matches!(self.expect, Expect::Answer(_))
    }

    /// The thread's watch ended (it is about to sleep): an answer still awaited is a miss.
    pub fn watch_ended(&mut self) {
        if self.expecting() {
            self.expect = Expect::Nothing;
            self.misses = self.misses.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_awaits_an_answer_until_one_comes() {
        let mut w = AnswerWatch::default();
        assert!(!w.expecting());
        let t = Instant::now();
        w.delivered(t);
        assert!(w.expecting());
        w.answered(t + Duration::from_micros(5));
        assert!(!w.expecting());
        w.watch_ended();
        assert_eq!(w.misses, 0, "nothing was awaited");
    }

    #[test]
    fn unanswered_deliveries_stop_the_wait_then_retry_now_and_then() {
        let mut w = AnswerWatch::default();
        let t = Instant::now();
        for _ in 0..MAX_MISSES {
            w.delivered(t);
            assert!(w.expecting());
            w.watch_ended();
        }
        for _ in 0..RETRY_EVERY - 1 {
            w.delivered(t);
            assert!(!w.expecting(), "a one-way stream costs no spin");
        }
        w.delivered(t);
        assert!(w.expecting(), "tried again");
        w.watch_ended();
        w.delivered(t);
        assert!(!w.expecting());
    }

    #[test]
    fn late_answers_are_misses_and_a_fast_one_brings_the_wait_back() {
        let mut w = AnswerWatch::default();
        let t = Instant::now();
        let late = t + Duration::from_nanos(ANSWER_LATE_NS + 1);
        for _ in 0..MAX_MISSES {
            w.delivered(t);
            assert!(w.expecting());
            w.answered(late);
        }
        w.delivered(t);
        assert!(!w.expecting(), "answers that come late are not waited for");
        for _ in 0..RETRY_EVERY - 1 {
            w.delivered(t);
        }
        assert!(w.expecting(), "the retry");
        w.answered(t + Duration::from_micros(4));
        w.delivered(t);
        assert!(w.expecting(), "a fast answer: waited for again at once");
    }
}
