//! virtio-vsock with Firecracker's host-side Unix sockets (issue 51): one boot of the test
//! guest's `mode=vsock-echo`, then through `uds_path`: 100 host-initiated connections at once,
//! 1 MiB each echoed and verified; a client that closes mid-stream (the others go on); a
//! `CONNECT` to a port nobody listens on (the client's socket is closed, as in Firecracker);
//! the socket is there while the VM runs and gone after it stops; a snapshot is refused (the
//! device's state is not saved yet).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
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

#[test]
fn host_initiated_connections_echo_close_and_refuse_as_firecracker() {
    let s = Scratch::new("vsock");
    let uds = s.0.join("v.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": format!("mode=vsock-echo port={PORT}")},
        "vsock": {"guest_cid": 3, "uds_path": uds},
    });
    let path = s.file("vm.json", &cfg.to_string());
    let api = s.0.join("api.sock");
    let mut vmm = Vmm::spawn([
        "--config-file".as_ref(),
        path.as_os_str(),
        "--api-sock".as_ref(),
        api.as_os_str(),
    ]);
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

    // Snapshots do not save the vsock device yet: refused, naming it.
    let paused = json!({"state": "Paused"}).to_string();
    assert_eq!(api_call(&api, "PATCH", "/vm", Some(&paused)).0, 204);
    let body = json!({"snapshot_type": "Full", "snapshot_path": s.0.join("vm.snap"),
                      "mem_file_path": s.0.join("vm.mem")})
    .to_string();
    let (status, fault) = api_call(&api, "PUT", "/snapshot/create", Some(&body));
    assert_eq!(status, 400, "{fault}");
    assert!(fault.to_string().contains("vsock"), "{fault}");

    vmm.signal(libc::SIGTERM);
    let status = vmm.wait_exit(TIMEOUT);
    assert!(status.success(), "{status:?}\n{}", vmm.log_text());
    assert!(!uds.exists(), "the socket is removed when the VM stops");
}
