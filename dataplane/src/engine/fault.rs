//! Fault injection: an engine wrapper that completes chosen requests with an error instead of
//! running them, like QEMU's `blkdebug` driver. It lets tests (and operators rehearsing failure
//! handling) see EIO or ENOSPC from "the backing store" on hosts without device-mapper or a
//! flaky disk, a store that never answers (a hung NFS server), or a kernel that refuses a
//! submission with EAGAIN. Requests that do not match go to the wrapped engine unchanged.
//!
//! Matching is per queue (each queue has its own engine and so its own error budget).

use std::os::unix::io::RawFd;

use super::{Completion, EngineKind, IoEngine, IoOp, IoRequest, SubmitError, ThreadTurn};

/// Operation classes a fault can apply to (a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FaultOps(u8);

impl FaultOps {
    /// Reads.
    pub const READ: FaultOps = FaultOps(1);
    /// Writes.
    pub const WRITE: FaultOps = FaultOps(2);
    /// Flushes (they have no range: every flush matches).
    pub const FLUSH: FaultOps = FaultOps(4);
    /// Discards.
    pub const DISCARD: FaultOps = FaultOps(8);
    /// Write-zeroes.
    pub const WRITE_ZEROES: FaultOps = FaultOps(16);

    /// Both sets.
    pub const fn union(self, other: FaultOps) -> FaultOps {
        FaultOps(self.0 | other.0)
    }

    /// Whether `other` is inside this set.
    pub const fn contains(self, other: FaultOps) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    fn of(op: &IoOp) -> FaultOps {
        match op {
            IoOp::Read { .. } => Self::READ,
            IoOp::Write { .. } => Self::WRITE,
            IoOp::Flush => Self::FLUSH,
            IoOp::Discard { .. } => Self::DISCARD,
            IoOp::WriteZeroes { .. } => Self::WRITE_ZEROES,
        }
    }
}

/// What happens to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FaultAction {
    /// It completes with this errno (positive, e.g. `libc::EIO`) without reaching the file.
    Fail(i32),
    /// It never completes (it stays in flight until the engine is dropped).
    Hang,
    /// Its submission is refused as if the kernel returned EAGAIN, once per `commit`, until the
    /// budget (`max_errors`) is spent; then it goes to the wrapped engine. Nothing signals the
    /// refused requests: the caller must commit again on its own ([`IoEngine::unsubmitted`]).
    Refuse,
}

/// Which requests fail, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaultPlan {
    /// What happens to the requests.
    pub action: FaultAction,
    /// The operations that fail.
    pub ops: FaultOps,
    /// The failing byte range: `[start, end)`. A request fails when it overlaps it.
    pub start: u64,
    /// End of the range (exclusive).
    pub end: u64,
    /// At most this many injected errors (refused commits for `Refuse`) per queue; afterwards
    /// the range works again.
    pub max_errors: Option<u64>,
}

impl FaultPlan {
    fn matches(&self, op: &IoOp) -> bool {
        if !self.ops.contains(FaultOps::of(op)) {
            return false;
        }
        let (offset, len) = match op {
            IoOp::Flush => return true,
            IoOp::Read { offset, .. } | IoOp::Write { offset, .. } => {
                (*offset, op.data_len() as u64)
            }
            IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
                (*offset, *len)
            }
        };
        let last = offset.saturating_add(len.max(1));
        offset < self.end && last > self.start
    }
}

/// Wraps an engine and fails the requests its [`FaultPlan`] picks.
pub struct FaultInjectingEngine {
    inner: Box<dyn IoEngine>,
    plan: FaultPlan,
    /// Injected completions, handed out at the next `reap`.
    failed: Vec<Completion>,
    /// Requests that never complete (`Hang`).
    hung: usize,
    /// Requests whose submission is being refused (`Refuse`).
    refused: Vec<IoRequest>,
    injected: u64,
}

impl std::fmt::Debug for FaultInjectingEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjectingEngine")
            .field("inner", &self.inner.info())
            .field("plan", &self.plan)
            .field("injected", &self.injected)
            .finish()
    }
}

impl FaultInjectingEngine {
    /// `inner` with `plan` applied.
    pub fn new(inner: Box<dyn IoEngine>, plan: FaultPlan) -> Self {
        Self {
            inner,
            plan,
            failed: Vec::new(),
            hung: 0,
            refused: Vec::new(),
            injected: 0,
        }
    }

    fn budget_left(&self) -> bool {
        self.plan.max_errors.is_none_or(|m| self.injected < m)
    }
}

impl IoEngine for FaultInjectingEngine {
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
        if self.capacity() == 0 {
            return Err(SubmitError::Full);
        }
        if !(self.budget_left() && self.plan.matches(&request.op)) {
            return self.inner.submit(request);
        }
        match self.plan.action {
            FaultAction::Fail(errno) => {
                self.injected += 1;
                self.failed.push(Completion {
                    token: request.token,
                    result: -i64::from(errno),
                });
            }
            FaultAction::Hang => {
                self.injected += 1;
                self.hung += 1;
            }
            // Counted per refused commit, not per request.
            FaultAction::Refuse => self.refused.push(request),
        }
        Ok(())
    }

    fn commit(&mut self, turn: &ThreadTurn) -> usize {
        if !self.refused.is_empty() {
            if self.budget_left() {
                self.injected += 1;
            } else {
                for request in std::mem::take(&mut self.refused) {
                    // The inner engine had room when these were accepted (capacity counts them).
                    if let Err(e) = self.inner.submit(request) {
                        log::error!("fault injection: the wrapped engine refused a request: {e}");
                    }
                }
            }
        }
        self.inner.commit(turn)
    }

    fn reap(&mut self, out: &mut Vec<Completion>, turn: &ThreadTurn) -> usize {
        let n = self.failed.len();
        out.append(&mut self.failed);
        n + self.inner.reap(out, turn)
    }

    fn completion_fds(&self) -> Vec<RawFd> {
        self.inner.completion_fds()
    }

    fn capacity(&self) -> usize {
        self.inner
            .capacity()
            .saturating_sub(self.failed.len() + self.hung + self.refused.len())
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.failed.len() + self.hung + self.refused.len()
    }

    fn has_completions(&self) -> bool {
        !self.failed.is_empty() || self.inner.has_completions()
    }

    fn unsubmitted(&self) -> usize {
        self.refused.len() + self.inner.unsubmitted()
    }

    fn poll_begin(&mut self) {
        self.inner.poll_begin();
    }

    fn stats(&self) -> super::EngineStats {
        self.inner.stats()
    }

    fn poll_end(&mut self) {
        self.inner.poll_end();
    }

    fn kind(&self) -> EngineKind {
        self.inner.kind()
    }

    fn info(&self) -> super::EngineInfo {
        super::EngineInfo::FaultInjection {
            engine: Box::new(self.inner.info()),
            plan: self.plan,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::null::NullEngine;
    use crate::engine::IoVec;

    fn read(offset: u64, buf: &mut [u8], token: u64) -> IoRequest {
        IoRequest {
            op: IoOp::Read {
                offset,
                iovecs: crate::engine::iovecs![IoVec {
                    base: buf.as_mut_ptr(),
                    len: buf.len(),
                }],
            },
            token,
        }
    }

    fn plan(ops: FaultOps, start: u64, end: u64, max_errors: Option<u64>) -> FaultPlan {
        FaultPlan {
            action: FaultAction::Fail(libc::EIO),
            ops,
            start,
            end,
            max_errors,
        }
    }

    fn results(e: &mut FaultInjectingEngine) -> Vec<(u64, i64)> {
        e.commit(&ThreadTurn::default());
        let mut out = Vec::new();
        e.reap(&mut out, &ThreadTurn::default());
        let mut r: Vec<_> = out.iter().map(|c| (c.token, c.result)).collect();
        r.sort_unstable();
        r
    }

    #[test]
    fn requests_overlapping_the_range_fail_others_pass() {
        let mut e = FaultInjectingEngine::new(
            Box::new(NullEngine::new(8)),
            plan(FaultOps::READ, 8192, 12288, None),
        );
        let mut b = [[1u8; 4096]; 4];
        let [b0, b1, b2, b3] = &mut b;
        // Before, touching the start, inside, and after the range.
        e.submit(read(0, b0, 0)).expect("room");
        e.submit(read(6144, b1, 1)).expect("room");
        e.submit(read(8192, b2, 2)).expect("room");
        e.submit(read(12288, b3, 3)).expect("room");
        assert_eq!(e.in_flight(), 4);
        let eio = -i64::from(libc::EIO);
        assert_eq!(
            results(&mut e),
            vec![(0, 4096), (1, eio), (2, eio), (3, 4096)]
        );
        assert_eq!(e.in_flight(), 0);
        // A failed read leaves the guest buffer alone.
        assert!(b[1].iter().all(|&x| x == 1));
        assert!(b[0].iter().all(|&x| x == 0), "the null engine zero-fills");
    }

    #[test]
    fn only_the_chosen_operations_fail() {
        let mut e = FaultInjectingEngine::new(
            Box::new(NullEngine::new(8)),
            plan(FaultOps::WRITE.union(FaultOps::FLUSH), 0, u64::MAX, None),
        );
        let mut buf = [0u8; 512];
        e.submit(read(0, &mut buf, 0)).expect("room");
        e.submit(IoRequest {
            op: IoOp::Write {
                offset: 0,
                iovecs: crate::engine::iovecs![IoVec {
                    base: buf.as_mut_ptr(),
                    len: 512,
                }],
            },
            token: 1,
        })
        .expect("room");
        e.submit(IoRequest {
            op: IoOp::Flush,
            token: 2,
        })
        .expect("room");
        e.submit(IoRequest {
            op: IoOp::Discard {
                offset: 0,
                len: 512,
            },
            token: 3,
        })
        .expect("room");
        let eio = -i64::from(libc::EIO);
        assert_eq!(
            results(&mut e),
            vec![(0, 512), (1, eio), (2, eio), (3, 512)]
        );
    }

    #[test]
    fn the_error_budget_runs_out_then_io_works() {
        let mut e = FaultInjectingEngine::new(
            Box::new(NullEngine::new(4)),
            plan(FaultOps::READ, 0, u64::MAX, Some(2)),
        );
        let mut buf = [0u8; 512];
        let eio = -i64::from(libc::EIO);
        for t in 0..4 {
            e.submit(read(0, &mut buf, t)).expect("room");
        }
        assert_eq!(
            results(&mut e),
            vec![(0, eio), (1, eio), (2, 512), (3, 512)]
        );
    }

    #[test]
    fn injected_completions_take_engine_room() {
        let mut e = FaultInjectingEngine::new(
            Box::new(NullEngine::new(2)),
            plan(FaultOps::READ, 0, 512, None),
        );
        let mut buf = [0u8; 512];
        e.submit(read(0, &mut buf, 0)).expect("room");
        e.submit(read(0, &mut buf, 1)).expect("room");
        assert_eq!(e.capacity(), 0, "two injected errors wait to be reaped");
        assert_eq!(e.submit(read(4096, &mut buf, 2)), Err(SubmitError::Full));
        assert!(e.has_completions());
        assert_eq!(results(&mut e).len(), 2);
        assert_eq!(e.capacity(), 2);
    }

    #[test]
    fn hung_requests_stay_in_flight_for_ever() {
        let mut e = FaultInjectingEngine::new(
            Box::new(NullEngine::new(4)),
            FaultPlan {
                action: FaultAction::Hang,
                ..plan(FaultOps::READ, 0, 512, None)
            },
        );
        let mut buf = [0u8; 512];
        e.submit(read(0, &mut buf, 0)).expect("room");
        e.submit(read(4096, &mut buf, 1)).expect("room");
        assert_eq!(
            results(&mut e),
            vec![(1, 512)],
            "only the other one completes"
        );
        assert_eq!(e.in_flight(), 1);
        assert_eq!(e.capacity(), 3);
        assert!(!e.has_completions());
        assert_eq!(e.unsubmitted(), 0, "a hung request was submitted");
    }

    #[test]
    fn refused_submissions_wait_for_later_commits_then_complete() {
        let mut e = FaultInjectingEngine::new(
            Box::new(NullEngine::new(4)),
            FaultPlan {
                action: FaultAction::Refuse,
                ..plan(FaultOps::READ, 0, u64::MAX, Some(2))
            },
        );
        let mut buf = [1u8; 512];
        e.submit(read(0, &mut buf, 7)).expect("room");
        for _ in 0..2 {
            assert_eq!(results(&mut e), vec![], "refused");
            assert_eq!((e.unsubmitted(), e.in_flight()), (1, 1));
            assert!(!e.has_completions(), "nothing signals a refused request");
        }
        assert_eq!(
            results(&mut e),
            vec![(7, 512)],
            "the budget is spent: it goes"
        );
        assert_eq!((e.unsubmitted(), e.in_flight()), (0, 0));
    }
}
