//! The declarations' JSON, a full snapshot built from the real stats structs, and the docs
//! table in step with the declarations.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::report::{drive_json, iothread_json, threads_json, vm_json};
use super::*;

/// A `GET /metrics` snapshot built by the same functions the control thread uses, from the real
/// stats structs: every declared field present (a drive of two queues, a rate-limit group, a
/// kernel worker among the threads).
pub fn full_snapshot() -> Value {
    let io = dataplane::stats::IoThreadStats::default();
    io.poll_hits.store(40, Ordering::Relaxed);
    io.poll_ns.store(1_500_000_000, Ordering::Relaxed);
    io.cpu_wait_permille.store(250, Ordering::Relaxed);
    let params = IoThreadParams {
        max_batch: 32,
        poll_max_ns: 32_768,
        poll_grow: 0,
        poll_shrink: 0,
        poll_policy: "Adaptive".into(),
        poll_weight: 3,
    };
    let queues = [
        devices::block::stats::QueueStats::default(),
        devices::block::stats::QueueStats::default(),
    ];
    queues[0].requests.store(10, Ordering::Relaxed);
    queues[1].requests.store(5, Ordering::Relaxed);
    queues[0].inflight_max.store(7, Ordering::Relaxed);
    queues[1].inflight_max.store(3, Ordering::Relaxed);
    queues[1].reset_pending.store(1, Ordering::Relaxed);
    for n in [1, 3, 300] {
        queues[0].record_batch(n);
    }
    queues[0].engine.set(dataplane::engine::EngineInfo::Null);
    let limiter = dataplane::rate_limit::LimiterStats {
        throttled_events: 1,
        throttled_ns: 2,
        ops_tokens: Some(60),
        bandwidth_tokens: None,
    };
    let group = dataplane::rate_limit::RateLimiter::new(Default::default());
    let threads = [
        ("vcpu0", 2_000_000, "vmm"),
        ("iou-wrk-12", 1_000, "io_worker"),
        ("kvm-nx-lpage-re", 5_000, "kernel"),
    ];
    let threads = threads.map(|(name, cpu_ns, kind)| {
        (
            name,
            ThreadCpu {
                cpu_ns,
                kind: kind.into(),
            },
        )
    });
    let nic = devices::net::stats::NetStats::default();
    nic.rx_frames.store(1000, Ordering::Relaxed);
    nic.tx_bytes.store(98_000, Ordering::Relaxed);
    let vm = VmMetrics {
        uptime_ms: 83_412,
        vcpus: 2,
        running: true,
    };
    json!({
        "vm": vm_json("Running", &vm),
        "iothreads": [iothread_json("io0", &params, &io)],
        "drives": [drive_json("disk0", &[&queues[0], &queues[1]], &limiter)],
        "network_interfaces": [super::nic::nic_json("eth0", &nic)],
        "rate_limit_groups": [crate::rate_limit::group_json("tenant", &Arc::new(group), &["disk0"])],
        "threads": threads_json(threads),
    })
}

#[test]
fn the_json_keeps_the_api_shape() {
    let m = full_snapshot();
    assert_eq!(
        m["vm"],
        json!({"state": "Running", "uptime_ms": 83412, "vcpus": 2, "running": true})
    );
    let t = &m["iothreads"][0];
    assert_eq!(
        (t["id"].as_str(), t["poll_policy"].as_str()),
        (Some("io0"), Some("Adaptive"))
    );
    assert_eq!(t["poll_max_ns"], 32768);
    assert_eq!(t["stats"]["poll_ns"], 1_500_000_000u64, "the JSON keeps ns");
    assert_eq!(t["stats"]["cpu_wait_permille"], 250);
    let d = &m["drives"][0];
    assert_eq!(d["requests"], 15);
    assert_eq!(d["queue_requests"], json!([10, 5]));
    assert_eq!(d["inflight_max"], 7, "the largest queue's");
    assert_eq!(d["reset_pending"], true);
    assert_eq!(d["engine"], "Null", "the engine in one line");
    assert_eq!(d["batch_bounds"], json!([1, 2, 4, 8, 16, 32, 64, 128, 256]));
    assert_eq!(d["batch_hist"], json!([1, 0, 1, 0, 0, 0, 0, 0, 0, 1]));
    assert_eq!(d["batch_sum"], 304);
    assert_eq!(
        d["throttled_events"], 0,
        "the queues' count, not the limiter's"
    );
    assert_eq!(
        (d["ops_tokens"].clone(), d["bandwidth_tokens"].clone()),
        (json!(60), Value::Null)
    );
    let n = &m["network_interfaces"][0];
    assert_eq!(
        (
            n["iface_id"].as_str(),
            n["rx_frames"].as_u64(),
            n["tx_bytes"].as_u64()
        ),
        (Some("eth0"), Some(1000), Some(98_000))
    );
    assert_eq!(n["tx_throttled"], 0);
    let g = &m["rate_limit_groups"][0];
    assert_eq!(
        (g["id"].as_str(), g["drives"].clone()),
        (Some("tenant"), json!(["disk0"]))
    );
    assert_eq!(g["throttled_events"], 0);
    assert_eq!(
        m["threads"][2],
        json!({"name": "kvm-nx-lpage-re", "cpu_ns": 5000, "kind": "kernel"})
    );
}

#[test]
fn every_scope_declares_each_field_once_with_help() {
    for scope in SCOPES {
        let metrics = scope.metrics();
        assert!(!metrics.is_empty(), "{}", scope.prefix);
        for (_, m) in metrics {
            assert!(
                !m.help().is_empty(),
                "{}.{} has no doc comment",
                scope.json,
                m.field
            );
            assert!(
                !m.help().contains(" in ns") && !m.help().contains("per mille"),
                "{}.{}: the unit belongs in the attribute, not the help",
                scope.json,
                m.field
            );
        }
    }
}

/// docs/api/metrics.md is what the declarations produce.
#[test]
fn the_docs_table_is_generated_from_the_declarations() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api/metrics.md");
    let want = super::table::table();
    if std::env::var_os("OSPREY_BLESS").is_some() {
        std::fs::write(path, &want).expect("write docs/api/metrics.md");
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "docs/api/metrics.md is stale: run `OSPREY_BLESS=1 cargo test -p vmm-config --lib metrics`"
    );
}
