//! An iothread polling configuration as the matrix names it (`off`, `classic`,
//! `classic:<window>`, `weighted:<W>`, `adaptive`) and the iothread config fields it stands for.

use std::fmt;
use std::str::FromStr;

use crate::matrix::MatrixError;
use crate::units::{format_duration_ns, parse_duration_ns};

/// An iothread polling configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PollSetting {
    /// `poll_max_ns: 0`.
    Off,
    /// The classic policy; `None` keeps Osprey's default window.
    Classic(Option<u64>),
    /// The weighted policy with `poll_weight` W (default window).
    Weighted(u8),
    /// Osprey's adaptive policy (classic windows, suspended while the host is busy).
    Adaptive,
}

impl PollSetting {
    /// The iothread fields this setting puts in the VM config.
    pub fn iothread_fields(self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        match self {
            PollSetting::Off => {
                m.insert("poll_max_ns".into(), 0.into());
            }
            PollSetting::Classic(window) => {
                m.insert("poll_policy".into(), "Classic".into());
                if let Some(ns) = window {
                    m.insert("poll_max_ns".into(), ns.into());
                }
            }
            PollSetting::Weighted(w) => {
                m.insert("poll_policy".into(), "Weighted".into());
                m.insert("poll_weight".into(), w.into());
            }
            PollSetting::Adaptive => {
                m.insert("poll_policy".into(), "Adaptive".into());
            }
        }
        m
    }
}

impl FromStr for PollSetting {
    type Err = MatrixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || MatrixError::Poll(s.to_string());
        let t = s.trim().to_ascii_lowercase();
        let (name, arg) = match t.split_once([':', '=']) {
            Some((n, a)) => (n, Some(a)),
            None => (t.as_str(), None),
        };
        match (name, arg) {
            ("off", None) => Ok(PollSetting::Off),
            ("classic", None) => Ok(PollSetting::Classic(None)),
            ("classic", Some(w)) => {
                let ns = parse_duration_ns(w).map_err(|_| bad())?;
                if ns == 0 {
                    Ok(PollSetting::Off)
                } else if ns > 1_000_000_000 {
                    Err(bad())
                } else {
                    Ok(PollSetting::Classic(Some(ns)))
                }
            }
            ("weighted", Some(w)) => match w.parse::<u8>() {
                Ok(w @ 1..=16) => Ok(PollSetting::Weighted(w)),
                _ => Err(bad()),
            },
            ("weighted", None) => Ok(PollSetting::Weighted(3)),
            ("adaptive", None) => Ok(PollSetting::Adaptive),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for PollSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PollSetting::Off => f.write_str("off"),
            PollSetting::Classic(None) => f.write_str("classic"),
            PollSetting::Classic(Some(ns)) => write!(f, "classic:{}", format_duration_ns(*ns)),
            PollSetting::Weighted(w) => write!(f, "weighted:{w}"),
            PollSetting::Adaptive => f.write_str("adaptive"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_settings_round_trip_and_map_to_config() {
        for s in ["off", "classic", "classic:200us", "weighted:3", "adaptive"] {
            let p: PollSetting = s.parse().expect("parse");
            assert_eq!(p.to_string(), s);
        }
        let off = PollSetting::Off.iothread_fields();
        assert_eq!(off["poll_max_ns"], 0);
        let w = PollSetting::Weighted(2).iothread_fields();
        assert_eq!(w["poll_policy"], "Weighted");
        assert_eq!(w["poll_weight"], 2);
        let c = PollSetting::Classic(Some(200_000)).iothread_fields();
        assert_eq!(c["poll_max_ns"], 200_000);
    }
}
