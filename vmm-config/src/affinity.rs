//! Pinning threads to host CPUs (`iothreads[].cpu_affinity`): which CPUs this process may use,
//! checking a requested set against them, and pinning the calling thread.

pub use dataplane::cpu_set::allowed_cpus;
use dataplane::cpu_set::MAX_CPUS;

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
    if let Some(&c) = cpus.iter().find(|&&c| c >= MAX_CPUS) {
        return Err(AffinityError::TooHigh(c));
    }
    dataplane::cpu_set::set_this_thread_cpus(cpus).map_err(|source| AffinityError::Pin {
        cpus: describe(cpus),
        source,
    })
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
