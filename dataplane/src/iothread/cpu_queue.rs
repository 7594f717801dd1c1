//! The host's run queue as an iothread sees it, for the Adaptive policy's payoff check: whether
//! a thread is waiting for a CPU, from the runnable threads in `/proc/loadavg` (the whole host,
//! this thread included) against the CPUs this thread may use (its affinity mask and cgroup
//! quota: `std::thread::available_parallelism`). Opened on the thread before its sandbox; a
//! reading is one pread.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The host's run queue, readable.
#[derive(Debug)]
pub(super) struct CpuQueue {
    loadavg: File,
    /// The CPUs this thread may use, when it was opened.
    cpus: u64,
}

/// One reading of the host's run queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CpuQueueSample {
    /// Threads runnable on the host (this one included).
    pub runnable: u64,
    /// More of them than this thread's CPUs: one is waiting.
    pub waiting: bool,
}

impl CpuQueue {
    /// Opens `/proc/loadavg`; `None` (logged) where it cannot be read: every trial then runs.
    pub(super) fn open() -> Option<Self> {
        let loadavg = File::open("/proc/loadavg")
            .map_err(|e| log::info!("iothread: no /proc/loadavg ({e}); payoff trials always run"))
            .ok()?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        Some(Self { loadavg, cpus })
    }

    /// Reads the run queue now (`None` when the read or its format fails).
    pub(super) fn sample(&self) -> Option<CpuQueueSample> {
        let mut buf = [0u8; 128];
        let n = self.loadavg.read_at(&mut buf, 0).ok()?;
        let runnable = parse_runnable(std::str::from_utf8(buf.get(..n)?).ok()?)?;
        Some(CpuQueueSample {
            runnable,
            waiting: runnable > self.cpus,
        })
    }
}

/// The runnable count of a `/proc/loadavg` line: the number before the `/` of its fourth field
/// (`0.53 1.01 1.51 3/456 12345`).
fn parse_runnable(line: &str) -> Option<u64> {
    let field = line.split_whitespace().nth(3)?;
    let (runnable, _) = field.split_once('/')?;
    runnable.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_runnable_count() {
        assert_eq!(parse_runnable("0.53 1.01 1.51 3/456 12345\n"), Some(3));
        assert_eq!(parse_runnable("0.00 0.00 0.00 12/1024 7"), Some(12));
        for bad in ["", "0.53 1.01 1.51", "0.53 1.01 1.51 3 456", "a b c x/9 1"] {
            assert_eq!(parse_runnable(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_this_host() {
        // This test runs, so at least this thread is runnable.
        let q = CpuQueue::open().expect("/proc/loadavg");
        let s = q.sample().expect("a reading");
        assert!(s.runnable >= 1, "{s:?}");
        assert_eq!(s.waiting, s.runnable > q.cpus);
    }
}
