//! Unit tests of the Linux AIO engine: ABI layout, ring reaping against the io_getevents
//! fallback, partial and failed submissions (injected io_submit results), the FDSYNC fallback,
//! short transfers and the completion eventfd.

use std::collections::VecDeque;
use std::fs::File;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::abi::{AioRingHeader, IoEvent, Iocb, AIO_RING_MAGIC};
use super::*;
use crate::engine::conformance::{complete, open, readable, store, Aligned, EdgeWatch, Store};
use crate::engine::info::LinuxAioInfo;
use crate::engine::EngineInfo;

/// Test-only control over io_submit.
#[derive(Debug, Default)]
pub(super) struct Hooks {
    /// io_submit calls made (including injected failures).
    pub(super) submit_calls: usize,
    /// Fail with EINVAL whenever the first iocb is an FDSYNC, like tmpfs on older kernels.
    pub(super) refuse_fdsync: bool,
    /// Results for the next io_submit calls, in order.
    pub(super) script: VecDeque<Scripted>,
}

/// An injected io_submit outcome.
#[derive(Debug)]
pub(super) enum Scripted {
    /// Submit at most this many for real (a partial submission).
    Limit(usize),
    /// Fail with this errno without calling the kernel.
    Fail(i32),
}

fn disk() -> PathBuf {
    std::env::current_dir().expect("cwd").join("target")
}

fn shm() -> PathBuf {
    PathBuf::from("/dev/shm")
}

fn engine(t: &Store, depth: u32, direct: bool) -> LinuxAioEngine {
    let f = open(&t.path, true, direct);
    LinuxAioEngine::new(
        f,
        &EngineOptions {
            kind: EngineKind::LinuxAio,
            depth,
            io_uring: Default::default(),
            direct,
            fault: None,
        },
        &AioContextPool::new(),
    )
    .expect("aio engine")
}

/// An O_DIRECT engine of `depth` on `t` whose context comes from, and goes back to, `pool`.
fn engine_in(t: &Store, depth: u32, pool: &AioContextPool) -> LinuxAioEngine {
    let opts = EngineOptions {
        kind: EngineKind::LinuxAio,
        depth,
        io_uring: Default::default(),
        direct: true,
        fault: None,
    };
    LinuxAioEngine::new(open(&t.path, true, true), &opts, pool).expect("aio engine")
}

fn write(offset: u64, buf: &Aligned, off: usize, len: usize, token: u64) -> IoRequest {
    IoRequest {
        op: IoOp::Write {
            offset,
            iovecs: crate::engine::iovecs![buf.iov(off, len)],
        },
        token,
    }
}

fn pattern(buf: &mut Aligned, seed: u8) {
    buf.fill(0);
    let len = buf.as_slice().len();
    for i in 0..len {
        let b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        let v = buf.iov(i, 1);
        // SAFETY: `v` is one byte inside `buf`, which we hold exclusively.
        unsafe { *v.base = b };
    }
}

#[test]
fn abi_layout_matches_aio_abi_h() {
    assert_eq!(size_of::<Iocb>(), 64);
    assert_eq!(offset_of!(Iocb, aio_lio_opcode), 16);
    assert_eq!(offset_of!(Iocb, aio_fildes), 20);
    assert_eq!(offset_of!(Iocb, aio_resfd), 60);
    assert_eq!(size_of::<IoEvent>(), 32);
    assert_eq!(size_of::<AioRingHeader>(), 32);
    assert_eq!(offset_of!(AioRingHeader, header_length), 28);
}

#[test]
fn probe_and_context_size() {
    let pool = AioContextPool::new();
    probe(&pool).expect("probe");
    assert_eq!(
        pool.spares(),
        1,
        "the probe's context is kept, not destroyed"
    );
    probe(&pool).expect("a probe that finds a spare");
    assert_eq!(
        pool.spares(),
        1,
        "and a second probe needs no context of its own"
    );
    let t = store(&shm(), "size", 4096);
    let e = engine(&t, 4, false);
    assert_eq!(e.capacity(), 4);
    let big = engine(&t, 4096, false);
    assert_eq!(big.capacity(), MAX_EVENTS as usize);
    assert!(
        matches!(
            big.info(),
            EngineInfo::LinuxAio(LinuxAioInfo {
                direct: false,
                depth: MAX_EVENTS,
                ..
            })
        ),
        "{:?}",
        big.info()
    );
    assert_eq!(
        big.info().to_string(),
        "LinuxAio (buffered)",
        "the warning, in one line"
    );
}

#[test]
fn setup_errors_say_why() {
    let e = setup_error(std::io::Error::from_raw_os_error(libc::EAGAIN), 1024);
    let msg = e.to_string();
    assert!(msg.contains("aio-max-nr"), "{msg}");
    assert!(matches!(e, EngineError::Refused { .. }));
    let e = setup_error(std::io::Error::from_raw_os_error(libc::ENOSYS), 8);
    assert!(e.to_string().contains("CONFIG_AIO"), "{e}");
    let e = setup_error(std::io::Error::from_raw_os_error(libc::EINVAL), 8);
    assert!(matches!(
        e,
        EngineError::Setup {
            what: "io_setup",
            ..
        }
    ));
}

/// Writes then reads back 8 blocks; returns the engine for inspection.
fn round_trip(e: &mut LinuxAioEngine) {
    let mut src = Aligned::new(8 * 4096);
    pattern(&mut src, 3);
    let dst = Aligned::new(8 * 4096);
    for i in 0..8u64 {
        e.submit(write(i * 4096, &src, i as usize * 4096, 4096, i))
            .expect("submit");
    }
    let mut c = complete(e, 8);
    c.sort_by_key(|c| c.token);
    assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: 0,
            iovecs: crate::engine::iovecs![dst.iov(0, 4096), dst.iov(4096, 7 * 4096)],
        },
        token: 100,
    })
    .expect("submit");
    assert_eq!(
        complete(e, 1),
        vec![Completion {
            token: 100,
            result: 8 * 4096
        }]
    );
    assert!(dst.as_slice() == src.as_slice());
    assert_eq!(e.in_flight(), 0);
}

#[test]
fn reaps_from_the_mapped_ring() {
    for (dir, direct) in [(shm(), false), (disk(), true)] {
        let t = store(&dir, "ring", 1 << 20);
        let mut e = engine(&t, 16, direct);
        let h = e.ctx.header();
        assert_eq!(h.magic, AIO_RING_MAGIC, "the kernel's ring layout");
        assert!(e.ctx.ring_ok() && e.use_ring);
        assert!(h.nr as usize >= 16);
        round_trip(&mut e);
        let h = e.ctx.header();
        assert_eq!(h.head, h.tail, "we advanced head to tail");
        assert_ne!(h.head, 0, "the ring was used");
        assert!(!e.has_completions());
        assert!(matches!(
            e.info(),
            EngineInfo::LinuxAio(LinuxAioInfo {
                mapped_ring: true,
                ..
            })
        ));
    }
}

#[test]
fn io_getevents_fallback_reaps_the_same() {
    for (dir, direct) in [(shm(), false), (disk(), true)] {
        let t = store(&dir, "getev", 1 << 20);
        let mut e = engine(&t, 16, direct);
        e.use_ring = false;
        round_trip(&mut e);
        assert!(matches!(
            e.info(),
            EngineInfo::LinuxAio(LinuxAioInfo {
                mapped_ring: false,
                ..
            })
        ));
        // io_getevents moved the ring's head itself.
        let h = e.ctx.header();
        assert_eq!(h.head, h.tail);
    }
}

#[test]
fn buffered_batches_complete_inside_io_submit_without_signalling() {
    let t = store(&disk(), "batches", 1 << 20);
    let mut e =
        LinuxAioEngine::for_buffered_batches(open(&t.path, true, false), 8, &AioContextPool::new())
            .expect("engine");
    let fd = *e.completion_fds().first().expect("fd");
    let buf = Aligned::new(4096);
    for t in 0..4 {
        e.submit(write(t * 4096, &buf, 0, 4096, t)).expect("submit");
    }
    assert_eq!(e.commit(&ThreadTurn::default()), 4);
    let mut out = Vec::new();
    assert_eq!(
        e.reap(&mut out, &ThreadTurn::default()),
        4,
        "done when io_submit returned: {out:?}"
    );
    assert!(out.iter().all(|c| c.result == 4096), "{out:?}");
    assert!(!readable(fd, 0), "completions do not signal the eventfd");
    assert_eq!(e.in_flight(), 0);
}

#[test]
fn has_completions_peeks_the_ring_and_eventfd_fires() {
    let t = store(&disk(), "efd", 1 << 20);
    let mut e = engine(&t, 8, true);
    let fd = *e.completion_fds().first().expect("fd");
    let buf = Aligned::new(4096);
    e.submit(write(0, &buf, 0, 4096, 1)).expect("submit");
    assert!(!e.has_completions());
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert_eq!(e.in_flight(), 1);
    assert!(readable(fd, 5000), "the eventfd fires on completion");
    assert!(e.has_completions(), "the ring shows the completion");
    let mut out = Vec::new();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert_eq!(
        out,
        vec![Completion {
            token: 1,
            result: 4096
        }]
    );
    assert!(
        readable(fd, 0),
        "reap leaves the kernel's signal unread (the thread watches the fd edge-triggered)"
    );
    assert!(!e.has_completions());
    assert_eq!(e.in_flight(), 0);
}

#[test]
fn while_polling_the_completion_fd_is_left_alone_and_poll_end_clears_it() {
    let t = store(&disk(), "efd-poll", 1 << 20);
    let mut e = engine(&t, 8, true);
    assert!(e.use_ring, "this test needs the mapped ring");
    let fd = *e.completion_fds().first().expect("fd");
    let buf = Aligned::new(4096);
    e.poll_begin();
    e.submit(write(0, &buf, 0, 4096, 1)).expect("submit");
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert!(readable(fd, 5000), "the kernel still signals the fd");
    assert!(e.has_completions(), "the ring shows the completion");
    let mut out = Vec::new();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert!(readable(fd, 0), "reap did not read the fd while polling");
    assert!(!e.has_completions());
    e.poll_end();
    assert!(
        !readable(fd, 0),
        "poll_end cleared the fd before the thread may sleep"
    );
    // Not polling: reap does not read the fd, and the next completion still wakes an
    // edge-triggered watcher.
    let watch = EdgeWatch::new(&[fd]);
    e.submit(write(4096, &buf, 0, 4096, 2)).expect("submit");
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert!(watch.fired(5000), "the completion wakes the watcher");
    out.clear();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert!(readable(fd, 0), "reap left the kernel's signal unread");
    // A polling period with nothing in the kernel: no completion can signal the fd, and
    // poll_end does not read it (a syscall per period). A signal from elsewhere shows that.
    e.poll_begin();
    e.eventfd.write(1).expect("signal");
    e.poll_end();
    assert!(
        readable(fd, 0),
        "poll_end read the fd with nothing in flight"
    );
    e.eventfd.read().expect("clear");
    // A request submitted while polling: poll_end clears its signal.
    e.poll_begin();
    e.submit(write(8192, &buf, 0, 4096, 3)).expect("submit");
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert!(readable(fd, 5000));
    out.clear();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    e.poll_end();
    assert!(!readable(fd, 0), "poll_end cleared the fd");
}

#[test]
fn partial_submission_keeps_the_rest_pending() {
    let t = store(&shm(), "partial", 1 << 20);
    let mut e = engine(&t, 8, false);
    let buf = Aligned::new(4096);
    for i in 0..5 {
        e.submit(write(i * 4096, &buf, 0, 4096, i)).expect("submit");
    }
    e.hooks.script.push_back(Scripted::Limit(2));
    assert_eq!(e.commit(&ThreadTurn::default()), 2);
    assert_eq!(e.hooks.submit_calls, 1, "one io_submit per commit");
    assert_eq!(e.pending.len(), 3);
    assert_eq!(e.in_flight(), 5);
    assert_eq!(e.capacity(), 3);
    let mut out = Vec::new();
    e.reap(&mut out, &ThreadTurn::default());
    assert_eq!(out.len(), 2);
    assert_eq!(e.commit(&ThreadTurn::default()), 3);
    assert_eq!(e.hooks.submit_calls, 2);
    e.reap(&mut out, &ThreadTurn::default());
    out.sort_by_key(|c| c.token);
    assert_eq!(
        out.iter().map(|c| c.token).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    assert!(out.iter().all(|c| c.result == 4096));
    assert_eq!(e.in_flight(), 0);
}

#[test]
fn eagain_keeps_everything_pending() {
    let t = store(&shm(), "eagain", 1 << 20);
    let mut e = engine(&t, 8, false);
    let buf = Aligned::new(4096);
    for i in 0..3 {
        e.submit(write(i * 4096, &buf, 0, 4096, i)).expect("submit");
    }
    e.hooks.script.push_back(Scripted::Fail(libc::EAGAIN));
    assert_eq!(e.commit(&ThreadTurn::default()), 0);
    assert_eq!(e.pending.len(), 3);
    let mut out = Vec::new();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 0);
    let c = complete(&mut e, 3);
    assert_eq!(c.len(), 3);
    assert!(c.iter().all(|c| c.result == 4096));
}

#[test]
fn first_iocb_error_completes_it_and_keeps_the_rest() {
    let t = store(&shm(), "einval", 1 << 20);
    let mut e = engine(&t, 8, false);
    let fd = *e.completion_fds().first().expect("fd");
    let buf = Aligned::new(4096);
    for i in 0..3 {
        e.submit(write(i * 4096, &buf, 0, 4096, i)).expect("submit");
    }
    e.hooks.script.push_back(Scripted::Fail(libc::EIO));
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert_eq!(e.pending.len(), 2);
    assert!(readable(fd, 0), "the error completion is announced");
    assert!(e.has_completions());
    let mut out = Vec::new();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert_eq!(
        out,
        vec![Completion {
            token: 0,
            result: -i64::from(libc::EIO)
        }]
    );
    let mut c = complete(&mut e, 2);
    c.sort_by_key(|c| c.token);
    assert_eq!(c.iter().map(|c| c.token).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(e.in_flight(), 0);
}

#[test]
fn refused_fdsync_falls_back_to_fdatasync() {
    let t = store(&shm(), "fdsync", 1 << 20);
    let mut e = engine(&t, 8, false);
    e.hooks.refuse_fdsync = true;
    let buf = Aligned::new(4096);
    e.submit(IoRequest {
        op: IoOp::Flush,
        token: 7,
    })
    .expect("flush");
    e.submit(write(0, &buf, 0, 4096, 8)).expect("write");
    assert_eq!(
        e.commit(&ThreadTurn::default()),
        1,
        "the refused flush ran synchronously"
    );
    assert!(e.fdsync_refused);
    assert!(
        matches!(
            e.info(),
            EngineInfo::LinuxAio(LinuxAioInfo { fdsync: false, .. })
        ),
        "{:?}",
        e.info()
    );
    let mut c = complete(&mut e, 2);
    c.sort_by_key(|c| c.token);
    assert_eq!(
        c,
        vec![
            Completion {
                token: 7,
                result: 0
            },
            Completion {
                token: 8,
                result: 4096
            }
        ]
    );
    // Later flushes do not try FDSYNC again.
    let calls = e.hooks.submit_calls;
    e.submit(IoRequest {
        op: IoOp::Flush,
        token: 9,
    })
    .expect("flush");
    assert_eq!(
        complete(&mut e, 1),
        vec![Completion {
            token: 9,
            result: 0
        }]
    );
    assert_eq!(e.hooks.submit_calls, calls);
}

#[test]
fn fdsync_through_aio_where_the_file_system_takes_it() {
    // Reports what the kernel does on each file system (the engine copes either way).
    for (dir, direct) in [(shm(), false), (disk(), true)] {
        let t = store(&dir, "flush", 1 << 20);
        let mut e = engine(&t, 8, direct);
        e.submit(IoRequest {
            op: IoOp::Flush,
            token: 1,
        })
        .expect("flush");
        assert_eq!(
            complete(&mut e, 1),
            vec![Completion {
                token: 1,
                result: 0
            }]
        );
        eprintln!(
            "{}: FDSYNC {}",
            dir.display(),
            if e.fdsync_refused {
                "refused"
            } else {
                "accepted"
            }
        );
    }
}

#[test]
fn discard_and_write_zeroes_complete_through_reap() {
    let t = store(&shm(), "dz", 1 << 20);
    let mut e = engine(&t, 8, false);
    let fd = *e.completion_fds().first().expect("fd");
    e.submit(IoRequest {
        op: IoOp::Discard {
            offset: 0,
            len: 4096,
        },
        token: 1,
    })
    .expect("discard");
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert_eq!(e.hooks.submit_calls, 0, "no AIO opcode for discard");
    assert!(readable(fd, 0));
    let mut out = Vec::new();
    e.reap(&mut out, &ThreadTurn::default());
    assert_eq!(out.len(), 1);
    assert!(out[0].result == 4096 || out[0].result == -i64::from(libc::EOPNOTSUPP));
    assert!(!readable(fd, 0));
}

#[test]
fn short_write_resubmits_the_remainder_and_no_progress_is_enospc() {
    let t = store(&shm(), "short", 1 << 20);
    let mut e = engine(&t, 8, false);
    let mut buf = Aligned::new(4096);
    pattern(&mut buf, 9);
    e.submit(write(8192, &buf, 0, 4096, 1)).expect("write");
    // Keep it out of the kernel, then pretend the kernel wrote 1000 bytes of it.
    e.hooks.script.push_back(Scripted::Limit(0));
    assert_eq!(e.commit(&ThreadTurn::default()), 0);
    let idx = e.pending.pop_front().expect("pending");
    e.submitted += 1;
    let mut out = Vec::new();
    e.on_event(
        IoEvent {
            data: u64::from(idx),
            res: 1000,
            ..IoEvent::default()
        },
        &mut out,
    );
    assert!(out.is_empty(), "a short write does not complete");
    assert_eq!(e.retry.len(), 1);
    assert_eq!(e.slots[idx as usize].iocb.aio_offset, 8192 + 1000);
    e.resubmit_retries();
    assert_eq!(
        e.submitted, 1,
        "the remainder went straight back to the kernel"
    );
    let c = complete(&mut e, 1);
    assert_eq!(
        c,
        vec![Completion {
            token: 1,
            result: 4096
        }]
    );
    let f = File::open(&t.path).expect("open");
    let mut back = vec![0u8; 3096];
    f.read_exact_at(&mut back, 8192 + 1000).expect("read");
    assert_eq!(&back[..], &buf.as_slice()[1000..]);

    e.submit(write(0, &buf, 0, 4096, 2)).expect("write");
    e.hooks.script.push_back(Scripted::Limit(0));
    e.commit(&ThreadTurn::default());
    let idx = e.pending.pop_front().expect("pending");
    e.submitted += 1;
    e.on_event(
        IoEvent {
            data: u64::from(idx),
            res: 0,
            ..IoEvent::default()
        },
        &mut out,
    );
    assert_eq!(
        out,
        vec![Completion {
            token: 2,
            result: -i64::from(libc::ENOSPC)
        }]
    );
    assert_eq!(e.in_flight(), 0);
}

#[test]
fn more_than_uio_maxiov_buffers_go_in_chunks() {
    let t = store(&shm(), "maxiov", 1 << 20);
    let mut e = engine(&t, 8, false);
    let n = libc::UIO_MAXIOV as usize + 100;
    let mut src = Aligned::new(n * 16);
    pattern(&mut src, 5);
    let dst = Aligned::new(n * 16);
    e.submit(IoRequest {
        op: IoOp::Write {
            offset: 0,
            iovecs: (0..n).map(|i| src.iov(i * 16, 16)).collect(),
        },
        token: 1,
    })
    .expect("write");
    assert_eq!(
        complete(&mut e, 1),
        vec![Completion {
            token: 1,
            result: (n * 16) as i64
        }]
    );
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: 0,
            iovecs: (0..n).map(|i| dst.iov(i * 16, 16)).collect(),
        },
        token: 2,
    })
    .expect("read");
    assert_eq!(
        complete(&mut e, 1),
        vec![Completion {
            token: 2,
            result: (n * 16) as i64
        }]
    );
    assert!(dst.as_slice() == src.as_slice());
}

#[test]
fn read_at_eof_zero_fills_with_o_direct() {
    let t = store(&disk(), "eof", 4096);
    let mut e = engine(&t, 8, true);
    let mut dst = Aligned::new(3 * 4096);
    dst.fill(0xee);
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: 0,
            iovecs: crate::engine::iovecs![dst.iov(0, 3 * 4096)],
        },
        token: 4,
    })
    .expect("read");
    assert_eq!(
        complete(&mut e, 1),
        vec![Completion {
            token: 4,
            result: 3 * 4096
        }]
    );
    assert!(dst.as_slice().iter().all(|&b| b == 0));
}

#[test]
fn drop_waits_for_requests_in_the_kernel() {
    let t = store(&disk(), "drop", 1 << 20);
    let buf = Aligned::new(64 * 4096);
    let mut e = engine(&t, 64, true);
    for i in 0..64u64 {
        e.submit(write(i * 4096, &buf, i as usize * 4096, 4096, i))
            .expect("submit");
    }
    assert_eq!(e.commit(&ThreadTurn::default()), 64);
    let start = std::time::Instant::now();
    drop(e);
    assert!(start.elapsed() < DROP_TIMEOUT);
    // `buf` is freed only now, after the engine waited for the kernel.
}

#[test]
fn a_drained_context_is_kept_in_its_pool_for_the_next_engine() {
    // The pool is passed in: two pools (two iothreads) share nothing.
    let pool = AioContextPool::new();
    let t = store(&disk(), "spare", 1 << 20);
    let buf = Aligned::new(4096);
    let mut e = engine_in(&t, 12, &pool);
    let first = e.ctx.id();
    e.submit(write(0, &buf, 0, 4096, 1)).expect("submit");
    assert_eq!(complete(&mut e, 1).len(), 1);
    assert_eq!(pool.spares(), 0);
    drop(e);
    assert_eq!(pool.spares(), 1, "the drained context was not kept");
    let elsewhere = engine_in(&t, 12, &AioContextPool::new());
    assert_ne!(
        elsewhere.ctx.id(),
        first,
        "another pool has its own contexts"
    );
    assert_eq!(pool.spares(), 1);
    // The same size from the same pool: the kept context, which works as a new one.
    let mut e = engine_in(&t, 12, &pool);
    assert_eq!(pool.spares(), 0, "the kept context was not taken");
    assert_eq!(e.ctx.id(), first);
    e.submit(write(4096, &buf, 0, 4096, 2)).expect("submit");
    let done = complete(&mut e, 1);
    assert_eq!((done[0].token, done[0].result), (2, 4096));
    // Another size gets a context of its own, while the first is in use.
    let other = engine_in(&t, 13, &pool);
    assert_ne!(other.ctx.id(), first);
    assert_eq!(pool.spares(), 0);
    // An engine dropped with a request it never reaped: the context is still drained by the
    // drop's wait, and kept.
    e.submit(write(8192, &buf, 0, 4096, 3)).expect("submit");
    e.commit(&ThreadTurn::default());
    drop(e);
    assert_eq!(pool.spares(), 1);
    let e = engine_in(&t, 12, &pool);
    assert_eq!(e.ctx.id(), first);
    drop((e, other));
    assert_eq!(pool.spares(), 2);
    // A process about to exit: what comes back is left to the exit, not kept.
    pool.exit_switch().leave_to_process_exit();
    drop(engine_in(&t, 14, &pool));
    assert_eq!(pool.spares(), 2, "left to the exit, not kept");
}

#[test]
fn the_engines_own_signal_is_cleared_by_the_reap_that_hands_its_completion_out() {
    let t = store(&disk(), "efd-self", 1 << 20);
    let mut e = engine(&t, 8, true);
    let fd = *e.completion_fds().first().expect("fd");
    let watch = EdgeWatch::new(&[fd]);
    let mut b = [0u8; 16];
    // An offset past i64 completes on this thread, announced by the engine's own signal.
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: u64::MAX - 4,
            iovecs: crate::engine::iovecs![crate::engine::IoVec {
                base: b.as_mut_ptr(),
                len: b.len(),
            }],
        },
        token: 9,
    })
    .expect("submit");
    e.commit(&ThreadTurn::default());
    assert!(
        readable(fd, 0),
        "the local completion is announced on the fd"
    );
    let mut out = Vec::new();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert_eq!(out[0].result, -i64::from(libc::EINVAL));
    assert!(
        !watch.fired(0),
        "reap dropped the signal for what it handed out: no wake-up for work already done"
    );
}
