//! Thread weights: how the scheduler weighs a VM's own threads against each other, through
//! their nice values. A thread is either at the process's nice (its *base*) or one step
//! ([`LIGHT_STEP`]) lighter; never heavier, so a VM takes no CPU from its neighbours this way.
//!
//! Why: on a busy host the guest's vCPU and the iothread share a core. An iothread that sleeps
//! between events must get the core at once when the guest kicks it (the request waits for it),
//! so it should outweigh the vCPU; an iothread that polls does speculative work, and must not
//! outweigh the vCPU that produces the requests it polls for. The VMM therefore runs its vCPUs
//! one step light, and an iothread switches itself: light while its policy polls, at its base
//! while it sleeps between events ([`ThreadWeight::set_light`], called at mode changes only).
//!
//! A thread may always make itself lighter; coming back needs `RLIMIT_NICE` to allow the base
//! ([`allow_return`], called by the VMM before it drops privileges). Where it does not, the
//! weights stay equal ([`can_return`] is false) and nothing changes.

use std::io;

/// How much lighter (in nice steps) a light thread runs than its base: about 3× less weight.
pub const LIGHT_STEP: i32 = 5;

/// The highest nice value.
const MAX_NICE: i32 = 19;

/// The calling thread's nice value.
pub fn current_nice() -> io::Result<i32> {
    // getpriority returns -1 both as a value and as an error: clear errno to tell them apart.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: getpriority takes plain integers; who = 0 with PRIO_PROCESS is the calling thread
    // on Linux (threads have their own nice values).
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if n == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(0) {
            return Err(e);
        }
    }
    Ok(n)
}

/// Sets the calling thread's nice value (only this thread's: Linux keeps one per thread).
pub fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers; who = 0 with PRIO_PROCESS is the calling thread.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `RLIMIT_NICE` as (soft, hard).
fn nice_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// The `RLIMIT_NICE` value that lets a thread lower its nice back to `nice` (20 - nice).
fn limit_for(nice: i32) -> u64 {
    u64::try_from(20 - nice.clamp(-20, MAX_NICE)).unwrap_or(0)
}

/// Whether a thread whose base is `base` may come back to it after going light: `RLIMIT_NICE`
/// allows it.
pub fn can_return(base: i32) -> bool {
    nice_limit().is_ok_and(|(soft, _)| soft == libc::RLIM_INFINITY || soft >= limit_for(base))
}

/// `CAP_SYS_NICE`'s bit in the capability sets.
pub const CAP_SYS_NICE: u32 = 23;

/// Whether the calling thread holds `CAP_SYS_NICE` (effective): it may then lower its nice
/// whatever `RLIMIT_NICE` says.
pub fn has_cap_sys_nice() -> bool {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0)
}

/// Raises `RLIMIT_NICE` (the soft limit, and the hard one where the process may) so threads can
/// come back to `base` after going light. Returns whether they can.
pub fn allow_return(base: i32) -> io::Result<bool> {
    if can_return(base) {
        return Ok(true);
    }
    let need = limit_for(base);
    let (_, hard) = nice_limit()?;
    let lim = libc::rlimit {
        rlim_cur: need,
        rlim_max: if hard == libc::RLIM_INFINITY {
            hard
        } else {
            hard.max(need)
        },
    };
    // SAFETY: `lim` is a valid rlimit; raising the hard limit fails (EPERM) without
    // CAP_SYS_RESOURCE, which is reported, not fatal.
    if unsafe { libc::setrlimit(libc::RLIMIT_NICE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(can_return(base))
}

/// Makes the calling thread one step light for good (a vCPU). Returns the nice it set.
pub fn lighten_this_thread() -> io::Result<i32> {
    let nice = (current_nice()? + LIGHT_STEP).min(MAX_NICE);
    set_nice(nice)?;
    Ok(nice)
}

/// One thread's weight, switched between light and its base. Only the thread itself may use it
/// (the nice calls act on the calling thread).
#[derive(Debug)]
pub struct ThreadWeight {
    base: i32,
    enabled: bool,
    light: bool,
    switches: u64,
}

impl ThreadWeight {
    /// The calling thread's weight; it switches only if `dynamic` and it can come back to its
    /// base ([`can_return`]).
    pub fn for_this_thread(dynamic: bool) -> Self {
        let base = current_nice().ok();
        let enabled = base.is_some_and(|base| {
            dynamic && base + LIGHT_STEP <= MAX_NICE && (can_return(base) || has_cap_sys_nice())
        });
        let base = base.unwrap_or(0);
        Self {
            base,
            enabled,
            light: false,
            switches: 0,
        }
    }

    /// Whether the weight switches at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the thread is light now.
    pub fn is_light(&self) -> bool {
        self.light
    }

    /// Switches made so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Makes the thread light or brings it back to its base; a system call only when that
    /// changes. A failure (say, a limit lowered from outside) turns switching off, back at the
    /// base where possible. Returns whether anything changed (a switch, or switching turned off).
    pub fn set_light(&mut self, light: bool) -> bool {
        if !self.enabled || light == self.light {
            return false;
        }
        let nice = if light {
            self.base + LIGHT_STEP
        } else {
            self.base
        };
        match set_nice(nice) {
            Ok(()) => {
                self.light = light;
                self.switches += 1;
            }
            Err(e) => {
                log::warn!("thread weight: cannot set nice {nice} ({e}); weights stay as they are");
                self.enabled = false;
                if self.light && set_nice(self.base).is_ok() {
                    self.light = false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_for_maps_nice_to_rlimit() {
        assert_eq!(limit_for(0), 20);
        assert_eq!(limit_for(-20), 40);
        assert_eq!(limit_for(19), 1);
        assert_eq!(limit_for(25), 1);
    }

    #[test]
    fn a_disabled_weight_never_changes_the_nice() {
        std::thread::spawn(|| {
            let before = current_nice().expect("nice");
            let mut w = ThreadWeight::for_this_thread(false);
            assert!(!w.enabled());
            w.set_light(true);
            assert!(!w.is_light());
            assert_eq!(w.switches(), 0);
            assert_eq!(current_nice().expect("nice"), before);
        })
        .join()
        .expect("thread");
    }

    /// On a fresh thread (nice is per thread, so the test runner's other threads are untouched):
    /// light is base + 5, back is base, and a repeated call makes no switch.
    #[test]
    fn a_thread_goes_light_and_comes_back() {
        std::thread::spawn(|| {
            let base = current_nice().expect("nice");
            let can = allow_return(base).unwrap_or(false) || has_cap_sys_nice();
            let mut w = ThreadWeight::for_this_thread(true);
            assert_eq!(w.enabled(), can && base + LIGHT_STEP <= MAX_NICE);
            if !w.enabled() {
                eprintln!(
                    "NOT RUN: neither RLIMIT_NICE nor CAP_SYS_NICE lets a thread back to {base}"
                );
                return;
            }
            w.set_light(true);
            assert!(w.is_light());
            assert_eq!(current_nice().expect("nice"), base + LIGHT_STEP);
            w.set_light(true);
            assert_eq!(w.switches(), 1);
            w.set_light(false);
            assert!(!w.is_light());
            assert_eq!(current_nice().expect("nice"), base);
            assert_eq!(w.switches(), 2);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn lightening_a_thread_adds_one_step() {
        std::thread::spawn(|| {
            let base = current_nice().expect("nice");
            let set = lighten_this_thread().expect("lighten");
            assert_eq!(set, (base + LIGHT_STEP).min(MAX_NICE));
            assert_eq!(current_nice().expect("nice"), set);
        })
        .join()
        .expect("thread");
    }
}
