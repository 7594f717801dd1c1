//! virtio-vsock from the guest's side (issue 51): the test guest's `mode=vsock-connect` opens
//! connections to the host (CID 2), which Osprey, as Firecracker, routes to a listener on
//! `<uds_path>_<port>`; each connection's 1 MiB pattern comes back through the listener's echo
//! and the guest verifies it (its `VSOCK` line). With `hostile=1` the guest first posts eight
//! malformed packets (guest-images/test-guest/README.md); the device may drop them or answer
//! with RST, but must go on working and never hand the guest a packet for another CID.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::scratch::Scratch;
use common::{test_guest, Vmm};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(120);
const HOST_PORT: u32 = 10789;

/// A listener on `<uds>_<port>` that echoes every connection, each in its own thread (they end
/// with the test process).
fn echo_listener(uds: &Path, port: u32) -> PathBuf {
    let path = PathBuf::from(format!("{}_{port}", uds.display()));
    let listener = UnixListener::bind(&path).expect("bind the host listener");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            std::thread::spawn(move || echo_one(conn));
        }
    });
    path
}

fn echo_one(mut c: UnixStream) {
    let mut buf = vec![0u8; 65536];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Boots the test guest with `boot_args` and a vsock (CID 3) on `uds`, waits for it to exit;
/// returns (exit status, the VSOCK report, console + log for messages).
fn run(s: &Scratch, uds: &Path, boot_args: &str) -> (std::process::ExitStatus, Value, String) {
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": boot_args},
        "vsock": {"guest_cid": 3, "uds_path": uds},
    });
    let path = s.file("vm.json", &cfg.to_string());
    let mut vmm = Vmm::spawn(["--config".as_ref(), path.as_os_str()]);
    let status = vmm.wait_exit(TIMEOUT);
    let text = format!("console:\n{}\nlog:\n{}", vmm.console_text(), vmm.log_text());
    let console = vmm.console_text();
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("VSOCK ").filter(|j| j.starts_with('{')))
        .unwrap_or_else(|| panic!("no VSOCK report\n{text}"));
    let report = serde_json::from_str(line).unwrap_or_else(|e| panic!("VSOCK not JSON ({e})"));
    (status, report, text)
}

#[test]
fn guest_initiated_connections_reach_the_uds_path_port_listener() {
    let s = Scratch::new("vsock-guest-connect");
    let uds = s.0.join("v.sock");
    echo_listener(&uds, HOST_PORT);
    let args = format!("mode=vsock-connect port={HOST_PORT} count=16 bytes=1048576 par=8");
    let (status, r, text) = run(&s, &uds, &args);
    assert_eq!(r["verified"], 16, "{r}\n{text}");
    assert_eq!(r["refused"], 0, "{r}\n{text}");
    assert_eq!(r["bad_pkts"], 0, "{r}\n{text}");
    assert_eq!(r["mismatches"], 0, "{r}\n{text}");
    assert_eq!(status.code(), Some(0), "{r}\n{text}");
}

#[test]
fn guest_connect_to_a_port_nobody_listens_on_is_refused() {
    let s = Scratch::new("vsock-guest-refused");
    let uds = s.0.join("v.sock");
    let (status, r, text) = run(&s, &uds, "mode=vsock-connect port=10790 count=2 bytes=4096");
    assert_eq!(r["refused"], 2, "{r}\n{text}");
    assert_eq!(r["connected"], 0, "{r}\n{text}");
    assert_eq!(
        status.code(),
        Some(1),
        "the guest counts refusals as failures\n{text}"
    );
}

/// Eight malformed packets, then a second of REQUESTs to a port nobody listens on (the guest
/// posts ~50,000 of them unchecked): the device takes at most its budget of packets that lead
/// nowhere per period (devices::vsock::flood), and the workload after them verifies.
#[test]
fn hostile_guest_packets_leave_the_device_working() {
    use devices::vsock::flood::{PERIOD, WASTED_PER_PERIOD};
    let s = Scratch::new("vsock-guest-hostile");
    let uds = s.0.join("v.sock");
    echo_listener(&uds, HOST_PORT);
    let args = format!("mode=vsock-connect port={HOST_PORT} count=4 bytes=262144 par=4 hostile=2");
    let (status, r, text) = run(&s, &uds, &args);
    assert_eq!(r["hostile_sent"], 8, "{r}\n{text}");
    // The guest's flood lasts 1 s: at most one budget per period begun in it, plus what its
    // tx ring (128 slots) holds unread at the end.
    let periods = (1000 / PERIOD.as_millis() as u64) + 2;
    let bound = periods * u64::from(WASTED_PER_PERIOD) + 128;
    let flood = r["flood_sent"].as_u64().unwrap_or(u64::MAX);
    assert!(
        flood > 0 && flood <= bound,
        "flood_sent {flood}, bound {bound}\n{r}\n{text}"
    );
    assert!(
        r["flood_rst"].as_u64() > Some(0),
        "no RST for the flood\n{r}"
    );
    assert_eq!(r["verified"], 4, "the device stopped working\n{r}\n{text}");
    assert_eq!(
        r["bad_pkts"], 0,
        "the device sent the guest a bad packet\n{r}\n{text}"
    );
    assert_eq!(status.code(), Some(0), "{r}\n{text}");
}
