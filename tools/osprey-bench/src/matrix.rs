//! The workload matrix: what one point is (rw × bs × qd × queues × engine × polling × max_batch ×
//! irq × hog), parsing the values clap cannot, expanding the lists into points (setting aside those
//! over the test guest's 8 MiB buffer pool), and naming plot series after the dimensions that vary.

use std::fmt;
use std::str::FromStr;

use clap::ValueEnum;
use serde_json::json;
use thiserror::Error;

use crate::units::{format_bytes, format_duration_ns, format_size, parse_duration_ns, parse_size};

/// The test guest's data pool: `bs · qd · queues` must fit.
pub const GUEST_POOL_BYTES: u64 = 8 << 20;

/// A matrix value that does not parse or is out of range.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MatrixError {
    #[error(
        "Bad poll config {0:?}: expected off, classic, classic:<window> (e.g. classic:200us), \
         weighted:<W> (W 1-16) or adaptive"
    )]
    Poll(String),
    #[error("bs {0} is out of range (a multiple of 512 from 512 to 1m)")]
    Bs(u64),
    #[error(transparent)]
    Units(#[from] crate::units::UnitsError),
}

/// The guest's access pattern (the test guest and fio spell it alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum Rw {
    #[value(name = "randread")]
    RandRead,
    #[value(name = "randwrite")]
    RandWrite,
    Read,
    Write,
}

/// Osprey's I/O engines (`drives[].io_engine`), spelled as in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum Engine {
    #[value(name = "IoUring", alias = "io_uring")]
    IoUring,
    #[value(name = "LinuxAio", alias = "aio", alias = "libaio")]
    LinuxAio,
    #[value(name = "Sync")]
    Sync,
    #[value(name = "Null")]
    Null,
    #[value(name = "Auto")]
    Auto,
}

/// `Display` as the name clap parses (`randread`, `IoUring`, `buffered-cold`).
macro_rules! display_value_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let v = clap::ValueEnum::to_possible_value(self);
                f.write_str(v.as_ref().map_or("", |v| v.get_name()))
            }
        }
    )*};
}
pub(crate) use display_value_name;
display_value_name!(Rw, Engine);

/// An iothread polling configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PollSetting {
    /// `poll_max_ns: 0`.
    Off,
    /// The classic policy; `None` keeps Osprey's default window.
    Classic(Option<u64>),
    /// The weighted policy with `poll_weight` W (default window).
    Weighted(u8),
    /// Osprey's adaptive policy.
    Adaptive,
}

impl PollSetting {
    /// The iothread fields this setting puts in the VM config.
    pub fn iothread_fields(self) -> serde_json::Value {
        match self {
            PollSetting::Off => json!({ "poll_max_ns": 0 }),
            PollSetting::Classic(None) => json!({ "poll_policy": "Classic" }),
            PollSetting::Classic(Some(ns)) => {
                json!({ "poll_policy": "Classic", "poll_max_ns": ns })
            }
            PollSetting::Weighted(w) => {
                json!({ "poll_policy": "Weighted", "poll_weight": w })
            }
            PollSetting::Adaptive => json!({ "poll_policy": "Adaptive" }),
        }
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
            ("classic", Some(w)) => match parse_duration_ns(w).map_err(|_| bad())? {
                0 => Ok(PollSetting::Off),
                ns @ 1..=1_000_000_000 => Ok(PollSetting::Classic(Some(ns))),
                _ => Err(bad()),
            },
            ("weighted", None) => Ok(PollSetting::Weighted(3)),
            ("weighted", Some(w)) => match w.parse::<u8>() {
                Ok(w @ 1..=16) => Ok(PollSetting::Weighted(w)),
                _ => Err(bad()),
            },
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

/// A block size from the command line: a multiple of 512 in 512 B–1 MiB.
pub fn parse_bs(s: &str) -> Result<u64, MatrixError> {
    let v = parse_size(s)?;
    if !(512..=1 << 20).contains(&v) || !v.is_multiple_of(512) {
        return Err(MatrixError::Bs(v));
    }
    Ok(v)
}

/// One workload point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Point {
    pub rw: Rw,
    /// Bytes per request.
    pub bs: u64,
    /// Requests in flight per queue.
    pub qd: u32,
    /// Virtqueues driven (and fio jobs on the host).
    pub queues: u32,
    pub engine: Engine,
    pub poll: PollSetting,
    pub max_batch: u32,
    /// The guest takes MSI-X interrupts instead of polling the used rings.
    pub irq: bool,
    /// CPU-bound processes running beside the VM.
    pub hog: u32,
    /// Which Osprey binary serves the point: 1 for the first of `--osprey`, 2 for the second…
    pub build: u8,
}

impl Point {
    /// 4 KiB randread QD1, one queue, IoUring, polling off, max_batch 32.
    pub fn base() -> Point {
        Point {
            rw: Rw::RandRead,
            bs: 4096,
            qd: 1,
            queues: 1,
            engine: Engine::IoUring,
            poll: PollSetting::Off,
            max_batch: 32,
            irq: false,
            hog: 0,
            build: 1,
        }
    }

    /// Bytes of guest buffers this point needs.
    pub fn guest_pool_bytes(&self) -> u64 {
        self.bs * u64::from(self.qd) * u64::from(self.queues)
    }

    /// Short human label: `randread 4k qd32 q1 IoUring poll=classic mb=32`.
    pub fn label(&self) -> String {
        let hog = (self.hog > 0).then(|| format!(" hog={}", self.hog));
        let build = (self.build > 1).then(|| format!(" build={}", self.build));
        format!(
            "{} {} qd{} q{} {} poll={} mb={}{}{}{}",
            self.rw,
            format_size(self.bs),
            self.qd,
            self.queues,
            self.engine,
            self.poll,
            self.max_batch,
            if self.irq { " irq" } else { "" },
            hog.unwrap_or_default(),
            build.unwrap_or_default(),
        )
    }
}

/// The comma lists of every dimension (an empty list keeps [`Point::base`]'s value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MatrixSpec {
    pub rw: Vec<Rw>,
    pub bs: Vec<u64>,
    pub qd: Vec<u32>,
    pub queues: Vec<u32>,
    pub engine: Vec<Engine>,
    pub poll: Vec<PollSetting>,
    pub max_batch: Vec<u32>,
    pub irq: Vec<bool>,
    pub hog: Vec<u32>,
    /// Osprey binaries, numbered from 1 (`--osprey A,B`).
    pub build: Vec<u8>,
}

/// A point set aside and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub point: Point,
    pub reason: String,
}

/// The expanded matrix: points to run in run order, and those the guest cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    pub points: Vec<Point>,
    pub skipped: Vec<Skipped>,
}

/// Every point of `pts` once per distinct value of `vals` (varying fastest); none: `pts` as is.
fn cross<T: Copy + PartialEq>(pts: Vec<Point>, vals: &[T], set: fn(&mut Point, T)) -> Vec<Point> {
    if vals.is_empty() {
        return pts;
    }
    let mut distinct: Vec<T> = Vec::new();
    for v in vals {
        if !distinct.contains(v) {
            distinct.push(*v);
        }
    }
    pts.into_iter()
        .flat_map(|p| {
            distinct.iter().map(move |&v| {
                let mut q = p;
                set(&mut q, v);
                q
            })
        })
        .collect()
}

impl MatrixSpec {
    /// Every combination, in the order given (outermost rw, innermost hog), duplicates removed;
    /// points over the test guest's 8 MiB pool go to `skipped`.
    pub fn expand(&self) -> Matrix {
        let mut p = vec![Point::base()];
        p = cross(p, &self.rw, |p, v| p.rw = v);
        p = cross(p, &self.bs, |p, v| p.bs = v);
        p = cross(p, &self.qd, |p, v| p.qd = v);
        p = cross(p, &self.queues, |p, v| p.queues = v);
        p = cross(p, &self.engine, |p, v| p.engine = v);
        p = cross(p, &self.poll, |p, v| p.poll = v);
        p = cross(p, &self.max_batch, |p, v| p.max_batch = v);
        p = cross(p, &self.irq, |p, v| p.irq = v);
        p = cross(p, &self.hog, |p, v| p.hog = v);
        p = cross(p, &self.build, |p, v| p.build = v);
        let (points, over): (Vec<Point>, Vec<Point>) = p
            .into_iter()
            .partition(|p| p.guest_pool_bytes() <= GUEST_POOL_BYTES);
        let skipped = over
            .into_iter()
            .map(|point| Skipped {
                point,
                reason: format!(
                    "bs·qd·queues = {} > the guest's {} pool",
                    format_size(point.guest_pool_bytes()),
                    format_bytes(GUEST_POOL_BYTES)
                ),
            })
            .collect();
        Matrix { points, skipped }
    }
}

/// A dimension of the matrix, for labelling plot series (in label order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dim {
    Engine,
    Poll,
    Rw,
    Bs,
    Qd,
    Queues,
    MaxBatch,
    Irq,
    Hog,
    Build,
}

impl Dim {
    fn value(self, p: &Point) -> String {
        match self {
            Dim::Engine => p.engine.to_string(),
            Dim::Poll => format!("poll={}", p.poll),
            Dim::Rw => p.rw.to_string(),
            Dim::Bs => format_size(p.bs),
            Dim::Qd => format!("qd{}", p.qd),
            Dim::Queues => format!("q{}", p.queues),
            Dim::MaxBatch => format!("mb={}", p.max_batch),
            Dim::Irq => format!("irq={}", u8::from(p.irq)),
            Dim::Hog => format!("hog={}", p.hog),
            Dim::Build => format!("build={}", p.build),
        }
    }
}

/// The dimensions in which `points` differ, in label order.
pub fn varying(points: &[Point]) -> Vec<Dim> {
    let differs = |d: &Dim| points.iter().any(|p| d.value(p) != d.value(&points[0]));
    Dim::value_variants()
        .iter()
        .copied()
        .filter(differs)
        .collect()
}

/// A series label: `p`'s `lead` dimensions, then those of `varying` not in `exclude`; or `all`.
pub fn series_label(varying: &[Dim], p: &Point, lead: &[Dim], exclude: &[Dim]) -> String {
    let rest = varying
        .iter()
        .filter(|d| !lead.contains(d) && !exclude.contains(d));
    let parts: Vec<String> = lead.iter().chain(rest).map(|d| d.value(p)).collect();
    if parts.is_empty() {
        "all".to_string()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_poll_and_bs() {
        for s in ["off", "classic", "classic:200us", "weighted:3", "adaptive"] {
            let p: PollSetting = s.parse().expect("parse");
            assert_eq!(p.to_string(), s);
        }
        assert_eq!("classic:0".parse(), Ok(PollSetting::Off));
        assert_eq!("weighted".parse(), Ok(PollSetting::Weighted(3)));
        for bad in ["weighted:17", "adaptive:3", "fast", "classic:2s"] {
            assert!(bad.parse::<PollSetting>().is_err(), "{bad}");
        }
        assert_eq!(parse_bs("128k"), Ok(131072));
        assert!(parse_bs("1000").is_err());
        assert!(parse_bs("2m").is_err());
        assert_eq!(Engine::from_str("libaio", true), Ok(Engine::LinuxAio));
        assert_eq!(Engine::IoUring.to_string(), "IoUring");
        assert_eq!(Rw::RandWrite.to_string(), "randwrite");
    }

    #[test]
    fn poll_settings_map_to_config() {
        let off = PollSetting::Off.iothread_fields();
        assert_eq!(off["poll_max_ns"], 0);
        assert!(off.get("poll_policy").is_none());
        let w = PollSetting::Weighted(2).iothread_fields();
        assert_eq!(
            (&w["poll_policy"], &w["poll_weight"]),
            (&"Weighted".into(), &2.into())
        );
        let c = PollSetting::Classic(Some(200_000)).iothread_fields();
        assert_eq!(c["poll_max_ns"], 200_000);
    }

    #[test]
    fn expands_the_cross_product_in_order_without_duplicates() {
        let m = MatrixSpec {
            rw: vec![Rw::RandRead, Rw::RandWrite],
            qd: vec![1, 8, 8, 32],
            poll: vec![PollSetting::Off, PollSetting::Classic(None)],
            ..MatrixSpec::default()
        }
        .expand();
        assert_eq!(m.points.len(), 2 * 3 * 2);
        assert!(m.skipped.is_empty());
        assert_eq!((m.points[0].rw, m.points[0].qd), (Rw::RandRead, 1));
        assert_eq!(m.points[1].poll, PollSetting::Classic(None));
        assert_eq!(m.points[2].qd, 8);
        assert_eq!(m.points[6].rw, Rw::RandWrite);
    }

    #[test]
    fn skips_points_over_the_guest_pool() {
        let m = MatrixSpec {
            bs: vec![4096, 131072, 1 << 20],
            qd: vec![1, 32, 128],
            queues: vec![1, 4],
            ..MatrixSpec::default()
        }
        .expand();
        assert!(m
            .points
            .iter()
            .all(|p| p.guest_pool_bytes() <= GUEST_POOL_BYTES));
        for k in &m.skipped {
            assert!(k.point.guest_pool_bytes() > GUEST_POOL_BYTES, "{k:?}");
            assert!(k.reason.contains("8 MiB"));
        }
        // bs 4k: all 6 fit; 128k: qd1 q1/q4 and qd32 q1 (3); 1m: qd1 q1/q4 (2).
        assert_eq!((m.points.len(), m.skipped.len()), (6 + 3 + 2, 18 - 11));
        // Exactly 8 MiB fits: 128k·64·1.
        let mut edge = MatrixSpec {
            bs: vec![131072],
            qd: vec![64],
            ..MatrixSpec::default()
        };
        assert_eq!(edge.expand().points.len(), 1);
        edge.qd = vec![65];
        assert_eq!(edge.expand().skipped.len(), 1);
    }

    #[test]
    fn labels_name_only_varying_dimensions() {
        let s = MatrixSpec {
            engine: vec![Engine::IoUring, Engine::Sync],
            qd: vec![1, 8],
            ..MatrixSpec::default()
        };
        let points = s.expand().points;
        let v = varying(&points);
        assert_eq!(v, vec![Dim::Engine, Dim::Qd]);
        let p = points[0];
        assert_eq!(series_label(&v, &p, &[], &[Dim::Qd]), "IoUring");
        assert_eq!(
            series_label(&v, &p, &[Dim::Poll], &[Dim::Qd]),
            "poll=off IoUring"
        );
        assert_eq!(series_label(&v, &p, &[], &[Dim::Qd, Dim::Engine]), "all");
        assert_eq!(p.label(), "randread 4k qd1 q1 IoUring poll=off mb=32");
    }
}
