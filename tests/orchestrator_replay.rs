//! Kata Containers (Go runtime and runtime-rs) and firecracker-containerd replayed host-side
//! against Osprey (issue 54): each test starts Osprey as that client starts Firecracker and sends
//! what it sends, in its order, with its bodies, as its source does it (each step cites the file
//! and function). The test guest stands in for the Linux guest: `mode=kbd` waits for
//! Ctrl+Alt+Del and resets through the i8042 (Linux's `reboot=k`), `rw=stamp` reads a stamped
//! drive and reports the config changes and capacities it sees (a live swap).
//!
//! Sources read: kata-containers `src/runtime/virtcontainers/fc.go` (Go runtime);
//! `src/runtime-rs/crates/hypervisor/src/firecracker/{fc_api.rs,inner_hypervisor.rs}`
//! (runtime-rs); firecracker-containerd `runtime/service.go`, `runtime/jailer.go`,
//! `runtime/runc_jailer.go`, `config/config.go` and the go-sdk v1 handlers it runs
//! (`handlers.go`: logger, metrics, machine-config, boot source, drives, start).
//!
//! The agents' channel and the pod network, host side: each client's vsock section or `PUT
//! /vsock` bodies, its handshake on the socket (the test guest's `mode=agent` echoes on the
//! agent's port, standing in for kata-agent and firecracker-containerd's agent), and its
//! `network-interfaces` bodies on a tap the test makes (`tests/common/tap.rs`; not root: a `NOT
//! RUN` line for the network part, the rest runs). What the agents then do over the channel
//! needs their Linux user space, which this host cannot boot (docs/orchestration.md).

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::stamp::write_stamp_file;
use common::tap::{have_ping, TestTap};
use common::{api_call, output_within, test_guest, Vmm};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(60);

/// `firecracker` in `dir`: a symlink to the binary under test, as an operator names Osprey for
/// these tools (runtime-rs's jailed mode and Kata's version check need that name).
fn firecracker_in(dir: &Path) -> PathBuf {
    let link = dir.join("firecracker");
    std::os::unix::fs::symlink(common::osprey(), &link).expect("symlink");
    link
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: `c` is a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// One hybrid-vsock handshake on `uds`: connect, write `line` in full (a failed write is the
/// caller's error, as for every client here), read the reply up to `\n` (at most 32 bytes)
/// within `read_timeout`. `Err` says why the attempt failed (the socket not there yet, the
/// reply closed or late: each client retries those).
fn handshake(
    uds: &Path,
    line: &str,
    read_timeout: Duration,
) -> Result<(UnixStream, String), String> {
    let mut s = UnixStream::connect(uds).map_err(|e| format!("connect: {e}"))?;
    s.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("writing {line:?} failed (fatal for the client): {e}"));
    s.set_read_timeout(Some(read_timeout)).expect("timeout");
    let mut reply = Vec::new();
    let mut b = [0u8; 1];
    while reply.len() < 32 {
        match s.read(&mut b) {
            Ok(1) => {
                reply.push(b[0]);
                if b[0] == b'\n' {
                    break;
                }
            }
            Ok(_) => return Err(format!("closed after {reply:?}")),
            Err(e) => return Err(format!("reading the reply: {e}")),
        }
    }
    s.set_read_timeout(None).expect("timeout");
    Ok((s, String::from_utf8_lossy(&reply).into_owned()))
}

/// `handshake` retried every `every` until `accept` takes the reply, for at most `TIMEOUT`.
fn dial(
    uds: &Path,
    line: &str,
    read_timeout: Duration,
    every: Duration,
    accept: impl Fn(&str) -> bool,
) -> (UnixStream, String, u32) {
    let t0 = Instant::now();
    let mut last;
    for attempt in 1.. {
        match handshake(uds, line, read_timeout) {
            Ok((s, reply)) if accept(&reply) => return (s, reply, attempt),
            Ok((_, reply)) => last = format!("refused reply {reply:?}"),
            Err(e) => last = e,
        }
        assert!(
            t0.elapsed() < TIMEOUT,
            "{line:?} on {} never answered (last: {last})",
            uds.display()
        );
        std::thread::sleep(every);
    }
    unreachable!()
}

/// Sends a pattern on an agent connection and checks that the guest echoes it back.
fn echoes(mut s: UnixStream, n: usize) {
    let data: Vec<u8> = (0..n).map(|i| (i * 31 + i / 256) as u8).collect();
    let mut w = s.try_clone().expect("clone");
    let sent = data.clone();
    let writer = std::thread::spawn(move || w.write_all(&sent).expect("write"));
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).expect("the echo");
    writer.join().expect("writer");
    assert!(got == data, "the agent's echo differs");
}

/// The guest answers every echo request through `tap` (when iputils' ping is there).
fn pings(tap: &TestTap) {
    if !have_ping() {
        println!("NOT RUN (ping): iputils' ping is not installed");
        return;
    }
    let (sent, got, text) = tap.ping(5);
    assert_eq!((sent, got), (5, 5), "{text}");
}

/// A tap for the client's network interface, or a NOT RUN line for that part.
fn tap_or_not_run(n: u32) -> Option<TestTap> {
    let tap = TestTap::create(n);
    if tap.is_none() {
        println!("NOT RUN (network-interfaces): cannot create a tap (needs root and /dev/net/tun)");
    }
    tap
}

/// Kata Go's `waitVMMRunning`: `GET /` every 10 ms until `state` is `Running`.
fn poll_running(vmm: &mut Vmm, sock: &Path) {
    let t0 = Instant::now();
    loop {
        if sock.exists() {
            if let Ok((200, body)) = vmm::api::client::request(sock, "GET", "/", None) {
                let v: Value = serde_json::from_str(&body).expect("InstanceInfo is JSON");
                if v["state"] == "Running" {
                    return;
                }
            }
        }
        assert!(!vmm.has_exited(), "exited:\n{}", vmm.log_text());
        assert!(t0.elapsed() < TIMEOUT, "never Running:\n{}", vmm.log_text());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One line of the metrics FIFO decoded as Kata's `FirecrackerMetrics` is: every Firecracker
/// group an object of unsigned integers (`json.Unmarshal` into `uint64` fields fails on a
/// negative or a float, and Kata drops the line).
fn decode_as_kata(line: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let mut groups = BTreeMap::new();
    for g in [
        "api_server",
        "block",
        "get_api_requests",
        "i8042",
        "latencies_us",
        "logger",
        "mmds",
        "net",
        "patch_api_requests",
        "put_api_requests",
        "rtc",
        "seccomp",
        "vcpu",
        "vmm",
        "uart",
        "signals",
        "vsock",
    ] {
        let group: BTreeMap<String, u64> = serde_json::from_value(v[g].clone())
            .unwrap_or_else(|e| panic!("group {g} does not decode as uint64s ({e}): {line}"));
        groups.insert(g.to_string(), group);
    }
    groups
}

/// The vCPU indices Kata Go's `GetThreadIDs` finds: threads whose `comm` starts `fc_vcpu`.
fn fc_vcpu_threads(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let comm =
            std::fs::read_to_string(task.expect("task").path().join("comm")).unwrap_or_default();
        if let Some(rest) = comm.trim_end().strip_prefix("fc_vcpu") {
            ids.push(rest.trim().parse().expect("Invalid fc thread info"));
        }
    }
    ids.sort_unstable();
    ids
}

/// Kata Go's `fcEnd`: SIGTERM, then SIGKILL when the process is still there 15 s later
/// (`fcStopSandboxTimeout`); Osprey must be gone, with status 0, before the SIGKILL.
fn kata_stop(vmm: &mut Vmm) {
    vmm.signal(libc::SIGTERM);
    let status = vmm.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "{}", vmm.log_text());
}

/// Kata's Go runtime (`src/runtime/virtcontainers/fc.go`), host side, one boot:
/// `checkVersion` on `--version`; `fcSetLogger` makes the log and metrics FIFOs and opens their
/// readers before the VMM starts; `fcInitConfiguration` writes `fcConfig.json` (boot source,
/// `machine-config` with `smt: false`, the read-only, non-root `rootfs` drive from
/// `fcSetVMRootfs`, the 8 zero-byte placeholders `drive_0`..`drive_7` of `createDiskPool`,
/// `logger {level: "Error"}`, `metrics`, `vsock` from `fcAddVsock`: `vsock_id: "root"`,
/// `guest_cid` 3, `uds_path` `<sandbox>/kata.hvsock`; `network-interfaces` from
/// `fcAddNetDevice`: the endpoint's name, MAC and tap, `rx_rate_limiter`/`tx_rate_limiter`
/// always sent, `{}` when no rate is set); `fcStartVM` runs `--api-sock S --config-file F` and
/// never sends InstanceStart, `waitVMMRunning` polls `GET /` every 10 ms; `StartVM` then
/// chmods the hybrid vsock socket to 0640 (an error if it is not there); the agent is dialled
/// by `HybridVSockDialer` (`pkg/agent/protocols/client/client.go`: `CONNECT 1024\n`, the reply
/// read to its newline, retried until the agent answers); `GetThreadIDs`;
/// `hotplugBlockDevice` bind-mounts the device over the placeholder's path and
/// `fcUpdateBlockDrive` PATCHes that same path (and on removal unmounts and PATCHes it again);
/// `updateMetrics`/`readMetrics` decode each line; `fcEnd` stops it.
#[test]
fn kata_go_runtime_config_file_vsock_net_hotplug_metrics_and_stop() {
    let s = Scratch::new("kata-go");
    let tap = tap_or_not_run(1);
    let fc = firecracker_in(&s.0);
    let out = output_within(
        {
            let mut c = Command::new(&fc);
            c.arg("--version");
            c
        },
        TIMEOUT,
    );
    assert!(out.status.success(), "checkVersion needs exit 0");
    // checkVersion: the first line's second field, less a leading `v`, a semver ≥ 0.21.1.
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let version = first
        .split(' ')
        .nth(1)
        .unwrap_or("")
        .trim_start_matches('v');
    let parts: Vec<u64> = version
        .split('.')
        .map(|p| p.parse().expect("semver"))
        .collect();
    assert!(parts.as_slice() >= [0, 21, 1].as_slice(), "{first}");

    // fcSetLogger: the FIFOs, and the readers opened first (O_RDONLY|O_NONBLOCK).
    let (log_fifo, metrics_fifo) = (s.0.join("logs.fifo"), s.0.join("metrics.fifo"));
    mkfifo(&log_fifo);
    mkfifo(&metrics_fifo);
    let open_reader = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
            .expect("reader")
    };
    let _log_reader = open_reader(&log_fifo);
    let metrics_reader = open_reader(&metrics_fifo);

    let rootfs = s.sparse("rootfs.img", 1 << 20);
    let mut drives = vec![json!({
        "drive_id": "rootfs", "path_on_host": rootfs,
        "is_read_only": true, "is_root_device": false,
    })];
    for i in 0..8 {
        // createDiskPool: `os.Create` of a placeholder, zero bytes.
        let p = s.0.join(format!("drive_{i}"));
        File::create(&p).expect("placeholder");
        drives.push(json!({
            "drive_id": format!("drive_{i}"), "path_on_host": p,
            "is_read_only": false, "is_root_device": false,
        }));
    }
    // The agent's stand-in: vsock echo on kata-agent's port 1024, ping answers on the tap.
    let ip = tap
        .as_ref()
        .map(|t| format!(" ip={}", t.guest_ip))
        .unwrap_or_default();
    let hvsock = s.0.join("kata.hvsock");
    let mut config = json!({
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": format!("console=ttyS0 reboot=k panic=1 pci=off mode=agent port=1024{ip}")},
        "drives": drives,
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128, "smt": false},
        "logger": {"log_path": log_fifo, "level": "Error"},
        "metrics": {"metrics_path": metrics_fifo},
        "vsock": {"guest_cid": 3, "uds_path": hvsock, "vsock_id": "root"},
    });
    if let Some(tap) = &tap {
        config["network-interfaces"] = json!([{
            "iface_id": "eth0", "guest_mac": tap.guest_mac, "host_dev_name": tap.name,
            "rx_rate_limiter": {}, "tx_rate_limiter": {},
        }]);
    }
    let cfg = s.file("fcConfig.json", &config.to_string());
    let sock = s.0.join("firecracker.socket");
    let mut vmm = Vmm::spawn_program_in(
        &fc,
        &s.0,
        [
            "--api-sock".as_ref(),
            sock.as_os_str(),
            "--config-file".as_ref(),
            cfg.as_os_str(),
        ],
    );
    poll_running(&mut vmm, &sock);
    // StartVM: "make sure 'others' don't have access to this socket".
    std::fs::set_permissions(&hvsock, std::fs::Permissions::from_mode(0o640))
        .unwrap_or_else(|e| panic!("chmod {}: {e}\n{}", hvsock.display(), vmm.log_text()));
    assert_eq!(fc_vcpu_threads(vmm.pid()), [0]);
    // HybridVSockDialer: CONNECT 1024, the reply read to its newline (10 s handshake timeout).
    let (agent, reply, _) = dial(
        &hvsock,
        "CONNECT 1024\n",
        Duration::from_secs(10),
        Duration::from_millis(50),
        |r| r.contains("OK"),
    );
    assert!(reply.starts_with("OK "), "{reply:?}");
    echoes(agent, 64 << 10);
    let ready = vmm.wait_console(TIMEOUT, |l| l.contains("agent ready"));
    assert_eq!(
        ready.map(|l| l.text),
        Some(format!(
            "osprey-test-guest: agent ready vsock=1 net={} kbd=0",
            u8::from(tap.is_some())
        )),
        "{}",
        vmm.log_text()
    );
    if let Some(tap) = &tap {
        let (_, shown) = api_call(&sock, "GET", "/vm/config", None);
        let nic = &shown["network-interfaces"][0];
        assert_eq!(nic["host_dev_name"], json!(tap.name), "{shown}");
        pings(tap);
    }

    let (_, d) = api_call(&sock, "GET", "/drives/drive_0", None);
    assert_eq!(d["capacity_bytes"], 0, "a zero-byte placeholder: {d}");
    // hotplugBlockDevice: the device bind-mounted over drive_0's path, the same path PATCHed.
    let device = s.sparse("container.img", 1 << 20);
    let placeholder = s.0.join("drive_0");
    let bind = |args: &[&Path]| {
        let st = Command::new("mount").args(args).status();
        st.map(|s| s.success()).unwrap_or(false)
    };
    let mounted = bind(&[Path::new("--bind"), &device, &placeholder]);
    // Unmounted (lazily) even when an assertion below fails: no mount outlives the test.
    struct Unmount<'a>(&'a Path, bool);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = Command::new("umount").arg("--lazy").arg(self.0).status();
            }
        }
    }
    let mut guard = Unmount(&placeholder, mounted);
    if !mounted {
        // No mount here (not root, or no mount namespace): swap the file under the name instead.
        std::fs::rename(&device, &placeholder).expect("rename over the placeholder");
    }
    let body = json!({"drive_id": "drive_0", "path_on_host": placeholder}).to_string();
    let (st, reply) = api_call(&sock, "PATCH", "/drives/drive_0", Some(&body));
    assert_eq!(st, 204, "{reply}");
    let (_, d) = api_call(&sock, "GET", "/drives/drive_0", None);
    assert_eq!(d["capacity_bytes"], 1 << 20, "the size re-read: {d}");
    // Removal (`hotplugRemoveDevice`): unmounted with MNT_DETACH (the VMM still holds the
    // device open), then the placeholder's path PATCHed again (back to 0 bytes).
    if mounted {
        guard.1 = false;
        assert!(Command::new("umount")
            .arg("--lazy")
            .arg(&placeholder)
            .status()
            .expect("umount")
            .success());
    } else {
        File::create(&placeholder).expect("placeholder again");
    }
    let (st, reply) = api_call(&sock, "PATCH", "/drives/drive_0", Some(&body));
    assert_eq!(st, 204, "{reply}");
    let (_, d) = api_call(&sock, "GET", "/drives/drive_0", None);
    assert_eq!(d["capacity_bytes"], 0, "the placeholder again: {d}");

    // readMetrics: lines from the FIFO, from the periodic flush (nobody asks for one).
    let mut lines = BufReader::new(metrics_reader);
    let mut decoded = 0;
    let t0 = Instant::now();
    let mut buf = String::new();
    while decoded < 2 {
        buf.clear();
        match lines.read_line(&mut buf) {
            Ok(n) if n > 0 && buf.ends_with('\n') => {
                decode_as_kata(buf.trim_end());
                decoded += 1;
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
        assert!(t0.elapsed() < TIMEOUT, "no periodic metrics line");
    }
    kata_stop(&mut vmm);
}

/// Kata's runtime-rs (`src/runtime-rs/crates/hypervisor/src/firecracker/`): `--api-sock S`
/// (with `--no-seccomp` when `disable_seccomp`), the binary named `firecracker`; every request
/// through `request_with_retry` (`fc_api.rs`: any error or non-2xx retried, 500 times, 10 ms
/// apart, from before the socket exists); `prepare_vmm_resources`: `PUT /boot-source`,
/// `/machine-config` `{mem_size_mib, vcpu_count}`, `/drives/rootfs` (read-only, not root),
/// the zero-byte placeholders `drive1`..`drive5` (`DISK_POOL_SIZE` 6); `prepare_hvsock`
/// (`fc_api.rs`): the socket file removed, `PUT /vsock {"guest_cid": 3, "uds_path":
/// "<vm_path>/kata.hvsock", "vsock_id": "root"}`; the devices queued before the VMM was ready
/// (`inner_device.rs` `add_device`): `add_net_device` (`PUT /network-interfaces/eth0` with
/// `guest_mac: null` when the endpoint has none) and `add_hvsock` (`PUT /vsock` again, the same
/// path: Firecracker drops the first socket and binds anew); then InstanceStart
/// (`inner_hypervisor.rs` `start_vm`); the agent dialled by `HybridVsock::connect`
/// (`crates/agent/src/sock/hybrid_vsock.rs` `connect_helper`: a lower-case `connect 1024\n`,
/// one line read, `OK` somewhere in it, retried); `patch_container_rootfs` PATCHes `driveN`
/// with its `rate_limiter` (null when unset, or a bucket whose `one_time_burst` is null). The
/// end of the VMM's stderr is the VM's end.
#[test]
fn kata_runtime_rs_puts_vsock_twice_net_handshake_patches_and_exit() {
    let s = Scratch::new("kata-rs");
    let tap = tap_or_not_run(2);
    let fc = firecracker_in(&s.0);
    let sock = s.0.join("firecracker.socket");
    let mut vmm = Vmm::spawn_program_in(&fc, &s.0, ["--api-sock".as_ref(), sock.as_os_str()]);
    // request_with_retry, counting the attempts each request needed.
    let mut attempts = Vec::new();
    let mut send = |method: &str, uri: &str, body: Value| {
        let body = body.to_string();
        for n in 1..=500 {
            match vmm::api::client::request(&sock, method, uri, Some(&body)) {
                Ok((st, _)) if (200..300).contains(&st) => {
                    attempts.push((uri.to_string(), n));
                    return;
                }
                Ok((st, reply)) => panic!("{method} {uri}: {st} {reply}"),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        panic!("{method} {uri}: After 500 attempts, it still doesn't work.");
    };
    // The kernel in the VM's folder, as runtime-rs's jailed layout puts it (`get_resource`):
    // with its sandbox on, Osprey takes the API's paths from the socket's folder only. The
    // guest stands in for kata-agent (port 1024), resets on Ctrl+Alt+Del, answers ping.
    let ip = tap
        .as_ref()
        .map(|t| format!(" ip={}", t.guest_ip))
        .unwrap_or_default();
    let kernel = s.0.join("vmlinux");
    std::fs::copy(test_guest(), &kernel).expect("kernel");
    send(
        "PUT",
        "/boot-source",
        json!({"kernel_image_path": kernel,
               "boot_args": format!("pci=off iommu=off reboot=k panic=1 mode=agent kbd=1 port=1024{ip}")}),
    );
    send(
        "PUT",
        "/machine-config",
        json!({"mem_size_mib": 128, "vcpu_count": 1}),
    );
    let rootfs = s.sparse("rootfs.img", 1 << 20);
    send(
        "PUT",
        "/drives/rootfs",
        json!({"drive_id": "rootfs", "path_on_host": rootfs,
               "is_root_device": false, "is_read_only": true}),
    );
    let root = s.0.join("root");
    std::fs::create_dir_all(&root).expect("root");
    for i in 1..6 {
        let p = root.join(format!("drive{i}"));
        File::create(&p).expect("placeholder");
        send(
            "PUT",
            &format!("/drives/drive{i}"),
            json!({"drive_id": format!("drive{i}"), "path_on_host": p,
                   "is_root_device": false, "is_read_only": false}),
        );
    }
    // prepare_hvsock, then the queued devices: add_net_device, add_hvsock.
    let hvsock = s.0.join("kata.hvsock");
    let _ = std::fs::remove_file(&hvsock);
    let vsock = json!({"guest_cid": 3, "uds_path": hvsock, "vsock_id": "root"});
    send("PUT", "/vsock", vsock);
    if let Some(tap) = &tap {
        send(
            "PUT",
            "/network-interfaces/eth0",
            json!({"iface_id": "eth0", "guest_mac": null, "host_dev_name": tap.name}),
        );
    }
    send(
        "PUT",
        "/vsock",
        json!({"vsock_id": "root", "guest_cid": 3, "uds_path": hvsock}),
    );
    send("PUT", "/actions", json!({"action_type": "InstanceStart"}));
    // connect_helper: lower-case `connect 1024`, `OK` anywhere in the line.
    let (agent, reply, _) = dial(
        &hvsock,
        "connect 1024\n",
        TIMEOUT,
        Duration::from_millis(10),
        |r| r.contains("OK"),
    );
    assert!(reply.starts_with("OK "), "{reply:?}");
    echoes(agent, 64 << 10);
    if let Some(tap) = &tap {
        pings(tap);
    }
    // patch_container_rootfs: the container's rootfs behind drive1, no limits configured.
    // The device where runtime-rs's jailed layout puts it (`get_resource` bind-mounts it into
    // the VM's `root`): beside the placeholders (see docs/orchestration.md for the unjailed).
    let container = s.sparse("root/container.img", 4 << 20);
    send(
        "PATCH",
        "/drives/drive1",
        json!({"drive_id": "drive1", "path_on_host": container, "rate_limiter": null}),
    );
    let second = s.sparse("root/container2.img", 1 << 20);
    send(
        "PATCH",
        "/drives/drive2",
        json!({"drive_id": "drive2", "path_on_host": second,
               "rate_limiter": {"bandwidth": {"size": 1048576, "one_time_burst": null,
                                              "refill_time": 1000},
                                "ops": null}}),
    );
    assert!(
        attempts.iter().skip(1).all(|(_, n)| *n == 1),
        "only the first request may wait for the socket: {attempts:?}"
    );
    assert!(
        vmm.wait_console(TIMEOUT, |l| l.contains("kbd ready"))
            .is_some(),
        "{}",
        vmm.log_text()
    );
    let (_, d) = api_call(&sock, "GET", "/drives/drive2", None);
    assert_eq!(d["rate_limiter"]["bandwidth"]["size"], 1048576, "{d}");
    // The guest reboots (`reboot=k`: Ctrl+Alt+Del makes the test guest reset through the
    // i8042, as Linux does): Osprey exits 0 within 5 s, and its stderr ends (runtime-rs's
    // sign that the VM is gone).
    let (st, _) = api_call(
        &sock,
        "PUT",
        "/actions",
        Some(r#"{"action_type": "SendCtrlAltDel"}"#),
    );
    assert_eq!(st, 204);
    let status = vmm.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{}", vmm.log_text());
}

/// firecracker-containerd (`runtime/service.go`): the shim starts the binary in its folder with
/// `--api-sock firecracker.sock --id <vmID>` (`buildVMConfiguration`/`newFirecrackerCmd`, a
/// relative socket path) and configures it through the go-sdk's handlers in their order: the
/// log and metrics FIFOs it `mkfifo`s and nobody reads (`PUT /logger`, `PUT /metrics`), the
/// machine config with its default `cpu_template: "T2"` (`config/config.go`
/// `defaultCPUTemplate`), the boot source with its default kernel args, the root drive and a
/// 512-byte stub drive (`createStubDrives`), the agent's vsock (`VsockDevices` with `ID:
/// "agent_api"`, `Path: "firecracker.vsock"` relative to the shim's folder and `CID` left at 0:
/// `PUT /vsock {"guest_cid": 0, ...}`), InstanceStart; the agent dialled at once and until it
/// answers (`internal/vm/vsock.go` `VSockDial`: every 100 ms, `tryConnect` writes `CONNECT
/// 10789\n` within 100 ms, a failed write fatal, then waits 1 s for a line starting `OK `,
/// never closing before it reads it; here bounded at 60 s); `GET /` state checks around
/// `PauseVM`/`ResumeVM`; the container's image swapped behind the stub (`UpdateGuestDrive`,
/// `PATCH /drives/{id}`, a path relative to the shim's folder), seen by the guest; the agent's
/// connection echoes; `StopVM`'s `Shutdown` (Ctrl+Alt+Del; the guest resets as Linux with
/// `reboot=k`) and the VMM's exit, 0, within 5 s. The test guest reads the stub, then (its
/// `hang=3`) stands in for the agent on port 10789: the dial waits for it, as the shim's does
/// for a booting guest.
#[test]
fn firecracker_containerd_shim_relative_socket_fifos_t2_stub_vsock_swap() {
    const STUB_TAG: u32 = 20;
    const IMAGE_TAG: u32 = 21;
    let s = Scratch::new("fc-ctrd");
    let fc = firecracker_in(&s.0);
    let vm_id = "3d6f2f85-ctrd";
    mkfifo(&s.0.join("fc-logs.fifo"));
    mkfifo(&s.0.join("fc-metrics.fifo"));
    // Nobody reads them; filled before Osprey writes, so each line it writes is one it must
    // drop (EAGAIN) without blocking, and count.
    let full_fifo = |name: &str| {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(s.0.join(name))
            .expect("fifo");
        let chunk = [b'#'; 4096];
        for _ in 0..1024 {
            if std::io::Write::write(&mut f, &chunk).is_err() {
                break;
            }
        }
        f
    };
    let _log_fifo = full_fifo("fc-logs.fifo");
    let mut metrics_fifo = full_fifo("fc-metrics.fifo");
    let mut vmm =
        Vmm::spawn_program_in(&fc, &s.0, ["--api-sock", "firecracker.sock", "--id", vm_id]);
    let sock = s.0.join("firecracker.sock");
    vmm.wait_for_socket(&sock, TIMEOUT);
    let put = |path: &str, body: Value| api_call(&sock, "PUT", path, Some(&body.to_string()));
    // Nobody reads these FIFOs: at Debug, the log alone fills one; Osprey must not block.
    assert_eq!(
        put(
            "/logger",
            json!({"log_path": "fc-logs.fifo", "level": "Debug",
                   "show_level": true, "show_log_origin": true})
        )
        .0,
        204
    );
    assert_eq!(
        put("/metrics", json!({"metrics_path": "fc-metrics.fifo"})).0,
        204
    );
    let machine = json!({"vcpu_count": 1, "mem_size_mib": 128, "smt": false,
                         "cpu_template": "T2"});
    let (st, reply) = put("/machine-config", machine);
    assert_eq!(st, 400, "T2 is refused: {reply}");
    let msg = reply["fault_message"].as_str().unwrap_or_default();
    for want in [
        "cpu_template",
        "T2",
        "\"None\"",
        "firecracker-runtime.json",
        "\"\"",
    ] {
        assert!(
            msg.contains(want),
            "`{msg}` does not say what to set: lacks {want}"
        );
    }
    // What the operator sets instead: `"cpu_template": ""`, which the go-sdk leaves out.
    let machine = json!({"vcpu_count": 1, "mem_size_mib": 128, "smt": false});
    assert_eq!(put("/machine-config", machine).0, 204);
    let args = format!(
        "console=ttyS0 noapic reboot=k panic=1 pci=off nomodules rw \
         mode=blk dev=1 rw=stamp bs=512 qd=1 queues=1 count=4000000000 \
         stamp_until={IMAGE_TAG} timeout_ms=20000 hang=3 port=10789 kbd=1"
    );
    std::fs::copy(test_guest(), s.0.join("vmlinux")).expect("kernel");
    assert_eq!(
        put(
            "/boot-source",
            json!({"kernel_image_path": "vmlinux", "boot_args": args})
        )
        .0,
        204
    );
    s.sparse("rootfs.img", 1 << 20);
    assert_eq!(
        put(
            "/drives/root_drive",
            json!({"drive_id": "root_drive", "path_on_host": "rootfs.img",
                   "is_root_device": true, "is_read_only": false})
        )
        .0,
        204
    );
    // createStubDrives: 512 bytes each (here stamped, so the guest can tell it from the image).
    write_stamp_file(&s.0.join("ctrstub0"), STUB_TAG, 512);
    assert_eq!(
        put(
            "/drives/ctrstub0",
            json!({"drive_id": "ctrstub0", "path_on_host": "ctrstub0",
                   "is_root_device": false, "is_read_only": false})
        )
        .0,
        204
    );
    // AddVsocksHandler: the go-sdk's VsockDevice with its CID left at 0.
    let (st, reply) = put(
        "/vsock",
        json!({"guest_cid": 0, "uds_path": "firecracker.vsock", "vsock_id": "agent_api"}),
    );
    assert_eq!(st, 204, "{reply}");
    assert_eq!(
        put("/actions", json!({"action_type": "InstanceStart"})).0,
        204
    );
    // The shim dials its agent as soon as the VM starts (VSockDial, tryConnect).
    let uds = s.0.join("firecracker.vsock");
    let agent = std::thread::spawn(move || {
        let t0 = Instant::now();
        let (conn, reply, attempts) = dial(
            &uds,
            "CONNECT 10789\n",
            Duration::from_secs(1),
            Duration::from_millis(100),
            |r| r.starts_with("OK "),
        );
        (conn, reply, attempts, t0.elapsed())
    });
    let seen = vmm.wait_console(TIMEOUT, |l| {
        l.starts_with(&format!("osprey-test-guest: stamp tag={STUB_TAG} "))
    });
    assert!(seen.is_some(), "{}\n{}", vmm.console_text(), vmm.log_text());
    let (_, info) = api_call(&sock, "GET", "/", None);
    assert_eq!(
        (info["id"].as_str(), info["state"].as_str()),
        (Some(vm_id), Some("Running"))
    );
    let patch_vm = |state: &str| {
        let body = json!({ "state": state }).to_string();
        api_call(&sock, "PATCH", "/vm", Some(&body)).0
    };
    assert_eq!(patch_vm("Paused"), 204);
    assert_eq!(api_call(&sock, "GET", "/", None).1["state"], "Paused");
    assert_eq!(patch_vm("Resumed"), 204);
    assert_eq!(api_call(&sock, "GET", "/", None).1["state"], "Running");

    // The drops, counted: a reader comes at last (after a periodic line was dropped), takes
    // the filler, asks for a flush and decodes the lines. Each line counts the drops since the
    // line before it (Firecracker's deltas), and the periodic lines computed while the FIFO was
    // full were dropped with what they counted: so the log's drops are looked for in the lines
    // written after the drain, and a pause and resume (each logged, the log FIFO still full)
    // make some after it.
    std::thread::sleep(Duration::from_millis(1500));
    let mut junk = vec![0u8; 1 << 16];
    while std::io::Read::read(&mut metrics_fifo, &mut junk).is_ok_and(|n| n > 0) {}
    assert_eq!(patch_vm("Paused"), 204);
    assert_eq!(patch_vm("Resumed"), 204);
    assert_eq!(
        put("/actions", json!({"action_type": "FlushMetrics"})).0,
        204
    );
    let mut text = Vec::new();
    let t0 = Instant::now();
    while !text.ends_with(b"\n") {
        match std::io::Read::read(&mut metrics_fifo, &mut junk) {
            Ok(n) => text.extend_from_slice(&junk[..n]),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
        assert!(t0.elapsed() < TIMEOUT, "no flushed line");
    }
    let text = String::from_utf8_lossy(&text).into_owned();
    let lines: Vec<_> = text.lines().map(decode_as_kata).collect();
    let sum = |field: &str| lines.iter().map(|g| g["logger"][field]).sum::<u64>();
    assert!(sum("missed_metrics_count") > 0, "{text}");
    assert!(sum("missed_log_count") > 0, "{text}");

    // UpdateGuestDrive: the container's image behind the stub; the guest sees it.
    write_stamp_file(&s.0.join("image.img"), IMAGE_TAG, 64 << 10);
    let body = json!({"drive_id": "ctrstub0", "path_on_host": "image.img"}).to_string();
    let (st, reply) = api_call(&sock, "PATCH", "/drives/ctrstub0", Some(&body));
    assert_eq!(st, 204, "{reply}");
    let line = vmm
        .wait_console(TIMEOUT, |l| {
            l.starts_with(&format!("osprey-test-guest: stamp tag={IMAGE_TAG} "))
        })
        .unwrap_or_else(|| panic!("no new tag:\n{}", vmm.log_text()))
        .text;
    assert!(
        line.contains(&format!("capacity_bytes={} ", 64 << 10)),
        "{line}"
    );
    assert!(!line.ends_with("config_changes=0"), "{line}");
    // The agent answered once the guest served its port (CID 0, as configured).
    let (conn, reply, attempts, took) = agent.join().expect("the dialer");
    assert!(reply.ends_with('\n'), "{reply:?}");
    println!("CONNECT 10789: {reply:?} after {attempts} attempt(s), {took:?}");
    echoes(conn, 64 << 10);
    assert!(
        vmm.console_text().contains("VSOCK ready cid=0 port=10789"),
        "{}",
        vmm.console_text()
    );
    // StopVM: Shutdown (SendCtrlAltDel); the guest resets, Osprey exits 0 within 5 s.
    assert_eq!(
        put("/actions", json!({"action_type": "SendCtrlAltDel"})).0,
        204
    );
    let status = vmm.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{}", vmm.log_text());
}

/// A copy of `src` at `dst`, its folder made.
fn copy_into(src: &Path, dst: &Path) {
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::copy(src, dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
}

/// The shared libraries `binary` loads (`ldd`), by absolute path.
fn shared_libraries(binary: &Path) -> Vec<PathBuf> {
    let out = output_within(
        {
            let mut c = Command::new("ldd");
            c.arg(binary);
            c
        },
        TIMEOUT,
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// firecracker-containerd's runc jailer (`runtime/runc_jailer.go` `BuildJailedRootHandler`,
/// `/etc/containerd/firecracker-runc-config.json`): the VMM binary, kernel and drives copied
/// into a root folder, paths given relative to it, runc running the binary there as a
/// non-root uid with no capabilities, the only devices `/dev/kvm` and `/dev/net/tun`. Done here
/// as runc does it, before exec: a mount namespace with `/proc`, chroot, every capability
/// dropped from the bounding set, no new privileges, then an unprivileged uid and gid. The
/// socket is in the jail's root (`/api.sock`): Osprey takes `/` as the socket's folder only
/// there (a root owned by its non-root uid). Osprey is linked against
/// glibc, so its libraries are copied too (Firecracker's musl build needs none).
#[test]
fn as_runc_jails_it_unprivileged_in_a_chroot() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    const UID: u32 = 61_054;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("NOT RUN: building the jail (mknod, chroot, setuid) needs root");
        return;
    }
    let s = Scratch::new("runc-jail");
    let root = s.0.join("rootfs");
    copy_into(&common::osprey(), &root.join("firecracker"));
    for lib in shared_libraries(&common::osprey()) {
        copy_into(&lib, &root.join(lib.strip_prefix("/").expect("absolute")));
    }
    copy_into(&test_guest(), &root.join("vmlinux"));
    std::fs::write(root.join("rootfs.img"), vec![0u8; 1 << 20]).expect("drive");
    std::fs::create_dir_all(root.join("dev/net")).expect("dev");
    for (name, minor) in [("dev/kvm", 232), ("dev/net/tun", 200)] {
        let path = std::ffi::CString::new(root.join(name).as_os_str().as_bytes()).expect("path");
        // SAFETY: `path` is a valid NUL-terminated path; mknod only creates a device node.
        let rc = unsafe {
            libc::mknod(
                path.as_ptr(),
                libc::S_IFCHR | 0o660,
                libc::makedev(10, minor),
            )
        };
        assert_eq!(rc, 0, "mknod {name}: {}", std::io::Error::last_os_error());
        // SAFETY: as above; chown only changes the node's owner.
        let rc = unsafe { libc::chown(path.as_ptr(), UID, UID) };
        assert_eq!(rc, 0, "chown {name}");
    }
    for p in [&root, &root.join("rootfs.img")] {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path");
        // SAFETY: `c` is a valid NUL-terminated path; chown only changes the owner.
        let rc = unsafe { libc::chown(c.as_ptr(), UID, UID) };
        assert_eq!(rc, 0, "chown");
    }
    std::fs::create_dir_all(root.join("proc")).expect("proc");
    let root_c = std::ffi::CString::new(root.as_os_str().as_bytes()).expect("path");
    let proc_c = std::ffi::CString::new(root.join("proc").as_os_str().as_bytes()).expect("path");
    let mut cmd = Command::new("/firecracker");
    cmd.args(["--api-sock", "api.sock", "--id", "jailed-vm"]);
    // SAFETY: between fork and exec the closure calls only async-signal-safe syscalls on
    // memory prepared before the fork (`root_c`).
    unsafe {
        cmd.pre_exec(move || {
            let check = |rc: libc::c_int| {
                if rc == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            // runc's container: its own mount namespace with /proc mounted (the OCI default
            // spec's mounts), which leaves the host's mounts alone when the process ends.
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"proc".as_ptr(),
                proc_c.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ))?;
            check(libc::chroot(root_c.as_ptr()))?;
            check(libc::chdir(c"/".as_ptr()))?;
            for cap in 0..64 {
                // EINVAL past the last capability this kernel knows.
                libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(UID))?;
            check(libc::setuid(UID))?;
            Ok(())
        });
    }
    let mut vmm = Vmm::spawn_command(&mut cmd);
    let sock = root.join("api.sock");
    vmm.wait_for_socket(&sock, TIMEOUT);
    let status = std::fs::read_to_string(format!("/proc/{}/status", vmm.pid())).expect("status");
    for (key, want) in [
        ("Uid:", format!("{UID}\t{UID}\t{UID}\t{UID}")),
        ("CapEff:", "0000000000000000".into()),
        ("CapPrm:", "0000000000000000".into()),
        ("CapBnd:", "0000000000000000".into()),
    ] {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap_or("");
        assert_eq!(line[key.len()..].trim(), want, "{key}");
    }
    let put = |path: &str, body: Value| api_call(&sock, "PUT", path, Some(&body.to_string()));
    let steps = [
        (
            "/boot-source",
            json!({"kernel_image_path": "vmlinux", "boot_args": "mode=report"}),
        ),
        (
            "/drives/rootfs",
            json!({"drive_id": "rootfs", "path_on_host": "rootfs.img",
                   "is_root_device": true, "is_read_only": false}),
        ),
        (
            "/machine-config",
            json!({"vcpu_count": 1, "mem_size_mib": 128}),
        ),
        ("/actions", json!({"action_type": "InstanceStart"})),
    ];
    for (path, body) in steps {
        let (st, reply) = put(path, body);
        assert_eq!(st, 204, "{path}: {reply}\n{}", vmm.log_text());
    }
    let status = vmm.wait_exit(TIMEOUT);
    let console = vmm.console_text();
    assert!(console.contains("REPORT "), "{console}\n{}", vmm.log_text());
    assert_eq!(status.code(), Some(0), "{}", vmm.log_text());
}
