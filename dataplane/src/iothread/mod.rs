//! The iothread: a named thread that owns handlers exclusively and runs them when their fds
//! fire (the loop is `event_loop.rs`, a file swap `event_loop/swap.rs`). Control commands
//! (attach, detach, file swap, poll parameters, the owner's hooks, throttle wake-ups, shutdown)
//! arrive over a channel plus an eventfd and are
//! acknowledged, so callers know when ownership moved: a handler's engine may have I/O in flight
//! into guest memory, and a detached handler comes back only once it has none.

mod cpu_queue;
mod event_loop;
pub mod placement;
mod turn;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use crate::engine::linux_aio::ExitSwitch;
use crate::handler::{AttachError, Handler};
use crate::poll::{PollParams, PollPolicy};
use crate::stats::IoThreadStats;
use event_loop::{Loop, COMMAND_TOKEN};
pub use turn::ThreadTurn;

/// The default and the upper bound of `max_batch`.
pub const DEFAULT_MAX_BATCH: usize = 32;
/// The largest `max_batch` accepted.
pub const MAX_MAX_BATCH: usize = 1024;
/// How long a caller waits for the thread to acknowledge a command (beyond the command's own
/// wait).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`IoThread::swap_file`] waits for the thread's answer beyond the swap's own wait.
const SWAP_ANSWER_MARGIN: Duration = Duration::from_millis(500);

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
    /// Handlers could not be attached (none were: attach is all or nothing).
    #[error("iothread {name}: attach: {source}")]
    Attach {
        /// The thread.
        name: String,
        /// Why.
        source: AttachError,
    },
    /// A file swap failed ([`IoThread::swap_file`]); every handler kept its old file.
    #[error("iothread {name}: swapping the file: {source}")]
    Swap {
        /// The thread.
        name: String,
        /// Why.
        source: AttachError,
    },
    /// The owner's hook ([`IoThread::run_on_thread`]) failed on the thread.
    #[error("iothread {name}: on-thread hook: {source}")]
    Hook {
        /// The thread.
        name: String,
        /// The hook's own error.
        source: HookError,
    },
}

enum Command {
    Attach(Vec<Box<dyn Handler>>, Sender<Result<(), AttachError>>),
    Detach(u64, Duration, Sender<Detach>),
    Swap(event_loop::PendingSwap),
    SetPoll(PollParams, Sender<PollParams>),
    Run(OnThreadHook, Sender<Result<(), HookError>>),
    KeepApart(placement::KeepApart),
    WakeThrottled,
    Shutdown,
}

/// The answer to [`IoThread::detach`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detach {
    /// Every handler of the owner (this many) is out of the thread, its I/O finished, and
    /// handed back what its owner gets back ([`Handler::detach`]).
    Done(usize),
    /// Requests were still in flight when the wait ended: the handlers stay on the thread,
    /// taking no new work and completing what finishes; ask again later.
    Draining {
        /// Requests still in flight.
        in_flight: usize,
    },
}

/// The answer to [`IoThread::swap_file`] when nothing failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapOutcome {
    /// Every handler of the owner runs on the new file; the hook ran before they resumed.
    Swapped {
        /// Requests in flight on the old file when the swap began, all completed there.
        drained: usize,
    },
    /// Requests on the old file were still in flight when the wait ended: the swap was given
    /// up, the handlers resumed on the old file and the hook did not run.
    TimedOut {
        /// Requests still in flight.
        in_flight: usize,
    },
}

/// What the owner runs on the iothread once every handler of a swap has its new file, before
/// any of them takes a request again (e.g. the new capacity and the guest's config interrupt).
pub type SwapHook = Box<dyn FnOnce() + Send>;

/// Code the owner runs on the iothread itself (the VMM installs its seccomp filter this way).
pub type OnThreadHook = Box<dyn FnOnce() -> Result<(), HookError> + Send>;

/// What an [`OnThreadHook`] fails with: the owner's own error type, which the dataplane does not
/// know and only hands back ([`IoThreadError::Hook`]).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// A running iothread.
pub struct IoThread {
    name: String,
    max_batch: Arc<AtomicUsize>,
    poll: Mutex<PollParams>,
    commands: Mutex<Sender<Command>>,
    wake: EventFd,
    join: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<IoThreadStats>,
    /// Leaves the thread's Linux AIO contexts to the process exit.
    aio_exit: ExitSwitch,
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
        Self::spawn_weighted(name, max_batch, poll, false)
    }

    /// Like [`IoThread::spawn_with`]; with `dynamic_weight`, the thread runs one step lighter
    /// while its policy polls than while it sleeps between events
    /// ([`crate::thread_weight`]), where `RLIMIT_NICE` lets it come back.
    pub fn spawn_weighted(
        name: &str,
        max_batch: usize,
        poll: PollParams,
        dynamic_weight: bool,
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
        let mut lp = Loop::new(
            max_batch.clone(),
            PollPolicy::new(poll),
            epoll,
            wake.try_clone().map_err(os("eventfd clone"))?,
            rx,
            stats.clone(),
            dynamic_weight,
        );
        let aio_exit = lp.aio_exit_switch();
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
            aio_exit,
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
            Ok(Err(source)) => Err(IoThreadError::Hook {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(IoThreadError::NotResponding(self.name.clone())),
        }
    }

    /// From now on the thread keeps off the CPUs where the threads `apart` watches run
    /// ([`placement`]); replaces what an earlier call set.
    pub fn keep_apart(&self, apart: placement::KeepApart) -> Result<(), IoThreadError> {
        self.send(Command::KeepApart(apart))
    }

    /// Limits changed ([`crate::rate_limit::RateLimiter::set`]): throttled handlers check
    /// their buckets again at the thread's next turn instead of at their old deadline.
    pub fn wake_throttled(&self) -> Result<(), IoThreadError> {
        self.send(Command::WakeThrottled)
    }

    /// Moves `handlers` into the thread; returns once they are polled.
    pub fn attach(&self, handlers: Vec<Box<dyn Handler>>) -> Result<(), IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Attach(handlers, tx))?;
        match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(IoThreadError::Attach {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(IoThreadError::NotResponding(self.name.clone())),
        }
    }

    /// Takes every handler of `owner` out of the thread once its in-flight I/O finished,
    /// waiting at most `wait` for that (the thread keeps serving its other handlers meanwhile).
    /// With requests still in flight after `wait`, the handlers stay on the thread, draining,
    /// and the answer says how many remain: nothing the engine still owns may outlive the
    /// owner's memory, so the caller must not treat the handlers as gone.
    pub fn detach(&self, owner: u64, wait: Duration) -> Result<Detach, IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Detach(owner, wait, tx))?;
        rx.recv_timeout(COMMAND_TIMEOUT + wait)
            .map_err(|_| IoThreadError::NotResponding(self.name.clone()))
    }

    /// Moves every handler of `owner` onto `file` without losing a request: they stop taking
    /// new requests, those in flight complete on the old file (the thread serves its other
    /// handlers meanwhile), then each handler's engine is rebuilt on `file`
    /// ([`crate::FileBacked::replace_file`]), `on_swapped` runs, and they resume, serving what the guest
    /// queued meanwhile. Waits at most `wait` for the old file's requests; past it the swap is
    /// given up ([`SwapOutcome::TimedOut`]) and the handlers go on with the old file. An owner
    /// with no handler on the thread (its device not active) swaps at once: only the hook runs.
    pub fn swap_file(
        &self,
        owner: u64,
        file: std::fs::File,
        wait: Duration,
        on_swapped: SwapHook,
    ) -> Result<SwapOutcome, IoThreadError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Swap(event_loop::PendingSwap::new(
            owner, file, wait, on_swapped, tx,
        )))?;
        // Not `COMMAND_TIMEOUT`: a thread blocked on a hung file (the Sync engine) must not hold
        // the caller for long. The thread itself gives up at `wait`, so it does not swap after
        // this answer (unless the swap started just before its deadline and its set-up outlasts
        // the margin: the owner's hook then still records it).
        match rx.recv_timeout(wait + SWAP_ANSWER_MARGIN) {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(source)) => Err(IoThreadError::Swap {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(IoThreadError::NotResponding(self.name.clone())),
        }
    }

    /// The process is about to exit: the Linux AIO contexts of the thread's engines dropped from
    /// now on, and those it keeps spare, are left to the exit instead of each waiting for
    /// `io_destroy` ([`ExitSwitch::leave_to_process_exit`]). Not for a device reset.
    pub fn leave_aio_contexts_to_process_exit(&self) {
        self.aio_exit.leave_to_process_exit();
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

#[cfg(test)]
mod tests;
