//! Pinning threads to host CPUs (`iothreads[].cpu_affinity`): which CPUs this process may use,
//! checking a requested set against them, and pinning the calling thread.

/// Most CPUs a `cpu_set_t` describes.
const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The CPUs this process may run on (its affinity mask), in order.
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

/// Errors checking or applying a CPU set.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// The config names a CPU this process may not use.
    #[error("CPU {cpu} is not available to Osprey (allowed: {allowed})")]
    NotAllowed {
        /// The CPU.
        cpu: usize,
        /// The CPUs this process may use, `0-3,6` style.
        allowed: String,
    },
    /// A CPU number past what a `cpu_set_t` holds.
    #[error("CPU {0} is beyond the {MAX_CPUS} a CPU set holds")]
    TooHigh(usize),
    /// `sched_setaffinity` failed.
    #[error("sched_setaffinity to CPUs {cpus}: {source}")]
    Pin {
        /// The CPUs, `0-3,6` style.
        cpus: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Checks `cpus` (from the config) against `allowed`: not empty is not required (empty means
/// "not pinned"), but every CPU must be one this process may use.
pub fn check(cpus: &[usize], allowed: &[usize]) -> Result<(), AffinityError> {
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(&cpu) => Err(AffinityError::NotAllowed {
            cpu,
            allowed: describe(allowed),
        }),
        None => Ok(()),
    }
}

/// `0-3,6` style list (sorted, duplicates dropped).
pub fn describe(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let cpus = sorted.as_slice();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(",")
    }
}

/// Pins the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), AffinityError> {
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= MAX_CPUS {
            return Err(AffinityError::TooHigh(c));
        }
        // SAFETY: `c` is below CPU_SETSIZE (checked above) and `set` is a valid `cpu_set_t`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(AffinityError::Pin {
            cpus: describe(cpus),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_ranges() {
        assert_eq!(describe(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(describe(&[5]), "5");
        assert_eq!(describe(&[3, 1, 2, 1]), "1-3");
        assert_eq!(describe(&[]), "none");
    }

    #[test]
    fn check_names_the_cpu_and_what_is_allowed() {
        assert!(check(&[0, 1], &[0, 1]).is_ok());
        assert!(check(&[], &[0]).is_ok());
        assert_eq!(
            check(&[1, 7], &[0, 1]).map_err(|e| e.to_string()),
            Err("CPU 7 is not available to Osprey (allowed: 0-1)".to_string())
        );
    }

    #[test]
    fn pins_a_thread_to_one_allowed_cpu() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty(), "this process may run somewhere");
        let last = *allowed.last().expect("one CPU");
        let seen = std::thread::spawn(move || {
            pin_current_thread(&[last]).expect("pin");
            allowed_cpus()
        })
        .join()
        .expect("thread");
        assert_eq!(
            seen,
            vec![last],
            "the thread's mask is exactly the pinned CPU"
        );
        assert_eq!(allowed_cpus(), allowed, "other threads keep their mask");
        assert!(pin_current_thread(&[MAX_CPUS]).is_err());
    }
}
