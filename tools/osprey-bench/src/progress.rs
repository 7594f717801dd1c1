//! The progress line printed on stderr after each point: n/N, the point, its IOPS, and the time
//! elapsed and left.

use std::time::Duration;

use crate::report::row::ResultRow;
use crate::units::thousands;

/// `42 s`, `3 min 05 s`, `1 h 02 min`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    }
}

/// Time left when `done` of `total` points took `elapsed` (the mean so far times the rest).
pub fn eta(elapsed: Duration, done: usize, total: usize) -> Duration {
    if done == 0 {
        return Duration::ZERO;
    }
    let per = elapsed.as_secs_f64() / done as f64;
    Duration::from_secs_f64(per * total.saturating_sub(done) as f64)
}

/// The line for a finished point.
pub fn line(done: usize, total: usize, label: &str, row: &ResultRow, elapsed: Duration) -> String {
    let result = match row.iops {
        Some(iops) => {
            let mut s = format!("{} IOPS", thousands(iops));
            if let (Some(lo), Some(hi), true) = (row.iops_min, row.iops_max, row.runs > 1) {
                s.push_str(&format!(" ({}–{})", thousands(lo), thousands(hi)));
            }
            if let Some(p99) = row.lat_p99_us {
                s.push_str(&format!(", p99 {p99:.1} µs"));
            }
            if let Some(c) = row.cpu_dataplane_us_per_io {
                s.push_str(&format!(", dataplane {c:.2} µs/IO"));
            }
            if let (Some(n), Some(r)) = (row.native_iops, row.native_ratio) {
                s.push_str(&format!(", native {} ({r:.2}×)", thousands(n)));
            }
            s
        }
        None => format!("FAILED: {}", row.note),
    };
    format!(
        "[{done}/{total}] {label}: {result} | {} elapsed, ETA {}",
        human_duration(elapsed),
        human_duration(eta(elapsed, done, total))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_and_durations() {
        assert_eq!(eta(Duration::from_secs(10), 2, 6), Duration::from_secs(20));
        assert_eq!(eta(Duration::from_secs(10), 0, 6), Duration::ZERO);
        assert_eq!(eta(Duration::from_secs(10), 6, 6), Duration::ZERO);
        assert_eq!(human_duration(Duration::from_secs(42)), "42 s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3 min 05 s");
        assert_eq!(human_duration(Duration::from_secs(3720)), "1 h 02 min");
    }
}
