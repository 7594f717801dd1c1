//! Tests of the loop's own pieces, on a loop built in the test thread (no iothread): the spin on
//! in-flight completions.

use super::*;
use crate::handler::Poll;
use crate::poll::PollParams;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::AtomicBool;

/// A handler with requests in flight or not, whose cheap check finds work (a completion, or a
/// new request) from its `work_after`-th call on (`None`: never).
struct InFlight {
    fd: EventFd,
    in_flight: bool,
    work_after: Option<usize>,
    checks: usize,
    /// A completion watch is on (shared: the test looks after the handler left).
    watching: Arc<AtomicBool>,
    /// Ending the completion watch finds a completion that raced in.
    races: bool,
    /// Its [`Poll::completion_spin_cap_ns`].
    cap: Option<u64>,
}

impl InFlight {
    fn boxed(in_flight: bool, work_after: Option<usize>) -> Box<dyn Handler> {
        Box::new(Self {
            fd: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
            in_flight,
            work_after,
            checks: 0,
            watching: Arc::default(),
            races: false,
            cap: None,
        })
    }

    /// In flight, never done in the spin, spinning for at most `cap` ns.
    fn capped(cap: u64) -> Box<dyn Handler> {
        Box::new(Self {
            cap: Some(cap),
            ..Self::racing()
        })
    }

    /// In flight, never done in the spin, and a completion races in as the watch ends.
    fn racing() -> Self {
        Self {
            fd: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
            in_flight: true,
            work_after: None,
            checks: 0,
            watching: Arc::default(),
            races: true,
            cap: None,
        }
    }
}

impl Handler for InFlight {
    fn owner(&self) -> u64 {
        1
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.fd.as_raw_fd()]
    }
    fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        TurnEnd::IDLE
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }
    fn poller(&mut self) -> Option<&mut dyn Poll> {
        Some(self)
    }
}

impl Poll for InFlight {
    fn poll(&mut self) -> bool {
        self.checks += 1;
        self.work_after.is_some_and(|n| self.checks > n)
    }
    fn watch(&mut self, what: Watch, on: bool) -> bool {
        if what == Watch::Polling {
            return false;
        }
        if on {
            assert!(
                !self.watching.swap(true, Ordering::SeqCst),
                "a watch begins once"
            );
            false
        } else {
            assert!(
                self.watching.swap(false, Ordering::SeqCst),
                "a watch ends after it began"
            );
            self.races
        }
    }
    fn completion_state(&self) -> CompletionState {
        match (self.in_flight, self.work_after) {
            (false, _) => CompletionState::Idle,
            (true, Some(0)) => CompletionState::Ready,
            (true, _) => CompletionState::Pending,
        }
    }
    fn completion_spin_cap_ns(&self) -> Option<u64> {
        self.cap
    }
}

fn test_loop() -> Loop {
    let epoll = Epoll::new().expect("epoll");
    let wake = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let (_tx, rx) = std::sync::mpsc::channel();
    Loop::new(
        Arc::new(AtomicUsize::new(32)),
        PollPolicy::new(PollParams::default()),
        epoll,
        wake,
        rx,
        Arc::new(IoThreadStats::default()),
        false,
    )
}

#[test]
fn the_completion_spin_ends_at_the_first_completion_or_request() {
    let mut l = test_loop();
    let quiet = l.add(InFlight::boxed(false, None)).expect("add");
    let busy = l.add(InFlight::boxed(true, Some(50))).expect("add");
    let mut hits = Vec::new();
    l.spin_for_completions(1_000_000_000, &mut hits);
    assert_eq!(hits, vec![busy], "not {quiet}");
    assert_eq!(IoThreadStats::get(&l.stats.completion_spins), 1);
    assert_eq!(IoThreadStats::get(&l.stats.completion_spin_hits), 1);
    // Well before the 1 s window: it stopped at the completion.
    assert!(IoThreadStats::get(&l.stats.completion_spin_ns) < 500_000_000);
    // A new request in a queue with nothing in flight ends it too (the guest need not wait for
    // its kick to wake the thread).
    let mut l = test_loop();
    l.add(InFlight::boxed(true, None)).expect("add");
    let kicked = l.add(InFlight::boxed(false, Some(20))).expect("add");
    hits.clear();
    l.spin_for_completions(1_000_000_000, &mut hits);
    assert_eq!(hits, vec![kicked]);
}

#[test]
fn the_completion_spin_is_bounded_and_skipped_with_nothing_in_flight() {
    let mut l = test_loop();
    l.add(InFlight::boxed(false, None)).expect("add");
    let mut hits = Vec::new();
    l.spin_for_completions(1_000_000_000, &mut hits);
    assert!(hits.is_empty());
    assert_eq!(
        IoThreadStats::get(&l.stats.completion_spins),
        0,
        "nothing in flight: nothing to spin for"
    );
    // A completion that never comes: the spin gives up after its window.
    l.add(InFlight::boxed(true, None)).expect("add");
    let window = 2_000_000;
    l.spin_for_completions(window, &mut hits);
    assert!(hits.is_empty());
    assert_eq!(IoThreadStats::get(&l.stats.completion_spins), 1);
    assert_eq!(IoThreadStats::get(&l.stats.completion_spin_hits), 0);
    assert!(IoThreadStats::get(&l.stats.completion_spin_ns) >= window);
}

/// A pending handler's cap shortens the spin: a completion that has not come by then is not
/// spun for any longer (a guest's answer that comes within microseconds or much later), and
/// the short spin does not yield.
#[test]
fn a_handlers_cap_shortens_the_completion_spin() {
    let mut l = test_loop();
    l.add(InFlight::capped(1_000_000)).expect("add");
    let mut hits = Vec::new();
    l.spin_for_completions(10_000_000_000, &mut hits);
    l.end_completion_watch(&mut hits);
    assert_eq!(IoThreadStats::get(&l.stats.completion_spins), 1);
    let spun = IoThreadStats::get(&l.stats.completion_spin_ns);
    assert!(spun >= 1_000_000, "spun {spun} ns");
    assert!(
        spun < 5_000_000_000,
        "the 10 s window, not the 1 ms cap: {spun} ns"
    );
    assert_eq!(
        IoThreadStats::get(&l.stats.poll_yields),
        0,
        "a capped spin does not yield (a CPU hog would get the slice)"
    );
}

#[test]
fn a_completion_spin_quiets_the_completion_fds_until_the_thread_sleeps() {
    let mut l = test_loop();
    let found = l.add(InFlight::boxed(true, Some(3))).expect("add");
    let racer = InFlight::racing();
    let racer_watching = racer.watching.clone();
    let racing = l.add(Box::new(racer)).expect("add");
    let mut hits = Vec::new();
    l.spin_for_completions(1_000_000_000, &mut hits);
    assert_eq!(hits, vec![found]);
    // The turn that reaps what the spin found runs with both fds quiet; a second spin does
    // not begin the watch again (the handler would panic).
    assert_eq!(l.completions_watched, vec![found, racing]);
    hits.clear();
    l.spin_for_completions(1_000_000_000, &mut hits);
    assert_eq!(l.completions_watched, vec![found, racing]);
    // Before the thread sleeps the watch ends, and a completion that raced in keeps it awake.
    hits.clear();
    l.end_completion_watch(&mut hits);
    assert!(l.completions_watched.is_empty());
    assert_eq!(hits, vec![racing]);
    // With no watch, ending one does nothing (the handler would panic).
    hits.clear();
    l.end_completion_watch(&mut hits);
    assert!(hits.is_empty());
    // A handler that leaves the thread mid-watch leaves with its fd signalling again.
    l.spin_for_completions(1_000, &mut hits);
    assert!(l.completions_watched.contains(&racing));
    l.unwatch(racing);
    assert!(!l.completions_watched.contains(&racing));
    assert!(l.forget(racing).is_some());
    assert!(
        !racer_watching.load(Ordering::SeqCst),
        "the watch ended as it left"
    );
}

#[test]
fn a_ready_completion_needs_no_spin() {
    let mut l = test_loop();
    let slot = l.add(InFlight::boxed(true, Some(0))).expect("add");
    let mut hits = Vec::new();
    l.spin_for_completions(1_000_000_000, &mut hits);
    assert_eq!(hits, vec![slot]);
    assert_eq!(IoThreadStats::get(&l.stats.completion_spins), 0);
}

/// A handler without a cheap check.
struct Blind(EventFd);

impl Handler for Blind {
    fn owner(&self) -> u64 {
        2
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.0.as_raw_fd()]
    }
    fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        TurnEnd::IDLE
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }
}

#[test]
fn the_loop_spins_on_completions_while_adaptive_polling_is_suspended_and_all_can_be_checked() {
    use crate::poll::contention::WINDOW_NS;
    use crate::poll::HostSample;
    let mut l = test_loop();
    assert_eq!(
        l.completion_window(),
        0,
        "polling on: the poll loop sees completions"
    );
    // Two windows in which the thread waited for a CPU 96 % of its runnable time: the guard
    // stops the yields, then polling.
    for (i, (cpu, delay)) in [(0, 0), (400_000, 9_600_000), (800_000, 19_200_000)]
        .into_iter()
        .enumerate()
    {
        l.policy.observe_host(HostSample {
            now_ns: 10_000 + i as u64 * WINDOW_NS,
            cpu_ns: cpu,
            run_delay_ns: delay,
            requests: 0,
            cpu_queue: None,
        });
    }
    assert!(l.policy.suspended());
    assert_eq!(l.window(), 0);
    assert_eq!(l.completion_window(), l.policy.params().max_ns);
    // A handler that cannot be checked cheaply turns it off, as it turns polling off.
    l.add(Box::new(Blind(
        EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
    )))
    .expect("add");
    assert_eq!(l.completion_window(), 0);
}
