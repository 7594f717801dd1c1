//! CPU time per thread of this process, from `/proc/self/task/*/{comm,schedstat}`: how the VMM
//! reports where its CPU went (vCPU threads, iothreads, the rest) in `GET /metrics` (`threads`)
//! and when the VM stops.

use std::collections::BTreeMap;
use std::path::Path;

/// CPU nanoseconds by thread name (threads with the same name are summed).
pub fn by_thread() -> BTreeMap<String, u64> {
    by_thread_in(Path::new("/proc/self/task"))
}

fn by_thread_in(tasks: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(tasks) else {
        return out;
    };
    for entry in dir.flatten() {
        let p = entry.path();
        let name = std::fs::read_to_string(p.join("comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| parse_schedstat(&s));
        if let Some(ns) = ns {
            *out.entry(name).or_insert(0) += ns;
        }
    }
    out
}

/// The first field of a schedstat line: time spent on the CPU, in ns.
pub fn parse_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

/// One line for the log: `vcpu0 12.3 ms, iothread-io0 4.5 ms, …`.
pub fn summary(usage: &BTreeMap<String, u64>) -> String {
    usage
        .iter()
        .map(|(k, v)| format!("{k} {:.1} ms", *v as f64 / 1e6))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_first_field() {
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123_456));
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn sees_a_busy_named_thread() {
        let h = std::thread::Builder::new()
            .name("osprey-busy".into())
            .spawn(|| {
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_millis(30) {
                    std::hint::spin_loop();
                }
                by_thread()
            })
            .expect("spawn");
        let usage = h.join().expect("join");
        assert!(
            usage.get("osprey-busy").copied().unwrap_or(0) >= 10_000_000,
            "{usage:?}"
        );
        assert!(summary(&usage).contains("osprey-busy "));
    }
}
