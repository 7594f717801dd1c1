//! Every I/O engine end to end: the test guest's verify workload on 1 and 4 queues with zero
//! mismatches (Null: reads and writes without errors, since it stores nothing), and `max_batch`
//! honoured in the batch-size histogram that Osprey logs per drive when the VM stops.

mod common;

use common::blk::{boot_with, drive_stats, run, Disk};
use serde_json::{json, Value};

fn engine_runs(engine: &str, direct: bool) {
    let disk = Disk::new(&format!("eng-{engine}"), 64 << 20);
    for queues in [1, 4] {
        let drive = json!({"io_engine": engine, "direct": direct, "num_queues": 4});
        let args = if engine == "Null" {
            format!("rw=randwrite queues={queues} qd=16 count=4000")
        } else {
            format!("rw=verify queues={queues} qd=16 count=4000 seed={queues}")
        };
        let (status, r, log) = boot_with(&disk, drive, json!({}), &args);
        let m = run(&r, "main");
        assert_eq!(status, 0, "{engine} queues={queues}: {r}\n{log}");
        assert_eq!(r["queues_used"], queues);
        assert_eq!(
            (m["errors"].as_u64(), m["mismatches"].as_u64()),
            (Some(0), Some(0)),
            "{engine}: {m}"
        );
        let stats = drive_stats(&log);
        // The engine names itself as the configuration does.
        let described = stats["engine"].as_str().unwrap_or_default();
        assert_eq!(
            described, engine,
            "{engine}: the engine in force is `{described}`"
        );
        assert!(stats["requests"].as_u64().unwrap_or(0) >= 4000, "{stats}");
        assert_eq!(stats["io_errors"], 0, "{stats}");
    }
}

#[test]
fn io_uring_verifies_on_one_and_four_queues() {
    engine_runs("IoUring", false);
}

#[test]
fn linux_aio_verifies_on_one_and_four_queues_with_o_direct() {
    engine_runs("LinuxAio", true);
}

#[test]
fn sync_verifies_on_one_and_four_queues() {
    engine_runs("Sync", false);
}

#[test]
fn null_completes_without_errors() {
    engine_runs("Null", false);
}

/// The largest batch-size bucket bound with a submission in it.
fn largest_batch(stats: &Value) -> u64 {
    let bounds: Vec<u64> = stats["batch_bounds"]
        .as_array()
        .expect("bounds")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let hist: Vec<u64> = stats["batch_hist"]
        .as_array()
        .expect("hist")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let i = hist
        .iter()
        .rposition(|&c| c > 0)
        .expect("at least one submission");
    bounds.get(i).copied().unwrap_or(u64::MAX)
}

#[test]
fn max_batch_caps_every_submission() {
    let disk = Disk::new("batch", 64 << 20);
    let args = "rw=randread queues=4 qd=32 count=20000";
    for (max_batch, cap) in [(4u64, 4u64), (0, 32)] {
        // io_uring named: the default Auto engine serves these page-cache reads inline, so it
        // submits nothing to batch.
        let drive = json!({"io_engine": "IoUring", "num_queues": 4, "queue_size": 256});
        let (status, r, log) = boot_with(&disk, drive, json!({"max_batch": max_batch}), args);
        assert_eq!(status, 0, "{r}\n{log}");
        assert_eq!(run(&r, "main")["errors"], 0);
        let stats = drive_stats(&log);
        let largest = largest_batch(&stats);
        assert!(
            largest <= cap,
            "max_batch={max_batch}: a submission of up to {largest} requests: {stats}"
        );
        assert!(stats["submissions"].as_u64().unwrap_or(0) > 0, "{stats}");
        if max_batch == 4 {
            // QD32 on four queues keeps far more than 4 requests ready: the cap must bind.
            assert_eq!(largest, 4, "{stats}");
        }
    }
}

#[test]
fn unavailable_or_bad_engine_settings_are_refused_before_boot() {
    let disk = Disk::new("eng-bad", 1 << 20);
    let cfg = json!({
        "boot-source": {"kernel_image_path": common::test_guest()},
        "drives": [{"drive_id": "d", "path_on_host": disk.path, "iothread": "io0"}],
        "iothreads": [{"id": "io0", "max_batch": 2000}],
    });
    let p = disk.dir.join("bad.json");
    std::fs::write(&p, cfg.to_string()).expect("write");
    let (status, _, stderr) = common::run_to_exit(
        ["--config".as_ref(), p.as_os_str()],
        std::time::Duration::from_secs(10),
    );
    assert_eq!(status.code(), Some(2));
    assert_eq!(
        stderr.trim_end(),
        format!(
            "osprey: error: {}: iothreads[0].max_batch: must be at most 1024 (0 means the default, 32), got 2000",
            p.display()
        )
    );
}
