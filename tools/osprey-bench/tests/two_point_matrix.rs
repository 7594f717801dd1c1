//! End to end: a 2-point matrix (4k randread at QD1 and QD8, IoUring, polling off) on a file
//! store, which needs no root (it does need /dev/kvm). The runner uses the release Osprey binary
//! (`target/release/osprey`), building it with cargo first if it is missing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kvm_usable() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

#[test]
fn a_two_point_matrix_writes_csv_markdown_and_plots() {
    if !kvm_usable() {
        eprintln!("skipped: /dev/kvm cannot be opened");
        return;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("osprey-bench-e2e-{}", std::process::id()));
    let out = tmp.join("out");
    let _ = std::fs::remove_dir_all(&tmp);
    let mut child = Command::new(env!("CARGO_BIN_EXE_osprey-bench"))
        .args(["--store", "file", "--store-size", "64m"])
        .arg("--store-dir")
        .arg(&tmp)
        .args([
            "--rw", "randread", "--bs", "4k", "--qd", "1,8", "--queues", "1",
        ])
        .args(["--engine", "IoUring", "--poll", "off", "--max-batch", "32"])
        .args(["--seconds", "0.5", "--repeats", "1", "--warmup", "0"])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn osprey-bench");
    // Generous: the first run may build the release Osprey binary.
    let deadline = Instant::now() + Duration::from_secs(900);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("osprey-bench did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "osprey-bench failed: {status}");

    let mut csv = csv::Reader::from_path(out.join("results.csv")).expect("results.csv");
    let headers = csv.headers().expect("headers").clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no {name} column"))
    };
    let (iops, qd, status_col) = (col("iops"), col("qd"), col("status"));
    let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 2, "one row per point");
    for r in &rows {
        let v: f64 = r[iops].parse().expect("iops is a number");
        assert!(v > 0.0, "zero IOPS in {r:?}");
        assert_eq!(&r[status_col], "ok");
    }
    assert_eq!(
        rows.iter().map(|r| r[qd].to_string()).collect::<Vec<_>>(),
        ["1", "8"]
    );

    let md = std::fs::read_to_string(out.join("results.md")).expect("results.md");
    assert!(md.contains("## 4k randread"), "{md}");
    assert!(md.contains("KVM"), "{md}");
    let svgs = std::fs::read_dir(&out)
        .expect("out dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "svg"))
        .count();
    assert!(svgs >= 1, "no SVG in {}", out.display());
    // The store is removed at the end.
    let leftovers = std::fs::read_dir(&tmp)
        .expect("tmp")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .count();
    assert_eq!(leftovers, 0, "the store file was left behind");
    let _ = std::fs::remove_dir_all(&tmp);
}
