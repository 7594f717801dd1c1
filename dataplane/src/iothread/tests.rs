//! The iothread's tests: handlers on real eventfds, commands, polling and turns.

use super::*;
use crate::handler::{Poll, TurnEnd, Watch};
use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Receiver;
use std::sync::Mutex;

struct Counter {
    owner: u64,
    fd: EventFd,
    seen: Arc<AtomicU64>,
    quiesced: bool,
    attached_on: Option<String>,
    detached_on: Option<String>,
    /// Where it goes when it leaves the thread (its owner's end of the channel).
    back: Sender<Counter>,
}

impl Counter {
    /// A counter of `fd`'s signals owned by `owner`, and where it comes back.
    fn new(owner: u64, fd: &EventFd, seen: &Arc<AtomicU64>) -> (Self, Receiver<Counter>) {
        let (back, rx) = mpsc::channel();
        let c = Counter {
            owner,
            fd: fd.try_clone().expect("clone"),
            seen: seen.clone(),
            quiesced: false,
            attached_on: None,
            detached_on: None,
            back,
        };
        (c, rx)
    }
}

impl Handler for Counter {
    fn owner(&self) -> u64 {
        self.owner
    }
    fn attach(&mut self, _turn: &ThreadTurn) -> Result<(), crate::handler::AttachError> {
        self.attached_on = std::thread::current().name().map(str::to_owned);
        Ok(())
    }
    fn detach(mut self: Box<Self>) {
        self.detached_on = std::thread::current().name().map(str::to_owned);
        let back = self.back.clone();
        let _ = back.send(*self);
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.fd.as_raw_fd()]
    }
    fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        if let Ok(n) = self.fd.read() {
            self.seen.fetch_add(n, Ordering::SeqCst);
        }
        TurnEnd::IDLE
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        self.quiesced = true;
        0
    }
}

/// Detaches `owner`'s handlers, which must have drained; returns how many left.
#[track_caller]
fn detach(t: &IoThread, owner: u64) -> usize {
    match t.detach(owner, Duration::from_secs(1)).expect("detach") {
        Detach::Done(n) => n,
        other => panic!("not drained: {other:?}"),
    }
}

/// Waits up to about a second for `cond` (also used by the swap tests).
#[track_caller]
pub(crate) fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("condition not reached");
}

#[test]
fn runs_handlers_on_their_fds_and_gives_them_back() {
    let t = IoThread::spawn("test", 0).expect("spawn");
    assert_eq!(t.max_batch(), DEFAULT_MAX_BATCH);
    let fd = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let seen = Arc::new(AtomicU64::new(0));
    let (h, back) = Counter::new(7, &fd, &seen);
    fd.write(3).expect("pre-attach kick");
    t.attach(vec![Box::new(h)]).expect("attach");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "work pending at attach is seen"
    );
    fd.write(2).expect("kick");
    wait_for(|| seen.load(Ordering::SeqCst) == 5);
    assert_eq!(IoThreadStats::get(&t.stats().handlers), 1);
    assert_eq!(detach(&t, 99), 0);
    assert_eq!(detach(&t, 7), 1);
    let counter = back.try_recv().expect("the handler came back to its owner");
    assert!(counter.quiesced, "detach quiesces first");
    assert_eq!(
        counter.attached_on.as_deref(),
        Some("iothread-test"),
        "attach runs on the iothread"
    );
    assert_eq!(
        counter.detached_on.as_deref(),
        Some("iothread-test"),
        "detach runs on the iothread"
    );
    fd.write(1).expect("kick after detach");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        5,
        "a detached handler is not run"
    );
    t.shutdown();
}

#[test]
fn hooks_run_on_the_iothread_and_report_errors() {
    let t = IoThread::spawn("hook", 0).expect("spawn");
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    t.run_on_thread(Box::new(move || {
        *s.lock().expect("lock") = std::thread::current().name().map(str::to_owned);
        Ok(())
    }))
    .expect("hook");
    assert_eq!(seen.lock().expect("lock").as_deref(), Some("iothread-hook"));
    let e = t
        .run_on_thread(Box::new(|| Err("no".into())))
        .expect_err("error reported");
    assert!(e.to_string().contains("no"), "{e}");
    t.shutdown();
}

/// A handler with `work` units that does at most `max_batch` per turn and records turns.
struct Budgeted {
    owner: u64,
    fd: EventFd,
    work: usize,
    turns: Arc<Mutex<Vec<(u64, usize)>>>,
    back: Sender<Budgeted>,
}

impl Handler for Budgeted {
    fn owner(&self) -> u64 {
        self.owner
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.fd.as_raw_fd()]
    }
    fn run(&mut self, max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        let _ = self.fd.read();
        let n = self.work.min(max_batch);
        if n > 0 {
            self.work -= n;
            self.turns.lock().expect("lock").push((self.owner, n));
        }
        TurnEnd {
            more: self.work > 0,
            ..TurnEnd::IDLE
        }
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }
    fn detach(self: Box<Self>) {
        let back = self.back.clone();
        let _ = back.send(*self);
    }
}

#[test]
fn queues_take_turns_of_at_most_max_batch() {
    let t = IoThread::spawn("turns", 4).expect("spawn");
    assert_eq!(t.max_batch(), 4);
    let turns = Arc::new(Mutex::new(Vec::new()));
    let fds: Vec<EventFd> = (0..2)
        .map(|_| EventFd::new(libc::EFD_NONBLOCK).expect("efd"))
        .collect();
    let (back, returned) = mpsc::channel();
    let hs: Vec<Box<dyn Handler>> = fds
        .iter()
        .enumerate()
        .map(|(i, fd)| {
            Box::new(Budgeted {
                owner: i as u64,
                fd: fd.try_clone().expect("clone"),
                work: 0,
                turns: turns.clone(),
                back: back.clone(),
            }) as Box<dyn Handler>
        })
        .collect();
    t.attach(hs).expect("attach");
    // Give both handlers 10 units at once, then wake them together.
    for (owner, _) in fds.iter().enumerate() {
        assert_eq!(detach(&t, owner as u64), 1);
        let mut h = returned.try_recv().expect("back");
        h.work = 10;
        t.attach(vec![Box::new(h)]).expect("re-attach");
    }
    wait_for(|| {
        turns
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, n)| n)
            .sum::<usize>()
            == 20
    });
    let turns = turns.lock().expect("lock").clone();
    assert!(
        turns.iter().all(|&(_, n)| n <= 4),
        "no turn above max_batch: {turns:?}"
    );
    assert_eq!(t.set_max_batch(0), DEFAULT_MAX_BATCH);
    assert_eq!(t.set_max_batch(5000), MAX_MAX_BATCH);
    t.shutdown();
}

/// A pollable fake: `poll` finds work on every `every`-th call while `busy`; ending its polling
/// watch reports a race `races` times; runs are counted.
struct Pollable {
    fd: EventFd,
    busy: Arc<std::sync::atomic::AtomicBool>,
    every: u64,
    calls: u64,
    races: Arc<AtomicU64>,
    runs: Arc<AtomicU64>,
    suppressed: Arc<std::sync::atomic::AtomicBool>,
    /// Its fd brings work `poll` cannot see ([`Poll::has_fd_sources`]).
    fd_sources: bool,
}

impl Handler for Pollable {
    fn owner(&self) -> u64 {
        1
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.fd.as_raw_fd()]
    }
    fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        let _ = self.fd.read();
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.busy.load(Ordering::SeqCst) && !self.suppressed.load(Ordering::SeqCst) {
            // Notifications are on and the "guest" has more work: it kicks.
            let _ = self.fd.write(1);
        }
        TurnEnd::IDLE
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }
    fn poller(&mut self) -> Option<&mut dyn Poll> {
        Some(self)
    }
}

impl Poll for Pollable {
    fn poll(&mut self) -> bool {
        self.calls += 1;
        self.busy.load(Ordering::SeqCst) && self.calls.is_multiple_of(self.every)
    }
    fn has_fd_sources(&self) -> bool {
        self.fd_sources
    }
    fn watch(&mut self, what: Watch, on: bool) -> bool {
        if what != Watch::Polling {
            return false;
        }
        if on {
            self.suppressed.store(true, Ordering::SeqCst);
            return false;
        }
        self.suppressed.store(false, Ordering::SeqCst);
        // A busy fake always has work pending: the re-check after re-enabling finds it
        // (a real guest would also kick once notifications are back on).
        if self.busy.load(Ordering::SeqCst) {
            return true;
        }
        let left = self.races.load(Ordering::SeqCst);
        if left > 0 {
            self.races.store(left - 1, Ordering::SeqCst);
            return true;
        }
        false
    }
}

struct Rig {
    t: Arc<IoThread>,
    fd: EventFd,
    busy: Arc<std::sync::atomic::AtomicBool>,
    races: Arc<AtomicU64>,
    runs: Arc<AtomicU64>,
    suppressed: Arc<std::sync::atomic::AtomicBool>,
}

fn rig(name: &str, params: PollParams, every: u64) -> Rig {
    rig_with(name, params, every, false)
}

fn rig_with(name: &str, params: PollParams, every: u64, fd_sources: bool) -> Rig {
    let t = IoThread::spawn_with(name, 0, params).expect("spawn");
    let fd = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let races = Arc::new(AtomicU64::new(0));
    let runs = Arc::new(AtomicU64::new(0));
    let suppressed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = Pollable {
        fd: fd.try_clone().expect("clone"),
        busy: busy.clone(),
        every,
        calls: 0,
        races: races.clone(),
        runs: runs.clone(),
        suppressed: suppressed.clone(),
        fd_sources,
    };
    t.attach(vec![Box::new(h)]).expect("attach");
    Rig {
        t,
        fd,
        busy,
        races,
        runs,
        suppressed,
    }
}

fn stat(t: &IoThread, name: &str) -> u64 {
    t.stats()
        .snapshot()
        .into_iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .expect("stat")
}

/// Kicks the handler's fd every ~10 µs (events close together open the poll window) until
/// `cond` holds.
fn kick_until(fd: &EventFd, cond: impl Fn() -> bool) {
    let t = std::time::Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "condition not reached while kicking"
        );
        fd.write(1).expect("kick");
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_micros(10) {
            std::hint::spin_loop();
        }
    }
}

#[test]
fn polls_when_busy_then_sleeps_when_idle_within_the_window() {
    // Halve rather than reset on a long block, so a preempted iteration on a loaded test
    // machine does not close the window while the fake is busy.
    let params = PollParams {
        max_ns: 1_000_000,
        shrink: 2,
        policy: crate::poll::PolicyKind::Classic,
        ..PollParams::default()
    };
    let r = rig("poll-busy", params, 3);
    // Kicks close together open the window; then the fake has work on every 3rd check.
    r.busy.store(true, Ordering::SeqCst);
    kick_until(&r.fd, || stat(&r.t, "poll_hits") > 0);
    // Let the thread consume the last kick before counting fd events.
    std::thread::sleep(Duration::from_millis(20));
    let fd_events = stat(&r.t, "fd_events");
    let hits = stat(&r.t, "poll_hits");
    wait_for(|| stat(&r.t, "poll_hits") > hits + 1000);
    assert!(
        r.runs.load(Ordering::SeqCst) > 1000,
        "work found by polling is run"
    );
    assert!(
        r.suppressed.load(Ordering::SeqCst),
        "notifications stay suppressed while polling"
    );
    let kicks = stat(&r.t, "fd_events") - fd_events;
    assert!(
        kicks * 10 < 1000,
        "polling, not kicks, found the work: {kicks} kicks"
    );
    // Idle: the thread polls at most the window, re-enables notifications and sleeps.
    r.busy.store(false, Ordering::SeqCst);
    wait_for(|| !r.suppressed.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(30));
    let (misses, sleeps, poll_ns) = (
        stat(&r.t, "poll_misses"),
        stat(&r.t, "sleeps"),
        stat(&r.t, "poll_ns"),
    );
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(stat(&r.t, "poll_misses"), misses, "asleep: no more polling");
    assert_eq!(stat(&r.t, "sleeps"), sleeps, "asleep: no busy loop");
    assert!(misses >= 1);
    let hits = stat(&r.t, "poll_hits");
    // Every poll ends at a hit or after the window (at most 1 ms), plus scheduling slack.
    assert!(
        poll_ns <= (hits + misses) * 1_000_000 + 50_000_000,
        "poll time {poll_ns} ns over {} polls",
        hits + misses
    );
    r.t.shutdown();
}

/// Work that only an fd announces (a tap, a host socket) ends the poll window at once when the
/// handler says it has such sources, and not otherwise (the thread finds it after the window).
#[test]
fn polling_peeks_at_the_fds_of_handlers_with_fd_sources_only() {
    let params = PollParams {
        max_ns: 1_000_000,
        shrink: 2,
        policy: crate::poll::PolicyKind::Classic,
        ..PollParams::default()
    };
    let peeking = rig_with("poll-fd-peek", params, 1, true);
    kick_until(&peeking.fd, || stat(&peeking.t, "poll_fd_hits") > 100);
    assert!(stat(&peeking.t, "poll_ns") > 0, "the thread polled");
    peeking.t.shutdown();

    let blind = rig_with("poll-fd-blind", params, 1, false);
    kick_until(&blind.fd, || stat(&blind.t, "poll_misses") > 100);
    let runs = blind.runs.load(Ordering::SeqCst);
    assert!(runs > 100, "fd events still run the handler: {runs} runs");
    assert_eq!(
        stat(&blind.t, "poll_fd_hits"),
        0,
        "no peek without fd sources"
    );
    blind.t.shutdown();
}

#[test]
fn never_sleeps_when_poll_end_reports_work() {
    let params = PollParams {
        max_ns: 1_000_000,
        shrink: 2,
        policy: crate::poll::PolicyKind::Classic,
        ..PollParams::default()
    };
    let r = rig("poll-race", params, 3);
    r.busy.store(true, Ordering::SeqCst);
    kick_until(&r.fd, || stat(&r.t, "poll_hits") > 100);
    // Let the thread consume the last kick before counting fd events.
    std::thread::sleep(Duration::from_millis(20));
    let fd_events = stat(&r.t, "fd_events");
    // The guest goes quiet, but a request races in just as the thread re-enables
    // notifications: the thread must run the handler instead of sleeping on an fd that
    // will not fire.
    r.races.store(1, Ordering::SeqCst);
    let runs = r.runs.load(Ordering::SeqCst);
    r.busy.store(false, Ordering::SeqCst);
    wait_for(|| r.races.load(Ordering::SeqCst) == 0);
    wait_for(|| r.runs.load(Ordering::SeqCst) > runs);
    wait_for(|| !r.suppressed.load(Ordering::SeqCst));
    assert!(
        stat(&r.t, "fd_events") <= fd_events + 1,
        "the race was handled without waiting for a kick"
    );
    r.t.shutdown();
}

#[test]
fn poll_off_sleeps_without_polling_and_live_changes_apply() {
    let r = rig(
        "poll-off",
        PollParams {
            max_ns: 0,
            policy: crate::poll::PolicyKind::Classic,
            ..PollParams::default()
        },
        1,
    );
    r.busy.store(true, Ordering::SeqCst);
    for _ in 0..20 {
        r.fd.write(1).expect("kick");
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(|| r.runs.load(Ordering::SeqCst) >= 2);
    assert_eq!(
        stat(&r.t, "poll_hits") + stat(&r.t, "poll_misses"),
        0,
        "poll_max_ns 0 never polls"
    );
    assert_eq!(r.t.poll_params().max_ns, 0);
    // Classic: the test counts poll hits, which the Adaptive guard could suspend on a loaded
    // test machine.
    let classic = PollParams {
        policy: crate::poll::PolicyKind::Classic,
        ..PollParams::default()
    };
    let on = r.t.set_poll(classic).expect("set_poll");
    assert_eq!(on, classic, "the reply carries the values in force");
    assert_eq!(r.t.poll_params(), on);
    kick_until(&r.fd, || stat(&r.t, "poll_hits") > 100);
    r.busy.store(false, Ordering::SeqCst);
    r.t.shutdown();
}

/// A handler whose fds are given; it counts its runs, reads nothing, asks for retries and
/// reports in-flight requests as the test says.
struct Scripted {
    owner: u64,
    fds: Vec<RawFd>,
    runs: Arc<AtomicU64>,
    /// Stopped once it has run this many times.
    stop_after: Option<u64>,
    /// Asks for a retry until it has run this many times.
    retry_until: u64,
    in_flight: Arc<AtomicU64>,
}

impl Scripted {
    fn new(owner: u64, fds: Vec<RawFd>) -> Self {
        Self {
            owner,
            fds,
            runs: Arc::new(AtomicU64::new(0)),
            stop_after: None,
            retry_until: 0,
            in_flight: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Handler for Scripted {
    fn owner(&self) -> u64 {
        self.owner
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        self.fds.clone()
    }
    fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        let runs = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        TurnEnd {
            retry: runs < self.retry_until,
            stopped: self.stop_after.is_some_and(|n| runs >= n),
            ..TurnEnd::IDLE
        }
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        self.in_flight.load(Ordering::SeqCst) as usize
    }
}

#[test]
fn a_failed_attach_leaves_no_fd_registered() {
    let t = IoThread::spawn("attach-undo", 0).expect("spawn");
    let good = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let other = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    // epoll refuses regular files (EPERM): the second handler's second fd fails.
    let file = std::fs::File::open("/proc/self/status").expect("a regular file");
    let first = Scripted::new(1, vec![good.as_raw_fd()]);
    let first_runs = first.runs.clone();
    let second = Scripted::new(1, vec![other.as_raw_fd(), file.as_raw_fd()]);
    let e = t
        .attach(vec![Box::new(first), Box::new(second)])
        .expect_err("epoll_ctl fails on a regular file");
    assert!(e.to_string().contains("epoll_ctl"), "{e}");
    assert_eq!(stat(&t, "watched_fds"), 0, "every registration was undone");
    assert_eq!(stat(&t, "handlers"), 0);
    // The first handler's kick fd stays readable: it must not wake the thread.
    good.write(1).expect("kick");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        first_runs.load(Ordering::SeqCst),
        0,
        "no turn before all attached"
    );
    assert_eq!(stat(&t, "handler_runs"), 0, "nothing runs on a stale fd");
    t.shutdown();
}

#[test]
fn a_stopped_handler_is_no_longer_watched() {
    let t = IoThread::spawn("stopped", 0).expect("spawn");
    let fd = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let mut h = Scripted::new(3, vec![fd.as_raw_fd()]);
    h.stop_after = Some(2);
    let runs = h.runs.clone();
    t.attach(vec![Box::new(h)]).expect("attach");
    // The handler never reads its fd (like a broken queue's completion fd): level-triggered,
    // it would wake the thread for ever unless the thread stops watching it.
    fd.write(1).expect("kick");
    wait_for(|| stat(&t, "watched_fds") == 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "no turn once stopped");
    let sleeps = stat(&t, "sleeps");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(stat(&t, "sleeps"), sleeps, "asleep, not spinning");
    assert_eq!(detach(&t, 3), 1, "a stopped handler can still leave");
    t.shutdown();
}

#[test]
fn refused_work_gets_another_turn_on_a_timer() {
    let t = IoThread::spawn("retry", 0).expect("spawn");
    let fd = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let mut h = Scripted::new(4, vec![fd.as_raw_fd()]);
    h.retry_until = 5;
    let runs = h.runs.clone();
    // No fd ever fires: only the timer brings the handler back.
    t.attach(vec![Box::new(h)]).expect("attach");
    wait_for(|| runs.load(Ordering::SeqCst) >= 5);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(runs.load(Ordering::SeqCst), 5, "no retries once it is done");
    t.shutdown();
}

#[test]
fn detach_waits_for_in_flight_io_and_never_hands_back_early() {
    let t = IoThread::spawn("drain", 0).expect("spawn");
    let fd = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let h = Scripted::new(5, vec![fd.as_raw_fd()]);
    let in_flight = h.in_flight.clone();
    in_flight.store(2, Ordering::SeqCst);
    let other_fd = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let seen = Arc::new(AtomicU64::new(0));
    let (other, _back) = Counter::new(6, &other_fd, &seen);
    t.attach(vec![Box::new(h), Box::new(other)])
        .expect("attach");
    let d = t.detach(5, Duration::from_millis(20)).expect("answer");
    assert!(
        matches!(d, Detach::Draining { in_flight: 2 }),
        "still in flight: {d:?}"
    );
    assert_eq!(stat(&t, "handlers"), 2, "the draining handler stays");
    other_fd.write(1).expect("kick");
    wait_for(|| seen.load(Ordering::SeqCst) == 1);
    in_flight.store(0, Ordering::SeqCst);
    assert_eq!(detach(&t, 5), 1, "handed back once drained");
    assert_eq!(stat(&t, "handlers"), 1);
    t.shutdown();
}

/// Never reads its fds; records which of them the thread reported.
struct Unread {
    fds: [EventFd; 2],
    fired: Arc<Mutex<Vec<usize>>>,
    runs: Arc<AtomicU64>,
}

impl Handler for Unread {
    fn owner(&self) -> u64 {
        31
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        self.fds.iter().map(AsRawFd::as_raw_fd).collect()
    }
    fn fd_fired(&mut self, index: usize) {
        self.fired.lock().expect("lock").push(index);
    }
    fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        self.runs.fetch_add(1, Ordering::SeqCst);
        TurnEnd::IDLE
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }
}

#[test]
fn fds_are_edge_triggered_and_the_handler_learns_which_fired() {
    let t = IoThread::spawn_with(
        "edge",
        0,
        PollParams {
            max_ns: 0,
            policy: crate::poll::PolicyKind::Classic,
            ..PollParams::default()
        },
    )
    .expect("spawn");
    let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let done = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let fired = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(AtomicU64::new(0));
    t.attach(vec![Box::new(Unread {
        fds: [
            kick.try_clone().expect("clone"),
            done.try_clone().expect("clone"),
        ],
        fired: fired.clone(),
        runs: runs.clone(),
    })])
    .expect("attach");
    done.write(1).expect("signal");
    wait_for(|| !fired.lock().expect("lock").is_empty());
    // Left unread, a level-triggered fd would wake the thread again at once, for ever.
    std::thread::sleep(Duration::from_millis(50));
    let reports = fired.lock().expect("lock").len();
    assert_eq!(reports, 1, "{reports} reports for one signal");
    assert_eq!(fired.lock().expect("lock")[0], 1, "the second fd fired");
    let after_one = runs.load(Ordering::SeqCst);
    assert!(after_one <= 2, "{after_one} turns for one signal");
    // A new signal wakes the thread although the fd's count was never cleared.
    kick.write(1).expect("signal");
    done.write(1).expect("signal");
    wait_for(|| fired.lock().expect("lock").len() >= 3);
    std::thread::sleep(Duration::from_millis(20));
    let mut seen = fired.lock().expect("lock").clone();
    seen[1..].sort_unstable();
    assert_eq!(seen, vec![1, 0, 1]);
    assert!(runs.load(Ordering::SeqCst) <= after_one + 2);
    t.shutdown();
}
