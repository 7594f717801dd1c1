//! Sizes, durations and times as people type them (`4k`, `1g`, `200us`) and as the reports and
//! progress lines print them.

use std::time::Duration;

use thiserror::Error;

/// A size or duration that does not parse: what it is, the input, the suffixes it takes.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("Bad {0} {1:?}: expected a number with an optional {2} suffix")]
pub struct UnitsError(&'static str, String, &'static str);

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
    parse_with(s, &SIZES).ok_or_else(|| UnitsError("size", s.into(), "k, m or g (×1024)"))
}

/// Nanoseconds from `200000`, `200000ns`, `200us`, `2ms`, `1s` (a bare number is ns).
pub fn parse_duration_ns(s: &str) -> Result<u64, UnitsError> {
    parse_with(s, &DURATIONS).ok_or_else(|| UnitsError("duration", s.into(), "ns, us, ms or s"))
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
    let units = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    exact(bytes, &units, " ").unwrap_or_else(|| format!("{bytes} B"))
}

/// `200us`, `32768ns`, `2ms`: the shortest exact form.
pub fn format_duration_ns(ns: u64) -> String {
    let units = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    exact(ns, &units, "").unwrap_or_else(|| format!("{ns}ns"))
}

/// `1,234,567` for integers in tables.
pub fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.round().abs());
    let mut out = if n.round() < 0.0 { "-" } else { "" }.to_string();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Whole seconds as `42s`, `3m 5s`, `1h 2m`, for progress lines.
pub fn human_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// Now in UTC, as (`2026-11-21 09:47:30 UTC`, `20261121-094730` for directory names).
pub fn utc_now() -> (String, String) {
    let rfc = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let display = rfc.replacen('T', " ", 1).replacen('Z', " UTC", 1);
    let digits: String = rfc.chars().filter(char::is_ascii_digit).collect();
    let stamp = format!("{}-{}", &digits[..8], &digits[8..]);
    (display, stamp)
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
        assert_eq!(human_duration(Duration::from_millis(42_700)), "42s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3m 5s");
        assert_eq!(human_duration(Duration::from_secs(3720)), "1h 2m");
    }

    #[test]
    fn utc_now_reads_as_a_date_and_a_stamp() {
        let (display, stamp) = utc_now();
        assert!(
            display.starts_with("20") && display.ends_with(" UTC"),
            "{display}"
        );
        assert_eq!((display.len(), stamp.len()), (23, 15), "{display} {stamp}");
        assert_eq!(&display[..4], &stamp[..4]);
        assert_eq!(stamp.as_bytes()[8], b'-');
    }
}
