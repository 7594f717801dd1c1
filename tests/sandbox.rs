//! The sandbox: while the test guest does I/O, every thread of Osprey is under seccomp with
//! `no_new_privs`, without capabilities, as the user asked for and in its own namespaces; and a
//! thread of each type that tries to open a file it was not given, or to execute a program, is
//! refused (the probe compiled into test builds only, `OSPREY_TEST_SANDBOX_PROBE`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::{blk_report, osprey, run_to_exit, test_guest, Vmm};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(90);
/// 128 + SIGSYS.
const EXIT_SECCOMP: i32 = 159;
/// `execve` on x86-64.
const SYS_EXECVE: i64 = 59;
/// `setpriority` on x86-64.
const SYS_SETPRIORITY: i64 = 141;
/// `nobody` on Debian.
const NOBODY: u32 = 65534;

/// The fields of `/proc/<pid>/task/<tid>/status` the checks read, by thread name.
fn thread_status(pid: u32) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue; // the thread ended meanwhile
        };
        let fields = status
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| {
                ["Seccomp", "NoNewPrivs", "CapEff", "CapBnd", "Uid", "Gid"].contains(k)
            })
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.split_whitespace().collect::<Vec<_>>().join(" "),
                )
            })
            .collect();
        out.insert(
            format!("{} ({})", comm.trim(), t.file_name().to_string_lossy()),
            fields,
        );
    }
    out
}

fn config(s: &Scratch, vcpus: u8, args: &str, sandbox: Value) -> std::path::PathBuf {
    let disk = s.sparse("disk.img", 64 << 20);
    let cfg = json!({
        "machine-config": {"vcpu_count": vcpus, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": format!("mode=blk {args}")},
        "drives": [{"drive_id": "disk0", "path_on_host": disk, "iothread": "io0"}],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": s.0.join("api.sock")},
        "metrics": {"path": s.0.join("metrics.json"), "interval_ms": 100},
        "sandbox": sandbox,
    });
    s.file("vm.json", &cfg.to_string())
}

/// `--sandbox strict` with another user and private namespaces: every thread is confined while
/// the guest reads, the API still answers, and the run ends cleanly (socket removed, metrics
/// written, no I/O error).
#[test]
fn every_thread_is_confined_while_the_guest_does_io() {
    let s = Scratch::new("sandbox-confined");
    // The sandbox's user must be able to remove its socket at exit, as a jailer's folder would
    // let it.
    std::os::unix::fs::chown(&s.0, Some(NOBODY), Some(NOBODY)).expect("chown scratch");
    let cfg = config(
        &s,
        2,
        "rw=randread qd=8 bs=4096 count=400000",
        json!({"namespaces": true}),
    );
    let sock = s.0.join("api.sock");
    let uid = NOBODY.to_string();
    // stdin stays open, so the stdin thread lives and is checked too.
    let mut vmm = Vmm::spawn_with_stdin(
        [
            "--config".as_ref(),
            cfg.as_os_str(),
            "--sandbox".as_ref(),
            "strict".as_ref(),
            "--uid".as_ref(),
            uid.as_ref(),
            "--gid".as_ref(),
            uid.as_ref(),
        ],
        Stdio::piped(),
    );
    let pid = vmm.pid();

    // Wait for I/O to be under way, through the API (served by a sandboxed thread).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The socket may exist before the API thread serves it.
        if let Ok((200, text)) = vmm::api::client::request(&sock, "GET", "/drives/disk0", None) {
            let drive: Value = serde_json::from_str(&text).unwrap_or_default();
            if drive["requests"].as_u64().unwrap_or(0) > 1000 {
                break;
            }
        }
        assert!(
            !vmm.has_exited(),
            "osprey exited before the check:\n{}",
            vmm.log_text()
        );
        assert!(
            Instant::now() < deadline,
            "no I/O within 30 s (last answer {:?}):\n{}",
            vmm::api::client::request(&sock, "GET", "/drives/disk0", None),
            vmm.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let threads = thread_status(pid);
    let log = vmm.log_text();
    let names: Vec<&str> = threads
        .keys()
        .map(|k| k.split(' ').next().unwrap_or(""))
        .collect();
    for expected in ["osprey", "vcpu0", "vcpu1", "iothread-io0", "api", "stdin"] {
        assert!(names.contains(&expected), "{expected} in {threads:#?}");
    }
    let nobody = format!("{NOBODY} {NOBODY} {NOBODY} {NOBODY}");
    for (name, f) in &threads {
        let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("?");
        assert_eq!(field("Seccomp"), "2", "{name}: {f:?}");
        assert_eq!(field("NoNewPrivs"), "1", "{name}: {f:?}");
        assert_eq!(field("CapEff"), "0000000000000000", "{name}: {f:?}");
        assert_eq!(field("CapBnd"), "0000000000000000", "{name}: {f:?}");
        assert_eq!(field("Uid"), nobody, "{name}: {f:?}");
        assert_eq!(field("Gid"), nobody, "{name}: {f:?}");
    }
    for ns in ["mnt", "ipc", "uts", "net"] {
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).expect("our ns");
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).expect("osprey's ns");
        assert_ne!(ours, theirs, "{ns} namespace is private");
    }

    let status = vmm.wait_exit(TIMEOUT);
    let log_end = vmm.log_text();
    assert_eq!(status.code(), Some(0), "{log_end}");
    let r = blk_report(&vmm);
    let main = common::blk::run(&r, "main");
    assert_eq!(main["errors"], 0, "{r}");
    assert_eq!(main["requests"], 400000, "{r}");
    assert!(
        log.contains("sandbox: strict: seccomp on all 5 thread types, Landlock ABI")
            && log.contains("fully enforced")
            && log.contains("uid 65534 gid 65534")
            && log.contains("namespaces mount+ipc+uts+net"),
        "the start-up line says what is in force:\n{log}"
    );
    assert!(!sock.exists(), "the socket is removed at exit:\n{log_end}");
    let metrics = std::fs::read_to_string(s.0.join("metrics.json")).expect("metrics");
    assert!(metrics.lines().count() >= 2, "metrics lines:\n{metrics}");
    assert!(
        !log_end.contains("WARN") && !log_end.contains("ERROR"),
        "a clean log:\n{log_end}"
    );
}

/// Runs Osprey with the probe aimed at `kind`; returns (exit code, console, log).
fn probe(kind: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let s = Scratch::new(&format!("sandbox-probe-{kind}"));
    let cfg = config(&s, 1, "rw=read count=64", json!({}));
    let mut cmd = std::process::Command::new(osprey());
    cmd.arg("--config")
        .arg(&cfg)
        .args(extra)
        .env("OSPREY_TEST_SANDBOX_PROBE", kind)
        .stdin(Stdio::null());
    let out = common::output_within(cmd, TIMEOUT);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A thread of each type, once in its sandbox, cannot open a file it was not given (Landlock,
/// or seccomp's `EACCES` on `openat`) and dies on `execve` (seccomp), before the guest runs.
#[test]
fn each_thread_type_is_refused_other_files_and_killed_on_exec() {
    for (kind, thread) in [
        ("vcpu", "vcpu0"),
        ("iothread", "iothread-io0"),
        ("api", "api"),
        ("control", "main"),
        ("stdin", "stdin"),
    ] {
        let (code, console, log) = probe(kind, &[]);
        let open = format!(
            "osprey: sandbox probe: thread {thread}: open /etc/hostname: Permission denied"
        );
        assert!(log.contains(&open), "{kind}: `{open}` in:\n{log}");
        let killed =
            format!("osprey: seccomp: thread {thread} made forbidden syscall {SYS_EXECVE}");
        assert!(log.contains(&killed), "{kind}: `{killed}` in:\n{log}");
        assert_eq!(code, Some(EXIT_SECCOMP), "{kind}:\n{log}");
        assert!(
            !console.contains("BLK "),
            "{kind}: the guest did not get to run:\n{console}"
        );
    }
}

/// The iothread may set its own nice within 0-19 (dynamic thread weights), even where it kept
/// `CAP_SYS_NICE` for that, but a nice above the default is a seccomp kill.
#[test]
fn the_iothread_may_lighten_itself_but_not_raise_its_priority() {
    let (code, console, log) = probe("iothread-nice", &[]);
    let thread = "iothread-io0";
    let light = format!("osprey: sandbox probe: thread {thread}: nice 19: allowed");
    assert!(log.contains(&light), "`{light}` in:\n{log}");
    let killed =
        format!("osprey: seccomp: thread {thread} made forbidden syscall {SYS_SETPRIORITY}");
    assert!(log.contains(&killed), "`{killed}` in:\n{log}");
    assert_eq!(code, Some(EXIT_SECCOMP), "{log}");
    assert!(
        !console.contains("BLK "),
        "the guest did not run:\n{console}"
    );
}

/// Without seccomp, Landlock alone still refuses the file and the execution, and the VM runs;
/// with the whole sandbox off, both succeed (the probe's `execve` replaces Osprey by
/// /bin/true), which shows the probe can tell.
#[test]
fn landlock_refuses_alone_and_sandbox_off_refuses_nothing() {
    let (code, console, log) = probe("iothread", &["--seccomp", "off"]);
    assert!(
        log.contains("thread iothread-io0: open /etc/hostname: Permission denied")
            && log.contains("thread iothread-io0: execve /bin/true: Permission denied"),
        "{log}"
    );
    assert_eq!(code, Some(0), "{log}");
    assert!(console.contains("BLK "), "{console}");

    let (code, console, log) = probe("iothread", &["--sandbox", "off"]);
    assert!(
        log.contains("thread iothread-io0: open /etc/hostname: allowed"),
        "{log}"
    );
    assert!(
        !log.contains("execve /bin/true:"),
        "execve returned instead of replacing the process:\n{log}"
    );
    assert_eq!(code, Some(0), "/bin/true's exit:\n{log}");
    assert!(!console.contains("BLK "), "{console}");
}

/// Bad sandbox settings are refused before boot, naming the field.
#[test]
fn a_user_without_a_group_is_refused_by_name() {
    let s = Scratch::new("sandbox-config");
    let cfg = config(&s, 1, "rw=read count=16", json!({}));
    let (status, _, log) = run_to_exit(
        [
            "--config".as_ref(),
            cfg.as_os_str(),
            "--uid".as_ref(),
            "1000".as_ref(),
        ],
        TIMEOUT,
    );
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("sandbox.gid"), "{log}");
    assert!(Path::new(&cfg).exists());
}
