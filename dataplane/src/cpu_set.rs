//! The kernel's CPU sets, for the calling thread: which CPUs this process may run on, and
//! restricting the calling thread to some of them. Used by an iothread that keeps apart from
//! the vCPUs ([`crate::iothread::placement`]) and by the configured pinning above this crate.

/// Most CPUs a `cpu_set_t` describes.
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The CPUs this process may run on (the calling thread's affinity mask), in order; empty when
/// the kernel does not say.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed; pid 0 is this thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    // SAFETY: `set` was filled by the kernel; CPU_ISSET only reads it, for indices below its size.
    (0..MAX_CPUS)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Restricts the calling thread to `cpus`; those at or past [`MAX_CPUS`] are left out (a
/// caller that must refuse them checks first).
pub fn set_this_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < MAX_CPUS) {
        // SAFETY: `c` is below CPU_SETSIZE (filtered above) and `set` is a valid `cpu_set_t`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
