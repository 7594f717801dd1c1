//! One request of the io_uring engine from `submit` to its completion: the caller's token, the
//! iovec array the kernel reads (kept here, at a stable address, until the completion is reaped),
//! the progress of a read or write that came back short, and the SQE that (re)submits the rest.
//! Slots are reused: after the first requests, filling one allocates nothing.

use std::os::unix::io::RawFd;

use ::io_uring::{opcode, squeue, types};

use crate::engine::{advance, zero_tail, IoOp, IoRequest};

/// Resubmissions of a request after `-EINTR`/`-EAGAIN` before its error is returned.
const MAX_RETRIES: u8 = 8;

/// What an SQE names as its file: the registered file (index 0) or the plain descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// `types::Fixed(0)`, the file registered with `IORING_REGISTER_FILES`.
    Fixed,
    /// The raw descriptor (when registering the file failed).
    Fd(RawFd),
}

/// Builds an opcode on either target (the two are different types in `io-uring`).
macro_rules! on_target {
    ($target:expr, $t:ident => $build:expr) => {
        match $target {
            Target::Fixed => {
                let $t = types::Fixed(0);
                $build
            }
            Target::Fd(fd) => {
                let $t = types::Fd(fd);
                $build
            }
        }
    };
}

/// The operation of a slot, without the buffers (those live in `Slot::iov`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Flush,
    Fallocate { mode: i32, len: u64 },
}

/// The iovec array handed to the kernel.
struct Iovecs(Vec<libc::iovec>);

// SAFETY: an iovec is an address and a length; whoever dereferences it relies on the submitter's
// guarantee (engine module doc) that the memory outlives the request, on whichever thread.
unsafe impl Send for Iovecs {}

impl std::fmt::Debug for Iovecs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} iovecs", self.0.len())
    }
}

/// What a completion queue entry means for its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// The request is finished with this result.
    Done(i64),
    /// Resubmit the slot's SQE (the rest of a short transfer, or a retry).
    Again,
}

/// One request's state.
#[derive(Debug)]
pub(super) struct Slot {
    token: u64,
    kind: Kind,
    offset: u64,
    total: usize,
    done: usize,
    iov: Iovecs,
    first: usize,
    retries: u8,
}

fn errno(e: i32) -> i64 {
    -i64::from(e)
}

impl Slot {
    /// An empty slot with room for a few iovecs.
    pub(super) fn new() -> Slot {
        Slot {
            token: 0,
            kind: Kind::Flush,
            offset: 0,
            total: 0,
            done: 0,
            iov: Iovecs(Vec::with_capacity(8)),
            first: 0,
            retries: 0,
        }
    }

    /// The caller's token.
    pub(super) fn token(&self) -> u64 {
        self.token
    }

    /// Takes over `req` (its token and a copy of its iovecs). A read or write whose range does
    /// not fit a non-negative file offset is refused with `-EINVAL` (the kernel would read
    /// offset -1 as "the file position").
    pub(super) fn fill(&mut self, req: IoRequest) -> Result<(), i64> {
        self.token = req.token;
        self.offset = 0;
        self.total = 0;
        self.done = 0;
        self.first = 0;
        self.retries = 0;
        self.iov.0.clear();
        let is_read = matches!(req.op, IoOp::Read { .. });
        match req.op {
            IoOp::Read { offset, iovecs } | IoOp::Write { offset, iovecs } => {
                let total = iovecs
                    .iter()
                    .try_fold(0usize, |acc, v| acc.checked_add(v.len))
                    .ok_or(errno(libc::EINVAL))?;
                let end = u64::try_from(total)
                    .ok()
                    .and_then(|t| offset.checked_add(t))
                    .ok_or(errno(libc::EINVAL))?;
                if i64::try_from(end).is_err() {
                    return Err(errno(libc::EINVAL));
                }
                self.kind = if is_read { Kind::Read } else { Kind::Write };
                self.offset = offset;
                self.total = total;
                self.iov.0.extend(iovecs.iter().map(|v| libc::iovec {
                    iov_base: v.base.cast(),
                    iov_len: v.len,
                }));
            }
            IoOp::Flush => self.kind = Kind::Flush,
            IoOp::Discard { offset, len } => {
                self.offset = offset;
                self.kind = Kind::Fallocate {
                    mode: libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    len,
                };
            }
            IoOp::WriteZeroes { offset, len, unmap } => {
                self.offset = offset;
                let mode = if unmap {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                };
                self.kind = Kind::Fallocate { mode, len };
            }
        }
        Ok(())
    }

    /// The SQE for what is left of the request, tagged with `user_data`. It points into
    /// `self.iov`, which must stay untouched until its completion (the engine only changes a
    /// slot in `fill`, when it is free, and in `on_result`, after the kernel is done with it).
    pub(super) fn entry(&self, user_data: u64, target: Target) -> squeue::Entry {
        let entry = match self.kind {
            Kind::Read | Kind::Write => {
                let rest = &self.iov.0[self.first.min(self.iov.0.len())..];
                // At most UIO_MAXIOV per call; the rest goes in a resubmission.
                let cnt = rest.len().min(libc::UIO_MAXIOV as usize) as u32;
                // Cannot exceed i64::MAX: `fill` checked offset + total.
                let off = self.offset + self.done as u64;
                // One buffer (a 4 KiB request, most of them): the plain READ/WRITE opcodes
                // spare the kernel copying and checking an iovec array.
                if let [one] = rest {
                    // A buffer is at most a descriptor's u32 length; a longer one (not from a
                    // guest) stays vectored.
                    if let Ok(len) = u32::try_from(one.iov_len) {
                        let buf = one.iov_base.cast::<u8>();
                        let entry = if self.kind == Kind::Read {
                            on_target!(target, t => opcode::Read::new(t, buf, len)
                                .offset(off)
                                .build())
                        } else {
                            on_target!(target, t => opcode::Write::new(t, buf.cast_const(), len)
                                .offset(off)
                                .build())
                        };
                        return entry.user_data(user_data);
                    }
                }
                if self.kind == Kind::Read {
                    on_target!(target, t => opcode::Readv::new(t, rest.as_ptr(), cnt)
                        .offset(off)
                        .build())
                } else {
                    on_target!(target, t => opcode::Writev::new(t, rest.as_ptr(), cnt)
                        .offset(off)
                        .build())
                }
            }
            Kind::Flush => on_target!(target, t => opcode::Fsync::new(t)
                .flags(types::FsyncFlags::DATASYNC)
                .build()),
            Kind::Fallocate { mode, len } => {
                on_target!(target, t => opcode::Fallocate::new(t, len)
                    .offset(self.offset)
                    .mode(mode)
                    .build())
            }
        };
        entry.user_data(user_data)
    }

    /// Accounts a completion queue entry's result `res`.
    pub(super) fn on_result(&mut self, res: i32) -> Step {
        match self.kind {
            Kind::Flush => Step::Done(if res < 0 { i64::from(res) } else { 0 }),
            Kind::Fallocate { len, .. } => Step::Done(if res < 0 {
                i64::from(res)
            } else {
                i64::try_from(len).unwrap_or(i64::MAX)
            }),
            Kind::Read | Kind::Write => self.on_transfer(res),
        }
    }

    fn on_transfer(&mut self, res: i32) -> Step {
        if res < 0 {
            if (res == -libc::EINTR || res == -libc::EAGAIN) && self.retries < MAX_RETRIES {
                self.retries += 1;
                return Step::Again;
            }
            return Step::Done(i64::from(res));
        }
        let n = res as usize;
        if n == 0 && self.done < self.total {
            if self.kind == Kind::Read {
                // End of file: the rest reads as zeros.
                zero_tail(&self.iov.0[self.first.min(self.iov.0.len())..]);
                self.done = self.total;
                return Step::Done(self.total as i64);
            }
            return Step::Done(errno(libc::ENOSPC));
        }
        self.done = (self.done + n).min(self.total);
        advance(&mut self.iov.0, &mut self.first, n);
        if self.done >= self.total {
            Step::Done(self.total as i64)
        } else {
            Step::Again
        }
    }

    /// Bytes transferred so far (tests).
    #[cfg(test)]
    pub(super) fn done(&self) -> usize {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::IoVec;

    fn read(buf: &mut [u8], split: usize, offset: u64) -> IoRequest {
        let (a, b) = buf.split_at_mut(split);
        IoRequest {
            op: IoOp::Read {
                offset,
                iovecs: crate::engine::iovecs![
                    IoVec {
                        base: a.as_mut_ptr(),
                        len: a.len(),
                    },
                    IoVec {
                        base: b.as_mut_ptr(),
                        len: b.len(),
                    },
                ],
            },
            token: 7,
        }
    }

    #[test]
    fn short_read_advances_then_eof_zero_fills() {
        let mut buf = vec![0xffu8; 300];
        let mut s = Slot::new();
        s.fill(read(&mut buf, 100, 4096)).expect("fill");
        assert_eq!(s.token(), 7);
        assert_eq!(s.on_result(150), Step::Again);
        assert_eq!(s.done(), 150);
        assert_eq!(s.first, 1);
        assert_eq!(s.iov.0[1].iov_len, 150);
        assert_eq!(s.on_result(0), Step::Done(300));
        assert!(buf[150..].iter().all(|&b| b == 0));
        assert!(buf[..150].iter().all(|&b| b == 0xff));
    }

    #[test]
    fn write_without_progress_is_enospc_and_errors_pass_through() {
        let mut buf = vec![0u8; 64];
        let mut s = Slot::new();
        let mut req = read(&mut buf, 32, 0);
        if let IoOp::Read { offset, iovecs } = req.op {
            req.op = IoOp::Write { offset, iovecs };
        }
        s.fill(req).expect("fill");
        assert_eq!(s.on_result(10), Step::Again);
        assert_eq!(s.on_result(0), Step::Done(-i64::from(libc::ENOSPC)));
        let mut s = Slot::new();
        s.fill(IoRequest {
            op: IoOp::Discard {
                offset: 0,
                len: 8192,
            },
            token: 1,
        })
        .expect("fill");
        assert_eq!(s.on_result(0), Step::Done(8192));
        assert_eq!(
            s.on_result(-libc::EOPNOTSUPP),
            Step::Done(-i64::from(libc::EOPNOTSUPP))
        );
    }

    #[test]
    fn offsets_past_i64_are_refused() {
        let mut buf = vec![0u8; 64];
        let mut s = Slot::new();
        assert_eq!(
            s.fill(read(&mut buf, 32, u64::MAX - 10)),
            Err(-i64::from(libc::EINVAL))
        );
        assert_eq!(
            s.fill(read(&mut buf, 32, i64::MAX as u64)),
            Err(-i64::from(libc::EINVAL))
        );
        assert_eq!(s.fill(read(&mut buf, 32, i64::MAX as u64 - 64)), Ok(()));
    }
}
