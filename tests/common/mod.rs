//! Shared harness for the integration tests: builds the guest images, spawns `osprey` as a child
//! process (killed on drop), collects its console and log lines with timestamps, and waits for
//! lines or for exit with a timeout.

#![allow(dead_code)]

pub mod blk;
pub mod firecracker_spec;
pub mod linux;
pub mod scratch;
pub mod stamp;
pub mod tap;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repo root")
}

/// The `osprey` binary under test.
pub fn osprey() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_osprey"))
}

static GUEST_BUILD: Once = Once::new();

/// The vCPU's TSC frequency as KVM reports it (`KVM_GET_TSC_KHZ`, as Osprey logs it), in kHz;
/// `None` when KVM cannot tell.
pub fn host_tsc_khz() -> Option<u32> {
    static KHZ: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *KHZ.get_or_init(|| {
        let kvm = kvm_ioctls::Kvm::new().ok()?;
        let vm = kvm.create_vm().ok()?;
        vm.create_vcpu(0).ok()?.get_tsc_khz().ok()
    })
}

/// Builds (once per test binary) and returns Osprey's test guest.
pub fn test_guest() -> PathBuf {
    let root = repo_root();
    GUEST_BUILD.call_once(|| {
        let out = Command::new("make")
            .arg("-C")
            .arg(root.join("guest-images"))
            .arg("test-guest")
            .output()
            .expect("run make");
        assert!(
            out.status.success(),
            "building the test guest failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let elf = root.join("guest-images/build/test-guest.elf");
    assert!(elf.exists(), "{} missing after make", elf.display());
    elf
}

/// The disk image the examples name, `guest-images/build/disk.img` (256 MiB, sparse), created
/// as `make run` creates it when missing.
pub fn example_disk() -> PathBuf {
    let disk = repo_root().join("guest-images/build/disk.img");
    if !disk.exists() {
        std::fs::File::create(&disk)
            .and_then(|f| f.set_len(256 << 20))
            .unwrap_or_else(|e| panic!("create {}: {e}", disk.display()));
    }
    disk
}

/// A line from the child, with the time since spawn.
#[derive(Debug, Clone)]
pub struct Line {
    pub at: Duration,
    pub text: String,
}

/// A running `osprey` child process.
pub struct Vmm {
    child: Child,
    started: Instant,
    stdout: Arc<Mutex<Vec<Line>>>,
    stderr: Arc<Mutex<Vec<Line>>>,
    readers: Vec<thread::JoinHandle<()>>,
}

fn collect(
    src: impl Read + Send + 'static,
    sink: Arc<Mutex<Vec<Line>>>,
    t0: Instant,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&buf)
                        .trim_end_matches(['\n', '\r'])
                        .to_string();
                    sink.lock().expect("lock").push(Line {
                        at: t0.elapsed(),
                        text,
                    });
                }
            }
        }
    })
}

impl Vmm {
    /// Spawns `osprey` with `args` (stdin empty: the console gets no input).
    pub fn spawn<I, S>(args: I) -> Vmm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Vmm::spawn_with_stdin(args, Stdio::null())
    }

    /// Spawns `osprey` with `args` and `stdin` (a pipe stays open until the `Vmm` drops).
    pub fn spawn_with_stdin<I, S>(args: I, stdin: Stdio) -> Vmm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Vmm::spawn_program(&osprey(), args, stdin)
    }

    /// Spawns `program` (e.g. another VMM, as a vhost-user frontend) with `args` and `stdin`,
    /// collecting its output as for `osprey`.
    pub fn spawn_program<I, S>(program: &Path, args: I, stdin: Stdio) -> Vmm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Self::spawn_command(Command::new(program).args(args).stdin(stdin))
    }

    /// Spawns `program ARGS` with `dir` as its working directory (relative paths in the
    /// arguments, the config and the API are taken from there).
    pub fn spawn_program_in<I, S>(program: &Path, dir: &Path, args: I) -> Vmm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Self::spawn_command(
            Command::new(program)
                .args(args)
                .current_dir(dir)
                .stdin(Stdio::null()),
        )
    }

    /// Spawns a prepared command, its output collected.
    pub fn spawn_command(cmd: &mut Command) -> Vmm {
        let program = PathBuf::from(cmd.get_program());
        let started = Instant::now();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(
                child.stdout.take().expect("stdout"),
                stdout.clone(),
                started,
            ),
            collect(
                child.stderr.take().expect("stderr"),
                stderr.clone(),
                started,
            ),
        ];
        Vmm {
            child,
            started,
            stdout,
            stderr,
            readers,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Console (stdout) lines so far.
    pub fn console(&self) -> Vec<Line> {
        self.stdout.lock().expect("lock").clone()
    }

    /// Log (stderr) lines so far.
    pub fn log(&self) -> Vec<Line> {
        self.stderr.lock().expect("lock").clone()
    }

    /// All console text so far, one string.
    pub fn console_text(&self) -> String {
        self.console()
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// All log text so far, one string.
    pub fn log_text(&self) -> String {
        self.log()
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until the log has `n` lines containing `what`; fails if the process exited first
    /// or 30 s pass.
    pub fn wait_log_count(&mut self, what: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.log_text().matches(what).count() < n {
            assert!(
                Instant::now() < deadline && !self.has_exited(),
                "no {n}× {what:?} in the log:\n{}",
                self.log_text()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process's open fds, virtual size and resident size (kB), from /proc.
    pub fn footprint(&self) -> (usize, u64, u64) {
        let pid = self.pid();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("fd dir")
            .count();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let kb = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .expect("status field")
        };
        (fds, kb("VmSize:"), kb("VmRSS:"))
    }

    /// Waits until a console line satisfies `pred`; returns it, or None on timeout or exit.
    pub fn wait_console(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<Line> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.console().into_iter().find(|l| pred(&l.text)) {
                return Some(l);
            }
            if Instant::now() >= deadline || matches!(self.child.try_wait(), Ok(Some(_))) {
                // One last look: the line may have arrived with the exit.
                thread::sleep(Duration::from_millis(20));
                return self.console().into_iter().find(|l| pred(&l.text));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for exit; panics with the output on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "osprey did not exit within {timeout:?}\nconsole:\n{}\nlog:\n{}",
                    self.console_text(),
                    self.log_text()
                );
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the API socket `sock` exists (Osprey binds and listens before it appears),
    /// failing if the child exits first or `timeout` passes.
    pub fn wait_for_socket(&mut self, sock: &Path, timeout: Duration) {
        let t0 = Instant::now();
        while !sock.exists() {
            assert!(!self.has_exited(), "osprey exited:\n{}", self.log_text());
            assert!(
                t0.elapsed() < timeout,
                "no API socket at {}:\n{}",
                sock.display(),
                self.log_text()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the child has exited (without reaping its output readers).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Time since spawn.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to completion with its output captured; kills it and panics after `timeout`.
pub fn output_within(mut cmd: Command, timeout: Duration) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.expect("wait for the child"),
        Err(_) => {
            // SAFETY: `pid` is our child, not yet reaped (the waiter thread has not returned);
            // SIGKILL ends it so the waiter returns.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} did not exit within {timeout:?}");
        }
    }
}

/// Runs `osprey` to completion and returns (status, stdout, stderr).
pub fn run_to_exit<I, S>(args: I, timeout: Duration) -> (ExitStatus, String, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut vmm = Vmm::spawn(args);
    let status = vmm.wait_exit(timeout);
    (status, vmm.console_text(), vmm.log_text())
}

/// `/proc/<pid>/task/<tid>/<file>` of the process's thread named `comm` (`None`: no such
/// thread, or the file could not be read).
pub fn thread_file(pid: u32, comm: &str, file: &str) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks
        .flatten()
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == comm))
        .and_then(|t| std::fs::read_to_string(t.path().join(file)).ok())
}

/// CPU time in ns of the VMM's thread named `comm`, from /proc (schedstat's first field).
pub fn thread_cpu_ns(pid: u32, comm: &str) -> u64 {
    let s =
        thread_file(pid, comm, "schedstat").unwrap_or_else(|| panic!("no thread {comm} in {pid}"));
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat field")
}

/// The test guest's `BLK {...}` report on a running or exited VMM's console.
pub fn blk_report(vmm: &Vmm) -> serde_json::Value {
    blk::report(&vmm.console_text(), "", &vmm.log_text())
}

/// One REST API request on `sock`: (status, body as JSON, or as a string when it is not JSON).
pub fn api_call(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let (status, text) = vmm::api::client::request(sock, method, path, body).expect("API request");
    let v = if text.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
    };
    (status, v)
}

/// `PATCH path body`, then (when it answered 204, as every successful PATCH does) `GET path`:
/// the status of the PATCH with the resource as it is now, or the PATCH's fault.
pub fn api_patch(sock: &Path, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (status, v) = api_call(sock, "PATCH", path, Some(body));
    if status != 204 {
        return (status, v);
    }
    assert!(v.is_null(), "PATCH {path}: 204 with a body: {v}");
    let (got, now) = api_call(sock, "GET", path, None);
    assert_eq!(got, 200, "GET {path} after PATCH: {now}");
    (status, now)
}
