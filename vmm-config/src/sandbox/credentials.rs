//! Privileges of one thread: `no_new_privs`, the capability sets and the uid/gid. Linux keeps
//! credentials per thread and the raw syscalls used here change only the calling thread's (glibc's
//! `setresuid` would signal every thread to follow, which filtered threads must not be asked to
//! do), so each thread drops its own, in its sandbox hook, before its seccomp filter goes on.

use std::io;

/// `_LINUX_CAPABILITY_VERSION_3` (`<linux/capability.h>`): two 32-bit data words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The highest capability number any kernel is asked to drop from the bounding set; the kernel
/// answers EINVAL past its own last one (`/proc/sys/kernel/cap_last_cap`).
const MAX_CAP: libc::c_ulong = 63;

/// Errors dropping privileges.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A `prctl`, `setgroups`, `setresgid`, `setresuid` or `capset` call failed.
    #[error("{what}: {source}")]
    Call {
        /// The call, with its arguments.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn check(ret: libc::c_long, what: impl FnOnce() -> String) -> Result<(), CredentialsError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(CredentialsError::Call {
            what: what(),
            source: io::Error::last_os_error(),
        })
    }
}

/// Sets `no_new_privs` on the calling thread (threads it creates later inherit it): no `execve`
/// can grant privileges again (set-uid bits, file capabilities), and Landlock and seccomp may be
/// applied without `CAP_SYS_ADMIN`.
pub fn set_no_new_privs() -> Result<(), CredentialsError> {
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    check(ret.into(), || "prctl(PR_SET_NO_NEW_PRIVS)".into())
}

/// What [`drop_privileges`] did, for the start-up log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The bounding set was emptied (needs `CAP_SETPCAP`; an unprivileged Osprey has nothing
    /// to drop there that matters, since `no_new_privs` stops an `execve` from gaining any).
    pub bounding_set: bool,
}

/// Drops every capability of the calling thread (bounding, ambient, inheritable, permitted,
/// effective) but those in `keep` (a bit mask, kept permitted and effective where the thread
/// holds them; ignored with `ids`), and with `ids` becomes that uid and gid (supplementary
/// groups cleared) first.
pub fn drop_privileges(ids: Option<(u32, u32)>, keep: u64) -> Result<Dropped, CredentialsError> {
    let mut bounding_set = true;
    for cap in 0..=MAX_CAP {
        // SAFETY: prctl with integer arguments only.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if ret != 0 {
            match io::Error::last_os_error().raw_os_error() {
                // Past the kernel's last capability.
                Some(libc::EINVAL) => break,
                // Not ours to drop without CAP_SETPCAP.
                Some(libc::EPERM) => {
                    bounding_set = false;
                    break;
                }
                _ => check(ret.into(), || format!("prctl(PR_CAPBSET_DROP, {cap})"))?,
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    check(ret.into(), || "prctl(PR_CAP_AMBIENT_CLEAR_ALL)".into())?;
    if let Some((uid, gid)) = ids {
        // SAFETY: setgroups with an empty list reads no memory.
        let ret = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) };
        check(ret, || "setgroups([])".into())?;
        // SAFETY: integer arguments only; the raw syscall changes this thread alone.
        let ret = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
        check(ret, || format!("setresgid({gid})"))?;
        // SAFETY: as above. Leaving uid 0 for another uid clears the permitted, effective and
        // ambient sets (no SECBIT_KEEP_CAPS is set).
        let ret = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
        check(ret, || format!("setresuid({uid})"))?;
    }
    let keep = if ids.is_some() {
        0
    } else {
        keep & held_capabilities()
    };
    set_capability_sets(keep)?;
    Ok(Dropped { bounding_set })
}

/// The calling thread's permitted capabilities (a bit mask; none when unreadable).
fn held_capabilities() -> u64 {
    status_field("CapPrm")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Sets the calling thread's permitted and effective sets to `keep` (a subset of what it holds)
/// and empties its inheritable set (always allowed: it only lowers them).
fn set_capability_sets(keep: u64) -> Result<(), CredentialsError> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let word = |w: u64| Data {
        effective: w as u32,
        permitted: w as u32,
        inheritable: 0,
    };
    let data = [word(keep), word(keep >> 32)];
    // SAFETY: `header` and `data` are the layout capset(2) reads for version 3 (two data words),
    // alive for the call; pid 0 is the calling thread.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    check(ret, || format!("capset(permitted and effective {keep:#x})"))
}

/// This thread's line `name:` from `/proc/thread-self/status`.
pub(crate) fn status_field(name: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_drops_its_own_capabilities_and_sets_no_new_privs() {
        let main_caps = status_field("CapEff").expect("CapEff");
        let t = std::thread::spawn(|| {
            set_no_new_privs().expect("no_new_privs");
            let dropped = drop_privileges(None, 0).expect("drop");
            (
                status_field("CapEff"),
                status_field("CapPrm"),
                status_field("NoNewPrivs"),
                dropped,
            )
        });
        let (eff, prm, nnp, _) = t.join().expect("join");
        assert_eq!(eff.as_deref(), Some("0000000000000000"));
        assert_eq!(prm.as_deref(), Some("0000000000000000"));
        assert_eq!(nnp.as_deref(), Some("1"));
        assert_eq!(
            status_field("CapEff").as_deref(),
            Some(main_caps.as_str()),
            "other threads keep theirs"
        );
    }

    #[test]
    fn a_thread_keeps_only_the_capabilities_asked_for_that_it_holds() {
        const SYS_NICE: u64 = 1 << dataplane::thread_weight::CAP_SYS_NICE;
        let held = held_capabilities();
        let t = std::thread::spawn(|| {
            drop_privileges(None, SYS_NICE | (1 << 62)).expect("drop");
            (status_field("CapEff"), status_field("CapPrm"))
        });
        let (eff, prm) = t.join().expect("join");
        let want = format!("{:016x}", held & SYS_NICE);
        assert_eq!(eff.as_deref(), Some(want.as_str()));
        assert_eq!(prm.as_deref(), Some(want.as_str()));
    }

    #[test]
    fn a_thread_becomes_another_user_alone() {
        // SAFETY: geteuid has no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("NOT RUN: needs root to change uid");
            return;
        }
        let t = std::thread::spawn(|| {
            drop_privileges(
                Some((65534, 65534)),
                1 << dataplane::thread_weight::CAP_SYS_NICE,
            )
            .expect("drop");
            (
                status_field("Uid"),
                status_field("Gid"),
                status_field("CapEff"),
            )
        });
        let (uid, gid, eff) = t.join().expect("join");
        assert_eq!(uid.as_deref(), Some("65534\t65534\t65534\t65534"));
        assert_eq!(gid.as_deref(), Some("65534\t65534\t65534\t65534"));
        assert_eq!(eff.as_deref(), Some("0000000000000000"));
        assert!(
            status_field("Uid").is_some_and(|u| u.starts_with("0\t")),
            "the test's own thread is still root"
        );
    }
}
