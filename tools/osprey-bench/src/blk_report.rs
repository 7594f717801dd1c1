//! The test guest's `BLK {...}` console line (`guest-images/test-guest/README.md`): the fields of
//! the main run the runner records.

use serde::Deserialize;
use thiserror::Error;

/// The console held no usable `BLK` line.
#[derive(Debug, Error)]
pub enum BlkReportError {
    /// No line starting with `BLK `.
    #[error("No BLK line on the guest console")]
    Missing,
    /// The JSON did not parse.
    #[error("Bad BLK line")]
    Json(#[from] serde_json::Error),
    /// The guest could not set up the device.
    #[error("The guest reported an error: {0}")]
    Guest(String),
    /// No `main` run in `runs`.
    #[error("The BLK line has no main run")]
    NoRun,
}

/// Latency summary in ns.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
pub struct LatencyNs {
    /// Mean.
    #[serde(default)]
    pub mean: f64,
    /// Median (nearest rank).
    #[serde(default)]
    pub p50: f64,
    /// 99th percentile (nearest rank).
    #[serde(default)]
    pub p99: f64,
}

/// One `runs[]` entry.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct BlkRun {
    /// `main`, `reinit_verify`.
    #[serde(default)]
    pub name: String,
    /// Effective queue depth (the guest may lower it).
    #[serde(default)]
    pub qd: u32,
    /// Queues driven.
    #[serde(default)]
    pub queues: u32,
    /// Completed data requests.
    #[serde(default)]
    pub requests: u64,
    /// Bytes of OK requests.
    #[serde(default)]
    pub bytes: u64,
    /// Non-OK statuses.
    #[serde(default)]
    pub errors: u64,
    /// Notify stores issued.
    #[serde(default)]
    pub kicks: u64,
    /// MSI-X interrupts taken.
    #[serde(default)]
    pub interrupts: u64,
    /// The run stalled.
    #[serde(default)]
    pub timed_out: bool,
    /// Run time in ns (from the TSC).
    #[serde(default)]
    pub elapsed_ns: u64,
    /// Requests per second.
    #[serde(default)]
    pub iops: f64,
    /// Latency in ns.
    #[serde(default)]
    pub lat_ns: LatencyNs,
}

/// The parts of the `BLK` JSON the runner uses.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct BlkReport {
    /// Set only when the device could not be set up.
    #[serde(default)]
    pub error: Option<String>,
    /// TSC kHz the guest used.
    #[serde(default)]
    pub tsc_khz: u64,
    /// `cmdline` or `default`.
    #[serde(default)]
    pub tsc_khz_source: String,
    /// Runs.
    #[serde(default)]
    pub runs: Vec<BlkRun>,
    /// Sum of everything that failed.
    #[serde(default)]
    pub failures: u64,
}

impl BlkReport {
    /// Finds and parses the `BLK` line in the console text.
    pub fn from_console(console: &str) -> Result<Self, BlkReportError> {
        let json = console
            .lines()
            .find_map(|l| l.trim_end().strip_prefix("BLK "))
            .ok_or(BlkReportError::Missing)?;
        let report: BlkReport = serde_json::from_str(json)?;
        if let Some(e) = &report.error {
            return Err(BlkReportError::Guest(e.clone()));
        }
        Ok(report)
    }

    /// The `main` run.
    pub fn main_run(&self) -> Result<&BlkRun, BlkReportError> {
        self.runs
            .iter()
            .find(|r| r.name == "main")
            .ok_or(BlkReportError::NoRun)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = include_str!("../tests/data/blk-console.txt");

    #[test]
    fn parses_a_recorded_blk_line() {
        let r = BlkReport::from_console(CONSOLE).expect("parse");
        assert_eq!(r.tsc_khz, 2445426);
        assert_eq!(r.tsc_khz_source, "cmdline");
        assert_eq!(r.failures, 0);
        let run = r.main_run().expect("main");
        assert_eq!(run.requests, 20000);
        assert_eq!(run.bytes, 81_920_000);
        assert_eq!(run.qd, 8);
        assert_eq!(run.queues, 2);
        assert_eq!(run.kicks, 19);
        assert_eq!(run.interrupts, 0);
        assert_eq!(run.iops, 233854.0);
        assert_eq!(run.elapsed_ns, 85_523_321);
        assert_eq!(run.lat_ns.mean, 68290.0);
        assert_eq!(run.lat_ns.p50, 54621.0);
        assert_eq!(run.lat_ns.p99, 329929.0);
    }

    #[test]
    fn reports_missing_and_failed_lines() {
        assert!(matches!(
            BlkReport::from_console("osprey-test-guest: ready\n"),
            Err(BlkReportError::Missing)
        ));
        assert!(matches!(
            BlkReport::from_console("BLK {\"found\":false,\"error\":\"no virtio-blk device\"}\n"),
            Err(BlkReportError::Guest(_))
        ));
        assert!(matches!(
            BlkReport::from_console("BLK {\"found\":true,"),
            Err(BlkReportError::Json(_))
        ));
        let empty = BlkReport::from_console("BLK {\"runs\":[]}").expect("parse");
        assert!(empty.main_run().is_err());
    }
}
