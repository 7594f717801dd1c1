//! virtio-vsock with Firecracker's host-side Unix sockets (issue 51): one boot of the test
//! guest's `mode=vsock-echo`, then through `uds_path`: 100 host-initiated connections at once,
//! 1 MiB each echoed and verified; a client that closes mid-stream (the others go on); a
//! `CONNECT` to a port nobody listens on (the client's socket is closed, as in Firecracker);
//! the socket is there while the VM runs and gone after it stops. A second boot: a snapshot
//! taken with connections mid-echo, loaded into a fresh Osprey, where the guest gets the
//! TRANSPORT_RESET event and new connections echo (docs/vsock.md, "Snapshots").

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::scratch::Scratch;
use common::{api_call, test_guest, Vmm};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const PORT: u32 = 52;

/// Connects through `uds` to guest port `port`: the `OK <host_port>` line, or None when the
/// client's socket was closed.
fn connect(uds: &Path, port: u32) -> Option<(UnixStream, u32)> {
    let mut s = UnixStream::connect(uds).expect("connect to uds_path");
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    s.write_all(format!("CONNECT {port}\n").as_bytes())
        .expect("CONNECT");
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.len() < 32 {
        match s.read(&mut b) {
            Ok(1) if b[0] == b'\n' => break,
            Ok(1) => line.push(b[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8(line).expect("utf-8");
    let host_port = text
        .strip_prefix("OK ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not an OK line: {text:?}"));
    Some((s, host_port))
}

/// Sends `data` and reads back as many bytes (a writer thread, so neither side's buffers fill).
fn echo(mut s: UnixStream, data: Vec<u8>) -> Vec<u8> {
    let mut w = s.try_clone().expect("clone");
    let n = data.len();
    let writer = std::thread::spawn(move || w.write_all(&data).expect("write"));
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).expect("read the echo");
    writer.join().expect("writer");
    got
}

fn pattern(seed: u32, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// The test guest in `vsock-echo` on port [`PORT`], CID 3, its vsock on `S/v.sock`, the API
/// on `S/api_name`: (the VMM, the vsock socket, the API socket).
fn boot_echo(s: &Scratch, api_name: &str) -> (Vmm, PathBuf, PathBuf) {
    let uds = s.0.join("v.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": format!("mode=vsock-echo port={PORT}")},
        "vsock": {"guest_cid": 3, "uds_path": uds},
    });
    let path = s.file("vm.json", &cfg.to_string());
    let api = s.0.join(api_name);
    let vmm = Vmm::spawn([
        "--config-file".as_ref(),
        path.as_os_str(),
        "--api-sock".as_ref(),
        api.as_os_str(),
    ]);
    (vmm, uds, api)
}

#[test]
fn host_initiated_connections_echo_close_and_refuse_as_firecracker() {
    let s = Scratch::new("vsock");
    let (mut vmm, uds, api) = boot_echo(&s, "api.sock");
    let ready = vmm.wait_console(TIMEOUT, |l| l.starts_with("VSOCK ready"));
    assert_eq!(
        ready.map(|l| l.text),
        Some(format!("VSOCK ready cid=3 port={PORT}")),
        "console:\n{}\nlog:\n{}",
        vmm.console_text(),
        vmm.log_text()
    );
    assert!(uds.exists(), "the socket is bound while the VM runs");

    // Nobody listens on port 53: the client's socket is closed.
    assert!(connect(&uds, PORT + 1).is_none(), "CONNECT 53 was accepted");

    // A client that closes mid-stream.
    let (mut c, _) = connect(&uds, PORT).expect("CONNECT 52");
    c.write_all(&pattern(7, 100_000)).expect("write");
    drop(c);

    // 100 at once, 1 MiB each.
    let clients: Vec<_> = (0..100u32)
        .map(|i| {
            let uds = uds.clone();
            std::thread::spawn(move || {
                let (c, host_port) = connect(&uds, PORT).expect("CONNECT 52");
                let data = pattern(i, 1 << 20);
                let got = echo(c, data.clone());
                (host_port, got == data)
            })
        })
        .collect();
    let mut ports = std::collections::BTreeSet::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (port, same) = c.join().expect("client");
        assert!(same, "connection {i}: the echo differs");
        ports.insert(port);
    }
    assert_eq!(ports.len(), 100, "each connection has its own host port");

    // A snapshot holds the device only while it is taken: resumed in this process, an open
    // connection goes on echoing.
    let (c, _) = connect(&uds, PORT).expect("CONNECT 52");
    let mut w = c.try_clone().expect("clone");
    let data = pattern(500, 65536);
    assert!(echo(c.try_clone().expect("clone"), data.clone()) == data);
    let paused = json!({"state": "Paused"}).to_string();
    assert_eq!(api_call(&api, "PATCH", "/vm", Some(&paused)).0, 204);
    w.write_all(b"sent while paused")
        .expect("write while paused");
    let body = json!({"snapshot_type": "Full", "snapshot_path": s.0.join("vm.snap"),
                      "mem_file_path": s.0.join("vm.mem")})
    .to_string();
    let (status, fault) = api_call(&api, "PUT", "/snapshot/create", Some(&body));
    assert_eq!(status, 204, "{fault}\n{}", vmm.log_text());
    let resumed = json!({"state": "Resumed"}).to_string();
    assert_eq!(api_call(&api, "PATCH", "/vm", Some(&resumed)).0, 204);
    let mut r = c.try_clone().expect("clone");
    let mut got = [0u8; 17];
    r.read_exact(&mut got)
        .expect("the echo of what was sent while paused");
    assert_eq!(&got, b"sent while paused");
    let data = pattern(501, 65536);
    assert!(
        echo(c, data.clone()) == data,
        "the echo after the resume differs"
    );

    vmm.signal(libc::SIGTERM);
    let status = vmm.wait_exit(TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", vmm.log_text());
    assert!(!uds.exists(), "the socket is removed when the VM stops");
}

/// Keeps writing 4 KiB and reading its echo on `c` until the socket fails or ends; returns the
/// bytes echoed.
fn echo_until_closed(mut c: UnixStream) -> u64 {
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let data = pattern(99, 4096);
    let mut got = vec![0u8; 4096];
    let mut echoed = 0u64;
    loop {
        if c.write_all(&data).is_err() || c.read_exact(&mut got).is_err() {
            return echoed;
        }
        assert_eq!(got, data, "the echo differs");
        echoed += 4096;
    }
}

fn wait_for(path: &Path) {
    for _ in 0..200 {
        if path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 51's snapshot: a guest in `vsock-echo` with four host connections echoing while the
/// VM is paused and snapshotted; the snapshot loaded into a fresh Osprey process. The old
/// clients see their sockets closed (their process is gone), the restored guest prints the
/// TRANSPORT_RESET it got, and new `CONNECT`s through the rebound `uds_path` echo 1 MiB
/// verified.
#[test]
fn a_snapshot_with_open_connections_restores_with_a_transport_reset() {
    let s = Scratch::new("vsock-snap");
    let (mut first, uds, api) = boot_echo(&s, "a.sock");
    let ready = first.wait_console(TIMEOUT, |l| l.starts_with("VSOCK ready"));
    assert!(
        ready.is_some(),
        "console:\n{}\nlog:\n{}",
        first.console_text(),
        first.log_text()
    );
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (c, _) = connect(&uds, PORT).expect("CONNECT 52");
            std::thread::spawn(move || echo_until_closed(c))
        })
        .collect();
    // Mid-echo: the clients keep going while the VM is paused and snapshotted.
    std::thread::sleep(Duration::from_millis(300));
    let paused = json!({"state": "Paused"}).to_string();
    assert_eq!(api_call(&api, "PATCH", "/vm", Some(&paused)).0, 204);
    std::thread::sleep(Duration::from_millis(100));
    let body = json!({"snapshot_type": "Full", "snapshot_path": s.0.join("vm.snap"),
                      "mem_file_path": s.0.join("vm.mem")})
    .to_string();
    let (status, fault) = api_call(&api, "PUT", "/snapshot/create", Some(&body));
    assert_eq!(status, 204, "{fault}\n{}", first.log_text());
    first.signal(libc::SIGKILL);
    first.wait_exit(TIMEOUT);
    for (i, c) in clients.into_iter().enumerate() {
        let echoed = c.join().expect("client");
        assert!(
            echoed > 0,
            "connection {i} echoed nothing before the snapshot"
        );
    }

    let api2 = s.0.join("b.sock");
    let mut second = Vmm::spawn(["--api-sock".as_ref(), api2.as_os_str()]);
    wait_for(&api2);
    let load = json!({"snapshot_path": s.0.join("vm.snap"),
        "mem_backend": {"backend_type": "File", "backend_path": s.0.join("vm.mem")},
        "resume_vm": true});
    let (status, fault) = api_call(&api2, "PUT", "/snapshot/load", Some(&load.to_string()));
    assert_eq!(status, 204, "{fault}\n{}", second.log_text());
    let reset = second.wait_console(TIMEOUT, |l| l.contains("vsock transport-reset"));
    assert_eq!(
        reset.map(|l| l.text),
        Some("osprey-test-guest: vsock transport-reset cid=3".to_string()),
        "console:\n{}\nlog:\n{}",
        second.console_text(),
        second.log_text()
    );
    for i in 0..4u32 {
        let (c, _) = connect(&uds, PORT).expect("CONNECT 52 after the restore");
        let data = pattern(1000 + i, 1 << 20);
        assert!(
            echo(c, data.clone()) == data,
            "connection {i} after the restore: the echo differs"
        );
    }
    second.signal(libc::SIGTERM);
    let status = second.wait_exit(TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", second.log_text());
}
