//! Sizes, durations and times as people type them (`4k`, `1g`, `200us`) and as the reports and
//! progress lines print them.

use std::time::Duration;

use thiserror::Error;

/// A size or duration that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("Bad {what} {input:?}: expected a number with an optional {suffixes} suffix")]
pub struct UnitsError {
    what: &'static str,
    input: String,
    suffixes: &'static str,
}

const SIZES: [(&str, u64); 4] = [("", 1), ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30)];
const DURATIONS: [(&str, u64); 6] = [
    ("", 1),
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

/// Digits followed by one of `units`' suffixes (case-insensitive), times its multiplier.
fn parse_with(s: &str, units: &[(&str, u64)]) -> Option<u64> {
    let t = s.trim().to_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let (_, mult) = units.iter().find(|(u, _)| *u == suffix)?;
    digits.parse::<u64>().ok()?.checked_mul(*mult)
}

/// Bytes from `4096`, `4k`, `128K`, `1m`, `1g` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, UnitsError> {
    parse_with(s, &SIZES).ok_or_else(|| UnitsError {
        what: "size",
        input: s.to_string(),
        suffixes: "k, m or g (×1024)",
    })
}

/// Nanoseconds from `200000`, `200000ns`, `200us`, `2ms`, `1s` (a bare number is ns).
pub fn parse_duration_ns(s: &str) -> Result<u64, UnitsError> {
    parse_with(s, &DURATIONS).ok_or_else(|| UnitsError {
        what: "duration",
        input: s.to_string(),
        suffixes: "ns, us, ms or s",
    })
}

/// `n` in the largest of `units` that divides it exactly (`{n}{sep}{unit}`), if any.
fn exact(n: u64, units: &[(u64, &str)], sep: &str) -> Option<String> {
    units
        .iter()
        .find(|(d, _)| n >= *d && n.is_multiple_of(*d))
        .map(|(d, u)| format!("{}{sep}{u}", n / d))
}

/// The shortest of `512`, `4k`, `1m`, `1g` that is exact.
pub fn format_size(bytes: u64) -> String {
    exact(bytes, &[(1 << 30, "g"), (1 << 20, "m"), (1 << 10, "k")], "")
        .unwrap_or_else(|| bytes.to_string())
}

/// `1 GiB`, `64 MiB`, `4 KiB`, `1536 B`: for prose.
pub fn format_bytes(bytes: u64) -> String {
    exact(
        bytes,
        &[(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")],
        " ",
    )
    .unwrap_or_else(|| format!("{bytes} B"))
}

/// `200us`, `32768ns`, `2ms`: the shortest exact form.
pub fn format_duration_ns(ns: u64) -> String {
    exact(
        ns,
        &[(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")],
        "",
    )
    .unwrap_or_else(|| format!("{ns}ns"))
}

/// `1,234,567` for integers in tables.
pub fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.round().abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n.round() < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// `42 s`, `3 min 05 s`, `1 h 02 min`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// A UTC wall-clock time: (year, month, day, hour, minute, second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime([u64; 6]);

impl UtcTime {
    /// Now.
    pub fn now() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self::from_unix(secs)
    }

    /// From seconds since the epoch (civil-from-days, proleptic Gregorian).
    pub fn from_unix(secs: u64) -> Self {
        let z = secs / 86_400 + 719_468;
        let (era, doe) = (z / 146_097, z % 146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        let rem = secs % 86_400;
        UtcTime([year, month, day, rem / 3600, rem % 3600 / 60, rem % 60])
    }

    /// `20261121-094730`, for directory names.
    pub fn stamp(&self) -> String {
        let [y, mo, d, h, mi, s] = self.0;
        format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
    }

    /// `2026-11-21 09:47:30 UTC`.
    pub fn display(&self) -> String {
        let [y, mo, d, h, mi, s] = self.0;
        format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        for bad in ["4x", "k", "", "4kk"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration_ns("200us"), Ok(200_000));
        assert_eq!(parse_duration_ns("32768"), Ok(32_768));
        assert_eq!(parse_duration_ns("2ms"), Ok(2_000_000));
        assert_eq!(parse_duration_ns("1s"), Ok(1_000_000_000));
        assert!(parse_duration_ns("1h").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_bytes(1 << 30), "1 GiB");
        assert_eq!(format_bytes(1536), "1536 B");
        assert_eq!(format_duration_ns(200_000), "200us");
        assert_eq!(format_duration_ns(32_768), "32768ns");
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
        assert_eq!(human_duration(Duration::from_secs(42)), "42 s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3 min 05 s");
        assert_eq!(human_duration(Duration::from_secs(3720)), "1 h 02 min");
    }

    #[test]
    fn utc_from_unix_seconds() {
        assert_eq!(UtcTime::from_unix(0).display(), "1970-01-01 00:00:00 UTC");
        // 2024-02-29 12:34:56 UTC (a leap day).
        let t = UtcTime::from_unix(1_709_210_096);
        assert_eq!(t.display(), "2024-02-29 12:34:56 UTC");
        assert_eq!(t.stamp(), "20240229-123456");
    }
}
