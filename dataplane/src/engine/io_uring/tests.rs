//! Tests of the io_uring engine that need its insides: the flags and extras in force, the opcode
//! restrictions, the completion fd, short-read resubmission, local completions, `Drop`.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use ::io_uring::{opcode, squeue, types};

use super::*;
use crate::engine::conformance::{complete, open, readable, store, Aligned, EdgeWatch, Store};
use crate::engine::{EngineInfo, IoOp, IoUringFlags, IoVec};

fn temp(name: &str, size: u64) -> (Store, File) {
    let t = store(Path::new("/dev/shm"), name, size);
    let f = open(&t.path, true, false);
    (t, f)
}

fn opts(depth: u32, io_uring: IoUringFlags) -> EngineOptions {
    EngineOptions {
        kind: EngineKind::IoUring,
        depth,
        io_uring,
        direct: false,
        fault: None,
    }
}

fn engine(f: File, depth: u32) -> IoUringEngine {
    IoUringEngine::new(f, &opts(depth, IoUringFlags::default())).expect("ring")
}

#[test]
fn all_flags_are_in_force_on_this_kernel() {
    let (_t, f) = temp("describe", 4096);
    let e = engine(f, 32);
    assert_eq!(
        e.info(),
        EngineInfo::IoUring(IoUringInfo {
            flags: [
                "SINGLE_ISSUER",
                "COOP_TASKRUN",
                "TASKRUN_FLAG",
                "SUBMIT_ALL"
            ]
            .map(String::from)
            .to_vec(),
            registered_file: true,
            restricted: true,
        })
    );
    assert_eq!(e.kind(), EngineKind::IoUring);
    let p = e.ring.params();
    assert_eq!((p.sq_entries(), p.cq_entries()), (32, 64));
}

#[test]
fn io_wq_workers_are_capped_for_the_thread() {
    let (_t, f) = temp("iowq", 4096);
    let flags = IoUringFlags {
        max_workers: 3,
        ..IoUringFlags::default()
    };
    let _e = IoUringEngine::new(f, &opts(8, flags)).expect("ring");
    // The limit belongs to the thread (its io-wq), not the ring: read it back through another
    // ring of this thread (the engine's own refuses register calls once restricted). [0, 0]
    // changes nothing and returns the limits in force.
    let probe = io_uring::IoUring::new(4).expect("a plain ring");
    let mut now = [0u32; 2];
    probe
        .submitter()
        .register_iowq_max_workers(&mut now)
        .expect("IORING_REGISTER_IOWQ_MAX_WORKERS (Linux 5.15)");
    assert_eq!(now, [3, 3], "bounded and unbounded workers capped");
}

#[test]
fn flags_not_asked_for_are_not_set() {
    let (_t, f) = temp("noflags", 4096);
    let none = IoUringFlags {
        single_issuer: false,
        coop_taskrun: false,
        taskrun_flag: true,
        max_workers: 0,
    };
    let e = IoUringEngine::new(f, &opts(5, none)).expect("ring");
    assert_eq!(
        e.info(),
        EngineInfo::IoUring(IoUringInfo {
            flags: vec!["SUBMIT_ALL".into()],
            registered_file: true,
            restricted: true,
        })
    );
    assert_eq!(e.capacity(), 5);
    let p = e.ring.params();
    assert_eq!((p.sq_entries(), p.cq_entries()), (8, 16));
    assert!(!p.is_setup_single_issuer());
}

#[test]
fn description_reports_fallbacks() {
    let flags = SetupFlags {
        single_issuer: false,
        coop_taskrun: true,
        taskrun_flag: true,
        submit_all: true,
        r_disabled: false,
    };
    assert_eq!(
        IoUringEngine::describe(flags, Target::Fd(3), false),
        IoUringInfo {
            flags: vec![
                "COOP_TASKRUN".into(),
                "TASKRUN_FLAG".into(),
                "SUBMIT_ALL".into()
            ],
            registered_file: false,
            restricted: false,
        }
    );
}

/// Pushes one raw SQE past the engine and returns its CQE's result.
fn raw(e: &mut IoUringEngine, entry: squeue::Entry) -> i32 {
    let entry = entry.user_data(u64::MAX);
    // SAFETY: the SQE carries no pointers (NOP) or points at `buf`, which outlives the wait
    // below for its completion.
    unsafe { e.ring.submission().push(&entry) }.expect("sq room");
    e.ring.submit_and_wait(1).expect("submit");
    let cqe = e.ring.completion().next().expect("cqe");
    assert_eq!(cqe.user_data(), u64::MAX);
    cqe.result()
}

#[test]
fn restrictions_refuse_other_opcodes_and_unregistered_files() {
    let (_t, f) = temp("restrict", 4096);
    let raw_fd = f.as_raw_fd();
    let mut e = engine(f, 8);
    assert!(e.restricted);
    // NOP is not on the allow-list, even with the required FIXED_FILE flag.
    let nop = opcode::Nop::new().build().flags(squeue::Flags::FIXED_FILE);
    assert_eq!(raw(&mut e, nop), -libc::EACCES);
    // An allowed opcode on a plain descriptor lacks the required FIXED_FILE flag.
    let mut buf = [0u8; 512];
    let iov = [libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }];
    let readv = opcode::Readv::new(types::Fd(raw_fd), iov.as_ptr(), 1).build();
    assert_eq!(raw(&mut e, readv), -libc::EACCES);
    // The same read on the registered file is allowed.
    let readv = opcode::Readv::new(types::Fixed(0), iov.as_ptr(), 1).build();
    assert_eq!(raw(&mut e, readv), 512);
    // No io_uring_register call is allowed after enabling.
    let err = e
        .ring
        .submitter()
        .register_files_update(0, &[raw_fd])
        .expect_err("register refused");
    assert_eq!(err.raw_os_error(), Some(libc::EACCES));
}

#[test]
fn completion_fd_fires_and_reap_leaves_it_unread() {
    let (_t, f) = temp("efd", 1 << 20);
    let mut e = engine(f, 8);
    let fd = *e.completion_fds().first().expect("fd");
    assert!(!readable(fd, 0));
    let buf = vec![0x42u8; 4096];
    let write_at = |offset: u64, token: u64| IoRequest {
        op: IoOp::Write {
            offset,
            iovecs: crate::engine::iovecs![IoVec {
                base: buf.as_ptr().cast_mut(),
                len: buf.len(),
            }],
        },
        token,
    };
    e.submit(write_at(4096, 3)).expect("submit");
    assert_eq!(e.in_flight(), 1);
    assert!(!readable(fd, 0), "nothing reaches the kernel before commit");
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert!(readable(fd, 5000), "the completion fd fires");
    assert!(e.has_completions());
    let mut out = Vec::new();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert_eq!(
        out,
        vec![Completion {
            token: 3,
            result: 4096
        }]
    );
    assert!(
        readable(fd, 0),
        "reap does not read the fd (a syscall per wake-up): the thread watches it edge-triggered"
    );
    assert!(!e.has_completions());
    assert_eq!((e.in_flight(), e.capacity()), (0, 8));
    // The next completion wakes an edge-triggered sleeper though the fd's count was never
    // cleared.
    let watch = EdgeWatch::new(&[fd]);
    e.submit(write_at(8192, 4)).expect("submit");
    assert_eq!(e.commit(&ThreadTurn::default()), 1);
    assert!(watch.fired(5000), "the second completion wakes the watcher");
    out.clear();
    assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 1);
    assert_eq!(out[0].token, 4);
}

#[test]
fn short_read_on_a_growing_file_is_resubmitted() {
    let (_t, mut f) = temp("grow", 0);
    f.write_all(&[1u8; 4096]).expect("first half");
    let mut e = engine(f.try_clone().expect("clone"), 8);
    let dst = Aligned::new(8192);
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: 0,
            iovecs: crate::engine::iovecs![dst.iov(0, 2048), dst.iov(2048, 6144)],
        },
        token: 1,
    })
    .expect("submit");
    e.commit(&ThreadTurn::default());
    // The first readv stops at end of file (4096 of 8192); its CQE is waiting.
    assert!(readable(*e.completion_fds().first().expect("fd"), 5000));
    // The file grows before the engine looks at the short read.
    f.write_all(&[2u8; 4096]).expect("second half");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.is_empty() && Instant::now() < deadline {
        e.reap(&mut out, &ThreadTurn::default());
        readable(*e.completion_fds().first().expect("fd"), 10);
    }
    assert_eq!(
        out,
        vec![Completion {
            token: 1,
            result: 8192
        }]
    );
    assert_eq!(
        e.resubmits(),
        1,
        "the rest was resubmitted, not zero-filled"
    );
    assert!(dst.as_slice()[..4096].iter().all(|&b| b == 1));
    assert!(dst.as_slice()[4096..].iter().all(|&b| b == 2));
}

#[test]
fn invalid_ranges_complete_locally_and_wake() {
    let (_t, f) = temp("inval", 4096);
    let mut e = engine(f, 2);
    let fd = *e.completion_fds().first().expect("fd");
    let watch = EdgeWatch::new(&[fd]);
    let mut b = [0u8; 16];
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: u64::MAX - 4,
            iovecs: crate::engine::iovecs![IoVec {
                base: b.as_mut_ptr(),
                len: b.len(),
            }],
        },
        token: 8,
    })
    .expect("submit");
    assert_eq!((e.in_flight(), e.capacity()), (1, 1));
    assert!(e.has_completions());
    assert!(readable(fd, 0));
    assert_eq!(
        complete(&mut e, 1),
        vec![Completion {
            token: 8,
            result: -i64::from(libc::EINVAL)
        }]
    );
    assert_eq!(e.capacity(), 2);
    assert!(
        !watch.fired(0),
        "the reap that handed the local completion out cleared its signal: no empty wake-up"
    );
    assert!(!readable(fd, 0));
}

#[test]
fn commit_makes_one_batch_and_full_requests_wait() {
    let (_t, f) = temp("batch", 1 << 20);
    let mut e = engine(f, 4);
    let buf = Aligned::new(4096);
    for t in 0..4 {
        e.submit(IoRequest {
            op: IoOp::Write {
                offset: t * 4096,
                iovecs: crate::engine::iovecs![buf.iov(0, 4096)],
            },
            token: t,
        })
        .expect("submit");
    }
    assert_eq!(
        e.submit(IoRequest {
            op: IoOp::Flush,
            token: 9
        }),
        Err(SubmitError::Full)
    );
    assert_eq!(e.commit(&ThreadTurn::default()), 4);
    assert_eq!(
        e.commit(&ThreadTurn::default()),
        0,
        "nothing left to commit"
    );
    let mut c = complete(&mut e, 4);
    c.sort_by_key(|c| c.token);
    assert_eq!(
        c.iter().map(|c| (c.token, c.result)).collect::<Vec<_>>(),
        vec![(0, 4096), (1, 4096), (2, 4096), (3, 4096)]
    );
}

#[test]
fn drop_waits_for_requests_in_the_kernel() {
    let (_t, f) = temp("drop", 1 << 20);
    let mut e = engine(f, 16);
    let buf = Aligned::new(65536);
    for t in 0..16 {
        e.submit(IoRequest {
            op: IoOp::Write {
                offset: t * 65536,
                iovecs: crate::engine::iovecs![buf.iov(0, 65536)],
            },
            token: t,
        })
        .expect("submit");
    }
    e.commit(&ThreadTurn::default());
    let started = Instant::now();
    drop(e);
    assert!(started.elapsed() < DROP_WAIT);
}

#[test]
fn probe_via_the_engine_type() {
    IoUringEngine::probe().expect("probe");
}

#[test]
fn completion_fd_wakes_a_sleeping_thread_for_direct_io() {
    // O_DIRECT on the work tree's disk completes from the block layer through task work; with
    // COOP_TASKRUN the sleeping thread must still be woken (no busy reap here).
    let dir = std::env::current_dir().expect("cwd").join("target");
    let t = store(&dir, "wake", 0);
    std::fs::write(&t.path, vec![0x77u8; 65536]).expect("fill");
    let f = open(&t.path, true, true);
    let mut e = engine(f, 8);
    let dst = Aligned::new(65536);
    e.submit(IoRequest {
        op: IoOp::Read {
            offset: 0,
            iovecs: crate::engine::iovecs![dst.iov(0, 65536)],
        },
        token: 4,
    })
    .expect("submit");
    e.commit(&ThreadTurn::default());
    let started = Instant::now();
    assert!(
        readable(*e.completion_fds().first().expect("fd"), 5000),
        "no wake-up"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let mut out = Vec::new();
    e.reap(&mut out, &ThreadTurn::default());
    assert_eq!(
        out,
        vec![Completion {
            token: 4,
            result: 65536
        }]
    );
    assert!(dst.as_slice().iter().all(|&b| b == 0x77));
}
