//! Firecracker's metric groups for the metrics file (`metrics_path`, usually a FIFO), which
//! tools written for Firecracker decode line by line: Kata's Go runtime reads each line into its
//! `FirecrackerMetrics` struct (`api_server`, `block`, `vcpu`, `vmm`, `seccomp`, `signals`,
//! `latencies_us`, …, every field an unsigned integer). Each line carries these groups beside
//! Osprey's own keys (`vm`, `drives`, `iothreads`, …, unchanged), so nothing Osprey reports is
//! renamed and nothing of Firecracker's is missing. As Firecracker does, the `net` group is
//! every network interface's summed, and each interface has its own `net_<iface_id>` group with
//! the same fields ([`FROM_NICS`]). As in Firecracker, a counter in these groups
//! is the change since the previous line; fields Osprey has no counterpart for are 0
//! (docs/orchestration.md lists which are counted).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

/// The vCPUs' exits, counted by the vCPU threads for the `vcpu` group.
#[derive(Debug, Default)]
pub struct VcpuExitCounts {
    /// Port reads (`exit_io_in`).
    pub io_in: AtomicU64,
    /// Port writes (`exit_io_out`).
    pub io_out: AtomicU64,
    /// MMIO reads that reached Osprey (`exit_mmio_read`).
    pub mmio_read: AtomicU64,
    /// MMIO writes that reached Osprey (`exit_mmio_write`).
    pub mmio_write: AtomicU64,
    /// Exits that ended a vCPU with an error (`failures`).
    pub failures: AtomicU64,
}

/// The process's vCPU exit counts (one VM per process).
pub static VCPU_EXITS: VcpuExitCounts = VcpuExitCounts {
    io_in: AtomicU64::new(0),
    io_out: AtomicU64::new(0),
    mmio_read: AtomicU64::new(0),
    mmio_write: AtomicU64::new(0),
    failures: AtomicU64::new(0),
};

/// Every group and field Firecracker v1.16.1 writes that Kata's Go runtime decodes.
pub const GROUPS: &[(&str, &[&str])] = &[
    (
        "api_server",
        &[
            "process_startup_time_us",
            "process_startup_time_cpu_us",
            "sync_response_fails",
            "sync_vmm_send_timeout_count",
        ],
    ),
    (
        "block",
        &[
            "activate_fails",
            "cfg_fails",
            "no_avail_buffer",
            "event_fails",
            "execute_fails",
            "invalid_reqs_count",
            "flush_count",
            "queue_event_count",
            "rate_limiter_event_count",
            "update_count",
            "update_fails",
            "read_bytes",
            "write_bytes",
            "read_count",
            "write_count",
            "rate_limiter_throttled_events",
        ],
    ),
    (
        "get_api_requests",
        &[
            "instance_info_count",
            "instance_info_fails",
            "machine_cfg_count",
            "machine_cfg_fails",
        ],
    ),
    (
        "i8042",
        &[
            "error_count",
            "missed_read_count",
            "missed_write_count",
            "read_count",
            "reset_count",
            "write_count",
        ],
    ),
    (
        "latencies_us",
        &[
            "full_create_snapshot",
            "diff_create_snapshot",
            "load_snapshot",
            "pause_vm",
            "resume_vm",
            "vmm_full_create_snapshot",
            "vmm_diff_create_snapshot",
            "vmm_load_snapshot",
            "vmm_pause_vm",
            "vmm_resume_vm",
        ],
    ),
    (
        "logger",
        &[
            "missed_metrics_count",
            "metrics_fails",
            "missed_log_count",
            "log_fails",
        ],
    ),
    (
        "mmds",
        &[
            "rx_accepted",
            "rx_accepted_err",
            "rx_accepted_unusual",
            "rx_bad_eth",
            "rx_count",
            "tx_bytes",
            "tx_count",
            "tx_errors",
            "tx_frames",
            "connections_created",
            "connections_destroyed",
        ],
    ),
    (
        "net",
        &[
            "activate_fails",
            "cfg_fails",
            "mac_address_updates",
            "no_rx_avail_buffer",
            "no_tx_avail_buffer",
            "event_fails",
            "rx_queue_event_count",
            "rx_event_rate_limiter_count",
            "rx_partial_writes",
            "rx_rate_limiter_throttled",
            "rx_tap_event_count",
            "rx_bytes_count",
            "rx_packets_count",
            "rx_fails",
            "rx_count",
            "tap_read_fails",
            "tap_write_fails",
            "tx_bytes_count",
            "tx_malformed_frames",
            "tx_fails",
            "tx_count",
            "tx_packets_count",
            "tx_partial_reads",
            "tx_queue_event_count",
            "tx_rate_limiter_event_count",
            "tx_rate_limiter_throttled",
            "tx_spoofed_mac_count",
        ],
    ),
    (
        "patch_api_requests",
        &[
            "drive_count",
            "drive_fails",
            "network_count",
            "network_fails",
            "machine_cfg_count",
            "machine_cfg_fails",
        ],
    ),
    (
        "put_api_requests",
        &[
            "actions_count",
            "actions_fails",
            "boot_source_count",
            "boot_source_fails",
            "drive_count",
            "drive_fails",
            "logger_count",
            "logger_fails",
            "machine_cfg_count",
            "machine_cfg_fails",
            "metrics_count",
            "metrics_fails",
            "network_count",
            "network_fails",
        ],
    ),
    (
        "rtc",
        &["error_count", "missed_read_count", "missed_write_count"],
    ),
    ("seccomp", &["num_faults"]),
    (
        "vcpu",
        &[
            "exit_io_in",
            "exit_io_out",
            "exit_mmio_read",
            "exit_mmio_write",
            "failures",
            "filter_cpuid",
        ],
    ),
    ("vmm", &["device_events", "panic_count"]),
    (
        "uart",
        &[
            "error_count",
            "flush_count",
            "missed_read_count",
            "missed_write_count",
            "read_count",
            "write_count",
        ],
    ),
    ("signals", &["sigbus", "sigsegv"]),
    (
        "vsock",
        &[
            "activate_fails",
            "cfg_fails",
            "rx_queue_event_fails",
            "tx_queue_event_fails",
            "ev_queue_event_fails",
            "muxer_event_fails",
            "conn_event_fails",
            "rx_queue_event_count",
            "tx_queue_event_count",
            "rx_bytes_count",
            "tx_bytes_count",
            "rx_packets_count",
            "tx_packets_count",
            "conns_added",
            "conns_killed",
            "conns_removed",
            "killq_resync",
            "tx_flush_fails",
            "tx_write_fails",
            "rx_read_fails",
        ],
    ),
];

/// Metrics lines the metrics file did not take whole (a FIFO nobody reads is full), dropped:
/// Firecracker's `logger.missed_metrics_count`.
pub static MISSED_METRICS_LINES: AtomicU64 = AtomicU64::new(0);

/// The Firecracker fields Osprey counts: `(group, field, the drives' fields summed)`; the
/// `vcpu` group's come from [`VCPU_EXITS`].
const FROM_DRIVES: &[(&str, &str, &[&str])] = &[
    ("block", "queue_event_count", &["kicks"]),
    ("block", "read_bytes", &["read_bytes"]),
    ("block", "write_bytes", &["write_bytes"]),
    ("block", "flush_count", &["flushes"]),
    ("block", "invalid_reqs_count", &["malformed", "unsupported"]),
    ("block", "execute_fails", &["io_errors"]),
    (
        "block",
        "rate_limiter_throttled_events",
        &["throttled_events"],
    ),
];

/// The `net` fields Osprey counts: `(field, the interfaces' fields summed)` (names as in
/// `devices::net::stats::NetStats`). Firecracker counts a frame in both `rx_count` and
/// `rx_packets_count` (and `tx_count`, `tx_packets_count`); `tx_fails` is its tap write errors.
const FROM_NICS: &[(&str, &[&str])] = &[
    ("no_rx_avail_buffer", &["rx_no_buffers"]),
    ("rx_bytes_count", &["rx_bytes"]),
    ("rx_packets_count", &["rx_frames"]),
    ("rx_count", &["rx_frames"]),
    ("rx_fails", &["rx_dropped"]),
    ("rx_rate_limiter_throttled", &["rx_throttled"]),
    ("tap_write_fails", &["tx_errors"]),
    ("tx_fails", &["tx_errors"]),
    ("tx_bytes_count", &["tx_bytes"]),
    ("tx_packets_count", &["tx_frames"]),
    ("tx_count", &["tx_frames"]),
    ("tx_malformed_frames", &["tx_malformed"]),
    ("tx_rate_limiter_throttled", &["tx_throttled"]),
];

/// The fields of Firecracker's `net` group (and of each `net_<iface_id>`).
fn net_fields() -> &'static [&'static str] {
    GROUPS
        .iter()
        .find(|(g, _)| *g == "net")
        .map(|(_, f)| *f)
        .unwrap_or(&[])
}

/// The sum of `sources` over `objects` (a field missing or not a number: 0).
fn summed<'a>(objects: impl IntoIterator<Item = &'a Value>, sources: &[&str]) -> u64 {
    objects
        .into_iter()
        .flat_map(|o| sources.iter().map(move |s| o[*s].as_u64().unwrap_or(0)))
        .fold(0u64, u64::saturating_add)
}

/// The Firecracker groups of successive metrics lines: remembers the last totals, so each line
/// carries the change since the one before (Firecracker's counters are written that way).
#[derive(Debug, Default)]
pub struct FirecrackerGroups {
    last: BTreeMap<(&'static str, &'static str), u64>,
    /// The same for each interface's `net_<iface_id>` group.
    last_nics: BTreeMap<(String, &'static str), u64>,
}

impl FirecrackerGroups {
    /// The groups for the next line, from Osprey's metrics (`GET /metrics`'s JSON) and the vCPU
    /// exit counts: an object per group, an unsigned integer per field.
    pub fn next(&mut self, osprey: &Value, exits: &VcpuExitCounts) -> Map<String, Value> {
        let totals = totals(osprey, exits);
        let mut line = Map::new();
        for (group, fields) in GROUPS {
            let mut object = Map::new();
            for field in *fields {
                let key = (*group, *field);
                let total = totals.get(&key).copied().unwrap_or(0);
                let last = self.last.insert(key, total).unwrap_or(0);
                // A drive swapped or reset may count from 0 again: never below 0.
                object.insert((*field).to_string(), total.saturating_sub(last).into());
            }
            line.insert((*group).to_string(), Value::Object(object));
        }
        for nic in list(osprey, "network_interfaces") {
            let Some(id) = nic["iface_id"].as_str() else {
                continue;
            };
            let mut object = Map::new();
            for field in net_fields() {
                let total = FROM_NICS
                    .iter()
                    .find(|(f, _)| f == field)
                    .map_or(0, |(_, sources)| summed([nic], sources));
                let last = self
                    .last_nics
                    .insert((id.to_string(), *field), total)
                    .unwrap_or(0);
                object.insert((*field).to_string(), total.saturating_sub(last).into());
            }
            line.insert(format!("net_{id}"), Value::Object(object));
        }
        line
    }
}

/// The objects of `osprey`'s list `key` (none when absent).
fn list<'a>(osprey: &'a Value, key: &str) -> &'a [Value] {
    osprey[key].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// The running totals of the fields Osprey counts.
fn totals(osprey: &Value, exits: &VcpuExitCounts) -> BTreeMap<(&'static str, &'static str), u64> {
    let mut totals = BTreeMap::new();
    let drives = list(osprey, "drives");
    for (group, field, sources) in FROM_DRIVES {
        totals.insert((*group, *field), summed(drives, sources));
    }
    let nics = list(osprey, "network_interfaces");
    for (field, sources) in FROM_NICS {
        totals.insert(("net", *field), summed(nics, sources));
    }
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    for (field, value) in [
        ("exit_io_in", load(&exits.io_in)),
        ("exit_io_out", load(&exits.io_out)),
        ("exit_mmio_read", load(&exits.mmio_read)),
        ("exit_mmio_write", load(&exits.mmio_write)),
        ("failures", load(&exits.failures)),
    ] {
        totals.insert(("vcpu", field), value);
    }
    totals.insert(
        ("logger", "missed_log_count"),
        crate::logger::missed_lines(),
    );
    totals.insert(
        ("logger", "missed_metrics_count"),
        load(&MISSED_METRICS_LINES),
    );
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Kata's Go runtime (`src/runtime/virtcontainers/fc_metrics.go`) decodes each line with
    /// `json.Unmarshal` into structs of `uint64` fields: a group that is not an object, or a
    /// field that is not an unsigned integer, fails the whole line.
    fn decodes_as_kata_does(line: &Map<String, Value>) {
        for (group, fields) in GROUPS {
            let object = line[*group].as_object().expect("an object per group");
            for field in *fields {
                assert!(
                    object[*field].is_u64(),
                    "{group}.{field}: {}",
                    object[*field]
                );
            }
        }
    }

    #[test]
    fn net_is_every_interface_summed_and_each_has_its_own_group() {
        let exits = VcpuExitCounts::default();
        let nics = |a: u64, b: u64| {
            json!({"network_interfaces": [
                {"iface_id": "eth0", "rx_frames": a, "rx_bytes": a * 98, "tx_frames": a,
                 "tx_throttled": 2, "tx_errors": 1},
                {"iface_id": "eth1", "rx_frames": b, "rx_dropped": 3},
            ]})
        };
        let mut groups = FirecrackerGroups::default();
        let first = groups.next(&nics(1000, 5), &exits);
        decodes_as_kata_does(&first);
        for (group, rx) in [("net", 1005), ("net_eth0", 1000), ("net_eth1", 5)] {
            let g = first[group].as_object().expect(group);
            assert_eq!(g.len(), net_fields().len(), "{group}: every net field");
            assert_eq!(g["rx_packets_count"], rx, "{group}");
            assert_eq!(g["rx_count"], rx, "{group}");
        }
        assert_eq!(first["net"]["rx_bytes_count"], 98_000);
        assert_eq!(first["net"]["rx_fails"], 3);
        assert_eq!(first["net_eth0"]["tx_rate_limiter_throttled"], 2);
        assert_eq!(first["net_eth0"]["tap_write_fails"], 1);
        assert_eq!(first["net_eth1"]["tx_packets_count"], 0);
        let second = groups.next(&nics(1500, 5), &exits);
        assert_eq!(second["net"]["rx_packets_count"], 500);
        assert_eq!(second["net_eth0"]["rx_packets_count"], 500);
        assert_eq!(second["net_eth1"]["rx_packets_count"], 0);
        assert_eq!(second["net_eth0"]["tx_rate_limiter_throttled"], 0);
    }

    #[test]
    fn each_line_has_every_group_with_the_change_since_the_last() {
        let exits = VcpuExitCounts::default();
        exits.mmio_write.store(10, Ordering::Relaxed);
        let drives = |kicks: u64, bytes: u64| {
            json!({"drives": [
                {"drive_id": "a", "kicks": kicks, "read_bytes": bytes, "malformed": 1,
                 "unsupported": 2, "engine": "IoUring"},
                {"drive_id": "b", "kicks": 1, "read_bytes": 0},
            ]})
        };
        let mut groups = FirecrackerGroups::default();
        let first = groups.next(&drives(5, 4096), &exits);
        decodes_as_kata_does(&first);
        assert_eq!(first["block"]["queue_event_count"], 6);
        assert_eq!(first["block"]["read_bytes"], 4096);
        assert_eq!(first["block"]["invalid_reqs_count"], 3);
        assert_eq!(first["vcpu"]["exit_mmio_write"], 10);
        assert_eq!(first["seccomp"]["num_faults"], 0);
        exits.mmio_write.store(12, Ordering::Relaxed);
        let second = groups.next(&drives(9, 4096), &exits);
        decodes_as_kata_does(&second);
        assert_eq!(second["block"]["queue_event_count"], 4);
        assert_eq!(second["block"]["read_bytes"], 0);
        assert_eq!(second["vcpu"]["exit_mmio_write"], 2);
        let after_reset = groups.next(&drives(0, 0), &exits);
        assert_eq!(
            after_reset["block"]["queue_event_count"], 0,
            "never negative"
        );
    }
}
