//! Firecracker's way to start a VM: `osprey --api-sock S` with no config, configured by PUTs and
//! booted by `InstanceStart`, on one live test guest (root drive first, `root=` added and
//! `pci=off` removed, a failed start answered and corrected, pause/resume as Firecracker
//! answers them, metrics and log files from the API); a stop signal before any start; and the
//! pre-boot sandbox: paths outside the socket's folder and `--allow-folder`s refused, the API
//! and main threads filtered before any start (`--sandbox off` keeps neither).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::blk::Disk;
use common::{api_call as call, test_guest, Vmm};
use serde_json::{json, Value};

fn put(sock: &Path, path: &str, body: Value) {
    let (st, reply) = call(sock, "PUT", path, Some(&body.to_string()));
    assert_eq!(st, 204, "PUT {path} {body}: {reply}");
    assert!(reply.is_null(), "204 without a body: {reply}");
}

fn fault(sock: &Path, method: &str, path: &str, body: Value) -> String {
    let (st, reply) = call(sock, method, path, Some(&body.to_string()));
    assert_eq!(st, 400, "{method} {path} {body}: {reply}");
    reply["fault_message"]
        .as_str()
        .expect("fault_message")
        .to_string()
}

fn spawn(dir: &Path, id: &str, extra: &[&std::ffi::OsStr]) -> (Vmm, PathBuf) {
    let sock = dir.join("api.sock");
    let mut args = vec![
        "--api-sock".as_ref(),
        sock.as_os_str(),
        "--id".as_ref(),
        id.as_ref(),
    ];
    args.extend_from_slice(extra);
    let mut vmm = Vmm::spawn(args);
    vmm.wait_for_socket(&sock, Duration::from_secs(10));
    (vmm, sock)
}

/// `--allow-folder DIR` for each of `dirs`.
fn allow(dirs: &[&Path]) -> Vec<std::ffi::OsString> {
    dirs.iter()
        .flat_map(|d| ["--allow-folder".into(), d.as_os_str().to_owned()])
        .collect()
}

#[test]
fn configured_over_the_api_then_started() {
    let root = Disk::new("preboot-root", 8 << 20);
    let data = Disk::new("preboot-data", 4 << 20);
    // The kernel and the data disk lie outside the socket's folder: the operator allows them.
    let guest = test_guest();
    let kernel_dir = guest.parent().expect("the kernel's folder");
    let allowed = allow(&[kernel_dir, &data.dir]);
    let extra: Vec<&std::ffi::OsStr> = allowed.iter().map(|a| a.as_os_str()).collect();
    let (mut vmm, s) = spawn(&root.dir, "pre-1", &extra);
    let s = s.as_path();

    // Before any PUT: Firecracker's defaults, and the state "Not started".
    let (st, m) = call(s, "GET", "/machine-config", None);
    assert_eq!(st, 200, "{m}");
    assert_eq!(
        (m["vcpu_count"].as_u64(), m["mem_size_mib"].as_u64()),
        (Some(1), Some(128))
    );
    let (_, info) = call(s, "GET", "/", None);
    assert_eq!(
        (
            info["id"].as_str(),
            info["state"].as_str(),
            info["app_name"].as_str()
        ),
        (Some("pre-1"), Some("Not started"), Some("Osprey"))
    );
    let (_, v) = call(s, "GET", "/version", None);
    assert!(v["firecracker_version"].is_string(), "{v}");

    // A start without a kernel, then with a kernel that is not there: 400, and still serving.
    let start = json!({"action_type": "InstanceStart"});
    let m = fault(s, "PUT", "/actions", start.clone());
    assert!(m.contains("PUT /boot-source"), "{m}");
    put(
        s,
        "/boot-source",
        json!({"kernel_image_path": root.dir.join("no-such-kernel")}),
    );
    let m = fault(s, "PUT", "/actions", start.clone());
    assert!(
        m.contains("kernel_image_path") && m.contains("no-such-kernel"),
        "{m}"
    );
    assert!(fault(s, "PATCH", "/vm", json!({"state": "Paused"})).contains("has not started"));
    assert!(
        fault(s, "PUT", "/vsock", json!({"guest_cid": 2, "uds_path": "v"}))
            .contains("vsock.guest_cid")
    );

    // What the go-sdk sends, in its order (the root drive last), plus Osprey's own sections.
    let log = root.dir.join("osprey.log");
    let metrics = root.dir.join("metrics.json");
    put(
        s,
        "/logger",
        json!({"level": "Info", "log_path": log, "show_level": true, "show_log_origin": false}),
    );
    put(s, "/metrics", json!({"metrics_path": metrics}));
    put(
        s,
        "/machine-config",
        json!({"vcpu_count": 1, "mem_size_mib": 128}),
    );
    let args = "mode=blk rw=verify count=400 qd=4 hang=2 pci=off";
    put(
        s,
        "/boot-source",
        json!({"kernel_image_path": test_guest(), "boot_args": args}),
    );
    put(
        s,
        "/iothreads/fast",
        json!({"id": "fast", "poll_policy": "Weighted"}),
    );
    put(
        s,
        "/drives/1",
        json!({"drive_id": "1", "path_on_host": data.path,
        "is_root_device": false, "is_read_only": true, "iothread": "fast"}),
    );
    put(
        s,
        "/drives/rootfs",
        json!({"drive_id": "rootfs", "path_on_host": root.path,
        "is_root_device": true, "is_read_only": false, "io_engine": "Async"}),
    );
    let m = fault(
        s,
        "PUT",
        "/drives/x",
        json!({"drive_id": "y", "path_on_host": "/d"}),
    );
    assert_eq!(m, "drive_id: `y` differs from the path's id `x`");
    put(s, "/actions", start.clone());

    // The root drive is the first device, whose serial the guest reports.
    let blk = vmm.wait_console(Duration::from_secs(60), |l| l.starts_with("BLK "));
    let blk: Value = serde_json::from_str(&blk.expect("BLK line").text[4..]).expect("BLK json");
    assert_eq!(blk["serial"], "rootfs", "{blk}");
    assert_eq!(blk["failures"], 0, "{blk}");

    let (_, config) = call(s, "GET", "/vm/config", None);
    let boot_args = config["boot-source"]["boot_args"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        boot_args,
        "mode=blk rw=verify count=400 qd=4 hang=2 root=/dev/vda rw"
    );
    assert_eq!(config["drives"][0]["drive_id"], "rootfs");
    assert_eq!(
        config["drives"][0]["io_engine"], "Auto",
        "Firecracker's Async is Auto"
    );
    assert_eq!(config["drives"][1]["iothread"], "fast");
    assert_eq!(call(s, "GET", "/", None).1["state"], "Running");

    // Running: the pre-boot routes are refused; pause and resume as Firecracker answers them.
    let m = fault(
        s,
        "PUT",
        "/machine-config",
        json!({"vcpu_count": 2, "mem_size_mib": 128}),
    );
    assert!(m.contains("only allowed before InstanceStart"), "{m}");
    assert!(fault(s, "PUT", "/actions", start).contains("already running"));
    for (state, shown) in [
        ("Paused", "Paused"),
        ("Paused", "Paused"),
        ("Resumed", "Running"),
        ("Resumed", "Running"),
    ] {
        let (st, reply) = call(
            s,
            "PATCH",
            "/vm",
            Some(&json!({"state": state}).to_string()),
        );
        assert_eq!(st, 204, "PATCH /vm {state}: {reply}");
        assert_eq!(call(s, "GET", "/", None).1["state"], shown);
    }
    let lines = |p: &Path| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = lines(&metrics);
    put(s, "/actions", json!({"action_type": "FlushMetrics"}));
    assert!(lines(&metrics) > before, "FlushMetrics wrote a line");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("pci=off removed"),
        "the log file has the start's lines:\n{logged}"
    );

    vmm.signal(libc::SIGTERM);
    vmm.wait_exit(Duration::from_secs(10));
    assert!(!s.exists(), "the socket is removed at exit");
}

#[test]
fn a_stop_signal_before_the_start_ends_osprey_and_removes_the_socket() {
    let dir = Disk::new("preboot-signal", 1 << 20);
    let (mut vmm, sock) = spawn(&dir.dir, "pre-2", &[]);
    assert_eq!(call(&sock, "GET", "/", None).1["state"], "Not started");
    vmm.signal(libc::SIGTERM);
    let status = vmm.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "a stop asked for is a clean stop");
    assert!(
        vmm.log_text().contains("received signal 15"),
        "{}",
        vmm.log_text()
    );
    assert!(!sock.exists(), "socket removed");
}

#[test]
fn paths_outside_the_allowed_folders_are_refused_before_the_start() {
    let dir = Disk::new("preboot-paths", 1 << 20);
    let other = Disk::new("preboot-other", 1 << 20);
    let allowed = Disk::new("preboot-allowed", 1 << 20);

    // The socket's folder alone: a log file in /etc is refused, naming the field and the folder.
    let evil = Path::new("/etc/osprey-evil.log");
    let (mut vmm, s) = spawn(&dir.dir, "pre-3", &[]);
    let (st, reply) = call(
        &s,
        "PUT",
        "/logger",
        Some(&json!({"log_path": evil}).to_string()),
    );
    let created = evil.exists();
    if created {
        let _ = std::fs::remove_file(evil);
    }
    assert!(!created, "a file was created in /etc");
    assert_eq!(st, 400, "{reply}");
    let m = reply["fault_message"].as_str().unwrap_or_default();
    let socket_folder = format!("{} (API socket's folder)", dir.dir.display());
    assert!(
        m.starts_with("log_path: /etc/osprey-evil.log: outside") && m.contains(&socket_folder),
        "{m}"
    );
    vmm.signal(libc::SIGTERM);
    vmm.wait_exit(Duration::from_secs(5));

    // With a folder allowed: the message names both; other paths are refused the same way.
    let flags = allow(&[&allowed.dir]);
    let extra: Vec<&std::ffi::OsStr> = flags.iter().map(|a| a.as_os_str()).collect();
    let (mut vmm, s) = spawn(&dir.dir, "pre-3", &extra);
    let m = fault(&s, "PUT", "/logger", json!({"log_path": evil}));
    let operator_folder = format!("{} (--allow-folder)", allowed.dir.display());
    assert!(
        m.starts_with("log_path: /etc/osprey-evil.log: outside")
            && m.contains(&socket_folder)
            && m.contains(&operator_folder),
        "{m}"
    );
    assert!(!evil.exists(), "nothing created in /etc");
    for (path, body, field) in [
        (
            "/metrics",
            json!({"metrics_path": "/dev/null"}),
            "metrics_path",
        ),
        (
            "/metrics",
            json!({"metrics_path": other.dir.join("m.json")}),
            "metrics_path",
        ),
        (
            "/boot-source",
            json!({"kernel_image_path": other.path}),
            "kernel_image_path",
        ),
        (
            "/drives/rootfs",
            json!({"drive_id": "rootfs", "path_on_host": other.path, "is_root_device": true,
                   "is_read_only": false}),
            "path_on_host",
        ),
        (
            "/snapshot/load",
            json!({"snapshot_path": other.dir.join("state.snap"),
                   "mem_file_path": dir.dir.join("mem.snap")}),
            "snapshot_path",
        ),
    ] {
        let m = fault(&s, "PUT", path, body.clone());
        assert!(
            m.contains(&format!("{field}: "))
                && m.contains("outside")
                && m.contains(&socket_folder),
            "PUT {path} {body}: {m}"
        );
    }
    // A symlink in the socket's folder that leads out of it is refused too.
    let link = dir.dir.join("out");
    std::os::unix::fs::symlink(&other.dir, &link).expect("symlink");
    let m = fault(
        &s,
        "PUT",
        "/logger",
        json!({"log_path": link.join("x.log")}),
    );
    assert!(m.starts_with("log_path: "), "{m}");
    assert!(!other.dir.join("x.log").exists());
    // In the socket's folder and in an allowed one: taken.
    put(
        &s,
        "/logger",
        json!({"log_path": dir.dir.join("osprey.log")}),
    );
    put(
        &s,
        "/metrics",
        json!({"metrics_path": allowed.dir.join("m.json")}),
    );
    put(
        &s,
        "/drives/rootfs",
        json!({"drive_id": "rootfs", "path_on_host": allowed.path, "is_root_device": true,
               "is_read_only": false}),
    );
    vmm.signal(libc::SIGTERM);
    vmm.wait_exit(Duration::from_secs(5));
}

/// `Seccomp`, `CapEff` and `NoNewPrivs` of the threads named `api` and of the main thread.
fn preboot_threads(pid: u32) -> (Vec<String>, Vec<String>) {
    let fields = |status: &str| -> Vec<String> {
        status
            .lines()
            .filter(|l| {
                ["Seccomp:", "CapEff:", "NoNewPrivs:"]
                    .iter()
                    .any(|f| l.starts_with(f))
            })
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    let mut api = Vec::new();
    let mut main = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        if comm.trim() == "api" {
            api = fields(&status);
        } else if task.file_name().to_string_lossy() == pid.to_string() {
            main = fields(&status);
        }
    }
    (api, main)
}

#[test]
fn the_api_and_main_threads_are_confined_before_the_start() {
    let dir = Disk::new("preboot-confined", 1 << 20);
    let (mut vmm, s) = spawn(&dir.dir, "pre-4", &[]);
    assert_eq!(call(&s, "GET", "/", None).1["state"], "Not started");
    let (api, main) = preboot_threads(vmm.pid());
    for want in ["Seccomp: 2", "NoNewPrivs: 1", "CapEff: 0000000000000000"] {
        assert!(api.iter().any(|f| f == want), "api thread: {api:?}");
    }
    assert!(
        main.iter().any(|f| f == "Seccomp: 2"),
        "main thread: {main:?}"
    );
    assert!(vmm
        .log_text()
        .contains("pre-boot: sandbox on (API thread confined"));
    vmm.signal(libc::SIGTERM);
    assert_eq!(vmm.wait_exit(Duration::from_secs(5)).code(), Some(0));

    // --sandbox off: today's freedom (any path, no filter).
    let off = Disk::new("preboot-off", 1 << 20);
    let elsewhere = Disk::new("preboot-off-log", 1 << 20);
    let (mut vmm, s) = spawn(&off.dir, "pre-5", &["--sandbox".as_ref(), "off".as_ref()]);
    assert_eq!(call(&s, "GET", "/", None).1["state"], "Not started");
    let (api, main) = preboot_threads(vmm.pid());
    assert!(api.iter().any(|f| f == "Seccomp: 0"), "{api:?}");
    assert!(main.iter().any(|f| f == "Seccomp: 0"), "{main:?}");
    let log = elsewhere.dir.join("osprey.log");
    put(&s, "/logger", json!({"log_path": log}));
    assert!(log.exists(), "the log file is created anywhere");
    vmm.signal(libc::SIGTERM);
    vmm.wait_exit(Duration::from_secs(5));
}

#[test]
fn a_forbidden_syscall_before_the_start_ends_osprey_as_at_run_time() {
    // The tests' sandbox probe (debug builds) makes the thread execve /bin/true.
    for (probe, thread) in [("api", "api"), ("preboot-main", "main")] {
        let dir = Disk::new(&format!("preboot-probe-{probe}"), 1 << 20);
        let mut cmd = std::process::Command::new(common::osprey());
        cmd.arg("--api-sock")
            .arg(dir.dir.join("api.sock"))
            .env("OSPREY_TEST_SANDBOX_PROBE", probe)
            .stdin(std::process::Stdio::null());
        let out = common::output_within(cmd, Duration::from_secs(10));
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(159), "{probe}: {log}");
        let expected = format!("osprey: seccomp: thread {thread} made forbidden syscall 59");
        assert!(log.contains(&expected), "`{expected}` in:\n{log}");
    }
}

/// Firecracker's getting-started guide, its `curl` lines verbatim (curl's own, `--unix-socket`,
/// `--data` and no `-H`, so curl says `application/x-www-form-urlencoded`) run by bash against
/// Osprey with the guide's variables set to the test guest and a disk: Firecracker's codes, 204 for
/// each, the network interface's too (a tap of the test's own name, which Osprey creates as root
/// and which goes away with it)).
/// Without curl the test installs nothing and says NOT RUN.
#[test]
fn firecrackers_getting_started_curl_lines() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!("NOT RUN: curl is not installed (Debian's `curl` package)");
        return;
    }
    let root = Disk::new("fc-guide", 8 << 20);
    let guest = test_guest();
    let kernel_dir = guest.parent().expect("the kernel's folder");
    let allowed = allow(&[kernel_dir]);
    let extra: Vec<&std::ffi::OsStr> = allowed.iter().map(|a| a.as_os_str()).collect();
    let (mut vmm, sock) = spawn(&root.dir, "fc-guide", &extra);
    // Each curl's status code after its output, through curl's config file: the lines stay as
    // the guide has them.
    std::fs::write(
        root.dir.join(".curlrc"),
        "write-out = \"\\nHTTP_CODE=%{http_code}\\n\"\nsilent\n",
    )
    .expect("curlrc");
    let variables = format!(
        "sudo() {{ \"$@\"; }}\n\
         API_SOCKET={sock:?}\n\
         LOGFILE={log:?}\n\
         KERNEL={kernel:?}\n\
         KERNEL_BOOT_ARGS=\"console=ttyS0 reboot=k panic=1 pci=off mode=halt\"\n\
         ROOTFS={rootfs:?}\n\
         TAP_DEV=\"ospfg{tap}\"\n",
        sock = sock.display().to_string(),
        tap = std::process::id() % 100_000,
        log = root.dir.join("firecracker.log").display().to_string(),
        kernel = guest.display().to_string(),
        rootfs = root.path.display().to_string(),
    );
    // From Firecracker's docs/getting-started.md ("Set log file" to "Start microVM").
    let guide = r#"
# Create log file
touch $LOGFILE

# Set log file
sudo curl -X PUT --unix-socket "${API_SOCKET}" \
    --data "{
        \"log_path\": \"${LOGFILE}\",
        \"level\": \"Debug\",
        \"show_level\": true,
        \"show_log_origin\": true
    }" \
    "http://localhost/logger"

# Set boot source
sudo curl -X PUT --unix-socket "${API_SOCKET}" \
    --data "{
        \"kernel_image_path\": \"${KERNEL}\",
        \"boot_args\": \"${KERNEL_BOOT_ARGS}\"
    }" \
    "http://localhost/boot-source"

# Set rootfs
sudo curl -X PUT --unix-socket "${API_SOCKET}" \
    --data "{
        \"drive_id\": \"rootfs\",
        \"path_on_host\": \"${ROOTFS}\",
        \"is_root_device\": true,
        \"is_read_only\": false
    }" \
    "http://localhost/drives/rootfs"

# The IP address of a guest is derived from its MAC address with
# `fcnet-setup.sh`, this has been pre-configured in the guest rootfs. It is
# important that `TAP_IP` and `FC_MAC` match this.
FC_MAC="06:00:AC:10:00:02"

# Set network interface
sudo curl -X PUT --unix-socket "${API_SOCKET}" \
    --data "{
        \"iface_id\": \"net1\",
        \"guest_mac\": \"$FC_MAC\",
        \"host_dev_name\": \"$TAP_DEV\"
    }" \
    "http://localhost/network-interfaces/net1"

# API requests are handled asynchronously, it is important the configuration is
# set, before `InstanceStart`.
sleep 0.015s

# Start microVM
sudo curl -X PUT --unix-socket "${API_SOCKET}" \
    --data "{
        \"action_type\": \"InstanceStart\"
    }" \
    "http://localhost/actions"
"#;
    let out = common::output_within(
        {
            let mut c = std::process::Command::new("bash");
            c.arg("-c")
                .arg(format!("{variables}{guide}"))
                .env("CURL_HOME", &root.dir)
                .current_dir(&root.dir);
            c
        },
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let codes: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("HTTP_CODE="))
        .collect();
    assert_eq!(
        codes,
        ["204", "204", "204", "204", "204"],
        "logger, boot-source, rootfs, network, InstanceStart:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ready = vmm.wait_console(Duration::from_secs(30), |l| l == "osprey-test-guest: ready");
    assert!(ready.is_some(), "guest not ready:\n{}", vmm.log_text());
    let (st, info) = call(&sock, "GET", "/", None);
    assert_eq!(
        (st, info["state"].as_str()),
        (200, Some("Running")),
        "{info}"
    );
    let log = std::fs::read_to_string(root.dir.join("firecracker.log")).unwrap_or_default();
    assert!(!log.is_empty(), "the logger's file stays empty");
}
