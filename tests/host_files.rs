//! The VMM creates no files beyond those its config names (the API socket and the metrics file).
//!
//! One VM runs a disk workload with the API and metrics on, under `strace -f`, with its working
//! directory, `TMPDIR` and `HOME` pointing at empty folders. Every call that can create a file
//! system entry (open/openat/creat with O_CREAT, mkdir, mknod, link, symlink, rename, and bind of a
//! Unix socket) must name one of the two configured paths (or the socket's temporary name, which
//! it is renamed from once it listens); afterwards the empty folders are still
//! empty and only the metrics file is left (the socket is removed at exit).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::{osprey, test_guest};
use serde_json::json;

/// The syscalls that can create an entry, and whether they always do (else only with O_CREAT).
const CREATING: &[(&str, bool)] = &[
    ("open", false),
    ("openat", false),
    ("openat2", false),
    ("creat", true),
    ("mkdir", true),
    ("mkdirat", true),
    ("mknod", true),
    ("mknodat", true),
    ("link", true),
    ("linkat", true),
    ("symlink", true),
    ("symlinkat", true),
    ("rename", true),
    ("renameat", true),
    ("renameat2", true),
    ("bind", true),
];

/// The paths a creating call names: quoted strings, the Unix socket path of `bind`.
fn quoted(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = args;
    while let Some(start) = rest.find('"') {
        let tail = &rest[start + 1..];
        let Some(end) = tail.find('"') else { break };
        out.push(tail[..end].to_string());
        rest = &tail[end + 1..];
    }
    out
}

/// (syscall, paths) of every line of an `strace -f` log that can create an entry.
fn creating_calls(trace: &str) -> Vec<(String, Vec<String>, String)> {
    let mut found = Vec::new();
    for line in trace.lines() {
        // "<pid> name(args) = ret" or "<pid> name(args <unfinished ...>"
        let body = line.split_once(' ').map_or(line, |(_, b)| b).trim_start();
        let Some((name, args)) = body.split_once('(') else {
            continue;
        };
        let Some(&(_, always)) = CREATING.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        if name == "bind" && !args.contains("AF_UNIX") {
            continue;
        }
        if !always && !args.contains("O_CREAT") {
            continue;
        }
        found.push((name.to_string(), quoted(args), line.to_string()));
    }
    found
}

/// Whether `path` is the temporary name a socket at `sock` is bound under before it is renamed
/// into place: `.NAME.PID~` in the same folder.
fn is_temporary_name_of(path: &str, sock: &Path) -> bool {
    let (Some(folder), Some(name)) = (sock.parent(), sock.file_name()) else {
        return false;
    };
    let path = Path::new(path);
    let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
        return false;
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    path.parent() == Some(folder)
        && file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix('~'))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn parser_finds_creating_calls() {
    let trace = "\
101 openat(AT_FDCWD, \"/a/metrics.jsonl\", O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0666) = 9
101 openat(AT_FDCWD, \"/a/disk.img\", O_RDWR|O_CLOEXEC) = 10
102 bind(11, {sa_family=AF_UNIX, sun_path=\"/a/api.sock\"}, 110) = 0
102 bind(12, {sa_family=AF_INET, sin_port=htons(80)}, 16) = 0
103 mkdir(\"/tmp/x\", 0777 <unfinished ...>
103 <... mkdir resumed>) = 0";
    let calls = creating_calls(trace);
    let names: Vec<_> = calls.iter().map(|c| (c.0.as_str(), c.1.clone())).collect();
    assert_eq!(
        names,
        vec![
            ("openat", vec!["/a/metrics.jsonl".to_string()]),
            ("bind", vec!["/a/api.sock".to_string()]),
            ("mkdir", vec!["/tmp/x".to_string()]),
        ]
    );
}

#[test]
fn vmm_creates_only_the_files_its_config_names() {
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|o| o.status.success()),
        "this test needs strace (apt-get install strace; .ci/run installs it)"
    );
    let scratch = Scratch::new("files");
    let root = &scratch.0;
    let dirs: Vec<PathBuf> = ["cfg", "run", "cwd", "tmp", "home"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let (cfg_dir, run_dir) = (&dirs[0], &dirs[1]);
    let disk = cfg_dir.join("disk.img");
    std::fs::File::create(&disk)
        .and_then(|f| f.set_len(16 << 20))
        .expect("disk");
    let sock = run_dir.join("api.sock");
    let metrics = run_dir.join("metrics.jsonl");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 64},
        "boot-source": {"kernel_image_path": test_guest(),
                        "boot_args": "mode=blk rw=verify count=2000 bs=4096 qd=8 think_us=200"},
        "drives": [{"drive_id": "disk0", "path_on_host": disk, "io_engine": "IoUring"}],
        "api": {"socket": sock},
        "metrics": {"path": metrics, "interval_ms": 100},
    });
    let cfg_path = cfg_dir.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let trace_path = root.join("trace.txt");

    let t0 = Instant::now();
    let mut child = Command::new("strace")
        .args(["-f", "-qq", "-s", "4096", "-e", "signal=none", "-e"])
        .arg("trace=%file,bind")
        .arg("-o")
        .arg(&trace_path)
        .arg(osprey())
        .arg("--config")
        .arg(&cfg_path)
        .current_dir(&dirs[2])
        .env("TMPDIR", &dirs[3])
        .env("HOME", &dirs[4])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn strace osprey");
    // The guest verifies 2000 requests and exits; while it runs, ask the API once.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut asked = false;
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "the VM did not finish in 60 s");
        if !asked && sock.exists() {
            asked = vmm::api::client::request(&sock, "GET", "/vm", None).is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let console = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "VM under strace ran {:?}, API answered: {asked}",
        t0.elapsed()
    );
    assert!(
        out.status.success(),
        "the guest's verify pass must succeed\n{console}\n{log}"
    );
    assert!(console.contains("BLK {"), "no BLK report\n{console}");

    let trace = std::fs::read_to_string(&trace_path).expect("trace");
    let allowed = [metrics.display().to_string(), sock.display().to_string()];
    let calls = creating_calls(&trace);
    assert!(
        calls.iter().any(|c| c.1.contains(&allowed[0])),
        "the trace must show the metrics file being created (is the parser blind?)\n{trace}"
    );
    // The socket is bound under a temporary name beside it and renamed into place once it
    // listens (devices::uds): the bind names that name, the rename both.
    let temporary = |p: &String| is_temporary_name_of(p, &sock);
    assert!(
        calls
            .iter()
            .any(|c| c.0 == "bind" && c.1.iter().any(temporary))
            && calls
                .iter()
                .any(|c| c.0.starts_with("rename") && c.1.contains(&allowed[1])),
        "the trace must show the API socket's bind and its rename into place"
    );
    let stray: Vec<&String> = calls
        .iter()
        .filter(|(_, paths, _)| !paths.iter().any(|p| allowed.contains(p) || temporary(p)))
        .map(|(_, _, line)| line)
        .collect();
    assert!(
        stray.is_empty(),
        "calls that create other entries: {stray:#?}"
    );

    for d in &dirs[2..] {
        assert!(
            entries(d).is_empty(),
            "{} gained {:?}",
            d.display(),
            entries(d)
        );
    }
    assert_eq!(
        entries(run_dir),
        vec!["metrics.jsonl"],
        "the socket is removed at exit"
    );
    assert_eq!(entries(cfg_dir), vec!["disk.img", "vm.json"]);
}
