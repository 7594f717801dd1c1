//! The `Auto` engine: each read or write is first tried inline on the iothread with
//! `preadv2`/`pwritev2` and `RWF_NOWAIT`, which succeeds only when it will not block (page-cache
//! hits, tmpfs); what would block goes to a wrapped asynchronous engine (io_uring, else Linux AIO
//! for `O_DIRECT` files, else Sync).
//!
//! On a file whose data is in memory, io_uring hands each read to an io-wq worker that must find
//! a CPU while the guest's vCPU and the polling iothread hold the cores; the inline path does the
//! copy at once, with no thread hop. On a store that completes asynchronously (`O_DIRECT` on a
//! device), trying inline costs a failed syscall per request, or blocks the thread: the engine
//! watches what its attempts do and stops trying while most of them fail or take longer than
//! [`SLOW_INLINE_NS`] ([`SLOW_LONE_NS`] for a request alone on the thread), probing again
//! after [`MIN_REPROBE_REQUESTS`] requests, then after twice as many each time the probe fails
//! too, up to [`REPROBE_REQUESTS`].
//!
//! tmpfs refuses `RWF_NOWAIT` (EOPNOTSUPP, Linux 6.18), but its reads and writes are memory
//! copies that do not wait for a device: `engine::open` gives a file on tmpfs or ramfs
//! ([`in_memory`]) the Sync engine, every request inline, instead of an `AutoEngine`. A buffered
//! file on another file system that refuses the flag (ext4's writes) gets inline calls without
//! it: page-cache copies, which wait for no device.
//!
//! A block device that does its work in the caller's context (zram, a RAM disk: found at open by
//! [`completes_in_caller`]) is wrapped around Linux AIO rather than io_uring: io_uring hands a
//! device without non-blocking submission to its worker threads, while `io_submit` runs a whole
//! batch in one call. Single requests go inline there, turns of [`RING_BATCH`] or more to
//! `io_submit`.
//!
//! An `O_DIRECT` file on a device that sleeps for its completions (NVMe, a loop device) is
//! wrapped around io_uring with a Linux AIO engine beside it ([`AutoEngine::with_shallow`]):
//! while the turn and the requests in flight are fewer than [`RING_BATCH`] (QD1 to QD3), the
//! requests go to Linux AIO, whose completions this thread reads from a mapped ring; at depth
//! they go to the ring, which batches better. Both engines' fds wake the thread.
//!
//! A page-cache file whose file system refuses RWF_NOWAIT writes (ext4) gets its writes inline
//! without the flag, one `pwritev2` each; a turn with [`RING_BATCH`] or more of them goes instead
//! to one `io_submit` of a Linux AIO context opened for them on first use, which runs buffered
//! writes before it returns: one syscall for the turn (io_uring would hand them to its workers).
//! On a page-cache file, a request alone on the thread (the only one of its turn, nothing in
//! flight, no other queue on the thread) whose RWF_NOWAIT call misses the cache is retried
//! without the flag: the miss waits for the device on the iothread, as with Sync, instead of in
//! an io_uring worker.
//!
//! A turn that is known to go to the wrapped engine (at depth) is sent there request by request
//! as it is submitted, not held for `commit` ([`AutoEngine::straight_to_wrapped`]).
//!
//! Ordering: a flush goes to the wrapped engine only once every earlier request it holds has
//! completed (inline writes are in the page cache before their completion exists), so a flush
//! never completes before an earlier write, whichever path the write took.

use std::fs::File;
use std::os::unix::io::{AsRawFd, RawFd};
use std::time::Instant;

use super::{as_iovecs, Completion, EngineKind, IoEngine, IoOp, IoRequest, SubmitError};

/// Attempts per decision window.
const WINDOW: u32 = 64;
/// Inline attempts that may fail (EAGAIN or slow) per window before inline is switched off.
const MAX_FAILED: u32 = WINDOW * 3 / 4;
/// An inline call that takes longer than this blocked the thread (O_DIRECT on a device
/// completes synchronously even with RWF_NOWAIT): it counts as a failure.
pub const SLOW_INLINE_NS: u64 = 20_000;
/// O_DIRECT: a request alone on the thread holds up nothing when it starts, only requests that
/// arrive on other queues while it runs; its call counts as failed only past this (a disk, a
/// network store). At [`SLOW_INLINE_NS`], a busy host's preemptions made loop-device calls at
/// QD1 "slow" often enough to switch inline off: 16 % of the requests went to io_uring and were
/// polled for.
pub const SLOW_LONE_NS: u64 = 500_000;
/// O_DIRECT: an inline call that takes less than this on average (zram, or a device that
/// completes in the caller's context) is as good as an asynchronous one at any depth; a slower
/// one (a loop device, NVMe waiting for its interrupt) serializes requests the asynchronous
/// engine would overlap, so only a request alone in its turn goes inline.
pub const FAST_DIRECT_NS: u64 = 4_000;
/// A turn with at least this many requests on a page-cache file goes to io_uring whole: the
/// ring copies cached pages in the submitting call (one syscall for the batch, where inline
/// takes one per request) and hands only misses to its workers.
pub const RING_BATCH: usize = 4;
/// O_DIRECT: one inline call in this many also reads the thread's CPU clock (a syscall), to
/// learn whether the device completes in the caller's context.
pub const CPU_SAMPLE_EVERY: u32 = 64;
/// O_DIRECT: after this many samples of the CPU clock, one inline call in
/// [`CPU_SAMPLE_EVERY_SETTLED`] samples it. A sample reads the clock twice (a syscall each,
/// 1.2 µs here): at one call in 64 it lay in the p99 of inline reads on zram (6.7-6.9 µs
/// against Sync's 4.8-6.1 at QD1).
pub const CPU_SAMPLES_EARLY: u32 = 16;
/// See [`CPU_SAMPLES_EARLY`]: a device whose behaviour changes is noticed within a few
/// thousand calls.
pub const CPU_SAMPLE_EVERY_SETTLED: u32 = 1024;
/// O_DIRECT: calls that keep the thread on its CPU at least this share of their time (‰) do the
/// device's work in the caller's context (zram, a RAM disk): nothing is gained by handing them to
/// another thread, so every request goes inline at any depth. Calls that sleep (the thread waits
/// for an interrupt: NVMe, a loop device's worker) go inline only when alone.
pub const ON_CPU_PERMILLE: u32 = 750;
/// O_DIRECT: after this many turns whose requests are not inline, the first of a turn goes
/// inline as a probe of the device (its CPU share is sampled). Each probe that finds the device
/// sleeping in its calls doubles the gap, up to [`MAX_DIRECT_PROBE_TURNS`]: at depth a probe
/// waits behind the requests the device already holds, and the thread with it (on the loop
/// device at QD32: median 37 µs, p90 87 µs; on a slower device, milliseconds).
pub const DIRECT_PROBE_TURNS: u32 = 256;
/// The longest gap between two probes of a sleeping device (about one every few seconds at
/// depth).
pub const MAX_DIRECT_PROBE_TURNS: u32 = 65_536;
/// While inline is off, one window of attempts probes again after at most this many requests.
pub const REPROBE_REQUESTS: u32 = 4096;
/// The first probe after inline was switched off (a window that failed once, e.g. while the
/// device warmed up, costs 256 requests on the deferred path, not 4,096); each failed probe
/// doubles the wait up to [`REPROBE_REQUESTS`], a passing window resets it.
pub const MIN_REPROBE_REQUESTS: u32 = 256;
/// Reads [`completes_in_caller`] times (the median decides).
const CALLER_PROBE_READS: usize = 9;

/// Counters of the inline path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InlineStats {
    /// Reads and writes completed inline.
    pub inline: u64,
    /// Reads and writes handed to the wrapped engine.
    pub deferred: u64,
    /// Inline attempts that returned EAGAIN, transferred less than asked, or were slow (a slow
    /// attempt that completed counts in `inline` too).
    pub failed: u64,
    /// Inline attempts made (each `preadv2`/`pwritev2` call).
    pub attempts: u64,
    /// Buffered writes run by one `io_submit` per turn (counted in `deferred` too).
    pub batched_writes: u64,
    /// O_DIRECT: reads and writes handed to the Linux AIO engine beside the ring, because their
    /// turn and the requests in flight were fewer than [`RING_BATCH`] (counted in `deferred`
    /// too).
    pub shallow: u64,
}

/// Why a request goes inline: what its call may take before it counts as failed, and whether
/// it samples the CPU clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// One of a turn's requests: every request inline, or a page-cache copy.
    Turn,
    /// O_DIRECT: the first of a turn, to learn what the device does (its CPU share is sampled).
    Probe,
    /// A request alone on the thread ([`SLOW_LONE_NS`]); on a page-cache file, a miss is
    /// retried without RWF_NOWAIT (it waits for the device on the thread).
    Lone,
}

impl Call {
    /// Whether a call that took `took_ns` blocked the thread too long, and counts as failed.
    fn too_slow(self, took_ns: u64) -> bool {
        took_ns
            > match self {
                Call::Lone => SLOW_LONE_NS,
                Call::Turn | Call::Probe => SLOW_INLINE_NS,
            }
    }
}

/// Inline first, asynchronous for the rest.
pub struct AutoEngine {
    file: File,
    inner: Box<dyn IoEngine>,
    /// Inline completions, handed out at the next `reap`.
    done: Vec<Completion>,
    /// Flushes waiting for the wrapped engine to drain.
    flushes: Vec<u64>,
    /// Whether reads and writes are tried inline now.
    trying: bool,
    /// Attempts and failures in the current window.
    attempts: u32,
    failures: u32,
    /// Requests since inline was switched off.
    skipped: u32,
    /// Requests to skip before the next probe (0 while inline passes its windows).
    reprobe_after: u32,
    /// The flags of the inline calls for reads ([0]) and writes ([1]): RWF_NOWAIT, or 0 where
    /// the file system or device refuses the flag (a buffered file's page-cache copies wait
    /// for no device; an O_DIRECT call is timed, and slow ones switch inline off).
    rwf: [libc::c_int; 2],
    /// An inline read ([0]) or write ([1]) has been tried, so `rwf` says whether the file takes
    /// RWF_NOWAIT for that kind (until then a page-cache file's batches try one inline first).
    rwf_known: [bool; 2],
    /// The file was opened with O_DIRECT: an inline call waits for the device (RWF_NOWAIT only
    /// keeps it from queueing), so only a request that is alone goes inline.
    direct: bool,
    /// Reads and writes of the current turn, held for `commit` (O_DIRECT, and page-cache
    /// files whose batches io_uring serves better than inline calls).
    held: Vec<IoRequest>,
    /// Reads and writes submitted this turn, held or sent straight to the wrapped engine
    /// ([`AutoEngine::straight_to_wrapped`]); the next `commit` ends the turn.
    turn: usize,
    /// A page-cache file (not tmpfs, not O_DIRECT) wrapped around io_uring: a batch of
    /// [`RING_BATCH`] or more requests goes to the ring.
    ring_batches: bool,
    /// The wrapped engine's in-flight count last added to the thread's total.
    async_reported: usize,
    /// The wrapped engine's last `reap` began with nothing in flight ([`reap_unless_quiet`]).
    inner_quiet: bool,
    /// Scratch for `held` (its capacity is reused).
    spare: Vec<IoRequest>,
    /// O_DIRECT: the average duration of an inline call (ns, weight 1/8).
    inline_ns: u64,
    /// O_DIRECT: the average share of an inline call spent on the CPU (‰, weight 1/4), from
    /// one call in [`CPU_SAMPLE_EVERY`], later [`CPU_SAMPLE_EVERY_SETTLED`]; `None` before the
    /// first sample.
    on_cpu_permille: Option<u32>,
    /// O_DIRECT: inline calls so far (for the sampling).
    direct_calls: u32,
    /// O_DIRECT: samples of the CPU clock so far (saturating).
    cpu_samples: u32,
    /// O_DIRECT: turns since the last probe.
    direct_turns: u32,
    /// O_DIRECT: turns between two probes now (doubles while probes find the device sleeping).
    probe_gap: u32,
    /// O_DIRECT wrapped around Linux AIO: a device completing in the caller's context takes a
    /// turn's batch in one `io_submit` (cheaper than a call per request).
    aio_batches: bool,
    /// A page-cache file whose file system refuses RWF_NOWAIT writes: a turn's writes go to one
    /// `io_submit` here (opened on first use; `Failed` when that failed: inline then).
    write_batches: WriteBatches,
    /// O_DIRECT on a device that sleeps for its completions, beside the wrapped io_uring: a
    /// Linux AIO engine that takes a turn when it and the requests in flight are fewer than
    /// [`RING_BATCH`] (see [`AutoEngine::with_shallow`]). Its requests count against the
    /// wrapped engine's depth.
    shallow: Option<Box<dyn IoEngine>>,
    /// The shallow engine's last `reap` began with nothing in flight ([`reap_unless_quiet`]).
    shallow_quiet: bool,
    /// The wrapped engine's depth (the writer's too).
    depth: u32,
    stats: InlineStats,
    /// `stats.inline + stats.deferred` at the last `commit`.
    committed: u64,
}

/// The Linux AIO context for batches of buffered writes.
enum WriteBatches {
    NotYet,
    Open(Box<super::linux_aio::LinuxAioEngine>),
    Failed,
}

impl WriteBatches {
    /// The writer, once opened.
    fn get(&self) -> Option<&super::linux_aio::LinuxAioEngine> {
        match self {
            WriteBatches::Open(writer) => Some(writer),
            WriteBatches::NotYet | WriteBatches::Failed => None,
        }
    }

    fn get_mut(&mut self) -> Option<&mut super::linux_aio::LinuxAioEngine> {
        match self {
            WriteBatches::Open(writer) => Some(writer),
            WriteBatches::NotYet | WriteBatches::Failed => None,
        }
    }
}

impl std::fmt::Debug for AutoEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoEngine")
            .field("inner", &self.inner.describe())
            .field("trying", &self.trying)
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
        let direct = is_direct(&file);
        let ring_batches = !direct && inner.kind() == EngineKind::IoUring;
        let aio_batches = direct && inner.kind() == EngineKind::LinuxAio;
        Self {
            write_batches: WriteBatches::NotYet,
            shallow: None,
            shallow_quiet: false,
            depth: u32::try_from(inner.capacity()).unwrap_or(u32::MAX),
            ring_batches,
            aio_batches,
            async_reported: 0,
            inner_quiet: false,
            rwf: [libc::RWF_NOWAIT; 2],
            rwf_known: [false; 2],
            direct,
            held: Vec::new(),
            turn: 0,
            spare: Vec::new(),
            inline_ns: 0,
            on_cpu_permille: None,
            direct_calls: 0,
            cpu_samples: 0,
            direct_turns: 0,
            probe_gap: DIRECT_PROBE_TURNS,
            file,
            inner,
            done: Vec::new(),
            flushes: Vec::new(),
            trying,
            attempts: 0,
            failures: 0,
            skipped: 0,
            reprobe_after: 0,
            stats: InlineStats::default(),
            committed: 0,
        }
    }

    /// Adds `shallow` (a Linux AIO engine on the same file) beside a wrapped io_uring, for an
    /// O_DIRECT device that sleeps for its completions (ignored for any other engine): a turn
    /// goes to it when the turn and the requests in flight are fewer than [`RING_BATCH`] (QD1 to
    /// QD3), to the ring at depth. A request alone costs less there: its completion is written
    /// to a ring this thread reads, where io_uring's needs task work run by this thread; a batch
    /// costs less in the ring. On the loop device, 4 queues, side by side: at QD1 the dataplane
    /// CPU per I/O was 5.20 µs with Linux AIO against 5.63 µs with io_uring for reads, 5.27
    /// against 5.74 for writes; at QD32 reads took 1.74 against 1.60 µs.
    pub fn with_shallow(mut self, shallow: Box<dyn IoEngine>) -> Self {
        if self.direct && self.inner.kind() == EngineKind::IoUring {
            self.shallow = Some(shallow);
        }
        self
    }

    /// What the inline path did so far.
    pub fn inline_stats(&self) -> InlineStats {
        self.stats
    }

    /// Tries `op` (a read or write) inline; returns the byte count when it completed in full.
    /// A [`Call::Probe`] samples the CPU clock whatever the sampling period says.
    fn try_inline(&mut self, op: &IoOp, call: Call) -> Option<i64> {
        let probe = call == Call::Probe;
        let (offset, iovecs, read) = match op {
            IoOp::Read { offset, iovecs } => (*offset, iovecs, true),
            IoOp::Write { offset, iovecs } => (*offset, iovecs, false),
            _ => return None,
        };
        let kind = usize::from(!read);
        let rwf = self.rwf[kind];
        // Only an O_DIRECT call, or a page-cache miss retried for a lone request (below), waits
        // for the device: the others are memory copies (a RWF_NOWAIT call cannot block; a call
        // without the flag on a file system that refuses it for buffered writes is what the
        // Sync engine does, and io_uring would hand it to a worker thread, slower: measured on
        // ext4, 26k vs 48k IOPS at QD1).
        let total: usize = iovecs.iter().map(|v| v.len).sum();
        let iov = as_iovecs(iovecs);
        let off = libc::off_t::try_from(offset).ok()?;
        if iov.is_empty() || iov.len() > libc::UIO_MAXIOV as usize {
            return None;
        }
        let fd: RawFd = self.file.as_raw_fd();
        let sample_cpu =
            self.direct && (probe || cpu_sample_due(self.direct_calls, self.cpu_samples));
        if self.direct {
            self.direct_calls = self.direct_calls.wrapping_add(1);
        }
        // A device known to work in the caller's context is timed only when its CPU share is
        // sampled (its calls cannot block on anything but the CPU).
        let timed = self.direct && (sample_cpu || !self.on_cpu());
        let cpu0 = if sample_cpu {
            crate::stats::thread_cpu_ns()
        } else {
            0
        };
        let start = timed.then(Instant::now);
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
        self.rwf_known[kind] = true;
        if r < 0 && super::last_errno() == libc::EOPNOTSUPP && rwf != 0 {
            let what = if read { "reads" } else { "writes" };
            self.stats.failed += 1;
            // Buffered: page-cache copies, inline without the flag. O_DIRECT (zram and other
            // bio-based devices refuse the flag): inline without it, timed, so a device slower
            // than SLOW_INLINE_NS switches inline off and a fast one keeps it for every request.
            log::info!(
                "auto engine: the file or device refuses RWF_NOWAIT {what}; inline without it"
            );
            self.rwf[kind] = 0;
            // A page-cache copy without the flag does not wait for a device: done at once.
            return if self.direct {
                None
            } else {
                self.try_inline(op, call)
            };
        }
        let mut took = start.map_or(0, |s| s.elapsed().as_nanos() as u64);
        // A page-cache miss of a request alone on the thread waits for the device here, as
        // with Sync, since the thread has nothing else to do, instead of in an io_uring worker
        // while this thread polls the ring (cold ext4, 4k reads at QD1 ×1: 38.0 µs of dataplane
        // CPU per I/O through the ring, 13.2 this way, as Sync, for the same IOPS). Timed: a
        // slow device switches inline off.
        let lone_miss = call == Call::Lone && !self.direct && rwf != 0;
        if r < 0 && lone_miss && super::last_errno() == libc::EAGAIN {
            let retry = Instant::now();
            r = call_with(0);
            took = retry.elapsed().as_nanos() as u64;
        }
        if sample_cpu && r >= 0 && took > 0 {
            self.cpu_samples = self.cpu_samples.saturating_add(1);
            let cpu = crate::stats::thread_cpu_ns().saturating_sub(cpu0);
            let permille = cpu_permille(cpu, took);
            self.on_cpu_permille = Some(match self.on_cpu_permille {
                None => permille,
                Some(p) => p - p / 4 + permille / 4,
            });
        }
        let slow = call.too_slow(took);
        if timed && r >= 0 {
            self.inline_ns = if self.inline_ns == 0 {
                took
            } else {
                self.inline_ns - (self.inline_ns >> 3) + (took >> 3)
            };
        }
        self.attempts += 1;
        let full = r >= 0 && r as usize == total;
        if !full || slow {
            self.failures += 1;
            self.stats.failed += 1;
        }
        if self.attempts >= WINDOW {
            if self.failures > MAX_FAILED {
                log::debug!(
                    "auto engine: {} of {} inline attempts failed; deferring",
                    self.failures,
                    self.attempts
                );
                self.trying = false;
                self.skipped = 0;
                self.reprobe_after =
                    (self.reprobe_after * 2).clamp(MIN_REPROBE_REQUESTS, REPROBE_REQUESTS);
            } else {
                self.reprobe_after = 0;
            }
            self.attempts = 0;
            self.failures = 0;
        }
        if full {
            Some(r as i64)
        } else {
            // EAGAIN, another error, a short transfer (partly cached, or end of file): the
            // wrapped engine does the whole request with its full semantics.
            None
        }
    }

    /// O_DIRECT: the sampled calls keep the thread on its CPU (the device works in the caller's
    /// context).
    fn on_cpu(&self) -> bool {
        self.on_cpu_permille.is_some_and(|p| p >= ON_CPU_PERMILLE)
    }

    /// O_DIRECT: inline costs no more than handing over (the device works in the caller's
    /// context, or its calls average under [`FAST_DIRECT_NS`]).
    fn fast(&self) -> bool {
        self.on_cpu() || (self.inline_ns != 0 && self.inline_ns < FAST_DIRECT_NS)
    }

    /// Whether `op`, a read or write submitted as request `self.turn` of its turn, is known
    /// already to go to the wrapped engine at `commit`, so it may go there now rather than be
    /// held and copied in and out of the turn's list (criterion `engines`, Auto/32 against
    /// IoUring/32 on ext4, medians of 3 alternated rounds: 1.10x before, 0.89x after).
    /// - O_DIRECT on a device that sleeps for its calls (not [`AutoEngine::fast`]): the first
    ///   request of a turn is held (it may go inline, alone or as a probe); a later one goes to
    ///   the wrapped engine (the ring, or Linux AIO for a device not yet known to complete in
    ///   the caller's context) once the requests in flight (this turn's sent ones among them), the held ones
    ///   and itself reach [`RING_BATCH`] (below that the turn may go to the Linux AIO engine
    ///   beside the ring).
    /// - A page-cache file: from the [`RING_BATCH`]th request of a turn on, a kind the file
    ///   system takes RWF_NOWAIT for goes to the ring (the whole batch does, at `commit`).
    fn straight_to_wrapped(&self, op: &IoOp) -> bool {
        if self.direct {
            return !self.held.is_empty()
                && !self.fast()
                && (self.shallow.is_none()
                    || self.async_in_flight() + self.held.len() + 1 >= RING_BATCH);
        }
        let kind = usize::from(matches!(op, IoOp::Write { .. }));
        self.ring_batches && self.turn >= RING_BATCH && self.rwf_known[kind] && self.rwf[kind] != 0
    }

    /// Does `request` inline (its completion waits for the next `reap`); returns it when it
    /// must go to the wrapped engine instead.
    fn inline(&mut self, request: IoRequest, call: Call) -> Option<IoRequest> {
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

    /// O_DIRECT: a request alone (nothing else this turn, nothing in flight) goes inline; the
    /// others go to the wrapped engine, which overlaps them.
    fn release_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        if !self.direct {
            self.release_buffered();
            return;
        }
        // The turn's requests already sent to the ring count in `async_in_flight`.
        let turn = self.held.len();
        let fast = self.fast();
        if fast && self.aio_batches && self.held.len() >= RING_BATCH {
            // The device works in the caller's context: one io_submit for the whole turn (the
            // loop below) beats a call per request.
        } else if fast && self.trying {
            // Inline costs no more than handing over: every request goes inline.
            // `spare` keeps its capacity turn after turn: no allocation.
            std::mem::swap(&mut self.held, &mut self.spare);
            let mut held = std::mem::take(&mut self.spare);
            for request in held.drain(..) {
                self.count_probe();
                if let Some(request) = self.inline(request, Call::Turn) {
                    self.held.push(request);
                }
            }
            self.spare = held;
            if self.held.is_empty() {
                return;
            }
        } else {
            // A request alone on the thread goes inline; so does the first of a turn now and
            // then (always until the first CPU sample), to learn whether the device completes
            // in the caller's context: at depth no request is ever alone.
            self.direct_turns = self.direct_turns.saturating_add(1);
            let lone = self.held.len() == 1 && self.alone_on_thread();
            let probe = self.on_cpu_permille.is_none() || self.direct_turns >= self.probe_gap;
            if lone {
                self.count_probe();
            }
            if self.trying && (lone || probe) {
                let request = self.held.remove(0);
                let back = self.inline(request, if lone { Call::Lone } else { Call::Probe });
                if probe && self.on_cpu_permille.is_some() {
                    self.direct_turns = 0;
                    self.probe_gap = if self.on_cpu() {
                        DIRECT_PROBE_TURNS
                    } else {
                        self.probe_gap.saturating_mul(2).min(MAX_DIRECT_PROBE_TURNS)
                    };
                }
                match back {
                    None if self.held.is_empty() => return,
                    None => {}
                    Some(request) => self.held.insert(0, request),
                }
            }
        }
        // Shallow: the turn and what this queue has in flight stay under RING_BATCH (QD1 to
        // QD3); at depth every turn goes to the ring, without mixing two engines' completions.
        let to_shallow = self.shallow.is_some() && self.async_in_flight() + turn < RING_BATCH;
        for request in self.held.drain(..) {
            self.stats.deferred += 1;
            let engine = match self.shallow.as_mut() {
                Some(shallow) if to_shallow => {
                    self.stats.shallow += 1;
                    shallow
                }
                _ => &mut self.inner,
            };
            if engine.submit(request).is_err() {
                // `capacity` counted the held requests against the wrapped engine's room (the
                // shallow engine has the same depth, and its requests count there too).
                log::error!("auto engine: the wrapped engine refused a request");
            }
        }
    }

    /// The thread serves this queue alone and nothing is in flight: an inline call that waits
    /// for the device holds up no other request. With other queues on the thread, one that has
    /// no work when the call starts may get some while the call waits: on a busy host (one
    /// CPU-bound process beside the VM) the loop device's worker waits for a core, and 4-queue
    /// QD1 reads went inline 20-90 % of the time, at 0.3-0.6× the IOPS of io_uring.
    fn alone_on_thread(&self) -> bool {
        self.async_in_flight() == 0
            && crate::iothread::turn::async_in_flight() == 0
            && crate::iothread::turn::ready_handlers() <= 1
            && crate::iothread::turn::handlers() <= 1
    }

    /// Requests in the wrapped engine and the shallow one.
    fn async_in_flight(&self) -> usize {
        self.inner.in_flight() + self.shallow_in_flight()
    }

    /// Requests in the shallow engine not reaped yet.
    fn shallow_in_flight(&self) -> usize {
        self.shallow.as_ref().map_or(0, |s| s.in_flight())
    }

    /// Publishes the asynchronous engines' in-flight count to the thread's total.
    fn publish_async(&mut self) {
        let now = self.async_in_flight();
        if now != self.async_reported {
            crate::iothread::turn::note_async_in_flight(self.async_reported, now);
            self.async_reported = now;
        }
    }

    /// A page-cache file's turn: a batch goes to io_uring (kinds the file system lets it do
    /// without blocking), the rest inline first.
    fn release_buffered(&mut self) {
        let batch = self.turn >= RING_BATCH;
        let lone = self.turn == 1 && self.alone_on_thread();
        let write_batch = self.trying
            && self.rwf_known[1]
            && self.rwf[1] == 0
            && self
                .held
                .iter()
                .filter(|r| matches!(r.op, IoOp::Write { .. }))
                .nth(RING_BATCH - 1)
                .is_some()
            && self.writer().is_some();
        std::mem::swap(&mut self.held, &mut self.spare);
        let mut held = std::mem::take(&mut self.spare);
        for mut request in held.drain(..) {
            let write = matches!(request.op, IoOp::Write { .. });
            if let (true, Some(writer)) = (write && write_batch, self.write_batches.get_mut()) {
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
            // learnt from the first inline call of the kind: at depth every turn is a batch,
            // and ext4's writes went to the ring for the whole run (26k IOPS, 45k inline).
            let kind = usize::from(write);
            let to_ring = batch && self.rwf[kind] != 0 && self.rwf_known[kind];
            if !to_ring {
                self.count_probe();
                if self.trying {
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

    /// The writer for batches of buffered writes, opened on first use (on this thread); `None`
    /// when that failed (the writes stay inline).
    fn writer(&mut self) -> Option<&mut super::linux_aio::LinuxAioEngine> {
        if let WriteBatches::NotYet = self.write_batches {
            let opened = self
                .file
                .try_clone()
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    super::linux_aio::LinuxAioEngine::for_buffered_batches(f, self.depth)
                        .map_err(|e| e.to_string())
                });
            self.write_batches = match opened {
                Ok(writer) => {
                    log::info!("auto engine: turns of {RING_BATCH} or more buffered writes go to one io_submit");
                    WriteBatches::Open(Box::new(writer))
                }
                Err(e) => {
                    log::warn!("auto engine: no Linux AIO context for write batches ({e}); writes stay inline");
                    WriteBatches::Failed
                }
            };
        }
        self.write_batches.get_mut()
    }

    /// Submits the turn's write batch and collects its completions: `io_submit` ran the
    /// buffered writes before it returned, so none is left in the kernel (the writer's
    /// completions signal no fd). A short write's remainder is resubmitted by `reap` and done
    /// by that call too, so reaping goes on while the ring has completions (bounded: each round
    /// writes at least a byte or ends the request); what `io_submit` did not take (EAGAIN)
    /// stays unsubmitted, and the queue retries it on a timer (`unsubmitted`).
    fn run_write_batch(&mut self) {
        const MAX_ROUNDS: usize = 1024;
        let Some(writer) = self.write_batches.get_mut() else {
            return;
        };
        if writer.in_flight() == 0 {
            return;
        }
        writer.commit();
        for _ in 0..MAX_ROUNDS {
            if writer.in_flight() == 0 || !writer.has_completions() {
                break;
            }
            writer.reap(&mut self.done);
        }
    }

    /// Requests in the write batch's context not reaped yet.
    fn writer_in_flight(&self) -> usize {
        self.write_batches.get().map_or(0, |w| w.in_flight())
    }

    /// Counts a request while inline is off; switches it back on for a probe now and then.
    fn count_probe(&mut self) {
        if !self.trying {
            self.skipped += 1;
            if self.skipped >= self.reprobe_after {
                self.trying = true;
                self.attempts = 0;
                self.failures = 0;
            }
        }
    }

    /// Hands waiting flushes to the wrapped engine once it has nothing else in flight.
    fn release_flushes(&mut self) {
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
            self.inner.commit();
        }
    }
}

impl Drop for AutoEngine {
    fn drop(&mut self) {
        crate::iothread::turn::note_async_in_flight(self.async_reported, 0);
    }
}

impl IoEngine for AutoEngine {
    fn submit(&mut self, mut request: IoRequest) -> Result<(), SubmitError> {
        if self.capacity() == 0 {
            return Err(SubmitError::Full);
        }
        match request.op {
            IoOp::Flush => {
                self.flushes.push(request.token);
                return Ok(());
            }
            IoOp::Read { .. } | IoOp::Write { .. } if self.direct || self.ring_batches => {
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
                self.count_probe();
                if self.trying {
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
    /// counts its calls): the wrapped engine's count alone made a drive whose requests all go
    /// inline report one "submission" per run, and a batch mean of its whole request count.
    fn commit(&mut self) -> usize {
        self.release_held();
        self.turn = 0;
        self.run_write_batch();
        self.release_flushes();
        self.inner.commit();
        if let Some(shallow) = self.shallow.as_mut() {
            shallow.commit();
        }
        self.publish_async();
        let started = self.stats.inline + self.stats.deferred;
        let n = started.saturating_sub(self.committed);
        self.committed = started;
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
        if let Some(writer) = self.write_batches.get_mut() {
            if writer.in_flight() > 0 {
                writer.reap(&mut self.done);
            }
        }
        let mut n = self.done.len();
        out.append(&mut self.done);
        n += reap_unless_quiet(self.inner.as_mut(), &mut self.inner_quiet, out);
        if let Some(shallow) = self.shallow.as_mut() {
            n += reap_unless_quiet(shallow.as_mut(), &mut self.shallow_quiet, out);
        }
        self.release_flushes();
        self.publish_async();
        n
    }

    fn completion_fds(&self) -> Vec<RawFd> {
        let mut fds = self.inner.completion_fds();
        if let Some(shallow) = &self.shallow {
            fds.extend(shallow.completion_fds());
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
            || self
                .write_batches
                .get()
                .is_some_and(|w| w.has_completions())
            || self.shallow.as_ref().is_some_and(|s| s.has_completions())
    }

    fn poll_begin(&mut self) {
        self.inner.poll_begin();
        if let Some(shallow) = self.shallow.as_mut() {
            shallow.poll_begin();
        }
    }

    fn poll_end(&mut self) {
        self.inner.poll_end();
        if let Some(shallow) = self.shallow.as_mut() {
            shallow.poll_end();
        }
    }

    fn unsubmitted(&self) -> usize {
        self.inner.unsubmitted()
            + self.write_batches.get().map_or(0, |w| w.unsubmitted())
            + self.shallow.as_ref().map_or(0, |s| s.unsubmitted())
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Auto
    }

    fn describe(&self) -> String {
        let inline = if self.aio_batches {
            "inline RWF_NOWAIT for single requests while calls average under 4 us or stay on the CPU, turns of 4 or more to io_submit, else when a request is alone on the thread (O_DIRECT)"
        } else if self.direct && self.shallow.is_some() {
            "inline RWF_NOWAIT for every request while calls average under 4 us or stay on the CPU, else when a request is alone on the thread (O_DIRECT); Linux AIO while fewer than 4 requests are in flight, the ring at depth"
        } else if self.direct {
            "inline RWF_NOWAIT for every request while calls average under 4 us or stay on the CPU, else when a request is alone on the thread (O_DIRECT)"
        } else if self.ring_batches {
            "inline RWF_NOWAIT (a miss alone on the thread retried without it), turns of 4 or more requests to the ring for kinds the file system takes the flag for, turns of 4 or more writes it refuses the flag for to one io_submit"
        } else {
            "inline RWF_NOWAIT"
        };
        match &self.shallow {
            Some(shallow) => format!(
                "auto ({inline}, then {} and {})",
                self.inner.describe(),
                shallow.describe()
            ),
            None => format!("auto ({inline}, then {})", self.inner.describe()),
        }
    }

    fn inline_stats(&self) -> Option<InlineStats> {
        Some(self.stats)
    }
}

/// Whether `file` is an O_DIRECT block device that does its work in the caller's context (zram,
/// a RAM disk): the median of a few 4 KiB reads at offset 0 keeps the thread on its CPU for at
/// least [`ON_CPU_PERMILLE`] of its time. A device that sleeps for its completion (NVMe, a loop
/// device's worker) is not one; neither, on a busy host, is a device whose probe was preempted
/// (then `Auto` keeps io_uring, as before the probe).
pub fn completes_in_caller(file: &File) -> bool {
    use std::os::unix::fs::FileTypeExt;
    const LEN: usize = 4096;
    if !is_direct(file)
        || !file
            .metadata()
            .is_ok_and(|m| m.file_type().is_block_device())
    {
        return false;
    }
    let Ok(layout) = std::alloc::Layout::from_size_align(LEN, LEN) else {
        return false;
    };
    // SAFETY: the layout has a non-zero size.
    let buf = unsafe { std::alloc::alloc(layout) };
    if buf.is_null() {
        return false;
    }
    let mut shares = [0u32; CALLER_PROBE_READS];
    let mut ok = true;
    for share in &mut shares {
        let cpu0 = crate::stats::thread_cpu_ns();
        let start = Instant::now();
        // SAFETY: `buf` is LEN writable bytes, aligned for O_DIRECT, alive until the dealloc
        // below; pread writes at most LEN bytes into it.
        let r = unsafe { libc::pread(file.as_raw_fd(), buf.cast(), LEN, 0) };
        let took = start.elapsed().as_nanos() as u64;
        let cpu = crate::stats::thread_cpu_ns().saturating_sub(cpu0);
        if r != LEN as isize || took == 0 {
            ok = false;
            break;
        }
        *share = cpu_permille(cpu, took);
    }
    // SAFETY: `buf` came from `alloc` with this layout and is freed once.
    unsafe { std::alloc::dealloc(buf, layout) };
    shares.sort_unstable();
    ok && shares[CALLER_PROBE_READS / 2] >= ON_CPU_PERMILLE
}

/// Reaps `engine` unless its last reap also began with nothing in flight (`quiet`): that reap
/// cleared its completion fd, and nothing can signal it before the next submission (reading the
/// fd is a syscall per turn on a store where every request goes inline).
fn reap_unless_quiet(
    engine: &mut dyn IoEngine,
    quiet: &mut bool,
    out: &mut Vec<Completion>,
) -> usize {
    let busy = engine.in_flight() > 0;
    if !busy && *quiet {
        return 0;
    }
    *quiet = !busy;
    engine.reap(out)
}

/// Whether the O_DIRECT inline call after `calls` earlier ones samples the CPU clock, `samples`
/// having been taken: one in [`CPU_SAMPLE_EVERY`] at first, one in [`CPU_SAMPLE_EVERY_SETTLED`]
/// after [`CPU_SAMPLES_EARLY`].
fn cpu_sample_due(calls: u32, samples: u32) -> bool {
    let every = if samples < CPU_SAMPLES_EARLY {
        CPU_SAMPLE_EVERY
    } else {
        CPU_SAMPLE_EVERY_SETTLED
    };
    calls.is_multiple_of(every)
}

/// The share (‰) of `took_ns` of wall time that `cpu_ns` of the thread's CPU time is; `took_ns`
/// must not be 0.
fn cpu_permille(cpu_ns: u64, took_ns: u64) -> u32 {
    (cpu_ns.saturating_mul(1000) / took_ns).min(1000) as u32
}

/// Whether `file` was opened with O_DIRECT.
fn is_direct(file: &File) -> bool {
    // SAFETY: F_GETFL on an fd we own has no memory effects.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

/// Whether `file` is a regular file on tmpfs or ramfs, whose reads and writes never wait for a
/// device. A block device node lives on devtmpfs, which reports tmpfs's magic: its I/O goes to
/// the device, so only regular files count.
pub fn in_memory(file: &File) -> bool {
    if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
        return false;
    }
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    // SAFETY: an all-zero statfs is a valid value for the kernel to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs into `st`, which lives for the call.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as libc::c_long, TMPFS_MAGIC | RAMFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::conformance::{check_all, complete, open, store, Aligned};
    use crate::engine::{iovecs, EngineOptions, IoUringFlags};

    #[test]
    fn only_direct_block_devices_are_probed_for_in_caller_completion() {
        let dir = std::env::current_dir().expect("cwd").join("target");
        let t = store(&dir, "in-caller", 1 << 20);
        assert!(
            !completes_in_caller(&open(&t.path, true, true)),
            "a regular O_DIRECT file"
        );
        assert!(
            !completes_in_caller(&open(&t.path, true, false)),
            "a buffered file"
        );
        // A block device opened without O_DIRECT is not probed either (a page-cache read
        // would say nothing about the device).
        if let Ok(f) = std::fs::File::open("/dev/zram0") {
            assert!(!completes_in_caller(&f));
        }
    }

    #[test]
    fn the_cpu_clock_is_sampled_less_once_the_device_is_known() {
        let due = |samples| (0..4096u32).filter(|&c| cpu_sample_due(c, samples)).count();
        assert_eq!(due(0), 4096 / CPU_SAMPLE_EVERY as usize);
        assert_eq!(due(CPU_SAMPLES_EARLY - 1), 4096 / CPU_SAMPLE_EVERY as usize);
        assert_eq!(
            due(CPU_SAMPLES_EARLY),
            4096 / CPU_SAMPLE_EVERY_SETTLED as usize
        );
        // The counter wraps on a long run: sampling goes on at the same rate.
        assert!(cpu_sample_due(0, u32::MAX));
    }

    #[test]
    fn device_nodes_on_devtmpfs_are_not_memory_files() {
        // devtmpfs reports tmpfs's magic; a loop or NVMe node there must keep RWF_NOWAIT.
        let null = File::open("/dev/null").expect("/dev/null");
        assert!(!in_memory(&null));
        let dir = std::env::temp_dir();
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() { shm } else { dir.as_path() };
        let p = base.join(format!("osprey-auto-memfs-{}", std::process::id()));
        let f = File::create(&p).expect("create");
        let on_tmpfs = shm.is_dir();
        let got = in_memory(&f);
        let _ = std::fs::remove_file(&p);
        if on_tmpfs {
            assert!(got, "a regular file in /dev/shm is a memory file");
        }
    }

    fn inner(file: File, depth: u32, direct: bool, kind: EngineKind) -> Box<dyn IoEngine> {
        crate::engine::open(
            file,
            &EngineOptions {
                kind,
                depth,
                io_uring: IoUringFlags::default(),
                direct,
                fault: None,
            },
        )
        .expect("engine")
    }

    /// `Auto` as `engine::open` builds it on a file that is not in memory: the wrapped engine,
    /// and for O_DIRECT beside io_uring the Linux AIO engine for small turns.
    fn auto(file: File, depth: u32, direct: bool, trying: bool) -> Box<dyn IoEngine> {
        let inline = file.try_clone().expect("dup");
        let kind = crate::engine::auto_async_kind(direct);
        let shallow = inner(
            file.try_clone().expect("dup"),
            depth,
            direct,
            EngineKind::LinuxAio,
        );
        Box::new(
            AutoEngine::with_inline(inline, inner(file, depth, direct, kind), trying)
                .with_shallow(shallow),
        )
    }

    #[test]
    fn conformance_inline_first() {
        check_all("Auto", &|f, d, direct| auto(f, d, direct, true), true);
    }

    #[test]
    fn conformance_deferred() {
        check_all(
            "Auto (deferred)",
            &|f, d, direct| auto(f, d, direct, false),
            true,
        );
    }

    fn read(buf: &Aligned, offset: u64, token: u64) -> IoRequest {
        IoRequest {
            op: IoOp::Read {
                offset,
                iovecs: iovecs![buf.iov(0, 4096)],
            },
            token,
        }
    }

    #[test]
    fn page_cache_hits_complete_inline_and_misses_go_async() {
        // The work tree's file system (ext4 here): a sparse file's holes are page-cache hits.
        let dir = std::env::current_dir().expect("cwd").join("target");
        let s = store(&dir, "auto-inline", 1 << 20);
        let mut e = AutoEngine::new(
            open(&s.path, true, false),
            inner(open(&s.path, true, false), 32, false, EngineKind::Sync),
        );
        if in_memory(&e.file) {
            eprintln!("target/ is a memory file system: nothing to check");
            return;
        }
        let buf = Aligned::new(4096);
        for t in 0..8 {
            e.submit(read(&buf, t * 4096, t)).expect("room");
        }
        assert_eq!(complete(&mut e, 8).len(), 8);
        let st = e.inline_stats();
        assert_eq!(
            (st.inline, st.deferred),
            (8, 0),
            "a page-cache hit never blocks: {st:?}"
        );
        // Past the end of the file: a short read, which the async engine finishes (zeros).
        e.submit(read(&buf, (1 << 20) - 2048, 9)).expect("room");
        let c = complete(&mut e, 1);
        assert_eq!(
            c,
            vec![Completion {
                token: 9,
                result: 4096
            }]
        );
        assert_eq!(e.inline_stats().deferred, 1);
    }

    /// A wrapped engine that counts the `reap` calls it gets.
    struct CountReaps(
        Box<dyn IoEngine>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    );

    impl IoEngine for CountReaps {
        fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
            self.0.submit(request)
        }
        fn commit(&mut self) -> usize {
            self.0.commit()
        }
        fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.reap(out)
        }
        fn completion_fds(&self) -> Vec<RawFd> {
            self.0.completion_fds()
        }
        fn capacity(&self) -> usize {
            self.0.capacity()
        }
        fn in_flight(&self) -> usize {
            self.0.in_flight()
        }
        fn has_completions(&self) -> bool {
            self.0.has_completions()
        }
        fn unsubmitted(&self) -> usize {
            self.0.unsubmitted()
        }
        fn kind(&self) -> EngineKind {
            self.0.kind()
        }
        fn describe(&self) -> String {
            self.0.describe()
        }
    }

    #[test]
    fn an_idle_wrapped_engine_is_reaped_once_then_left_alone() {
        // Its reap reads the completion fd: a syscall per turn where every request is inline.
        let dir = std::env::current_dir().expect("cwd").join("target");
        let s = store(&dir, "auto-quiet", 1 << 20);
        let reaps = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let kind = crate::engine::auto_async_kind(false);
        let wrapped = CountReaps(
            inner(open(&s.path, true, false), 32, false, kind),
            reaps.clone(),
        );
        let mut e = AutoEngine::new(open(&s.path, true, false), Box::new(wrapped));
        if in_memory(&e.file) {
            eprintln!("target/ is a memory file system: nothing to check");
            return;
        }
        let count = || reaps.load(std::sync::atomic::Ordering::Relaxed);
        let buf = Aligned::new(4096);
        for t in 0..8 {
            e.submit(read(&buf, t * 4096, t)).expect("room");
            assert_eq!(complete(&mut e, 1).len(), 1);
        }
        assert_eq!(e.inline_stats().inline, 8);
        assert_eq!(
            count(),
            1,
            "one reap clears the idle engine's fd, then none"
        );
        // A read past the end goes to the wrapped engine: reaped until it completes, and once
        // more after, for a completion that signalled the fd after it was read.
        e.submit(read(&buf, (1 << 20) - 2048, 9)).expect("room");
        assert_eq!(complete(&mut e, 1)[0].result, 4096);
        let after = count();
        assert!(after >= 2, "{after}");
        let mut out = Vec::new();
        for _ in 0..3 {
            e.reap(&mut out);
        }
        assert_eq!(count(), after + 1, "{out:?}");
    }

    #[test]
    fn on_a_page_cache_file_a_batch_goes_to_the_ring_and_a_lone_request_inline() {
        let Some((_store, mut e)) = cached_ring_engine("auto-ring-batch") else {
            return;
        };
        assert!(e.ring_batches);
        let buf = Aligned::new(4096);
        let batch = RING_BATCH as u64;
        // The first batch tries its first read inline, to learn whether the file takes
        // RWF_NOWAIT reads (a sparse file's hole is a page-cache hit); the next goes whole.
        for round in 0..2 {
            for t in 0..batch {
                e.submit(read(&buf, t * 4096, round * batch + t))
                    .expect("room");
            }
            assert_eq!(complete(&mut e, RING_BATCH).len(), RING_BATCH);
        }
        let st = e.inline_stats();
        assert_eq!((st.inline, st.deferred), (1, 2 * batch - 1), "{st:?}");
        e.submit(read(&buf, 0, 99)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        let st = e.inline_stats();
        assert_eq!(
            (st.attempts, st.inline),
            (2, 2),
            "a lone request goes inline: {st:?}"
        );
        // Writes: the first of a batch learns whether the file system takes RWF_NOWAIT writes.
        // ext4 refuses them for buffered files: then every write stays inline, batch or not.
        for t in 0..batch {
            e.submit(IoRequest {
                op: IoOp::Write {
                    offset: t * 4096,
                    iovecs: iovecs![buf.iov(0, 4096)],
                },
                token: 200 + t,
            })
            .expect("room");
        }
        let c = complete(&mut e, RING_BATCH);
        assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
        let after = e.inline_stats();
        let inline_writes = after.inline - st.inline;
        if e.rwf[1] == 0 {
            assert_eq!(inline_writes, batch, "refused flag: all inline: {after:?}");
        } else {
            assert_eq!(
                inline_writes, 1,
                "flag taken: one probe, the rest to the ring"
            );
        }
        assert_eq!(
            after.deferred - st.deferred,
            batch - inline_writes,
            "{after:?}"
        );
        if e.rwf[1] != 0 {
            return;
        }
        // Refused flag, known now: the next turn's writes go to one io_submit, which runs them
        // before it returns; a read reads back what the batch wrote.
        let mut data = Aligned::new(4096);
        data.fill(0x5a);
        for t in 0..batch {
            e.submit(IoRequest {
                op: IoOp::Write {
                    offset: (16 + t) * 4096,
                    iovecs: iovecs![data.iov(0, 4096)],
                },
                token: 300 + t,
            })
            .expect("room");
        }
        assert_eq!(
            e.commit(),
            RING_BATCH,
            "the turn's writes, in one io_submit"
        );
        assert_eq!(e.done.len(), RING_BATCH, "completed inside io_submit");
        let c = complete(&mut e, RING_BATCH);
        assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
        let batched = e.inline_stats();
        assert_eq!(
            (batched.batched_writes, batched.inline),
            (batch, after.inline),
            "{batched:?}"
        );
        let back = Aligned::new(4096);
        e.submit(read(&back, 17 * 4096, 400)).expect("room");
        assert_eq!(complete(&mut e, 1)[0].result, 4096);
        assert!(
            back.as_slice().iter().all(|&b| b == 0x5a),
            "the batch's data"
        );
    }

    /// An Auto engine on an O_DIRECT file of the work tree's file system (`None` where that
    /// is a memory file system, which is never treated as direct).
    fn direct_engine(name: &str) -> Option<(crate::engine::conformance::Store, AutoEngine)> {
        let dir = std::env::current_dir().expect("cwd").join("target");
        let s = store(&dir, name, 1 << 20);
        let kind = crate::engine::auto_async_kind(true);
        let e = AutoEngine::new(
            open(&s.path, true, true),
            inner(open(&s.path, true, true), 32, true, kind),
        );
        if !e.direct {
            eprintln!("target/ is a memory file system: nothing to check");
            return None;
        }
        Some((s, e))
    }

    /// An Auto engine wrapped around io_uring on a page-cache file of the work tree's file
    /// system (ext4 here, where io_uring copies cached pages in the submitting call); `None`
    /// without io_uring or where that is a memory file system (`engine::open` gives those Sync).
    fn cached_ring_engine(name: &str) -> Option<(crate::engine::conformance::Store, AutoEngine)> {
        if crate::engine::io_uring::IoUringEngine::probe().is_err() {
            eprintln!("no io_uring on this host: nothing to check");
            return None;
        }
        let dir = std::env::current_dir().expect("cwd").join("target");
        let s = store(&dir, name, 1 << 20);
        let e = AutoEngine::new(
            open(&s.path, true, false),
            inner(open(&s.path, true, false), 32, false, EngineKind::IoUring),
        );
        if in_memory(&e.file) {
            eprintln!("target/ is a memory file system: nothing to check");
            return None;
        }
        Some((s, e))
    }

    #[test]
    fn small_direct_turns_go_to_linux_aio_beside_the_ring_and_batches_to_the_ring() {
        let Some((s, e)) = direct_engine("auto-shallow") else {
            return;
        };
        if e.inner.kind() != EngineKind::IoUring {
            eprintln!("no io_uring here: no engine beside it");
            return;
        }
        let aio = inner(open(&s.path, true, true), 32, true, EngineKind::LinuxAio);
        let mut e = e.with_shallow(aio);
        assert_eq!(e.completion_fds().len(), 2, "a wake-up from either engine");
        // A device known to sleep in its calls; another queue has work: nothing goes inline.
        e.on_cpu_permille = Some(0);
        crate::iothread::turn::set_ready_handlers(2);
        let buf = Aligned::new(8 * 4096);
        let one = |i: u64| IoRequest {
            op: IoOp::Write {
                offset: i * 4096,
                iovecs: iovecs![buf.iov(i as usize * 4096, 4096)],
            },
            token: i,
        };
        // A turn of one: to Linux AIO.
        e.submit(one(0)).expect("room");
        e.commit();
        assert_eq!(e.shallow_in_flight(), 1, "{:?}", e.inline_stats());
        // A flush after it waits for it, though the flush goes to the ring.
        e.submit(IoRequest {
            op: IoOp::Flush,
            token: 100,
        })
        .expect("room");
        e.commit();
        assert_eq!(
            e.inner.in_flight(),
            0,
            "the flush went before the write completed"
        );
        let done = complete(&mut e, 2);
        let tokens: Vec<u64> = done.iter().map(|c| c.token).collect();
        assert_eq!(tokens, [0, 100], "{done:?}");
        // A turn of RING_BATCH or more: to the ring.
        for i in 0..RING_BATCH as u64 {
            e.submit(one(i)).expect("room");
        }
        e.commit();
        assert_eq!(e.shallow_in_flight(), 0);
        assert_eq!(complete(&mut e, RING_BATCH).len(), RING_BATCH);
        let st = e.inline_stats();
        assert_eq!(
            (st.inline, st.deferred, st.shallow),
            (0, 1 + RING_BATCH as u64, 1),
            "{st:?}"
        );
        crate::iothread::turn::set_ready_handlers(0);
    }

    #[test]
    fn at_depth_a_turn_goes_to_the_ring_as_it_is_submitted() {
        const TURN: usize = 8;
        let buf = Aligned::new(TURN * 4096);
        let at = |i: usize| IoRequest {
            op: IoOp::Read {
                offset: (i * 4096) as u64,
                iovecs: iovecs![buf.iov(i * 4096, 4096)],
            },
            token: i as u64,
        };
        // O_DIRECT on a device known to sleep in its calls, another queue with work: the first
        // request of a turn is held (it may be a probe), the others go to the ring at once.
        if let Some((_store, mut e)) = direct_engine("auto-straight") {
            e.on_cpu_permille = Some(0);
            crate::iothread::turn::set_ready_handlers(2);
            for i in 0..TURN {
                e.submit(at(i)).expect("room");
            }
            assert_eq!((e.held.len(), e.inner.in_flight()), (1, TURN - 1));
            assert_eq!(
                e.capacity(),
                32 - TURN,
                "every request counts against the depth"
            );
            let c = complete(&mut e, TURN);
            assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
            let st = e.inline_stats();
            assert_eq!((st.inline, st.deferred), (0, TURN as u64), "{st:?}");
            crate::iothread::turn::set_ready_handlers(0);
        }
        // A page-cache file whose file system takes RWF_NOWAIT reads: once that is known, the
        // RING_BATCH-th read of a turn and those after it go to the ring at once.
        let Some((_store, mut e)) = cached_ring_engine("auto-straight-cached") else {
            return;
        };
        e.submit(at(0)).expect("room");
        assert_eq!(
            complete(&mut e, 1).len(),
            1,
            "the first read learns the flag"
        );
        if !e.rwf_known[0] || e.rwf[0] == 0 {
            eprintln!("this file system refuses RWF_NOWAIT reads: nothing more to check");
            return;
        }
        for i in 0..TURN {
            e.submit(at(i)).expect("room");
        }
        assert_eq!(
            (e.held.len(), e.inner.in_flight()),
            (RING_BATCH - 1, TURN - (RING_BATCH - 1))
        );
        let c = complete(&mut e, TURN);
        assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
        let st = e.inline_stats();
        assert_eq!(
            (st.inline, st.deferred),
            (1, TURN as u64),
            "the whole batch went to the ring: {st:?}"
        );
    }

    #[test]
    fn a_lone_page_cache_miss_waits_for_the_device_on_the_thread() {
        let Some((s, mut e)) = cached_ring_engine("auto-lone-miss") else {
            return;
        };
        // Data on the disk, none of it in the page cache (holes would be hits).
        {
            use std::io::Write;
            let mut f = open(&s.path, true, false);
            f.write_all(&vec![0x3c; 1 << 20]).expect("fill");
            f.sync_all().expect("sync");
            // SAFETY: plain fadvise on an open fd; the kernel only drops clean cached pages.
            let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(r, 0, "fadvise");
        }
        let buf = Aligned::new(4096);
        // Another queue of the thread has work: a miss must not block it, so it goes to the ring.
        crate::iothread::turn::set_ready_handlers(2);
        e.submit(read(&buf, 0, 1)).expect("room");
        assert_eq!(complete(&mut e, 1)[0].result, 4096);
        let st = e.inline_stats();
        crate::iothread::turn::set_ready_handlers(0);
        if st.inline == 1 {
            eprintln!("the fadvise left the page cached: nothing to check");
            return;
        }
        assert_eq!((st.inline, st.deferred), (0, 1), "{st:?}");
        // Alone on the thread: the miss is retried inline without RWF_NOWAIT, and the EAGAIN
        // that sent it there is not a failed attempt.
        e.submit(read(&buf, 64 * 4096, 2)).expect("room");
        assert_eq!(complete(&mut e, 1)[0].result, 4096);
        let after = e.inline_stats();
        assert_eq!(
            (after.inline, after.deferred, after.failed),
            (1, 1, st.failed),
            "{after:?}"
        );
        assert!(buf.as_slice().iter().all(|&b| b == 0x3c), "the data");
    }

    #[test]
    fn an_o_direct_request_goes_inline_only_when_alone_on_the_thread() {
        let Some((_store, mut e)) = direct_engine("auto-alone") else {
            return;
        };
        let buf = Aligned::new(4096);
        // A device known to sleep in its calls (no probe due: the CPU share is sampled).
        e.on_cpu_permille = Some(0);
        // Another queue of the thread has work this round: the request must not block it.
        crate::iothread::turn::set_ready_handlers(2);
        e.submit(read(&buf, 0, 1)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        let st = e.inline_stats();
        assert_eq!((st.inline, st.failed, st.deferred), (0, 0, 1), "{st:?}");
        // The only queue with work, but the thread serves another one, which may get work
        // while the call waits: not inline either.
        crate::iothread::turn::set_ready_handlers(1);
        crate::iothread::turn::set_handlers(2);
        e.submit(read(&buf, 8192, 3)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        let st = e.inline_stats();
        assert_eq!((st.attempts, st.deferred), (0, 2), "{st:?}");
        // Alone: tried inline.
        crate::iothread::turn::set_handlers(1);
        e.submit(read(&buf, 4096, 2)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        let st = e.inline_stats();
        assert_eq!(st.attempts, 1, "{st:?}");
        crate::iothread::turn::set_ready_handlers(0);
        crate::iothread::turn::set_handlers(0);
    }

    #[test]
    fn a_device_completing_on_the_callers_cpu_gets_every_request_inline() {
        let Some((_store, mut e)) = direct_engine("auto-on-cpu") else {
            return;
        };
        let buf = Aligned::new(4096);
        crate::iothread::turn::set_ready_handlers(2);
        // Unknown device: the first request of the turn is a probe, the others go async.
        for t in 0..8 {
            e.submit(read(&buf, t * 4096, t)).expect("room");
        }
        assert_eq!(complete(&mut e, 8).len(), 8);
        let st = e.inline_stats();
        assert_eq!(st.attempts, 1, "one probe: {st:?}");
        // A device measured to keep the caller on its CPU (zram): every request inline.
        e.on_cpu_permille = Some(950);
        for t in 0..8 {
            e.submit(read(&buf, t * 4096, 100 + t)).expect("room");
        }
        assert_eq!(
            e.commit(),
            8,
            "the turn's requests, all inline, count as started"
        );
        assert_eq!(complete(&mut e, 8).len(), 8);
        let after = e.inline_stats();
        assert_eq!(after.attempts - st.attempts, 8, "{after:?}");
        crate::iothread::turn::set_ready_handlers(0);
    }

    #[test]
    fn a_lone_call_may_wait_for_the_device_longer_than_one_that_holds_up_others() {
        // A loop device's read at QD1 on a busy host: preempted, 100 µs.
        assert!(!Call::Lone.too_slow(100_000), "nothing else waits for it");
        assert!(
            Call::Probe.too_slow(100_000),
            "the turn's other requests wait"
        );
        assert!(Call::Turn.too_slow(SLOW_INLINE_NS + 1));
        assert!(!Call::Turn.too_slow(SLOW_INLINE_NS));
        // A disk or a network store: even alone, requests arriving meanwhile wait too long.
        assert!(Call::Lone.too_slow(SLOW_LONE_NS + 1));
    }

    #[test]
    fn probes_of_a_sleeping_device_at_depth_grow_rarer() {
        let Some((_store, mut e)) = direct_engine("auto-probe-gap") else {
            return;
        };
        let buf = Aligned::new(4096);
        // A device known to sleep in its calls, and slowly (an average of 1 ms: one fast call
        // moves it by an eighth); another queue has work (no request is alone).
        e.on_cpu_permille = Some(0);
        e.inline_ns = 1_000_000;
        crate::iothread::turn::set_ready_handlers(2);
        let mut token = 0;
        let mut turns = |e: &mut AutoEngine, n: u32| {
            for _ in 0..n {
                for t in 0..2 {
                    e.submit(read(&buf, t * 4096, token)).expect("room");
                    token += 1;
                }
                assert_eq!(complete(e, 2).len(), 2);
            }
            e.inline_stats().attempts
        };
        assert_eq!(turns(&mut e, DIRECT_PROBE_TURNS - 1), 0, "no probe yet");
        assert_eq!(turns(&mut e, 1), 1, "the first probe");
        // Still sleeping (one sample moves the average by a quarter at most): the gap doubled.
        assert!(!e.on_cpu(), "{:?}", e.on_cpu_permille);
        assert_eq!(
            turns(&mut e, 2 * DIRECT_PROBE_TURNS - 1),
            1,
            "the gap doubled"
        );
        assert_eq!(turns(&mut e, 1), 2, "the second probe");
        // The gap stops growing at its cap.
        e.probe_gap = MAX_DIRECT_PROBE_TURNS;
        e.direct_turns = MAX_DIRECT_PROBE_TURNS - 1;
        e.on_cpu_permille = Some(0);
        assert_eq!(turns(&mut e, 1), 3, "the third probe");
        assert_eq!(e.probe_gap, MAX_DIRECT_PROBE_TURNS);
        crate::iothread::turn::set_ready_handlers(0);
    }

    #[test]
    fn a_device_completing_in_the_caller_gets_linux_aio_opened_without_a_probe() {
        // What `engine::open` wraps for zram: Linux AIO, opened straight away (a probe's
        // io_destroy would stall the iothread for an RCU grace period per queue).
        let dir = std::env::current_dir().expect("cwd").join("target");
        let s = store(&dir, "auto-in-caller-aio", 1 << 20);
        let file = open(&s.path, true, true);
        if !is_direct(&file) {
            eprintln!("target/ is a memory file system: nothing to check");
            return;
        }
        let opts = EngineOptions {
            kind: EngineKind::LinuxAio,
            depth: 32,
            io_uring: IoUringFlags::default(),
            direct: true,
            fault: None,
        };
        let engine = crate::engine::open_auto_aio(&file, &opts, "a test's batches", "none")
            .expect("Linux AIO opens on an O_DIRECT file here");
        assert_eq!(engine.kind(), EngineKind::LinuxAio);
        assert_eq!(engine.capacity(), 32, "{}", engine.describe());
        // The caller's file stays usable for the inline path.
        let mut e = AutoEngine::new(file, engine);
        let buf = Aligned::new(4096);
        e.submit(read(&buf, 0, 7)).expect("room");
        let done = complete(&mut e, 1);
        assert_eq!((done[0].token, done[0].result), (7, 4096));
    }

    #[test]
    fn a_store_where_inline_fails_stops_trying_then_probes_again() {
        // O_DIRECT on the work tree's file system: RWF_NOWAIT reads are refused or blocking.
        let dir = std::env::current_dir().expect("cwd").join("target");
        let s = store(&dir, "auto-direct", 1 << 20);
        let kind = crate::engine::auto_async_kind(true);
        let mut e = AutoEngine::new(
            open(&s.path, true, true),
            inner(open(&s.path, true, true), 32, true, kind),
        );
        let buf = Aligned::new(4096);
        // Force every attempt to fail by reading a range the page cache cannot hold for
        // O_DIRECT: count how the decision moves instead of what the kernel does.
        e.failures = MAX_FAILED + 1;
        e.attempts = WINDOW - 1;
        e.submit(read(&buf, 0, 0)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        assert!(
            !e.trying,
            "more than 3/4 failures in a window switch inline off"
        );
        // Each failed probe doubles the wait: 256, 512, ..., then 4,096 for good.
        for wait in [256u32, 512, 1024, 2048, 4096, 4096] {
            let before = e.inline_stats();
            for t in 1..=u64::from(wait) - 1 {
                e.submit(read(&buf, (t % 64) * 4096, t)).expect("room");
                assert_eq!(complete(&mut e, 1).len(), 1);
            }
            let after = e.inline_stats();
            assert_eq!(after.attempts, before.attempts, "no attempts while off");
            e.submit(read(&buf, 0, 1 << 20)).expect("room");
            assert_eq!(complete(&mut e, 1).len(), 1);
            assert!(e.trying, "probing again after {wait} requests");
            // The probe's window fails as well.
            e.failures = MAX_FAILED + 1;
            e.attempts = WINDOW - 1;
            e.submit(read(&buf, 0, 1 << 21)).expect("room");
            assert_eq!(complete(&mut e, 1).len(), 1);
            assert!(!e.trying, "a failed probe switches inline off again");
        }
        // A probe whose window passes resets the wait: the next failure waits 256 again.
        for t in 1..=u64::from(REPROBE_REQUESTS) {
            e.submit(read(&buf, (t % 64) * 4096, t)).expect("room");
            assert_eq!(complete(&mut e, 1).len(), 1);
        }
        assert!(e.trying);
        (e.failures, e.attempts) = (0, WINDOW - 1);
        e.submit(read(&buf, 0, 1 << 22)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        assert!(e.trying, "a passing window keeps inline on");
        (e.failures, e.attempts) = (MAX_FAILED + 1, WINDOW - 1);
        e.submit(read(&buf, 0, 1 << 23)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        assert!(!e.trying);
        for t in 1..=u64::from(MIN_REPROBE_REQUESTS) {
            e.submit(read(&buf, (t % 64) * 4096, t)).expect("room");
            assert_eq!(complete(&mut e, 1).len(), 1);
        }
        assert!(e.trying, "back to the shortest wait");
    }

    #[test]
    fn a_flush_waits_for_earlier_writes_on_the_async_engine() {
        let s = store(std::path::Path::new("/dev/shm"), "auto-flush", 1 << 20);
        // Inline off: the writes go to the (io_uring or Sync) engine and may be in flight.
        let mut e = auto(open(&s.path, true, false), 32, false, false);
        let buf = Aligned::new(4096);
        for t in 0..4 {
            e.submit(IoRequest {
                op: IoOp::Write {
                    offset: t * 4096,
                    iovecs: iovecs![buf.iov(0, 4096)],
                },
                token: t,
            })
            .expect("room");
        }
        e.submit(IoRequest {
            op: IoOp::Flush,
            token: 100,
        })
        .expect("room");
        assert_eq!(e.capacity(), 0, "nothing new while a flush waits");
        let c = complete(e.as_mut(), 5);
        let flush_at = c.iter().position(|c| c.token == 100).expect("flush done");
        assert_eq!(
            flush_at, 4,
            "the flush completes after every earlier write: {c:?}"
        );
        assert!(c.iter().all(|c| c.result >= 0), "{c:?}");
        assert!(e.capacity() > 0);
    }
}
