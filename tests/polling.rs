//! Adaptive polling end to end, with the test guest driving the disk natively from ring 3: at
//! QD1 polling removes most guest kicks (the thread watches the ring with notifications
//! suppressed), and an idle guest lets the window collapse so the thread sleeps and its CPU stays
//! low. Numbers come from the guest's BLK report and Osprey's `iothread stats` / `drive stats` /
//! `CPU time by thread` log lines.

mod common;

use common::blk::{boot_with, drive_stats, run, Disk};
use serde_json::{json, Value};

/// These tests measure timing-sensitive behaviour on a 2-core machine: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn iothread_stats(log: &str) -> Value {
    let line = log
        .lines()
        .find_map(|l| l.split_once("iothread stats ").map(|(_, j)| j))
        .unwrap_or_else(|| panic!("no iothread stats in the log:\n{log}"));
    serde_json::from_str(line).expect("iothread stats JSON")
}

/// CPU milliseconds of the thread named `name` from the `CPU time by thread` log line.
fn thread_cpu_ms(log: &str, name: &str) -> f64 {
    let line = log
        .lines()
        .find(|l| l.contains("CPU time by thread: "))
        .expect("CPU line");
    let part = line
        .split(", ")
        .find(|p| p.contains(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in {line}"));
    part.rsplit(' ')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad CPU entry `{part}`"))
}

#[test]
fn polling_removes_most_kicks_at_qd1() {
    let _one_at_a_time = serial();
    let disk = Disk::new("poll-qd1", 64 << 20);
    let drive = json!({"io_engine": "Sync"});
    // Long enough (~0.5 s here) for the payoff check to finish a trial.
    let args = "rw=randread qd=1 count=100000";
    let (status, off, off_log) = boot_with(&disk, drive.clone(), json!({"poll_max_ns": 0}), args);
    assert_eq!(status, 0, "{off}\n{off_log}");
    let (status, on, on_log) = boot_with(&disk, drive, json!({}), args);
    assert_eq!(status, 0, "{on}\n{on_log}");

    let kicks_per_req = |r: &Value| {
        let m = run(r, "main");
        m["kicks"].as_f64().expect("kicks") / m["requests"].as_f64().expect("requests")
    };
    let (k_off, k_on) = (kicks_per_req(&off), kicks_per_req(&on));
    assert!(
        k_off > 0.99,
        "without polling the guest kicks for every request: {k_off}"
    );
    // Typically ~0.01-0.1 here; the bound leaves room for a loaded machine.
    assert!(
        k_on * 2.0 < k_off,
        "with polling most kicks disappear: {k_on} vs {k_off} without"
    );
    // The device saw the same: ioeventfd wake-ups per request.
    let dev = |log: &str| {
        let s = drive_stats(log);
        s["kicks"].as_f64().expect("kicks") / s["requests"].as_f64().expect("requests")
    };
    assert!(
        dev(&off_log) > 0.99 && dev(&on_log) * 2.0 < dev(&off_log),
        "device kicks/req off {} on {}",
        dev(&off_log),
        dev(&on_log)
    );
    // The guest's latency figures describe the whole run, not its first 65,536 requests: at
    // QD1 the requests' latencies are disjoint spans of the run, so their sum (mean × requests)
    // fits in it, and they cover most of it.
    for (what, r) in [("off", &off), ("on", &on)] {
        let m = run(r, "main");
        let requests = m["requests"].as_f64().expect("requests");
        let elapsed = m["elapsed_cycles"].as_f64().expect("elapsed");
        let covered = m["lat_cycles"]["mean"].as_f64().expect("mean") * requests / elapsed;
        assert!(
            (0.5..=1.0).contains(&covered),
            "polling {what}: mean latency × requests is {covered:.3} of the run: {m}"
        );
        assert_eq!(m["lat_samples"], 65536, "{m}");
    }
    let (t_off, t_on) = (iothread_stats(&off_log), iothread_stats(&on_log));
    assert_eq!(t_off["poll_max_ns"], 0);
    assert_eq!(
        t_off["stats"]["poll_hits"], 0,
        "polling off never polls: {t_off}"
    );
    assert_eq!(t_on["poll_max_ns"], 32768);
    assert_eq!(t_on["poll_policy"], "Adaptive");
    assert!(
        t_on["stats"]["poll_hits"].as_u64().unwrap_or(0) > 50_000,
        "polling found the work: {t_on}"
    );
    // The payoff check looked at least once: it compared polling with sleeping from the
    // requests the queue completed, or skipped the trial because no thread on the host waited
    // for a CPU (it read the host's run queue, through the sandbox).
    let trials = t_on["stats"]["payoff_trials"].as_u64().unwrap_or(0);
    let skips = t_on["stats"]["payoff_skips"].as_u64().unwrap_or(0);
    assert!(
        trials + skips >= 1,
        "Adaptive tried sleeping or skipped the trial at least once: {t_on}"
    );
    assert!(
        t_on["stats"]["host_runnable"].as_u64().unwrap_or(0) >= 1,
        "the iothread read the host's run queue: {t_on}"
    );
    // Dynamic thread weights (the default, where the host lets a thread come back to its
    // nice): the polling thread went light, and back at every sleeping trial segment, through
    // its seccomp filter; the thread that never polls never switched.
    let switches = |t: &Value| {
        t["stats"]["weight_switches"]
            .as_u64()
            .expect("weight_switches")
    };
    assert_eq!(
        switches(&t_off),
        0,
        "polling off stays at the base weight: {t_off}"
    );
    if on_log.contains("thread weights: Dynamic") {
        // Light while polling; back for each sleeping trial (none when every trial was skipped).
        assert!(
            switches(&t_on) > trials.min(1),
            "light while polling, back for the sleeping trial: {t_on}"
        );
    } else {
        assert!(on_log.contains("weights stay equal"), "{on_log}");
        assert_eq!(switches(&t_on), 0, "equal weights never switch: {t_on}");
    }
    assert_eq!(run(&on, "main")["errors"], 0);
}

#[test]
fn idle_guest_collapses_the_window_and_the_thread_sleeps() {
    let _one_at_a_time = serial();
    let disk = Disk::new("poll-idle", 16 << 20);
    // 300 requests, each followed by 5 ms of guest think time: ~1.5 s mostly idle.
    let args = "rw=randread qd=1 count=300 think_us=5000";
    for policy in ["Classic", "Weighted", "Adaptive"] {
        let (status, r, log) = boot_with(
            &disk,
            json!({"io_engine": "Sync"}),
            json!({"poll_policy": policy}),
            args,
        );
        assert_eq!(status, 0, "{r}\n{log}");
        let m = run(&r, "main");
        let elapsed_ms = m["elapsed_ns"].as_f64().expect("elapsed") / 1e6;
        assert!(
            elapsed_ms > 1000.0,
            "{policy}: the run should take ~1.5 s, took {elapsed_ms} ms"
        );
        let cpu_ms = thread_cpu_ms(&log, "iothread-io0");
        assert!(
            cpu_ms < 0.10 * elapsed_ms,
            "{policy}: an idle guest must not keep the iothread busy: {cpu_ms:.1} ms CPU over {elapsed_ms:.0} ms"
        );
        let t = iothread_stats(&log);
        assert_eq!(t["poll_policy"], policy);
        assert!(
            t["stats"]["poll_window_ns"].as_u64().unwrap_or(u64::MAX) <= 4_000,
            "{policy}: window collapsed: {t}"
        );
        assert!(
            t["stats"]["sleeps"].as_u64().unwrap_or(0) >= 300,
            "{policy}: the thread slept between requests: {t}"
        );
    }
}

#[test]
fn bad_poll_settings_are_refused_with_the_field_named() {
    let disk = Disk::new("poll-bad", 1 << 20);
    for (thread, want) in [
        (
            json!({"poll_weight": 0}),
            "iothreads[0].poll_weight: must be a shift from 1 to 16, got 0",
        ),
        (
            json!({"poll_max_ns": 2_000_000_000u64}),
            "iothreads[0].poll_max_ns: must be at most 1000000000, got 2000000000",
        ),
        (
            json!({"poll_policy": "Fancy"}),
            "unknown variant `Fancy`, expected one of `Classic`, `Weighted`, `Adaptive`",
        ),
    ] {
        let mut t = json!({"id": "io0"});
        if let (Some(t), Some(extra)) = (t.as_object_mut(), thread.as_object()) {
            t.extend(extra.clone());
        }
        let cfg = json!({
            "boot-source": {"kernel_image_path": common::test_guest()},
            "drives": [{"drive_id": "d", "path_on_host": disk.path, "iothread": "io0"}],
            "iothreads": [t],
        });
        let p = disk.dir.join("bad.json");
        std::fs::write(&p, cfg.to_string()).expect("write");
        let (status, _, stderr) = common::run_to_exit(
            ["--config".as_ref(), p.as_os_str()],
            std::time::Duration::from_secs(10),
        );
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(want), "want `{want}` in: {stderr}");
    }
}

/// The CPUs the kernel lets thread `comm` of `pid` run on (`Cpus_allowed_list`).
fn allowed_cpus_of(pid: u32, comm: &str) -> Option<String> {
    common::thread_file(pid, comm, "status")?
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|l| l.trim().to_string())
}

/// `iothreads[].cpu_affinity` and `machine-config.vcpu_affinity` pin the dataplane thread and
/// the vCPU: while the guest works, the kernel's view of the `iothread-io0` and `vcpu0` tasks
/// allows exactly the configured CPUs (apart, where the host has two).
#[test]
fn iothread_and_vcpu_are_pinned_to_their_configured_cpus() {
    let _one = serial();
    let allowed = vmm::affinity::allowed_cpus();
    let cpu = *allowed.last().expect("an allowed CPU");
    let vcpu_cpu = allowed[0];
    let disk = Disk::new("affinity", 16 << 20);
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 64, "vcpu_affinity": [[vcpu_cpu]]},
        "boot-source": {"kernel_image_path": common::test_guest(),
                        "boot_args": "mode=blk rw=randread bs=4096 qd=1 count=400 think_us=5000"},
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path, "io_engine": "Sync"}],
        "iothreads": [{"id": "io0", "cpu_affinity": [cpu]}],
    });
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vm = common::Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let pinned = vm.wait_console(std::time::Duration::from_secs(30), |l| l.contains("ready"));
    assert!(pinned.is_some(), "guest never ready\n{}", vm.log_text());
    let iothread = allowed_cpus_of(vm.pid(), "iothread-io0");
    let vcpu = allowed_cpus_of(vm.pid(), "vcpu0");
    let status = vm.wait_exit(std::time::Duration::from_secs(60));
    let log = vm.log_text();
    assert_eq!(
        iothread,
        Some(cpu.to_string()),
        "the iothread's CPUs\n{log}"
    );
    assert_eq!(vcpu, Some(vcpu_cpu.to_string()), "the vCPU's CPUs\n{log}");
    assert!(
        log.contains(&format!("iothread io0: pinned to CPUs {cpu}")),
        "{log}"
    );
    assert!(
        log.contains(&format!("vCPU 0: pinned to CPUs {vcpu_cpu}")),
        "{log}"
    );
    assert!(status.success(), "{log}");
}

/// `machine-config.thread_placement` `Apart` (the default): a NIC's iothread without
/// `cpu_affinity` (`net`) keeps off the CPU its working vCPU runs on (pinned here, so the test
/// knows which); the vsock device's (`io0`, the first) and a drive's (`zdisk`) stay the
/// scheduler's.
#[test]
fn a_nics_iothread_keeps_off_the_cpu_its_vcpu_runs_on() {
    let _one = serial();
    let allowed = vmm::affinity::allowed_cpus();
    if allowed.len() < 2 {
        eprintln!("skipped: Osprey may use one CPU here, none to keep apart on");
        return;
    }
    let Some(tap) = common::tap::TestTap::create(0) else {
        eprintln!("NOT RUN: cannot create a tap (needs root and /dev/net/tun)");
        return;
    };
    if !common::tap::have_ping() {
        eprintln!("NOT RUN: no iputils ping");
        return;
    }
    let vcpu_cpu = allowed[0];
    let disk = Disk::new("apart", 16 << 20);
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 64, "vcpu_affinity": [[vcpu_cpu]]},
        "boot-source": {"kernel_image_path": common::test_guest(),
                        "boot_args": format!("mode=net-echo ip={}", tap.guest_ip)},
        "iothreads": [{"id": "io0"}, {"id": "net"}, {"id": "zdisk"}],
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path, "iothread": "zdisk"}],
        "network-interfaces": [{"iface_id": "eth0", "host_dev_name": tap.name,
                                "guest_mac": tap.guest_mac, "iothread": "net"}],
        "vsock": {"guest_cid": 3, "uds_path": disk.dir.join("v.sock")},
    });
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vm = common::Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = vm.wait_console(std::time::Duration::from_secs(30), |l| {
        l.contains("net-echo ready")
    });
    assert!(ready.is_some(), "guest never ready\n{}", vm.log_text());
    let want = vmm::affinity::describe(&allowed[1..]);
    let mut net = None;
    // Echoes keep the NIC's iothread turning (it looks every 10 ms while it works).
    for _ in 0..50 {
        let (sent, got, out) = common::tap::ping(
            &["-c", "20", "-i", "0.002", "-W", "1", "-q"],
            &tap.guest_ip,
            std::time::Duration::from_secs(10),
        );
        assert!(sent > 0 && got > 0, "no echo:\n{out}\n{}", vm.log_text());
        net = allowed_cpus_of(vm.pid(), "iothread-net");
        if net.as_deref() == Some(want.as_str()) {
            break;
        }
    }
    let vsock_thread = allowed_cpus_of(vm.pid(), "iothread-io0");
    let disk_thread = allowed_cpus_of(vm.pid(), "iothread-zdisk");
    let log = vm.log_text();
    let all = Some(vmm::affinity::describe(&allowed));
    assert_eq!(net, Some(want), "the NIC's iothread's CPUs\n{log}");
    assert_eq!(
        vsock_thread, all,
        "the vsock's iothread is the scheduler's\n{log}"
    );
    assert_eq!(
        disk_thread, all,
        "a drive's iothread is the scheduler's\n{log}"
    );
    assert!(
        log.contains("iothread net: keeps off the CPUs its vCPUs run on"),
        "{log}"
    );
    assert!(!log.contains("iothread io0: keeps off"), "{log}");
    assert!(!log.contains("iothread zdisk: keeps off"), "{log}");
}
