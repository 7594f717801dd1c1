//! The conformance suite every I/O engine passes: round trips with several buffers, reads at end
//! of file, flush, a full engine, error completions, discard and write-zeroes (done or UNSUPP),
//! and the completion fd's readiness. Runs on tmpfs (buffered) and on the work tree's file system
//! with O_DIRECT, with 4 KiB-aligned buffers.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Completion, IoEngine, IoOp, IoRequest, IoVec, SubmitError, ThreadTurn};

/// Builds an engine under test on `file` with room for `depth` requests.
pub(crate) type Factory<'a> = &'a dyn Fn(File, u32, bool) -> Box<dyn IoEngine>;

/// A 4 KiB-aligned buffer (O_DIRECT needs aligned memory).
pub(crate) struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Aligned {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation failed");
        Aligned { ptr, len }
    }
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub(crate) fn fill(&mut self, v: u8) {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::ptr::write_bytes(self.ptr, v, self.len) };
    }
    pub(crate) fn iov(&self, off: usize, len: usize) -> IoVec {
        assert!(off + len <= self.len);
        // SAFETY: `off + len` stays inside the allocation.
        let base = unsafe { self.ptr.add(off) };
        IoVec { base, len }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 4096).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, layout) };
    }
}

/// Whether `fd` becomes readable within `timeout_ms`.
pub(crate) fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, nfds 1; poll writes only its `revents`.
    unsafe { libc::poll(&mut p, 1, timeout_ms) == 1 }
}

/// Watches fds edge-triggered, as the iothread does (`Handler::wake_fds`).
pub(crate) struct EdgeWatch {
    epfd: RawFd,
}

impl EdgeWatch {
    /// Watches `fds`, then drops the edges of signals that came before.
    pub(crate) fn new(fds: &[RawFd]) -> EdgeWatch {
        // SAFETY: plain syscall; the fd is owned by the returned value and closed on drop.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(epfd >= 0, "epoll_create1");
        for &fd in fds {
            let mut ev = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                u64: fd as u64,
            };
            // SAFETY: `epfd` and `fd` are open; `ev` is a valid epoll_event for the call.
            let r = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
            assert_eq!(r, 0, "epoll_ctl add {fd}");
        }
        let w = EdgeWatch { epfd };
        while w.fired(0) {}
        w
    }

    /// Whether a signal after the last look arrives within `timeout_ms`. An interrupted wait
    /// is retried: io_uring's task work interrupts the submitter's sleep (EINTR) and signals
    /// the fd when it runs, on the way back to user space.
    pub(crate) fn fired(&self, timeout_ms: i32) -> bool {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        for _ in 0..100 {
            // SAFETY: `evs` is a valid array of 8 epoll_events, alive for the call.
            let n = unsafe { libc::epoll_wait(self.epfd, evs.as_mut_ptr(), 8, timeout_ms) };
            if n >= 0 {
                return n > 0;
            }
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EINTR),
                "epoll_wait"
            );
        }
        false
    }
}

impl Drop for EdgeWatch {
    fn drop(&mut self) {
        // SAFETY: `epfd` was opened in `new` and is closed once, here.
        unsafe { libc::close(self.epfd) };
    }
}

/// Commits and reaps until `n` completions arrived (waiting on the completion fd if any), as
/// an engine alone on its thread.
pub(crate) fn complete(e: &mut dyn IoEngine, n: usize) -> Vec<Completion> {
    complete_in(e, n, &ThreadTurn::default())
}

/// [`complete`] in the thread's round `turn`.
pub(crate) fn complete_in(e: &mut dyn IoEngine, n: usize, turn: &ThreadTurn) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    e.commit(turn);
    while out.len() < n {
        e.reap(&mut out, turn);
        if out.len() >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions after 10 s",
            out.len()
        );
        let fds = e.completion_fds();
        if fds.is_empty() {
            e.commit(turn);
        } else {
            let mut polled: Vec<libc::pollfd> = fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `polled` is a valid array of `polled.len()` pollfds, alive for the call.
            unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 10) };
        }
    }
    out
}

/// A backing file for engine tests, removed on drop.
pub(crate) struct Store {
    /// Where it is.
    pub(crate) path: PathBuf,
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A `size`-byte file in `dir` (created if missing), named after `name` and unique in this
/// process, so tests running in parallel never share one.
pub(crate) fn store(dir: &Path, name: &str, size: u64) -> Store {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::fs::create_dir_all(dir).expect("store dir");
    let path = dir.join(format!("osprey-engine-{}-{n}-{name}", std::process::id()));
    let f = File::create(&path).expect("create");
    f.set_len(size).expect("set_len");
    Store { path }
}

/// Opens a store for reading (and writing), with O_DIRECT when `direct`.
pub(crate) fn open(path: &Path, write: bool, direct: bool) -> File {
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path).expect("open store")
}

/// Runs every check for an engine named `name` on tmpfs (buffered) and on the work tree's file
/// system (O_DIRECT). `backed` is false for engines that do not touch the file (Null).
pub(crate) fn check_all(name: &str, make: Factory<'_>, backed: bool) {
    let tmpfs = Path::new("/dev/shm");
    let disk = std::env::current_dir().expect("cwd").join("target");
    std::fs::create_dir_all(&disk).expect("target dir");
    for (dir, direct) in [(tmpfs, false), (disk.as_path(), true)] {
        let ctx = format!("{name} on {} (direct={direct})", dir.display());
        round_trip(make, dir, direct, backed, &ctx);
        read_at_eof(make, dir, direct, backed, &ctx);
        flush_and_full_engine(make, dir, direct, &ctx);
        if backed {
            error_completion(make, dir, direct, &ctx);
        }
        discard_and_write_zeroes(make, dir, direct, backed, &ctx);
    }
}

fn round_trip(make: Factory<'_>, dir: &Path, direct: bool, backed: bool, ctx: &str) {
    let s = store(dir, "rt", 1 << 20);
    let mut e = make(open(&s.path, true, direct), 32, direct);
    let mut src = Aligned::new(16384);
    for (i, b) in (0..16384).map(|i| (i * 7 % 251) as u8).enumerate() {
        // SAFETY: i < 16384 = len.
        unsafe { *src.ptr.add(i) = b };
    }
    let dst = Aligned::new(16384);
    let w = IoOp::Write {
        offset: 65536,
        iovecs: crate::engine::iovecs![src.iov(0, 4096), src.iov(4096, 12288)],
    };
    e.submit(IoRequest { op: w, token: 11 })
        .expect("submit write");
    let c = complete(e.as_mut(), 1);
    assert_eq!(
        c,
        vec![Completion {
            token: 11,
            result: 16384
        }],
        "{ctx}: write"
    );
    let r = IoOp::Read {
        offset: 65536,
        iovecs: crate::engine::iovecs![dst.iov(0, 8192), dst.iov(8192, 8192)],
    };
    e.submit(IoRequest { op: r, token: 12 })
        .expect("submit read");
    let c = complete(e.as_mut(), 1);
    assert_eq!(
        c,
        vec![Completion {
            token: 12,
            result: 16384
        }],
        "{ctx}: read"
    );
    if backed {
        assert!(
            dst.as_slice() == src.as_slice(),
            "{ctx}: data read back differs"
        );
    } else {
        assert!(
            dst.as_slice().iter().all(|&b| b == 0),
            "{ctx}: null reads return zeros"
        );
    }
    assert_eq!(e.in_flight(), 0, "{ctx}: nothing left in flight");
    // A completion posted by a kernel worker (io-wq, where the file system cannot take the
    // request inline) is visible before that worker signals the eventfd, so the reap above may
    // overtake the signal. Let any such late signal land; the next reap must find nothing.
    std::thread::sleep(Duration::from_millis(50));
    let mut late = Vec::new();
    e.reap(&mut late, &ThreadTurn::default());
    assert!(late.is_empty(), "{ctx}: completions reaped twice: {late:?}");
    // The completion fds are never read on the reaping path (the iothread watches them
    // edge-triggered): a completion must still wake a sleeper, whatever their counts.
    let fds = e.completion_fds();
    if !fds.is_empty() {
        let watch = EdgeWatch::new(&fds);
        let r = IoOp::Read {
            offset: 65536,
            iovecs: crate::engine::iovecs![dst.iov(0, 4096)],
        };
        e.submit(IoRequest { op: r, token: 13 })
            .expect("submit read");
        e.commit(&ThreadTurn::default());
        let mut got = Vec::new();
        e.reap(&mut got, &ThreadTurn::default());
        if got.is_empty() {
            assert!(
                watch.fired(5000),
                "{ctx}: a completion must wake an edge-triggered watcher"
            );
            got = complete(e.as_mut(), 1);
        }
        assert_eq!(
            got,
            vec![Completion {
                token: 13,
                result: 4096
            }],
            "{ctx}: read after the fd was left unread"
        );
    }
    src.fill(0);
}

fn read_at_eof(make: Factory<'_>, dir: &Path, direct: bool, backed: bool, ctx: &str) {
    let s = store(dir, "eof", 4096);
    {
        let mut f = open(&s.path, true, false);
        std::io::Write::write_all(&mut f, &[0x5au8; 4096]).expect("fill");
    }
    let mut e = make(open(&s.path, true, direct), 8, direct);
    let mut dst = Aligned::new(8192);
    dst.fill(0xff);
    let r = IoOp::Read {
        offset: 0,
        iovecs: crate::engine::iovecs![dst.iov(0, 8192)],
    };
    e.submit(IoRequest { op: r, token: 1 }).expect("submit");
    let c = complete(e.as_mut(), 1);
    assert_eq!(
        c,
        vec![Completion {
            token: 1,
            result: 8192
        }],
        "{ctx}: a read past EOF completes in full"
    );
    if backed {
        assert!(
            dst.as_slice()[..4096].iter().all(|&b| b == 0x5a),
            "{ctx}: data before EOF"
        );
    }
    assert!(
        dst.as_slice()[4096..].iter().all(|&b| b == 0),
        "{ctx}: zeros past EOF"
    );
}

fn flush_and_full_engine(make: Factory<'_>, dir: &Path, direct: bool, ctx: &str) {
    let s = store(dir, "full", 1 << 20);
    let depth = 8u32;
    let mut e = make(open(&s.path, true, direct), depth, direct);
    let buf = Aligned::new(4096 * 64);
    let mut submitted = 0u64;
    loop {
        let op = IoOp::Write {
            offset: submitted * 4096,
            iovecs: crate::engine::iovecs![buf.iov((submitted as usize % 64) * 4096, 4096)],
        };
        match e.submit(IoRequest {
            op,
            token: submitted,
        }) {
            Ok(()) => submitted += 1,
            Err(SubmitError::Full) => break,
        }
        assert!(submitted <= 1024, "{ctx}: the engine never reports Full");
    }
    assert!(
        submitted >= 1 && submitted <= u64::from(depth),
        "{ctx}: Full after {submitted} (depth {depth})"
    );
    assert_eq!(e.capacity(), 0, "{ctx}: capacity 0 when full");
    let mut c = complete(e.as_mut(), submitted as usize);
    c.sort_by_key(|c| c.token);
    let tokens: Vec<u64> = c.iter().map(|c| c.token).collect();
    assert_eq!(
        tokens,
        (0..submitted).collect::<Vec<_>>(),
        "{ctx}: each request completes exactly once"
    );
    assert!(c.iter().all(|c| c.result == 4096), "{ctx}: {c:?}");
    assert!(e.capacity() > 0, "{ctx}: capacity returns after reaping");
    e.submit(IoRequest {
        op: IoOp::Flush,
        token: 99,
    })
    .expect("flush");
    assert_eq!(
        complete(e.as_mut(), 1),
        vec![Completion {
            token: 99,
            result: 0
        }],
        "{ctx}: flush"
    );
}

fn error_completion(make: Factory<'_>, dir: &Path, direct: bool, ctx: &str) {
    let s = store(dir, "err", 1 << 20);
    let mut e = make(open(&s.path, false, direct), 8, direct);
    let buf = Aligned::new(4096);
    let w = IoOp::Write {
        offset: 0,
        iovecs: crate::engine::iovecs![buf.iov(0, 4096)],
    };
    e.submit(IoRequest { op: w, token: 5 }).expect("submit");
    let c = complete(e.as_mut(), 1);
    assert_eq!(c.len(), 1, "{ctx}");
    assert_eq!(c[0].token, 5);
    assert_eq!(
        c[0].result,
        -i64::from(libc::EBADF),
        "{ctx}: a write to a read-only fd completes with EBADF"
    );
}

fn discard_and_write_zeroes(make: Factory<'_>, dir: &Path, direct: bool, backed: bool, ctx: &str) {
    let s = store(dir, "zero", 1 << 20);
    {
        let mut f = open(&s.path, true, false);
        std::io::Write::write_all(&mut f, &[0x33u8; 65536]).expect("fill");
    }
    let mut e = make(open(&s.path, true, direct), 8, direct);
    e.submit(IoRequest {
        op: IoOp::WriteZeroes {
            offset: 0,
            len: 8192,
            unmap: false,
        },
        token: 1,
    })
    .expect("wz");
    e.submit(IoRequest {
        op: IoOp::Discard {
            offset: 8192,
            len: 8192,
        },
        token: 2,
    })
    .expect("discard");
    let mut c = complete(e.as_mut(), 2);
    c.sort_by_key(|c| c.token);
    for c in &c {
        assert!(
            c.result == 8192 || c.result == -i64::from(libc::EOPNOTSUPP),
            "{ctx}: {c:?}"
        );
    }
    if backed && c[0].result == 8192 {
        let mut back = vec![0xffu8; 8192];
        let f = open(&s.path, false, false);
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut back, 0).expect("read back");
        assert!(
            back.iter().all(|&b| b == 0),
            "{ctx}: write-zeroes must zero"
        );
    }
}

#[test]
fn sync_engine_conforms() {
    check_all(
        "Sync",
        &|f, depth, _| Box::new(super::sync::SyncEngine::new(f, depth as usize)),
        true,
    );
}

#[test]
fn null_engine_conforms() {
    check_all(
        "Null",
        &|_, depth, _| Box::new(super::null::NullEngine::new(depth as usize)),
        false,
    );
}

#[test]
fn linux_aio_engine_conforms() {
    use super::{linux_aio::LinuxAioEngine, EngineKind, EngineOptions};
    check_all(
        "LinuxAio",
        &|f, depth, direct| {
            Box::new(
                LinuxAioEngine::new(
                    f,
                    &EngineOptions {
                        kind: EngineKind::LinuxAio,
                        depth,
                        io_uring: Default::default(),
                        direct,
                        fault: None,
                    },
                    &super::AioContextPool::new(),
                )
                .expect("aio"),
            )
        },
        true,
    );
}

#[test]
fn io_uring_engine_conforms() {
    use super::io_uring::IoUringEngine;
    use super::{EngineKind, EngineOptions, IoUringFlags};
    check_all(
        "IoUring",
        &|f, depth, direct| {
            Box::new(
                IoUringEngine::new(
                    f,
                    &EngineOptions {
                        kind: EngineKind::IoUring,
                        depth,
                        io_uring: IoUringFlags::default(),
                        direct,
                        fault: None,
                    },
                )
                .expect("ring"),
            )
        },
        true,
    );
}
