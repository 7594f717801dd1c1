//! One inline `preadv2`/`pwritev2` of a read or write on the iothread: the flags learnt for each
//! kind ([`NowaitFlags`]: RWF_NOWAIT, or none where the file refuses it), the retry without the
//! flag of a page-cache miss alone on the thread, the timing and CPU sampling of O_DIRECT calls,
//! and the verdict each attempt gives the [`InlineGate`](super::gate::InlineGate).

use std::os::unix::io::{AsRawFd, RawFd};
use std::time::Instant;

use super::gate::Call;
use super::{AutoEngine, Completion, IoOp, IoRequest};
use crate::engine::{as_iovecs, last_errno};

/// The flags of the inline calls for reads (index 0) and writes (index 1), and whether a call
/// of the kind has been made, so that they say whether the file takes RWF_NOWAIT.
#[derive(Debug)]
pub(super) struct NowaitFlags {
    /// RWF_NOWAIT, or 0 where the file system or device refuses the flag (a buffered file's
    /// page-cache copies wait for no device; an O_DIRECT call is timed instead).
    pub(super) flags: [libc::c_int; 2],
    /// An inline call of the kind has been made: `flags` is what the file takes (until then a
    /// page-cache file's batches try one inline first).
    pub(super) known: [bool; 2],
}

impl NowaitFlags {
    /// RWF_NOWAIT for both kinds, not tried yet.
    pub(super) fn new() -> Self {
        Self {
            flags: [libc::RWF_NOWAIT; 2],
            known: [false; 2],
        }
    }

    /// The index of `op`'s kind: 1 for a write, 0 for anything else.
    pub(super) fn kind(op: &IoOp) -> usize {
        usize::from(matches!(op, IoOp::Write { .. }))
    }

    /// The file is known to take RWF_NOWAIT for `kind`.
    pub(super) fn takes_nowait(&self, kind: usize) -> bool {
        self.known[kind] && self.flags[kind] != 0
    }

    /// The file is known to refuse RWF_NOWAIT for `kind`.
    pub(super) fn refuses_nowait(&self, kind: usize) -> bool {
        self.known[kind] && self.flags[kind] == 0
    }
}

impl AutoEngine {
    /// Does `request` inline (its completion waits for the next `reap`); returns it when it
    /// must go to the wrapped engine instead.
    pub(super) fn inline(&mut self, request: IoRequest, call: Call) -> Option<IoRequest> {
        match self.try_inline(&request.op, call) {
            Some(result) => {
                self.stats.inline += 1;
                self.done.push(Completion {
                    token: request.token,
                    result,
                });
                None
            }
            None => Some(request),
        }
    }

    /// Tries `op` (a read or write) inline; returns the byte count when it completed in full.
    /// A [`Call::Probe`] samples the CPU clock whatever the sampling period says.
    fn try_inline(&mut self, op: &IoOp, call: Call) -> Option<i64> {
        let (offset, iovecs, read) = match op {
            IoOp::Read { offset, iovecs } => (*offset, iovecs, true),
            IoOp::Write { offset, iovecs } => (*offset, iovecs, false),
            _ => return None,
        };
        let kind = usize::from(!read);
        let rwf = self.nowait.flags[kind];
        // Only an O_DIRECT call, or a page-cache miss retried for a lone request (below), waits
        // for the device: the others are memory copies (a RWF_NOWAIT call cannot block; a call
        // without the flag on a file system that refuses it for buffered writes is what the
        // Sync engine does, where io_uring would hand it to a slower worker thread).
        let total: usize = iovecs.iter().map(|v| v.len).sum();
        let iov = as_iovecs(iovecs);
        let off = libc::off_t::try_from(offset).ok()?;
        if iov.is_empty() || iov.len() > libc::UIO_MAXIOV as usize {
            return None;
        }
        let fd: RawFd = self.file.as_raw_fd();
        // O_DIRECT only: what the calls teach of the device.
        let mut sampler = self.strategy.sampler_mut();
        let direct = sampler.is_some();
        let clock = sampler
            .as_deref_mut()
            .map(|s| s.start_call(call == Call::Probe))
            .unwrap_or_default();
        let call_with = |flags: libc::c_int| {
            // SAFETY: `iov` describes buffers the submitter keeps valid until the request's
            // completion has been reaped (module contract of `engine`); the kernel touches at
            // most their lengths, and RWF_NOWAIT only makes the call fail instead of blocking.
            unsafe {
                if read {
                    libc::preadv2(fd, iov.as_ptr(), iov.len() as i32, off, flags)
                } else {
                    libc::pwritev2(fd, iov.as_ptr(), iov.len() as i32, off, flags)
                }
            }
        };
        let mut r = call_with(rwf);
        self.stats.attempts += 1;
        self.nowait.known[kind] = true;
        if r < 0 && last_errno() == libc::EOPNOTSUPP && rwf != 0 {
            self.stats.failed += 1;
            self.nowait_refused(kind);
            // A page-cache copy without the flag does not wait for a device: done at once.
            return if direct {
                None
            } else {
                self.try_inline(op, call)
            };
        }
        let mut took = clock.elapsed_ns();
        // A page-cache miss of a request alone on the thread waits for the device here, as
        // with Sync, since the thread has nothing else to do, instead of in an io_uring worker
        // while this thread polls the ring. Timed: a slow device switches inline off.
        let lone_miss = call == Call::Lone && !direct && rwf != 0;
        if r < 0 && lone_miss && last_errno() == libc::EAGAIN {
            let retry = Instant::now();
            r = call_with(0);
            took = retry.elapsed().as_nanos() as u64;
        }
        if let Some(sampler) = sampler {
            sampler.finish_call(&clock, r >= 0, took);
        }
        let full = r >= 0 && r as usize == total;
        let failed = !full || call.too_slow(took, &self.tuning);
        if failed {
            self.stats.failed += 1;
        }
        self.gate.record(failed);
        // Not in full (EAGAIN, another error, a short transfer: partly cached, or end of file):
        // the wrapped engine does the whole request with its full semantics.
        full.then_some(r as i64)
    }

    /// The file refused RWF_NOWAIT for `kind`: its calls go without it from now on. Buffered:
    /// page-cache copies, which wait for no device. O_DIRECT (zram and other bio-based devices
    /// refuse the flag): timed, so a slow device switches inline off and a fast one keeps it
    /// for every request.
    fn nowait_refused(&mut self, kind: usize) {
        let what = if kind == 0 { "reads" } else { "writes" };
        log::info!("auto engine: the file or device refuses RWF_NOWAIT {what}; inline without it");
        self.nowait.flags[kind] = 0;
    }
}
