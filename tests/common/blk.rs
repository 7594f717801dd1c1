//! Helpers for tests that boot the test guest with a drive: scratch backing files, a config
//! with one drive, and the guest's `BLK {...}` report and Osprey's `drive stats {...}` log line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::{run_to_exit, test_guest};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A backing file in a per-test scratch folder, removed on drop.
pub struct Disk {
    pub dir: PathBuf,
    pub path: PathBuf,
}

impl Disk {
    pub fn new(name: &str, size: u64) -> Disk {
        let dir = std::env::temp_dir().join(format!("osprey-blk-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("disk.img");
        let f = std::fs::File::create(&path).expect("create disk");
        f.set_len(size).expect("size disk");
        Disk { dir, path }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Boots the test guest with one drive and `args` after `mode=blk`; returns (status, BLK report, log).
pub fn boot(disk: &Disk, drive: Value, args: &str) -> (i32, Value, String) {
    boot_with(disk, drive, json!({}), args)
}

pub fn run<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["runs"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no run `{name}` in {report}"))
}

pub fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).expect("open disk");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).expect("read");
    buf
}

/// Boots with a full config: `drive` fields merged into the drive, `iothread` fields into the one
/// iothread `io0`.
pub fn boot_with(disk: &Disk, drive: Value, iothread: Value, args: &str) -> (i32, Value, String) {
    let mut d = json!({"drive_id": "disk0", "path_on_host": disk.path, "iothread": "io0"});
    let mut t = json!({"id": "io0"});
    for (dst, extra) in [(&mut d, drive), (&mut t, iothread)] {
        if let (Some(dst), Some(extra)) = (dst.as_object_mut(), extra.as_object()) {
            dst.extend(extra.clone());
        }
    }
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": format!("mode=blk {args}")},
        "drives": [d],
        "iothreads": [t],
    });
    run_config(disk, &cfg, args)
}

/// Boots the whole config `cfg` (written to the disk's folder) to its exit; returns (status,
/// BLK report, log). `args` names the run in a failure.
pub fn run_config(disk: &Disk, cfg: &Value, args: &str) -> (i32, Value, String) {
    let cfg_path = disk.dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("write config");
    let (status, console, log) = run_to_exit(["--config".as_ref(), cfg_path.as_os_str()], TIMEOUT);
    let report = report(&console, &format!("for `{args}`"), &log);
    (status.code().unwrap_or(-1), report, log)
}

/// The test guest's `BLK {...}` report in `console` (panics naming `what`, with the console and
/// `log`, when there is none or it is not JSON).
pub fn report(console: &str, what: &str, log: &str) -> Value {
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("BLK "))
        .unwrap_or_else(|| panic!("no BLK report {what}\nconsole:\n{console}\nlog:\n{log}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("BLK is not JSON ({e}): {line}"))
}

/// Osprey's `drive stats {...}` log line for the (only) drive.
pub fn drive_stats(log: &str) -> Value {
    let line = log
        .lines()
        .find_map(|l| l.split_once("drive stats ").map(|(_, j)| j))
        .unwrap_or_else(|| panic!("no drive stats in the log:\n{log}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("drive stats not JSON ({e}): {line}"))
}
