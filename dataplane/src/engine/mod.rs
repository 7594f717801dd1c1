//! The I/O engine abstraction: queue requests (`submit`), hand them to the kernel in one call per
//! round (`commit`), collect completions without blocking (`reap`). Back-pressure comes from
//! `capacity`: a caller that finds the engine full leaves the request where it came from.
//!
//! Buffers are raw host pointers into guest memory ([`IoVec`]); the caller guarantees they stay
//! valid until the request's completion has been reaped.
//!
//! Completion semantics every engine keeps (the conformance suite checks them):
//! - a read completes with its full length or an error: a short read is resubmitted for the rest,
//!   and end of file fills the rest with zeros;
//! - a write completes with its full length or an error (a short write is resubmitted; no
//!   progress at all is `-ENOSPC`);
//! - results are the byte count (0 for flush) or a negative errno; `-EOPNOTSUPP` means the file
//!   cannot do the operation (discard, write-zeroes);
//! - `reap` also clears the completion fd's readiness, without losing a wake-up for completions
//!   that arrive afterwards;
//! - every submitted request completes exactly once, also when the engine is dropped after
//!   `in_flight` reached 0.

use std::fs::File;
use std::os::unix::io::RawFd;

pub use crate::iothread::ThreadTurn;
pub use info::EngineInfo;
pub use linux_aio::AioContextPool;

pub mod auto;
#[cfg(test)]
pub(crate) mod conformance;
pub mod fault;
pub mod info;
pub mod io_uring;
pub mod linux_aio;
pub mod null;
mod own_signal;
pub mod sync;

/// Which engine, spelt as the configuration spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum EngineKind {
    /// Blocking preadv/pwritev/fdatasync on the dataplane thread.
    Sync,
    /// io_uring, one ring per queue, created on the iothread.
    IoUring,
    /// Linux native AIO (io_submit), asynchronous only with O_DIRECT.
    LinuxAio,
    /// Completes at once without touching the file (reads return zeros).
    Null,
    /// Reads and writes inline with RWF_NOWAIT where they will not block, the rest on an
    /// asynchronous engine (io_uring, else Linux AIO for O_DIRECT files, else Sync).
    Auto,
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            EngineKind::Sync => "Sync",
            EngineKind::IoUring => "IoUring",
            EngineKind::LinuxAio => "LinuxAio",
            EngineKind::Null => "Null",
            EngineKind::Auto => "Auto",
        };
        f.write_str(name)
    }
}

/// io_uring set-up flags to ask for; the engine falls back flag by flag when the kernel refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoUringFlags {
    /// IORING_SETUP_SINGLE_ISSUER.
    pub single_issuer: bool,
    /// IORING_SETUP_COOP_TASKRUN.
    pub coop_taskrun: bool,
    /// IORING_SETUP_TASKRUN_FLAG (needs COOP_TASKRUN).
    pub taskrun_flag: bool,
    /// The most io-wq worker threads the kernel may start for the iothread (each kind, bounded
    /// and unbounded; IORING_REGISTER_IOWQ_MAX_WORKERS); 0 leaves the kernel's default (up to
    /// 4 per CPU for file I/O).
    pub max_workers: u32,
}

/// The default cap on io-wq workers per iothread: a guest whose requests block (page-cache
/// misses, a file system without non-blocking I/O) may make the host start this many kernel
/// threads for its iothread, not 4 per host CPU.
pub const DEFAULT_IOWQ_MAX_WORKERS: u32 = 16;

impl Default for IoUringFlags {
    fn default() -> Self {
        Self {
            single_issuer: true,
            coop_taskrun: true,
            taskrun_flag: true,
            max_workers: DEFAULT_IOWQ_MAX_WORKERS,
        }
    }
}

/// How to build an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Which engine.
    pub kind: EngineKind,
    /// Requests in flight at most (the virtqueue size).
    pub depth: u32,
    /// io_uring flags (ignored by other engines).
    pub io_uring: IoUringFlags,
    /// The file was opened with O_DIRECT.
    pub direct: bool,
    /// Fail chosen requests instead of running them (testing aid, see [`fault`]).
    pub fault: Option<fault::FaultPlan>,
}

/// Errors creating an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The host cannot provide this engine.
    #[error("{engine} is not available on this host: {reason}")]
    Unavailable {
        /// The engine.
        engine: EngineKind,
        /// Why.
        reason: String,
    },
    /// The host refused the engine's set-up call (no kernel support, a sysctl, seccomp, the
    /// AIO events used up): the OS error, and what it means here.
    #[error("{engine} is not available on this host: {call}: {source}{hint}")]
    Refused {
        /// The engine.
        engine: EngineKind,
        /// The call refused (with its argument where it matters).
        call: String,
        /// The OS error.
        source: std::io::Error,
        /// What to do about it, ready to follow the error (" (…)", or empty).
        hint: String,
    },
    /// Setting the engine up failed.
    #[error("{engine}: {what}: {source}")]
    Setup {
        /// The engine.
        engine: EngineKind,
        /// The step.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Builds an engine on `file`. Call it on the thread that will use the engine (io_uring's
/// SINGLE_ISSUER ties the ring to its creator), with that thread's spare Linux AIO contexts
/// (`pool`: [`ThreadTurn::aio_pool`] on an iothread), which its Linux AIO engines take from and
/// give back to.
pub fn open(
    file: File,
    opts: &EngineOptions,
    pool: &AioContextPool,
) -> Result<Box<dyn IoEngine>, EngineError> {
    let engine: Box<dyn IoEngine> = match opts.kind {
        EngineKind::Auto if auto::in_memory(&file) => {
            // tmpfs, ramfs: every request is a memory copy, done inline; wrapping an
            // asynchronous engine would only add its ring and a check per turn.
            Box::new(sync::SyncEngine::for_auto(file, opts.depth as usize))
        }
        EngineKind::Auto => {
            let inline = file.try_clone().map_err(|source| EngineError::Setup {
                engine: EngineKind::Auto,
                what: "duplicating the file for the inline path",
                source,
            })?;
            // The wrapped engine: the queue's options, without the fault plan (that wraps `Auto`).
            let wrapped_opts = |kind| EngineOptions {
                kind,
                fault: None,
                ..*opts
            };
            let in_caller = if auto::completes_in_caller(&file) {
                // Opened straight away, not probed first: a probe's io_destroy would stall
                // the iothread for an RCU grace period per queue.
                open_auto_aio(
                    &file,
                    &wrapped_opts(EngineKind::LinuxAio),
                    pool,
                    "batches of a device that completes reads in the caller's context (zram, a RAM disk)",
                    "they go to the usual engine",
                )
            } else {
                None
            };
            let (wrapped, shallow) = match in_caller {
                Some(engine) => (engine, None),
                None => {
                    let kind = auto_async_kind(opts.direct, pool);
                    // O_DIRECT on a device that sleeps for its completions: requests go to
                    // Linux AIO beside the ring while fewer than 4 are in flight.
                    let shallow = (opts.direct && kind == EngineKind::IoUring)
                        .then(|| {
                            open_auto_aio(
                                &file,
                                &wrapped_opts(EngineKind::LinuxAio),
                                pool,
                                "requests on an O_DIRECT file while fewer than 4 are in flight",
                                "every turn goes to the ring",
                            )
                        })
                        .flatten();
                    (open(file, &wrapped_opts(kind), pool)?, shallow)
                }
            };
            let engine = auto::AutoEngine::new(inline, wrapped).with_aio_pool(pool);
            Box::new(match shallow {
                Some(shallow) => engine.with_shallow(shallow),
                None => engine,
            })
        }
        EngineKind::Sync => Box::new(sync::SyncEngine::new(file, opts.depth as usize)),
        EngineKind::Null => Box::new(null::NullEngine::new(opts.depth as usize)),
        EngineKind::IoUring => Box::new(self::io_uring::IoUringEngine::new(file, opts)?),
        EngineKind::LinuxAio => Box::new(linux_aio::LinuxAioEngine::new(file, opts, pool)?),
    };
    Ok(match opts.fault {
        Some(plan) => Box::new(fault::FaultInjectingEngine::new(engine, plan)),
        None => engine,
    })
}

/// A Linux AIO engine (`opts` names it) on a clone of `file`, for `Auto`: the wrapped engine
/// of a device that completes in the caller's context (`io_submit` runs a turn's batch in one
/// call), or the engine beside the ring for the small turns of an O_DIRECT device that sleeps
/// for its completions. `None`, with a warning that says what happens instead, when the host
/// cannot give it (no AIO, or `fs.aio-max-nr` used up).
fn open_auto_aio(
    file: &File,
    opts: &EngineOptions,
    pool: &AioContextPool,
    role: &str,
    instead: &str,
) -> Option<Box<dyn IoEngine>> {
    let opened = clone_file(file, opts.kind).and_then(|f| open(f, opts, pool));
    match opened {
        Ok(engine) => {
            log::info!("auto engine: {role} go to Linux AIO");
            Some(engine)
        }
        Err(e) => {
            log::warn!("auto engine: no Linux AIO for {role} ({e}); {instead}");
            None
        }
    }
}

/// A clone of `file` for a further engine of `kind` (`Auto`'s Linux AIO engines).
pub(crate) fn clone_file(file: &File, kind: EngineKind) -> Result<File, EngineError> {
    file.try_clone().map_err(|source| EngineError::Setup {
        engine: kind,
        what: "file clone",
        source,
    })
}

/// The asynchronous engine `Auto` hands what would block to: io_uring where the host has it
/// (probed once per `pool`, the thread's), else Linux AIO for O_DIRECT files (asynchronous only
/// with O_DIRECT; probed with the thread's spare contexts), else Sync.
pub fn auto_async_kind(direct: bool, pool: &AioContextPool) -> EngineKind {
    if pool.io_uring_available(|| self::io_uring::IoUringEngine::probe().is_ok()) {
        EngineKind::IoUring
    } else if direct && linux_aio::probe(pool).is_ok() {
        EngineKind::LinuxAio
    } else {
        EngineKind::Sync
    }
}

/// Checks, before boot, that the host can provide `kind`. A Linux AIO probe's context is left to
/// the process exit (as the first probe's always was: its `io_destroy` would hold the caller for
/// an RCU grace period); an iothread probes with its own pool ([`linux_aio::probe`]).
pub fn probe(kind: EngineKind) -> Result<(), EngineError> {
    match kind {
        EngineKind::Sync | EngineKind::Null | EngineKind::Auto => Ok(()),
        EngineKind::LinuxAio => linux_aio::probe(&AioContextPool::left_to_process_exit()),
        EngineKind::IoUring => self::io_uring::IoUringEngine::probe(),
    }
}

/// One buffer of a request: a host address and a length. Laid out as the kernel's `struct
/// iovec`, so a slice of them goes to `preadv`/`pwritev` as it is ([`as_iovecs`]).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct IoVec {
    /// Host virtual address.
    pub base: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

const _: () = {
    assert!(std::mem::size_of::<IoVec>() == std::mem::size_of::<libc::iovec>());
    assert!(std::mem::align_of::<IoVec>() == std::mem::align_of::<libc::iovec>());
    assert!(std::mem::offset_of!(IoVec, base) == std::mem::offset_of!(libc::iovec, iov_base));
    assert!(std::mem::offset_of!(IoVec, len) == std::mem::offset_of!(libc::iovec, iov_len));
};

/// `v` as the kernel's iovecs, without copying.
pub fn as_iovecs(v: &[IoVec]) -> &[libc::iovec] {
    // SAFETY: `IoVec` is `repr(C)` with the same size, alignment and field offsets as
    // `libc::iovec` (checked at compile time above), and both fields have the same types up to
    // the pointee of `base`; the returned slice borrows `v` for its lifetime.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<libc::iovec>(), v.len()) }
}

/// Buffers a request carries inline, without a heap allocation. A virtio-blk request of up to
/// this many data segments costs no allocation (Linux guests send 4 KiB pages merged into
/// segments; 128 KiB of scattered pages is 32); longer ones spill to the heap.
pub const IOVECS_INLINE: usize = 8;

/// The buffers of a read or write.
pub type IoVecs = smallvec::SmallVec<[IoVec; IOVECS_INLINE]>;
/// Builds [`IoVecs`] like `vec!`.
pub use smallvec::smallvec as iovecs;

// SAFETY: an `IoVec` is only an address and a length; the engine that dereferences it relies on
// the submitter's guarantee (see the module doc) that the memory outlives the request, whichever
// thread runs it.
unsafe impl Send for IoVec {}

/// What to do.
#[derive(Debug)]
pub enum IoOp {
    /// Read into the buffers from `offset`.
    Read {
        /// Byte offset in the file.
        offset: u64,
        /// Destination buffers, in order.
        iovecs: IoVecs,
    },
    /// Write the buffers at `offset`.
    Write {
        /// Byte offset in the file.
        offset: u64,
        /// Source buffers, in order.
        iovecs: IoVecs,
    },
    /// Make written data durable (fdatasync).
    Flush,
    /// Deallocate a range (the data reads back as zeros or old data).
    Discard {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// Make a range read back as zeros.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// The range may be deallocated.
        unmap: bool,
    },
}

impl IoOp {
    /// Total bytes of a read or write.
    pub fn data_len(&self) -> usize {
        match self {
            IoOp::Read { iovecs, .. } | IoOp::Write { iovecs, .. } => {
                iovecs.iter().map(|v| v.len).sum()
            }
            _ => 0,
        }
    }
}

/// A request with the caller's token, returned in its completion.
#[derive(Debug)]
pub struct IoRequest {
    /// The operation.
    pub op: IoOp,
    /// Opaque to the engine.
    pub token: u64,
}

/// A finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The submitter's token.
    pub token: u64,
    /// Bytes transferred (≥ 0), or a negative errno.
    pub result: i64,
}

/// Errors from submitting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    /// No room: try again after reaping.
    #[error("I/O engine is full")]
    Full,
}

/// Where an engine's reads and writes went, counted since the engine was built: inline on the
/// submitting thread or handed to an asynchronous engine, and how. Engines that choose a path
/// per request fill it in (`Auto`, and Sync standing in for it on a memory file system);
/// wrappers pass their inner engine's through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Reads and writes completed inline on the submitting thread.
    pub inline: u64,
    /// Reads and writes handed to an asynchronous engine.
    pub deferred: u64,
    /// Inline attempts that returned EAGAIN, transferred less than asked, or were slow (a slow
    /// attempt that completed counts in `inline` too).
    pub failed: u64,
    /// Inline attempts made (each `preadv2`/`pwritev2` call).
    pub attempts: u64,
    /// Buffered writes run by one `io_submit` per turn (counted in `deferred` too).
    pub batched_writes: u64,
    /// O_DIRECT: reads and writes handed to the Linux AIO engine beside the ring because their
    /// turn and the requests in flight were few (counted in `deferred` too).
    pub shallow: u64,
}

/// An I/O engine on one backing file, owned by one dataplane thread.
pub trait IoEngine: Send {
    /// Queues a request; it reaches the kernel at the next `commit`.
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError>;
    /// Hands queued requests to the kernel (one submission call for asynchronous engines);
    /// returns how many were submitted. `turn` is the iothread's round, for engines that decide
    /// by what else the thread is doing (`Auto`).
    fn commit(&mut self, turn: &ThreadTurn) -> usize;
    /// Moves finished requests to `out` without blocking; returns how many. `turn` as for
    /// [`IoEngine::commit`].
    fn reap(&mut self, out: &mut Vec<Completion>, turn: &ThreadTurn) -> usize;
    /// The fds that become readable when completions arrive, for engines that complete later
    /// (none for engines that complete in `commit`; two for an `Auto` engine that hands
    /// requests to two asynchronous engines). A sleeping caller waits on all of them.
    fn completion_fds(&self) -> Vec<RawFd>;
    /// How many more requests `submit` accepts now.
    fn capacity(&self) -> usize;
    /// Requests submitted and not yet reaped.
    fn in_flight(&self) -> usize;
    /// A cheap check (no syscall) for reapable completions.
    fn has_completions(&self) -> bool;
    /// The caller starts polling [`IoEngine::has_completions`]: the engine may stop signalling
    /// its completion fd (and `reap` need not clear it) until [`IoEngine::poll_end`].
    fn poll_begin(&mut self) {}
    /// The caller is about to sleep on the completion fd: signal it again for completions from
    /// now on. The caller checks `has_completions` once more afterwards.
    fn poll_end(&mut self) {}
    /// Requests accepted by `submit` that the kernel has not taken yet (a submission refused
    /// with EAGAIN, or a full ring). No fd signals them: the caller commits again later.
    fn unsubmitted(&self) -> usize {
        0
    }
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
    /// Where the engine's reads and writes went so far ([`EngineStats`]); all zero for an
    /// engine that sends every request the same way.
    fn stats(&self) -> EngineStats {
        EngineStats::default()
    }
    /// What the engine is and what is in force (flags, registered files, fallbacks, where
    /// `Auto` sends requests): typed for programs, one short line as its `Display`.
    fn info(&self) -> EngineInfo;
}

/// Runs `op` synchronously on `fd`; returns bytes or a negative errno. Shared by engines that
/// complete on the calling thread.
pub(crate) fn run_blocking(fd: RawFd, op: &IoOp) -> i64 {
    fn ret(r: isize) -> i64 {
        if r < 0 {
            -i64::from(last_errno())
        } else {
            r as i64
        }
    }
    match op {
        IoOp::Read { offset, iovecs } | IoOp::Write { offset, iovecs } => {
            let is_read = matches!(op, IoOp::Read { .. });
            let total: usize = iovecs.iter().map(|v| v.len).sum();
            // The first transfer goes from the request's own buffers; only a short one (rare)
            // copies the rest to advance through it.
            let mut rest: Option<smallvec::SmallVec<[libc::iovec; IOVECS_INLINE]>> = None;
            let mut done: usize = 0;
            let mut first = 0;
            // Loop over short transfers; a zero-byte read means end of file: fill with zeros.
            while done < total {
                let iov: &[libc::iovec] = match &rest {
                    Some(r) => &r[first..],
                    None => as_iovecs(iovecs),
                };
                let Ok(off) = libc::off_t::try_from(*offset + done as u64) else {
                    return -i64::from(libc::EINVAL);
                };
                let cnt = iov.len().min(libc::UIO_MAXIOV as usize) as libc::c_int;
                // One buffer (a 4 KiB request) goes by pread/pwrite, which spare the kernel
                // importing an iovec array.
                // SAFETY: `iov` describes buffers the submitter keeps valid until completion
                // (module contract); the kernel reads/writes at most their lengths.
                let r = unsafe {
                    match (is_read, iov) {
                        (true, [one]) => libc::pread(fd, one.iov_base, one.iov_len, off),
                        (false, [one]) => libc::pwrite(fd, one.iov_base, one.iov_len, off),
                        (true, _) => libc::preadv(fd, iov.as_ptr(), cnt, off),
                        (false, _) => libc::pwritev(fd, iov.as_ptr(), cnt, off),
                    }
                };
                let r = ret(r);
                if r < 0 {
                    if r == -i64::from(libc::EINTR) {
                        continue;
                    }
                    return r;
                }
                if r == 0 {
                    if is_read {
                        zero_tail(iov);
                        return total as i64;
                    }
                    return -i64::from(libc::EIO);
                }
                done += r as usize;
                if done < total {
                    let r_iov =
                        rest.get_or_insert_with(|| as_iovecs(iovecs).iter().copied().collect());
                    advance(r_iov, &mut first, r as usize);
                }
            }
            done as i64
        }
        IoOp::Flush => {
            // SAFETY: fdatasync on a valid fd has no memory effects.
            ret(unsafe { libc::fdatasync(fd) } as isize)
        }
        IoOp::Discard { offset, len } => fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            *offset,
            *len,
        ),
        IoOp::WriteZeroes { offset, len, unmap } => {
            let mode = if *unmap {
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
            } else {
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
            };
            fallocate(fd, mode, *offset, *len)
        }
    }
}

fn fallocate(fd: RawFd, mode: libc::c_int, offset: u64, len: u64) -> i64 {
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return -i64::from(libc::EINVAL);
    };
    // SAFETY: fallocate on a valid fd with in-range integers has no memory effects.
    let r = unsafe { libc::fallocate(fd, mode, off, l) };
    if r < 0 {
        -i64::from(last_errno())
    } else {
        len as i64
    }
}

/// The calling thread's errno after a failed system call (EIO if the OS gave none).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Skips `n` transferred bytes in `iov[*first..]`.
fn advance(iov: &mut [libc::iovec], first: &mut usize, mut n: usize) {
    while n > 0 && *first < iov.len() {
        let v = &mut iov[*first];
        if n >= v.iov_len {
            n -= v.iov_len;
            *first += 1;
        } else {
            // SAFETY: n < iov_len, so the new base stays inside the same buffer.
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n) }.cast();
            v.iov_len -= n;
            n = 0;
        }
    }
}

fn zero_tail(iov: &[libc::iovec]) {
    for v in iov {
        // SAFETY: each iovec is a live buffer of iov_len bytes (module contract).
        unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 0, v.iov_len) };
    }
}
