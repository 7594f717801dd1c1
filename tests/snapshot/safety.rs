//! Snapshots that cannot hurt the VM or lose an older snapshot (issue 48; docs/snapshot.md,
//! "Where the files may go" and "Crash consistency"), with the sandbox on:
//!
//! - a snapshot never replaces a file the VM uses (its drive, by name or through a hard link,
//!   its kernel, its metrics file, its API socket, or its own other file): 400 naming the field
//!   and the file, and the VM runs on to 0 errors;
//! - a FIFO (or anything not a regular file) as either path is a 400 at once, for create and
//!   load, and the VM still answers and stops on SIGTERM;
//! - SIGKILL at 10 random points during a create over an existing snapshot: the folder's
//!   snapshot loads and runs (the old or the new one) every time;
//! - 20 failed loads (guest memory zeroed) leave the process's fd count where it was;
//! - a restored VM whose memory file is truncated and rewritten finishes its I/O unharmed.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::common::blk::Disk;
use super::common::{api_call as call, test_guest, Vmm};
use super::{assert_verified, drive_requests, wait_for_socket};
use serde_json::{json, Value};

/// A short verify run (4,096 blocks written and read back) for the tests that let it finish.
/// `timeout_ms`: see [`super::NO_STALL_LIMIT`].
const SHORT_VERIFY: &str =
    "mode=blk rw=verify bs=4096 qd=16 queues=2 count=8192 timeout_ms=3600000";
/// Reads that never end, for the tests that only need a guest doing I/O.
const ENDLESS_READS: &str =
    "mode=blk rw=randread bs=4096 qd=16 queues=2 count=100000000 timeout_ms=3600000";
const SMALL_DISK: u64 = 32 << 20;

/// Boots the test guest on `disk` (its kernel copied beside it, so the kernel lies in the API
/// socket's folder too) with a metrics file there; returns the VM and its socket.
fn boot_in_folder(disk: &Disk, boot_args: &str, sock_name: &str) -> (Vmm, PathBuf) {
    let sock = disk.dir.join(sock_name);
    let kernel = disk.dir.join("kernel.elf");
    if !kernel.exists() {
        std::fs::copy(test_guest(), &kernel).expect("copy the kernel");
    }
    let cfg = json!({
        "machine-config": {"vcpu_count": 2, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": kernel, "boot_args": boot_args},
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path, "iothread": "io0",
                    "num_queues": 2}],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": sock},
        "metrics": {"metrics_path": disk.dir.join("metrics.json"), "interval_ms": 1000},
    });
    let cfg_path = disk.dir.join(format!("{sock_name}.json"));
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = vmm.wait_console(Duration::from_secs(30), |l| l == "osprey-test-guest: ready");
    assert!(ready.is_some(), "guest not ready:\n{}", vmm.log_text());
    wait_for_socket(&sock);
    (vmm, sock)
}

/// One request with a client-side deadline: `None` when no answer came within `within` (the
/// server hung). `Connection: close`, so the answer ends with the stream.
fn call_within(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    within: Duration,
) -> Option<(u16, Value)> {
    let mut s = UnixStream::connect(sock).ok()?;
    s.set_read_timeout(Some(within)).ok()?;
    s.set_write_timeout(Some(within)).ok()?;
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body.as_bytes()).ok()?;
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
    }
    let text = String::from_utf8_lossy(&out);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let v = serde_json::from_str(body).unwrap_or(Value::String(body.to_string()));
    Some((status, v))
}

/// Boots the guest on `disk` ([`boot_in_folder`]), lets it complete `requests` requests, pauses it
/// and takes a Full snapshot to `state.snap` and `mem.snap` in the disk's folder; returns the
/// paused VM and the two files.
fn snapshot_mid_io(disk: &Disk, boot_args: &str, requests: u64) -> (Vmm, PathBuf, PathBuf) {
    let (vmm, sock) = boot_in_folder(disk, boot_args, "api.sock");
    let t0 = Instant::now();
    while drive_requests(&sock) < requests {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", vmm.log_text());
        std::thread::sleep(Duration::from_micros(500));
    }
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let (state, mem) = (disk.dir.join("state.snap"), disk.dir.join("mem.snap"));
    let body = create_body(&state, &mem);
    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body));
    assert_eq!(status, 204, "{v}\n{}", vmm.log_text());
    (vmm, state, mem)
}

fn create_body(state: &Path, mem: &Path) -> String {
    json!({"snapshot_type": "Full", "snapshot_path": state, "mem_file_path": mem}).to_string()
}

fn inode(path: &Path) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).expect("stat");
    (m.dev(), m.ino(), m.len())
}

#[test]
fn a_snapshot_never_replaces_a_file_the_vm_uses() {
    let disk = Disk::new("snapshot-clobber", SMALL_DISK);
    let (mut vmm, sock) = boot_in_folder(&disk, SHORT_VERIFY, "api.sock");
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let drive_before = inode(&disk.path);
    let kernel = disk.dir.join("kernel.elf");
    let kernel_before = inode(&kernel);
    let metrics = disk.dir.join("metrics.json");
    let link = disk.dir.join("another-name-for-the-disk.img");
    std::fs::hard_link(&disk.path, &link).expect("hard link");
    let state = disk.dir.join("state.snap");
    let mem = disk.dir.join("mem.snap");
    let cases: [(&Path, &Path, &str, &Path); 9] = [
        (&disk.path, &mem, "snapshot_path", &disk.path),
        (&state, &disk.path, "mem_file_path", &disk.path),
        (&state, &link, "mem_file_path", &link),
        (&link, &mem, "snapshot_path", &link),
        (&kernel, &mem, "snapshot_path", &kernel),
        (&state, &kernel, "mem_file_path", &kernel),
        (&state, &metrics, "mem_file_path", &metrics),
        (&sock, &mem, "snapshot_path", &sock),
        (&state, &state, "mem_file_path", &state),
    ];
    for (s, m, field, named) in cases {
        let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&create_body(s, m)));
        let what = format!(
            "snapshot_path {}, mem_file_path {}",
            s.display(),
            m.display()
        );
        assert_eq!(status, 400, "{what}: {v}");
        let message = v["fault_message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field) && message.contains(&named.display().to_string()),
            "{what}: the message names {field} and {}: {message}",
            named.display()
        );
        assert_eq!(inode(&disk.path), drive_before, "{what}: the drive changed");
        assert_eq!(inode(&kernel), kernel_before, "{what}: the kernel changed");
        assert!(
            !state.exists() && !mem.exists(),
            "{what}: a file was written"
        );
    }
    // The VM's own files are intact: a good snapshot, then the guest finishes its verify run.
    let (status, v) = call(
        &sock,
        "PUT",
        "/snapshot/create",
        Some(&create_body(&state, &mem)),
    );
    assert_eq!(status, 204, "{v}\n{}", vmm.log_text());
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Resumed"}"#));
    assert_eq!(status, 204, "{v}");
    assert_verified(&mut vmm, "the VM after the refused snapshots");
    assert_eq!(inode(&disk.path), drive_before);
}

#[test]
fn a_fifo_is_refused_at_once_and_the_vm_still_answers_and_stops() {
    let disk = Disk::new("snapshot-fifo", SMALL_DISK);
    let (mut vmm, sock) = boot_in_folder(&disk, ENDLESS_READS, "api.sock");
    let fifo = disk.dir.join("fifo.snap");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let state = disk.dir.join("state.snap");
    let mem = disk.dir.join("mem.snap");
    for (s, m, field) in [
        (&state, &fifo, "mem_file_path"),
        (&fifo, &mem, "snapshot_path"),
    ] {
        let t0 = Instant::now();
        let answer = call_within(
            &sock,
            "PUT",
            "/snapshot/create",
            Some(&create_body(s, m)),
            Duration::from_secs(5),
        );
        let Some((status, v)) = answer else {
            panic!("{field} a FIFO: no answer within 5 s (the control thread hangs)");
        };
        assert_eq!(status, 400, "{field}: {v}");
        let message = v["fault_message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field) && message.contains("not a regular file"),
            "{field}: {message}"
        );
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }
    let answer = call_within(&sock, "GET", "/", None, Duration::from_secs(5));
    assert_eq!(answer.map(|(s, _)| s), Some(200), "the VM answers");
    // And snapshots (the files the load below pairs with the FIFO).
    let (status, v) = call(
        &sock,
        "PUT",
        "/snapshot/create",
        Some(&create_body(&state, &mem)),
    );
    assert_eq!(status, 204, "{v}\n{}", vmm.log_text());
    vmm.signal(libc::SIGTERM);
    let exit = vmm.wait_exit(Duration::from_secs(10));
    assert!(exit.success(), "{exit:?}\n{}", vmm.log_text());

    // A load whose files are FIFOs: 400 at once, and the pre-boot process answers and stops.
    let load_sock = disk.dir.join("load.sock");
    let mut loader = Vmm::spawn(["--api-sock".as_ref(), load_sock.as_os_str()]);
    wait_for_socket(&load_sock);
    for (s, m, field) in [
        (&state, &fifo, "memory file"),
        (&fifo, &mem, "snapshot file"),
    ] {
        let body = json!({"snapshot_path": s, "mem_backend": {"backend_type": "File",
                          "backend_path": m}, "resume_vm": true});
        let answer = call_within(
            &load_sock,
            "PUT",
            "/snapshot/load",
            Some(&body.to_string()),
            Duration::from_secs(5),
        );
        let Some((status, v)) = answer else {
            panic!("load with a FIFO {field}: no answer within 5 s");
        };
        assert_eq!(status, 400, "{field}: {v}");
        let message = v["fault_message"].as_str().unwrap_or_default();
        assert!(message.contains("not a regular file"), "{field}: {message}");
    }
    let answer = call_within(&load_sock, "GET", "/", None, Duration::from_secs(5));
    assert_eq!(
        answer.map(|(s, _)| s),
        Some(200),
        "the pre-boot process answers"
    );
    loader.signal(libc::SIGTERM);
    loader.wait_exit(Duration::from_secs(10));
}

/// A number in `0..n`, different from call to call.
fn random_below(n: u64, salt: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (nanos ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % n.max(1)
}

/// Loads the snapshot in `dir` in a new process (`resume_vm`) and checks that its guest
/// completes requests; returns the load's log line about the state file it took. A guest that
/// stops fails the test (a vCPU snapshotted on its ring-3 `int3` used to restore past it and
/// stop at the `ud2` after it: `int3.rs`).
fn loads_and_runs(dir: &Path, sock: &Path, what: &str) -> String {
    let mut vmm = Vmm::spawn(["--api-sock".as_ref(), sock.as_os_str()]);
    wait_for_socket(sock);
    let body = json!({"snapshot_path": dir.join("state.snap"),
                      "mem_backend": {"backend_type": "File", "backend_path": dir.join("mem.snap")},
                      "resume_vm": true});
    let (status, v) = call(sock, "PUT", "/snapshot/load", Some(&body.to_string()));
    assert_eq!(status, 204, "{what}: {v}\n{}", vmm.log_text());
    let t0 = Instant::now();
    let requests = || {
        let (_, text) = vmm::api::client::request(sock, "GET", "/metrics", None).ok()?;
        serde_json::from_str::<Value>(&text).ok()?["drives"][0]["requests"].as_u64()
    };
    let mut before = None;
    loop {
        let Some(now) = requests() else {
            vmm.wait_exit(Duration::from_secs(10));
            panic!(
                "{what}: the restored VM stopped\nconsole:\n{}\nlog:\n{}",
                vmm.console_text(),
                vmm.log_text()
            );
        };
        match before {
            None => before = Some(now),
            Some(b) if now > b + 100 => break,
            Some(_) => {}
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{what}: the restored guest does not run\n{}",
            vmm.log_text()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let line = vmm
        .log_text()
        .lines()
        .find(|l| l.contains("rolled forward"))
        .map(str::to_string)
        .unwrap_or_default();
    vmm.signal(libc::SIGKILL);
    vmm.wait_exit(Duration::from_secs(10));
    line
}

#[test]
fn sigkill_during_a_create_over_a_snapshot_leaves_one_that_loads() {
    let disk = Disk::new("snapshot-crash", SMALL_DISK);
    let dir = disk.dir.join("snap");
    std::fs::create_dir_all(&dir).expect("snapshot folder");
    let body = create_body(&dir.join("state.snap"), &dir.join("mem.snap"));
    // The snapshot every round creates over, and how long a create takes here.
    let (mut first, sock) = boot_in_folder(&disk, ENDLESS_READS, "api-0.sock");
    let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
    assert_eq!(status, 204, "{v}");
    let t0 = Instant::now();
    let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body));
    let create_ms = (t0.elapsed().as_millis() as u64).max(50);
    assert_eq!(status, 204, "{v}\n{}", first.log_text());
    first.signal(libc::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    loads_and_runs(&dir, &disk.dir.join("load-0.sock"), "the first snapshot");

    let mut rolled = 0;
    for round in 1..=10u64 {
        let (mut vmm, sock) = boot_in_folder(&disk, ENDLESS_READS, &format!("api-{round}.sock"));
        let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
        assert_eq!(status, 204, "{v}");
        // Up to 1.5 times a create's time after the request is sent (most land inside it).
        let delay = Duration::from_millis(random_below(create_ms * 3 / 2, round));
        let mut s = UnixStream::connect(&sock).expect("connect");
        let head = format!(
            "PUT /snapshot/create HTTP/1.1\r\nHost: localhost\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(head.as_bytes()).expect("send");
        std::thread::sleep(delay);
        vmm.signal(libc::SIGKILL);
        vmm.wait_exit(Duration::from_secs(10));
        let what = format!(
            "round {round}: SIGKILL {} ms into a create",
            delay.as_millis()
        );
        let line = loads_and_runs(&dir, &disk.dir.join(format!("load-{round}.sock")), &what);
        rolled += usize::from(line.contains("rolled forward"));
        eprintln!("{what}: loads and runs {line}");
    }
    eprintln!("10 of 10 loaded ({rolled} rolled forward); a create took {create_ms} ms");
}

/// The process's open file descriptors.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The fd count once the API has closed the connection of the last request: the server closes
/// its end a moment after the client does, so the fewest of several samples over 200 ms.
fn settled_fd_count(pid: u32) -> usize {
    (0..10)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            fd_count(pid)
        })
        .min()
        .unwrap_or(0)
}

#[test]
fn failed_loads_leave_no_fd_behind() {
    let disk = Disk::new("snapshot-fd-leak", SMALL_DISK);
    // Paused inside the I/O: the saved rings' indices are not the zeroed memory's.
    let (vmm, state, mem) = snapshot_mid_io(&disk, ENDLESS_READS, 1000);
    drop(vmm);
    // Guest memory zeroed, whatever follows it kept: every check before the build passes, the
    // restored devices find no rings where the saved state says.
    let zeroed = disk.dir.join("zeroed.snap");
    std::fs::copy(&mem, &zeroed).expect("copy");
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&zeroed)
            .expect("open");
        use std::os::unix::fs::FileExt;
        let chunk = vec![0u8; 1 << 20];
        for i in 0..128u64 {
            f.write_all_at(&chunk, i << 20).expect("zero");
        }
    }
    let load_sock = disk.dir.join("load.sock");
    let loader = Vmm::spawn(["--api-sock".as_ref(), load_sock.as_os_str()]);
    wait_for_socket(&load_sock);
    let body = json!({"snapshot_path": state, "mem_file_path": zeroed, "resume_vm": false});
    let load = || call(&load_sock, "PUT", "/snapshot/load", Some(&body.to_string()));
    // One failed load first: whatever a first load sets up once (and keeps) is counted in.
    let (status, v) = load();
    assert_eq!(status, 400, "{v}\n{}", loader.log_text());
    assert!(
        v["fault_message"]
            .as_str()
            .is_some_and(|m| m.contains("virtio-pci restore")),
        "refused where the build fails: {v}"
    );
    let before = settled_fd_count(loader.pid());
    for i in 0..20 {
        let (status, v) = load();
        assert_eq!(status, 400, "load {i}: {v}");
    }
    let after = settled_fd_count(loader.pid());
    assert_eq!(
        after,
        before,
        "20 failed loads: {before} fds before, {after} after; {v}",
        v = call(&load_sock, "GET", "/", None).1
    );
    let (status, v) = call(&load_sock, "GET", "/", None);
    assert_eq!(
        (status, v["state"].as_str()),
        (200, Some("Not started")),
        "{v}"
    );
}

#[test]
fn truncating_the_memory_file_under_a_restored_vm_leaves_it_whole() {
    let disk = Disk::new("snapshot-truncate", SMALL_DISK);
    // Paused inside the verify run: blocks written before the snapshot are read back after it.
    let (vmm, state, mem) = snapshot_mid_io(&disk, SHORT_VERIFY, 2000);
    drop(vmm);
    // Restored paused, so that no page of guest memory has left the file yet.
    let load_sock = disk.dir.join("load.sock");
    let mut restored = Vmm::spawn(["--api-sock".as_ref(), load_sock.as_os_str()]);
    wait_for_socket(&load_sock);
    let body = json!({"snapshot_path": state, "mem_file_path": mem, "resume_vm": false});
    let (status, v) = call(&load_sock, "PUT", "/snapshot/load", Some(&body.to_string()));
    assert_eq!(status, 204, "{v}\n{}", restored.log_text());
    // Truncated, then written over with zeros, as a careless operator might.
    let t0 = Instant::now();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&mem)
        .expect("open to truncate");
    let held_back = t0.elapsed();
    f.set_len(128 << 20).expect("zeros");
    drop(f);
    assert_eq!(std::fs::metadata(&mem).expect("stat").len(), 128 << 20);
    let (status, v) = call(&load_sock, "PATCH", "/vm", Some(r#"{"state": "Resumed"}"#));
    assert_eq!(status, 204, "{v}");
    assert_verified(&mut restored, "the VM whose memory file was truncated");
    assert!(
        restored
            .log_text()
            .contains("moved into this process first"),
        "{}",
        restored.log_text()
    );
    eprintln!(
        "the truncating open was held back {:.1} ms",
        held_back.as_secs_f64() * 1e3
    );
}
