//! Seccomp: every thread runs under an allow-list by default. A forbidden syscall (made on
//! purpose by the tests' sandbox probe, `OSPREY_TEST_SANDBOX_PROBE`: an `execve`) ends Osprey at
//! once with a message naming the thread and the syscall and exit status 159, instead of letting
//! the VM run (every thread type: tests/sandbox.rs); `--seccomp off` lets the same run finish.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{osprey, test_guest};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
/// 128 + SIGSYS.
const EXIT_SECCOMP: i32 = 159;
/// `execve` on x86-64: the probe's forbidden syscall.
const SYS_EXECVE: i64 = 59;

/// A scratch folder with a config: one vCPU, one iothread `io0` serving one drive, the test
/// guest reading 16 blocks and exiting; the API on a socket inside the folder.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("osprey-seccomp-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let disk = dir.join("disk.img");
        std::fs::File::create(&disk)
            .and_then(|f| f.set_len(8 << 20))
            .expect("disk");
        let cfg = json!({
            "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
            "boot-source": {"kernel_image_path": test_guest(), "boot_args": "mode=blk rw=read count=16"},
            "drives": [{"drive_id": "disk0", "path_on_host": disk, "iothread": "io0"}],
            "iothreads": [{"id": "io0"}],
            "api": {"socket": dir.join("api.sock")},
        });
        std::fs::write(dir.join("vm.json"), cfg.to_string()).expect("config");
        Scratch { dir }
    }

    /// Runs Osprey on the config with `extra` arguments and the sandbox probe aimed at `selftest`;
    /// returns (exit code, stdout, stderr).
    fn run(&self, selftest: Option<&str>, extra: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new(osprey());
        cmd.arg("--config")
            .arg(self.dir.join("vm.json"))
            .args(extra)
            .env_remove("OSPREY_TEST_SANDBOX_PROBE")
            .stdin(Stdio::null());
        if let Some(kind) = selftest {
            cmd.env("OSPREY_TEST_SANDBOX_PROBE", kind);
        }
        let out = common::output_within(cmd, TIMEOUT);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_filters_are_on_by_default_and_the_vm_runs_under_them() {
    let s = Scratch::new("default");
    let (status, console, log) = s.run(None, &[]);
    assert_eq!(status, 0, "console:\n{console}\nlog:\n{log}");
    assert!(
        console.contains("BLK "),
        "the guest did its I/O:\n{console}"
    );
    let line = log
        .lines()
        .find(|l| l.contains("seccomp: on: "))
        .unwrap_or_default();
    assert!(
        ["vcpu", "iothread", "api", "control", "stdin"]
            .iter()
            .all(|t| line.contains(&format!(" {t} ")) && line.contains(" syscalls/")),
        "the filters are logged with their sizes:\n{log}"
    );
}

#[test]
fn seccomp_off_lets_the_same_run_finish() {
    for off in [&["--seccomp", "off"][..], &["--seccomp=off"][..]] {
        let s = Scratch::new("off");
        let (status, console, log) = s.run(Some("iothread"), off);
        assert_eq!(status, 0, "{off:?}: console:\n{console}\nlog:\n{log}");
        assert!(console.contains("BLK "), "{console}");
        assert!(log.contains("seccomp: off"), "logged at start:\n{log}");
        assert!(!log.contains("forbidden syscall"), "{log}");
    }
    let s = Scratch::new("on");
    let (status, _, log) = s.run(Some("iothread"), &["--seccomp", "on"]);
    assert_eq!(status, EXIT_SECCOMP, "--seccomp on filters:\n{log}");
    let expected =
        format!("osprey: seccomp: thread iothread-io0 made forbidden syscall {SYS_EXECVE}");
    assert!(log.contains(&expected), "`{expected}` in:\n{log}");
}
