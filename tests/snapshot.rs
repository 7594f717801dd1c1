//! Snapshots (docs/snapshot.md) of a VM running the test guest's verify workload (QD16 on 2
//! queues, which writes blocks and reads them back):
//!
//! - `PUT /snapshot/create` is refused while the VM runs and taken once it is paused at a random
//!   moment of the I/O; the state file reads back, the memory file holds all of guest memory,
//!   and the VM resumed after the snapshot finishes with 0 errors and 0 mismatches.
//! - Snapshot, kill, restore in a new process (`PUT /snapshot/load` with `resume_vm`), the guest
//!   finishes with 0 errors and 0 mismatches: `OSPREY_SNAPSHOT_ROUNDS` times in a row, each with
//!   its own pause point (3 by default; `make test-snapshot-long` runs the issue's 20).
//! - Two clones restored from one snapshot, each on its own copy of the drive (`--restore`).
//! - Bad snapshots (truncated, a flipped byte, another version, a missing or resized drive, a
//!   missing memory file) are refused with exit 2 / HTTP 400 before any vCPU runs.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::blk::Disk;
use common::{api_call as call, blk_report, test_guest, Vmm};
use serde_json::{json, Value};

/// 32768 blocks written then read back (the 128 MiB disk), 65536 requests over the 2 queues.
const WORKLOAD: &str = "mode=blk rw=verify bs=4096 qd=16 queues=2 count=80000";
const DISK_BYTES: u64 = 128 << 20;
const REQUESTS: u64 = 65536;

/// A pause point in 20..220 ms after the guest is ready, different from call to call.
fn random_pause(round: u64) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Duration::from_millis(20 + (u64::from(nanos) + round * 37) % 200)
}

fn wait_for_socket(sock: &Path) {
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no API socket");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Boots the test guest on `disk` with the verify workload and an API socket, sandbox off
/// (snapshots need it off for now); returns once the guest is ready.
fn boot(disk: &Disk, extra_drive: Value) -> (Vmm, PathBuf) {
    let sock = disk.dir.join("api.sock");
    let mut drive = json!({"drive_id": "disk0", "path_on_host": disk.path, "iothread": "io0",
                           "num_queues": 2});
    if let (Some(d), Some(extra)) = (drive.as_object_mut(), extra_drive.as_object()) {
        d.extend(extra.clone());
    }
    let cfg = json!({
        "machine-config": {"vcpu_count": 2, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": WORKLOAD},
        "drives": [drive],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": sock},
        "sandbox": {"mode": "off"},
    });
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = vmm.wait_console(Duration::from_secs(30), |l| l == "osprey-test-guest: ready");
    assert!(ready.is_some(), "guest not ready:\n{}", vmm.log_text());
    wait_for_socket(&sock);
    (vmm, sock)
}

/// Pauses after `pause`, snapshots into `dir` (state.snap, mem.snap), returns the log line.
fn pause_and_snapshot(vmm: &Vmm, sock: &Path, pause: Duration, dir: &Path) -> String {
    std::thread::sleep(pause);
    let (status, v) = call(sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let body = json!({"snapshot_type": "Full", "snapshot_path": dir.join("state.snap"),
                      "mem_file_path": dir.join("mem.snap")});
    let (status, v) = call(sock, "PUT", "/snapshot/create", Some(&body.to_string()));
    assert_eq!(status, 204, "{v}\n{}", vmm.log_text());
    let log = vmm.log_text();
    log.lines()
        .rev()
        .find(|l| l.contains("Snapshot "))
        .expect("the snapshot's log line")
        .to_string()
}

/// Requests the guest had completed when the snapshot in `dir` was taken (the used ring
/// indices; each queue completes at most 32768, so they do not wrap): a pause mid-I/O is
/// strictly between 0 and [`REQUESTS`].
fn completed_at_snapshot(dir: &Path) -> u64 {
    let state = vmm::snapshot::file::read(&dir.join("state.snap")).expect("read back");
    state.transports[0]
        .queues
        .iter()
        .map(|q| u64::from(q.used_idx))
        .sum()
}

/// The guest's verify run on `vmm`'s console (once it exited): 0 errors, 0 mismatches.
fn assert_verified(vmm: &mut Vmm, what: &str) -> Value {
    let exit = vmm.wait_exit(Duration::from_secs(120));
    assert!(exit.success(), "{what}: {exit:?}\n{}", vmm.log_text());
    let report = blk_report(vmm);
    let main = &report["runs"][0];
    assert_eq!(main["errors"], 0, "{what}: {report}");
    assert_eq!(main["mismatches"], 0, "{what}: {report}");
    assert_eq!(main["timed_out"], false, "{what}: {report}");
    report
}

/// `osprey --api-sock S` then `PUT /snapshot/load` of `dir`'s files: (process, status, reply,
/// milliseconds from the PUT to its answer).
fn load_over_api(dir: &Path, resume: bool, name: &str) -> (Vmm, u16, Value, f64) {
    let sock = dir.join(format!("{name}.sock"));
    let vmm = Vmm::spawn(["--api-sock".as_ref(), sock.as_os_str()]);
    wait_for_socket(&sock);
    let body = json!({"snapshot_path": dir.join("state.snap"),
                      "mem_backend": {"backend_type": "File", "backend_path": dir.join("mem.snap")},
                      "resume_vm": resume});
    let t0 = Instant::now();
    let (status, v) = call(&sock, "PUT", "/snapshot/load", Some(&body.to_string()));
    (vmm, status, v, t0.elapsed().as_secs_f64() * 1e3)
}

#[test]
fn a_paused_vm_mid_io_is_saved_and_runs_on() {
    let disk = Disk::new("snapshot-create", DISK_BYTES);
    let (mut vmm, sock) = boot(&disk, json!({}));
    let body = json!({"snapshot_type": "Full", "snapshot_path": disk.dir.join("state.snap"),
                      "mem_file_path": disk.dir.join("mem.snap")});
    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body.to_string()));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["fault_message"]
            .as_str()
            .is_some_and(|m| m.contains("pause it first")),
        "{v}"
    );
    let line = pause_and_snapshot(&vmm, &sock, random_pause(0), &disk.dir);
    eprintln!("{line}");

    let state = vmm::snapshot::file::read(&disk.dir.join("state.snap")).expect("read back");
    assert_eq!(state.vcpus.len(), 2);
    assert_eq!(state.mem_size_bytes, 128 << 20);
    let mem_len = std::fs::metadata(disk.dir.join("mem.snap"))
        .expect("memory file")
        .len();
    assert_eq!(mem_len, 128 << 20);
    assert_eq!(state.drives.len(), 1);
    assert_eq!(state.drives[0].size_bytes, DISK_BYTES);
    let queues = &state.transports[0].queues;
    assert_eq!(queues.len(), 2);
    assert!(queues.iter().all(|q| q.enabled), "{queues:?}");
    assert_ne!(state.transports[0].status & 0x04, 0, "DRIVER_OK");

    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Resumed"}"#));
    assert_eq!(status, 204, "{v}");
    assert_verified(&mut vmm, "the snapshotted VM");
}

#[test]
fn restored_in_a_new_process_the_guest_finishes_its_io() {
    let rounds: u64 = std::env::var("OSPREY_SNAPSHOT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for round in 0..rounds {
        let disk = Disk::new(&format!("snapshot-restore-{round}"), DISK_BYTES);
        let (mut first, sock) = boot(&disk, json!({}));
        let pause = random_pause(round);
        let line = pause_and_snapshot(&first, &sock, pause, &disk.dir);
        first.signal(libc::SIGKILL);
        first.wait_exit(Duration::from_secs(10));
        let done = completed_at_snapshot(&disk.dir);
        assert!(
            done > 0 && done < REQUESTS,
            "round {round}: paused after {pause:?}, outside the I/O ({done} requests done)"
        );

        let (mut second, status, v, load_ms) = load_over_api(&disk.dir, true, "restored");
        assert_eq!(status, 204, "round {round}: {v}\n{}", second.log_text());
        let report = assert_verified(&mut second, &format!("round {round}"));
        eprintln!(
            "round {round}: paused after {pause:?} with {done} of {REQUESTS} requests done; \
             {line}; load answered in {load_ms:.1} ms; guest {} requests",
            report["runs"][0]["requests"]
        );
    }
}
