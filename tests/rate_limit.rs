//! Rate limiting end to end with the test guest, which times its own requests: an ops limit and
//! a bandwidth limit hold the guest to their rate (at most 3 % above it, at most 20 % below: a
//! loaded host only slows the guest), a one-time burst is spent first and once, a group's limit
//! binds a drive that names it, and on one running VM a throttled queue costs its iothread
//! almost no CPU while `PATCH` raises and then removes the limit (the rate the API's counters
//! show follows each change within 100 ms).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::blk::{boot_with, drive_stats, run, run_config, Disk};
use common::{api_call as call, api_patch, test_guest, Vmm};
use serde_json::{json, Value};

/// These tests time rates on a 2-core host: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `size` tokens per `refill_ms` ms.
fn bucket(size: u64, refill_ms: u64) -> Value {
    json!({"size": size, "refill_time": refill_ms})
}

/// Whether a measured rate holds to the limit `want`: at most `above` over it (the limit holds:
/// 3 % for the guest's own timing, 5 % for the API's counters sampled by the host) and at most
/// 20 % below. A host that stalls the guest or the iothread only ever slows the guest (a stall
/// longer than a refill loses that refill's tokens): shared hosts measured 4,627 against 5,000
/// and, with another build running, 5,314 against 6,000. The bucket's arithmetic is exact (its
/// unit tests); the lower bound here catches a limiter that throttles by more than a stall can
/// explain (half the rate, a refill missed every time).
fn holds_to(got: f64, want: f64, above: f64) -> bool {
    (want * 0.80..=want * (1.0 + above)).contains(&got)
}

/// Boots with `drive` merged into the drive; checks a clean run and returns (main run, stats).
fn limited_run(disk: &Disk, drive: Value, args: &str) -> (Value, Value) {
    let (status, r, log) = boot_with(disk, drive, json!({}), args);
    assert_eq!(status, 0, "{r}\n{log}");
    let m = run(&r, "main").clone();
    assert_eq!(
        (m["errors"].as_u64(), m["timed_out"].as_bool()),
        (Some(0), Some(false)),
        "{m}"
    );
    (m, drive_stats(&log))
}

#[test]
fn ops_and_bandwidth_limits_hold_the_guest_to_their_rate() {
    let _one = serial();
    let disk = Disk::new("rl-steady", 64 << 20);
    // 5,000 IOPS as 50 per 10 ms: the initial full bucket is 1 % of the 10,000 requests.
    let (m, stats) = limited_run(
        &disk,
        json!({"io_engine": "Sync", "rate_limiter": {"ops": bucket(50, 10)}}),
        "rw=randread qd=8 count=10000",
    );
    let iops = m["iops"].as_f64().expect("iops");
    assert!(
        holds_to(iops, 5000.0, 0.03),
        "ops limit 5,000: the guest measured {iops}"
    );
    assert!(
        stats["throttled_events"].as_u64().unwrap_or(0) > 0,
        "{stats}"
    );
    assert!(
        stats["throttled_ns"].as_u64().unwrap_or(0) > 500_000_000,
        "{stats}"
    );

    // 50 MiB/s as 512 KiB per 10 ms, with 128 KiB reads (4 per refill).
    let (m, stats) = limited_run(
        &disk,
        json!({"io_engine": "Sync", "rate_limiter": {"bandwidth": bucket(512 << 10, 10)}}),
        "rw=randread bs=131072 qd=8 count=800",
    );
    let mib_s = m["bytes"].as_f64().expect("bytes")
        / (1 << 20) as f64
        / (m["elapsed_ns"].as_f64().expect("elapsed") / 1e9);
    assert!(
        holds_to(mib_s, 50.0, 0.03),
        "bandwidth limit 50 MiB/s: the guest measured {mib_s:.2}"
    );
    assert_eq!(stats["read_bytes"], 800 * 131072, "{stats}");
}

#[test]
fn a_one_time_burst_is_spent_first_and_once_and_a_group_limit_binds_its_drive() {
    let _one = serial();
    let disk = Disk::new("rl-burst", 64 << 20);
    // 5,000 IOPS with a burst of 2,000: 7,000 requests take (7,000 - 2,000 - 50) / 5,000 s
    // once the burst and the full bucket are spent.
    let mut ops = bucket(50, 10);
    ops["one_time_burst"] = json!(2000);
    let (m, stats) = limited_run(
        &disk,
        json!({"io_engine": "Sync", "rate_limiter": {"ops": ops}}),
        "rw=randread qd=8 count=7000",
    );
    let secs = m["elapsed_ns"].as_f64().expect("elapsed") / 1e9;
    // The limiter allows no faster than 0.99 s; the 2,050 unthrottled requests themselves take a
    // few tens of ms, more on a busy host (1.08 s seen while builds ran). Without the burst the
    // run takes 1.39 s; a burst spent twice, 0.59 s: the bounds keep both outside.
    assert!(
        (0.99 * 0.97..=0.99 + 0.2).contains(&secs),
        "burst then 5,000 IOPS: {secs:.3} s"
    );
    let left = stats["ops_tokens"].as_u64().expect("ops tokens");
    assert!(
        left <= 50,
        "the burst is gone, only the bucket refills: {left} tokens left"
    );

    // A run longer than the guest's 65,536 latency samples: the first 70,000 requests spend a
    // burst, the last 10,000 wait for 20,000 IOPS. The guest's figures are the whole run's (a
    // uniform sample for p50/p99, every request for the mean): one request in eight was
    // throttled, so p99 is a throttled request's wait (QD 8 at 20,000 IOPS: ~400 µs) while p50
    // is not, and the mean holds the throttled part.
    let mut ops = bucket(200, 10);
    ops["one_time_burst"] = json!(70_000);
    let (m, _) = limited_run(
        &disk,
        json!({"io_engine": "Sync", "rate_limiter": {"ops": ops}}),
        "rw=randread qd=8 count=80000",
    );
    let lat = &m["lat_ns"];
    let (p50, p99, mean) = (
        lat["p50"].as_f64().expect("p50"),
        lat["p99"].as_f64().expect("p99"),
        lat["mean"].as_f64().expect("mean"),
    );
    assert_eq!(m["lat_samples"], 65536, "{m}");
    assert!(
        p99 > 200_000.0 && p50 < 200_000.0,
        "p99 is a throttled request's, p50 not: {lat}"
    );
    // The throttled eighth adds about 400 µs / 8 to the mean of the rest (~40 µs here, as p50):
    // 2.1× p50 seen; the first 65,536 requests alone gave 1.13×.
    assert!(
        mean > 1.3 * p50,
        "the mean holds the throttled requests: {lat}"
    );

    // A group of 6,000 IOPS (60 per 10 ms) named by the driven drive and an idle second drive.
    let other = disk.dir.join("other.img");
    std::fs::File::create(&other)
        .and_then(|f| f.set_len(1 << 20))
        .expect("second disk");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": "mode=blk rw=randread qd=8 count=12000"},
        "rate-limit-groups": [{"id": "tenant", "ops": bucket(60, 10)}],
        "drives": [
            {"drive_id": "disk0", "path_on_host": disk.path, "io_engine": "Sync",
             "rate_limit_group": "tenant"},
            {"drive_id": "disk1", "path_on_host": other, "rate_limit_group": "tenant"},
        ],
    });
    let (status, r, log) = run_config(&disk, &cfg, "a group of two drives");
    assert_eq!(status, 0, "{r}\n{log}");
    let iops = run(&r, "main")["iops"].as_f64().expect("iops");
    assert!(
        holds_to(iops, 6000.0, 0.03),
        "group limit 6,000: the guest measured {iops}"
    );
}

/// Completed requests of `disk0` now, and when they were read.
fn requests(sock: &Path) -> (Instant, u64) {
    let (st, d) = call(sock, "GET", "/drives/disk0", None);
    assert_eq!(st, 200, "{d}");
    (Instant::now(), d["requests"].as_u64().expect("requests"))
}

/// The rate over `[from, from + span]` after `t`, sampled every 20 ms.
fn rate_after(sock: &Path, t: Instant, from: Duration, span: Duration) -> f64 {
    std::thread::sleep((t + from).saturating_duration_since(Instant::now()));
    let (t0, n0) = requests(sock);
    std::thread::sleep(span);
    let (t1, n1) = requests(sock);
    (n1 - n0) as f64 / t1.duration_since(t0).as_secs_f64()
}

fn patch(sock: &Path, body: &str) -> Instant {
    let (st, d) = api_patch(sock, "/drives/disk0", body);
    assert_eq!(st, 204, "PATCH {body}: {d}");
    Instant::now()
}

#[test]
fn a_throttled_queue_costs_no_cpu_and_patch_changes_or_removes_the_limit_live() {
    // Enough requests to outlast every phase: ~9,000 go at the limits, and the rest must still
    // be running 200 ms after the limit is removed. With 60,000, an unthrottled Sync queue at
    // 340k IOPS finished the run in 180 ms and the VM was gone before the last measurement.
    const COUNT: u64 = 250_000;
    let _one = serial();
    let disk = Disk::new("rl-live", 64 << 20);
    let sock: PathBuf = disk.dir.join("api.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": format!("mode=blk rw=randread qd=32 count={COUNT} timeout_ms=60000")},
        // 100 IOPS as 5 tokens per 50 ms: a wake-up that comes a few ms late (the thread sleeps
        // to the millisecond) loses nothing.
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path, "io_engine": "Sync",
                    "iothread": "io0", "rate_limiter": {"ops": bucket(5, 50)}}],
        "iothreads": [{"id": "io0"}],
        "api": {"socket": sock},
    });
    let p = disk.dir.join("vm.json");
    std::fs::write(&p, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn(["--config".as_ref(), p.as_os_str()]);
    vmm.wait_for_socket(&sock, Duration::from_secs(10));
    // Throttled at 100 IOPS with 32 requests waiting: the iothread sleeps between tokens.
    std::thread::sleep(Duration::from_millis(300));
    let cpu0 = common::thread_cpu_ns(vmm.pid(), "iothread-io0");
    let (w0, n0) = requests(&sock);
    std::thread::sleep(Duration::from_millis(1500));
    let cpu1 = common::thread_cpu_ns(vmm.pid(), "iothread-io0");
    let (w1, n1) = requests(&sock);
    let wall = w1.duration_since(w0).as_nanos() as f64;
    let share = (cpu1 - cpu0) as f64 / wall;
    let slow = (n1 - n0) as f64 / (wall / 1e9);
    eprintln!(
        "throttled at 100 IOPS: {slow:.1} IOPS, iothread CPU {:.2} %",
        share * 100.0
    );
    assert!(holds_to(slow, 100.0, 0.05), "{slow}");
    // A queue that spun while throttled would cost ~100 %. The release build measures ~1 %
    // here (docs/performance.md); this debug build does about twice the work per wake-up.
    assert!(
        share < 0.05,
        "a throttled queue costs its iothread {:.2} % of a core",
        share * 100.0
    );

    let (_, d) = call(&sock, "GET", "/drives/disk0", None);
    assert!(d["throttled_events"].as_u64().unwrap_or(0) > 0, "{d}");
    assert_eq!(d["rate_limiter"]["ops"]["size"], 5, "{d}");

    // Raise to 5,000 then 10,000 IOPS, then remove the limit: the rate follows within 100 ms.
    for (size, want) in [(50u64, 5000.0), (100, 10000.0)] {
        let body = json!({"rate_limiter": {"ops": bucket(size, 10)}}).to_string();
        let t = patch(&sock, &body);
        let r = rate_after(
            &sock,
            t,
            Duration::from_millis(100),
            Duration::from_millis(600),
        );
        eprintln!("after PATCH to {want}: {r:.0} IOPS");
        assert!(
            holds_to(r, want, 0.05),
            "PATCH to {want} IOPS: {r:.0} from 100 ms on"
        );
    }
    let t = patch(&sock, r#"{"rate_limiter": null}"#);
    let (_, d) = call(&sock, "GET", "/drives/disk0", None);
    assert_eq!(d["rate_limiter"], Value::Null, "{d}");
    let r = rate_after(
        &sock,
        t,
        Duration::from_millis(100),
        Duration::from_millis(100),
    );
    eprintln!("after PATCH null: {r:.0} IOPS");
    assert!(r > 20_000.0, "no limit: {r:.0} IOPS from 100 ms on");

    let status = vmm.wait_exit(Duration::from_secs(60));
    let report = common::blk_report(&vmm);
    assert_eq!(status.code(), Some(0), "{report}");
    let m = run(&report, "main");
    assert_eq!(
        (m["errors"].as_u64(), m["requests"].as_u64()),
        (Some(0), Some(COUNT)),
        "{m}"
    );
}
