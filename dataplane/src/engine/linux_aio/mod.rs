//! The Linux native AIO engine: `submit` queues a request in a slot of its own, `commit` hands
//! every queued iocb to the kernel in one `io_submit`, and `reap` reads completions straight from
//! the ring `io_setup` maps into the process (falling back to `io_getevents` when the ring's
//! layout is not the one we know). Every iocb carries `IOCB_FLAG_RESFD`, so an eventfd wakes the
//! dataplane thread. The context's system calls are `vmm_sys_util::aio`'s; the ring reader is
//! ours (`abi.rs` says why).
//!
//! Linux AIO is only asynchronous with O_DIRECT; on a buffered file `io_submit` performs the I/O
//! before it returns (we warn once). There is no AIO opcode for discard and write-zeroes: those
//! run synchronously (fallocate) inside `commit`, and so does a flush on a file system that
//! refuses `IOCB_CMD_FDSYNC`; all of them complete through `reap` like the others.
//!
//! Slots (iocb + iovec array) live in a fixed boxed slice, reused from request to request, so the
//! kernel never sees a dangling iocb and the steady path does not allocate.

mod abi;
mod pool;
mod slot;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::unix::io::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::EventFd;

use self::abi::{AioContext, IoEvent, Iocb};
use self::slot::{Kind, Slot};
use super::own_signal::OwnSignal;
use super::{
    advance, run_blocking, zero_tail, Completion, EngineError, EngineKind, EngineOptions, IoEngine,
    IoOp, IoRequest, SubmitError, ThreadTurn,
};
pub use pool::{AioContextPool, ExitSwitch};

/// The largest AIO context an engine asks for (and so the most requests it keeps in flight).
pub const MAX_EVENTS: u32 = 1024;

/// How long `Drop` waits for requests still in the kernel before `io_destroy`.
const DROP_TIMEOUT: Duration = Duration::from_secs(5);

/// Size of the context `probe` creates.
const PROBE_EVENTS: u32 = 8;

/// Checks that the host can create an AIO context: a pool that holds a spare has one, else a
/// small one is created (io_setup) and given to `pool`, which keeps it for a later engine (or
/// leaves it to the process exit: [`AioContextPool::left_to_process_exit`]) instead of
/// destroying it: `io_destroy` waits for an RCU grace period (docs/performance.md) on the thread
/// that checks (the main thread before boot, an iothread opening an engine). A failure is not
/// remembered (it may be transient: AIO events exhausted for a while).
pub fn probe(pool: &AioContextPool) -> Result<(), EngineError> {
    if pool.has_spare() {
        return Ok(());
    }
    let mut ctx = pool
        .context(PROBE_EVENTS)
        .map_err(|e| setup_error(e, PROBE_EVENTS))?;
    ctx.drained();
    pool.give_back(ctx);
    Ok(())
}

/// Turns an io_setup failure into an error that says why.
fn setup_error(err: std::io::Error, nr: u32) -> EngineError {
    let engine = EngineKind::LinuxAio;
    match err.raw_os_error() {
        Some(libc::ENOSYS) => EngineError::Refused {
            engine,
            call: "io_setup".into(),
            source: err,
            hint: " (kernel without CONFIG_AIO, or a seccomp filter blocks it)".into(),
        },
        Some(libc::EAGAIN) => EngineError::Refused {
            engine,
            call: format!("io_setup({nr})"),
            source: err,
            hint: format!(
                ": AIO events exhausted ({}); raise fs.aio-max-nr",
                aio_usage()
            ),
        },
        _ => EngineError::Setup {
            engine,
            what: "io_setup",
            source: err,
        },
    }
}

fn aio_usage() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "?".into())
    };
    format!(
        "/proc/sys/fs/aio-nr is {} of aio-max-nr {}",
        read("/proc/sys/fs/aio-nr"),
        read("/proc/sys/fs/aio-max-nr")
    )
}

/// A short name for the file system holding `fd`, for logs.
fn fs_name(fd: RawFd) -> String {
    // SAFETY: `statfs` is plain old data; all zeros is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one `statfs` into the live `st`.
    if unsafe { libc::fstatfs(fd, &mut st) } < 0 {
        return "this file system".into();
    }
    let name = match st.f_type as u64 {
        0x0102_1994 => "tmpfs",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x794c_7630 => "overlayfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        0x2fc1_2fc1 => "zfs",
        t => return format!("file system 0x{t:x}"),
    };
    name.into()
}

/// Linux native AIO on one file, owned by one dataplane thread.
pub struct LinuxAioEngine {
    /// Given back to `pool` in `Drop::drop` (kept, or io_destroy there), before the other
    /// fields drop.
    ctx: ManuallyDrop<AioContext>,
    /// Where the context goes when the engine is dropped.
    pool: AioContextPool,
    file: File,
    eventfd: EventFd,
    /// `limit` slots, never reallocated: the kernel may hold pointers into them.
    slots: Box<[Slot]>,
    free: Vec<u32>,
    /// Slots waiting for io_submit, in order (resubmitted remainders go first).
    pending: VecDeque<u32>,
    /// Slots in the kernel.
    submitted: usize,
    /// Completions produced on this thread (synchronous operations, submission errors).
    done: Vec<Completion>,
    /// `done` gained entries the completion fd does not announce yet.
    signal: bool,
    /// This engine wrote the completion fd itself since the last reap; `reap` clears it.
    own_signal: OwnSignal,
    /// Between `poll_begin` and `poll_end`: the thread watches the mapped completion ring and
    /// `done`, so the completion fd is neither read nor written (it is cleared in `poll_end`,
    /// before the thread may sleep).
    polling: bool,
    /// Since `poll_begin`, a request was in the kernel, whose completion may have signalled the
    /// fd: `poll_end` clears it only then (a read is a syscall per polling period, and `Auto`'s
    /// engine for small turns is idle through most of them).
    polled_in_flight: bool,
    /// Scratch: the iocb pointer array for io_submit.
    ptrs: Vec<*mut Iocb>,
    /// Scratch: events read from the ring or io_getevents.
    events: Box<[IoEvent]>,
    /// Scratch: short transfers to resubmit, found while reaping.
    retry: Vec<u32>,
    limit: usize,
    direct: bool,
    /// Reap from the mapped ring (else io_getevents).
    use_ring: bool,
    /// The file system refused IOCB_CMD_FDSYNC: flushes run fdatasync in `commit`.
    fdsync_refused: bool,
    /// Completions do not signal the eventfd ([`LinuxAioEngine::for_buffered_batches`]).
    unsignalled: bool,
    #[cfg(test)]
    hooks: tests::Hooks,
}

// SAFETY: the raw pointers an engine holds are (a) iovec bases into guest buffers, covered by the
// submitter's guarantee that they outlive the request whichever thread runs it (see `IoVec`), and
// (b) scratch iocb pointers into the engine's own boxed slots, used only during io_submit by the
// thread that owns the engine. An AIO context is not tied to the thread that created it.
unsafe impl Send for LinuxAioEngine {}

impl std::fmt::Debug for LinuxAioEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxAioEngine")
            .field("ctx", &self.ctx)
            .field("limit", &self.limit)
            .field("pending", &self.pending.len())
            .field("submitted", &self.submitted)
            .field("done", &self.done.len())
            .field("use_ring", &self.use_ring)
            .field("fdsync_refused", &self.fdsync_refused)
            .finish_non_exhaustive()
    }
}

impl LinuxAioEngine {
    /// An engine on `file` with an AIO context of min(`opts.depth`, [`MAX_EVENTS`]) events,
    /// taken from `pool` (its thread's spares) and given back to it when the engine is dropped.
    pub fn new(
        file: File,
        opts: &EngineOptions,
        pool: &AioContextPool,
    ) -> Result<Self, EngineError> {
        if !opts.direct {
            log::warn!(
                "LinuxAio without O_DIRECT submits synchronously inside io_submit; set \"direct\": true"
            );
        }
        Self::build(file, opts.depth, opts.direct, pool)
    }

    /// An engine for batches of buffered writes (the `Auto` engine's, on a file system that
    /// refuses RWF_NOWAIT writes): `io_submit` runs them before it returns, so the caller
    /// reaps right after `commit` and never sleeps on the completion fd: completions do not
    /// signal it, so it is never read or written.
    pub fn for_buffered_batches(
        file: File,
        depth: u32,
        pool: &AioContextPool,
    ) -> Result<Self, EngineError> {
        let mut engine = Self::build(file, depth, false, pool)?;
        engine.unsignalled = true;
        Ok(engine)
    }

    fn build(
        file: File,
        depth: u32,
        direct: bool,
        pool: &AioContextPool,
    ) -> Result<Self, EngineError> {
        let nr = depth.clamp(1, MAX_EVENTS);
        let ctx = pool.context(nr).map_err(|e| setup_error(e, nr))?;
        let eventfd = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC).map_err(|source| {
            EngineError::Setup {
                engine: EngineKind::LinuxAio,
                what: "eventfd",
                source,
            }
        })?;
        let limit = nr as usize;
        if !ctx.ring_ok() {
            log::info!(
                "LinuxAio: unknown completion ring layout (magic 0x{:x}); reaping with io_getevents",
                ctx.header().magic
            );
        }
        Ok(Self {
            use_ring: ctx.ring_ok(),
            ctx: ManuallyDrop::new(ctx),
            pool: pool.clone(),
            file,
            eventfd,
            slots: (0..limit).map(|_| Slot::idle()).collect(),
            free: (0..nr).rev().collect(),
            pending: VecDeque::with_capacity(limit),
            submitted: 0,
            done: Vec::with_capacity(limit),
            signal: false,
            own_signal: OwnSignal::default(),
            polling: false,
            polled_in_flight: false,
            ptrs: Vec::with_capacity(limit),
            events: vec![IoEvent::default(); limit].into_boxed_slice(),
            retry: Vec::with_capacity(limit),
            limit,
            direct,
            fdsync_refused: false,
            unsignalled: false,
            #[cfg(test)]
            hooks: tests::Hooks::default(),
        })
    }

    fn is_synchronous(&self, idx: u32) -> bool {
        match self.slots[idx as usize].kind {
            Kind::Blocking(_) | Kind::Immediate(_) => true,
            Kind::Flush => self.fdsync_refused,
            Kind::Read | Kind::Write | Kind::Idle => false,
        }
    }

    /// Runs the pending operations that have no AIO form; returns how many.
    fn run_synchronous(&mut self) -> usize {
        if !self.pending.iter().any(|&i| self.is_synchronous(i)) {
            return 0;
        }
        let mut pending = std::mem::take(&mut self.pending);
        let before = pending.len();
        pending.retain(|&i| {
            if self.is_synchronous(i) {
                self.run_now(i);
                false
            } else {
                true
            }
        });
        let n = before - pending.len();
        self.pending = pending;
        n
    }

    /// Runs slot `idx` on this thread and queues its completion for `reap`.
    fn run_now(&mut self, idx: u32) {
        let fd = self.file.as_raw_fd();
        let result = match std::mem::replace(&mut self.slots[idx as usize].kind, Kind::Idle) {
            Kind::Blocking(op) => run_blocking(fd, &op),
            Kind::Immediate(r) => r,
            Kind::Flush => run_blocking(fd, &IoOp::Flush),
            Kind::Read | Kind::Write | Kind::Idle => -i64::from(libc::EIO),
        };
        self.complete_later(idx, result);
    }

    fn complete_later(&mut self, idx: u32, result: i64) {
        let token = self.release(idx);
        self.done.push(Completion { token, result });
        self.signal = true;
    }

    /// Frees slot `idx`; returns its token.
    fn release(&mut self, idx: u32) -> u64 {
        let slot = &mut self.slots[idx as usize];
        slot.kind = Kind::Idle;
        self.free.push(idx);
        slot.token
    }

    fn refuse_fdsync(&mut self) {
        if !self.fdsync_refused {
            self.fdsync_refused = true;
            log::warn!(
                "FDSYNC not supported by {}; flushing synchronously",
                fs_name(self.file.as_raw_fd())
            );
        }
    }

    /// One io_submit of the first `n` pending slots; returns how many left the pending list
    /// (submitted, or completed with the first iocb's error).
    fn submit_front(&mut self, n: usize) -> usize {
        let n = n.min(self.pending.len());
        if n == 0 {
            return 0;
        }
        let mut ptrs = std::mem::take(&mut self.ptrs);
        ptrs.clear();
        for &idx in self.pending.iter().take(n) {
            ptrs.push(&mut self.slots[idx as usize].iocb as *mut Iocb);
        }
        let r = self.io_submit(&ptrs);
        self.ptrs = ptrs;
        match r {
            Ok(k) => {
                let k = k.min(n);
                self.pending.drain(..k);
                self.submitted += k;
                self.polled_in_flight |= self.polling && k > 0;
                k
            }
            // The context is full for now: everything stays pending for the next commit.
            Err(libc::EAGAIN) => 0,
            Err(e) => {
                let Some(idx) = self.pending.pop_front() else {
                    return 0;
                };
                if e == libc::EINVAL && matches!(self.slots[idx as usize].kind, Kind::Flush) {
                    self.refuse_fdsync();
                    self.run_now(idx);
                } else {
                    self.complete_later(idx, -i64::from(e));
                }
                1
            }
        }
    }

    fn io_submit(&mut self, ptrs: &[*mut Iocb]) -> Result<usize, i32> {
        #[allow(unused_mut)]
        let mut n = ptrs.len();
        #[cfg(test)]
        {
            self.hooks.submit_calls += 1;
            let first_is_flush = self
                .pending
                .front()
                .is_some_and(|&i| matches!(self.slots[i as usize].kind, Kind::Flush));
            if self.hooks.refuse_fdsync && first_is_flush {
                return Err(libc::EINVAL);
            }
            match self.hooks.script.pop_front() {
                Some(tests::Scripted::Fail(e)) => return Err(e),
                Some(tests::Scripted::Limit(k)) => n = n.min(k),
                None => {}
            }
        }
        // Each slot's iovecs (`iov`) stay untouched until the slot is released after completion;
        // the submitter keeps the buffers alive until then (module contract of `engine`).
        let pending = &ptrs[..n];
        // SAFETY: each pointer is the iocb of a different pending slot in `self.slots` (never
        // reallocated), untouched by anything else during the call; buffers live (above).
        unsafe { self.ctx.submit(pending) }
    }

    /// Whether the completion fd may be left alone: completions do not signal it, or the
    /// thread is polling and completions can be seen in the mapped ring without it.
    fn quiet_fd(&self) -> bool {
        self.unsignalled || (self.polling && self.use_ring && self.ctx.ring_ok())
    }

    /// Moves kernel completions into `out`, queueing short transfers in `retry`.
    fn reap_kernel(&mut self, out: &mut Vec<Completion>) {
        let mut events = std::mem::take(&mut self.events);
        while self.submitted > 0 {
            let n = if self.use_ring {
                self.ctx.ring_take(&mut events)
            } else {
                match self.ctx.getevents(0, &mut events, Duration::ZERO) {
                    Ok(n) => n,
                    Err(e) => {
                        if e != libc::EINTR {
                            log::error!(
                                "LinuxAio: io_getevents: {}",
                                std::io::Error::from_raw_os_error(e)
                            );
                        }
                        0
                    }
                }
            };
            for ev in &events[..n] {
                self.on_event(*ev, out);
            }
            if n < events.len() {
                break;
            }
        }
        self.events = events;
    }

    fn on_event(&mut self, ev: IoEvent, out: &mut Vec<Completion>) {
        self.submitted = self.submitted.saturating_sub(1);
        let Some(idx) = u32::try_from(ev.data)
            .ok()
            .filter(|&i| (i as usize) < self.slots.len())
        else {
            log::error!("LinuxAio: completion for unknown slot {}", ev.data);
            return;
        };
        let slot = &mut self.slots[idx as usize];
        let result = match slot.kind {
            Kind::Flush => ev.res.min(0),
            Kind::Read | Kind::Write if ev.res < 0 => ev.res,
            Kind::Read if ev.res == 0 => {
                // End of file: the rest reads as zeros.
                zero_tail(&slot.iov[slot.first..]);
                slot.total as i64
            }
            Kind::Write if ev.res == 0 => -i64::from(libc::ENOSPC),
            Kind::Read | Kind::Write => {
                let n = ev.res as usize;
                slot.done = slot.done.saturating_add(n);
                if slot.done >= slot.total {
                    slot.total as i64
                } else {
                    advance(&mut slot.iov, &mut slot.first, n);
                    slot.arm();
                    self.retry.push(idx);
                    return;
                }
            }
            Kind::Idle | Kind::Blocking(_) | Kind::Immediate(_) => {
                log::error!("LinuxAio: completion for slot {idx}, which is not in the kernel");
                return;
            }
        };
        let token = self.release(idx);
        out.push(Completion { token, result });
    }

    /// Resubmits the remainders of short transfers found by the last reap, ahead of the
    /// pending list, in one io_submit.
    fn resubmit_retries(&mut self) {
        if self.retry.is_empty() {
            return;
        }
        let n = self.retry.len();
        for &idx in self.retry.iter().rev() {
            self.pending.push_front(idx);
        }
        self.retry.clear();
        self.submit_front(n);
    }
}

impl IoEngine for LinuxAioEngine {
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
        if self.capacity() == 0 {
            return Err(SubmitError::Full);
        }
        let Some(idx) = self.free.pop() else {
            return Err(SubmitError::Full);
        };
        let fd = self.file.as_raw_fd();
        let resfd = (!self.unsignalled).then(|| self.eventfd.as_raw_fd());
        self.slots[idx as usize].load(request, idx, fd, resfd);
        self.pending.push_back(idx);
        Ok(())
    }

    fn commit(&mut self, _turn: &ThreadTurn) -> usize {
        let mut n = self.run_synchronous();
        n += self.submit_front(self.pending.len());
        if self.signal && !self.quiet_fd() {
            self.signal = false;
            if let Err(e) = self.own_signal.raise(&self.eventfd) {
                log::error!("LinuxAio: completion eventfd: {e}");
            }
        }
        n
    }

    fn reap(&mut self, out: &mut Vec<Completion>, _turn: &ThreadTurn) -> usize {
        let before = out.len();
        // `done` is handed out below: its signal goes (`OwnSignal`).
        self.own_signal.clear(&self.eventfd);
        self.reap_kernel(out);
        self.resubmit_retries();
        out.append(&mut self.done);
        self.signal = false;
        out.len() - before
    }

    fn completion_fds(&self) -> Vec<RawFd> {
        vec![self.eventfd.as_raw_fd()]
    }

    fn capacity(&self) -> usize {
        self.limit.saturating_sub(self.in_flight())
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.submitted + self.done.len() + self.retry.len()
    }

    fn unsubmitted(&self) -> usize {
        self.pending.len() + self.retry.len()
    }

    fn poll_begin(&mut self) {
        self.polling = true;
        self.polled_in_flight = self.submitted > 0;
    }

    fn poll_end(&mut self) {
        if self.quiet_fd() && (self.polled_in_flight || self.submitted > 0) {
            // Signals of completions seen (or about to be seen) in the ring while polling: left
            // set, they would wake the thread once more for work it has done (epoll reports an
            // edge-triggered fd only if it is still readable). The caller checks
            // `has_completions` next, and later completions signal again.
            let _ = self.eventfd.read();
        }
        self.polling = false;
    }

    fn has_completions(&self) -> bool {
        if !self.done.is_empty() {
            return true;
        }
        if self.ctx.ring_ok() {
            self.ctx.ring_pending()
        } else {
            self.submitted > 0
        }
    }

    fn kind(&self) -> EngineKind {
        EngineKind::LinuxAio
    }

    fn info(&self) -> super::EngineInfo {
        super::EngineInfo::LinuxAio(super::info::LinuxAioInfo {
            depth: u32::try_from(self.limit).unwrap_or(MAX_EVENTS),
            mapped_ring: self.use_ring,
            direct: self.direct,
            fdsync: !self.fdsync_refused,
        })
    }
}

impl Drop for LinuxAioEngine {
    fn drop(&mut self) {
        // The kernel may still write into buffers and report on iocbs: wait (bounded) before
        // the context is destroyed and the slots freed.
        let deadline = Instant::now() + DROP_TIMEOUT;
        let mut events = [IoEvent::default(); 64];
        while self.submitted > 0 {
            let now = Instant::now();
            if now >= deadline {
                log::error!(
                    "LinuxAio: {} requests still in the kernel after {DROP_TIMEOUT:?}; io_destroy waits for them",
                    self.submitted
                );
                break;
            }
            match self.ctx.getevents(1, &mut events, deadline - now) {
                Ok(n) => self.submitted = self.submitted.saturating_sub(n),
                Err(libc::EINTR) => {}
                Err(e) => {
                    log::error!(
                        "LinuxAio: io_getevents at drop: {}",
                        std::io::Error::from_raw_os_error(e)
                    );
                    break;
                }
            }
        }
        if self.submitted == 0 {
            // Nothing of ours can complete into it any more: the thread may keep it for its
            // next engine (a device reset's re-initialisation) instead of destroying it.
            self.ctx.drained();
        }
        // SAFETY: `ctx` is taken once, here, and never used again (the engine is being dropped).
        let ctx = unsafe { ManuallyDrop::take(&mut self.ctx) };
        self.pool.give_back(ctx);
    }
}
