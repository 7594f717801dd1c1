//! Osprey's log (stderr) as the runner reads it: the KVM flavour and vCPU TSC frequency at
//! start-up, and at stop the `drive stats {...}`, `iothread stats {...}` and
//! `CPU time by thread: …` lines.

use std::collections::BTreeMap;

use serde::Deserialize;
use thiserror::Error;

/// A log line the runner needs is missing or malformed.
#[derive(Debug, Error)]
pub enum VmmLogError {
    /// The line was not logged.
    #[error("Osprey's log has no {0:?} line")]
    Missing(&'static str),
    /// A `name N ms` entry did not parse.
    #[error("Bad CPU time entry {0:?}")]
    CpuEntry(String),
    /// A stats JSON did not parse.
    #[error("Bad {what} JSON")]
    Json {
        /// Which line.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// CPU time per thread name, in ms (`CPU time by thread: vcpu0 122.1 ms, …`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuTimes {
    /// Milliseconds by thread name.
    pub by_thread: BTreeMap<String, f64>,
}

impl CpuTimes {
    /// Parses the text after `CPU time by thread: `.
    pub fn parse(list: &str) -> Result<Self, VmmLogError> {
        let mut by_thread = BTreeMap::new();
        for entry in list.split(", ").map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || VmmLogError::CpuEntry(entry.to_string());
            let rest = entry.strip_suffix(" ms").ok_or_else(bad)?;
            let (name, ms) = rest.rsplit_once(' ').ok_or_else(bad)?;
            let ms: f64 = ms.parse().map_err(|_| bad())?;
            *by_thread.entry(name.to_string()).or_insert(0.0) += ms;
        }
        Ok(CpuTimes { by_thread })
    }

    /// Every thread of the process.
    pub fn total_ms(&self) -> f64 {
        self.by_thread.values().sum()
    }

    /// The vCPU threads (`vcpuN`).
    pub fn vcpu_ms(&self) -> f64 {
        self.sum_prefix("vcpu")
    }

    /// The dataplane threads (`iothread-<id>`).
    pub fn dataplane_ms(&self) -> f64 {
        self.sum_prefix("iothread-")
    }

    fn sum_prefix(&self, prefix: &str) -> f64 {
        self.by_thread
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }
}

/// The `drive stats {...}` fields the runner records.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct DriveStats {
    /// The drive.
    #[serde(default)]
    pub drive_id: String,
    /// Requests completed (the guest's GET_ID included).
    #[serde(default)]
    pub requests: u64,
    /// Guest notifications (queue kicks) received.
    #[serde(default)]
    pub kicks: u64,
    /// Interrupts sent to the guest.
    #[serde(default)]
    pub notifications: u64,
    /// Submission calls to the engine.
    #[serde(default)]
    pub submissions: u64,
    /// Requests per submission, by `batch_bounds`.
    #[serde(default)]
    pub batch_hist: Vec<u64>,
    /// Most requests in flight at once.
    #[serde(default)]
    pub inflight_max: u64,
    /// The engine and its flags in force.
    #[serde(default)]
    pub engine: String,
    /// I/O errors.
    #[serde(default)]
    pub io_errors: u64,
}

/// The counters inside `iothread stats {"stats": {...}}`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct IothreadCounters {
    /// Polls that found work.
    #[serde(default)]
    pub poll_hits: u64,
    /// Poll windows that ran out.
    #[serde(default)]
    pub poll_misses: u64,
    /// Times the thread slept.
    #[serde(default)]
    pub sleeps: u64,
    /// Wake-ups from sleep.
    #[serde(default)]
    pub wakeups: u64,
    /// Thread CPU time.
    #[serde(default)]
    pub cpu_ns: u64,
    /// Time spent polling.
    #[serde(default)]
    pub poll_ns: u64,
    /// Time spent working.
    #[serde(default)]
    pub work_ns: u64,
    /// Time spent asleep.
    #[serde(default)]
    pub sleep_ns: u64,
}

/// The `iothread stats {...}` line.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct IothreadStats {
    /// The thread's id.
    #[serde(default)]
    pub id: String,
    /// Poll policy in force.
    #[serde(default)]
    pub poll_policy: String,
    /// Poll window limit in force.
    #[serde(default)]
    pub poll_max_ns: u64,
    /// max_batch in force.
    #[serde(default)]
    pub max_batch: u64,
    /// The counters.
    #[serde(default)]
    pub stats: IothreadCounters,
}

/// Everything the runner reads from one Osprey log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmmLog {
    /// `KVM: …` (the flavour), if logged.
    pub kvm: Option<String>,
    /// `vCPU TSC frequency: N kHz`, if logged.
    pub tsc_khz: Option<u64>,
    /// One per drive.
    pub drives: Vec<DriveStats>,
    /// One per iothread.
    pub iothreads: Vec<IothreadStats>,
    /// The CPU time line, if logged.
    pub cpu: Option<CpuTimes>,
}

/// The message part of a log line (after the `[time LEVEL ] ` prefix, if any).
fn message(line: &str) -> &str {
    match line.strip_prefix('[') {
        Some(rest) => rest.split_once("] ").map_or(line, |(_, m)| m),
        None => line,
    }
}

impl VmmLog {
    /// Parses a whole stderr text; lines the runner does not know are skipped.
    pub fn parse(text: &str) -> Result<Self, VmmLogError> {
        let mut log = VmmLog::default();
        for line in text.lines() {
            let m = message(line.trim_end());
            if let Some(rest) = m.strip_prefix("KVM: ") {
                log.kvm = Some(rest.to_string());
            } else if let Some(rest) = m.strip_prefix("vCPU TSC frequency: ") {
                log.tsc_khz = rest
                    .strip_suffix(" kHz")
                    .and_then(|n| n.trim().parse().ok());
            } else if let Some(rest) = m.strip_prefix("drive stats ") {
                log.drives
                    .push(
                        serde_json::from_str(rest).map_err(|source| VmmLogError::Json {
                            what: "drive stats",
                            source,
                        })?,
                    );
            } else if let Some(rest) = m.strip_prefix("iothread stats ") {
                log.iothreads
                    .push(
                        serde_json::from_str(rest).map_err(|source| VmmLogError::Json {
                            what: "iothread stats",
                            source,
                        })?,
                    );
            } else if let Some(rest) = m.strip_prefix("CPU time by thread: ") {
                log.cpu = Some(CpuTimes::parse(rest)?);
            }
        }
        Ok(log)
    }

    /// The CPU time line, which every stopped VM logs.
    pub fn cpu(&self) -> Result<&CpuTimes, VmmLogError> {
        self.cpu
            .as_ref()
            .ok_or(VmmLogError::Missing("CPU time by thread"))
    }

    /// The first drive's stats.
    pub fn drive(&self) -> Result<&DriveStats, VmmLogError> {
        self.drives
            .first()
            .ok_or(VmmLogError::Missing("drive stats"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = include_str!("../tests/data/osprey-log.txt");

    #[test]
    fn parses_the_cpu_time_line() {
        let c = CpuTimes::parse(
            "iothread-io0 89.9 ms, kvm-nx-lpage-re 0.0 ms, osprey 6.0 ms, vcpu0 122.1 ms, vcpu1 10.0 ms",
        )
        .expect("parse");
        assert_eq!(c.by_thread.len(), 5);
        assert!((c.total_ms() - 228.0).abs() < 1e-9);
        assert!((c.vcpu_ms() - 132.1).abs() < 1e-9);
        assert!((c.dataplane_ms() - 89.9).abs() < 1e-9);
        assert!(CpuTimes::parse("vcpu0 12").is_err());
        assert!(CpuTimes::parse("vcpu0 x ms").is_err());
        assert_eq!(CpuTimes::parse("").expect("empty").total_ms(), 0.0);
    }

    #[test]
    fn parses_a_recorded_log() {
        let log = VmmLog::parse(LOG).expect("parse");
        assert!(log.kvm.as_deref().is_some_and(|k| k.starts_with("kvm_pvm")));
        assert_eq!(log.tsc_khz, Some(2445426));
        let d = log.drive().expect("drive");
        assert_eq!(d.drive_id, "disk0");
        assert_eq!(d.requests, 20001);
        assert_eq!(d.kicks, 20);
        assert_eq!(d.notifications, 0);
        assert_eq!(d.submissions, 2500);
        assert_eq!(d.batch_hist[3], 2500);
        assert!(d.engine.starts_with("io_uring"));
        assert_eq!(log.iothreads.len(), 1);
        let t = &log.iothreads[0];
        assert_eq!(t.id, "io0");
        assert_eq!(t.poll_policy, "Classic");
        assert_eq!(t.max_batch, 32);
        assert_eq!(t.stats.poll_hits, 1252);
        assert_eq!(t.stats.sleeps, 7);
        assert_eq!(t.stats.cpu_ns, 89_934_676);
        let c = log.cpu().expect("cpu");
        assert_eq!(c.by_thread["vcpu0"], 122.1);
        assert_eq!(c.dataplane_ms(), 89.9);
    }

    #[test]
    fn a_bad_stats_line_is_an_error_and_missing_lines_are_reported() {
        assert!(VmmLog::parse("[t INFO ] drive stats {oops").is_err());
        let log = VmmLog::parse("[t INFO ] Started 1 vCPU(s)").expect("parse");
        assert!(log.cpu().is_err());
        assert!(log.drive().is_err());
        assert_eq!(log.tsc_khz, None);
    }
}
