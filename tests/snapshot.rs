//! Snapshots (docs/snapshot.md) of a VM running the test guest's verify workload (QD16 on 2
//! queues, which writes blocks and reads them back), with the sandbox on (the default) in the
//! snapshotted process and in the restored one:
//!
//! - `PUT /snapshot/create` is refused while the VM runs and taken once it is paused at a random
//!   moment of the I/O; the state file reads back, the memory file holds all of guest memory,
//!   and the VM resumed after the snapshot finishes with 0 errors and 0 mismatches.
//! - Snapshot, kill, restore in a new process (`PUT /snapshot/load` with `resume_vm`), the guest
//!   finishes with 0 errors and 0 mismatches: `OSPREY_SNAPSHOT_ROUNDS` times in a row, each with
//!   its own pause point, a random count of completed requests (20 by default, about 18 s
//!   here).
//! - Two clones restored from one snapshot, each on its own copy of the drive (`--restore`;
//!   one serves the API on `--api-sock`).
//! - Bad snapshots (truncated, a flipped byte, another version, a missing or resized drive, a
//!   missing memory file) are refused with exit 2 / HTTP 400 before any vCPU runs.
//! - With the sandbox on, a path outside the API socket's folder and `snapshot.folder` is
//!   refused with 400 naming it and the folders, and creates no file; `snapshot.folder` takes
//!   the files; with `--sandbox off` any folder does.
//! - What cannot hurt the VM nor lose an older snapshot (`safety.rs`, issue 48).

mod common;
#[path = "snapshot/int3.rs"]
mod int3;
#[path = "snapshot/safety.rs"]
mod safety;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::blk::Disk;
use common::{api_call as call, blk_report, test_guest, Vmm};
use serde_json::{json, Value};

/// The test guest's stall limit in every snapshot test: an hour. It times its requests with
/// ring-3 `rdtsc`, which kvm_pvm does not offset (docs/performance.md): the host's TSC, so the
/// time between a snapshot and its load counts as a stall of the requests in flight, and on a
/// loaded host a round of `safety::sigkill_during_a_create...` took more than the default 5 s
/// (the restored guest reported `timed_out` with 0 requests done and exited). A device that
/// really hangs fails these tests by their own waits.
const NO_STALL_LIMIT: &str = "timeout_ms=3600000";

/// 32768 blocks written then read back (the 128 MiB disk), 65536 requests over the 2 queues.
const WORKLOAD: &str = "mode=blk rw=verify bs=4096 qd=16 queues=2 count=80000 timeout_ms=3600000";
const DISK_BYTES: u64 = 128 << 20;
const REQUESTS: u64 = 65536;

/// A pause point: a number of completed requests in 2,000..50,000 (of the workload's 65,536:
/// writes, then reads from 32,768), different from call to call. Counting requests rather than
/// time keeps the pause inside the I/O on a fast host and on a loaded one alike; the last
/// 15,000 requests (tens of ms) are the margin for the pause request itself, which a loaded
/// host delays: with points up to 62,000 the guest sometimes finished first and the VM was
/// gone when the pause came.
fn random_point(round: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    2_000 + (u64::from(nanos) + round * 7_919) % 48_000
}

fn wait_for_socket(sock: &Path) {
    // The file appears at bind; wait until the server accepts too.
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no API socket");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Boots the test guest on `disk` with the verify workload and an API socket in the disk's
/// folder, sandboxed (the default); returns once the guest is ready.
fn boot(disk: &Disk, extra_drive: Value) -> (Vmm, PathBuf) {
    boot_running(disk, extra_drive, WORKLOAD)
}

/// [`boot`] with the guest's command line `boot_args`.
fn boot_running(disk: &Disk, extra_drive: Value, boot_args: &str) -> (Vmm, PathBuf) {
    boot_configured(disk, extra_drive, boot_args, json!({}))
}

/// [`boot_running`] with `sections` added to the config's top level.
fn boot_configured(
    disk: &Disk,
    extra_drive: Value,
    boot_args: &str,
    sections: Value,
) -> (Vmm, PathBuf) {
    let sock = disk.dir.join("api.sock");
    let mut drive = json!({"drive_id": "disk0", "path_on_host": disk.path, "iothread": "io0",
                           "num_queues": 2});
    if let (Some(d), Some(extra)) = (drive.as_object_mut(), extra_drive.as_object()) {
        d.extend(extra.clone());
    }
    let mut cfg = json!({
        "machine-config": {"vcpu_count": 2, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": boot_args},
        "drives": [drive],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": sock},
    });
    if let (Some(c), Some(extra)) = (cfg.as_object_mut(), sections.as_object()) {
        c.extend(extra.clone());
    }
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = vmm.wait_console(Duration::from_secs(30), |l| l == "osprey-test-guest: ready");
    assert!(ready.is_some(), "guest not ready:\n{}", vmm.log_text());
    wait_for_socket(&sock);
    (vmm, sock)
}

/// The last line of `vmm`'s log that contains `needle`, waiting for it up to 5 s (a line
/// reaches the pipe reader shortly after the API's answer).
fn log_line(vmm: &Vmm, needle: &str) -> String {
    let t0 = Instant::now();
    loop {
        let log = vmm.log_text();
        if let Some(line) = log.lines().rev().find(|l| l.contains(needle)) {
            return line.to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no log line with {needle:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The process's start-up line says the sandbox is on, with the Landlock rule that lets it
/// create snapshot files in the API socket's folder.
fn assert_sandboxed(vmm: &Vmm, what: &str) {
    let line = log_line(vmm, "sandbox: ");
    assert!(
        line.contains("sandbox: on: seccomp on all 5 thread types")
            && line.contains("create and write files API socket's folder for snapshots"),
        "{what}: not sandboxed:\n{}",
        vmm.log_text()
    );
}

/// Pauses once the drive has completed `after_requests` requests (polled through GET /metrics),
/// snapshots into `dir` (state.snap, mem.snap), returns the log line.
fn pause_and_snapshot(vmm: &Vmm, sock: &Path, after_requests: u64, dir: &Path) -> String {
    let t0 = Instant::now();
    while drive_requests(sock) < after_requests {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the guest did not reach {after_requests} requests:\n{}",
            vmm.log_text()
        );
        std::thread::sleep(Duration::from_micros(500));
    }
    let (status, v) = call(sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let body = json!({"snapshot_type": "Full", "snapshot_path": dir.join("state.snap"),
                      "mem_file_path": dir.join("mem.snap")});
    let (status, text) =
        vmm::api::client::request(sock, "PUT", "/snapshot/create", Some(&body.to_string()))
            .unwrap_or_else(|e| panic!("snapshot create: {e}\n{}", vmm.log_text()));
    assert_eq!(status, 204, "{text}\n{}", vmm.log_text());
    log_line(vmm, "Snapshot ")
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

/// How many rounds a long test runs: the environment variable `var` when it holds a number,
/// else `default`.
fn rounds_from_env(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
    assert_sandboxed(&vmm, "the snapshotted VM");
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
    let line = pause_and_snapshot(&vmm, &sock, random_point(0), &disk.dir);
    eprintln!("{line}");

    let state = vmm::snapshot::file::read(&disk.dir.join("state.snap")).expect("read back");
    assert_eq!(state.vcpus.len(), 2);
    assert_eq!(state.mem_size_bytes, 128 << 20);
    let mem_len = std::fs::metadata(disk.dir.join("mem.snap"))
        .expect("memory file")
        .len();
    assert_eq!(mem_len, (128 << 20) + vmm::snapshot::mem_file::TRAILER_LEN);
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
fn a_path_outside_the_allowed_folders_is_refused_and_creates_nothing() {
    let disk = Disk::new("snapshot-folders", DISK_BYTES);
    let configured = disk.dir.join("snaps");
    std::fs::create_dir_all(&configured).expect("snapshot.folder");
    let elsewhere = Disk::new("snapshot-elsewhere", 512);
    let (mut vmm, sock) = boot_configured(
        &disk,
        json!({}),
        WORKLOAD,
        json!({"snapshot": {"folder": configured}}),
    );
    assert_sandboxed(&vmm, "the VM");
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let create = |state: &Path, mem: &Path| {
        let body = json!({"snapshot_type": "Full", "snapshot_path": state,
                          "mem_file_path": mem});
        call(&sock, "PUT", "/snapshot/create", Some(&body.to_string()))
    };
    let (outside_state, outside_mem) = (
        elsewhere.dir.join("state.snap"),
        elsewhere.dir.join("mem.snap"),
    );
    let (inside_state, inside_mem) = (disk.dir.join("state.snap"), disk.dir.join("mem.snap"));
    for (state, mem, named) in [
        (&outside_state, &outside_mem, &outside_state),
        (&inside_state, &outside_mem, &outside_mem),
        (&outside_state, &inside_mem, &outside_state),
    ] {
        let (status, v) = create(state, mem);
        assert_eq!(status, 400, "{v}");
        let message = v["fault_message"].as_str().unwrap_or_default();
        for words in [
            format!("{}: outside the folders", named.display()),
            format!("{} (API socket's folder)", disk.dir.display()),
            format!("{} (snapshot.folder)", configured.display()),
        ] {
            assert!(message.contains(&words), "{words:?} in {message}");
        }
        for file in [&outside_state, &outside_mem, &inside_state, &inside_mem] {
            assert!(!file.exists(), "{} was created", file.display());
        }
        let mut tmp = state.as_os_str().to_owned();
        tmp.push(".tmp");
        assert!(!Path::new(&tmp).exists(), "{tmp:?} was created");
    }
    // snapshot.folder takes them.
    let (status, v) = create(&configured.join("state.snap"), &configured.join("mem.snap"));
    assert_eq!(status, 204, "{v}\n{}", vmm.log_text());
    let state = vmm::snapshot::file::read(&configured.join("state.snap")).expect("read back");
    assert_eq!(state.mem_size_bytes, 128 << 20);
    vmm.signal(libc::SIGKILL);
    vmm.wait_exit(Duration::from_secs(10));

    // With the sandbox off any folder does, as before.
    let (mut unsandboxed, sock) = boot_configured(
        &disk,
        json!({}),
        WORKLOAD,
        json!({"sandbox": {"mode": "off"}}),
    );
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let body = json!({"snapshot_type": "Full", "snapshot_path": outside_state,
                      "mem_file_path": outside_mem});
    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body.to_string()));
    assert_eq!(status, 204, "{v}\n{}", unsandboxed.log_text());
    assert!(outside_state.exists() && outside_mem.exists());
    unsandboxed.signal(libc::SIGKILL);
    unsandboxed.wait_exit(Duration::from_secs(10));
}

#[test]
fn restored_in_a_new_process_the_guest_finishes_its_io() {
    let rounds = rounds_from_env("OSPREY_SNAPSHOT_ROUNDS", 20);
    for round in 0..rounds {
        let disk = Disk::new(&format!("snapshot-restore-{round}"), DISK_BYTES);
        let (mut first, sock) = boot(&disk, json!({}));
        assert_sandboxed(&first, &format!("round {round}: the snapshotted VM"));
        let point = random_point(round);
        let line = pause_and_snapshot(&first, &sock, point, &disk.dir);
        first.signal(libc::SIGKILL);
        first.wait_exit(Duration::from_secs(10));
        let done = completed_at_snapshot(&disk.dir);
        assert!(
            done > 0 && done < REQUESTS,
            "round {round}: paused at {point}, outside the I/O ({done} requests done)"
        );

        let (mut second, status, v, load_ms) = load_over_api(&disk.dir, true, "restored");
        assert_eq!(status, 204, "round {round}: {v}\n{}", second.log_text());
        assert_sandboxed(&second, &format!("round {round}: the restored VM"));
        let report = assert_verified(&mut second, &format!("round {round}"));
        eprintln!(
            "round {round}: paused at {point} with {done} of {REQUESTS} requests done; \
             {line}; load answered in {load_ms:.1} ms; guest {} requests",
            report["runs"][0]["requests"]
        );
    }
}

/// The first `key` anywhere in `v`.
fn find_key<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m
            .get(key)
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

#[test]
fn bad_snapshots_are_refused_before_any_vcpu_runs_and_clones_run_on_their_own_drives() {
    let disk = Disk::new("snapshot-bad-and-clones", DISK_BYTES);
    let (first, sock) = boot(&disk, json!({}));
    assert_sandboxed(&first, "the snapshotted VM");
    pause_and_snapshot(&first, &sock, random_point(7), &disk.dir);
    drop(first);
    let dir = &disk.dir;
    let good = std::fs::read(dir.join("state.snap")).expect("state file");

    // Each bad variant in a folder of its own, beside the good memory file.
    let variant = |name: &str, bytes: &[u8]| -> PathBuf {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).expect("folder");
        std::fs::write(d.join("state.snap"), bytes).expect("state");
        std::fs::hard_link(dir.join("mem.snap"), d.join("mem.snap")).expect("memory");
        d
    };
    let mut flipped = good.clone();
    let middle = good.len() / 2;
    flipped[middle] ^= 0x40;
    let mut other_format = good.clone();
    other_format[8..12].copy_from_slice(&99u32.to_le_bytes());
    let cases = [
        (variant("truncated", &good[..good.len() - 100]), "truncated"),
        (variant("flipped", &flipped), "corrupted"),
        (variant("other-format", &other_format), "format version 99"),
    ];
    // Over the API: each is a 400, and the process stays in its pre-boot phase.
    let api_sock = dir.join("bad.sock");
    let mut loader = Vmm::spawn(["--api-sock".as_ref(), api_sock.as_os_str()]);
    wait_for_socket(&api_sock);
    let load = |d: &Path, overrides: Value| {
        let body = json!({"snapshot_path": d.join("state.snap"),
                          "mem_file_path": d.join("mem.snap"),
                          "resume_vm": true, "drive_overrides": overrides});
        call(&api_sock, "PUT", "/snapshot/load", Some(&body.to_string()))
    };
    for (d, words) in &cases {
        let (status, v) = load(d, json!([]));
        assert_eq!(status, 400, "{}: {v}", d.display());
        let message = v["fault_message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{}: {message}", d.display());
    }
    let missing = dir.join("no-such-disk.img");
    let (status, v) = load(dir, json!([{"drive_id": "disk0", "path_on_host": missing}]));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["fault_message"]
            .as_str()
            .unwrap_or_default()
            .contains("No such file"),
        "{v}"
    );
    // In the API socket's folder: the pre-boot API takes paths from there (docs/security.md).
    let small = dir.join("small-copy.img");
    std::fs::File::create(&small)
        .and_then(|f| f.set_len(DISK_BYTES / 2))
        .expect("a smaller copy");
    let (status, v) = load(dir, json!([{"drive_id": "disk0", "path_on_host": small}]));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["fault_message"]
            .as_str()
            .unwrap_or_default()
            .contains("the snapshot's was"),
        "{v}"
    );
    let no_memory = variant("no-memory", &good);
    std::fs::remove_file(no_memory.join("mem.snap")).expect("remove");
    let (status, v) = load(&no_memory, json!([]));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["fault_message"]
            .as_str()
            .unwrap_or_default()
            .contains("memory file"),
        "{v}"
    );
    let (status, v) = call(&api_sock, "GET", "/", None);
    assert_eq!(
        (status, v["state"].as_str()),
        (200, Some("Not started")),
        "{v}"
    );
    assert!(
        !loader.log_text().contains("Restored"),
        "{}",
        loader.log_text()
    );
    loader.signal(libc::SIGTERM);
    loader.wait_exit(Duration::from_secs(10));

    // From the command line: exit 2, no vCPU.
    let mut cli = Vmm::spawn(["--restore".as_ref(), cases[1].0.as_os_str()]);
    let exit = cli.wait_exit(Duration::from_secs(30));
    assert_eq!(exit.code(), Some(2), "{}", cli.log_text());
    assert!(cli.log_text().contains("corrupted"), "{}", cli.log_text());
    assert!(!cli.log_text().contains("Restored"), "{}", cli.log_text());

    // Two clones of the good snapshot, each on its own copy of the drive, run at once.
    let mut clones = Vec::new();
    for name in ["clone-a", "clone-b"] {
        let copy = dir.join(format!("{name}.img"));
        std::fs::copy(&disk.path, &copy).expect("copy the drive");
        let arg = format!("disk0={}", copy.display());
        let mut args = vec![
            "--restore".into(),
            dir.clone().into_os_string(),
            "--restore-drive".into(),
            arg.into(),
        ];
        // clone-b also serves the API on a socket of its own.
        let clone_sock = dir.join(format!("{name}.sock"));
        if name == "clone-b" {
            args.extend(["--api-sock".into(), clone_sock.clone().into_os_string()]);
        }
        let vmm = Vmm::spawn(args);
        if name == "clone-b" {
            wait_for_socket(&clone_sock);
            let (status, v) = call(&clone_sock, "GET", "/", None);
            assert_eq!((status, v["state"].as_str()), (200, Some("Running")), "{v}");
            assert_sandboxed(&vmm, "clone-b, restored by --restore");
        }
        clones.push((name, copy, vmm));
    }
    let before = std::fs::read(&disk.path).expect("original drive");
    for (name, _copy, vmm) in &mut clones {
        assert_verified(vmm, name);
    }

    assert_eq!(
        std::fs::read(&disk.path).expect("original drive"),
        before,
        "the clones left the snapshot's drive alone"
    );
}

#[test]
fn a_rate_limit_holds_across_a_restore_with_its_bucket_level() {
    let disk = Disk::new("snapshot-rate-limit", DISK_BYTES);
    // 200 IOPS as 200 per second; the verify run below is 1,000 requests.
    let limit = json!({"rate_limiter": {"ops": {"size": 200, "refill_time": 1000}}});
    let (mut first, sock) = boot_running(
        &disk,
        json!({"rate_limiter": limit["rate_limiter"]}),
        "mode=blk rw=verify bs=4096 qd=16 queues=2 count=1000 timeout_ms=3600000",
    );
    assert_sandboxed(&first, "the snapshotted limited VM");
    pause_and_snapshot(&first, &sock, 300, &disk.dir);
    first.signal(libc::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    let done = completed_at_snapshot(&disk.dir);
    assert!(
        done > 0 && done < 4000,
        "paused outside the I/O: {done} requests done"
    );
    let state = vmm::snapshot::file::read(&disk.dir.join("state.snap")).expect("read back");
    let saved = state.rate_limits[0].ops.expect("the ops bucket's level");
    // The bucket's budget is in token·ns, a token being 1000 ms of refill.
    let saved_tokens = (saved.budget.max(0) / 1_000_000_000) as u64;
    assert!(saved_tokens < 200, "the guest spent tokens: {saved:?}");

    let (mut second, status, v, _) = load_over_api(&disk.dir, false, "limited");
    assert_eq!(status, 204, "{v}\n{}", second.log_text());
    assert_sandboxed(&second, "the restored limited VM");
    let restored_sock = disk.dir.join("limited.sock");
    let (_, metrics) = call(&restored_sock, "GET", "/metrics", None);
    let tokens = find_key(&metrics, "ops_tokens").and_then(Value::as_u64);
    // At its saved level, plus what the few milliseconds since the restore refilled (0.2 per
    // ms): not a fresh, full bucket.
    let tokens = tokens.expect("ops_tokens");
    assert!(
        tokens >= saved_tokens && tokens < 150,
        "the bucket resumes at its level ({saved_tokens} saved): {tokens}"
    );
    let (status, v) = call(
        &restored_sock,
        "PATCH",
        "/vm",
        Some(r#"{"state": "Resumed"}"#),
    );
    assert_eq!(status, 204, "{v}");
    assert_verified(&mut second, "the restored limited VM");
    let stats = common::blk::drive_stats(&second.log_text());
    assert!(
        find_key(&stats, "throttled_events")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            > 0,
        "the limit throttled the restored guest: {stats}"
    );
}

/// Requests the restored drive has completed (GET /metrics), or 0.
fn drive_requests(sock: &Path) -> u64 {
    let (_, m) = call(sock, "GET", "/metrics", None);
    m["drives"][0]["requests"].as_u64().unwrap_or(0)
}

/// A measurement, not a test (it asserts nothing about time): boot time, snapshot create time,
/// and `PUT /snapshot/load` with `resume_vm` until its answer and until the restored guest's
/// first completed request, for a 1-vCPU 256 MiB guest doing QD1 reads and a 2-vCPU 1 GiB guest
/// doing QD16 reads on 2 queues, each with the sandbox on (the snapshotted and the restored
/// processes) and off. docs/snapshot.md records the numbers.
///
/// `cargo test --release -p osprey --test snapshot timing -- --ignored --nocapture`
#[test]
#[ignore = "a measurement; run it in release with --ignored --nocapture"]
fn timing_of_create_and_load_beside_boot() {
    let guests = [
        (
            1,
            256,
            "rw=randread bs=4096 qd=1 queues=1",
            "1 vCPU, 256 MiB, QD1 reads",
        ),
        (
            2,
            1024,
            "rw=randread bs=4096 qd=16 queues=2",
            "2 vCPUs, 1 GiB, QD16 reads",
        ),
    ];
    let mut rows = Vec::new();
    for (vcpus, mib, io, label) in guests {
        for sandbox in ["on", "off"] {
            rows.extend(time_one_guest(vcpus, mib, io, label, sandbox));
        }
    }
    println!("| guest | sandbox | boot to the guest's ready line (ms) | create (ms) | load, answered (ms) | load until the guest's first request (ms) |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

/// One guest of [`timing_of_create_and_load_beside_boot`], sandbox `sandbox`: a table row per
/// load.
fn time_one_guest(vcpus: u8, mib: u64, io: &str, label: &str, sandbox: &str) -> Vec<String> {
    let disk = Disk::new(&format!("snapshot-timing-{mib}-{sandbox}"), 256 << 20);
    let sock = disk.dir.join("api.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": vcpus, "mem_size_mib": mib},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": format!("mode=blk {io} count=100000000 {NO_STALL_LIMIT}")},
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path, "iothread": "io0",
                    "num_queues": 2}],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": sock},
        "sandbox": {"mode": sandbox},
    });
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut first = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = first
        .wait_console(Duration::from_secs(30), |l| l == "osprey-test-guest: ready")
        .expect("guest ready");
    let boot_ms = ready.at.as_secs_f64() * 1e3;
    wait_for_socket(&sock);
    std::thread::sleep(Duration::from_millis(500));
    let (status, _) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204);
    let body = json!({"snapshot_type": "Full", "snapshot_path": disk.dir.join("state.snap"),
                      "mem_file_path": disk.dir.join("mem.snap")});
    let t0 = Instant::now();
    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body.to_string()));
    let create_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(status, 204, "{v}");
    first.signal(libc::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    let mut rows = Vec::new();
    for attempt in 0..3 {
        let name = format!("load{attempt}");
        let (mut restored, status, v, load_ms) = load_over_api(&disk.dir, true, &name);
        let t_answer = Instant::now();
        assert_eq!(status, 204, "{v}");
        let restored_sock = disk.dir.join(format!("{name}.sock"));
        while drive_requests(&restored_sock) == 0 {
            assert!(
                t_answer.elapsed() < Duration::from_secs(10),
                "the guest does not run"
            );
        }
        let runs_ms = load_ms + t_answer.elapsed().as_secs_f64() * 1e3;
        rows.push(format!(
            "| {label} | {sandbox} | {boot_ms:.0} | {create_ms:.0} | {load_ms:.1} | {runs_ms:.1} |"
        ));
        restored.signal(libc::SIGKILL);
        restored.wait_exit(Duration::from_secs(10));
    }
    rows
}
