//! One recorded run of a point: the guest's report (the test guest's `BLK` line here; the Linux
//! kit's fio JSON in `kit_report.rs`) and Osprey's stop-time log turned into per-I/O numbers
//! (IOPS, bandwidth, latency, CPU per I/O, kicks and interrupts per I/O). A number the guest
//! cannot give is NaN ("not measured": an empty cell in the outputs).

use thiserror::Error;

use crate::blk_report::BlkReport;
use crate::guest::GuestError;
use crate::vmm_log::VmmLog;

/// A run whose outputs do not add up to a sample.
#[derive(Debug, Error, PartialEq)]
pub enum SampleError {
    /// The guest completed nothing.
    #[error("The guest completed no requests")]
    NoRequests,
    /// The guest's run stalled.
    #[error("The guest's run timed out after {0} requests")]
    TimedOut(u64),
}

/// µs per I/O from a total in ms over `ios` I/Os.
pub fn us_per_io(total_ms: f64, ios: u64) -> f64 {
    if ios == 0 {
        return f64::NAN;
    }
    total_ms * 1000.0 / ios as f64
}

/// Events per I/O.
pub fn per_io(events: u64, ios: u64) -> f64 {
    if ios == 0 {
        return f64::NAN;
    }
    events as f64 / ios as f64
}

/// MiB/s from bytes over ns.
pub fn mib_per_s(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        return f64::NAN;
    }
    bytes as f64 / (ns as f64 / 1e9) / f64::from(1u32 << 20)
}

/// guest / native, when there is a native number.
pub fn ratio(guest: f64, native: Option<f64>) -> Option<f64> {
    match native {
        Some(n) if n > 0.0 && guest.is_finite() => Some(guest / n),
        _ => None,
    }
}

/// One run's numbers (NaN: not measured with this guest).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunSample {
    /// Guest-measured requests per second.
    pub iops: f64,
    /// Guest-measured MiB/s.
    pub bw_mib_s: f64,
    /// Mean latency, µs (test guest: submit to seen in the used ring; Linux: fio's clat).
    pub lat_mean_us: f64,
    /// Median latency, µs.
    pub lat_p50_us: f64,
    /// 99th percentile latency, µs.
    pub lat_p99_us: f64,
    /// All of Osprey's threads, µs CPU per I/O.
    pub cpu_total_us: f64,
    /// vCPU threads, µs CPU per I/O.
    pub cpu_vcpu_us: f64,
    /// Dataplane (iothread) threads, µs CPU per I/O.
    pub cpu_dataplane_us: f64,
    /// Kicks the guest issued per I/O.
    pub guest_kicks: f64,
    /// Interrupts the guest took per I/O.
    pub guest_irqs: f64,
    /// Kicks the drive saw per I/O.
    pub drive_kicks: f64,
    /// Interrupts the drive sent per I/O.
    pub drive_irqs: f64,
    /// Requests per engine submission call.
    pub batch_mean: f64,
    /// iothread sleeps per I/O.
    pub sleeps: f64,
    /// Completed requests.
    pub requests: u64,
    /// Non-OK requests.
    pub errors: u64,
    /// Effective queue depth the guest used.
    pub guest_qd: u32,
    /// Run time, s.
    pub elapsed_s: f64,
}

impl RunSample {
    /// Combines a run's `BLK` report with Osprey's log. Per-I/O numbers divide by the guest's
    /// completed requests; CPU times cover the whole VM life (boot and set-up included).
    pub fn from_outputs(report: &BlkReport, log: &VmmLog) -> Result<Self, GuestError> {
        let run = report.main_run()?;
        if run.timed_out {
            return Err(SampleError::TimedOut(run.requests).into());
        }
        let n = run.requests;
        if n == 0 {
            return Err(SampleError::NoRequests.into());
        }
        let cpu = log.cpu()?;
        let drive = log.drive()?;
        let sleeps: u64 = log.iothreads.iter().map(|t| t.stats.sleeps).sum();
        Ok(RunSample {
            iops: run.iops,
            bw_mib_s: mib_per_s(run.bytes, run.elapsed_ns),
            lat_mean_us: run.lat_ns.mean / 1e3,
            lat_p50_us: run.lat_ns.p50 / 1e3,
            lat_p99_us: run.lat_ns.p99 / 1e3,
            cpu_total_us: us_per_io(cpu.total_ms(), n),
            cpu_vcpu_us: us_per_io(cpu.vcpu_ms(), n),
            cpu_dataplane_us: us_per_io(cpu.dataplane_ms(), n),
            guest_kicks: per_io(run.kicks, n),
            guest_irqs: per_io(run.interrupts, n),
            drive_kicks: per_io(drive.kicks, n),
            drive_irqs: per_io(drive.notifications, n),
            batch_mean: per_io(drive.requests, drive.submissions.max(1)),
            sleeps: per_io(sleeps, n),
            requests: n,
            errors: run.errors,
            guest_qd: run.qd,
            elapsed_s: run.elapsed_ns as f64 / 1e9,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_io_arithmetic() {
        // 89.9 ms over 20,000 I/Os is 4.495 µs each.
        assert!((us_per_io(89.9, 20_000) - 4.495).abs() < 1e-9);
        assert!(us_per_io(1.0, 0).is_nan());
        assert_eq!(per_io(19, 20_000), 0.00095);
        assert!((mib_per_s(81_920_000, 85_523_321) - 913.5).abs() < 0.1);
        assert_eq!(ratio(150_000.0, Some(200_000.0)), Some(0.75));
        assert_eq!(ratio(150_000.0, None), None);
        assert_eq!(ratio(150_000.0, Some(0.0)), None);
    }

    #[test]
    fn a_recorded_run_becomes_a_sample() {
        let report =
            BlkReport::from_console(include_str!("../tests/data/blk-console.txt")).expect("blk");
        let log = crate::vmm_log::tests::recorded();
        let s = RunSample::from_outputs(&report, &log).expect("sample");
        assert_eq!(s.iops, 233_854.0);
        assert_eq!(s.requests, 20_000);
        assert!((s.lat_mean_us - 68.29).abs() < 1e-9);
        assert!((s.lat_p99_us - 329.929).abs() < 1e-9);
        // (89.9 + 0.0 + 6.0 + 122.1) ms / 20,000.
        assert!((s.cpu_total_us - 10.9).abs() < 1e-9);
        assert!((s.cpu_vcpu_us - 6.105).abs() < 1e-9);
        assert!((s.cpu_dataplane_us - 4.495).abs() < 1e-9);
        assert!((s.guest_kicks - 19.0 / 20_000.0).abs() < 1e-12);
        assert!((s.drive_kicks - 20.0 / 20_000.0).abs() < 1e-12);
        assert_eq!(s.drive_irqs, 0.0);
        assert!((s.batch_mean - 20_001.0 / 2_500.0).abs() < 1e-12);
        assert_eq!(s.guest_qd, 8);
    }
}
