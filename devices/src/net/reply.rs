//! Whether the queue pair expects the guest to answer: after the device hands the guest frames,
//! a frame on the tx ring often follows within microseconds (an echo reply, an ACK, a
//! request's response). While the iothread's `Adaptive` policy has polling suspended, the pair
//! reports that answer as a pending completion (`Poll::completion_state`), so the thread spins
//! on the tx ring for up to its completion window before it sleeps: an answer that comes in time
//! costs neither the thread's sleep and wake-up nor the guest's kick (the tx ring's
//! notifications are off during that watch).
//!
//! A guest whose received frames go unanswered (a one-way stream) would make every such spin a
//! loss: after [`MAX_MISSES`] watches in a row that ended without an answer, the pair expects
//! one again only once every [`RETRY_EVERY`] deliveries, until an answer comes.

/// Watches in a row that ended without an answer before the pair stops expecting one.
pub const MAX_MISSES: u32 = 4;
/// Once it stopped, the pair expects an answer again after this many deliveries.
pub const RETRY_EVERY: u32 = 64;

/// What the pair expects from the guest now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Expect {
    /// Nothing: no frame went to the guest since its last answer, or answers stopped coming.
    #[default]
    Nothing,
    /// Frames went to the guest since its last answer.
    Answer,
}

/// The pair's expectation of an answer, and how often it was wrong.
#[derive(Debug, Default)]
pub struct ReplyWatch {
    expect: Expect,
    /// Watches in a row that ended without an answer.
    misses: u32,
    /// Deliveries since the pair stopped expecting answers.
    skipped: u32,
}

impl ReplyWatch {
    /// Frames went to the guest's rx ring.
    pub fn delivered(&mut self) {
        if self.misses < MAX_MISSES {
            self.expect = Expect::Answer;
            return;
        }
        self.skipped = self.skipped.saturating_add(1);
        if self.skipped >= RETRY_EVERY {
            self.skipped = 0;
            self.expect = Expect::Answer;
        }
    }

    /// The guest put frames on its tx ring.
    pub fn answered(&mut self) {
        self.expect = Expect::Nothing;
        self.misses = 0;
        self.skipped = 0;
    }

    /// Whether an answer is expected (the thread may spin for it).
    pub fn expecting(&self) -> bool {
        self.expect == Expect::Answer
    }

    /// The thread's watch ended (it is about to sleep): an answer still expected is a miss.
    pub fn watch_ended(&mut self) {
        if self.expect == Expect::Answer {
            self.expect = Expect::Nothing;
            self.misses = self.misses.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_expects_an_answer_until_one_comes() {
        let mut w = ReplyWatch::default();
        assert!(!w.expecting());
        w.delivered();
        assert!(w.expecting());
        w.answered();
        assert!(!w.expecting());
        w.watch_ended();
        assert_eq!(w.misses, 0, "nothing was expected");
    }

    #[test]
    fn unanswered_deliveries_stop_the_expectation_then_retry_now_and_then() {
        let mut w = ReplyWatch::default();
        for _ in 0..MAX_MISSES {
            w.delivered();
            assert!(w.expecting());
            w.watch_ended();
        }
        for _ in 0..RETRY_EVERY - 1 {
            w.delivered();
            assert!(!w.expecting(), "a one-way stream costs no spin");
        }
        w.delivered();
        assert!(w.expecting(), "tried again");
        w.watch_ended();
        w.delivered();
        assert!(!w.expecting());
        // An answer brings it back at once.
        w.answered();
        w.delivered();
        assert!(w.expecting());
    }
}
