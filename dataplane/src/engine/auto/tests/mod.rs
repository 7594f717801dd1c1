//! The `Auto` engine's tests: the conformance suite on both paths, the helpers that build an
//! engine the way `engine::open` does, and what every strategy shares (quiet reaps, requests
//! sent to the wrapped engine as they are submitted, flush ordering). What a strategy does with
//! its turns is tested beside it in `buffered.rs` and `direct.rs`.

mod buffered;
mod direct;

use std::fs::File;
use std::os::unix::io::RawFd;

use super::*;

use crate::engine::conformance::{check_all, complete, complete_in, open, store, Aligned, Store};
use crate::engine::{iovecs, EngineOptions, IoUringFlags};

/// The default batch size ([`AutoTuning::batch_requests`]).
fn ring_batch() -> usize {
    AutoTuning::default().batch_requests
}

impl AutoEngine {
    /// The O_DIRECT state (the engine must be on an O_DIRECT file).
    fn direct_mut(&mut self) -> &mut Direct {
        match &mut self.strategy {
            Strategy::Direct(direct) => direct,
            other => panic!("not an O_DIRECT engine: {other:?}"),
        }
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
        &crate::engine::AioContextPool::new(),
    )
    .expect("engine")
}

/// `Auto` as `engine::open` builds it on a file that is not in memory: the wrapped engine,
/// and for O_DIRECT beside io_uring the Linux AIO engine for small turns.
fn auto(file: File, depth: u32, direct: bool, trying: bool) -> Box<dyn IoEngine> {
    let inline = file.try_clone().expect("dup");
    let kind = crate::engine::auto_async_kind(direct, &crate::engine::AioContextPool::new());
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

/// A wrapped engine that counts the `reap` calls it gets.
struct CountReaps(
    Box<dyn IoEngine>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
);

impl IoEngine for CountReaps {
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
        self.0.submit(request)
    }
    fn commit(&mut self, turn: &ThreadTurn) -> usize {
        self.0.commit(turn)
    }
    fn reap(&mut self, out: &mut Vec<Completion>, turn: &ThreadTurn) -> usize {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.reap(out, turn)
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
    fn info(&self) -> crate::engine::EngineInfo {
        self.0.info()
    }
}

#[test]
fn an_idle_wrapped_engine_is_reaped_once_then_left_alone() {
    // Its reap reads the completion fd: a syscall per turn where every request is inline.
    let dir = std::env::current_dir().expect("cwd").join("target");
    let s = store(&dir, "auto-quiet", 1 << 20);
    let reaps = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let kind = crate::engine::auto_async_kind(false, &crate::engine::AioContextPool::new());
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
    assert_eq!(e.stats().inline, 8);
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
        e.reap(&mut out, &ThreadTurn::default());
    }
    assert_eq!(count(), after + 1, "{out:?}");
}

/// An Auto engine on an O_DIRECT file of the work tree's file system (`None` where that
/// is a memory file system, which is never treated as direct).
fn direct_engine(name: &str) -> Option<(Store, AutoEngine)> {
    let dir = std::env::current_dir().expect("cwd").join("target");
    let s = store(&dir, name, 1 << 20);
    let kind = crate::engine::auto_async_kind(true, &crate::engine::AioContextPool::new());
    let e = AutoEngine::new(
        open(&s.path, true, true),
        inner(open(&s.path, true, true), 32, true, kind),
    );
    if !matches!(e.strategy, Strategy::Direct(_)) {
        eprintln!("target/ is a memory file system: nothing to check");
        return None;
    }
    Some((s, e))
}

/// An Auto engine wrapped around io_uring on a page-cache file of the work tree's file
/// system (ext4 here, where io_uring copies cached pages in the submitting call); `None`
/// without io_uring or where that is a memory file system (`engine::open` gives those Sync).
fn cached_ring_engine(name: &str) -> Option<(Store, AutoEngine)> {
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
        e.direct_mut().sampler.on_cpu_permille = Some(0);
        let busy = ThreadTurn::new(0, 2);
        for i in 0..TURN {
            e.submit(at(i)).expect("room");
        }
        assert_eq!((e.held.len(), e.inner.in_flight()), (1, TURN - 1));
        assert_eq!(
            e.capacity(),
            32 - TURN,
            "every request counts against the depth"
        );
        let c = complete_in(&mut e, TURN, &busy);
        assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
        let st = e.stats();
        assert_eq!((st.inline, st.deferred), (0, TURN as u64), "{st:?}");
    }
    // A page-cache file whose file system takes RWF_NOWAIT reads: once that is known, the
    // ring_batch()-th read of a turn and those after it go to the ring at once.
    let Some((_store, mut e)) = cached_ring_engine("auto-straight-cached") else {
        return;
    };
    e.submit(at(0)).expect("room");
    assert_eq!(
        complete(&mut e, 1).len(),
        1,
        "the first read learns the flag"
    );
    if !e.nowait.known[0] || e.nowait.flags[0] == 0 {
        eprintln!("this file system refuses RWF_NOWAIT reads: nothing more to check");
        return;
    }
    for i in 0..TURN {
        e.submit(at(i)).expect("room");
    }
    assert_eq!(
        (e.held.len(), e.inner.in_flight()),
        (ring_batch() - 1, TURN - (ring_batch() - 1))
    );
    let c = complete(&mut e, TURN);
    assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
    let st = e.stats();
    assert_eq!(
        (st.inline, st.deferred),
        (1, TURN as u64),
        "the whole batch went to the ring: {st:?}"
    );
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
