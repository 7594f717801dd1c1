//! One recorded run's numbers, and the median and spread over the repeats. A run's sample combines
//! the test guest's `BLK {json}` console line (guest-images/test-guest/README.md) with the `GET
//! /metrics` JSON Osprey appends to the run's metrics file as the VM stops (drive and iothread
//! counters, CPU time per thread): IOPS, bandwidth, latency, CPU per I/O, kicks and interrupts per
//! I/O.

use serde::Deserialize;
use thiserror::Error;

/// A run's outputs do not make a sample.
#[derive(Debug, Error)]
pub enum SampleError {
    #[error("No BLK line on the guest console")]
    NoBlkLine,
    #[error("Bad BLK line")]
    BadBlk(#[source] serde_json::Error),
    #[error("The guest reported an error: {0}")]
    Guest(String),
    #[error("The BLK line has no main run")]
    NoMainRun,
    #[error("Osprey wrote no metrics at stop")]
    NoMetrics,
    #[error("The metrics have no drive")]
    NoDrive,
    #[error("The guest completed no requests")]
    NoRequests,
    #[error("The guest's run timed out after {0} requests")]
    TimedOut(u64),
}

/// The parts of the `BLK` JSON the runner uses.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BlkReport {
    /// Set only when the device could not be set up.
    error: Option<String>,
    runs: Vec<BlkRun>,
}

/// One `runs[]` entry (`main` is the measured one).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BlkRun {
    name: String,
    /// Effective queue depth (the guest may lower it).
    qd: u32,
    requests: u64,
    /// Bytes of OK requests.
    bytes: u64,
    /// Non-OK statuses.
    errors: u64,
    /// Notify stores issued.
    kicks: u64,
    /// MSI-X interrupts taken.
    interrupts: u64,
    timed_out: bool,
    elapsed_ns: u64,
    iops: f64,
    lat_ns: BlkLatency,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BlkLatency {
    mean: f64,
    p50: f64,
    p99: f64,
}

/// µs per I/O from a total in ms over `ios` I/Os (NaN for none).
pub fn us_per_io(total_ms: f64, ios: u64) -> f64 {
    per_io(total_ms * 1000.0, ios)
}

/// Events per I/O (NaN for no I/O).
fn per_io(events: f64, ios: u64) -> f64 {
    if ios == 0 {
        f64::NAN
    } else {
        events / ios as f64
    }
}

/// guest / native, when there is a native number.
pub fn ratio(guest: f64, native: Option<f64>) -> Option<f64> {
    native
        .filter(|n| *n > 0.0 && guest.is_finite())
        .map(|n| guest / n)
}

/// One run's numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunSample {
    /// Guest-measured requests per second.
    pub iops: f64,
    pub bw_mib_s: f64,
    /// Latency from placing the request in the avail ring to seeing it in the used ring, µs.
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    /// CPU µs per I/O: every Osprey thread, the vCPU threads, the dataplane (iothread) threads.
    pub cpu_total_us: f64,
    pub cpu_vcpu_us: f64,
    pub cpu_dataplane_us: f64,
    /// Per I/O: kicks and interrupts the guest counted, and those the drive counted.
    pub guest_kicks: f64,
    pub guest_irqs: f64,
    pub drive_kicks: f64,
    pub drive_irqs: f64,
    /// Requests per engine submission call.
    pub batch_mean: f64,
    /// iothread sleeps per I/O.
    pub sleeps: f64,
    /// Non-OK requests.
    pub errors: u64,
    /// The queue depth the guest used.
    pub guest_qd: u32,
}

impl RunSample {
    /// The sample of a finished run: its console and the last line of its metrics file. Per-I/O
    /// numbers divide by the guest's completed requests; CPU times cover the whole VM life.
    pub fn from_outputs(
        console: &str,
        metrics: Option<&serde_json::Value>,
    ) -> Result<Self, SampleError> {
        let json = console
            .lines()
            .find_map(|l| l.trim_end().strip_prefix("BLK "))
            .ok_or(SampleError::NoBlkLine)?;
        let report: BlkReport = serde_json::from_str(json).map_err(SampleError::BadBlk)?;
        if let Some(e) = report.error {
            return Err(SampleError::Guest(e));
        }
        let run = report
            .runs
            .into_iter()
            .find(|r| r.name == "main")
            .ok_or(SampleError::NoMainRun)?;
        let m = metrics.ok_or(SampleError::NoMetrics)?;
        // `GET /metrics`: `drives[]`, `iothreads[].stats`, `threads[]` (name, cpu_ns).
        let drive = m["drives"].get(0).ok_or(SampleError::NoDrive)?;
        let all = |key: &str| m[key].as_array().into_iter().flatten();
        let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        if run.timed_out {
            return Err(SampleError::TimedOut(run.requests));
        }
        let n = run.requests;
        if n == 0 {
            return Err(SampleError::NoRequests);
        }
        let cpu_ms = |prefix: &str| -> f64 {
            let name =
                |t: &&serde_json::Value| t["name"].as_str().is_some_and(|n| n.starts_with(prefix));
            all("threads")
                .filter(name)
                .map(|t| u(&t["cpu_ns"]) as f64 / 1e6)
                .sum()
        };
        let sleeps: u64 = all("iothreads").map(|t| u(&t["stats"]["sleeps"])).sum();
        let per = |events: u64| per_io(events as f64, n);
        Ok(RunSample {
            iops: run.iops,
            bw_mib_s: per_io(run.bytes as f64 / f64::from(1u32 << 20), run.elapsed_ns) * 1e9,
            lat_mean_us: run.lat_ns.mean / 1e3,
            lat_p50_us: run.lat_ns.p50 / 1e3,
            lat_p99_us: run.lat_ns.p99 / 1e3,
            cpu_total_us: us_per_io(cpu_ms(""), n),
            cpu_vcpu_us: us_per_io(cpu_ms("vcpu"), n),
            cpu_dataplane_us: us_per_io(cpu_ms("iothread-"), n),
            guest_kicks: per(run.kicks),
            guest_irqs: per(run.interrupts),
            drive_kicks: per(u(&drive["kicks"])),
            drive_irqs: per(u(&drive["notifications"])),
            batch_mean: per_io(
                u(&drive["requests"]) as f64,
                u(&drive["submissions"]).max(1),
            ),
            sleeps: per(sleeps),
            errors: run.errors,
            guest_qd: run.qd,
        })
    }
}

/// The median (the mean of the middle two for an even count), NaNs ignored; NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// (min, max), NaNs ignored; NaNs for none.
pub fn spread(values: &[f64]) -> (f64, f64) {
    let v = values.iter().copied().filter(|x| !x.is_nan());
    v.fold(None, |acc: Option<(f64, f64)>, x| {
        Some(acc.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))))
    })
    .unwrap_or((f64::NAN, f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = include_str!("../testdata/blk-console.txt");

    fn metrics() -> serde_json::Value {
        serde_json::from_str(include_str!("../testdata/osprey-metrics.json")).expect("JSON")
    }

    #[test]
    fn a_recorded_run_becomes_a_sample() {
        let s = RunSample::from_outputs(CONSOLE, Some(&metrics())).expect("sample");
        assert_eq!((s.iops, s.guest_qd, s.errors), (233_854.0, 8, 0));
        // 81,920,000 bytes in 85,523,321 ns.
        assert!((s.bw_mib_s - 913.5).abs() < 0.1, "{}", s.bw_mib_s);
        assert!((s.lat_mean_us - 68.29).abs() < 1e-9);
        assert!((s.lat_p50_us - 54.621).abs() < 1e-9);
        assert!((s.lat_p99_us - 329.929).abs() < 1e-9);
        // Threads: iothread-io0 89.9 ms, osprey 6.0, vcpu0 122.1, over 20,000 requests.
        assert!((s.cpu_total_us - 10.9).abs() < 1e-9);
        assert!((s.cpu_vcpu_us - 6.105).abs() < 1e-9);
        assert!((s.cpu_dataplane_us - 4.495).abs() < 1e-9);
        assert!((s.guest_kicks - 19.0 / 20_000.0).abs() < 1e-12);
        assert_eq!(s.guest_irqs, 0.0);
        assert!((s.drive_kicks - 20.0 / 20_000.0).abs() < 1e-12);
        assert_eq!(s.drive_irqs, 0.0);
        assert!((s.batch_mean - 20_001.0 / 2_500.0).abs() < 1e-12);
        assert!((s.sleeps - 7.0 / 20_000.0).abs() < 1e-12);
    }

    #[test]
    fn bad_outputs_are_errors() {
        let m = metrics();
        let stalled = CONSOLE.replace("\"timed_out\":false", "\"timed_out\":true");
        let (oops, empty) = (serde_json::json!({"drives": "oops"}), serde_json::json!({}));
        for (console, metrics, want) in [
            ("ready\n", Some(&m), "No BLK line"),
            (
                "BLK {\"found\":false,\"error\":\"no device\"}",
                Some(&m),
                "error: no device",
            ),
            ("BLK {\"found\":true,", Some(&m), "Bad BLK line"),
            ("BLK {\"runs\":[]}", Some(&m), "no main run"),
            (CONSOLE, None, "no metrics"),
            (CONSOLE, Some(&oops), "no drive"),
            (CONSOLE, Some(&empty), "no drive"),
            (&stalled, Some(&m), "timed out after 20000 requests"),
        ] {
            let e = RunSample::from_outputs(console, metrics).expect_err(want);
            assert!(e.to_string().contains(want), "{e} for {want}");
        }
    }

    #[test]
    fn arithmetic_median_and_spread() {
        assert!((us_per_io(89.9, 20_000) - 4.495).abs() < 1e-9);
        assert!(us_per_io(1.0, 0).is_nan());
        assert_eq!(ratio(150_000.0, Some(200_000.0)), Some(0.75));
        assert_eq!(ratio(150_000.0, None), None);
        assert_eq!(ratio(150_000.0, Some(0.0)), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), (1.0, 3.0));
        assert!(spread(&[]).0.is_nan());
    }
}
