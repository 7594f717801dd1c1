//! What an engine is and what is in force ([`EngineInfo`]): typed, for programs (serde: the log
//! line a queue writes when its engine is built, tests that match its fields), and one short
//! line for people (`Display`: the drive's `engine` statistic, `make run`'s summary). Engines
//! name themselves as the configuration names them ([`EngineKind`]'s spelling).

use serde::{Deserialize, Serialize};

use super::fault::FaultPlan;
use super::EngineKind;

/// What an engine is and what is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum EngineInfo {
    /// Blocking calls on the iothread.
    Sync,
    /// Completes at once without touching the file.
    Null,
    /// io_uring.
    IoUring(IoUringInfo),
    /// Linux native AIO.
    LinuxAio(LinuxAioInfo),
    /// Inline where the data is at hand, the rest to an asynchronous engine.
    Auto(AutoInfo),
    /// An engine some of whose requests fail on purpose (testing aid).
    FaultInjection {
        /// The engine the other requests go to.
        engine: Box<EngineInfo>,
        /// Which requests fail, and how.
        plan: FaultPlan,
    },
}

/// An io_uring engine's set-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoUringInfo {
    /// The set-up flags in force (`SINGLE_ISSUER`, `COOP_TASKRUN`, ...), after the fallbacks
    /// for flags the kernel refused.
    pub flags: Vec<String>,
    /// The file is registered with the ring (else each request names the fd).
    pub registered_file: bool,
    /// The ring is restricted to the engine's opcodes.
    pub restricted: bool,
}

/// A Linux AIO engine's set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinuxAioInfo {
    /// Requests in flight at most (the context's events).
    pub depth: u32,
    /// Completions are read from the ring the kernel maps (else with `io_getevents`).
    pub mapped_ring: bool,
    /// The file is O_DIRECT (else `io_submit` runs each request before it returns).
    pub direct: bool,
    /// Flushes go through `IOCB_CMD_FDSYNC` (else the file system refused it and they run
    /// `fdatasync` on the iothread).
    pub fdsync: bool,
}

/// An `Auto` engine: which requests go inline, and where the others go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoInfo {
    /// How reads and writes are tried inline.
    pub inline: InlinePath,
    /// The asynchronous engine for the rest (none on a memory file system).
    pub wrapped: Option<Box<EngineInfo>>,
    /// O_DIRECT on a device that sleeps for its completions: the Linux AIO engine beside the
    /// ring, for turns while fewer than `batch_requests` requests are in flight.
    pub beside: Option<Box<EngineInfo>>,
    /// O_DIRECT: inline calls continue while they average under this many µs (or stay on the
    /// CPU).
    pub fast_call_us: u64,
    /// Turns of this many requests or more go to the ring or to one `io_submit`.
    pub batch_requests: usize,
}

/// How an `Auto` engine tries reads and writes inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InlinePath {
    /// A memory file system (tmpfs, ramfs): every request inline with `pread`/`pwrite` or
    /// `preadv`/`pwritev` (the Sync engine stands in for `Auto`).
    MemoryFileSystem,
    /// Every read and write with RWF_NOWAIT first.
    EveryRequest,
    /// A page-cache file: RWF_NOWAIT (a miss alone on the thread retried without it); turns of
    /// `batch_requests` or more to the ring for the kinds the file system takes the flag for,
    /// turns of as many writes it refuses the flag for to one `io_submit`.
    PageCache,
    /// O_DIRECT: every request with RWF_NOWAIT while calls are fast or stay on the CPU, else
    /// when a request is alone on the thread.
    Direct,
    /// O_DIRECT on a device that completes in the caller's context (zram, a RAM disk): single
    /// requests inline while calls are fast or stay on the CPU, turns of `batch_requests` or
    /// more to one `io_submit`, else when a request is alone on the thread.
    DirectSingles,
}

impl EngineInfo {
    /// Which engine.
    pub fn kind(&self) -> EngineKind {
        match self {
            EngineInfo::Sync => EngineKind::Sync,
            EngineInfo::Null => EngineKind::Null,
            EngineInfo::IoUring(_) => EngineKind::IoUring,
            EngineInfo::LinuxAio(_) => EngineKind::LinuxAio,
            EngineInfo::Auto(_) => EngineKind::Auto,
            EngineInfo::FaultInjection { engine, .. } => engine.kind(),
        }
    }
}

/// One line: the engine, and for `Auto` where requests go (`Auto: inline, then IoUring`).
impl std::fmt::Display for EngineInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineInfo::Sync | EngineInfo::Null | EngineInfo::IoUring(_) => {
                write!(f, "{}", self.kind())
            }
            EngineInfo::LinuxAio(aio) if aio.direct => write!(f, "{}", EngineKind::LinuxAio),
            EngineInfo::LinuxAio(_) => write!(f, "{} (buffered)", EngineKind::LinuxAio),
            EngineInfo::Auto(auto) => {
                write!(f, "{}: inline", EngineKind::Auto)?;
                match (auto.inline, &auto.wrapped) {
                    (InlinePath::MemoryFileSystem, _) | (_, None) => {
                        write!(f, " (memory file system)")
                    }
                    (_, Some(wrapped)) => {
                        write!(f, ", then {wrapped}")?;
                        match &auto.beside {
                            Some(beside) => write!(f, " and {beside}"),
                            None => Ok(()),
                        }
                    }
                }
            }
            EngineInfo::FaultInjection { engine, .. } => write!(f, "{engine}, fault injection"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_uring() -> Box<EngineInfo> {
        Box::new(EngineInfo::IoUring(IoUringInfo {
            flags: vec!["SINGLE_ISSUER".into()],
            registered_file: true,
            restricted: true,
        }))
    }

    #[test]
    fn one_short_line_for_people() {
        let aio = EngineInfo::LinuxAio(LinuxAioInfo {
            depth: 32,
            mapped_ring: true,
            direct: true,
            fdsync: true,
        });
        let auto = |inline, wrapped, beside| {
            EngineInfo::Auto(AutoInfo {
                inline,
                wrapped,
                beside,
                fast_call_us: 8,
                batch_requests: 4,
            })
        };
        for (info, line) in [
            (EngineInfo::Sync, "Sync"),
            (*io_uring(), "IoUring"),
            (aio.clone(), "LinuxAio"),
            (
                auto(InlinePath::PageCache, Some(io_uring()), None),
                "Auto: inline, then IoUring",
            ),
            (
                auto(InlinePath::Direct, Some(io_uring()), Some(Box::new(aio))),
                "Auto: inline, then IoUring and LinuxAio",
            ),
            (
                auto(InlinePath::MemoryFileSystem, None, None),
                "Auto: inline (memory file system)",
            ),
        ] {
            assert_eq!(info.to_string(), line);
        }
    }

    #[test]
    fn typed_for_programs() {
        let info = EngineInfo::FaultInjection {
            engine: io_uring(),
            plan: FaultPlan {
                action: crate::engine::fault::FaultAction::Fail(libc::EIO),
                ops: crate::engine::fault::FaultOps::READ,
                start: 0,
                end: 4096,
                max_errors: None,
            },
        };
        assert_eq!(info.kind(), EngineKind::IoUring);
        assert_eq!(info.to_string(), "IoUring, fault injection");
        let json = serde_json::to_value(&info).expect("json");
        assert_eq!(json["kind"], "FaultInjection");
        assert_eq!(json["engine"]["kind"], "IoUring");
        assert_eq!(json["engine"]["registered_file"], true);
        let back: EngineInfo = serde_json::from_value(json).expect("back");
        assert_eq!(back, info);
    }
}
