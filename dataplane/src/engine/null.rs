//! The null engine: completes every request at once without touching a file; reads return zeros.
//! It measures Osprey's own per-request overhead, like QEMU's null-co driver.

use std::os::unix::io::RawFd;

use super::{Completion, EngineKind, IoEngine, IoOp, IoRequest, SubmitError, ThreadTurn};

/// An engine with no backing store.
#[derive(Debug)]
pub struct NullEngine {
    done: Vec<Completion>,
    queued: usize,
    pending: Vec<IoRequest>,
    depth: usize,
}

impl NullEngine {
    /// A null engine holding up to `depth` requests.
    pub fn new(depth: usize) -> Self {
        let depth = depth.max(1);
        Self {
            done: Vec::with_capacity(depth),
            queued: 0,
            pending: Vec::with_capacity(depth),
            depth,
        }
    }
}

impl IoEngine for NullEngine {
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
        if self.capacity() == 0 {
            return Err(SubmitError::Full);
        }
        self.pending.push(request);
        self.queued += 1;
        Ok(())
    }

    fn commit(&mut self, _turn: &ThreadTurn) -> usize {
        let n = self.pending.len();
        for req in self.pending.drain(..) {
            let result = match &req.op {
                IoOp::Read { iovecs, .. } => {
                    for v in iovecs {
                        // SAFETY: the submitter keeps each buffer valid and writable until the
                        // completion is reaped (module contract of `engine`).
                        unsafe { std::ptr::write_bytes(v.base, 0, v.len) };
                    }
                    req.op.data_len() as i64
                }
                IoOp::Write { .. } => req.op.data_len() as i64,
                IoOp::Flush => 0,
                IoOp::Discard { len, .. } | IoOp::WriteZeroes { len, .. } => *len as i64,
            };
            self.done.push(Completion {
                token: req.token,
                result,
            });
        }
        self.queued = 0;
        n
    }

    fn reap(&mut self, out: &mut Vec<Completion>, _turn: &ThreadTurn) -> usize {
        let n = self.done.len();
        out.append(&mut self.done);
        n
    }

    fn completion_fds(&self) -> Vec<RawFd> {
        Vec::new()
    }

    fn capacity(&self) -> usize {
        self.depth.saturating_sub(self.queued + self.done.len())
    }

    fn in_flight(&self) -> usize {
        self.queued + self.done.len()
    }

    fn has_completions(&self) -> bool {
        !self.done.is_empty()
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Null
    }

    fn info(&self) -> super::EngineInfo {
        super::EngineInfo::Null
    }
}
