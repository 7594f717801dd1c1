//! One point's outcome as a flat row: the CSV's columns, and what the markdown and plots read.

use serde::Serialize;

use crate::fio::{FioJob, FioResult};
use crate::matrix::Point;
use crate::sample::ratio;
use crate::summary::PointSummary;
use crate::units::format_size;

/// How a point ended.
#[derive(Debug, Clone)]
pub struct PointOutcome {
    /// 1-based position in the matrix.
    pub index: usize,
    /// The point.
    pub point: Point,
    /// Requests in the first recorded run.
    pub count: u64,
    /// The recorded runs' summary, when at least one run worked.
    pub summary: Option<PointSummary>,
    /// Why runs failed (the first failure), if any did.
    pub error: Option<String>,
    /// The fio job group used for the native column.
    pub native_job: FioJob,
    /// Its result, or why there is none.
    pub native: Result<FioResult, String>,
}

/// A finite value, rounded to `digits` decimals; None for NaN and infinities.
pub fn fin(x: f64, digits: i32) -> Option<f64> {
    if x.is_finite() {
        let m = 10f64.powi(digits);
        Some((x * m).round() / m)
    } else {
        None
    }
}

/// The CSV row (column names are the field names; see docs/benchmarks.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ResultRow {
    pub point: usize,
    pub rw: String,
    pub bs: String,
    pub bs_bytes: u64,
    pub qd: u32,
    pub queues: u32,
    pub engine: String,
    pub poll: String,
    pub max_batch: u32,
    pub irq: u8,
    /// CPU-bound processes beside the VM.
    pub hog: u32,
    pub status: String,
    pub runs: usize,
    pub requests_first_run: u64,
    pub guest_qd: Option<u32>,
    pub iops: Option<f64>,
    pub iops_min: Option<f64>,
    pub iops_max: Option<f64>,
    pub bw_mib_s: Option<f64>,
    pub lat_mean_us: Option<f64>,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_p99_min_us: Option<f64>,
    pub lat_p99_max_us: Option<f64>,
    pub cpu_total_us_per_io: Option<f64>,
    pub cpu_vcpu_us_per_io: Option<f64>,
    pub cpu_dataplane_us_per_io: Option<f64>,
    pub guest_kicks_per_io: Option<f64>,
    pub guest_irqs_per_io: Option<f64>,
    pub drive_kicks_per_io: Option<f64>,
    pub drive_irqs_per_io: Option<f64>,
    pub batch_mean: Option<f64>,
    pub sleeps_per_io: Option<f64>,
    pub errors: Option<u64>,
    pub native_fio: String,
    pub native_iops: Option<f64>,
    pub native_bw_mib_s: Option<f64>,
    pub native_lat_mean_us: Option<f64>,
    pub native_lat_p99_us: Option<f64>,
    pub native_cpu_us_per_io: Option<f64>,
    pub native_ratio: Option<f64>,
    pub note: String,
}

impl ResultRow {
    /// Flattens an outcome.
    pub fn from_outcome(o: &PointOutcome) -> Self {
        let p = &o.point;
        let s = o.summary.as_ref();
        let m = s.map(|s| &s.median);
        let f = |g: &dyn Fn(&PointSummary) -> f64, d: i32| s.and_then(|s| fin(g(s), d));
        let nat = o.native.as_ref().ok();
        let nf = |g: &dyn Fn(&FioResult) -> f64, d: i32| nat.and_then(|n| fin(g(n), d));
        let native_iops = nf(&|n| n.iops, 1);
        let mut notes = Vec::new();
        if let Some(e) = &o.error {
            notes.push(e.clone());
        }
        if let Err(e) = &o.native {
            notes.push(format!("native: {e}"));
        }
        if let Some(m) = m {
            if m.guest_qd != 0 && m.guest_qd != p.qd {
                notes.push(format!("guest lowered qd to {}", m.guest_qd));
            }
        }
        ResultRow {
            point: o.index,
            rw: p.rw.to_string(),
            bs: format_size(p.bs),
            bs_bytes: p.bs,
            qd: p.qd,
            queues: p.queues,
            engine: p.engine.to_string(),
            poll: p.poll.to_string(),
            max_batch: p.max_batch,
            irq: u8::from(p.irq),
            hog: p.hog,
            status: match (s, &o.error) {
                (Some(_), None) => "ok".into(),
                (Some(_), Some(_)) => "partial".into(),
                (None, _) => "failed".into(),
            },
            runs: s.map_or(0, |s| s.runs),
            requests_first_run: o.count,
            guest_qd: m.map(|m| m.guest_qd),
            iops: f(&|s| s.median.iops, 1),
            iops_min: f(&|s| s.iops_min, 1),
            iops_max: f(&|s| s.iops_max, 1),
            bw_mib_s: f(&|s| s.median.bw_mib_s, 2),
            lat_mean_us: f(&|s| s.median.lat_mean_us, 3),
            lat_p50_us: f(&|s| s.median.lat_p50_us, 3),
            lat_p99_us: f(&|s| s.median.lat_p99_us, 3),
            lat_p99_min_us: f(&|s| s.p99_min, 3),
            lat_p99_max_us: f(&|s| s.p99_max, 3),
            cpu_total_us_per_io: f(&|s| s.median.cpu_total_us, 3),
            cpu_vcpu_us_per_io: f(&|s| s.median.cpu_vcpu_us, 3),
            cpu_dataplane_us_per_io: f(&|s| s.median.cpu_dataplane_us, 3),
            guest_kicks_per_io: f(&|s| s.median.guest_kicks, 4),
            guest_irqs_per_io: f(&|s| s.median.guest_irqs, 4),
            drive_kicks_per_io: f(&|s| s.median.drive_kicks, 4),
            drive_irqs_per_io: f(&|s| s.median.drive_irqs, 4),
            batch_mean: f(&|s| s.median.batch_mean, 2),
            sleeps_per_io: f(&|s| s.median.sleeps, 4),
            errors: s.map(|s| s.errors),
            native_fio: o.native_job.label(),
            native_iops,
            native_bw_mib_s: nf(&|n| n.bw_mib_s, 2),
            native_lat_mean_us: nf(&|n| n.lat_mean_us, 3),
            native_lat_p99_us: nf(&|n| n.lat_p99_us, 3),
            native_cpu_us_per_io: nf(&|n| n.cpu_us, 3),
            native_ratio: m
                .and_then(|m| ratio(m.iops, nat.map(|n| n.iops)))
                .and_then(|r| fin(r, 3)),
            note: notes.join("; "),
        }
    }
}

/// A complete row for tests.
#[cfg(test)]
pub fn sample_row(point: usize, qd: u32, iops: f64) -> ResultRow {
    ResultRow {
        point,
        rw: "randread".into(),
        bs: "4k".into(),
        bs_bytes: 4096,
        qd,
        queues: 1,
        engine: "IoUring".into(),
        poll: "off".into(),
        max_batch: 32,
        irq: 0,
        hog: 0,
        status: "ok".into(),
        runs: 3,
        requests_first_run: 1000,
        guest_qd: Some(qd),
        iops: Some(iops),
        iops_min: Some(iops - 1000.0),
        iops_max: Some(iops + 1000.0),
        bw_mib_s: Some(1.0),
        lat_mean_us: Some(1.0),
        lat_p50_us: Some(1.0),
        lat_p99_us: Some(2.0),
        lat_p99_min_us: Some(2.0),
        lat_p99_max_us: Some(2.0),
        cpu_total_us_per_io: Some(10.0),
        cpu_vcpu_us_per_io: Some(5.0),
        cpu_dataplane_us_per_io: Some(4.0),
        guest_kicks_per_io: Some(1.0),
        guest_irqs_per_io: Some(0.0),
        drive_kicks_per_io: Some(1.0),
        drive_irqs_per_io: Some(0.0),
        batch_mean: Some(1.0),
        sleeps_per_io: Some(1.0),
        errors: Some(0),
        native_fio: format!("io_uring qd{qd}×1"),
        native_iops: Some(iops * 2.0),
        native_bw_mib_s: Some(2.0),
        native_lat_mean_us: Some(1.0),
        native_lat_p99_us: Some(1.0),
        native_cpu_us_per_io: None,
        native_ratio: Some(0.5),
        note: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, PollSetting, Rw};
    use crate::sample::RunSample;

    #[test]
    fn flattens_an_outcome_with_its_ratio() {
        let point = Point {
            rw: Rw::RandRead,
            bs: 4096,
            qd: 32,
            queues: 1,
            engine: Engine::IoUring,
            poll: PollSetting::Classic(None),
            max_batch: 32,
            irq: false,
            hog: 0,
        };
        let run = RunSample {
            iops: 150_000.0,
            cpu_dataplane_us: 2.8004,
            guest_qd: 32,
            requests: 150_000,
            ..RunSample::default()
        };
        let o = PointOutcome {
            index: 3,
            point,
            count: 150_000,
            summary: Some(PointSummary::of(&[run])),
            error: None,
            native_job: FioJob::for_point(&point),
            native: Ok(FioResult {
                iops: 200_000.0,
                bw_mib_s: 781.25,
                lat_mean_us: 150.0,
                lat_p50_us: 140.0,
                lat_p99_us: 400.0,
                cpu_us: f64::NAN,
                ios: 200_000,
            }),
        };
        let r = ResultRow::from_outcome(&o);
        assert_eq!(r.status, "ok");
        assert_eq!(r.bs, "4k");
        assert_eq!(r.poll, "classic");
        assert_eq!(r.native_ratio, Some(0.75));
        assert_eq!(r.cpu_dataplane_us_per_io, Some(2.8));
        assert_eq!(r.native_cpu_us_per_io, None);
        assert_eq!(r.native_fio, "io_uring qd32×1");
        assert_eq!(r.note, "");
        let failed = PointOutcome {
            summary: None,
            error: Some("boom".into()),
            native: Err("fio missing".into()),
            ..o
        };
        let r = ResultRow::from_outcome(&failed);
        assert_eq!(r.status, "failed");
        assert_eq!(r.iops, None);
        assert_eq!(r.native_ratio, None);
        assert_eq!(r.note, "boom; native: fio missing");
    }
}
