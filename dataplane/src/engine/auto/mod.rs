//! The `Auto` engine: each read or write is tried inline on the iothread with
//! `preadv2`/`pwritev2` where the data is at hand (RWF_NOWAIT: page-cache hits), and what would
//! block goes to a wrapped asynchronous engine (io_uring, else Linux AIO for `O_DIRECT` files,
//! else Sync). An inline copy needs no thread hop; on a store that completes asynchronously,
//! trying inline costs a failed call per request or blocks the thread, so the inline gate
//! (`gate.rs`) stops trying while most attempts fail and probes again now and then.
//!
//! The file decides the `Strategy`, once: a page-cache file wrapped around io_uring holds each
//! turn for `commit`, where a batch goes to the ring (`buffered.rs`); an O_DIRECT file sends
//! inline what its device does fast or a request alone on the thread (`direct.rs`); any other
//! file tries each request inline as it is submitted. `engine::open` gives a file on tmpfs or
//! ramfs the Sync engine instead ([`in_memory`]), and wraps a block device that does its work in
//! the caller's context ([`completes_in_caller`]) around Linux AIO rather than io_uring.
//!
//! This file owns the engine, its strategy, the `IoEngine` contract and the ordering of flushes:
//! a flush goes to the wrapped engine only once every earlier request it holds has completed
//! (inline writes are in the page cache before their completion exists), so a flush never
//! completes before an earlier write, whichever path the write took. Host-dependent thresholds
//! are in [`AutoTuning`].

mod buffered;
mod direct;
mod file_kind;
mod gate;
mod inline;
mod sampler;
#[cfg(test)]
mod tests;
mod tuning;

use std::fs::File;
use std::os::unix::io::RawFd;

use super::info::{AutoInfo, EngineInfo, InlinePath};
use super::linux_aio::AioContextPool;
use super::{
    Completion, EngineKind, EngineStats, IoEngine, IoOp, IoRequest, SubmitError, ThreadTurn,
};
use buffered::WriteBatches;
use direct::{Direct, Handoff, Shallow};
use file_kind::is_direct;
pub use file_kind::{completes_in_caller, in_memory};
use gate::{Call, InlineGate};
use inline::NowaitFlags;
use sampler::CallSampler;
pub use tuning::AutoTuning;

/// How the engine serves its file, chosen once from how the file was opened and which engine
/// it wraps.
#[derive(Debug)]
enum Strategy {
    /// A page-cache file whose wrapped engine is not io_uring: each read or write is tried
    /// inline as it is submitted, and goes to the wrapped engine when that fails.
    EachInline,
    /// A page-cache file wrapped around io_uring: turns are held for `commit`, where a batch
    /// goes to the ring, or, for writes the file system refuses RWF_NOWAIT for, to one
    /// `io_submit` of this Linux AIO context ([`buffered`]).
    PageCache(WriteBatches),
    /// An O_DIRECT file: turns are held for `commit`, where what goes inline depends on what
    /// the device does ([`direct`]).
    Direct(Direct),
}

impl Strategy {
    /// O_DIRECT: what the inline calls learn of the device.
    fn sampler_mut(&mut self) -> Option<&mut CallSampler> {
        match self {
            Strategy::Direct(direct) => Some(&mut direct.sampler),
            Strategy::EachInline | Strategy::PageCache(_) => None,
        }
    }

    /// The Linux AIO context for write batches, once opened.
    fn writer(&self) -> Option<&super::linux_aio::LinuxAioEngine> {
        match self {
            Strategy::PageCache(batches) => batches.get(),
            Strategy::EachInline | Strategy::Direct(_) => None,
        }
    }

    /// The Linux AIO context for write batches, once opened.
    fn writer_mut(&mut self) -> Option<&mut super::linux_aio::LinuxAioEngine> {
        match self {
            Strategy::PageCache(batches) => batches.get_mut(),
            Strategy::EachInline | Strategy::Direct(_) => None,
        }
    }

    /// O_DIRECT: the Linux AIO engine beside the ring, if any.
    fn shallow(&self) -> Option<&Shallow> {
        match self {
            Strategy::Direct(direct) => direct.shallow(),
            Strategy::EachInline | Strategy::PageCache(_) => None,
        }
    }

    /// O_DIRECT: the Linux AIO engine beside the ring, if any.
    fn shallow_mut(&mut self) -> Option<&mut Shallow> {
        match self {
            Strategy::Direct(direct) => direct.shallow_mut(),
            Strategy::EachInline | Strategy::PageCache(_) => None,
        }
    }
}

/// Inline first, asynchronous for the rest.
pub struct AutoEngine {
    /// The file the inline calls use (a clone of the wrapped engine's).
    file: File,
    /// The wrapped asynchronous engine.
    inner: Box<dyn IoEngine>,
    /// How reads and writes are served.
    strategy: Strategy,
    /// Host-dependent thresholds.
    tuning: AutoTuning,
    /// Whether reads and writes are tried inline now.
    gate: InlineGate,
    /// The flags of the inline calls, per kind.
    nowait: NowaitFlags,
    /// Inline completions, handed out at the next `reap`.
    done: Vec<Completion>,
    /// Flushes waiting for the wrapped engine to drain.
    flushes: Vec<u64>,
    /// Reads and writes of the current turn, held for `commit` (O_DIRECT, and page-cache
    /// files whose batches io_uring serves better than inline calls).
    held: Vec<IoRequest>,
    /// Reads and writes submitted this turn, held or sent straight to the wrapped engine
    /// ([`AutoEngine::straight_to_wrapped`]); the next `commit` ends the turn.
    turn: usize,
    /// Scratch for `held` (its capacity is reused).
    spare: Vec<IoRequest>,
    /// The wrapped engine's in-flight count last added to the thread's total.
    async_reported: usize,
    /// The wrapped engine's last `reap` began with nothing in flight ([`reap_unless_quiet`]).
    inner_quiet: bool,
    /// The wrapped engine's depth (the write batches' and the shallow engine's too).
    depth: u32,
    /// Where reads and writes went.
    stats: EngineStats,
    /// `stats.inline + stats.deferred` at the last `commit`.
    committed: u64,
    /// Where the write batches' Linux AIO context comes from (the iothread's spares).
    aio_pool: AioContextPool,
}

impl std::fmt::Debug for AutoEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoEngine")
            .field("inner", &self.inner.info())
            .field("trying", &self.gate.is_open())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl AutoEngine {
    /// Inline on `file` (a clone of the wrapped engine's file), the rest to `inner`.
    pub fn new(file: File, inner: Box<dyn IoEngine>) -> Self {
        Self::with_inline(file, inner, true)
    }

    /// Like [`AutoEngine::new`], starting with inline attempts on or off (tests force the
    /// deferred path with `false`; it stays off until the next probe).
    pub fn with_inline(file: File, inner: Box<dyn IoEngine>, trying: bool) -> Self {
        let strategy = if is_direct(&file) {
            Strategy::Direct(Direct::new(if inner.kind() == EngineKind::LinuxAio {
                Handoff::AioBatches
            } else {
                Handoff::Wrapped(None)
            }))
        } else if inner.kind() == EngineKind::IoUring {
            Strategy::PageCache(WriteBatches::NotYet)
        } else {
            Strategy::EachInline
        };
        Self {
            depth: u32::try_from(inner.capacity()).unwrap_or(u32::MAX),
            strategy,
            tuning: AutoTuning::default(),
            gate: InlineGate::new(trying),
            nowait: NowaitFlags::new(),
            async_reported: 0,
            inner_quiet: false,
            held: Vec::new(),
            turn: 0,
            spare: Vec::new(),
            file,
            inner,
            done: Vec::new(),
            flushes: Vec::new(),
            stats: EngineStats::default(),
            committed: 0,
            aio_pool: AioContextPool::new(),
        }
    }

    /// Takes the Linux AIO context of the write batches (opened on first use) from `pool`, the
    /// iothread's spares, instead of a pool of the engine's own.
    pub fn with_aio_pool(mut self, pool: &AioContextPool) -> Self {
        self.aio_pool = pool.clone();
        self
    }

    /// Adds `shallow` (a Linux AIO engine on the same file) beside a wrapped io_uring, for an
    /// O_DIRECT device that sleeps for its completions (ignored for any other engine): a turn
    /// goes to it while the turn and the requests in flight are fewer than
    /// [`AutoTuning::batch_requests`], to the ring at depth.
    pub fn with_shallow(mut self, shallow: Box<dyn IoEngine>) -> Self {
        if self.inner.kind() == EngineKind::IoUring {
            if let Strategy::Direct(Direct {
                handoff: Handoff::Wrapped(slot),
                ..
            }) = &mut self.strategy
            {
                *slot = Some(Shallow {
                    engine: shallow,
                    quiet: false,
                });
            }
        }
        self
    }

    /// Replaces the default thresholds (see [`AutoTuning`]).
    pub fn with_tuning(mut self, tuning: AutoTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// Whether `op`, a read or write submitted as request `self.turn` of its turn, is known
    /// already to go to the wrapped engine at `commit`, so it may go there now rather than be
    /// held and copied in and out of the turn's list (see
    /// [`AutoEngine::direct_straight_to_wrapped`] and
    /// [`AutoEngine::page_cache_straight_to_ring`]).
    fn straight_to_wrapped(&self, op: &IoOp) -> bool {
        match &self.strategy {
            Strategy::Direct(direct) => self.direct_straight_to_wrapped(direct),
            Strategy::PageCache(_) => self.page_cache_straight_to_ring(op),
            Strategy::EachInline => false,
        }
    }

    /// Ends a turn: its held requests go inline or to an engine, as the strategy decides.
    fn release_held(&mut self, turn: &ThreadTurn) {
        if self.held.is_empty() {
            return;
        }
        match self.strategy {
            Strategy::PageCache(_) => self.release_page_cache(turn),
            Strategy::Direct(_) => self.release_direct(turn),
            Strategy::EachInline => {}
        }
    }

    /// Requests in the wrapped engine and the shallow one.
    fn async_in_flight(&self) -> usize {
        self.inner.in_flight() + self.shallow_in_flight()
    }

    /// Requests in the shallow engine not reaped yet.
    fn shallow_in_flight(&self) -> usize {
        self.strategy.shallow().map_or(0, |s| s.engine.in_flight())
    }

    /// Requests in the write batch's context not reaped yet.
    fn writer_in_flight(&self) -> usize {
        self.strategy.writer().map_or(0, |w| w.in_flight())
    }

    /// Publishes the asynchronous engines' in-flight count to the thread's total. An engine is
    /// dropped only once drained (its last `reap` published 0), or with its thread.
    fn publish_async(&mut self, turn: &ThreadTurn) {
        let now = self.async_in_flight();
        if now != self.async_reported {
            turn.note_async_in_flight(self.async_reported, now);
            self.async_reported = now;
        }
    }

    /// Hands waiting flushes to the wrapped engine once it has nothing else in flight.
    fn release_flushes(&mut self, turn: &ThreadTurn) {
        while !self.flushes.is_empty() && self.async_in_flight() + self.writer_in_flight() == 0 {
            let token = self.flushes.remove(0);
            if self
                .inner
                .submit(IoRequest {
                    op: IoOp::Flush,
                    token,
                })
                .is_err()
            {
                self.flushes.insert(0, token);
                return;
            }
            self.inner.commit(turn);
        }
    }
}

impl IoEngine for AutoEngine {
    fn submit(&mut self, mut request: IoRequest) -> Result<(), SubmitError> {
        if self.capacity() == 0 {
            return Err(SubmitError::Full);
        }
        let holds_turns = !matches!(self.strategy, Strategy::EachInline);
        match request.op {
            IoOp::Flush => {
                self.flushes.push(request.token);
                return Ok(());
            }
            IoOp::Read { .. } | IoOp::Write { .. } if holds_turns => {
                self.turn += 1;
                if self.straight_to_wrapped(&request.op) {
                    // `capacity` has room for it; a refusal leaves the queue to retry it.
                    let sent = self.inner.submit(request);
                    match sent {
                        Ok(()) => self.stats.deferred += 1,
                        Err(_) => self.turn -= 1,
                    }
                    return sent;
                }
                self.held.push(request);
                return Ok(());
            }
            IoOp::Read { .. } | IoOp::Write { .. } => {
                self.gate.count_request();
                if self.gate.is_open() {
                    match self.inline(request, Call::Turn) {
                        None => return Ok(()),
                        Some(back) => request = back,
                    }
                }
                self.stats.deferred += 1;
            }
            _ => {}
        }
        self.inner.submit(request)
    }

    /// Returns the reads and writes the turn started, inline or handed over (as the Sync engine
    /// counts its calls): the wrapped engine's count alone would make a drive whose requests
    /// all go inline report one "submission" per run.
    fn commit(&mut self, turn: &ThreadTurn) -> usize {
        self.release_held(turn);
        self.turn = 0;
        self.run_write_batch(turn);
        self.release_flushes(turn);
        self.inner.commit(turn);
        if let Some(shallow) = self.strategy.shallow_mut() {
            shallow.engine.commit(turn);
        }
        self.publish_async(turn);
        let started = self.stats.inline + self.stats.deferred;
        let n = started.saturating_sub(self.committed);
        self.committed = started;
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    fn reap(&mut self, out: &mut Vec<Completion>, turn: &ThreadTurn) -> usize {
        if let Some(writer) = self.strategy.writer_mut() {
            if writer.in_flight() > 0 {
                writer.reap(&mut self.done, turn);
            }
        }
        let mut n = self.done.len();
        out.append(&mut self.done);
        n += reap_unless_quiet(self.inner.as_mut(), &mut self.inner_quiet, out, turn);
        if let Some(shallow) = self.strategy.shallow_mut() {
            n += reap_unless_quiet(shallow.engine.as_mut(), &mut shallow.quiet, out, turn);
        }
        self.release_flushes(turn);
        self.publish_async(turn);
        n
    }

    fn completion_fds(&self) -> Vec<RawFd> {
        let mut fds = self.inner.completion_fds();
        if let Some(shallow) = self.strategy.shallow() {
            fds.extend(shallow.engine.completion_fds());
        }
        fds
    }

    fn capacity(&self) -> usize {
        if !self.flushes.is_empty() {
            // Nothing new until the flush went: later writes must not keep it waiting.
            return 0;
        }
        self.inner.capacity().saturating_sub(
            self.done.len() + self.held.len() + self.writer_in_flight() + self.shallow_in_flight(),
        )
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight()
            + self.done.len()
            + self.flushes.len()
            + self.held.len()
            + self.writer_in_flight()
            + self.shallow_in_flight()
    }

    fn has_completions(&self) -> bool {
        !self.done.is_empty()
            || self.inner.has_completions()
            || self.strategy.writer().is_some_and(|w| w.has_completions())
            || self
                .strategy
                .shallow()
                .is_some_and(|s| s.engine.has_completions())
    }

    fn poll_begin(&mut self) {
        self.inner.poll_begin();
        if let Some(shallow) = self.strategy.shallow_mut() {
            shallow.engine.poll_begin();
        }
    }

    fn poll_end(&mut self) {
        self.inner.poll_end();
        if let Some(shallow) = self.strategy.shallow_mut() {
            shallow.engine.poll_end();
        }
    }

    fn unsubmitted(&self) -> usize {
        self.inner.unsubmitted()
            + self.strategy.writer().map_or(0, |w| w.unsubmitted())
            + self
                .strategy
                .shallow()
                .map_or(0, |s| s.engine.unsubmitted())
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Auto
    }

    fn info(&self) -> EngineInfo {
        let inline = match &self.strategy {
            Strategy::Direct(Direct {
                handoff: Handoff::AioBatches,
                ..
            }) => InlinePath::DirectSingles,
            Strategy::Direct(_) => InlinePath::Direct,
            Strategy::PageCache(_) => InlinePath::PageCache,
            Strategy::EachInline => InlinePath::EveryRequest,
        };
        EngineInfo::Auto(AutoInfo {
            inline,
            wrapped: Some(Box::new(self.inner.info())),
            beside: self
                .strategy
                .shallow()
                .map(|shallow| Box::new(shallow.engine.info())),
            fast_call_us: self.tuning.fast_direct_call_ns / 1000,
            batch_requests: self.tuning.batch_requests,
        })
    }

    fn stats(&self) -> EngineStats {
        self.stats
    }
}

/// Reaps `engine` unless its last reap also began with nothing in flight (`quiet`): that reap
/// cleared its completion fd, and nothing can signal it before the next submission (reading the
/// fd is a syscall per turn on a store where every request goes inline).
fn reap_unless_quiet(
    engine: &mut dyn IoEngine,
    quiet: &mut bool,
    out: &mut Vec<Completion>,
    turn: &ThreadTurn,
) -> usize {
    let busy = engine.in_flight() > 0;
    if !busy && *quiet {
        return 0;
    }
    *quiet = !busy;
    engine.reap(out, turn)
}
