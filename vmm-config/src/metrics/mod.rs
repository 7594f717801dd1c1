//! Every metric Osprey reports, from its one declaration. The stats structs are declared with
//! `osprey_metrics::metric_set!` (the iothread's in `dataplane::stats`, a queue's in
//! `devices::block::stats`, a NIC's in `devices::net::stats` ([`nic`]), a limiter's in `dataplane::rate_limit`, and the few the VMM itself
//! knows below); this module turns them into the API's JSON ([`to_json`], [`combined_json`]; the typed objects
//! that hold them are [`report`]),
//! lists them by scope for the Prometheus view ([`SCOPES`], rendered by
//! `api::prometheus`) and writes the docs table ([`table`], docs/api/metrics.md).

use osprey_metrics::{Kind, Metric, MetricSet, Reading};
use serde_json::{Map, Value};

pub mod firecracker;
pub mod nic;
pub mod report;
pub mod table;
#[cfg(any(test, feature = "test-utils"))]
mod tests;

/// Test helpers for other crates' tests (the API's Prometheus view's).
#[cfg(any(test, feature = "test-utils"))]
pub mod tests_support {
    pub use super::tests::full_snapshot;
}

osprey_metrics::metric_set! {
    /// The VM's own metrics.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct VmMetrics {
        /// Time since the VM started.
        #[metric(gauge, ms, name = "uptime")]
        pub uptime_ms: u64,
        /// vCPUs of the VM.
        #[metric(gauge)]
        pub vcpus: u64,
        /// 1 while the VM runs, 0 while it is paused.
        #[metric(flag)]
        pub running: bool,
    }
}

osprey_metrics::metric_set! {
    /// An iothread's polling and batching parameters in force.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct IoThreadParams {
        /// Requests one queue may take per turn.
        #[metric(gauge)]
        pub max_batch: u64,
        /// Longest polling window (0: polling off).
        #[metric(gauge, ns)]
        pub poll_max_ns: u64,
        /// Factor the classic policy grows the window by (0: 2).
        #[metric(gauge)]
        pub poll_grow: u64,
        /// Divisor the classic policy shrinks the window by (0: reset).
        #[metric(gauge)]
        pub poll_shrink: u64,
        /// The polling policy: Classic, Weighted or Adaptive.
        #[metric(text)]
        pub poll_policy: String,
        /// Weight of the newest interval in the weighted policy (2^-W).
        #[metric(gauge)]
        pub poll_weight: u64,
    }
}

osprey_metrics::metric_set! {
    /// CPU time of the threads of one name.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ThreadCpu {
        /// CPU time of the process's threads of this name (schedstat).
        #[metric(counter, ns)]
        pub cpu_ns: u64,
        /// Who runs the thread: `vmm` (Osprey's own), `io_worker` (io_uring's workers for
        /// Osprey's I/O) or `kernel` (a kernel worker in the process, e.g. KVM's
        /// kvm-nx-lpage-recovery).
        #[metric(text)]
        pub kind: String,
    }
}

/// Metrics of one JSON object (or its `sub` object).
#[derive(Debug)]
pub struct Group {
    /// The key of the object holding these fields, or `None` for the object itself.
    pub sub: Option<&'static str>,
    /// The declarations.
    pub metrics: &'static [Metric],
}

/// One part of `GET /metrics`: where its objects are and how Prometheus names and labels them.
#[derive(Debug)]
pub struct Scope {
    /// The key at the top of the JSON.
    pub json: &'static str,
    /// `true` for a list of objects, `false` for one object.
    pub array: bool,
    /// The Prometheus family prefix.
    pub prefix: &'static str,
    /// Labels: (Prometheus label, JSON key of the object that holds the value).
    pub labels: &'static [(&'static str, &'static str)],
    /// The declarations, in order; a field a later group shares with an earlier one is skipped.
    pub groups: &'static [Group],
}

/// Every scope of `GET /metrics`, in the order the exposition lists them.
pub const SCOPES: &[Scope] = &[
    Scope {
        json: "vm",
        array: false,
        prefix: "osprey_vm",
        labels: &[],
        groups: &[Group {
            sub: None,
            metrics: VmMetrics::METRICS,
        }],
    },
    Scope {
        json: "iothreads",
        array: true,
        prefix: "osprey_iothread",
        labels: &[("iothread", "id")],
        groups: &[
            Group {
                sub: None,
                metrics: IoThreadParams::METRICS,
            },
            Group {
                sub: Some("stats"),
                metrics: dataplane::stats::IoThreadStats::METRICS,
            },
        ],
    },
    Scope {
        json: "drives",
        array: true,
        prefix: "osprey_drive",
        labels: &[("drive", "drive_id")],
        groups: &[
            Group {
                sub: None,
                metrics: devices::block::stats::QueueStats::METRICS,
            },
            Group {
                sub: None,
                metrics: dataplane::rate_limit::LimiterStats::METRICS,
            },
        ],
    },
    Scope {
        json: "network_interfaces",
        array: true,
        prefix: "osprey_nic",
        labels: &[("iface", "iface_id")],
        groups: &[Group {
            sub: None,
            metrics: devices::net::stats::NetStats::METRICS,
        }],
    },
    Scope {
        json: "rate_limit_groups",
        array: true,
        prefix: "osprey_rate_limit_group",
        labels: &[("group", "id")],
        groups: &[Group {
            sub: None,
            metrics: dataplane::rate_limit::LimiterStats::METRICS,
        }],
    },
    Scope {
        json: "threads",
        array: true,
        prefix: "osprey_thread",
        labels: &[("thread", "name"), ("kind", "kind")],
        groups: &[Group {
            sub: None,
            metrics: ThreadCpu::METRICS,
        }],
    },
];

impl Scope {
    /// The scope's metrics in order, each field once (the first group that declares it wins).
    pub fn metrics(&'static self) -> Vec<(&'static Group, &'static Metric)> {
        let mut out: Vec<(&'static Group, &'static Metric)> = Vec::new();
        for group in self.groups {
            for m in group.metrics {
                if out.iter().all(|(_, seen)| seen.field != m.field) {
                    out.push((group, m));
                }
            }
        }
        out
    }
}

/// A set's fields as JSON: numbers as integers in the unit the field holds (ns stay ns), flags
/// as booleans, a histogram as its counts with its bounds and sum under their own keys.
pub fn to_json<S: MetricSet>(set: &S) -> Map<String, Value> {
    readings_json(S::METRICS, set.readings())
}

/// Several parts' fields combined (a drive's queues: summed, or the largest where declared).
pub fn combined_json<S: MetricSet>(parts: &[&S]) -> Map<String, Value> {
    let readings: Vec<Vec<Reading>> = parts.iter().map(|p| p.readings()).collect();
    readings_json(S::METRICS, osprey_metrics::combine(S::METRICS, &readings))
}

fn readings_json(metrics: &[Metric], readings: Vec<Reading>) -> Map<String, Value> {
    let mut out = Map::new();
    for (m, r) in metrics.iter().zip(readings) {
        match r {
            Reading::Hist { counts, sum } => {
                out.insert(m.field.into(), counts.into());
                if !m.bounds_key.is_empty() {
                    out.insert(m.bounds_key.into(), m.bounds.into());
                }
                if !m.sum_key.is_empty() {
                    out.insert(m.sum_key.into(), sum.into());
                }
            }
            Reading::Text(s) => {
                out.insert(m.field.into(), s.into());
            }
            r if m.kind == Kind::Flag => {
                out.insert(m.field.into(), (r.number().unwrap_or(0) != 0).into());
            }
            r => {
                out.insert(m.field.into(), r.number().into());
            }
        }
    }
    out
}
