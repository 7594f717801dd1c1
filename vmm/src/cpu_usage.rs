//! CPU time per thread of this process, from `/proc/self/task/*/{comm,schedstat}`: how the VMM
//! reports where its CPU went (vCPU threads, iothreads, the rest) in `GET /metrics` (`threads`)
//! and when the VM stops. Each name also says who runs those threads ([`ThreadKind`], from the
//! task flags in `stat`): KVM starts a kernel worker inside the process (`kvm-nx-lpage-re`), and
//! io_uring its I/O workers (`iou-wrk-<tid>`).

use std::collections::BTreeMap;
use std::path::Path;

/// `PF_IO_WORKER`: an io_uring (io-wq) worker.
const PF_IO_WORKER: u64 = 0x10;
/// `PF_USER_WORKER`: a kernel thread cloned from a user-space thread (vhost, KVM's workers).
const PF_USER_WORKER: u64 = 0x4000;
/// `PF_KTHREAD`: a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Who runs a thread of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThreadKind {
    /// Osprey's own threads (vCPUs, iothreads, the API, the control loop, ...).
    #[default]
    Vmm,
    /// io_uring workers doing Osprey's I/O.
    IoWorker,
    /// Kernel workers in the process that are not Osprey's (KVM's NX huge page recovery).
    Kernel,
}

impl ThreadKind {
    /// The name in the JSON and the Prometheus `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadKind::Vmm => "vmm",
            ThreadKind::IoWorker => "io_worker",
            ThreadKind::Kernel => "kernel",
        }
    }

    /// From the flags field of `/proc/<pid>/task/<tid>/stat`.
    pub fn from_flags(flags: u64) -> Self {
        if flags & PF_IO_WORKER != 0 {
            ThreadKind::IoWorker
        } else if flags & (PF_USER_WORKER | PF_KTHREAD) != 0 {
            ThreadKind::Kernel
        } else {
            ThreadKind::Vmm
        }
    }
}

/// CPU time of the threads of one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadUsage {
    /// CPU nanoseconds, summed over the threads of the name.
    pub cpu_ns: u64,
    /// Who runs them (the first thread's).
    pub kind: ThreadKind,
}

/// CPU time by thread name (threads with the same name are summed).
pub fn by_thread() -> BTreeMap<String, ThreadUsage> {
    by_thread_in(Path::new("/proc/self/task"))
}

fn by_thread_in(tasks: &Path) -> BTreeMap<String, ThreadUsage> {
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
        let kind = std::fs::read_to_string(p.join("stat"))
            .ok()
            .and_then(|s| parse_stat_flags(&s))
            .map(ThreadKind::from_flags)
            .unwrap_or_default();
        if let Some(ns) = ns {
            let usage = out.entry(name).or_insert(ThreadUsage { cpu_ns: 0, kind });
            usage.cpu_ns = usage.cpu_ns.saturating_add(ns);
        }
    }
    out
}

/// The first field of a schedstat line: time spent on the CPU, in ns.
pub fn parse_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

/// The flags (field 9) of a `stat` line; the command name (field 2) may hold spaces and
/// parentheses, so the fields are counted after its last `)`.
pub fn parse_stat_flags(line: &str) -> Option<u64> {
    let (_, rest) = line.rsplit_once(')')?;
    rest.split_whitespace().nth(6)?.parse().ok()
}

/// One line for the log: `vcpu0 12.3 ms, iothread-io0 4.5 ms, …`.
pub fn summary(usage: &BTreeMap<String, ThreadUsage>) -> String {
    usage
        .iter()
        .map(|(k, v)| format!("{k} {:.1} ms", v.cpu_ns as f64 / 1e6))
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
    fn reads_the_flags_and_tells_kernel_workers() {
        let stat = "4242 (kvm-nx-lpage-re) S 4200 4200 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1";
        assert_eq!(parse_stat_flags(stat), Some(2_129_984));
        assert_eq!(ThreadKind::from_flags(2_129_984), ThreadKind::Kernel);
        let odd = "7 (a) b (c) R 1 7 7 0 -1 4194560 1 2";
        assert_eq!(parse_stat_flags(odd), Some(4_194_560));
        assert_eq!(ThreadKind::from_flags(4_194_560), ThreadKind::Vmm);
        assert_eq!(ThreadKind::from_flags(0x4000_0010), ThreadKind::IoWorker);
        assert_eq!(parse_stat_flags("garbage"), None);
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
            usage.get("osprey-busy").map_or(0, |u| u.cpu_ns) >= 10_000_000,
            "{usage:?}"
        );
        assert_eq!(
            usage.get("osprey-busy").map(|u| u.kind),
            Some(ThreadKind::Vmm)
        );
        assert!(summary(&usage).contains("osprey-busy "));
    }
}
