//! A page-cache file wrapped around io_uring ([`Strategy::PageCache`](super::Strategy)): a turn
//! is held until `commit`. A turn of [`AutoTuning::batch_requests`] or more goes to the ring
//! (io_uring copies cached pages in the submitting call: one syscall for the batch, where inline
//! takes one per request) for the kinds the file system takes RWF_NOWAIT for; the rest go
//! inline first. Writes the file system refuses the flag for (ext4's) go inline without it, and
//! a turn of enough of them goes to one `io_submit` of a Linux AIO context opened for them on
//! first use, which runs buffered writes before it returns ([`WriteBatches`]). A request alone
//! on the thread whose RWF_NOWAIT call misses the cache is retried without the flag, on the
//! thread.
//!
//! [`AutoTuning::batch_requests`]: super::tuning::AutoTuning::batch_requests

use std::fs::File;

use super::gate::Call;
use super::inline::NowaitFlags;
use super::{AutoEngine, IoEngine, IoOp, Strategy, ThreadTurn};
use crate::engine::linux_aio::{AioContextPool, LinuxAioEngine};
use crate::engine::{clone_file, EngineKind};

/// Rounds of reaping a write batch at most: each round writes at least a byte or ends a request,
/// so this only guards against a kernel that keeps answering with short writes.
const MAX_WRITE_BATCH_REAP_ROUNDS: usize = 1024;

/// The Linux AIO context for batches of buffered writes: not opened yet, opened, or failed to
/// open (the writes then stay inline).
pub(super) enum WriteBatches {
    NotYet,
    Open(Box<LinuxAioEngine>),
    Failed,
}

impl std::fmt::Debug for WriteBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteBatches::NotYet => "NotYet",
            WriteBatches::Open(_) => "Open",
            WriteBatches::Failed => "Failed",
        })
    }
}

impl WriteBatches {
    /// The writer, once opened.
    pub(super) fn get(&self) -> Option<&LinuxAioEngine> {
        match self {
            WriteBatches::Open(writer) => Some(writer),
            WriteBatches::NotYet | WriteBatches::Failed => None,
        }
    }

    /// The writer, once opened.
    pub(super) fn get_mut(&mut self) -> Option<&mut LinuxAioEngine> {
        match self {
            WriteBatches::Open(writer) => Some(writer),
            WriteBatches::NotYet | WriteBatches::Failed => None,
        }
    }

    /// The writer, opened on first use (on this thread) on a clone of `file` with room for
    /// `depth` requests; `None` when that failed.
    fn open(
        &mut self,
        file: &File,
        depth: u32,
        batch: usize,
        pool: &AioContextPool,
    ) -> Option<&mut LinuxAioEngine> {
        if let WriteBatches::NotYet = self {
            let opened = clone_file(file, EngineKind::LinuxAio)
                .and_then(|f| LinuxAioEngine::for_buffered_batches(f, depth, pool));
            *self = match opened {
                Ok(writer) => {
                    log::info!(
                        "auto engine: turns of {batch} or more buffered writes go to one io_submit"
                    );
                    WriteBatches::Open(Box::new(writer))
                }
                Err(e) => {
                    log::warn!("auto engine: no Linux AIO context for write batches ({e}); writes stay inline");
                    WriteBatches::Failed
                }
            };
        }
        self.get_mut()
    }
}

impl AutoEngine {
    /// Whether `op`, submitted as request `self.turn` of a page-cache turn, is known already to
    /// go to the ring at `commit` (from the batch's size on, a kind the file system takes
    /// RWF_NOWAIT for), so it may go there now.
    pub(super) fn page_cache_straight_to_ring(&self, op: &IoOp) -> bool {
        self.turn >= self.tuning.batch_requests && self.nowait.takes_nowait(NowaitFlags::kind(op))
    }

    /// A page-cache file's turn: a batch goes to io_uring (kinds the file system lets it do
    /// without blocking) or, for writes it refuses RWF_NOWAIT for, to one `io_submit`; the rest
    /// inline first.
    pub(super) fn release_page_cache(&mut self, turn: &ThreadTurn) {
        let batch_requests = self.tuning.batch_requests;
        let batch = self.turn >= batch_requests;
        let lone = self.turn == 1 && self.alone_on_thread(turn);
        let write_batch = self.gate.is_open()
            && self.nowait.refuses_nowait(1)
            && self
                .held
                .iter()
                .filter(|r| matches!(r.op, IoOp::Write { .. }))
                .nth(batch_requests - 1)
                .is_some()
            && self.writer().is_some();
        std::mem::swap(&mut self.held, &mut self.spare);
        let mut held = std::mem::take(&mut self.spare);
        for mut request in held.drain(..) {
            let write = matches!(request.op, IoOp::Write { .. });
            if let (true, Some(writer)) = (write && write_batch, self.strategy.writer_mut()) {
                // The writer has the wrapped engine's depth, and `capacity` counts its
                // requests: it has room for every held one.
                if writer.capacity() > 0 {
                    self.stats.deferred += 1;
                    self.stats.batched_writes += 1;
                    if writer.submit(request).is_err() {
                        log::error!("auto engine: the write batch refused a request");
                    }
                    continue;
                }
            }
            // Writes the file system will not do with RWF_NOWAIT (ext4) block the ring's
            // submitter or serialize in its workers: those stay inline. Whether it will is
            // learnt from the first inline call of the kind: at depth every turn is a batch.
            let kind = usize::from(write);
            let to_ring = batch && self.nowait.takes_nowait(kind);
            if !to_ring {
                self.gate.count_request();
                if self.gate.is_open() {
                    let call = if lone { Call::Lone } else { Call::Turn };
                    match self.inline(request, call) {
                        None => continue,
                        Some(back) => request = back,
                    }
                }
            }
            self.stats.deferred += 1;
            if self.inner.submit(request).is_err() {
                log::error!("auto engine: the wrapped engine refused a request");
            }
        }
        self.spare = held;
    }

    /// The writer for batches of buffered writes, opened on first use; `None` when that failed
    /// (the writes stay inline) or the file is not a page-cache file wrapped around io_uring.
    fn writer(&mut self) -> Option<&mut LinuxAioEngine> {
        let Strategy::PageCache(batches) = &mut self.strategy else {
            return None;
        };
        batches.open(
            &self.file,
            self.depth,
            self.tuning.batch_requests,
            &self.aio_pool,
        )
    }

    /// Submits the turn's write batch and collects its completions: `io_submit` ran the
    /// buffered writes before it returned, so none is left in the kernel (the writer's
    /// completions signal no fd). A short write's remainder is resubmitted by `reap` and done
    /// by that call too, so reaping goes on while the ring has completions; what `io_submit`
    /// did not take (EAGAIN) stays unsubmitted, and the queue retries it on a timer
    /// (`unsubmitted`).
    pub(super) fn run_write_batch(&mut self, turn: &ThreadTurn) {
        let Some(writer) = self.strategy.writer_mut() else {
            return;
        };
        if writer.in_flight() == 0 {
            return;
        }
        writer.commit(turn);
        for _ in 0..MAX_WRITE_BATCH_REAP_ROUNDS {
            if writer.in_flight() == 0 || !writer.has_completions() {
                break;
            }
            writer.reap(&mut self.done, turn);
        }
    }
}
