//! The synchronous engine: `commit` runs every queued request with pread/pwrite (preadv/pwritev
//! for several buffers), fdatasync or fallocate on the dataplane thread, and the results come
//! back through `reap` like any other engine's. Simple and always available; it blocks the
//! thread for the duration of each I/O.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::io::{AsRawFd, RawFd};

use super::{
    run_blocking, Completion, EngineKind, IoEngine, IoOp, IoRequest, SubmitError, ThreadTurn,
};

/// Requests a `SyncEngine` queues before it reports itself full.
pub const SYNC_QUEUE_DEPTH: usize = 256;

/// Blocking I/O on one file.
#[derive(Debug)]
pub struct SyncEngine {
    file: File,
    queued: VecDeque<IoRequest>,
    done: Vec<Completion>,
    depth: usize,
    /// `Auto` chose this engine (a file on a memory file system): it says so in `info`
    /// and reports its reads and writes as served inline.
    for_auto: bool,
    /// Reads and writes done (reported only for `Auto`).
    reads_writes: u64,
}

impl SyncEngine {
    /// An engine on `file` that queues up to `depth` requests.
    pub fn new(file: File, depth: usize) -> Self {
        Self {
            file,
            queued: VecDeque::with_capacity(depth),
            done: Vec::with_capacity(depth),
            depth,
            for_auto: false,
            reads_writes: 0,
        }
    }

    /// The engine `Auto` uses on a file of a memory file system (tmpfs, ramfs): every read and
    /// write is a memory copy that waits for no device, so each is done inline and there is
    /// nothing to hand to an asynchronous engine.
    pub fn for_auto(file: File, depth: usize) -> Self {
        Self {
            for_auto: true,
            ..Self::new(file, depth)
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl IoEngine for SyncEngine {
    fn submit(&mut self, request: IoRequest) -> Result<(), SubmitError> {
        if self.capacity() == 0 {
            return Err(SubmitError::Full);
        }
        self.queued.push_back(request);
        Ok(())
    }

    fn commit(&mut self, _turn: &ThreadTurn) -> usize {
        let n = self.queued.len();
        while let Some(req) = self.queued.pop_front() {
            let result = run_blocking(self.fd(), &req.op);
            if matches!(req.op, IoOp::Read { .. } | IoOp::Write { .. }) {
                self.reads_writes += 1;
            }
            self.done.push(Completion {
                token: req.token,
                result,
            });
        }
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
        self.depth
            .saturating_sub(self.queued.len() + self.done.len())
    }

    fn in_flight(&self) -> usize {
        self.queued.len() + self.done.len()
    }

    fn has_completions(&self) -> bool {
        !self.done.is_empty()
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Sync
    }

    fn stats(&self) -> super::EngineStats {
        if self.for_auto {
            super::EngineStats {
                attempts: self.reads_writes,
                inline: self.reads_writes,
                ..Default::default()
            }
        } else {
            super::EngineStats::default()
        }
    }

    fn info(&self) -> super::EngineInfo {
        use super::info::{AutoInfo, InlinePath};
        if self.for_auto {
            let tuning = super::auto::AutoTuning::default();
            super::EngineInfo::Auto(AutoInfo {
                inline: InlinePath::MemoryFileSystem,
                wrapped: None,
                beside: None,
                fast_call_us: tuning.fast_direct_call_ns / 1000,
                batch_requests: tuning.batch_requests,
            })
        } else {
            super::EngineInfo::Sync
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::conformance::{open, store, Store};
    use crate::engine::{IoOp, IoVec};
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::fs::OpenOptionsExt;

    fn temp(name: &str, size: u64) -> (Store, File) {
        let t = store(&std::env::temp_dir(), name, size);
        let f = open(&t.path, true, false);
        (t, f)
    }

    fn iov(buf: &mut [u8]) -> crate::engine::IoVecs {
        crate::engine::iovecs![IoVec {
            base: buf.as_mut_ptr(),
            len: buf.len(),
        }]
    }

    #[test]
    fn write_then_read_through_the_reap_path() {
        let (p, f) = temp("rw", 1 << 20);
        let mut e = SyncEngine::new(f.try_clone().expect("clone"), 4);
        let mut src = vec![0x5au8; 4096];
        let mut dst = vec![0u8; 4096];
        e.submit(IoRequest {
            op: IoOp::Write {
                offset: 8192,
                iovecs: iov(&mut src),
            },
            token: 1,
        })
        .expect("submit");
        e.submit(IoRequest {
            op: IoOp::Flush,
            token: 2,
        })
        .expect("submit");
        assert!(!e.has_completions());
        assert_eq!(e.commit(&ThreadTurn::default()), 2);
        assert!(e.has_completions());
        e.submit(IoRequest {
            op: IoOp::Read {
                offset: 8192,
                iovecs: iov(&mut dst),
            },
            token: 3,
        })
        .expect("submit");
        e.commit(&ThreadTurn::default());
        let mut out = Vec::new();
        assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 3);
        assert_eq!(
            out,
            vec![
                Completion {
                    token: 1,
                    result: 4096
                },
                Completion {
                    token: 2,
                    result: 0
                },
                Completion {
                    token: 3,
                    result: 4096
                }
            ]
        );
        assert_eq!(dst, src);
        let mut check = vec![0u8; 4096];
        let mut f2 = File::open(&p.path).expect("open");
        f2.seek(SeekFrom::Start(8192)).expect("seek");
        f2.read_exact(&mut check).expect("read");
        assert_eq!(check, src);
    }

    #[test]
    fn read_past_eof_is_zero_filled_and_full_engine_refuses() {
        let (_p, mut f) = temp("eof", 0);
        f.write_all(&[7u8; 512]).expect("write");
        let mut e = SyncEngine::new(f, 1);
        let mut dst = vec![0xffu8; 1024];
        e.submit(IoRequest {
            op: IoOp::Read {
                offset: 0,
                iovecs: iov(&mut dst),
            },
            token: 9,
        })
        .expect("submit");
        let mut buf2 = [0u8; 1];
        assert_eq!(
            e.submit(IoRequest {
                op: IoOp::Read {
                    offset: 0,
                    iovecs: iov(&mut buf2)
                },
                token: 10
            }),
            Err(SubmitError::Full)
        );
        e.commit(&ThreadTurn::default());
        assert_eq!(e.capacity(), 0, "unreaped completions hold capacity");
        let mut out = Vec::new();
        e.reap(&mut out, &ThreadTurn::default());
        assert_eq!(
            out,
            vec![Completion {
                token: 9,
                result: 1024
            }]
        );
        assert_eq!(&dst[..512], &[7u8; 512][..]);
        assert_eq!(&dst[512..], &[0u8; 512][..]);
        assert_eq!(e.capacity(), 1);
    }

    #[test]
    fn errors_complete_with_negative_errno() {
        let (p, f) = temp("ro", 4096);
        drop(f);
        let ro = File::open(&p.path).expect("open ro");
        let mut e = SyncEngine::new(ro, 4);
        let mut src = vec![1u8; 512];
        e.submit(IoRequest {
            op: IoOp::Write {
                offset: 0,
                iovecs: iov(&mut src),
            },
            token: 1,
        })
        .expect("submit");
        e.commit(&ThreadTurn::default());
        let mut out = Vec::new();
        e.reap(&mut out, &ThreadTurn::default());
        assert_eq!(
            out,
            vec![Completion {
                token: 1,
                result: -i64::from(libc::EBADF)
            }]
        );
    }

    #[test]
    fn discard_and_write_zeroes_zero_the_range_or_say_unsupported() {
        let (_p, mut f) = temp("zero", 0);
        f.write_all(&[9u8; 8192]).expect("write");
        let mut e = SyncEngine::new(f.try_clone().expect("clone"), 4);
        e.submit(IoRequest {
            op: IoOp::WriteZeroes {
                offset: 0,
                len: 4096,
                unmap: false,
            },
            token: 1,
        })
        .expect("s");
        e.submit(IoRequest {
            op: IoOp::Discard {
                offset: 4096,
                len: 4096,
            },
            token: 2,
        })
        .expect("s");
        e.commit(&ThreadTurn::default());
        let mut out = Vec::new();
        e.reap(&mut out, &ThreadTurn::default());
        for c in &out {
            assert!(
                c.result == 4096 || c.result == -i64::from(libc::EOPNOTSUPP),
                "{c:?}"
            );
        }
        if out[0].result == 4096 {
            let mut check = vec![1u8; 4096];
            f.seek(SeekFrom::Start(0)).expect("seek");
            f.read_exact(&mut check).expect("read");
            assert!(check.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn auto_on_a_memory_file_is_the_sync_engine_counting_inline() {
        let shm = std::path::Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("no /dev/shm: nothing to check");
            return;
        }
        let t = store(shm, "auto-memory", 1 << 20);
        let opts = crate::engine::EngineOptions {
            kind: EngineKind::Auto,
            depth: 4,
            io_uring: Default::default(),
            direct: false,
            fault: None,
        };
        let mut e = crate::engine::open(
            open(&t.path, true, false),
            &opts,
            &crate::engine::AioContextPool::new(),
        )
        .expect("auto");
        assert_eq!(e.kind(), EngineKind::Sync);
        assert!(
            matches!(
                e.info(),
                crate::engine::EngineInfo::Auto(crate::engine::info::AutoInfo {
                    inline: crate::engine::info::InlinePath::MemoryFileSystem,
                    wrapped: None,
                    ..
                })
            ),
            "{:?}",
            e.info()
        );
        assert!(
            e.completion_fds().is_empty(),
            "no asynchronous engine behind it"
        );
        let mut buf = vec![0u8; 4096];
        for (token, op) in [
            IoOp::Read {
                offset: 0,
                iovecs: iov(&mut buf),
            },
            IoOp::Flush,
            IoOp::Write {
                offset: 4096,
                iovecs: iov(&mut buf),
            },
        ]
        .into_iter()
        .enumerate()
        {
            e.submit(IoRequest {
                op,
                token: token as u64,
            })
            .expect("submit");
        }
        assert_eq!(e.commit(&ThreadTurn::default()), 3);
        let mut out = Vec::new();
        assert_eq!(e.reap(&mut out, &ThreadTurn::default()), 3);
        assert!(out.iter().all(|c| c.result >= 0), "{out:?}");
        let s = e.stats();
        assert_eq!((s.inline, s.attempts, s.deferred), (2, 2, 0));
        // tmpfs takes O_DIRECT since Linux 6.6, but its I/O is still a memory copy: Sync too.
        let direct = crate::engine::EngineOptions {
            direct: true,
            ..opts
        };
        if let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&t.path)
        {
            let d = crate::engine::open(f, &direct, &crate::engine::AioContextPool::new())
                .expect("auto, O_DIRECT");
            assert_eq!(d.kind(), EngineKind::Sync, "{}", d.info());
        }
        // Elsewhere Auto is the wrapping engine.
        let disk = store(&std::env::temp_dir(), "auto-disk", 1 << 20);
        let d = crate::engine::open(
            open(&disk.path, true, false),
            &opts,
            &crate::engine::AioContextPool::new(),
        )
        .expect("auto");
        if !crate::engine::auto::in_memory(&open(&disk.path, false, false)) {
            assert_eq!(d.kind(), EngineKind::Auto);
        }
    }
}
