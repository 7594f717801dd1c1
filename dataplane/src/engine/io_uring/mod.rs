//! The io_uring engine: one ring per queue, created on the dataplane thread that uses it.
//!
//! `submit` fills a slot (a reusable per-request record holding the iovec array) and queues it;
//! `commit` moves queued slots into the SQ, bounded by free SQ entries and CQ room, and makes one
//! `io_uring_enter`; `reap` drains the CQ without a syscall (unless deferred task work or a short
//! transfer needs one). `user_data` is the slot index; tokens stay the caller's.
//!
//! Least privilege: the ring is created disabled (`IORING_SETUP_R_DISABLED`), the file is
//! registered and every SQE must use it (`IOSQE_FIXED_FILE` required), only READV, WRITEV, FSYNC
//! and FALLOCATE are allowed, no further `io_uring_register` call is, and only then is the ring
//! enabled. Completions signal a registered non-blocking eventfd.

mod setup;
mod slot;

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use ::io_uring::register::Restriction;
use ::io_uring::{squeue, IoUring};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::info::IoUringInfo;
use super::own_signal::OwnSignal;
use super::{
    Completion, EngineError, EngineKind, EngineOptions, IoEngine, IoRequest, SubmitError,
    ThreadTurn,
};
pub use setup::probe;
use setup::SetupFlags;
use slot::{Slot, Step, Target};

/// How long `Drop` waits for requests the kernel still holds.
const DROP_WAIT: Duration = Duration::from_secs(5);
/// Rounds of drain-and-resubmit one `reap` does for short transfers.
const REAP_ROUNDS: usize = 4;

/// An io_uring engine on one file.
pub struct IoUringEngine {
    /// Dropped first (fields drop in order), after `Drop::drop` has waited for the kernel.
    ring: IoUring,
    eventfd: EventFd,
    /// Kept open for the ring's lifetime (the registered file and `Target::Fd` refer to it).
    _file: File,
    target: Target,
    flags: SetupFlags,
    restricted: bool,
    cq_entries: usize,
    /// The most requests in flight (`capacity()` counts down from it); also the slot count.
    depth: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Filled by `submit`, waiting for `commit`.
    pending: VecDeque<u32>,
    /// Short transfers waiting to be resubmitted (by `reap` at once, or `commit`).
    retry: VecDeque<u32>,
    /// Completions decided without the kernel (invalid ranges).
    local_done: Vec<Completion>,
    /// SQEs pushed whose CQE has not been reaped.
    in_kernel: usize,
    /// Resubmissions of short transfers and retries, for tests and statistics.
    resubmits: u64,
    /// The caller polls the CQ: the kernel does not signal the eventfd (CQ flag
    /// `IORING_CQ_EVENTFD_DISABLED`), and neither do local completions.
    eventfd_off: bool,
    /// `complete_locally` signalled the eventfd; the next `reap` clears it.
    own_signal: OwnSignal,
}

impl std::fmt::Debug for IoUringEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoUringEngine")
            .field("flags", &self.flags)
            .field("target", &self.target)
            .field("restricted", &self.restricted)
            .field("depth", &self.depth)
            .field("in_kernel", &self.in_kernel)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

fn setup_err(what: &'static str) -> impl FnOnce(io::Error) -> EngineError {
    move |source| EngineError::Setup {
        engine: EngineKind::IoUring,
        what,
        source,
    }
}

impl IoUringEngine {
    /// Creates the ring on the calling thread (which must be the thread that uses it), registers
    /// `file` and an eventfd, applies the opcode restrictions and enables the ring.
    pub fn new(file: File, opts: &EngineOptions) -> Result<Self, EngineError> {
        let entries = setup::sq_entries(opts.depth);
        let requested = SetupFlags::requested(opts.io_uring);
        let (ring, flags) = setup::with_fallback(requested, |f| setup::build_ring(entries, f))
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EACCES) => setup::refused(e),
                _ => setup_err("io_uring_setup")(e),
            })?;
        let eventfd = EventFd::new(EFD_NONBLOCK).map_err(setup_err("eventfd"))?;
        let submitter = ring.submitter();
        submitter
            .register_eventfd(eventfd.as_raw_fd())
            .map_err(setup_err("registering the eventfd"))?;
        let target = match submitter.register_files(&[file.as_raw_fd()]) {
            Ok(()) => Target::Fixed,
            Err(e) => {
                log::info!("io_uring: cannot register the file ({e}); using its descriptor");
                Target::Fd(file.as_raw_fd())
            }
        };
        if opts.io_uring.max_workers > 0 {
            // Per task: it bounds the workers of every ring this (the iothread's) thread uses.
            let max = opts.io_uring.max_workers;
            if let Err(e) = submitter.register_iowq_max_workers(&mut [max, max]) {
                log::info!("io_uring: cannot cap io-wq workers at {max} ({e}); kernel default");
            }
        }
        let mut restricted = false;
        if flags.r_disabled {
            let mut res: Vec<Restriction> = setup::OPCODES
                .iter()
                .map(|(code, _)| Restriction::sqe_op(*code))
                .collect();
            if target == Target::Fixed {
                res.push(Restriction::sqe_flags_required(
                    squeue::Flags::FIXED_FILE.bits(),
                ));
            }
            match submitter.register_restrictions(&mut res) {
                Ok(()) => restricted = true,
                Err(e) => log::info!("io_uring: opcode restrictions unavailable ({e}); skipped"),
            }
            submitter
                .register_enable_rings()
                .map_err(setup_err("enabling the ring"))?;
        } else {
            log::info!("io_uring: ring created enabled; opcode restrictions skipped");
        }
        let depth = (opts.depth.max(1) as usize).min(entries as usize);
        let cq_entries = ring.params().cq_entries() as usize;
        let engine = Self {
            ring,
            eventfd,
            _file: file,
            target,
            flags,
            restricted,
            cq_entries,
            depth,
            slots: (0..depth).map(|_| Slot::new()).collect(),
            free: (0..depth as u32).rev().collect(),
            pending: VecDeque::with_capacity(depth),
            retry: VecDeque::with_capacity(depth),
            local_done: Vec::with_capacity(depth),
            in_kernel: 0,
            resubmits: 0,
            eventfd_off: false,
            own_signal: OwnSignal::default(),
        };
        log::debug!("{:?}", engine.info());
        Ok(engine)
    }

    /// Checks, before boot, that the host can create rings with the opcodes the engine uses.
    pub fn probe() -> Result<(), EngineError> {
        probe()
    }

    /// Moves queued slots into the SQ: retries first, then (with `new`) pending requests, while
    /// SQ entries and CQ room last. Returns how many pending requests moved.
    fn push_queued(&mut self, new: bool) -> usize {
        let target = self.target;
        let mut budget = self.cq_entries.saturating_sub(self.in_kernel);
        let mut sq = self.ring.submission();
        budget = budget.min(sq.capacity() - sq.len());
        let mut moved = 0;
        while budget > 0 {
            let (idx, is_retry) = match self.retry.pop_front() {
                Some(i) => (i, true),
                None if new => match self.pending.pop_front() {
                    Some(i) => (i, false),
                    None => break,
                },
                None => break,
            };
            let entry = self.slots[idx as usize].entry(u64::from(idx), target);
            // SAFETY: the SQE points at this slot's iovecs and the caller's buffers; the slot is
            // off the free list, untouched until its CQE is reaped (`Drop` waits for in-kernel
            // ones), and the buffers outlive the request (module doc of `engine`).
            if unsafe { sq.push(&entry) }.is_err() {
                if is_retry {
                    self.retry.push_front(idx);
                } else {
                    self.pending.push_front(idx);
                }
                break;
            }
            self.in_kernel += 1;
            budget -= 1;
            if is_retry {
                self.resubmits += 1;
            } else {
                moved += 1;
            }
        }
        sq.sync();
        moved
    }

    /// One `io_uring_enter` for what is in the SQ. On failure the SQEs stay in the ring and go
    /// with the next enter (`reap` and `commit` retry), so nothing is lost.
    fn enter(&mut self) {
        if let Err(e) = self.ring.submit() {
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::EINTR) => {
                    log::debug!("io_uring: submit deferred: {e}")
                }
                _ => log::warn!("io_uring: submit failed: {e}"),
            }
        }
    }

    /// SQEs pushed but not yet taken by the kernel (after a failed enter).
    fn sq_backlog(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Moves every CQE into `out` (or back to `retry` for short transfers); no syscall.
    fn drain(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        let mut cq = self.ring.completion();
        loop {
            cq.sync();
            if cq.is_empty() {
                break;
            }
            for cqe in &mut cq {
                self.in_kernel = self.in_kernel.saturating_sub(1);
                let idx = cqe.user_data();
                let Some(slot) = usize::try_from(idx)
                    .ok()
                    .and_then(|i| self.slots.get_mut(i))
                else {
                    log::error!("io_uring: completion for unknown slot {idx}");
                    continue;
                };
                match slot.on_result(cqe.result()) {
                    Step::Done(result) => {
                        out.push(Completion {
                            token: slot.token(),
                            result,
                        });
                        self.free.push(idx as u32);
                        n += 1;
                    }
                    Step::Again => self.retry.push_back(idx as u32),
                }
            }
        }
        n
    }

    /// Runs deferred task work (COOP_TASKRUN + TASKRUN_FLAG) or flushes an overflowed CQ, with an
    /// enter carrying GETEVENTS, when the SQ flags ask for it.
    fn run_task_work(&mut self) {
        let sq = self.ring.submission();
        let needed = (self.flags.taskrun_flag && sq.taskrun()) || sq.cq_overflow();
        drop(sq);
        if needed {
            if let Err(e) = self.ring.submit_and_wait(0) {
                log::debug!("io_uring: running task work: {e}");
            }
        }
    }

    /// The flags in force and the extras ([`IoEngine::info`]).
    fn describe(flags: SetupFlags, target: Target, restricted: bool) -> IoUringInfo {
        IoUringInfo {
            flags: flags.in_force().into_iter().map(String::from).collect(),
            registered_file: target == Target::Fixed,
            restricted,
        }
    }

    /// Resubmissions so far (short transfers and retries).
    pub fn resubmits(&self) -> u64 {
        self.resubmits
    }

    fn complete_locally(&mut self, c: Completion) {
        self.local_done.push(c);
        // Wake a thread sleeping on the completion fd: no CQE will. A polling caller sees
        // `local_done` in `has_completions`.
        if self.eventfd_off {
            return;
        }
        if let Err(e) = self.own_signal.raise(&self.eventfd) {
            log::warn!("io_uring: signalling the completion fd: {e}");
        }
    }
}

impl IoEngine for IoUringEngine {
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
        if self.in_flight() >= self.depth {
            return Err(SubmitError::Full);
        }
        let Some(idx) = self.free.pop() else {
            return Err(SubmitError::Full);
        };
        let token = request.token;
        match self.slots[idx as usize].fill(request) {
            Ok(()) => self.pending.push_back(idx),
            Err(result) => {
                self.free.push(idx);
                self.complete_locally(Completion { token, result });
            }
        }
        Ok(())
    }

    fn commit(&mut self, _turn: &ThreadTurn) -> usize {
        if self.pending.is_empty() && self.retry.is_empty() && self.sq_backlog() == 0 {
            return 0;
        }
        let moved = self.push_queued(true);
        self.enter();
        moved
    }

    fn reap(&mut self, out: &mut Vec<Completion>, _turn: &ThreadTurn) -> usize {
        // Local completions are handed out below: their signal goes (`OwnSignal`).
        self.own_signal.clear(&self.eventfd);
        // Task work first: it posts CQEs.
        self.run_task_work();
        let mut n = self.local_done.len();
        out.append(&mut self.local_done);
        for _ in 0..REAP_ROUNDS {
            n += self.drain(out);
            if self.retry.is_empty() && self.sq_backlog() == 0 {
                break;
            }
            // Short transfers go back to the kernel now: nothing else would wake us for them.
            self.push_queued(false);
            self.enter();
        }
        n
    }

    fn completion_fds(&self) -> Vec<RawFd> {
        vec![self.eventfd.as_raw_fd()]
    }

    fn capacity(&self) -> usize {
        self.depth.saturating_sub(self.in_flight())
    }

    fn in_flight(&self) -> usize {
        (self.slots.len() - self.free.len()) + self.local_done.len()
    }

    fn poll_begin(&mut self) {
        if !self.eventfd_off {
            self.ring.completion().disable_eventfd();
            self.eventfd_off = true;
        }
    }

    fn poll_end(&mut self) {
        if self.eventfd_off {
            self.ring.completion().enable_eventfd();
            self.eventfd_off = false;
        }
    }

    fn unsubmitted(&self) -> usize {
        // SAFETY: as in `has_completions`: no other handle of the SQ exists while `&self` is
        // held.
        let sq_backlog = unsafe { self.ring.submission_shared().len() };
        self.pending.len() + self.retry.len() + sq_backlog
    }

    fn has_completions(&self) -> bool {
        if !self.local_done.is_empty() || !self.retry.is_empty() {
            return true;
        }
        // SAFETY: `completion_shared`/`submission_shared` need that no other queue handle of
        // this ring exists: every handle is created and dropped inside one `&mut self` method,
        // and `&self` here excludes those running.
        let (cq_ready, sq_flags) = unsafe {
            let sq = self.ring.submission_shared();
            (
                !self.ring.completion_shared().is_empty(),
                (self.flags.taskrun_flag && sq.taskrun()) || sq.cq_overflow(),
            )
        };
        cq_ready || sq_flags
    }

    fn kind(&self) -> EngineKind {
        EngineKind::IoUring
    }

    fn info(&self) -> super::EngineInfo {
        super::EngineInfo::IoUring(Self::describe(self.flags, self.target, self.restricted))
    }
}

impl Drop for IoUringEngine {
    fn drop(&mut self) {
        // The kernel may still write into buffers and read our iovec arrays; wait for it.
        let deadline = Instant::now() + DROP_WAIT;
        let mut sink = Vec::new();
        loop {
            self.retry.clear();
            self.drain(&mut sink);
            sink.clear();
            if self.in_kernel == 0 {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            // Also runs task work on the way back to user space.
            if self.sq_backlog() > 0 {
                self.enter();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        log::error!(
            "io_uring: {} requests still in the kernel after {:?}; leaking their slots",
            self.in_kernel,
            DROP_WAIT
        );
        std::mem::forget(std::mem::take(&mut self.slots));
    }
}

#[cfg(test)]
mod tests;
