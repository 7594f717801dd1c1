//! A live drive swap (`PATCH /drives/{id}` with `path_on_host`) under load: the test guest
//! reads a stamped file at QD16 on two queues of its second drive (`dev=1`, after a root drive),
//! the file is swapped for another stamp file while it runs, and the guest reads the new file's
//! blocks (its tag, its capacity, the config change seen) with no error, no mismatch and every
//! request it issued completed. The refusals (missing file, outside the drive's folder, `null`,
//! a bad type) are answered on the same running VM without disturbing it. One boot.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::blk::Disk;
use common::stamp::{stamp_sector, write_stamp_file};
use common::{api_call as call, test_guest, Vmm};
use serde_json::{json, Value};

const TAG_A: u32 = 10;
const TAG_B: u32 = 11;
const A_BYTES: u64 = 4 << 20;
const B_BYTES: u64 = 6 << 20;

fn patch(sock: &Path, drive: &str, body: &str) -> (u16, Value) {
    call(sock, "PATCH", &format!("/drives/{drive}"), Some(body))
}

#[track_caller]
fn refused(sock: &Path, body: &str, want: &[&str]) {
    let (status, reply) = patch(sock, "data", body);
    assert_eq!(status, 400, "{body}: {reply}");
    let msg = reply["fault_message"].as_str().unwrap_or_default();
    for w in want {
        assert!(msg.contains(w), "{body}: `{msg}` lacks `{w}`");
    }
}

#[test]
fn the_stamp_writer_names_tag_and_sector() {
    let s = stamp_sector(7, 3);
    assert_eq!(&s[..8], b"OSPSTAMP");
    assert_eq!(u32::from_le_bytes(s[8..12].try_into().expect("4")), 7);
    assert_eq!(u32::from_le_bytes(s[12..16].try_into().expect("4")), 3);
    assert_ne!(
        stamp_sector(7, 4)[16..],
        s[16..],
        "the fill depends on the sector"
    );
    assert_ne!(stamp_sector(8, 3)[16..], s[16..], "and on the tag");
}

#[test]
fn a_file_swapped_under_load_is_read_with_nothing_lost() {
    let root = Disk::new("swap-root", 1 << 20);
    let data = Disk::new("swap-data", A_BYTES);
    write_stamp_file(&data.path, TAG_A, A_BYTES);
    let b = data.dir.join("b.img");
    write_stamp_file(&b, TAG_B, B_BYTES);
    let outside = root.dir.join("outside.img");
    write_stamp_file(&outside, TAG_B, A_BYTES);
    let sock = data.dir.join("api.sock");
    let args = format!(
        "mode=blk dev=1 rw=stamp bs=4096 qd=16 queues=2 count=4000000000 range={A_BYTES} \
         stamp_until={TAG_B} timeout_ms=20000"
    );
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": args},
        "drives": [
            {"drive_id": "root", "path_on_host": root.path},
            {"drive_id": "data", "path_on_host": data.path, "num_queues": 2, "direct": true},
        ],
        "api": {"socket": sock},
    });
    let cfg_path = data.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let first = format!("osprey-test-guest: stamp tag={TAG_A} ");
    let seen_a = vmm.wait_console(Duration::from_secs(60), |l| l.starts_with(&first));
    assert!(seen_a.is_some(), "no tag A:\n{}", vmm.log_text());

    // Refused while the guest reads: each names the field, the VM goes on.
    let missing = data.dir.join("missing.img");
    refused(
        &sock,
        &json!({"path_on_host": missing}).to_string(),
        &["path_on_host", "missing.img", "No such file"],
    );
    refused(
        &sock,
        &json!({"path_on_host": outside}).to_string(),
        &["path_on_host", "outside", "docs/security.md"],
    );
    refused(
        &sock,
        r#"{"path_on_host": null}"#,
        &["path_on_host", "null"],
    );
    refused(&sock, r#"{"path_on_host": 5}"#, &["path_on_host"]);
    refused(
        &sock,
        &json!({"path_on_host": data.dir}).to_string(),
        &["outside"],
    );
    // A symlink in the folder that leads out of every drive's folder: Landlock refuses to open
    // it (where the kernel enforces Landlock; the log says so).
    let elsewhere = Disk::new("swap-elsewhere", A_BYTES);
    let link = data.dir.join("link.img");
    std::os::unix::fs::symlink(&elsewhere.path, &link).expect("symlink");
    let log = vmm.log_text();
    if log.contains("Landlock ABI") && log.contains("fully enforced") {
        refused(
            &sock,
            &json!({"path_on_host": link}).to_string(),
            &["path_on_host", "Permission denied", "sandbox"],
        );
    }
    let (status, _) = patch(&sock, "nope", &json!({"path_on_host": b}).to_string());
    assert_eq!(status, 404);

    // Under load: the guest keeps QD16 on both queues while it has tag A to read.
    let t0 = Instant::now();
    loop {
        let (_, d) = call(&sock, "GET", "/drives/data", None);
        if d["requests"].as_u64().unwrap_or(0) >= 2000 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no load: {d}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    let (status, reply) = patch(&sock, "data", &json!({"path_on_host": b}).to_string());
    let took = t0.elapsed();
    assert!(matches!(status, 200 | 204), "swap: {status} {reply}");
    eprintln!("swap under QD16 load: PATCH answered in {took:?}");
    let (_, drive) = call(&sock, "GET", "/drives/data", None);
    assert_eq!(drive["path_on_host"], json!(b), "{drive}");

    let second = format!("osprey-test-guest: stamp tag={TAG_B} ");
    let seen_b = vmm.wait_console(Duration::from_secs(60), |l| l.starts_with(&second));
    let line = seen_b
        .unwrap_or_else(|| panic!("no tag B:\n{}", vmm.log_text()))
        .text;
    assert!(
        line.contains(&format!("capacity_bytes={B_BYTES} ")),
        "the guest re-read the capacity: {line}"
    );
    assert!(
        !line.ends_with("config_changes=0"),
        "config change seen: {line}"
    );
    let status = vmm.wait_exit(Duration::from_secs(60));
    let console = vmm.console_text();
    let log = vmm.log_text();
    let report = common::blk::report(&console, "after the swap", &log);
    let run = common::blk::run(&report, "main");
    let stamp = &report["stamp"];
    assert_eq!(run["errors"], 0, "{report}");
    assert_eq!(run["mismatches"], 0, "{report}");
    assert_eq!(run["timed_out"], false, "{report}");
    assert_eq!(
        run["requests"], stamp["issued"],
        "every request issued completed: {report}"
    );
    let tags: Vec<(u64, u64)> = stamp["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| {
            (
                t["tag"].as_u64().unwrap_or(0),
                t["sectors"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(tags.len(), 2, "A then B, nothing else: {report}");
    assert_eq!((tags[0].0, tags[1].0), (u64::from(TAG_A), u64::from(TAG_B)));
    assert!(tags[0].1 > 0 && tags[1].1 >= 8 * 1000, "{report}");
    for k in ["bad_magic", "bad_sector", "bad_fill", "other_tags"] {
        assert_eq!(stamp[k], 0, "{k}: {report}");
    }
    assert_eq!(report["failures"], 0, "{report}");
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("backing file swapped"), "{log}");
    for l in log.lines().filter(|l| l.contains("swapped")) {
        eprintln!("{l}");
    }
}

/// Boots the test guest on one drive in `disk`'s folder (the API socket there too) with
/// `extra` flags, and swaps the drive to `to`: the answer.
fn swap_with(disk: &Disk, to: &Path, extra: &[&str]) -> (u16, Value) {
    let sock = disk.dir.join("api.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": "mode=blk rw=read count=16 hang=2"},
        "drives": [{"drive_id": "data", "path_on_host": disk.path}],
        "api": {"socket": sock},
    });
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut args = vec!["--config", cfg_path.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let mut vmm = Vmm::spawn(args);
    let booted = vmm.wait_console(Duration::from_secs(60), |l| l.starts_with("BLK "));
    assert!(
        booted.is_some(),
        "{extra:?}: no BLK line:\n{}",
        vmm.log_text()
    );
    let answer = patch(&sock, "data", &json!({"path_on_host": to}).to_string());
    vmm.signal(libc::SIGTERM);
    vmm.wait_exit(Duration::from_secs(10));
    answer
}

#[test]
fn a_swap_from_another_folder_needs_the_sandbox_off_or_the_folder_allowed() {
    let disk = Disk::new("swap-own", A_BYTES);
    let other = Disk::new("swap-other", A_BYTES);
    let other_dir = other.dir.to_str().expect("utf-8");

    let (status, reply) = swap_with(&disk, &other.path, &[]);
    assert_eq!(status, 400, "{reply}");
    let msg = reply["fault_message"].as_str().unwrap_or_default();
    for want in [
        "path_on_host",
        "outside",
        "--allow-folder",
        "docs/security.md",
    ] {
        assert!(msg.contains(want), "`{msg}` lacks `{want}`");
    }

    let (status, reply) = swap_with(&disk, &other.path, &["--allow-folder", other_dir]);
    assert!(
        matches!(status, 200 | 204),
        "allowed folder: {status} {reply}"
    );

    let (status, reply) = swap_with(&disk, &other.path, &["--sandbox", "off"]);
    assert!(
        matches!(status, 200 | 204),
        "--sandbox off: {status} {reply}"
    );
}
