//! End to end: a 2-point matrix (4k randread at QD1 and QD8, IoUring, polling off) on a file
//! store, which needs no root (it does need /dev/kvm). The runner uses the release Osprey binary
//! (`target/release/osprey`), building it with cargo first if it is missing.

use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn a_two_point_matrix_writes_csv_markdown_and_plots() {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    if kvm.is_err() {
        eprintln!("skipped: /dev/kvm cannot be opened");
        return;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("osprey-bench-e2e-{}", std::process::id()));
    let out = tmp.join("out");
    let _ = std::fs::remove_dir_all(&tmp);
    let args = "--store file --store-size 64m --rw randread --bs 4k --qd 1,8 --queues 1 \
                --engine IoUring --poll off --max-batch 32 --seconds 0.5 --repeats 1 --warmup 0";
    let status = Command::new(env!("CARGO_BIN_EXE_osprey-bench"))
        .args(args.split_whitespace())
        .arg("--store-dir")
        .arg(&tmp)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .expect("spawn osprey-bench");
    assert!(status.success(), "osprey-bench failed: {status}");

    let mut csv = csv::Reader::from_path(out.join("results.csv")).expect("results.csv");
    let headers = csv.headers().expect("headers").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect(name);
    let (iops, qd, status) = (col("iops"), col("qd"), col("status"));
    let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 2, "one row per point");
    for r in &rows {
        let v: f64 = r[iops].parse().expect("iops is a number");
        assert!(v > 0.0 && &r[status] == "ok", "{r:?}");
    }
    assert_eq!((&rows[0][qd], &rows[1][qd]), ("1", "8"));

    let md = std::fs::read_to_string(out.join("results.md")).expect("results.md");
    assert!(
        md.contains("## 4k randread") && md.contains("| KVM |"),
        "{md}"
    );
    let files = |dir: &PathBuf, ext: &str| {
        let entries = std::fs::read_dir(dir).expect("dir").filter_map(Result::ok);
        entries
            .filter(|e| e.file_name().to_string_lossy().ends_with(ext))
            .count()
    };
    assert!(files(&out, ".svg") >= 1, "no SVG in {}", out.display());
    // The store is removed at the end.
    assert_eq!(files(&tmp, ".img"), 0, "the store file was left behind");
    let _ = std::fs::remove_dir_all(&tmp);
}
