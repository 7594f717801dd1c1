//! Repeats of a point reduced to a median and a min–max spread.

use crate::sample::RunSample;

/// The median (the mean of the middle two for an even count); NaN for none. NaNs are ignored.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// (min, max); NaNs for none.
pub fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(None, |acc: Option<(f64, f64)>, x| match acc {
            None => Some((x, x)),
            Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
        })
        .unwrap_or((f64::NAN, f64::NAN))
}

/// A point's repeats: each field the median over runs, plus the IOPS and p99 spread.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PointSummary {
    /// Field-by-field medians.
    pub median: RunSample,
    /// Lowest IOPS of the repeats.
    pub iops_min: f64,
    /// Highest IOPS of the repeats.
    pub iops_max: f64,
    /// Lowest p99 of the repeats, µs.
    pub p99_min: f64,
    /// Highest p99 of the repeats, µs.
    pub p99_max: f64,
    /// Runs summarised.
    pub runs: usize,
    /// Errors over all runs.
    pub errors: u64,
}

impl PointSummary {
    /// Summarises the runs (at least one).
    pub fn of(runs: &[RunSample]) -> Self {
        let m = |f: fn(&RunSample) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        let iops: Vec<f64> = runs.iter().map(|r| r.iops).collect();
        let p99: Vec<f64> = runs.iter().map(|r| r.lat_p99_us).collect();
        let (iops_min, iops_max) = spread(&iops);
        let (p99_min, p99_max) = spread(&p99);
        let median = RunSample {
            iops: m(|r| r.iops),
            bw_mib_s: m(|r| r.bw_mib_s),
            lat_mean_us: m(|r| r.lat_mean_us),
            lat_p50_us: m(|r| r.lat_p50_us),
            lat_p99_us: m(|r| r.lat_p99_us),
            cpu_total_us: m(|r| r.cpu_total_us),
            cpu_vcpu_us: m(|r| r.cpu_vcpu_us),
            cpu_dataplane_us: m(|r| r.cpu_dataplane_us),
            guest_kicks: m(|r| r.guest_kicks),
            guest_irqs: m(|r| r.guest_irqs),
            drive_kicks: m(|r| r.drive_kicks),
            drive_irqs: m(|r| r.drive_irqs),
            batch_mean: m(|r| r.batch_mean),
            sleeps: m(|r| r.sleeps),
            requests: runs.iter().map(|r| r.requests).max().unwrap_or(0),
            errors: runs.iter().map(|r| r.errors).max().unwrap_or(0),
            guest_qd: runs.iter().map(|r| r.guest_qd).min().unwrap_or(0),
            elapsed_s: m(|r| r.elapsed_s),
        };
        PointSummary {
            median,
            iops_min,
            iops_max,
            p99_min,
            p99_max,
            runs: runs.len(),
            errors: runs.iter().map(|r| r.errors).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), (1.0, 3.0));
        assert!(spread(&[]).0.is_nan());
    }

    #[test]
    fn summarises_repeats_field_by_field() {
        let run = |iops: f64, p99: f64, cpu: f64| RunSample {
            iops,
            lat_p99_us: p99,
            cpu_dataplane_us: cpu,
            requests: 1000,
            errors: 1,
            guest_qd: 32,
            ..RunSample::default()
        };
        let s = PointSummary::of(&[
            run(100.0, 50.0, 3.0),
            run(300.0, 10.0, 1.0),
            run(200.0, 30.0, 2.0),
        ]);
        assert_eq!(s.median.iops, 200.0);
        assert_eq!(s.median.lat_p99_us, 30.0);
        assert_eq!(s.median.cpu_dataplane_us, 2.0);
        assert_eq!((s.iops_min, s.iops_max), (100.0, 300.0));
        assert_eq!((s.p99_min, s.p99_max), (10.0, 50.0));
        assert_eq!(s.runs, 3);
        assert_eq!(s.errors, 3);
    }
}
