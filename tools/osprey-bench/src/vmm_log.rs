//! What the runner reads of one Osprey run: from the log (stderr) the KVM flavour and the vCPU
//! TSC frequency at start-up; from the API's `GET /metrics` JSON, which Osprey appends to the
//! run's metrics file once more when the VM stops, the drive and iothread counters and the CPU
//! time per thread (no stop-time log line is scraped).

use std::collections::BTreeMap;

use serde::Deserialize;
use thiserror::Error;

/// A log line the runner needs is missing or malformed.
#[derive(Debug, Error)]
pub enum VmmLogError {
    /// The line was not logged.
    #[error("Osprey's log has no {0:?} line")]
    Missing(&'static str),
    /// A part of the metrics JSON did not parse.
    #[error("Bad {what} in the metrics JSON")]
    Json {
        /// Which line.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// CPU time per thread name, in ms (the metrics' `threads`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuTimes {
    /// Milliseconds by thread name.
    pub by_thread: BTreeMap<String, f64>,
}

/// One entry of the metrics' `threads`.
#[derive(Debug, Deserialize)]
struct ThreadCpu {
    name: String,
    cpu_ns: u64,
}

impl CpuTimes {
    fn from_threads(threads: Vec<ThreadCpu>) -> Self {
        let mut by_thread = BTreeMap::new();
        for t in threads {
            *by_thread.entry(t.name).or_insert(0.0) += t.cpu_ns as f64 / 1e6;
        }
        CpuTimes { by_thread }
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

/// Everything the runner reads from one Osprey run.
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
    /// CPU time per thread, once the metrics were read.
    pub cpu: Option<CpuTimes>,
}

/// The message part of a log line (after the `[time LEVEL ] ` prefix, if any).
fn message(line: &str) -> &str {
    match line.strip_prefix('[') {
        Some(rest) => rest.split_once("] ").map_or(line, |(_, m)| m),
        None => line,
    }
}

/// The parts of the metrics JSON the runner records.
#[derive(Debug, Deserialize)]
struct Metrics {
    #[serde(default)]
    drives: Vec<DriveStats>,
    #[serde(default)]
    iothreads: Vec<IothreadStats>,
    #[serde(default)]
    threads: Vec<ThreadCpu>,
}

impl VmmLog {
    /// The start-up facts of a whole stderr text; lines the runner does not know are skipped.
    pub fn parse(text: &str) -> Self {
        let mut log = VmmLog::default();
        for line in text.lines() {
            let m = message(line.trim_end());
            if let Some(rest) = m.strip_prefix("KVM: ") {
                log.kvm = Some(rest.to_string());
            } else if let Some(rest) = m.strip_prefix("vCPU TSC frequency: ") {
                log.tsc_khz = rest
                    .strip_suffix(" kHz")
                    .and_then(|n| n.trim().parse().ok());
            }
        }
        log
    }

    /// Adds the counters of the metrics JSON written when the VM stopped (`GET /metrics`'s
    /// shape: `drives`, `iothreads`, `threads`).
    pub fn with_metrics(mut self, metrics: &serde_json::Value) -> Result<Self, VmmLogError> {
        let m = Metrics::deserialize(metrics).map_err(|source| VmmLogError::Json {
            what: "drives, iothreads or threads",
            source,
        })?;
        self.drives = m.drives;
        self.iothreads = m.iothreads;
        self.cpu = Some(CpuTimes::from_threads(m.threads));
        Ok(self)
    }

    /// Both halves of a run: the log, and the last line of the metrics file (if Osprey wrote
    /// one).
    pub fn of_run(log: &str, metrics: Option<&serde_json::Value>) -> Result<Self, VmmLogError> {
        let metrics = metrics.ok_or(VmmLogError::Missing("metrics at stop"))?;
        VmmLog::parse(log).with_metrics(metrics)
    }

    /// The CPU time per thread, from the metrics.
    pub fn cpu(&self) -> Result<&CpuTimes, VmmLogError> {
        self.cpu
            .as_ref()
            .ok_or(VmmLogError::Missing("CPU time per thread"))
    }

    /// The first drive's stats.
    pub fn drive(&self) -> Result<&DriveStats, VmmLogError> {
        self.drives.first().ok_or(VmmLogError::Missing("drives"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const LOG: &str = include_str!("../tests/data/osprey-log.txt");
    const METRICS: &str = include_str!("../tests/data/osprey-metrics.json");

    /// The recorded run: its log and its metrics at stop.
    pub(crate) fn recorded() -> VmmLog {
        let metrics: serde_json::Value = serde_json::from_str(METRICS).expect("metrics JSON");
        VmmLog::of_run(LOG, Some(&metrics)).expect("parse")
    }

    #[test]
    fn reads_a_recorded_run() {
        let log = recorded();
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
        assert!((c.dataplane_ms() - 89.9).abs() < 1e-9);
        assert!((c.vcpu_ms() - 122.1).abs() < 1e-9);
        assert!((c.total_ms() - (89.9 + 6.0 + 122.1)).abs() < 1e-9);
    }

    #[test]
    fn missing_or_bad_metrics_are_errors() {
        assert!(VmmLog::of_run(LOG, None).is_err());
        let bad = serde_json::json!({"drives": "oops"});
        assert!(VmmLog::of_run(LOG, Some(&bad)).is_err());
        let log = VmmLog::parse("[t INFO ] Started 1 vCPU(s)");
        assert!(log.cpu().is_err());
        assert!(log.drive().is_err());
        assert_eq!(log.tsc_khz, None);
    }
}
