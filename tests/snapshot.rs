//! Snapshots (docs/snapshot.md) of a VM running the test guest's verify workload (QD16 on 2
//! queues): `PUT /snapshot/create` is refused while the VM runs, and taken once it is paused at
//! a random moment of the I/O: the state file reads back with every vCPU, the irqchip and both
//! queues of the drive, the memory file holds all of guest memory, and the VM resumed after
//! the snapshot finishes with 0 errors and 0 mismatches.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::blk::Disk;
use common::{api_call as call, blk_report, test_guest, Vmm};
use serde_json::json;

/// A pause point in 20..220 ms after the guest is ready (differs from run to run).
fn random_pause() -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Duration::from_millis(20 + u64::from(nanos % 200))
}

#[test]
fn a_paused_vm_mid_io_is_saved_and_runs_on() {
    let disk = Disk::new("snapshot-create", 64 << 20);
    let sock = disk.dir.join("api.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 2, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": "mode=blk rw=verify bs=4096 qd=16 queues=2 count=40000"},
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path, "iothread": "io0",
                    "num_queues": 2}],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": sock},
        "sandbox": {"mode": "off"},
    });
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = vmm.wait_console(Duration::from_secs(30), |l| l == "osprey-test-guest: ready");
    assert!(ready.is_some(), "guest not ready:\n{}", vmm.log_text());
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(5), "no API socket");
        std::thread::sleep(Duration::from_millis(5));
    }
    let state_path = disk.dir.join("state.snap");
    let mem_path = disk.dir.join("mem.snap");
    let body =
        json!({"snapshot_type": "Full", "snapshot_path": state_path, "mem_file_path": mem_path})
            .to_string();

    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["fault_message"]
            .as_str()
            .is_some_and(|m| m.contains("pause it first")),
        "{v}"
    );

    std::thread::sleep(random_pause());
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body));
    assert_eq!(status, 204, "{v}\n{}", vmm.log_text());

    let state = vmm::snapshot::file::read(&state_path).expect("the state file reads back");
    assert_eq!(state.vcpus.len(), 2);
    assert_eq!(state.mem_size_bytes, 128 << 20);
    assert_eq!(
        std::fs::metadata(&mem_path).expect("memory file").len(),
        128 << 20
    );
    assert_eq!(state.drives.len(), 1);
    assert_eq!(state.drives[0].size_bytes, 64 << 20);
    let queues = &state.transports[0].queues;
    assert_eq!(queues.len(), 2);
    assert!(queues.iter().all(|q| q.enabled), "{queues:?}");
    assert_ne!(state.transports[0].status & 0x04, 0, "DRIVER_OK");

    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Resumed"}"#));
    assert_eq!(status, 204, "{v}");
    let exit = vmm.wait_exit(Duration::from_secs(120));
    assert!(exit.success(), "{exit:?}\n{}", vmm.log_text());
    let report = blk_report(&vmm);
    let main = &report["runs"][0];
    assert_eq!(main["errors"], 0, "{report}");
    assert_eq!(main["mismatches"], 0, "{report}");
    assert_eq!(main["timed_out"], false, "{report}");
    let log = vmm.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("Snapshot "))
        .expect("the snapshot's log line");
    eprintln!("{line}");
    eprintln!(
        "guest: {} requests in {} ns",
        main["requests"], main["elapsed_ns"]
    );
}
