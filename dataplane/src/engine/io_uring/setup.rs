//! Creating a ring: which `IORING_SETUP_*` flags to ask for, the flag-by-flag fallback when the
//! kernel refuses a set (a pure function, tested with injected refusals), the host probe, and
//! turning setup errors into reasons a user can act on.

use std::io;

use ::io_uring::{opcode, IoUring, Probe};

use crate::engine::{EngineError, EngineKind, IoUringFlags};

/// Largest SQ size the kernel accepts (IORING_MAX_ENTRIES).
pub(super) const MAX_SQ_ENTRIES: u32 = 32768;

/// The set-up flags of one attempt to create a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SetupFlags {
    /// IORING_SETUP_SINGLE_ISSUER (Linux 6.0).
    pub single_issuer: bool,
    /// IORING_SETUP_COOP_TASKRUN (Linux 5.19).
    pub coop_taskrun: bool,
    /// IORING_SETUP_TASKRUN_FLAG (Linux 5.19), only together with COOP_TASKRUN.
    pub taskrun_flag: bool,
    /// IORING_SETUP_SUBMIT_ALL (Linux 5.18): one bad SQE does not stop the rest of a batch.
    pub submit_all: bool,
    /// IORING_SETUP_R_DISABLED (Linux 5.10): created disabled, so restrictions can be
    /// registered before the ring runs anything.
    pub r_disabled: bool,
}

/// The order flags are given up in: the newest kernel feature first, so each step matches an
/// older kernel.
const DROP_ORDER: [(&str, &str); 5] = [
    ("SINGLE_ISSUER", "needs Linux 6.0"),
    ("TASKRUN_FLAG", "needs Linux 5.19"),
    ("COOP_TASKRUN", "needs Linux 5.19"),
    ("SUBMIT_ALL", "needs Linux 5.18"),
    (
        "R_DISABLED",
        "needs Linux 5.10; opcode restrictions are skipped",
    ),
];

impl SetupFlags {
    /// What to ask for first: the user's flags (TASKRUN_FLAG only with COOP_TASKRUN) plus the
    /// ones the engine always wants.
    pub(crate) fn requested(user: IoUringFlags) -> SetupFlags {
        SetupFlags {
            single_issuer: user.single_issuer,
            coop_taskrun: user.coop_taskrun,
            taskrun_flag: user.taskrun_flag && user.coop_taskrun,
            submit_all: true,
            r_disabled: true,
        }
    }

    fn get(&self, name: &str) -> bool {
        match name {
            "SINGLE_ISSUER" => self.single_issuer,
            "TASKRUN_FLAG" => self.taskrun_flag,
            "COOP_TASKRUN" => self.coop_taskrun,
            "SUBMIT_ALL" => self.submit_all,
            "R_DISABLED" => self.r_disabled,
            _ => false,
        }
    }

    fn clear(&mut self, name: &str) {
        match name {
            "SINGLE_ISSUER" => self.single_issuer = false,
            "TASKRUN_FLAG" => self.taskrun_flag = false,
            "COOP_TASKRUN" => {
                self.coop_taskrun = false;
                self.taskrun_flag = false;
            }
            "SUBMIT_ALL" => self.submit_all = false,
            "R_DISABLED" => self.r_disabled = false,
            _ => {}
        }
    }

    /// The next weaker set: the first flag of `DROP_ORDER` still set, removed; with its name and
    /// why a kernel may refuse it. `None` when nothing is left to drop.
    pub(crate) fn without_next(&self) -> Option<(SetupFlags, &'static str, &'static str)> {
        let (name, why) = DROP_ORDER.iter().find(|(name, _)| self.get(name))?;
        let mut next = *self;
        next.clear(name);
        Some((next, name, why))
    }

    /// The flags that stay in force after set-up (R_DISABLED is transient and shows as the
    /// engine's `restricted` instead).
    pub(crate) fn in_force(&self) -> Vec<&'static str> {
        [
            ("SINGLE_ISSUER", self.single_issuer),
            ("COOP_TASKRUN", self.coop_taskrun),
            ("TASKRUN_FLAG", self.taskrun_flag),
            ("SUBMIT_ALL", self.submit_all),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect()
    }
}

/// Calls `build` with `requested`, then, while the kernel answers EINVAL (an unknown flag), with
/// one flag fewer each time (logged at info). Other errors end the search at once. Returns the
/// result and the flags it was built with.
pub(crate) fn with_fallback<T>(
    requested: SetupFlags,
    mut build: impl FnMut(SetupFlags) -> io::Result<T>,
) -> io::Result<(T, SetupFlags)> {
    let mut flags = requested;
    loop {
        match build(flags) {
            Ok(t) => return Ok((t, flags)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let Some((next, name, why)) = flags.without_next() else {
                    return Err(e);
                };
                log::info!(
                    "io_uring: the kernel refused the set-up flags ({e}); \
                     retrying without IORING_SETUP_{name} ({why})"
                );
                flags = next;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates a ring with `entries` SQ entries, twice as many CQ entries, and `flags`.
pub(super) fn build_ring(entries: u32, flags: SetupFlags) -> io::Result<IoUring> {
    let mut b = IoUring::builder();
    b.setup_cqsize(entries.saturating_mul(2));
    if flags.single_issuer {
        b.setup_single_issuer();
    }
    if flags.coop_taskrun {
        b.setup_coop_taskrun();
    }
    if flags.taskrun_flag {
        b.setup_taskrun_flag();
    }
    if flags.submit_all {
        b.setup_submit_all();
    }
    if flags.r_disabled {
        b.setup_r_disabled();
    }
    b.build(entries)
}

/// SQ entries for a queue of `depth`: a power of two, at least 8, at most the kernel's limit.
pub(super) fn sq_entries(depth: u32) -> u32 {
    depth
        .max(8)
        .checked_next_power_of_two()
        .unwrap_or(MAX_SQ_ENTRIES)
        .min(MAX_SQ_ENTRIES)
}

/// The host refused to create a ring: the error, and what it means in words a user can act on.
pub(crate) fn refused(source: io::Error) -> EngineError {
    let hint = match source.raw_os_error() {
        Some(libc::ENOSYS) => " (kernel built without CONFIG_IO_URING, or a seccomp filter)",
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            match sysctl.as_str() {
                "2" => " (sysctl kernel.io_uring_disabled=2)",
                "1" => {
                    " (sysctl kernel.io_uring_disabled=1 allows only kernel.io_uring_group and \
                     CAP_SYS_ADMIN)"
                }
                _ => " (denied by seccomp, an LSM or the container)",
            }
        }
        Some(libc::ENOMEM) => " (the rings exceed RLIMIT_MEMLOCK on this kernel?)",
        _ => "",
    };
    EngineError::Refused {
        engine: EngineKind::IoUring,
        call: "io_uring_setup".into(),
        source,
        hint: hint.into(),
    }
}

/// The opcodes the engine submits.
pub(super) const OPCODES: [(u8, &str); 6] = [
    (opcode::Read::CODE, "READ"),
    (opcode::Write::CODE, "WRITE"),
    (opcode::Readv::CODE, "READV"),
    (opcode::Writev::CODE, "WRITEV"),
    (opcode::Fsync::CODE, "FSYNC"),
    (opcode::Fallocate::CODE, "FALLOCATE"),
];

/// Creates and drops a small ring, and checks that the kernel knows every opcode the engine
/// uses (when it can say: IORING_REGISTER_PROBE is Linux 5.6).
pub fn probe() -> Result<(), EngineError> {
    let unavailable = |reason: String| EngineError::Unavailable {
        engine: EngineKind::IoUring,
        reason,
    };
    let ring = IoUring::new(8).map_err(refused)?;
    let mut p = Probe::new();
    match ring.submitter().register_probe(&mut p) {
        Ok(()) => {
            let missing: Vec<&str> = OPCODES
                .iter()
                .filter(|(code, _)| !p.is_supported(*code))
                .map(|(_, name)| *name)
                .collect();
            if !missing.is_empty() {
                return Err(unavailable(format!(
                    "the kernel's io_uring lacks {}",
                    missing.join(", ")
                )));
            }
        }
        Err(e) => log::info!("io_uring: cannot probe opcodes ({e}); assuming they exist"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn einval() -> io::Error {
        io::Error::from_raw_os_error(libc::EINVAL)
    }

    #[test]
    fn requested_set_keeps_taskrun_flag_only_with_coop() {
        let f = SetupFlags::requested(IoUringFlags {
            single_issuer: true,
            coop_taskrun: false,
            taskrun_flag: true,
            max_workers: 0,
        });
        assert!(!f.taskrun_flag && !f.coop_taskrun && f.single_issuer);
        assert!(f.submit_all && f.r_disabled);
        assert_eq!(f.in_force(), ["SINGLE_ISSUER", "SUBMIT_ALL"]);
        let all = SetupFlags::requested(IoUringFlags::default());
        assert_eq!(
            all.in_force(),
            [
                "SINGLE_ISSUER",
                "COOP_TASKRUN",
                "TASKRUN_FLAG",
                "SUBMIT_ALL"
            ]
        );
    }

    #[test]
    fn accepted_at_once_tries_once() {
        let mut tries = 0;
        let req = SetupFlags::requested(IoUringFlags::default());
        let ((), got) = with_fallback(req, |_| {
            tries += 1;
            Ok(())
        })
        .expect("ok");
        assert_eq!((tries, got), (1, req));
    }

    #[test]
    fn a_5_19_kernel_loses_only_single_issuer() {
        let req = SetupFlags::requested(IoUringFlags::default());
        let mut seen = Vec::new();
        let ((), got) = with_fallback(req, |f| {
            seen.push(f);
            if f.single_issuer {
                Err(einval())
            } else {
                Ok(())
            }
        })
        .expect("ok");
        assert_eq!(seen.len(), 2);
        assert!(!got.single_issuer);
        assert!(got.coop_taskrun && got.taskrun_flag && got.submit_all && got.r_disabled);
    }

    #[test]
    fn a_5_10_kernel_keeps_only_r_disabled() {
        let req = SetupFlags::requested(IoUringFlags::default());
        let ((), got) = with_fallback(req, |f| {
            if f.single_issuer || f.coop_taskrun || f.taskrun_flag || f.submit_all {
                Err(einval())
            } else {
                Ok(())
            }
        })
        .expect("ok");
        assert_eq!(
            got,
            SetupFlags {
                single_issuer: false,
                coop_taskrun: false,
                taskrun_flag: false,
                submit_all: false,
                r_disabled: true,
            }
        );
        assert!(got.in_force().is_empty());
    }

    #[test]
    fn refusing_taskrun_flag_alone_keeps_coop() {
        let req = SetupFlags::requested(IoUringFlags::default());
        let ((), got) = with_fallback(req, |f| {
            if f.taskrun_flag {
                Err(einval())
            } else {
                Ok(())
            }
        })
        .expect("ok");
        assert!(got.coop_taskrun && !got.taskrun_flag && !got.single_issuer);
    }

    #[test]
    fn other_errors_and_exhaustion_fail() {
        let req = SetupFlags::requested(IoUringFlags::default());
        let mut tries = 0;
        let e = with_fallback::<()>(req, |_| {
            tries += 1;
            Err(io::Error::from_raw_os_error(libc::EPERM))
        })
        .expect_err("EPERM");
        assert_eq!((tries, e.raw_os_error()), (1, Some(libc::EPERM)));
        let mut tries = 0;
        let e = with_fallback::<()>(req, |_| {
            tries += 1;
            Err(einval())
        })
        .expect_err("EINVAL");
        assert_eq!((tries, e.raw_os_error()), (6, Some(libc::EINVAL)));
    }

    #[test]
    fn sq_entries_are_powers_of_two_within_limits() {
        assert_eq!(sq_entries(0), 8);
        assert_eq!(sq_entries(5), 8);
        assert_eq!(sq_entries(128), 128);
        assert_eq!(sq_entries(129), 256);
        assert_eq!(sq_entries(u32::MAX), MAX_SQ_ENTRIES);
    }

    #[test]
    fn explanations_name_the_cause() {
        let text = |errno| refused(io::Error::from_raw_os_error(errno)).to_string();
        assert!(text(libc::ENOSYS).contains("CONFIG_IO_URING"));
        assert!(text(libc::EPERM).contains("io_uring_setup"));
        let e = refused(io::Error::from_raw_os_error(libc::ENOSYS));
        assert_eq!(
            std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error),
            Some(libc::ENOSYS),
            "the OS error is carried, not only its text"
        );
    }

    #[test]
    fn probe_succeeds_here() {
        probe().expect("io_uring on this host");
    }
}
