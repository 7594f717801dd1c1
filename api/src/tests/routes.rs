//! Every route's success path, and the control thread's errors passed through.

use super::harness::{assert_fault, body_json, short_limits, Fake};
use crate::command::{ApiCommand, IoThreadUpdate, VmAction};
use crate::config::PollPolicyKind;

#[test]
fn reads_answer_200_with_the_control_threads_json() {
    let fake = Fake::start();
    let r = fake.get("/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let info = body_json(&r);
    assert_eq!(info["app_name"], "Osprey");
    assert_eq!(info["vmm_version"], "0.1.0");
    assert_eq!(info["state"], "Running");
    let r = fake.get("/version");
    assert_eq!(body_json(&r)["firecracker_version"], "1.16.1");

    let config = body_json(&fake.get("/vm/config"));
    assert_eq!(config["machine-config"]["vcpu_count"], 2);
    assert_eq!(config["machine-config"]["mem_size_mib"], 256);

    let list = body_json(&fake.get("/iothreads"));
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["id"], "io0");

    let r = fake.get("/iothreads/io0");
    assert_eq!(r.status, 200);
    let t = body_json(&r);
    assert_eq!(t["id"], "io0");
    assert_eq!(t["poll_max_ns"], 32768);
    assert_eq!(t["poll_policy"], "Classic");
    assert_eq!(t["max_batch"], 32);

    let drives = body_json(&fake.get("/drives"));
    assert_eq!(drives[0]["drive_id"], "disk0");
    let d = fake.get("/drives/disk0");
    assert_eq!(d.status, 200);
    assert_eq!(body_json(&d)["io_engine"], "IoUring");

    assert_eq!(
        fake.commands(),
        vec![
            ApiCommand::GetInfo,
            ApiCommand::GetConfig,
            ApiCommand::ListIoThreads,
            ApiCommand::GetIoThread("io0".into()),
            ApiCommand::ListDrives,
            ApiCommand::GetDrive("disk0".into()),
        ]
    );
}

#[test]
fn patch_sends_the_update_and_answers_204() {
    let fake = Fake::start();
    let r = fake.json(
        "PATCH",
        "/iothreads/io0",
        r#"{"poll_max_ns": 0, "poll_policy": "Weighted", "poll_weight": 3, "max_batch": 8}"#,
    );
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        r.body, "",
        "Firecracker's clients take any other 2xx for an error"
    );
    let update = IoThreadUpdate {
        poll_max_ns: Some(Some(0)),
        poll_policy: Some(Some(PollPolicyKind::Weighted)),
        poll_weight: Some(Some(3)),
        max_batch: Some(Some(8)),
        ..IoThreadUpdate::default()
    };
    assert_eq!(
        fake.commands(),
        vec![ApiCommand::PatchIoThread("io0".into(), update)]
    );
    // Content-Type parameters are fine.
    let r = fake.send(
        "PATCH",
        "/iothreads/io0",
        &[("Content-Type", "application/json; charset=utf-8")],
        Some(b"{}"),
    );
    assert_eq!(r.status, 204, "{r:?}");
}

#[test]
fn actions_answer_204_without_a_body_or_the_control_threads_409() {
    let fake = Fake::start();
    let r = fake.json("PUT", "/actions", r#"{"action_type": "Pause"}"#);
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(r.body, "");
    let r = fake.json("PUT", "/actions", r#"{"action_type": "Resume"}"#);
    assert_fault(&r, 409, "VM is running");
    let r = fake.json("PUT", "/actions", r#"{"action_type": "Shutdown"}"#);
    assert_eq!(r.status, 204);
    assert_eq!(
        fake.commands(),
        vec![
            ApiCommand::Action(VmAction::Pause),
            ApiCommand::Action(VmAction::Resume),
            ApiCommand::Action(VmAction::Shutdown),
        ]
    );
}

#[test]
fn control_thread_errors_keep_their_status_and_message() {
    let fake = Fake::start_with(short_limits());
    assert_fault(&fake.get("/iothreads/io9"), 404, "no iothread `io9`");
    assert_fault(&fake.get("/drives/nope"), 404, "no drive `nope`");
    assert_fault(&fake.get("/drives/broken"), 500, "engine failed");
    assert_fault(
        &fake.json("PATCH", "/iothreads/io0", r#"{"poll_weight": 17}"#),
        400,
        "poll_weight: 17 is out of range 1-16",
    );
    assert_fault(
        &fake.json("PATCH", "/iothreads/io7", r#"{"max_batch": 8}"#),
        404,
        "no iothread `io7`",
    );
    assert_fault(&fake.get("/iothreads/drop"), 500, "VMM not responding");
    assert_fault(
        &fake.get("/iothreads/hang"),
        500,
        "VMM not responding: no reply within 300 ms",
    );
    // A percent-encoded id arrives decoded.
    assert_fault(&fake.get("/iothreads/io%209"), 404, "no iothread `io 9`");
}

#[test]
fn metrics_are_json_or_prometheus_text() {
    let fake = Fake::start();
    let r = fake.get("/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(body_json(&r), super::harness::metrics());

    let text_checks = |r: &crate::client::Response| {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        for line in [
            "# TYPE osprey_vm_uptime_seconds gauge",
            "osprey_vm_uptime_seconds 1.234",
            "osprey_vm_running 1",
            "osprey_iothread_poll_hits_total{iothread=\"io0\"} 1",
            "osprey_drive_requests_total{drive=\"disk0\"} 10",
            "osprey_drive_batch_size_bucket{drive=\"disk0\",le=\"256\"} 1",
            "osprey_drive_batch_size_bucket{drive=\"disk0\",le=\"+Inf\"} 3",
            "osprey_drive_batch_size_sum{drive=\"disk0\"} 601.0",
            "osprey_drive_batch_size_count{drive=\"disk0\"} 3",
        ] {
            assert!(
                r.body.lines().any(|l| l == line),
                "{line} missing:\n{}",
                r.body
            );
        }
    };
    text_checks(&fake.get("/metrics?format=prometheus"));
    text_checks(&fake.send("GET", "/metrics", &[("Accept", "text/plain")], None));
    let prometheus_accept = "application/openmetrics-text;version=1.0.0;q=0.5,\
                             text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    text_checks(&fake.send("GET", "/metrics", &[("Accept", prometheus_accept)], None));

    let r = fake.send(
        "GET",
        "/metrics?format=json",
        &[("Accept", "text/plain")],
        None,
    );
    assert_eq!(body_json(&r)["vm"]["vcpus"], 2);
    let r = fake.send("GET", "/metrics", &[("Accept", "*/*")], None);
    assert_eq!(body_json(&r)["vm"]["vcpus"], 2);
    let before = fake.commands().len();
    assert_fault(
        &fake.get("/metrics?format=xml"),
        400,
        "format: expected `json` or `prometheus`",
    );
    assert_eq!(fake.commands().len(), before);
}

/// Firecracker v1.16.1's `PUT /snapshot/load` body, every field it has: `clock_realtime` and
/// `network_overrides` are taken (the command reaches the control thread, which checks the
/// overrides against the snapshot); an override with a field Firecracker's lacks is refused.
#[test]
fn snapshot_load_takes_firecrackers_newer_fields() {
    let fake = Fake::start();
    let mut body = serde_json::json!({
        "snapshot_path": "/srv/vm/state.snap",
        "mem_backend": {"backend_type": "File", "backend_path": "/srv/vm/mem.snap"},
        "track_dirty_pages": false,
        "resume_vm": true,
        "network_overrides": [{"iface_id": "eth0", "host_dev_name": "tap1"}],
        "clock_realtime": true,
    });
    let r = fake.json("PUT", "/snapshot/load", &body.to_string());
    let commands = fake.commands();
    let Some(ApiCommand::SnapshotLoad(load)) = commands.last() else {
        panic!("not sent to the control thread: {r:?}");
    };
    assert!(load.clock_realtime);
    assert_eq!(
        load.network_overrides,
        vec![crate::command::NetworkOverride {
            iface_id: "eth0".into(),
            host_dev_name: "tap1".into()
        }]
    );
    assert!(load.mem_path().is_ok());
    let before = fake.commands().len();
    body["network_overrides"][0]["guest_mac"] = "06:00:00:00:00:01".into();
    let r = fake.json("PUT", "/snapshot/load", &body.to_string());
    assert!(format!("{r:?}").contains("guest_mac"), "{r:?}");
    assert_eq!(fake.commands().len(), before);
}
