//! Firecracker's own files, flags and tools against Osprey (issue 50): config files of
//! Firecracker v1.16.1's shape (`examples/firecracker/`) boot unchanged from their folder under
//! `--config-file`, their relative paths taken from the working directory; a real value for a
//! feature Osprey lacks is refused naming it; Firecracker's flags; with no socket flag the API is
//! on `/run/firecracker.socket`; and what Kata's Go runtime (`src/runtime/virtcontainers/fc.go`,
//! `fc_metrics.go`) does with a Firecracker binary, done as its code does it: the `--version`
//! parse, the vCPU thread match, the metrics line decoded into its struct.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::scratch::Scratch;
use common::{output_within, test_guest, Vmm};
use serde::Deserialize;

const TIMEOUT: Duration = Duration::from_secs(30);

fn examples() -> PathBuf {
    common::repo_root().join("examples/firecracker")
}

/// `osprey ARGS` run in `dir` to its end.
fn run_in(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(common::osprey());
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    output_within(cmd, TIMEOUT)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn report(console: &str) -> serde_json::Value {
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("REPORT "))
        .unwrap_or_else(|| panic!("no REPORT line:\n{console}"));
    serde_json::from_str(line).expect("REPORT is JSON")
}

/// `firecracker` in a scratch folder: a symlink to the binary under test, as an operator
/// names Osprey for Firecracker's tools.
fn as_firecracker(scratch: &Scratch) -> PathBuf {
    let link = scratch.0.join("firecracker");
    std::os::unix::fs::symlink(common::osprey(), &link).expect("symlink");
    link
}

#[test]
fn firecrackers_vm_config_boots_unchanged_from_its_folder() {
    test_guest();
    common::example_disk();
    let out = run_in(
        &examples(),
        &["--config-file", "vm_config.json", "--no-api"],
    );
    let (console, log) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{console}\n{log}");
    assert_eq!(report(&console)["cpus"], 2, "{console}");
    // Firecracker takes the paths from the working directory: elsewhere they name nothing.
    let file = examples().join("vm_config.json");
    let out = run_in(
        &std::env::temp_dir(),
        &["--config-file", file.to_str().expect("utf-8"), "--no-api"],
    );
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("boot-source.kernel_image_path: "), "{log}");
}

/// Kata's `FirecrackerMetrics` groups the runtime reads most, field by field (`uint64` each in
/// its Go struct, which `json.Unmarshal` fills; a line that does not decode is dropped).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct KataMetrics {
    api_server: BTreeMap<String, u64>,
    block: KataBlock,
    vcpu: KataVcpu,
    vmm: KataVmm,
    seccomp: KataSeccomp,
    signals: KataSignals,
    latencies_us: BTreeMap<String, u64>,
    get_api_requests: BTreeMap<String, u64>,
    put_api_requests: BTreeMap<String, u64>,
    patch_api_requests: BTreeMap<String, u64>,
    i8042: BTreeMap<String, u64>,
    logger: BTreeMap<String, u64>,
    mmds: BTreeMap<String, u64>,
    net: BTreeMap<String, u64>,
    rtc: BTreeMap<String, u64>,
    uart: BTreeMap<String, u64>,
    vsock: BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct KataBlock {
    activate_fails: u64,
    cfg_fails: u64,
    no_avail_buffer: u64,
    event_fails: u64,
    execute_fails: u64,
    invalid_reqs_count: u64,
    flush_count: u64,
    queue_event_count: u64,
    rate_limiter_event_count: u64,
    update_count: u64,
    update_fails: u64,
    read_bytes: u64,
    write_bytes: u64,
    read_count: u64,
    write_count: u64,
    rate_limiter_throttled_events: u64,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct KataVcpu {
    exit_io_in: u64,
    exit_io_out: u64,
    exit_mmio_read: u64,
    exit_mmio_write: u64,
    failures: u64,
    filter_cpuid: u64,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct KataVmm {
    device_events: u64,
    panic_count: u64,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct KataSeccomp {
    num_faults: u64,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct KataSignals {
    sigbus: u64,
    sigsegv: u64,
}

/// Every section of Firecracker 1.16.1's config shape, a `logger` and `metrics` with relative
/// paths, run from the file's folder with `--boot-timer`: the guest boots, the log goes to the
/// logger's file (with the boot timer's line), and each metrics line decodes as Kata decodes it.
#[test]
fn every_section_boots_with_its_logger_metrics_and_boot_timer() {
    test_guest();
    common::example_disk();
    let dir = examples();
    let (log_file, metrics_file) = (
        dir.join("firecracker-example.log"),
        dir.join("firecracker-example.metrics"),
    );
    let _ = std::fs::remove_file(&log_file);
    let _ = std::fs::remove_file(&metrics_file);
    let out = run_in(
        &dir,
        &["--config-file", "full.json", "--no-api", "--boot-timer"],
    );
    let console = text(&out.stdout);
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    let metrics = std::fs::read_to_string(&metrics_file).unwrap_or_default();
    let _ = std::fs::remove_file(&log_file);
    let _ = std::fs::remove_file(&metrics_file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{console}\n{}\n{log}",
        text(&out.stderr)
    );
    assert_eq!(report(&console)["cpus"], 1);
    assert!(
        log.contains("Guest-boot-time = "),
        "the boot timer's line:\n{log}"
    );
    assert!(
        log.contains("DEBUG"),
        "the logger's level and show_level:\n{log}"
    );
    let lines: Vec<&str> = metrics.lines().collect();
    assert!(!lines.is_empty(), "no metrics line");
    let mut port_writes = 0;
    for line in lines {
        let kata: KataMetrics = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("Kata's decode fails ({e}): {line}"));
        // Each line carries the change since the one before: summed, the guest's port writes.
        port_writes += kata.vcpu.exit_io_out;
        let own: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(
            own["drives"][0]["drive_id"], "rootfs",
            "Osprey's own keys stay"
        );
    }
    assert!(
        port_writes > 0,
        "the guest's serial output counts as port writes"
    );
}

#[test]
fn a_real_value_for_an_absent_feature_is_refused_naming_it() {
    let s = Scratch::new("fc-absent");
    let guest = test_guest();
    let config = serde_json::json!({
        "boot-source": {"kernel_image_path": guest},
        "balloon": {"amount_mib": 1},
    });
    s.file("vm.json", &config.to_string());
    let out = run_in(&s.0, &["--config-file", "vm.json", "--no-api"]);
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains("balloon: the balloon device is not supported by Osprey"),
        "{log}"
    );
}

/// Kata's `parseVersion` and `checkVersion`: the first line's second space-separated field, a
/// leading `v` trimmed, a semantic version of at least 0.21.1; the command must exit 0.
#[test]
fn as_firecracker_the_version_passes_katas_check() {
    let s = Scratch::new("fc-version");
    let fc = as_firecracker(&s);
    let out = output_within(
        {
            let mut c = Command::new(&fc);
            c.arg("--version");
            c
        },
        TIMEOUT,
    );
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let first = stdout.split('\n').next().unwrap_or("");
    let fields: Vec<&str> = first.split(' ').collect();
    assert!(fields.len() > 1, "malformed: {stdout}");
    let version = fields[1].trim().trim_start_matches('v');
    let numbers: Vec<u64> = version
        .split(['-', '+'])
        .next()
        .unwrap_or("")
        .split('.')
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(numbers.len(), 3, "MAJOR.MINOR.PATCH: {version}");
    assert!(
        (numbers[0], numbers[1], numbers[2]) >= (0, 21, 1),
        "{version}"
    );
    assert!(stdout.contains("Osprey"), "says what it is: {stdout}");
    let own = run_in(&s.0, &["--version"]);
    assert!(text(&own.stdout).starts_with("osprey 0.1.0 "), "{own:?}");
}

/// Kata's `GetThreadIDs`: the VMM's threads whose `comm` starts with `fc_vcpu`, split after it
/// into exactly two parts, the rest trimmed and parsed as the vCPU index.
#[test]
fn as_firecracker_katas_thread_match_finds_every_vcpu() {
    let s = Scratch::new("fc-threads");
    let fc = as_firecracker(&s);
    let guest = test_guest();
    let mut vmm = Vmm::spawn_program(
        &fc,
        [
            "--kernel".as_ref(),
            guest.as_os_str(),
            "--cpus".as_ref(),
            "2".as_ref(),
            "--cmdline".as_ref(),
            "mode=kbd".as_ref(),
        ],
        Stdio::piped(),
    );
    assert!(
        vmm.wait_console(TIMEOUT, |l| l.contains("kbd ready"))
            .is_some(),
        "{}\n{}",
        vmm.console_text(),
        vmm.log_text()
    );
    // Kata looks once the VM runs; the guest's vCPU 0 may print before vCPU 1 exists.
    vmm.wait_log_count("Started ", 1);
    let mut vcpus = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", vmm.pid())).expect("tasks") {
        let task = task.expect("task").path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        let comm = comm.trim_end_matches('\n');
        if !comm.starts_with("fc_vcpu") {
            continue;
        }
        let parts: Vec<&str> = comm.splitn(2, "fc_vcpu").collect();
        assert_eq!(parts.len(), 2, "Invalid fc thread info: {comm}");
        let id: i32 = parts[1].trim().parse().expect("Invalid fc thread info");
        vcpus.insert(id, task.file_name().map(|n| n.to_owned()));
    }
    assert_eq!(
        vcpus.keys().copied().collect::<Vec<_>>(),
        [0, 1],
        "{vcpus:?}"
    );
    vmm.signal(libc::SIGTERM);
    assert_eq!(vmm.wait_exit(TIMEOUT).code(), Some(0));
}

#[test]
fn the_snapshot_format_flags_print_and_exit() {
    let s = Scratch::new("fc-snapver");
    let out = run_in(&s.0, &["--snapshot-version"]);
    assert!(out.status.success());
    let version = text(&out.stdout);
    assert!(version.starts_with('v'), "{version}");
    // A state file's header: magic, format version, body length, CRC, then the writer's
    // version (a postcard string).
    let format: u32 = version[1..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("v<format>");
    let mut header = b"OSPREYSN".to_vec();
    header.extend_from_slice(&format.to_le_bytes());
    header.extend_from_slice(&6u64.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    header.extend_from_slice(b"\x050.1.0");
    let state = s.0.join("state.snap");
    std::fs::write(&state, &header).expect("write");
    let out = run_in(&s.0, &["--describe-snapshot", "state.snap"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("v{format} (written by Osprey 0.1.0)")
    );
    std::fs::write(&state, b"#!/bin/sh\necho not a snapshot at all\n").expect("write");
    let out = run_in(&s.0, &["--describe-snapshot", "state.snap"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not an Osprey snapshot"),
        "{out:?}"
    );
}

#[test]
fn the_api_payload_limit_is_the_flags() {
    let s = Scratch::new("fc-payload");
    let sock = s.0.join("api.sock");
    let mut vmm = Vmm::spawn([
        "--api-sock".as_ref(),
        sock.as_os_str(),
        "--http-api-max-payload-size".as_ref(),
        "100".as_ref(),
    ]);
    vmm.wait_for_socket(&sock, TIMEOUT);
    let small = r#"{"vcpu_count": 1, "mem_size_mib": 64}"#;
    let (st, _) = common::api_call(&sock, "PUT", "/machine-config", Some(small));
    assert_eq!(st, 204);
    let large = format!(
        r#"{{"vcpu_count": 1, "mem_size_mib": 64, "smt": false{}}}"#,
        " ".repeat(100)
    );
    let (st, reply) = common::api_call(&sock, "PUT", "/machine-config", Some(&large));
    assert_eq!(st, 413, "{reply}");
}

/// Firecracker started with no socket flag serves `/run/firecracker.socket`; so does Osprey.
#[test]
fn with_no_flag_the_api_is_on_firecrackers_socket() {
    let sock = Path::new("/run/firecracker.socket");
    if std::fs::metadata("/run").is_err() || sock.exists() {
        println!("NOT RUN: /run missing, or /run/firecracker.socket held by another process");
        return;
    }
    let mut vmm = Vmm::spawn(std::iter::empty::<&str>());
    vmm.wait_for_socket(sock, TIMEOUT);
    let (st, info) = common::api_call(sock, "GET", "/", None);
    assert_eq!((st, info["state"].as_str()), (200, Some("Not started")));
    vmm.signal(libc::SIGTERM);
    assert_eq!(vmm.wait_exit(TIMEOUT).code(), Some(0), "{}", vmm.log_text());
    assert!(!sock.exists(), "the socket file is removed at exit");
}
