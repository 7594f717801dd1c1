//! The iothread's loop: polls the handlers' cheap checks for the policy's window, sleeps in epoll
//! on their fds otherwise, gives ready handlers turns of at most `max_batch` requests, and carries
//! out commands. It owns the registry of watched fds, so a handler that failed to attach, stopped
//! for good (a broken queue) or left the thread leaves no fd behind that could wake it.
//!
//! A loop of its own rather than rust-vmm's event-manager, whose loop is `epoll_wait` then
//! dispatch: polling needs a phase before each wait that decides whether to wait at all. The
//! steps of one iteration are [`Loop::run`]'s.

use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

mod swap;

pub(super) use swap::PendingSwap;

use super::cpu_queue::CpuQueue;
use super::placement::KeepApart;
use super::{Command, Detach, ThreadTurn};
use crate::handler::{AttachError, CompletionState, Handler, TurnEnd, Watch};
use crate::poll::contention::SAMPLE_PERIOD_NS;
use crate::poll::policy::FIRST_STEP_NS;
use crate::poll::{HostSample, PollPolicy};
use crate::stats::{thread_cpu_ns, IoThreadStats};
use crate::thread_weight::ThreadWeight;

/// The epoll token of the command eventfd.
pub(super) const COMMAND_TOKEN: u64 = u64::MAX;
/// A handler fd's epoll token is its slot shifted by this many bits, plus its index in
/// [`Handler::wake_fds`].
const FD_INDEX_BITS: u32 = 16;

/// The epoll token of fd `index` of the handler in `slot`.
fn fd_token(slot: usize, index: usize) -> u64 {
    ((slot as u64) << FD_INDEX_BITS) | (index as u64 & ((1 << FD_INDEX_BITS) - 1))
}

/// The slot and fd index a handler's epoll token names.
fn token_fd(token: u64) -> (usize, usize) {
    (
        (token >> FD_INDEX_BITS) as usize,
        (token & ((1 << FD_INDEX_BITS) - 1)) as usize,
    )
}
const MAX_EVENTS: usize = 64;
/// Turns per wake-up before the thread checks its fds and commands again.
const MAX_TURNS: usize = 64;
/// How soon a handler whose submission the kernel refused (EAGAIN) gets another turn.
const RETRY_DELAY: Duration = Duration::from_millis(1);
/// After a poll hit the thread goes straight back to work without asking epoll, but at least
/// this often it looks at its fds (commands, handlers outside the poll set).
const EPOLL_CHECK_INTERVAL: Duration = Duration::from_millis(1);
/// How often the thread samples its own CPU time for the statistics.
const CPU_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);
/// Poll rounds between two reads of the clock while polling.
const CLOCK_EVERY_SPINS: u32 = 8;
/// While polling, the thread yields its CPU this often. On a host where every core is busy (the
/// guest's vCPU spinning, this thread polling), the kernel worker that completes the I/O we poll
/// for (io_uring's io-wq, the loop driver, a softirq thread) may be queued on this very CPU: a
/// poll loop that never enters the kernel starves it until the next tick. A yield with nothing
/// else runnable returns at once (measured: docs/performance.md).
const POLL_YIELD_INTERVAL: Duration = Duration::from_micros(2);
/// While a handler with fd sources ([`crate::handler::Poll::has_fd_sources`]) is polled, the
/// thread peeks at its epoll set this often: a host packet or socket write waits at most this
/// long (plus one `poll` syscall) instead of the rest of the window.
const FD_PEEK_INTERVAL: Duration = Duration::from_micros(2);
/// How long shutdown waits for in-flight I/O of every handler.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// A handler and what the loop knows about it.
struct Slot {
    handler: Box<dyn Handler>,
    /// The fds registered in epoll for it (empty once it stopped).
    watched: Vec<RawFd>,
    /// It asked for another turn on a timer ([`TurnEnd::retry`]).
    retry: bool,
    /// It waits for a rate limiter until then ([`TurnEnd::wake_at`]).
    wake_at: Option<Instant>,
    /// It has a cheap check ([`Handler::poller`]), as it said when it arrived.
    polls: bool,
}

impl Slot {
    /// Records what the handler asked for after a turn; returns whether it wants another.
    fn turn_ended(&mut self, end: TurnEnd) -> bool {
        self.retry = end.retry;
        self.wake_at = end.wake_at;
        end.more
    }

    /// Ends watch `what` of the handler; returns whether work raced in.
    fn end_watch(&mut self, what: Watch) -> bool {
        self.handler.poller().is_some_and(|p| p.watch(what, false))
    }
}

/// What [`Loop::run`] carries from one iteration to the next, made on the thread itself.
struct Iterations {
    /// Scratch: what `epoll_wait` returned.
    events: Vec<EpollEvent>,
    /// Scratch: the handlers that get turns this iteration.
    ready: Vec<usize>,
    /// Handlers found with work by polling, the sleep's re-checks or their fds, for the turns
    /// and the policy.
    hits: Vec<usize>,
    /// When the thread last called `epoll_wait`.
    last_epoll: Instant,
    /// When the thread last published its CPU time.
    last_cpu_sample: Instant,
    /// The thread's schedstat, for the Adaptive policy's contention guard (`None`: guard off).
    schedstat: Option<std::fs::File>,
    /// The host's run queue, for the Adaptive policy's payoff check (`None`: trials always run).
    cpu_queue: Option<CpuQueue>,
    /// When (ns since the loop's epoch) the host is sampled next.
    next_host_sample: u64,
    /// The thread's scheduling weight.
    weight: ThreadWeight,
    /// The start of the iteration: the end of one iteration's work is the start of the next
    /// (one clock read for both).
    t0: Instant,
}

impl Iterations {
    /// Opened on the loop's thread: the schedstat file (before its seccomp filter; reads are one
    /// pread) and the weight, whose nice calls act on the calling thread.
    fn on_this_thread(dynamic_weight: bool) -> Self {
        let schedstat = std::fs::File::open("/proc/thread-self/schedstat")
            .map_err(|e| log::info!("iothread: no schedstat ({e}); contention guard off"))
            .ok();
        let now = Instant::now();
        Self {
            cpu_queue: CpuQueue::open(),
            events: vec![EpollEvent::default(); MAX_EVENTS],
            ready: Vec::with_capacity(MAX_EVENTS),
            hits: Vec::with_capacity(MAX_EVENTS),
            last_epoll: now,
            last_cpu_sample: now,
            schedstat,
            next_host_sample: 0,
            weight: ThreadWeight::for_this_thread(dynamic_weight),
            t0: Instant::now(),
        }
    }
}

/// A detach waiting for the owner's in-flight I/O.
struct PendingDetach {
    owner: u64,
    deadline: Instant,
    reply: Sender<Detach>,
}

pub(super) struct Loop {
    pub(super) max_batch: Arc<AtomicUsize>,
    /// Handlers that still had work after their last turn.
    pub(super) carry: Vec<usize>,
    /// The poll-window policy.
    pub(super) policy: PollPolicy,
    /// Handlers whose notifications are suppressed (a [`Watch::Polling`] is on).
    pub(super) suppressed: Vec<usize>,
    /// Handlers whose completion fd may be quiet (a [`Watch::Completions`] is on): a
    /// completion spin watched them.
    pub(super) completions_watched: Vec<usize>,
    /// Scratch: handlers polled this iteration.
    pub(super) pollers: Vec<usize>,
    /// The last spin ended because the epoll set had events ([`FD_PEEK_INTERVAL`]): the
    /// iteration goes to epoll without sleeping.
    fds_ready: bool,
    /// Origin of the monotonic ns the policy sees.
    pub(super) epoch: Instant,
    pub(super) epoll: Epoll,
    pub(super) wake: EventFd,
    pub(super) commands: Receiver<Command>,
    slots: Vec<Option<Slot>>,
    detaches: Vec<PendingDetach>,
    swaps: Vec<PendingSwap>,
    /// Scratch: handlers that stopped during the last turns.
    stopped: Vec<usize>,
    pub(super) stats: Arc<IoThreadStats>,
    /// Run one step lighter while polling than while sleeping ([`crate::thread_weight`]).
    dynamic_weight: bool,
    /// The round as the handlers' engines see it, passed to every `run` and `drain`.
    turn: ThreadTurn,
    /// The threads (vCPUs) whose CPUs the thread keeps off, when its owner asked.
    apart: Option<KeepApart>,
}

impl Loop {
    /// A loop that waits on `epoll` (which already watches `wake` with [`COMMAND_TOKEN`]).
    pub(super) fn new(
        max_batch: Arc<AtomicUsize>,
        policy: PollPolicy,
        epoll: Epoll,
        wake: EventFd,
        commands: Receiver<Command>,
        stats: Arc<IoThreadStats>,
        dynamic_weight: bool,
    ) -> Self {
        Self {
            max_batch,
            carry: Vec::new(),
            policy,
            suppressed: Vec::new(),
            completions_watched: Vec::new(),
            pollers: Vec::new(),
            fds_ready: false,
            epoch: Instant::now(),
            epoll,
            wake,
            commands,
            slots: Vec::new(),
            detaches: Vec::new(),
            swaps: Vec::new(),
            stopped: Vec::new(),
            stats,
            dynamic_weight,
            turn: ThreadTurn::default(),
            apart: None,
        }
    }

    /// The switch that leaves the thread's spare AIO contexts to the process exit.
    pub(super) fn aio_exit_switch(&self) -> crate::engine::linux_aio::ExitSwitch {
        self.turn.aio_pool().exit_switch()
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn slot(&mut self, slot: usize) -> Option<&mut Slot> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    /// The thread's loop, until a shutdown command or a failed `epoll_wait`. One iteration:
    /// poll for the policy's window, else get ready to sleep; wait in epoll (skipped right after
    /// a poll hit); give the ready handlers their turns; let the policy learn from the
    /// iteration; answer detaches and commands.
    pub(super) fn run(&mut self) {
        let mut it = Iterations::on_this_thread(self.dynamic_weight);
        loop {
            it.hits.clear();
            let window = self.open_window(&mut it.weight);
            // When polling found work (not a later re-check before a sleep).
            let mut poll_hit_at = None;
            if window > 0 && self.carry.is_empty() {
                let polled_until = self.poll_for(window, it.t0, &mut it.hits);
                if !it.hits.is_empty() {
                    poll_hit_at = polled_until;
                }
            }
            // Sleep only with nothing pending.
            let fds_ready = std::mem::take(&mut self.fds_ready);
            let timeout = if it.hits.is_empty() && self.carry.is_empty() && !fds_ready {
                self.prepare_to_sleep(&mut it)
            } else {
                0
            };
            let Some(n) = self.wait_for_events(timeout, &mut it) else {
                return;
            };
            // A poll hit that skipped epoll (`wait_for_events` did not call it this iteration)
            // starts its work where the poll ended: one clock read for both, none between the
            // guest's request and its handler.
            let work_start = match poll_hit_at {
                Some(t) if it.last_epoll < it.t0 => t,
                _ => Instant::now(),
            };
            let block_ns = work_start.duration_since(it.t0).as_nanos() as u64;
            let command = self.gather_ready(n, work_start, &mut it);
            self.take_turns(&mut it.ready);
            it.t0 = Instant::now();
            IoThreadStats::add(
                &self.stats.work_ns,
                it.t0.duration_since(work_start).as_nanos() as u64,
            );
            let now = it.t0.duration_since(self.epoch).as_nanos() as u64;
            self.sample_host(now, &mut it);
            if let Some(apart) = self.apart.as_mut() {
                if apart.check(now).is_some() {
                    IoThreadStats::set(&self.stats.placement_moves, apart.moves());
                }
            }
            self.policy.update(block_ns, &it.hits, now);
            if !self.detaches.is_empty() {
                self.finish_detaches();
            }
            if !self.swaps.is_empty() {
                self.finish_swaps();
            }
            if command {
                if !self.process_commands() {
                    return;
                }
                it.t0 = Instant::now();
            }
        }
    }

    /// The iteration's poll window ([`Loop::window`]), published, with the thread one step
    /// lighter while it polls when its weight is dynamic.
    fn open_window(&self, weight: &mut ThreadWeight) -> u64 {
        let window = self.window();
        IoThreadStats::set(&self.stats.poll_window_ns, window);
        if weight.set_light(window > 0) {
            IoThreadStats::set(&self.stats.thread_light, u64::from(weight.is_light()));
            IoThreadStats::set(&self.stats.weight_switches, weight.switches());
        }
        window
    }

    /// Before a sleep: re-enables the polled handlers' notifications (each re-checks: work that
    /// raced in goes to `hits`), spins on in-flight completions for the completion window, and
    /// ends the completion watch. Returns the epoll timeout: 0 when any of that found work or the
    /// spin saw fds ready, else [`Loop::sleep_timeout_ms`].
    fn prepare_to_sleep(&mut self, it: &mut Iterations) -> i32 {
        for slot in std::mem::take(&mut self.suppressed) {
            if self.slot(slot).is_some_and(|s| s.end_watch(Watch::Polling)) {
                it.hits.push(slot);
            }
        }
        let completion_window = self.completion_window();
        if it.hits.is_empty() && completion_window > 0 {
            self.spin_for_completions(completion_window, &mut it.hits);
        }
        if it.hits.is_empty() {
            self.end_completion_watch(&mut it.hits);
        }
        // Work found, or fds the completion spin's peek saw ready: epoll takes them at once.
        if !it.hits.is_empty() || std::mem::take(&mut self.fds_ready) {
            return 0;
        }
        let timeout = self.sleep_timeout_ms(it.t0);
        if timeout != 0 {
            IoThreadStats::add(&self.stats.sleeps, 1);
            if it.last_cpu_sample.elapsed() >= CPU_SAMPLE_INTERVAL {
                it.last_cpu_sample = Instant::now();
                IoThreadStats::set(&self.stats.cpu_ns, thread_cpu_ns());
            }
        }
        timeout
    }

    /// Waits in epoll for up to `timeout` ms; returns how many events it put in `it.events`, or
    /// `None` when `epoll_wait` failed (the thread stops). Polling that found work goes straight
    /// to it without the call (QEMU skips epoll too), unless the fds have not been looked at for
    /// [`EPOLL_CHECK_INTERVAL`].
    fn wait_for_events(&mut self, timeout: i32, it: &mut Iterations) -> Option<usize> {
        let skip_epoll = timeout == 0
            && !it.hits.is_empty()
            && it.t0.duration_since(it.last_epoll) < EPOLL_CHECK_INTERVAL;
        if skip_epoll {
            return Some(0);
        }
        let sleep_start = Instant::now();
        it.last_epoll = sleep_start;
        let n = match self.epoll.wait(timeout, &mut it.events) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
            Err(e) => {
                log::error!("iothread: epoll_wait failed: {e}; stopping");
                return None;
            }
        };
        if timeout != 0 {
            IoThreadStats::add(
                &self.stats.sleep_ns,
                sleep_start.elapsed().as_nanos() as u64,
            );
        }
        if n > 0 {
            IoThreadStats::add(&self.stats.wakeups, 1);
        }
        Some(n)
    }

    /// Fills `it.ready`: the handlers carried over, those whose fds fired (the first `n` of
    /// `it.events`, added to `it.hits` too) or that polling found with work, and those whose
    /// retry or throttling deadline has come by `now`. Returns whether the command fd fired.
    fn gather_ready(&mut self, n: usize, now: Instant, it: &mut Iterations) -> bool {
        it.ready.clear();
        it.ready.append(&mut self.carry);
        let mut command = false;
        for ev in &it.events[..n] {
            if ev.data() == COMMAND_TOKEN {
                command = true;
            } else {
                IoThreadStats::add(&self.stats.fd_events, 1);
                let (slot, index) = token_fd(ev.data());
                if let Some(s) = self.slot(slot) {
                    s.handler.fd_fired(index);
                }
                if !it.hits.contains(&slot) {
                    it.hits.push(slot);
                }
            }
        }
        for &slot in &it.hits {
            if !it.ready.contains(&slot) {
                it.ready.push(slot);
            }
        }
        for (slot, s) in self.slots.iter().enumerate() {
            let due = s
                .as_ref()
                .is_some_and(|s| s.retry || s.wake_at.is_some_and(|at| at <= now));
            if due && !it.ready.contains(&slot) {
                it.ready.push(slot);
            }
        }
        command
    }

    /// Every [`SAMPLE_PERIOD_NS`], shows the Adaptive policy the thread's CPU time and run delay
    /// (schedstat) and the requests its handlers completed, and publishes what it made of them.
    fn sample_host(&mut self, now: u64, it: &mut Iterations) {
        if now < it.next_host_sample {
            return;
        }
        it.next_host_sample = now + SAMPLE_PERIOD_NS;
        let Some((cpu_ns, run_delay_ns)) = it.schedstat.as_ref().and_then(read_schedstat) else {
            return;
        };
        // The run queue serves the Adaptive policy alone: one pread less per sample otherwise.
        let queue = if self.policy.observes_host() {
            it.cpu_queue.as_ref().and_then(CpuQueue::sample)
        } else {
            None
        };
        if let Some(q) = queue {
            IoThreadStats::set(&self.stats.host_runnable, q.runnable);
        }
        // A handler leaving makes the sum drop; the payoff check reads that segment as empty
        // (saturating), which only makes one trial say nothing.
        let requests = self
            .slots
            .iter_mut()
            .flatten()
            .map(|s| s.handler.poller().map_or(0, |p| p.completed()))
            .fold(0u64, u64::wrapping_add);
        self.policy.observe_host(HostSample {
            now_ns: now,
            cpu_ns,
            run_delay_ns,
            requests,
            cpu_queue: queue.map(|q| q.waiting),
        });
        self.publish_adaptive_stats(run_delay_ns, now);
    }

    /// Publishes what the Adaptive policy's contention guard and payoff check saw and did.
    fn publish_adaptive_stats(&self, run_delay_ns: u64, now_ns: u64) {
        let c = self.policy.contention();
        IoThreadStats::set(&self.stats.run_delay_ns, run_delay_ns);
        IoThreadStats::set(&self.stats.cpu_wait_permille, c.wait_permille);
        IoThreadStats::set(&self.stats.poll_suspensions, c.suspensions);
        IoThreadStats::set(&self.stats.poll_backoff_ns, c.backoff_ns);
        IoThreadStats::set(&self.stats.poll_yield_stops, c.yield_stops);
        IoThreadStats::set(
            &self.stats.poll_yields_off,
            u64::from(!self.policy.yields_allowed(now_ns)),
        );
        IoThreadStats::set(
            &self.stats.poll_suspended,
            u64::from(self.policy.suspended()),
        );
        let p = self.policy.payoff();
        IoThreadStats::set(&self.stats.payoff_trials, p.trials);
        IoThreadStats::set(&self.stats.payoff_skips, p.skips);
        IoThreadStats::set(&self.stats.payoff_shifts, p.shifts);
        IoThreadStats::set(
            &self.stats.cpu_queue_waiting_permille,
            p.queue_waiting_permille,
        );
        IoThreadStats::set(&self.stats.payoff_wins, p.wins);
        IoThreadStats::set(&self.stats.payoff_switches, p.switches);
        IoThreadStats::set(&self.stats.payoff_ratio_permille, p.ratio_permille);
        IoThreadStats::set(&self.stats.payoff_interval_ns, p.interval_ns);
        IoThreadStats::set(&self.stats.payoff_sleeping, u64::from(p.sleeping));
    }

    /// How long the thread may sleep: for ever (-1), unless a handler waits for a retry or a
    /// rate limiter, or a detach or a file swap for its deadline.
    fn sleep_timeout_ms(&self, now: Instant) -> i32 {
        let retry = self
            .slots
            .iter()
            .flatten()
            .any(|s| s.retry)
            .then(|| now + RETRY_DELAY);
        let throttled = self.slots.iter().flatten().filter_map(|s| s.wake_at).min();
        let detach = self.detaches.iter().map(|d| d.deadline).min();
        let swap = self.swaps.iter().map(PendingSwap::deadline).min();
        match retry
            .into_iter()
            .chain(throttled)
            .chain(detach)
            .chain(swap)
            .min()
        {
            None => -1,
            Some(at) => {
                let left = at.saturating_duration_since(now);
                // Round up so the thread does not wake just before the deadline.
                (left.as_micros().div_ceil(1000) as i32).max(1)
            }
        }
    }

    /// The poll window: 0 when polling is off or a handler has no cheap check. With polling on
    /// and the policy's window at 0, the thread still probes for the first step (4 µs) before
    /// sleeping: after a sleep, `block_ns` includes the thread's own wake-up latency (far longer
    /// than the first step on a nested host: docs/performance.md), so a window that reached 0
    /// could never grow again from sleeping iterations alone, even when the guest's next request follows within microseconds. A probe
    /// hit measures the real interval and lets the policy open the window.
    fn window(&self) -> u64 {
        if !self.every_handler_pollable() || self.policy.suspended() {
            return 0;
        }
        let max = self.policy.params().max_ns;
        match self.policy.window() {
            0 if max > 0 => FIRST_STEP_NS.min(max),
            w => w,
        }
    }

    /// How long to spin on completions before sleeping: the policy's
    /// [`PollPolicy::completion_window`], unless a handler has no cheap check.
    fn completion_window(&self) -> u64 {
        if !self.every_handler_pollable() {
            return 0;
        }
        self.policy.completion_window()
    }

    /// Whether every handler has a cheap check: one without it turns polling (and the spin on
    /// completions) off for its thread.
    fn every_handler_pollable(&self) -> bool {
        IoThreadStats::get(&self.stats.poll_disabled_handlers) == 0
    }

    /// Polls the cheap checks of the handlers in the poll set, notifications suppressed, until
    /// one has work or `window` ns have passed since `t0`. Returns when it stopped polling
    /// (`None`: nothing to poll).
    fn poll_for(&mut self, window: u64, t0: Instant, hits: &mut Vec<usize>) -> Option<Instant> {
        self.pollers.clear();
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s.as_mut() else { continue };
            if s.watched.is_empty() || !self.policy.is_polled(slot) {
                continue;
            }
            if !self.suppressed.contains(&slot) {
                if let Some(p) = s.handler.poller() {
                    p.watch(Watch::Polling, true);
                }
                self.suppressed.push(slot);
            }
            self.pollers.push(slot);
        }
        if self.pollers.is_empty() {
            return None;
        }
        let yields = self.spin(window, t0, hits, true);
        let end = Instant::now();
        IoThreadStats::add(
            &self.stats.poll_ns,
            end.duration_since(t0).as_nanos() as u64,
        );
        IoThreadStats::add(&self.stats.poll_yields, yields);
        if self.fds_ready {
            IoThreadStats::add(&self.stats.poll_fd_hits, 1);
        } else if hits.is_empty() {
            IoThreadStats::add(&self.stats.poll_misses, 1);
        } else {
            IoThreadStats::add(&self.stats.poll_hits, 1);
        }
        Some(end)
    }

    /// While requests are in flight, spins on the handlers' cheap checks (a completion, or a
    /// new request in a queue: their notifications stay on, so a guest still kicks) until one
    /// has work or `window` ns have passed: see [`PollPolicy::completion_window`]. A pending
    /// handler's [`crate::handler::Poll::completion_spin_cap_ns`] shortens the window.
    fn spin_for_completions(&mut self, window: u64, hits: &mut Vec<usize>) {
        self.pollers.clear();
        let mut in_flight = false;
        let mut window = window;
        let mut capped = false;
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s.as_mut() else { continue };
            if s.watched.is_empty() {
                continue;
            }
            let Some(p) = s.handler.poller() else {
                self.pollers.push(slot);
                continue;
            };
            match p.completion_state() {
                CompletionState::Idle => {}
                CompletionState::Pending => {
                    in_flight = true;
                    if let Some(cap) = p.completion_spin_cap_ns() {
                        window = window.min(cap);
                        capped = true;
                    }
                }
                CompletionState::Ready => hits.push(slot),
            }
            self.pollers.push(slot);
        }
        if !in_flight || !hits.is_empty() || window == 0 {
            return;
        }
        // What the spin finds, the turns reap: their engines need not signal it.
        for i in 0..self.pollers.len() {
            let slot = self.pollers[i];
            if self.completions_watched.contains(&slot) {
                continue;
            }
            if let Some(s) = self.slot(slot) {
                if let Some(p) = s.handler.poller() {
                    p.watch(Watch::Completions, true);
                }
                self.completions_watched.push(slot);
            }
        }
        let t0 = Instant::now();
        // A capped spin is a few µs: a yield would hand a CPU hog its slice and outlast it.
        let yields = self.spin(window, t0, hits, !capped);
        IoThreadStats::add(
            &self.stats.completion_spin_ns,
            t0.elapsed().as_nanos() as u64,
        );
        IoThreadStats::add(&self.stats.poll_yields, yields);
        IoThreadStats::add(&self.stats.completion_spins, 1);
        if !hits.is_empty() {
            IoThreadStats::add(&self.stats.completion_spin_hits, 1);
        }
    }

    /// Before the thread sleeps: the handlers a completion spin watched signal their completion
    /// fds again; one whose completion raced in goes to `hits` (no sleep then).
    fn end_completion_watch(&mut self, hits: &mut Vec<usize>) {
        for slot in std::mem::take(&mut self.completions_watched) {
            if self
                .slot(slot)
                .is_some_and(|s| s.end_watch(Watch::Completions))
            {
                hits.push(slot);
            }
        }
    }

    /// Runs the cheap checks ([`crate::handler::Poll::poll`]) of the handlers in `self.pollers` round after
    /// round until one finds work (pushed to `hits`), the epoll set has events (peeked at when
    /// a polled handler has fd sources; sets `self.fds_ready`) or `window` ns have passed since
    /// `t0`, yielding the CPU now and then (`yield_ok`) where the policy allows it. Returns the
    /// yields.
    fn spin(&mut self, window: u64, t0: Instant, hits: &mut Vec<usize>, yield_ok: bool) -> u64 {
        let deadline = Duration::from_nanos(window);
        // Adaptive stops the yields on a busy host (they hand a CPU hog its slice).
        let may_yield = yield_ok
            && self
                .policy
                .yields_allowed(t0.duration_since(self.epoch).as_nanos() as u64);
        let mut peek = false;
        for &slot in &self.pollers {
            if let Some(Some(s)) = self.slots.get_mut(slot) {
                peek |= s.handler.poller().is_some_and(|p| p.has_fd_sources());
            }
        }
        let mut spins: u32 = 0;
        let mut next_yield = POLL_YIELD_INTERVAL;
        let mut next_peek = FD_PEEK_INTERVAL;
        let mut yields = 0;
        loop {
            for &slot in &self.pollers {
                if let Some(Some(s)) = self.slots.get_mut(slot) {
                    if s.handler.poller().is_some_and(|p| p.poll()) {
                        hits.push(slot);
                    }
                }
            }
            if !hits.is_empty() {
                return yields;
            }
            // The clock costs more than a cheap check: read it every few rounds (the window
            // overshoots by a few checks at most).
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(CLOCK_EVERY_SPINS) {
                let polled = t0.elapsed();
                if polled >= deadline {
                    return yields;
                }
                if peek && polled >= next_peek {
                    next_peek = polled + FD_PEEK_INTERVAL;
                    if self.epoll_has_events() {
                        self.fds_ready = true;
                        return yields;
                    }
                }
                if may_yield && polled >= next_yield {
                    next_yield = polled + POLL_YIELD_INTERVAL;
                    yields += 1;
                    // SAFETY: sched_yield has no arguments and no memory effects.
                    unsafe { libc::sched_yield() };
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Whether the epoll set has events waiting, without taking them (`poll` on the epoll fd,
    /// no wait).
    fn epoll_has_events(&self) -> bool {
        let mut fd = libc::pollfd {
            fd: self.epoll.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `fd` is one valid, writable `pollfd` and the count passed is 1; a zero timeout
        // does not block.
        let n = unsafe { libc::poll(&mut fd, 1, 0) };
        n > 0 && fd.revents & libc::POLLIN != 0
    }

    /// Gives every ready handler turns of at most `max_batch` requests, round-robin, until none
    /// has work left or `MAX_TURNS` rounds passed (the rest carry over to the next iteration).
    fn take_turns(&mut self, ready: &mut Vec<usize>) {
        let max_batch = self.max_batch.load(Ordering::Relaxed);
        for _ in 0..MAX_TURNS {
            if ready.is_empty() {
                break;
            }
            self.turn.set_ready_handlers(ready.len());
            ready.retain(|&slot| match self.slots.get_mut(slot) {
                Some(Some(s)) if !s.watched.is_empty() => {
                    IoThreadStats::add(&self.stats.handler_runs, 1);
                    let end = s.handler.run(max_batch, &self.turn);
                    let more = s.turn_ended(end);
                    if end.stopped {
                        self.stopped.push(slot);
                        return false;
                    }
                    more
                }
                _ => false,
            });
        }
        self.carry.append(ready);
        self.unwatch_stopped();
    }

    /// Unwatches the handlers that stopped during the last turns.
    fn unwatch_stopped(&mut self) {
        while let Some(slot) = self.stopped.pop() {
            log::info!("iothread: handler {slot} stopped; its fds are no longer watched");
            self.unwatch(slot);
        }
    }

    /// Stops watching a handler that will do nothing more until it leaves the thread. A
    /// completion watch ends first, so that the handler leaves with its completion fd signalling.
    fn unwatch(&mut self, slot: usize) {
        if self.completions_watched.contains(&slot) {
            if let Some(s) = self.slot(slot) {
                s.end_watch(Watch::Completions);
            }
        }
        let Some(Some(s)) = self.slots.get_mut(slot) else {
            return;
        };
        let fds = std::mem::take(&mut s.watched);
        s.retry = false;
        s.wake_at = None;
        for fd in fds {
            self.unregister(fd);
        }
        self.carry.retain(|&c| c != slot);
        self.suppressed.retain(|&c| c != slot);
        self.completions_watched.retain(|&c| c != slot);
        self.policy.remove(slot);
    }

    fn unregister(&mut self, fd: RawFd) {
        if let Err(e) = self
            .epoll
            .ctl(ControlOperation::Delete, fd, EpollEvent::default())
        {
            log::warn!("iothread: epoll_ctl delete fd {fd}: {e}");
        }
        self.stats.watched_fds.fetch_sub(1, Ordering::Relaxed);
    }

    /// Returns false on shutdown.
    fn process_commands(&mut self) -> bool {
        let _ = self.wake.read();
        while let Ok(cmd) = self.commands.try_recv() {
            IoThreadStats::add(&self.stats.commands, 1);
            match cmd {
                Command::Attach(handlers, reply) => {
                    let _ = reply.send(self.attach_all(handlers));
                }
                Command::Detach(owner, wait, reply) => {
                    self.detaches.push(PendingDetach {
                        owner,
                        deadline: Instant::now() + wait,
                        reply,
                    });
                    self.finish_detaches();
                }
                Command::Swap(swap) => {
                    self.swaps.push(swap);
                    self.finish_swaps();
                }
                Command::SetPoll(params, reply) => {
                    let now = self.now_ns();
                    self.policy.set_params(params, now);
                    let _ = reply.send(self.policy.params());
                }
                Command::Run(hook, reply) => {
                    let _ = reply.send(hook());
                }
                Command::KeepApart(apart) => self.apart = Some(apart),
                Command::WakeThrottled => {
                    // Limits changed: throttled handlers look at their buckets again now.
                    let now = Instant::now();
                    for s in self.slots.iter_mut().flatten() {
                        if s.wake_at.is_some() {
                            s.wake_at = Some(now);
                        }
                    }
                }
                Command::Shutdown => {
                    self.drain_all();
                    return false;
                }
            }
        }
        true
    }

    /// Drains every handler before the thread ends (bounded wait: the process is going away).
    fn drain_all(&mut self) {
        let deadline = Instant::now() + SHUTDOWN_DRAIN;
        loop {
            let left: usize = self
                .slots
                .iter_mut()
                .flatten()
                .map(|s| s.handler.drain(&self.turn))
                .sum();
            if left == 0 {
                return;
            }
            if Instant::now() >= deadline {
                log::error!("iothread: {left} requests still in flight at shutdown");
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Answers the detaches whose owner drained (the handlers) or whose deadline passed (what is
    /// still in flight; the handlers stay, draining, until a later detach finds them done).
    fn finish_detaches(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.detaches.len() {
            let owner = self.detaches[i].owner;
            let in_flight: usize = self
                .slots
                .iter_mut()
                .flatten()
                .filter(|s| s.handler.owner() == owner)
                .map(|s| s.handler.drain(&self.turn))
                .sum();
            if in_flight == 0 {
                let d = self.detaches.swap_remove(i);
                let _ = d.reply.send(Detach::Done(self.remove(owner)));
            } else if now >= self.detaches[i].deadline {
                let d = self.detaches.swap_remove(i);
                let _ = d.reply.send(Detach::Draining { in_flight });
            } else {
                i += 1;
            }
        }
    }

    /// Attaches every handler or none: on a failure, the ones already attached are taken out
    /// again (no I/O has started: handlers get their first turn only once all are watched).
    fn attach_all(&mut self, handlers: Vec<Box<dyn Handler>>) -> Result<(), AttachError> {
        let mut added = Vec::with_capacity(handlers.len());
        for h in handlers {
            match self.add(h) {
                Ok(slot) => added.push(slot),
                Err(e) => {
                    for slot in added {
                        self.unwatch(slot);
                        self.forget(slot);
                    }
                    return Err(e);
                }
            }
        }
        // Work may have arrived before the fds were watched: look once.
        let max_batch = self.max_batch.load(Ordering::Relaxed);
        let mut more = Vec::new();
        for slot in added {
            if let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) {
                let end = s.handler.run(max_batch, &self.turn);
                if s.turn_ended(end) {
                    more.push(slot);
                }
                if end.stopped {
                    self.stopped.push(slot);
                }
            }
        }
        self.carry.extend(more);
        self.unwatch_stopped();
        Ok(())
    }

    /// Attaches one handler and watches its fds; undoes its own registrations on failure.
    fn add(&mut self, mut handler: Box<dyn Handler>) -> Result<usize, AttachError> {
        handler.attach(&self.turn)?;
        let slot = self
            .slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len());
        let mut watched = Vec::new();
        // Edge-triggered: a signal wakes the thread once, and the handler need not read the fd
        // (level-triggered, each wake-up would cost a read of the kick fd and another of the
        // completion fd: docs/performance.md counts the syscalls per request).
        for (index, fd) in handler.wake_fds().into_iter().enumerate() {
            let added = self.epoll.ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(
                    EventSet::IN | EventSet::EDGE_TRIGGERED,
                    fd_token(slot, index),
                ),
            );
            if let Err(e) = added {
                for fd in watched {
                    self.unregister(fd);
                }
                return Err(AttachError::Watch { fd, source: e });
            }
            self.stats.watched_fds.fetch_add(1, Ordering::Relaxed);
            watched.push(fd);
        }
        let polls = handler.poller().is_some();
        let s = Slot {
            handler,
            watched,
            retry: false,
            wake_at: None,
            polls,
        };
        if slot == self.slots.len() {
            self.slots.push(Some(s));
        } else {
            self.slots[slot] = Some(s);
        }
        let n = self.stats.handlers.fetch_add(1, Ordering::Relaxed) + 1;
        self.turn
            .set_handlers(usize::try_from(n).unwrap_or(usize::MAX));
        if !polls {
            self.stats
                .poll_disabled_handlers
                .fetch_add(1, Ordering::Relaxed);
        }
        let now = self.now_ns();
        self.policy.add(slot, now);
        Ok(slot)
    }

    /// Takes an unwatched handler out of its slot and undoes its statistics.
    fn forget(&mut self, slot: usize) -> Option<Box<dyn Handler>> {
        let s = self.slots.get_mut(slot)?.take()?;
        let n = self
            .stats
            .handlers
            .fetch_sub(1, Ordering::Relaxed)
            .saturating_sub(1);
        self.turn
            .set_handlers(usize::try_from(n).unwrap_or(usize::MAX));
        if !s.polls {
            self.stats
                .poll_disabled_handlers
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.carry.retain(|&c| c != slot);
        self.suppressed.retain(|&c| c != slot);
        self.completions_watched.retain(|&c| c != slot);
        self.policy.remove(slot);
        Some(s.handler)
    }

    /// Takes every handler of `owner` out of the thread (the caller checked they drained) and
    /// lets each go ([`Handler::detach`]); returns how many.
    fn remove(&mut self, owner: u64) -> usize {
        let mut out = 0;
        for slot in 0..self.slots.len() {
            let mine = self.slots[slot]
                .as_ref()
                .is_some_and(|s| s.handler.owner() == owner);
            if !mine {
                continue;
            }
            if self.suppressed.contains(&slot) {
                if let Some(s) = self.slot(slot) {
                    s.end_watch(Watch::Polling);
                }
            }
            self.unwatch(slot);
            if let Some(h) = self.forget(slot) {
                h.detach();
                out += 1;
            }
        }
        out
    }
}

/// The first two fields of a schedstat line: CPU time and time spent runnable but waiting for a
/// CPU (ns).
fn read_schedstat(f: &std::fs::File) -> Option<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 96];
    let n = f.read_at(&mut buf, 0).ok()?;
    let line = std::str::from_utf8(buf.get(..n)?).ok()?;
    let mut fields = line.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

#[cfg(test)]
mod tests;
