//! A page-cache file: hits inline, batches to the ring, refused-flag writes to one `io_submit`,
//! a lone miss retried on the thread.

use super::*;

use std::os::unix::io::AsRawFd;

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
    let st = e.stats();
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
    assert_eq!(e.stats().deferred, 1);
}

#[test]
fn on_a_page_cache_file_a_batch_goes_to_the_ring_and_a_lone_request_inline() {
    let Some((_store, mut e)) = cached_ring_engine("auto-ring-batch") else {
        return;
    };
    assert!(matches!(e.strategy, Strategy::PageCache(_)));
    let buf = Aligned::new(4096);
    let batch = ring_batch() as u64;
    // The first batch tries its first read inline, to learn whether the file takes
    // RWF_NOWAIT reads (a sparse file's hole is a page-cache hit); the next goes whole.
    for round in 0..2 {
        for t in 0..batch {
            e.submit(read(&buf, t * 4096, round * batch + t))
                .expect("room");
        }
        assert_eq!(complete(&mut e, ring_batch()).len(), ring_batch());
    }
    let st = e.stats();
    assert_eq!((st.inline, st.deferred), (1, 2 * batch - 1), "{st:?}");
    e.submit(read(&buf, 0, 99)).expect("room");
    assert_eq!(complete(&mut e, 1).len(), 1);
    let st = e.stats();
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
    let c = complete(&mut e, ring_batch());
    assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
    let after = e.stats();
    let inline_writes = after.inline - st.inline;
    if e.nowait.flags[1] == 0 {
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
    if e.nowait.flags[1] != 0 {
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
        e.commit(&ThreadTurn::default()),
        ring_batch(),
        "the turn's writes, in one io_submit"
    );
    assert_eq!(e.done.len(), ring_batch(), "completed inside io_submit");
    let c = complete(&mut e, ring_batch());
    assert!(c.iter().all(|c| c.result == 4096), "{c:?}");
    let batched = e.stats();
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
    let busy = ThreadTurn::new(0, 2);
    e.submit(read(&buf, 0, 1)).expect("room");
    assert_eq!(complete_in(&mut e, 1, &busy)[0].result, 4096);
    let st = e.stats();
    if st.inline == 1 {
        eprintln!("the fadvise left the page cached: nothing to check");
        return;
    }
    assert_eq!((st.inline, st.deferred), (0, 1), "{st:?}");
    // Alone on the thread: the miss is retried inline without RWF_NOWAIT, and the EAGAIN
    // that sent it there is not a failed attempt.
    e.submit(read(&buf, 64 * 4096, 2)).expect("room");
    assert_eq!(complete(&mut e, 1)[0].result, 4096);
    let after = e.stats();
    assert_eq!(
        (after.inline, after.deferred, after.failed),
        (1, 1, st.failed),
        "{after:?}"
    );
    assert!(buf.as_slice().iter().all(|&b| b == 0x3c), "the data");
}
