//! Osprey's metric declarations. A stats struct is written once inside [`metric_set!`]: each
//! field carries its doc comment (the help text), a `#[metric(...)]` attribute (kind, the unit
//! the field holds, an optional Prometheus name) and its storage (an `AtomicU64`, a plain
//! number, a [`Histogram`], ...). The macro keeps the struct as written and implements
//! [`MetricSet`] for it: the static list of [`Metric`] descriptors and a reading of every field
//! in the same order. The JSON stats, the Prometheus exposition and the docs table are all
//! derived from those descriptors (in `vmm::metrics`), so adding a counter is adding one field.
//!
//! ```
//! use std::sync::atomic::AtomicU64;
//! osprey_metrics::metric_set! {
//!     /// Counters of something.
//!     #[derive(Debug, Default)]
//!     pub struct Things {
//!         /// Requests completed.
//!         #[metric(counter)]
//!         pub requests: AtomicU64,
//!         /// Time spent working.
//!         #[metric(counter, ns)]
//!         pub work_ns: AtomicU64,
//!     }
//! }
//! use osprey_metrics::MetricSet;
//! assert_eq!(Things::METRICS[1].prometheus_stem(), "work");
//! assert_eq!(Things::METRICS[1].help(), "Time spent working.");
//! ```
//!
//! Attribute arguments, after the kind (`counter`, `gauge`, `flag`, `histogram`, `text`):
//! a unit (`ns`, `ms`, `bytes`, `permille`; none for plain counts), `max` (summing queues keeps
//! the largest value), `name = "stem"` (the Prometheus name without scope, unit or `_total`),
//! and for a histogram `bounds = CONST`, `bounds_key = "json key"`, `sum_key = "json key"`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

mod macros;

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (Prometheus `counter`, named `…_total`).
    Counter,
    /// Goes up and down (Prometheus `gauge`).
    Gauge,
    /// 0 or 1: a JSON boolean, a Prometheus gauge.
    Flag,
    /// Counts per bucket with a sum (Prometheus `histogram`).
    Histogram,
    /// A string: JSON only.
    Text,
}

/// The unit a field holds (the JSON keeps it); the Prometheus view converts to base units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A plain number of things.
    Count,
    /// Nanoseconds (Prometheus: seconds).
    Ns,
    /// Milliseconds (Prometheus: seconds).
    Ms,
    /// Bytes.
    Bytes,
    /// Per mille (Prometheus: a ratio, 0-1).
    PerMille,
}

impl Unit {
    /// The Prometheus base unit's suffix (`seconds`, `bytes`, `ratio`), if any.
    pub fn base(self) -> Option<&'static str> {
        match self {
            Unit::Count => None,
            Unit::Ns | Unit::Ms => Some("seconds"),
            Unit::Bytes => Some("bytes"),
            Unit::PerMille => Some("ratio"),
        }
    }

    /// How many of the field's unit make one base unit (a divisor: `n / 1e9` is the closest
    /// float to n ns in seconds, `n * 1e-9` may not be).
    pub fn per_base(self) -> f64 {
        match self {
            Unit::Count | Unit::Bytes => 1.0,
            Unit::Ns => 1e9,
            Unit::Ms | Unit::PerMille => 1e3,
        }
    }

    /// The suffix a field name holding this unit ends with (stripped for the Prometheus name).
    pub fn field_suffix(self) -> Option<&'static str> {
        match self {
            Unit::Count => None,
            Unit::Ns => Some("_ns"),
            Unit::Ms => Some("_ms"),
            Unit::Bytes => Some("_bytes"),
            Unit::PerMille => Some("_permille"),
        }
    }

    /// How the docs name the JSON unit.
    pub fn json_name(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Ns => "ns",
            Unit::Ms => "ms",
            Unit::Bytes => "bytes",
            Unit::PerMille => "‰",
        }
    }
}

/// How the values of several queues (or other parts) combine into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// Added up.
    Sum,
    /// The largest.
    Max,
}

/// One metric's declaration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// The field name: the JSON key.
    pub field: &'static str,
    /// Counter, gauge, ...
    pub kind: Kind,
    /// What the field holds.
    pub unit: Unit,
    /// How parts combine.
    pub agg: Agg,
    /// The Prometheus name stem, when not the field name without its unit suffix.
    pub name: Option<&'static str>,
    /// The doc comment (help text).
    pub doc: &'static str,
    /// A histogram's bucket upper bounds (the last bucket counts everything larger).
    pub bounds: &'static [u64],
    /// A histogram's JSON key for `bounds`.
    pub bounds_key: &'static str,
    /// A histogram's JSON key for its sum.
    pub sum_key: &'static str,
    /// Whether the JSON value may be `null` (a field stored as an `Option`; [`Read::NULLABLE`]).
    pub nullable: bool,
}

impl Metric {
    /// A declaration with no unit, summed over parts.
    pub const fn new(field: &'static str, kind: Kind, doc: &'static str) -> Self {
        Self {
            field,
            kind,
            unit: Unit::Count,
            agg: Agg::Sum,
            name: None,
            doc,
            bounds: &[],
            bounds_key: "",
            sum_key: "",
            nullable: false,
        }
    }

    /// With the unit the field holds.
    pub const fn unit(mut self, unit: Unit) -> Self {
        self.unit = unit;
        self
    }

    /// With how parts combine.
    pub const fn agg(mut self, agg: Agg) -> Self {
        self.agg = agg;
        self
    }

    /// With a Prometheus name stem.
    pub const fn name(mut self, name: &'static str) -> Self {
        self.name = Some(name);
        self
    }

    /// With histogram bounds.
    pub const fn bounds(mut self, bounds: &'static [u64]) -> Self {
        self.bounds = bounds;
        self
    }

    /// With the JSON key of a histogram's bounds.
    pub const fn bounds_key(mut self, key: &'static str) -> Self {
        self.bounds_key = key;
        self
    }

    /// Whether the JSON value may be `null`.
    pub const fn nullable(mut self, nullable: bool) -> Self {
        self.nullable = nullable;
        self
    }

    /// With the JSON key of a histogram's sum.
    pub const fn sum_key(mut self, key: &'static str) -> Self {
        self.sum_key = key;
        self
    }

    /// The help text: the doc comment on one line.
    pub fn help(&self) -> String {
        self.doc.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The Prometheus name stem: `name`, else the field without its unit suffix (`poll_ns` →
    /// `poll`); the unit (`_seconds`) and `_total` are appended by the encoder.
    pub fn prometheus_stem(&self) -> &'static str {
        if let Some(name) = self.name {
            return name;
        }
        match self.unit.field_suffix() {
            Some(suffix) => self.field.strip_suffix(suffix).unwrap_or(self.field),
            None => self.field,
        }
    }

    /// The full Prometheus family name under `prefix` (e.g. `osprey_iothread`).
    pub fn prometheus_name(&self, prefix: &str) -> String {
        let mut name = format!("{prefix}_{}", self.prometheus_stem());
        if let Some(unit) = self.unit.base() {
            name.push('_');
            name.push_str(unit);
        }
        if self.kind == Kind::Counter {
            name.push_str("_total");
        }
        name
    }

    /// The Prometheus type, or `None` for JSON-only fields.
    pub fn prometheus_type(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Counter => Some("counter"),
            Kind::Gauge | Kind::Flag => Some("gauge"),
            Kind::Histogram => Some("histogram"),
            Kind::Text => None,
        }
    }
}

/// A field's value at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// A number.
    U64(u64),
    /// A number that may be absent (JSON `null`; no Prometheus sample).
    Maybe(Option<u64>),
    /// A yes/no.
    Bool(bool),
    /// Histogram counts per bucket (one more than the bounds) and the sum of observations.
    Hist {
        /// Per bucket, not cumulative.
        counts: Vec<u64>,
        /// Sum of the observed values.
        sum: u64,
    },
    /// A string.
    Text(String),
}

impl Reading {
    /// The number, if any (a flag as 0/1).
    pub fn number(&self) -> Option<u64> {
        match self {
            Reading::U64(v) => Some(*v),
            Reading::Maybe(v) => *v,
            Reading::Bool(b) => Some(u64::from(*b)),
            Reading::Hist { .. } | Reading::Text(_) => None,
        }
    }
}

/// What a metric field's storage reads as.
pub trait Read {
    /// Whether the value may be absent (JSON `null`): [`metric_set!`] marks the field's
    /// [`Metric::nullable`] from it, and the API's schema says so.
    const NULLABLE: bool = false;

    /// The value now (relaxed loads: counters are read while written).
    fn read(&self) -> Reading;
}

impl Read for AtomicU64 {
    fn read(&self) -> Reading {
        Reading::U64(self.load(Ordering::Relaxed))
    }
}

impl Read for u64 {
    fn read(&self) -> Reading {
        Reading::U64(*self)
    }
}

impl Read for u32 {
    fn read(&self) -> Reading {
        Reading::U64(u64::from(*self))
    }
}

impl Read for Option<u64> {
    const NULLABLE: bool = true;

    fn read(&self) -> Reading {
        Reading::Maybe(*self)
    }
}

impl Read for bool {
    fn read(&self) -> Reading {
        Reading::Bool(*self)
    }
}

impl Read for String {
    fn read(&self) -> Reading {
        Reading::Text(self.clone())
    }
}

impl Read for Mutex<String> {
    fn read(&self) -> Reading {
        Reading::Text(self.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// A field's storage as a plain value (for the `snapshot` struct [`metric_set!`] can declare).
pub trait Snap {
    /// The plain value.
    type Value: std::fmt::Debug + Clone + Default + PartialEq + Eq;
    /// The value now (relaxed loads).
    fn snap(&self) -> Self::Value;
}

impl Snap for AtomicU64 {
    type Value = u64;
    fn snap(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl Snap for Mutex<String> {
    type Value = String;
    fn snap(&self) -> String {
        self.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A histogram of `N` buckets (the bounds' count plus one for larger values) and the sum of
/// what it counted, written by one thread (relaxed load and store), read by any.
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    /// Observations per bucket (not cumulative).
    pub counts: [AtomicU64; N],
    /// Sum of the observed values.
    pub sum: AtomicU64,
}

impl<const N: usize> Default for Histogram<N> {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

impl<const N: usize> Histogram<N> {
    /// Counts `value` in the first bucket whose bound is at least `value` (the last bucket when
    /// none is). Single writer: a relaxed load and store, no read-modify-write.
    pub fn observe(&self, bounds: &[u64], value: u64) {
        let i = bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(bounds.len())
            .min(N.saturating_sub(1));
        let add = |c: &AtomicU64, n: u64| {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed)
        };
        if let Some(c) = self.counts.get(i) {
            add(c, 1);
        }
        add(&self.sum, value);
    }

    /// The counts per bucket.
    pub fn counts(&self) -> [u64; N] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }
}

impl<const N: usize> Read for Histogram<N> {
    fn read(&self) -> Reading {
        Reading::Hist {
            counts: self.counts().to_vec(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

impl<const N: usize> Snap for Histogram<N>
where
    [u64; N]: Default,
{
    type Value = [u64; N];
    fn snap(&self) -> [u64; N] {
        self.counts()
    }
}

/// A struct declared with [`metric_set!`]: its metrics and their readings.
pub trait MetricSet {
    /// One descriptor per field, in field order.
    const METRICS: &'static [Metric];

    /// One reading per field, in the order of [`MetricSet::METRICS`].
    fn readings(&self) -> Vec<Reading>;

    /// `(field, reading)` pairs.
    fn read_all(&self) -> Vec<(&'static Metric, Reading)> {
        Self::METRICS.iter().zip(self.readings()).collect()
    }
}

/// Combines the readings of several parts (a drive's queues) field by field: numbers by the
/// metric's [`Agg`], flags by any, histograms bucket by bucket, text from the first part.
pub fn combine(metrics: &[Metric], parts: &[Vec<Reading>]) -> Vec<Reading> {
    metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut values = parts.iter().filter_map(|p| p.get(i));
            let Some(first) = values.next() else {
                return match m.kind {
                    Kind::Flag => Reading::Bool(false),
                    Kind::Text => Reading::Text(String::new()),
                    Kind::Histogram => Reading::Hist {
                        counts: vec![0; m.bounds.len() + 1],
                        sum: 0,
                    },
                    Kind::Counter | Kind::Gauge => Reading::U64(0),
                };
            };
            values.fold(first.clone(), |acc, v| merge(m.agg, acc, v))
        })
        .collect()
}

fn merge(agg: Agg, acc: Reading, v: &Reading) -> Reading {
    let num = |a: u64, b: u64| match agg {
        Agg::Sum => a.wrapping_add(b),
        Agg::Max => a.max(b),
    };
    match (acc, v) {
        (Reading::U64(a), Reading::U64(b)) => Reading::U64(num(a, *b)),
        (Reading::Maybe(a), Reading::Maybe(b)) => Reading::Maybe(match (a, b) {
            (Some(a), Some(b)) => Some(num(a, *b)),
            (a, b) => a.or(*b),
        }),
        (Reading::Bool(a), Reading::Bool(b)) => Reading::Bool(a || *b),
        (
            Reading::Hist { counts, sum },
            Reading::Hist {
                counts: c2,
                sum: s2,
            },
        ) => Reading::Hist {
            counts: counts
                .iter()
                .zip(c2.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.wrapping_add(*b))
                .collect(),
            sum: sum.wrapping_add(*s2),
        },
        (acc, _) => acc,
    }
}

#[cfg(test)]
mod tests;
