//! What an iothread runs: a [`Handler`] owns some work (e.g. one virtio-blk queue with its I/O
//! engine), names the fds that signal new work, and does the work when asked. Any device kind
//! joins a thread by implementing it: the event loop knows nothing else of its handlers.
//!
//! The trait is what the loop needs every turn ([`Handler::run`], [`Handler::drain`]) plus
//! lifecycle hooks with defaults. Two optional capabilities are traits of their own, reached
//! through accessors instead of downcasts: [`Poll`] (a cheap check the thread may spin on) and
//! [`FileBacked`] (an engine on a file the owner may swap while the guest runs).

use std::os::unix::io::RawFd;
use std::time::Instant;

use crate::engine::EngineError;
use crate::iothread::ThreadTurn;

/// Why a handler could not join an iothread: its engine (unavailable on this host, or its
/// set-up failed: [`EngineError`] says which), or the thread could not watch one of its fds.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The handler's I/O engine could not be created.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The thread could not watch one of the handler's fds.
    #[error("watching fd {fd} (epoll_ctl): {source}")]
    Watch {
        /// The fd.
        fd: RawFd,
        /// The OS error.
        source: std::io::Error,
    },
    /// The new file of a swap could not be duplicated for the handler's engine.
    #[error("duplicating the new file: {0}")]
    DupFile(#[source] std::io::Error),
    /// The handler has no file to replace (it is not [`FileBacked`]).
    #[error("this handler has no backing file to replace")]
    NoFile,
}

/// What a handler's requests in flight are doing ([`Poll::completion_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionState {
    /// Nothing in flight (or the handler cannot tell): nothing to wait for.
    Idle,
    /// Requests in flight, none completed yet.
    Pending,
    /// A completion waits to be reaped.
    Ready,
}

/// What a handler needs from the thread after a turn ([`Handler::run`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnEnd {
    /// Work remains that no fd will signal (the budget ran out): the thread gives the handler
    /// another turn after the other handlers had theirs.
    pub more: bool,
    /// Work waits for a resubmission that no fd will signal (the kernel refused a submission
    /// with EAGAIN while nothing was in flight): the thread runs the handler again after a
    /// short timer instead of sleeping until an fd fires.
    pub retry: bool,
    /// The handler stopped taking new work until this time (a rate limiter's bucket is dry):
    /// the thread runs it again then (or when one of its fds fires, or on
    /// [`crate::IoThread::wake_throttled`]), and does not poll it meanwhile.
    pub wake_at: Option<Instant>,
    /// The handler will do nothing more until it leaves the thread (a broken queue whose
    /// in-flight I/O has been reaped): the thread stops watching its fds and polling it, so it
    /// costs nothing while the guest does not reset it.
    pub stopped: bool,
}

impl TurnEnd {
    /// Nothing more to do until an fd fires.
    pub const IDLE: TurnEnd = TurnEnd {
        more: false,
        retry: false,
        wake_at: None,
        stopped: false,
    };
    /// Another turn is wanted (the budget ran out).
    pub const MORE: TurnEnd = TurnEnd {
        more: true,
        ..TurnEnd::IDLE
    };
}

/// Which notifications a [`Poll::watch`] call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The thread polls the handler ([`Poll::poll`]): the handler suppresses the notifications
    /// that would wake the thread (the guest need not kick while the thread watches the ring),
    /// and [`Handler::run`] leaves them suppressed until the watch ends.
    Polling,
    /// The thread spins on the handler's completions (see [`Poll::completion_state`]): the
    /// engine may stop signalling its completion fd, while the queue's notifications stay on
    /// (the guest still kicks). Without it, a completion that the spin found and the turn
    /// reaped would still signal the fd, and wake the thread once more for nothing.
    Completions,
}

/// A handler's cheap check, for a thread that polls instead of sleeping. A handler without one
/// ([`Handler::poller`] returns `None`) disables polling on its thread (the thread's statistics
/// say so).
pub trait Poll {
    /// The cheap check: is there work (new requests in the ring, completions in the engine)?
    /// No syscalls, no side effects; called in a tight loop while the thread polls.
    fn poll(&mut self) -> bool;
    /// Whether the handler has requests in flight, and whether one has completed: a cheap
    /// check like [`Poll::poll`], on the completion side only. While the `Adaptive` policy has
    /// polling suspended, the thread asks this before sleeping: with requests in flight it
    /// spins on [`Poll::poll`] for a bounded window (notifications left on), so the completion
    /// of a request it just submitted does not wait for the thread to be woken.
    fn completion_state(&self) -> CompletionState {
        CompletionState::Idle
    }
    /// The longest the thread should spin for this handler's pending completion, in ns, when
    /// it is shorter than the policy's completion window (`None`: the policy's window). A
    /// handler whose completion either comes within a few microseconds or much later (a
    /// guest's answer, not a disk's) caps the spin, so a late one costs little CPU.
    fn completion_spin_cap_ns(&self) -> Option<u64> {
        None
    }
    /// Starts (`on`) or ends a [`Watch`]. Ending one means the thread is about to sleep: the
    /// handler signals again (notifications, completion fd), then checks once more and returns
    /// true if work raced in (the thread then does not sleep). Starting one returns false.
    fn watch(&mut self, what: Watch, on: bool) -> bool;
    /// The requests this handler has completed so far (cumulative; 0 if it does not count).
    /// The `Adaptive` policy compares how many the thread completes polling and sleeping.
    fn completed(&self) -> u64 {
        0
    }
    /// Whether some of the handler's work arrives only through its wake fds, out of
    /// [`Poll::poll`]'s sight (a tap, host sockets). While such a handler is polled, the thread
    /// also peeks at its epoll set every few microseconds (one `poll` syscall), so work on those
    /// fds ends the spin instead of waiting out the window.
    fn has_fd_sources(&self) -> bool {
        false
    }
}

/// A handler whose engine runs on a file the owner may replace while the guest runs
/// ([`crate::IoThread::swap_file`]).
pub trait FileBacked {
    /// Replaces the file under the handler's I/O engine. Called on the iothread once
    /// [`Handler::drain`] returned 0, with the thread's watches of the handler ended and its
    /// fds unwatched: builds an engine on `file` with the handler's options, drops the old one,
    /// and returns the file it replaced (the thread puts it back if another handler of the
    /// owner fails). On an error the old engine stays.
    /// `turn` is the thread's, for the new engine (its spare Linux AIO contexts:
    /// [`ThreadTurn::aio_pool`]).
    fn replace_file(
        &mut self,
        file: std::fs::File,
        turn: &ThreadTurn,
    ) -> Result<std::fs::File, AttachError>;
}

/// A unit of work owned by an iothread.
pub trait Handler: Send {
    /// The device that owns this handler; `IoThread::detach` takes out all handlers of an owner.
    fn owner(&self) -> u64;
    /// The fds whose signals mean work: the queue's kick eventfd, the engine's completion fds.
    /// They are watched edge-triggered: each signal after the thread last looked wakes it once,
    /// whether or not the fd was read. The handler need not read them (a syscall each); it may,
    /// to drop a signal it knows is stale (one raised while the thread polled and saw the work).
    fn wake_fds(&self) -> Vec<RawFd>;
    /// Takes one turn without sleeping: completes what is done and hands at most `max_batch`
    /// new requests to the kernel in one submission, and says what it needs next. `turn` is the
    /// thread's round, for the handler's engine (`IoEngine::commit`, `IoEngine::reap`).
    fn run(&mut self, max_batch: usize, turn: &ThreadTurn) -> TurnEnd;
    /// Prepares to leave the thread, without blocking: take no new work, hand what is queued to
    /// the kernel and complete what finished. Returns the requests still in flight; the thread
    /// keeps running the handler (on its completion fd) and lets it go only once this returns
    /// 0, because in-flight I/O may still write the owner's memory. `turn` as for
    /// [`Handler::run`].
    fn drain(&mut self, turn: &ThreadTurn) -> usize;
    /// Called once on the iothread when the handler arrives, before [`Handler::wake_fds`]: the
    /// place to create per-thread resources such as the I/O engine (io_uring's SINGLE_ISSUER
    /// ties a ring to the thread that creates it). `turn` is the thread's, for the engine (its
    /// spare Linux AIO contexts: [`ThreadTurn::aio_pool`]).
    fn attach(&mut self, _turn: &ThreadTurn) -> Result<(), AttachError> {
        Ok(())
    }
    /// Called once on the iothread when the handler leaves (drained), with its fds unwatched:
    /// the handler releases what [`Handler::attach`] created, on the thread whose seccomp
    /// filter allows it (an AIO context's `io_destroy`; the receiving vCPU thread's filter does
    /// not), and hands its owner what the owner gets back (e.g. its virtqueue, through a
    /// channel the owner gave it). The thread keeps nothing of it.
    fn detach(self: Box<Self>) {}
    /// The thread saw fd `index` of [`Handler::wake_fds`] signalled (once for any number of
    /// signals since it last looked), before the handler's next [`Handler::run`].
    fn fd_fired(&mut self, _index: usize) {}
    /// Takes new work again after a [`Handler::drain`] that did not end in a detach (a file
    /// swap finished or gave up).
    fn resume(&mut self) {}
    /// The handler's cheap check, if it has one.
    fn poller(&mut self) -> Option<&mut dyn Poll> {
        None
    }
    /// The handler's replaceable file, if it has one.
    fn backing(&mut self) -> Option<&mut dyn FileBacked> {
        None
    }
}
