//! virtio-net end to end: the test guest's `mode=net-echo` behind a tap of the test's own,
//! served by Osprey's iothread, against the host's own tools. One boot does it all: 1,000 pings
//! with none lost, a flood ping, UDP echo of 1,000 datagrams of 1 to 1,472 bytes verified, and a
//! tx rate limit set live with `PATCH /network-interfaces/eth0`, held, then removed.
//!
//! Needs root (the test creates its tap with `ip tuntap` and deletes it, also on failure) and
//! iputils' `ping` for the ping parts (`.ci/run` installs it); without them: NOT RUN.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{api_call, test_guest, Vmm};
use serde_json::json;

/// A tap with the host's end at `host_ip`/30, deleted when dropped.
struct TestTap {
    name: String,
    host_ip: String,
    guest_ip: String,
}

impl TestTap {
    /// The test's `n`th tap (0..4): its own name and /30 among the process's.
    fn create(n: u32) -> Option<TestTap> {
        let id = std::process::id();
        let (a, b) = ((id >> 4) % 250, ((id % 16) * 4 + n) * 4);
        let tap = TestTap {
            name: format!("ospnet{}{n}", id % 100_000),
            host_ip: format!("172.30.{a}.{}", b + 1),
            guest_ip: format!("172.30.{a}.{}", b + 2),
        };
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !ip(&["tuntap", "add", "dev", &tap.name, "mode", "tap"]) {
            return None;
        }
        let ok = ip(&[
            "addr",
            "add",
            &format!("{}/30", tap.host_ip),
            "dev",
            &tap.name,
        ]) && ip(&["link", "set", &tap.name, "up"]);
        ok.then_some(tap)
    }
}

impl Drop for TestTap {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["tuntap", "del", "dev", &self.name, "mode", "tap"])
            .output();
    }
}

fn have_ping() -> bool {
    Command::new("ping")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ping args... guest`: (transmitted, received, the output).
fn ping(args: &[&str], guest: &str) -> (u64, u64, String) {
    let out = common::output_within(
        {
            let mut c = Command::new("ping");
            c.args(args).arg(guest);
            c
        },
        Duration::from_secs(120),
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no summary from ping {args:?}:\n{text}"));
    let num = |word: &str| -> u64 {
        line.split(',')
            .find(|p| p.contains(word))
            .and_then(|p| p.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{word} in {line}"))
    };
    (num("transmitted"), num("received"), text)
}

/// Sends `data` to the guest's port 7 and waits for the echo.
fn echo(sock: &UdpSocket, data: &[u8]) -> Vec<u8> {
    sock.send(data).expect("send");
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).expect("the echo (timed out?)");
    buf[..n].to_vec()
}

#[test]
fn ping_udp_echo_and_a_live_tx_limit_through_a_tap() {
    let Some(tap) = TestTap::create(0) else {
        eprintln!("NOT RUN: cannot create a tap (needs root and /dev/net/tun)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("osprey-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let sock_path = dir.join("api.sock");
    let cfg = json!({
        "boot-source": {
            "kernel_image_path": test_guest(),
            "boot_args": format!("mode=net-echo ip={}", tap.guest_ip),
        },
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "network-interfaces": [{
            "iface_id": "eth0",
            "host_dev_name": tap.name,
            "guest_mac": "06:00:ac:10:00:02",
            "rx_rate_limiter": {},
            "tx_rate_limiter": null,
        }],
        "api": {"socket": sock_path},
    });
    let cfg_path = dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn([std::ffi::OsStr::new("--config"), cfg_path.as_os_str()]);
    let ready = vmm.wait_console(Duration::from_secs(30), |l| {
        l.starts_with("osprey-test-guest: net-echo ready")
    });
    assert!(
        ready.is_some(),
        "guest not ready:\n{}\n{}",
        vmm.console_text(),
        vmm.log_text()
    );

    if have_ping() {
        let (sent, got, text) = ping(&["-c", "1000", "-i", "0", "-q"], &tap.guest_ip);
        assert_eq!((sent, got), (1000, 1000), "{text}");
        let (sent, got, text) = ping(&["-f", "-c", "100000", "-q"], &tap.guest_ip);
        eprintln!("flood: {text}");
        assert_eq!(sent, 100_000, "{text}");
        // A flood sends the next request when the reply is lost only after a 10 ms wait; the
        // guest drops nothing of its own, so what is lost is the host's (counted by the tap).
        assert!(got * 1000 >= sent * 999, "more than 0.1 % lost: {text}");
    } else {
        eprintln!("NOT RUN (ping parts): iputils' ping is not installed");
    }

    let udp = UdpSocket::bind((tap.host_ip.as_str(), 0)).expect("bind");
    udp.connect((tap.guest_ip.as_str(), 7)).expect("connect");
    udp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..1000usize {
        let len = 1 + i * 1471 / 999;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        assert_eq!(echo(&udp, &data), data, "datagram {i} of {len} bytes");
    }

    // 100 frames a second from the guest (its echoes): the first 100 pass at once (a full
    // bucket), the next 200 at the bucket's rate.
    let limit = json!({"iface_id": "eth0",
        "tx_rate_limiter": {"ops": {"size": 100, "refill_time": 1000}}});
    let (status, body) = api_call(
        &sock_path,
        "PATCH",
        "/network-interfaces/eth0",
        Some(&limit.to_string()),
    );
    assert_eq!(status, 204, "{body}");
    let mut at = Vec::new();
    for i in 0..301u32 {
        assert_eq!(echo(&udp, &i.to_be_bytes()), i.to_be_bytes());
        at.push(Instant::now());
    }
    let rate = 200.0 / at[300].duration_since(at[100]).as_secs_f64();
    // At most 5 % over (the limit holds); under, a stalled host can slow the echo loop too
    // (as tests/rate_limit.rs allows 10 %).
    assert!(
        (90.0..=105.0).contains(&rate),
        "tx limited to 100 frames/s held {rate:.1}/s"
    );
    let (status, body) = api_call(
        &sock_path,
        "PATCH",
        "/network-interfaces/eth0",
        Some(r#"{"tx_rate_limiter": {}}"#),
    );
    assert_eq!(status, 204, "{body}");
    let t0 = Instant::now();
    for i in 0..300u32 {
        assert_eq!(echo(&udp, &i.to_be_bytes()), i.to_be_bytes());
    }
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "the limit removed live: 300 echoes took {:?}",
        t0.elapsed()
    );
    let (status, cfg) = api_call(&sock_path, "GET", "/vm/config", None);
    assert_eq!(status, 200);
    assert_eq!(
        cfg["network-interfaces"][0]["host_dev_name"],
        json!(tap.name),
        "{cfg}"
    );
    vmm.signal(libc::SIGTERM);
    vmm.wait_exit(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir).ok();
}

/// A VM with a NIC snapshotted while it answers, restored in a new process onto the same tap
/// (opened again by name): its driver's rings carry on, pings and UDP echoes answered.
#[test]
fn snapshot_and_restore_with_a_nic_keeps_answering() {
    let Some(tap) = TestTap::create(1) else {
        eprintln!("NOT RUN: cannot create a tap (needs root and /dev/net/tun)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("osprey-net-snap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let first_sock = dir.join("a.sock");
    let cfg = json!({
        "boot-source": {
            "kernel_image_path": test_guest(),
            "boot_args": format!("mode=net-echo ip={}", tap.guest_ip),
        },
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "network-interfaces": [{"iface_id": "eth0", "host_dev_name": tap.name}],
        "api": {"socket": first_sock},
    });
    let cfg_path = dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut first = Vmm::spawn([std::ffi::OsStr::new("--config"), cfg_path.as_os_str()]);
    assert!(
        first
            .wait_console(Duration::from_secs(30), |l| {
                l.starts_with("osprey-test-guest: net-echo ready")
            })
            .is_some(),
        "guest not ready:\n{}",
        first.log_text()
    );
    let udp = UdpSocket::bind((tap.host_ip.as_str(), 0)).expect("bind");
    udp.connect((tap.guest_ip.as_str(), 7)).expect("connect");
    udp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    for i in 0..100u32 {
        assert_eq!(echo(&udp, &i.to_be_bytes()), i.to_be_bytes());
    }
    let (st, body) = api_call(&first_sock, "PATCH", "/vm", Some(r#"{"state":"Paused"}"#));
    assert_eq!(st, 204, "{body}");
    let snap = json!({"snapshot_path": dir.join("s.state"), "mem_file_path": dir.join("s.mem"),
        "snapshot_type": "Full"});
    let (st, body) = api_call(
        &first_sock,
        "PUT",
        "/snapshot/create",
        Some(&snap.to_string()),
    );
    assert_eq!(st, 204, "{body}\n{}", first.log_text());
    first.signal(libc::SIGKILL);
    first.wait_exit(Duration::from_secs(10));

    let second_sock = dir.join("b.sock");
    let mut second = Vmm::spawn([std::ffi::OsStr::new("--api-sock"), second_sock.as_os_str()]);
    let load = json!({"snapshot_path": dir.join("s.state"),
        "mem_backend": {"backend_type": "File", "backend_path": dir.join("s.mem")},
        "resume_vm": true});
    let mut loaded = (0, serde_json::Value::Null);
    for _ in 0..100 {
        if second_sock.exists() {
            loaded = api_call(
                &second_sock,
                "PUT",
                "/snapshot/load",
                Some(&load.to_string()),
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(loaded.0, 204, "{}\n{}", loaded.1, second.log_text());
    for i in 100..300u32 {
        assert_eq!(
            echo(&udp, &i.to_be_bytes()),
            i.to_be_bytes(),
            "echo {i} after the restore:\n{}",
            second.log_text()
        );
    }
    if have_ping() {
        let (sent, got, text) = ping(&["-c", "200", "-i", "0", "-q"], &tap.guest_ip);
        assert_eq!((sent, got), (200, 200), "{text}");
    }
    second.signal(libc::SIGTERM);
    second.wait_exit(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir).ok();
}
