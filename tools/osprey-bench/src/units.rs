//! Sizes and durations as people type them (`4k`, `128k`, `1g`, `200us`) and as the reports
//! print them.

use thiserror::Error;

/// A size or duration that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum UnitsError {
    /// Not a number with an optional suffix.
    #[error("Bad size {0:?}: expected a number with an optional k, m or g suffix (×1024)")]
    Size(String),
    /// Not a number with an optional time suffix.
    #[error("Bad duration {0:?}: expected a number with an optional ns, us, ms or s suffix")]
    Duration(String),
}

/// Bytes from `4096`, `4k`, `128K`, `1m`, `1g` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, UnitsError> {
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1u64 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                _ => return Err(UnitsError::Size(s.to_string())),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| UnitsError::Size(s.to_string()))
}

/// Nanoseconds from `200000`, `200000ns`, `200us`, `2ms`, `1s` (a bare number is ns).
pub fn parse_duration_ns(s: &str) -> Result<u64, UnitsError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let mult = match suffix {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(UnitsError::Duration(s.to_string())),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| UnitsError::Duration(s.to_string()))
}

/// The shortest of `512`, `4k`, `1m`, `1g` that is exact.
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(30, "g"), (20, "m"), (10, "k")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `1 GiB`, `64 MiB`, `4 KiB`, `1536 B`: for prose.
pub fn format_bytes(bytes: u64) -> String {
    for (shift, suffix) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {suffix}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

/// `200us`, `32768ns`, `2ms`: the shortest exact form.
pub fn format_duration_ns(ns: u64) -> String {
    for (div, suffix) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns >= div && ns.is_multiple_of(div) {
            return format!("{}{suffix}", ns / div);
        }
    }
    format!("{ns}ns")
}

/// `1,234,567` for integers in tables.
pub fn thousands(n: f64) -> String {
    let rounded = n.round();
    let neg = rounded < 0.0;
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if neg {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("4x").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn durations_parse_with_suffixes() {
        assert_eq!(parse_duration_ns("200us"), Ok(200_000));
        assert_eq!(parse_duration_ns("32768"), Ok(32_768));
        assert_eq!(parse_duration_ns("2ms"), Ok(2_000_000));
        assert_eq!(parse_duration_ns("1s"), Ok(1_000_000_000));
        assert!(parse_duration_ns("1h").is_err());
    }

    #[test]
    fn formats_round_trip() {
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(131072), "128k");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_bytes(1 << 30), "1 GiB");
        assert_eq!(format_bytes(1536), "1536 B");
        assert_eq!(format_duration_ns(200_000), "200us");
        assert_eq!(format_duration_ns(32_768), "32768ns");
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
    }
}
