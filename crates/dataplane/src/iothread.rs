//! The iothread: a named thread that owns handlers exclusively and runs them when their fds
//! fire. Control commands (attach, detach, shutdown) arrive over a channel plus an eventfd and
//! are acknowledged, so callers know when ownership moved.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use crate::handler::Handler;
use crate::poll::policy::FIRST_STEP_NS;
use crate::poll::{PollParams, PollPolicy};
use crate::stats::{thread_cpu_ns, IoThreadStats};

const COMMAND_TOKEN: u64 = u64::MAX;
const MAX_EVENTS: usize = 64;
/// The default and the upper bound of `max_batch`.
pub const DEFAULT_MAX_BATCH: usize = 32;
/// The largest `max_batch` accepted.
pub const MAX_MAX_BATCH: usize = 1024;
/// Turns per wake-up before the thread checks its fds and commands again.
const MAX_TURNS: usize = 64;
/// How long a caller waits for the thread to acknowledge a command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the iothread and its control channel.
#[derive(Debug, thiserror::Error)]
pub enum IoThreadError {
    /// An OS call failed.
    #[error("iothread {name}: {what}: {source}")]
    Os {
        /// The thread.
        name: String,
        /// The operation.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The thread is gone or did not answer in time.
    #[error("iothread {0}: not responding")]
    NotResponding(String),
}

enum Command {
    Attach(Vec<Box<dyn Handler>>, Sender<Result<(), String>>),
    Detach(u64, Sender<Vec<Box<dyn Handler>>>),
    SetPoll(PollParams, Sender<PollParams>),
    Run(OnThreadHook, Sender<Result<(), String>>),
    Shutdown,
}

/// Code the owner runs on the iothread itself (the VMM installs its seccomp filter this way).
pub type OnThreadHook = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// A running iothread.
pub struct IoThread {
    name: String,
    max_batch: Arc<AtomicUsize>,
    poll: Mutex<PollParams>,
    commands: Mutex<Sender<Command>>,
    wake: EventFd,
    join: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<IoThreadStats>,
}

impl std::fmt::Debug for IoThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoThread")
            .field("name", &self.name)
            .finish()
    }
}

impl IoThread {
    /// Starts an iothread named `name` (the OS thread is named `iothread-{name}`) that hands at
    /// most `max_batch` requests per queue to the kernel in one submission (0 means the default,
    /// 32).
    pub fn spawn(name: &str, max_batch: usize) -> Result<Arc<IoThread>, IoThreadError> {
        Self::spawn_with(name, max_batch, PollParams::default())
    }

    /// Like [`IoThread::spawn`], polling with `poll` (validated by the caller).
    pub fn spawn_with(
        name: &str,
        max_batch: usize,
        poll: PollParams,
    ) -> Result<Arc<IoThread>, IoThreadError> {
        let os = |what| {
            let name = name.to_owned();
            move |source| IoThreadError::Os { name, what, source }
        };
        let wake = EventFd::new(libc::EFD_NONBLOCK).map_err(os("eventfd"))?;
        let epoll = Epoll::new().map_err(os("epoll_create"))?;
        epoll
            .ctl(
                ControlOperation::Add,
                wake.as_raw_fd_i32(),
                EpollEvent::new(EventSet::IN, COMMAND_TOKEN),
            )
            .map_err(os("epoll_ctl"))?;
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(IoThreadStats::default());
        let max_batch = Arc::new(AtomicUsize::new(effective_max_batch(max_batch)));
        let mut lp = Loop {
            max_batch: max_batch.clone(),
            carry: Vec::new(),
            policy: PollPolicy::new(poll),
            suppressed: Vec::new(),
            pollers: Vec::new(),
            epoch: Instant::now(),
            epoll,
            wake: wake.try_clone().map_err(os("eventfd clone"))?,
            commands: rx,
            slots: Vec::new(),
            stats: stats.clone(),
        };
        let join = std::thread::Builder::new()
            .name(format!("iothread-{name}"))
            .spawn(move || lp.run())
            .map_err(os("spawn"))?;
        Ok(Arc::new(IoThread {
            name: name.to_owned(),
            max_batch,
            poll: Mutex::new(poll),
            commands: Mutex::new(tx),
            wake,
            join: Mutex::new(Some(join)),
            stats,
        }))
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests per queue per submission in force.
    pub fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::Relaxed)
    }

    /// Changes `max_batch` (0 means the default); takes effect at the next turn. Returns the
    /// value in force.
    pub fn set_max_batch(&self, max_batch: usize) -> usize {
        let v = effective_max_batch(max_batch);
        self.max_batch.store(v, Ordering::Relaxed);
        v
    }

    /// The poll parameters in force.
    pub fn poll_params(&self) -> PollParams {
        *self.poll.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the poll parameters (validated by the caller); they apply at the next loop
    /// iteration, every window restarts from 0, and the values in force are returned.
    pub fn set_poll(&self, params: PollParams) -> Result<PollParams, IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::SetPoll(params, tx))?;
        let effective = rx
            .recv_timeout(COMMAND_TIMEOUT)
            .map_err(|_| IoThreadError::NotResponding(self.name.clone()))?;
        *self.poll.lock().unwrap_or_else(|p| p.into_inner()) = effective;
        Ok(effective)
    }

    /// The thread's statistics.
    pub fn stats(&self) -> &IoThreadStats {
        &self.stats
    }

    fn send(&self, cmd: Command) -> Result<(), IoThreadError> {
        let tx = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        tx.send(cmd)
            .map_err(|_| IoThreadError::NotResponding(self.name.clone()))?;
        self.wake.write(1).map_err(|source| IoThreadError::Os {
            name: self.name.clone(),
            what: "wake",
            source,
        })
    }

    /// Runs `hook` on the iothread, between two loop iterations, and returns its result. Used
    /// to install a seccomp filter once the thread is set up; the dataplane does not know what
    /// the hook does.
    pub fn run_on_thread(&self, hook: OnThreadHook) -> Result<(), IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Run(hook, tx))?;
        match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(IoThreadError::Os {
                name: self.name.clone(),
                what: "on-thread hook",
                source: std::io::Error::other(e),
            }),
            Err(_) => Err(IoThreadError::NotResponding(self.name.clone())),
        }
    }

    /// Moves `handlers` into the thread; returns once they are polled.
    pub fn attach(&self, handlers: Vec<Box<dyn Handler>>) -> Result<(), IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Attach(handlers, tx))?;
        match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(IoThreadError::Os {
                name: self.name.clone(),
                what: "attach",
                source: std::io::Error::other(e),
            }),
            Err(_) => Err(IoThreadError::NotResponding(self.name.clone())),
        }
    }

    /// Takes every handler of `owner` out of the thread after its in-flight I/O finished.
    pub fn detach(&self, owner: u64) -> Result<Vec<Box<dyn Handler>>, IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Detach(owner, tx))?;
        rx.recv_timeout(COMMAND_TIMEOUT)
            .map_err(|_| IoThreadError::NotResponding(self.name.clone()))
    }

    /// Stops the thread and waits for it.
    pub fn shutdown(&self) {
        if self.send(Command::Shutdown).is_ok() {
            let join = self.join.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(j) = join {
                let _ = j.join();
            }
        }
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `max_batch` with 0 meaning the default, clamped to the accepted range.
pub fn effective_max_batch(requested: usize) -> usize {
    match requested {
        0 => DEFAULT_MAX_BATCH,
        n => n.min(MAX_MAX_BATCH),
    }
}

trait RawFdI32 {
    fn as_raw_fd_i32(&self) -> i32;
}

impl RawFdI32 for EventFd {
    fn as_raw_fd_i32(&self) -> i32 {
        std::os::unix::io::AsRawFd::as_raw_fd(self)
    }
}

struct Loop {
    max_batch: Arc<AtomicUsize>,
    /// Handlers that still had work after their last turn.
    carry: Vec<usize>,
    /// The poll-window policy.
    policy: PollPolicy,
    /// Handlers whose notifications are suppressed (between poll_begin and poll_end).
    suppressed: Vec<usize>,
    /// Scratch: handlers polled this iteration.
    pollers: Vec<usize>,
    /// Origin of the monotonic ns the policy sees.
    epoch: Instant,
    epoll: Epoll,
    wake: EventFd,
    commands: Receiver<Command>,
    slots: Vec<Option<Box<dyn Handler>>>,
    stats: Arc<IoThreadStats>,
}

impl Loop {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn run(&mut self) {
        let mut events = vec![EpollEvent::default(); MAX_EVENTS];
        let mut ready: Vec<usize> = Vec::with_capacity(MAX_EVENTS);
        let mut hits: Vec<usize> = Vec::with_capacity(MAX_EVENTS);
        loop {
            let t0 = Instant::now();
            hits.clear();
            let window = self.window();
            IoThreadStats::set(&self.stats.poll_window_ns, window);
            if window > 0 && self.carry.is_empty() {
                self.poll_for(window, t0, &mut hits);
            }
            // Sleep only with nothing pending: first re-enable notifications and re-check.
            let mut timeout = 0;
            if hits.is_empty() && self.carry.is_empty() {
                for slot in std::mem::take(&mut self.suppressed) {
                    if let Some(Some(h)) = self.slots.get_mut(slot) {
                        if h.poll_end() {
                            hits.push(slot);
                        }
                    }
                }
                if hits.is_empty() {
                    timeout = -1;
                    IoThreadStats::add(&self.stats.sleeps, 1);
                    IoThreadStats::set(&self.stats.cpu_ns, thread_cpu_ns());
                }
            }
            let sleep_start = Instant::now();
            let n = match self.epoll.wait(timeout, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => {
                    log::error!("iothread: epoll_wait failed: {e}; stopping");
                    return;
                }
            };
            if timeout < 0 {
                IoThreadStats::add(
                    &self.stats.sleep_ns,
                    sleep_start.elapsed().as_nanos() as u64,
                );
            }
            if n > 0 {
                IoThreadStats::add(&self.stats.wakeups, 1);
            }
            let block_ns = t0.elapsed().as_nanos() as u64;
            ready.clear();
            ready.append(&mut self.carry);
            let mut command = false;
            for ev in &events[..n] {
                if ev.data() == COMMAND_TOKEN {
                    command = true;
                } else {
                    IoThreadStats::add(&self.stats.fd_events, 1);
                    let slot = ev.data() as usize;
                    if !hits.contains(&slot) {
                        hits.push(slot);
                    }
                }
            }
            for &slot in &hits {
                if !ready.contains(&slot) {
                    ready.push(slot);
                }
            }
            let work_start = Instant::now();
            self.take_turns(&mut ready);
            IoThreadStats::add(&self.stats.work_ns, work_start.elapsed().as_nanos() as u64);
            let now = self.now_ns();
            self.policy.update(block_ns, &hits, now);
            if command && !self.process_commands() {
                return;
            }
        }
    }

    /// The poll window: 0 when polling is off or a handler has no cheap check. With polling on
    /// and the policy's window at 0, the thread still probes for the first step (4 µs) before
    /// sleeping: after a sleep, `block_ns` includes the thread's own wake-up latency (~100 µs on
    /// a nested host), so a window that reached 0 could never grow again from sleeping
    /// iterations alone, even when the guest's next request follows within microseconds. A probe
    /// hit measures the real interval and lets the policy open the window.
    fn window(&self) -> u64 {
        if IoThreadStats::get(&self.stats.poll_disabled_handlers) > 0 {
            return 0;
        }
        let max = self.policy.params().max_ns;
        match self.policy.window() {
            0 if max > 0 => FIRST_STEP_NS.min(max),
            w => w,
        }
    }

    /// Polls the cheap checks of the handlers in the poll set, notifications suppressed, until
    /// one has work or `window` ns have passed since `t0`.
    fn poll_for(&mut self, window: u64, t0: Instant, hits: &mut Vec<usize>) {
        self.pollers.clear();
        for (slot, h) in self.slots.iter_mut().enumerate() {
            let Some(h) = h.as_mut() else { continue };
            if !self.policy.is_polled(slot) {
                continue;
            }
            if !self.suppressed.contains(&slot) {
                h.poll_begin();
                self.suppressed.push(slot);
            }
            self.pollers.push(slot);
        }
        let deadline = Duration::from_nanos(window);
        'poll: loop {
            for &slot in &self.pollers {
                if let Some(Some(h)) = self.slots.get_mut(slot) {
                    if h.poll() {
                        hits.push(slot);
                    }
                }
            }
            if !hits.is_empty() {
                break 'poll;
            }
            if t0.elapsed() >= deadline {
                break 'poll;
            }
            std::hint::spin_loop();
        }
        IoThreadStats::add(&self.stats.poll_ns, t0.elapsed().as_nanos() as u64);
        if hits.is_empty() {
            IoThreadStats::add(&self.stats.poll_misses, 1);
        } else {
            IoThreadStats::add(&self.stats.poll_hits, 1);
        }
    }

    /// Gives every ready handler turns of at most `max_batch` requests, round-robin, until none
    /// has work left or `MAX_TURNS` rounds passed (the rest carry over to the next iteration).
    fn take_turns(&mut self, ready: &mut Vec<usize>) {
        let max_batch = self.max_batch.load(Ordering::Relaxed);
        for _ in 0..MAX_TURNS {
            if ready.is_empty() {
                return;
            }
            ready.retain(|&slot| match self.slots.get_mut(slot) {
                Some(Some(h)) => {
                    IoThreadStats::add(&self.stats.handler_runs, 1);
                    h.run(max_batch)
                }
                _ => false,
            });
        }
        self.carry.append(ready);
    }

    /// Returns false on shutdown.
    fn process_commands(&mut self) -> bool {
        let _ = self.wake.read();
        while let Ok(cmd) = self.commands.try_recv() {
            IoThreadStats::add(&self.stats.commands, 1);
            match cmd {
                Command::Attach(handlers, reply) => {
                    let r = handlers.into_iter().try_for_each(|h| self.add(h));
                    let _ = reply.send(r);
                }
                Command::Detach(owner, reply) => {
                    let _ = reply.send(self.remove(owner));
                }
                Command::SetPoll(params, reply) => {
                    self.policy.set_params(params);
                    let _ = reply.send(self.policy.params());
                }
                Command::Run(hook, reply) => {
                    let _ = reply.send(hook());
                }
                Command::Shutdown => {
                    for slot in self.slots.iter_mut() {
                        if let Some(h) = slot.as_mut() {
                            h.quiesce();
                        }
                    }
                    return false;
                }
            }
        }
        true
    }

    fn add(&mut self, mut handler: Box<dyn Handler>) -> Result<(), String> {
        handler.attach()?;
        let slot = self
            .slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len());
        for fd in handler.wake_fds() {
            self.epoll
                .ctl(
                    ControlOperation::Add,
                    fd,
                    EpollEvent::new(EventSet::IN, slot as u64),
                )
                .map_err(|e| format!("epoll_ctl add fd {fd}: {e}"))?;
        }
        // Work may have arrived before the fds were watched: look once.
        if handler.run(self.max_batch.load(Ordering::Relaxed)) {
            self.carry.push(slot);
        }
        if slot == self.slots.len() {
            self.slots.push(Some(handler));
        } else {
            self.slots[slot] = Some(handler);
        }
        self.stats.handlers.fetch_add(1, Ordering::Relaxed);
        if self.slots[slot].as_ref().is_some_and(|h| !h.can_poll()) {
            self.stats
                .poll_disabled_handlers
                .fetch_add(1, Ordering::Relaxed);
        }
        let now = self.now_ns();
        self.policy.add(slot, now);
        Ok(())
    }

    fn remove(&mut self, owner: u64) -> Vec<Box<dyn Handler>> {
        let mut out = Vec::new();
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|h| h.owner() == owner) {
                if let Some(mut h) = slot.take() {
                    for fd in h.wake_fds() {
                        let _ = self
                            .epoll
                            .ctl(ControlOperation::Delete, fd, EpollEvent::default());
                    }
                    if self.suppressed.contains(&idx) {
                        h.poll_end();
                    }
                    h.quiesce();
                    self.stats.handlers.fetch_sub(1, Ordering::Relaxed);
                    if !h.can_poll() {
                        self.stats
                            .poll_disabled_handlers
                            .fetch_sub(1, Ordering::Relaxed);
                    }
                    self.carry.retain(|&s| s != idx);
                    self.suppressed.retain(|&s| s != idx);
                    self.policy.remove(idx);
                    out.push(h);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::any::Any;
    use std::os::unix::io::{AsRawFd, RawFd};
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;

    struct Counter {
        owner: u64,
        fd: EventFd,
        seen: Arc<AtomicU64>,
        quiesced: bool,
        attached_on: Option<String>,
    }

    impl Handler for Counter {
        fn owner(&self) -> u64 {
            self.owner
        }
        fn attach(&mut self) -> Result<(), String> {
            self.attached_on = std::thread::current().name().map(str::to_owned);
            Ok(())
        }
        fn wake_fds(&self) -> Vec<RawFd> {
            vec![self.fd.as_raw_fd()]
        }
        fn run(&mut self, _max_batch: usize) -> bool {
            if let Ok(n) = self.fd.read() {
                self.seen.fetch_add(n, Ordering::SeqCst);
            }
            false
        }
        fn quiesce(&mut self) {
            self.quiesced = true;
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
        }
    }

    #[track_caller]
    fn wait_for(cond: impl Fn() -> bool) {
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
        let h = Counter {
            owner: 7,
            fd: fd.try_clone().expect("clone"),
            seen: seen.clone(),
            quiesced: false,
            attached_on: None,
        };
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
        assert!(t.detach(99).expect("detach other").is_empty());
        let back = t.detach(7).expect("detach");
        assert_eq!(back.len(), 1);
        let counter = back
            .into_iter()
            .next()
            .expect("one")
            .into_any()
            .downcast::<Counter>()
            .expect("type");
        assert!(counter.quiesced, "detach quiesces first");
        assert_eq!(
            counter.attached_on.as_deref(),
            Some("iothread-test"),
            "attach runs on the iothread"
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
    }

    impl Handler for Budgeted {
        fn owner(&self) -> u64 {
            self.owner
        }
        fn wake_fds(&self) -> Vec<RawFd> {
            vec![self.fd.as_raw_fd()]
        }
        fn run(&mut self, max_batch: usize) -> bool {
            let _ = self.fd.read();
            let n = self.work.min(max_batch);
            if n > 0 {
                self.work -= n;
                self.turns.lock().expect("lock").push((self.owner, n));
            }
            self.work > 0
        }
        fn quiesce(&mut self) {}
        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
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
        let hs: Vec<Box<dyn Handler>> = fds
            .iter()
            .enumerate()
            .map(|(i, fd)| {
                Box::new(Budgeted {
                    owner: i as u64,
                    fd: fd.try_clone().expect("clone"),
                    work: 0,
                    turns: turns.clone(),
                }) as Box<dyn Handler>
            })
            .collect();
        t.attach(hs).expect("attach");
        // Give both handlers 10 units at once, then wake them together.
        for (owner, _) in fds.iter().enumerate() {
            let back = t.detach(owner as u64).expect("detach");
            let mut h = back
                .into_iter()
                .next()
                .expect("one")
                .into_any()
                .downcast::<Budgeted>()
                .expect("type");
            h.work = 10;
            t.attach(vec![h]).expect("re-attach");
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

    /// A pollable fake: `poll` finds work on every `every`-th call while `busy`; `poll_end`
    /// reports a race `races` times; runs are counted.
    struct Pollable {
        fd: EventFd,
        busy: Arc<std::sync::atomic::AtomicBool>,
        every: u64,
        calls: u64,
        races: Arc<AtomicU64>,
        runs: Arc<AtomicU64>,
        suppressed: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Handler for Pollable {
        fn owner(&self) -> u64 {
            1
        }
        fn wake_fds(&self) -> Vec<RawFd> {
            vec![self.fd.as_raw_fd()]
        }
        fn run(&mut self, _max_batch: usize) -> bool {
            let _ = self.fd.read();
            self.runs.fetch_add(1, Ordering::SeqCst);
            if self.busy.load(Ordering::SeqCst) && !self.suppressed.load(Ordering::SeqCst) {
                // Notifications are on and the "guest" has more work: it kicks.
                let _ = self.fd.write(1);
            }
            false
        }
        fn can_poll(&self) -> bool {
            true
        }
        fn poll(&mut self) -> bool {
            self.calls += 1;
            self.busy.load(Ordering::SeqCst) && self.calls.is_multiple_of(self.every)
        }
        fn poll_begin(&mut self) {
            self.suppressed.store(true, Ordering::SeqCst);
        }
        fn poll_end(&mut self) -> bool {
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
        fn quiesce(&mut self) {}
        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
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

    #[test]
    fn never_sleeps_when_poll_end_reports_work() {
        let params = PollParams {
            max_ns: 1_000_000,
            shrink: 2,
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
        let on = r.t.set_poll(PollParams::default()).expect("set_poll");
        assert_eq!(
            on,
            PollParams::default(),
            "the reply carries the values in force"
        );
        assert_eq!(r.t.poll_params(), on);
        kick_until(&r.fd, || stat(&r.t, "poll_hits") > 100);
        r.busy.store(false, Ordering::SeqCst);
        r.t.shutdown();
    }
}
