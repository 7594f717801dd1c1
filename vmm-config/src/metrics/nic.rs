//! A network interface's counters in `GET /metrics` (the `network_interfaces` list): its
//! `iface_id` and the fields of `devices::net::stats::NetStats`, as declared there. The metrics
//! file's Firecracker `net` groups are mapped from the same JSON (`super::firecracker`).

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::{RefOr, Schema};
use utoipa::ToSchema;

use super::report::{fields_schema, json_of, MetricFields};
use devices::net::stats::NetStats;

fn nic_fields() -> RefOr<Schema> {
    fields_schema::<NetStats>()
}

/// A network interface's counters (its queue pair's).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = NetworkInterfaceStats)]
pub struct NicCounters {
    /// The interface's id.
    pub iface_id: String,
    /// Its counters.
    #[serde(flatten)]
    #[schema(schema_with = nic_fields)]
    pub counters: MetricFields<NetStats>,
}

impl NicCounters {
    /// The counters of interface `id`.
    pub fn new(id: &str, stats: &NetStats) -> Self {
        Self {
            iface_id: id.to_string(),
            counters: MetricFields::of(stats),
        }
    }
}

/// An interface's object of the `network_interfaces` list ([`NicCounters`]).
pub fn nic_json(id: &str, stats: &NetStats) -> Value {
    json_of(&NicCounters::new(id, stats))
}
