//! One request slot of the Linux AIO engine: the request's iocb and iovec array, kept at a fixed
//! address until the request completes, and the progress of short transfers.

use std::os::unix::io::RawFd;

use super::abi::{Iocb, IOCB_CMD_FDSYNC, IOCB_CMD_PREADV, IOCB_CMD_PWRITEV, IOCB_FLAG_RESFD};
use crate::engine::{IoOp, IoRequest, IoVec};

/// What a slot holds. `Blocking` is large (an `IoOp` carries its iovecs inline), but slots are
/// made once per engine and reused: no allocation per request beats a small enum here.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Kind {
    /// Free.
    Idle,
    /// IOCB_CMD_PREADV.
    Read,
    /// IOCB_CMD_PWRITEV.
    Write,
    /// IOCB_CMD_FDSYNC, or fdatasync in `commit` once the file system refused FDSYNC.
    Flush,
    /// Discard or write-zeroes: `run_blocking` in `commit`.
    Blocking(IoOp),
    /// Completes in `commit` with this result (empty or out-of-range requests).
    Immediate(i64),
}

/// One request: its iocb and iovec array stay here, at a fixed address, until it completes.
pub(super) struct Slot {
    pub(super) token: u64,
    pub(super) kind: Kind,
    pub(super) iocb: Iocb,
    /// The request's buffers; `iov[first..]` is what is left to transfer.
    pub(super) iov: Vec<libc::iovec>,
    pub(super) first: usize,
    /// File offset of the request.
    pub(super) offset: u64,
    /// Bytes transferred so far (short transfers are resubmitted).
    pub(super) done: usize,
    /// Bytes of the whole request.
    pub(super) total: usize,
}

impl Slot {
    pub(super) fn idle() -> Slot {
        Slot {
            token: 0,
            kind: Kind::Idle,
            iocb: Iocb::default(),
            iov: Vec::new(),
            first: 0,
            offset: 0,
            done: 0,
            total: 0,
        }
    }

    /// Fills the slot (number `idx`) with `request`; the iocb targets `fd` and signals `resfd`
    /// (`None`: no eventfd, the caller reaps the ring).
    pub(super) fn load(&mut self, request: IoRequest, idx: u32, fd: RawFd, resfd: Option<RawFd>) {
        self.token = request.token;
        self.first = 0;
        self.offset = 0;
        self.done = 0;
        self.total = 0;
        self.iocb = Iocb {
            aio_data: u64::from(idx),
            aio_fildes: fd as u32,
            aio_flags: if resfd.is_some() { IOCB_FLAG_RESFD } else { 0 },
            aio_resfd: resfd.map_or(0, |fd| fd as u32),
            ..Iocb::default()
        };
        self.kind = match request.op {
            IoOp::Read { offset, iovecs } => self.load_rw(true, offset, &iovecs),
            IoOp::Write { offset, iovecs } => self.load_rw(false, offset, &iovecs),
            IoOp::Flush => {
                self.iocb.aio_lio_opcode = IOCB_CMD_FDSYNC;
                Kind::Flush
            }
            op @ (IoOp::Discard { .. } | IoOp::WriteZeroes { .. }) => Kind::Blocking(op),
        };
    }

    fn load_rw(&mut self, read: bool, offset: u64, iovecs: &[IoVec]) -> Kind {
        // Reuses the slot's vector: it only grows when a request has more buffers than any
        // earlier one in this slot.
        self.iov.clear();
        self.iov.extend(iovecs.iter().map(|v| libc::iovec {
            iov_base: v.base.cast(),
            iov_len: v.len,
        }));
        let Some(total) = iovecs.iter().try_fold(0usize, |a, v| a.checked_add(v.len)) else {
            return Kind::Immediate(-i64::from(libc::EINVAL));
        };
        if total == 0 {
            return Kind::Immediate(0);
        }
        if offset
            .checked_add(total as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Kind::Immediate(-i64::from(libc::EINVAL));
        }
        self.total = total;
        self.offset = offset;
        self.iocb.aio_lio_opcode = if read {
            IOCB_CMD_PREADV
        } else {
            IOCB_CMD_PWRITEV
        };
        self.arm();
        if read {
            Kind::Read
        } else {
            Kind::Write
        }
    }

    /// Points the iocb at what is left to transfer (at most UIO_MAXIOV buffers per iocb; the
    /// rest goes as a short transfer's remainder).
    pub(super) fn arm(&mut self) {
        let rest = &self.iov[self.first..];
        self.iocb.aio_buf = rest.as_ptr() as u64;
        self.iocb.aio_nbytes = rest.len().min(libc::UIO_MAXIOV as usize) as u64;
        // `load_rw` checked that offset + total fits in an i64.
        self.iocb.aio_offset = (self.offset + self.done as u64) as i64;
    }
}
