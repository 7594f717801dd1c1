//! The macro's output: descriptors in field order, readings, names, combining parts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::{combine, Agg, Histogram, Kind, MetricSet, Reading, Unit};

const BOUNDS: [u64; 2] = [1, 4];

crate::metric_set! {
    /// A test set.
    #[derive(Debug, Default)]
    pub struct Sample {
        /// Requests
        /// completed.
        #[metric(counter)]
        pub requests: AtomicU64,
        /// Time spent working.
        #[metric(counter, ns)]
        pub work_ns: AtomicU64,
        /// Share waiting.
        #[metric(gauge, permille, name = "cpu_wait")]
        pub wait_permille: AtomicU64,
        /// Most at once.
        #[metric(gauge, max)]
        pub most: AtomicU64,
        /// Reset waiting.
        #[metric(flag)]
        pub pending: AtomicU64,
        /// Sizes.
        #[metric(histogram, name = "size", bounds = &BOUNDS, bounds_key = "b", sum_key = "s")]
        pub sizes: Histogram<3>,
        /// The engine.
        #[metric(text)]
        pub engine: Mutex<String>,
    }
}

#[test]
fn descriptors_follow_the_fields() {
    let m = Sample::METRICS;
    assert_eq!(m.len(), 7);
    assert_eq!((m[0].field, m[0].kind), ("requests", Kind::Counter));
    assert_eq!(m[0].help(), "Requests completed.");
    assert_eq!(m[0].prometheus_name("x"), "x_requests_total");
    assert_eq!((m[1].unit, m[1].prometheus_stem()), (Unit::Ns, "work"));
    assert_eq!(m[1].prometheus_name("x"), "x_work_seconds_total");
    assert_eq!(m[2].prometheus_name("x"), "x_cpu_wait_ratio");
    assert_eq!(
        (m[3].agg, m[4].agg, m[4].kind),
        (Agg::Max, Agg::Max, Kind::Flag)
    );
    assert_eq!(
        (m[5].bounds, m[5].bounds_key, m[5].sum_key),
        (&BOUNDS[..], "b", "s")
    );
    assert_eq!(m[5].prometheus_type(), Some("histogram"));
    assert_eq!(m[6].prometheus_type(), None);
}

#[test]
fn readings_and_parts_combine() {
    let a = Sample::default();
    a.requests.store(3, Ordering::Relaxed);
    a.most.store(5, Ordering::Relaxed);
    a.sizes.observe(&BOUNDS, 1);
    a.sizes.observe(&BOUNDS, 9);
    *a.engine.lock().expect("lock") = "sync".into();
    let b = Sample::default();
    b.requests.store(4, Ordering::Relaxed);
    b.most.store(2, Ordering::Relaxed);
    b.pending.store(1, Ordering::Relaxed);
    b.sizes.observe(&BOUNDS, 3);
    let c = combine(Sample::METRICS, &[a.readings(), b.readings()]);
    assert_eq!(c[0], Reading::U64(7));
    assert_eq!(c[3], Reading::U64(5));
    assert_eq!(c[4].number(), Some(1));
    assert_eq!(
        c[5],
        Reading::Hist {
            counts: vec![1, 1, 1],
            sum: 13
        }
    );
    assert_eq!(c[6], Reading::Text("sync".into()));
    let none = combine(Sample::METRICS, &[]);
    assert_eq!(
        none[5],
        Reading::Hist {
            counts: vec![0, 0, 0],
            sum: 0
        }
    );
}

crate::metric_set! {
    snapshot PairSnapshot;
    /// A set with a snapshot struct.
    #[derive(Debug, Default)]
    pub struct Pair {
        /// Hits.
        #[metric(counter)]
        pub hits: AtomicU64,
        /// Sizes.
        #[metric(histogram, bounds = &BOUNDS)]
        pub sizes: Histogram<3>,
    }
}

#[test]
fn a_snapshot_struct_holds_plain_values() {
    let p = Pair::default();
    p.hits.store(2, Ordering::Relaxed);
    p.sizes.observe(&BOUNDS, 4);
    assert_eq!(
        p.snapshot(),
        PairSnapshot {
            hits: 2,
            sizes: [0, 1, 0]
        }
    );
    assert_eq!(Pair::METRICS.len(), 2);
}
