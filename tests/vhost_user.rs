//! `osprey vhost-user-blk` behind a real frontend: QEMU (Debian's `qemu-system-x86`, which
//! `.ci/run` installs) boots the test guest with a `vhost-user-blk-pci` device on the backend's
//! socket and guest memory in a shared memfd. The guest's verify workload must see every block
//! it wrote (QD1 and QD16, one and two queues); a frontend killed in the middle of QD16 I/O
//! leaves the backend serving the next one, with no fd or mapping left behind after 20 more
//! connect/disconnect cycles; a backend killed with requests in flight is replaced by a new one
//! on the same socket, which resubmits them from QEMU's inflight region (`INFLIGHT_SHMFD`) so
//! the guest loses none; a queue the guest breaks costs the backend no CPU; the REST API shows
//! the drive's counters and changes an iothread live. The backend runs in the VMM's sandbox (its
//! default) throughout.
//! Without QEMU each test prints `NOT RUN: <reason>` and passes.
//! The Cloud Hypervisor block at the end boots the same guest in Cloud Hypervisor
//! (`OSPREY_CLOUD_HYPERVISOR`, else `cloud-hypervisor` on PATH; `NOT RUN` without one): verify
//! at QD1 and QD16 on two queues, and a frontend killed mid-QD16 then started again. They are
//! `#[ignore]`d, so that `make test` shows them as not run rather than passed on hosts without
//! Cloud Hypervisor (CI builds none: it takes minutes); `make test-cloud-hypervisor` runs them.

mod common;

use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::{test_guest, thread_cpu_ns, Vmm};
use serde_json::Value;
use vhost::vhost_user::message::VhostUserHeaderFlag;
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

/// Guest memory of the QEMU boots and of the test's own frontend.
const MEM_MIB: u64 = 256;

/// QEMU's x86 system emulator, if installed.
fn qemu() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
}

/// The QEMU binary, or `None` after printing why the test does not run.
fn qemu_or_not_run() -> Option<PathBuf> {
    let q = qemu();
    if q.is_none() {
        println!("NOT RUN: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
    }
    if !Path::new("/dev/kvm").exists() {
        println!("NOT RUN: no /dev/kvm");
        return None;
    }
    q
}

/// A running backend on `<scratch>/vu.sock` serving `<scratch>/disk.img` (64 MiB).
struct Backend {
    vmm: Vmm,
    sock: PathBuf,
    api: PathBuf,
    /// The folder of its files, when the backend owns it.
    _scratch: Option<Scratch>,
}

impl Backend {
    fn start(name: &str) -> Backend {
        let scratch = Scratch::new(&format!("vhost-{name}"));
        let disk = scratch.sparse("disk.img", 64 << 20);
        let sock = scratch.0.join("vu.sock");
        let api = scratch.0.join("api.sock");
        let args = [
            "vhost-user-blk".as_ref(),
            "--socket".as_ref(),
            sock.as_os_str(),
            "--path".as_ref(),
            disk.as_os_str(),
            "--api-sock".as_ref(),
            api.as_os_str(),
        ];
        let mut backend = Backend::spawn(&args, sock.clone(), api.clone());
        backend._scratch = Some(scratch);
        backend
    }

    /// A backend on `config`, whose drive `vhost0` is on `sock`, with its API on `api`.
    fn start_config(config: &Path, sock: &Path, api: &Path) -> Backend {
        let args = [
            "vhost-user-blk".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--api-sock".as_ref(),
            api.as_os_str(),
        ];
        Backend::spawn(&args, sock.to_owned(), api.to_owned())
    }

    /// Runs `osprey` with `args` and waits until its API serves.
    fn spawn(args: &[&std::ffi::OsStr], sock: PathBuf, api: PathBuf) -> Backend {
        let mut vmm = Vmm::spawn(args);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !vmm.log_text().contains("vhost-user-blk: API on") {
            assert!(
                Instant::now() < deadline && !vmm.has_exited(),
                "the backend did not start:\n{}",
                vmm.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Backend {
            vmm,
            sock,
            api,
            _scratch: None,
        }
    }

    /// Waits until drive `vhost0` has completed exactly `n` requests (the API's counter).
    fn wait_requests(&mut self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, drive) = common::api_call(&self.api, "GET", "/drives/vhost0", None);
            assert_eq!(status, 200, "{drive}");
            let done = drive["requests"].as_u64().expect("requests");
            if done == n {
                return;
            }
            assert!(
                done < n && Instant::now() < deadline && !self.vmm.has_exited(),
                "drive vhost0 completed {done} requests, waiting for {n}:\n{}",
                self.vmm.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Requests the backend resubmitted from the inflight region, over all rings (its log).
    fn resubmitted(&self) -> u64 {
        self.vmm
            .log_text()
            .lines()
            .filter_map(|l| l.split_once(" requests resubmitted from the inflight region"))
            .filter_map(|(head, _)| head.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// Boots the test guest in QEMU on the backend's socket with `queues` queues and `args`.
fn spawn_qemu(qemu: &Path, sock: &Path, queues: u16, args: &str) -> Vmm {
    spawn_qemu_chardev(qemu, sock, queues, args, "")
}

/// `spawn_qemu` with `chardev_opts` added to the socket's `-chardev` (e.g. `,reconnect=1`).
fn spawn_qemu_chardev(
    qemu: &Path,
    sock: &Path,
    queues: u16,
    args: &str,
    chardev_opts: &str,
) -> Vmm {
    let argv: Vec<String> = [
        "-machine",
        "pc,accel=kvm",
        "-cpu",
        "host,-arch-capabilities",
        "-smp",
        "1",
        "-m",
        &format!("{MEM_MIB}M"),
        "-object",
        &format!("memory-backend-memfd,id=mem,size={MEM_MIB}M,share=on"),
        "-numa",
        "node,memdev=mem",
        "-nographic",
        "-no-reboot",
        "-monitor",
        "none",
        "-serial",
        "stdio",
        "-device",
        "isa-debug-exit,iobase=0xf4,iosize=0x04",
        "-kernel",
        &test_guest().display().to_string(),
        "-append",
        &format!("mode=blk queues={queues} {args}"),
        "-chardev",
        &format!("socket,id=vu,path={}{chardev_opts}", sock.display()),
        "-device",
        &format!("vhost-user-blk-pci,chardev=vu,num-queues={queues},disable-legacy=on"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Vmm::spawn_program(qemu, argv, Stdio::null())
}

/// Runs the guest to its exit; returns its BLK report (asserting it exited 0: QEMU's status is
/// 2·byte+1).
fn boot(qemu: &Path, backend: &Backend, queues: u16, args: &str) -> Value {
    let mut vm = spawn_qemu(qemu, &backend.sock, queues, args);
    let status = vm.wait_exit(Duration::from_secs(120));
    let report = common::blk::report(&vm.console_text(), args, &backend.vmm.log_text());
    assert_eq!(
        status.code(),
        Some(1),
        "guest exit status (QEMU's 2·byte+1) for {args}; console:\n{}\nQEMU:\n{}",
        vm.console_text(),
        vm.log_text()
    );
    report
}

/// The main run's errors and mismatches are zero, with every request done.
fn assert_verified(report: &Value, queues: u64, qd: u64) {
    let run = common::blk::run(report, "main");
    assert_eq!(report["queues_used"], queues, "{report}");
    assert_eq!(run["qd"], qd, "{report}");
    assert_eq!(run["errors"], 0, "{report}");
    assert_eq!(run["mismatches"], 0, "{report}");
    assert_eq!(run["timed_out"], false, "{report}");
    assert_eq!(report["failures"], 0, "{report}");
}

#[test]
fn the_verify_workload_sees_every_write_at_qd1_and_qd16_on_one_and_two_queues() {
    let Some(qemu) = qemu_or_not_run() else {
        return;
    };
    let backend = Backend::start("verify");
    let one = boot(&qemu, &backend, 1, "rw=verify qd=1 count=1000");
    assert_verified(&one, 1, 1);
    let two = boot(&qemu, &backend, 2, "rw=verify qd=16 count=4000");
    assert_verified(&two, 2, 16);
    assert_eq!(two["event_idx"], true, "EVENT_IDX negotiated: {two}");
    assert_eq!(two["flush"], true, "FLUSH negotiated: {two}");

    // Every thread of the backend ran in the VMM's sandbox (on by default).
    assert!(
        backend
            .vmm
            .log_text()
            .contains("sandbox: on: seccomp on all"),
        "{}",
        backend.vmm.log_text()
    );

    // The REST API: the drive's counters saw both guests' requests on both queues, and an
    // iothread's polling changes live.
    let (status, drive) = common::api_call(&backend.api, "GET", "/drives/vhost0", None);
    assert_eq!(status, 200, "{drive}");
    let requests = drive["requests"].as_u64().expect("requests");
    assert!(requests >= 5000, "1000 + 4000 requests counted: {drive}");
    let per_queue = drive["queue_requests"].as_array().expect("queue_requests");
    assert!(
        per_queue[1].as_u64().unwrap_or(0) > 0,
        "queue 1 served: {drive}"
    );
    let (status, thread) =
        common::api_patch(&backend.api, "/iothreads/io0", r#"{"poll_max_ns": 0}"#);
    assert_eq!(status, 204, "{thread}");
    assert_eq!(thread["poll_max_ns"], 0, "{thread}");
    let (status, fault) = common::api_call(
        &backend.api,
        "PUT",
        "/actions",
        Some(r#"{"action_type": "Pause"}"#),
    );
    assert_eq!(status, 400, "no VM to pause: {fault}");
}

/// A memfd of `bytes` (guest memory the test's frontend shares).
fn memfd(bytes: u64) -> std::fs::File {
    use std::os::unix::io::FromRawFd;
    // SAFETY: a NUL-terminated name; the call only creates a descriptor.
    let fd = unsafe { libc::memfd_create(c"vhost-test-mem".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nothing else owns.
    let f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.set_len(bytes).expect("size the memfd");
    f
}

/// One frontend connection as QEMU makes it: negotiate, share memory, start two empty rings,
/// kick them, go away.
fn connect_and_disconnect(sock: &Path, mem: &std::fs::File) {
    let mut f = Frontend::connect(sock, 2).expect("connect");
    f.set_owner().expect("SET_OWNER");
    let features = f.get_features().expect("GET_FEATURES");
    f.set_features(features).expect("SET_FEATURES");
    let proto = f.get_protocol_features().expect("GET_PROTOCOL_FEATURES");
    f.set_protocol_features(proto)
        .expect("SET_PROTOCOL_FEATURES");
    f.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    let va = 0x7f00_0000_0000;
    f.set_mem_table(&[VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: MEM_MIB << 20,
        userspace_addr: va,
        mmap_offset: 0,
        mmap_handle: mem.as_raw_fd(),
    }])
    .expect("SET_MEM_TABLE");
    let mut fds = Vec::new();
    for q in 0..2u64 {
        let base = va + q * 0x10000;
        f.set_vring_num(q as usize, 128).expect("SET_VRING_NUM");
        f.set_vring_addr(
            q as usize,
            &VringConfigData {
                queue_max_size: 128,
                queue_size: 128,
                flags: 0,
                desc_table_addr: base,
                avail_ring_addr: base + 0x800,
                used_ring_addr: base + 0x1000,
                log_addr: None,
            },
        )
        .expect("SET_VRING_ADDR");
        f.set_vring_base(q as usize, 0).expect("SET_VRING_BASE");
        let (kick, call) = (EventFd::new(0).expect("efd"), EventFd::new(0).expect("efd"));
        f.set_vring_call(q as usize, &call).expect("SET_VRING_CALL");
        f.set_vring_kick(q as usize, &kick).expect("SET_VRING_KICK");
        f.set_vring_enable(q as usize, true)
            .expect("SET_VRING_ENABLE");
        kick.write(1).expect("kick");
        fds.push((kick, call));
    }
}

#[test]
fn a_frontend_killed_mid_io_leaves_the_backend_ready_and_nothing_leaked() {
    let Some(qemu) = qemu_or_not_run() else {
        return;
    };
    let mut backend = Backend::start("kill");
    // A long QD16 run on two queues, killed once both rings run and I/O flows. Random writes:
    // a verify run stops at the disk's size (two passes over 64 MiB), which a fast host
    // finishes before the kill.
    let mut vm = spawn_qemu(&qemu, &backend.sock, 2, "rw=randwrite qd=16 count=10000000");
    backend.vmm.wait_log_count("rings [0, 1] running", 1);
    std::thread::sleep(Duration::from_millis(300));
    vm.signal(libc::SIGKILL);
    vm.wait_exit(Duration::from_secs(10));
    // Logged once the device drained every request and the connection's state is gone.
    backend.vmm.wait_log_count("waiting for a frontend", 1);
    let before = backend.vmm.footprint();

    let mem = memfd(MEM_MIB << 20);
    for i in 0..20 {
        connect_and_disconnect(&backend.sock, &mem);
        backend.vmm.wait_log_count("waiting for a frontend", 2 + i);
    }
    let after = backend.vmm.footprint();
    println!("backend fds, VmSize kB, VmRSS kB: before {before:?}, after 20 cycles {after:?}");
    assert_eq!(after.0, before.0, "open fds before/after 20 connections");
    // Each connection maps 256 MiB of guest memory: one left mapped would show here.
    assert!(
        after.1 < before.1 + (MEM_MIB << 10) / 2,
        "VmSize grew from {} to {} kB",
        before.1,
        after.1
    );

    let report = boot(&qemu, &backend, 1, "rw=verify qd=16 count=2000");
    assert_verified(&report, 1, 16);
}

/// A drive config on `sock` for `disk`, with `fault` as its `fault_injection` (JSON) if any.
fn drive_config(sock: &Path, disk: &Path, fault: Option<&str>) -> String {
    let fault = fault.map_or(String::new(), |f| format!(r#", "fault_injection": {f}"#));
    format!(
        r#"{{"drives": [{{"drive_id": "vhost0", "path_on_host": "{}", "socket": "{}"{fault}}}]}}"#,
        disk.display(),
        sock.display()
    )
}

/// QEMU reconnects (`reconnect=1`) to backends killed with requests in flight. The first hangs
/// the writes of 8 blocks in the middle of the write phase, the second the reads of 8 blocks in
/// the read phase: each is killed once every other request completed, so its 8 hung requests
/// are in flight out of order (later ones completed), where QEMU's avail base (the used index)
/// would run completed requests again and never the hung ones. Each new backend resubmits
/// exactly the 8 from QEMU's inflight region and the guest's verify sees every block, with
/// each request completed once.
#[test]
fn a_backend_killed_mid_io_is_replaced_and_the_guest_loses_nothing() {
    let Some(qemu) = qemu_or_not_run() else {
        return;
    };
    let scratch = Scratch::new("vhost-restart");
    // 16384 blocks of 4 KiB: the verify writes them all, then reads them all back.
    let disk = scratch.sparse("disk.img", 64 << 20);
    let sock = scratch.0.join("vu.sock");
    let hang = |op: &str, block: u64| {
        format!(
            r#"{{"error": "HANG", "operations": ["{op}"], "sector": {}, "sectors": 64}}"#,
            block * 8
        )
    };
    let configs = [
        scratch.file(
            "hang-writes.json",
            &drive_config(&sock, &disk, Some(&hang("write", 8192))),
        ),
        scratch.file(
            "hang-reads.json",
            &drive_config(&sock, &disk, Some(&hang("read", 12288))),
        ),
        scratch.file("plain.json", &drive_config(&sock, &disk, None)),
    ];
    let api = |n: usize| scratch.0.join(format!("api-{n}.sock"));
    let mut backend = Backend::start_config(&configs[0], &sock, &api(0));
    let mut vm = spawn_qemu_chardev(
        &qemu,
        &sock,
        2,
        "rw=verify qd=16 count=32768 timeout_ms=120000",
        ",reconnect=1",
    );
    // GET_ID and every write but the 8 hung ones.
    backend.wait_requests(1 + 16384 - 8);
    backend.vmm.signal(libc::SIGKILL);
    backend.vmm.wait_exit(Duration::from_secs(10));
    let mut backend = Backend::start_config(&configs[1], &sock, &api(1));
    // The 8 writes, and every read but the 8 hung ones.
    backend.wait_requests(8 + 16384 - 8);
    assert_eq!(backend.resubmitted(), 8, "{}", backend.vmm.log_text());
    backend.vmm.signal(libc::SIGKILL);
    backend.vmm.wait_exit(Duration::from_secs(10));
    let backend = Backend::start_config(&configs[2], &sock, &api(2));
    let status = vm.wait_exit(Duration::from_secs(120));
    let report = common::blk::report(&vm.console_text(), "restart", &backend.vmm.log_text());
    assert_eq!(backend.resubmitted(), 8, "{}", backend.vmm.log_text());
    assert_eq!(
        status.code(),
        Some(1),
        "guest exit status; console:\n{}\nQEMU:\n{}",
        vm.console_text(),
        vm.log_text()
    );
    assert_verified(&report, 2, 16);
    assert_eq!(
        common::blk::run(&report, "main")["requests"],
        32768,
        "every request completed once: {report}"
    );
}

#[test]
fn a_queue_the_guest_breaks_costs_the_backend_no_cpu() {
    let Some(qemu) = qemu_or_not_run() else {
        return;
    };
    let backend = Backend::start("broken");
    let mut vm = spawn_qemu(
        &qemu,
        &backend.sock,
        1,
        "rw=read qd=1 count=100 broken_idle_ms=2000",
    );
    let begin = vm
        .wait_console(Duration::from_secs(60), |l| l.contains("broken-idle begin"))
        .expect("the guest breaks its queue");
    let cpu0 = thread_cpu_ns(backend.vmm.pid(), "iothread-io0");
    let end = vm
        .wait_console(Duration::from_secs(30), |l| l.contains("broken-idle end"))
        .expect("the broken idle ends");
    let cpu1 = thread_cpu_ns(backend.vmm.pid(), "iothread-io0");
    let idle = end.at.saturating_sub(begin.at);
    let share = (cpu1 - cpu0) as f64 / idle.as_nanos() as f64;
    println!(
        "iothread CPU over {idle:?} of broken queue: {} µs ({:.3} %)",
        (cpu1 - cpu0) / 1000,
        share * 100.0
    );
    assert!(
        share < 0.02,
        "the iothread used {:.1} % of a core",
        share * 100.0
    );
    // The valid read completed and the looping chain came back (as with Osprey's own device);
    // DEVICE_NEEDS_RESET stays 0: vhost-user has no way to set it without the backend channel.
    assert!(
        end.text.contains("read_status=0 used=2"),
        "the read and the broken chain came back: {}",
        end.text
    );
    let status = vm.wait_exit(Duration::from_secs(60));
    assert_eq!(
        status.code(),
        Some(1),
        "guest exit 0; console:\n{}",
        vm.console_text()
    );
}

// ---------------------------------------------------------------------------------------------
// Cloud Hypervisor as the frontend (issue 42). A block of its own: its helpers are used only
// by the two tests below.
// ---------------------------------------------------------------------------------------------

/// Cloud Hypervisor: `OSPREY_CLOUD_HYPERVISOR` when set, else `cloud-hypervisor` on PATH.
fn cloud_hypervisor() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("OSPREY_CLOUD_HYPERVISOR") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("cloud-hypervisor"))
        .find(|p| p.is_file())
}

/// The Cloud Hypervisor binary, or `None` after printing why the test does not run.
fn cloud_hypervisor_or_not_run() -> Option<PathBuf> {
    if !Path::new("/dev/kvm").exists() {
        println!("NOT RUN: no /dev/kvm");
        return None;
    }
    let ch = cloud_hypervisor();
    match &ch {
        None => println!(
            "NOT RUN: no Cloud Hypervisor (set OSPREY_CLOUD_HYPERVISOR=/path/to/cloud-hypervisor \
             or put cloud-hypervisor on PATH; scripts/build-cloud-hypervisor.sh builds one)"
        ),
        Some(path) => assert!(
            path.is_file(),
            "OSPREY_CLOUD_HYPERVISOR={} is not a file",
            path.display()
        ),
    }
    ch
}

/// Boots the test guest in Cloud Hypervisor on the backend's socket with `queues` queues and
/// `args`: shared memory (the backend maps it), the serial port on stdout, and as many vCPUs as
/// queues (Cloud Hypervisor refuses more queues than vCPUs; the guest runs on the first).
fn spawn_cloud_hypervisor(ch: &Path, sock: &Path, queues: u16, args: &str) -> Vmm {
    let argv: Vec<String> = [
        "--kernel",
        &test_guest().display().to_string(),
        "--cmdline",
        &format!("mode=blk queues={queues} {args}"),
        "--cpus",
        &format!("boot={queues}"),
        "--memory",
        &format!("size={MEM_MIB}M,shared=on"),
        "--disk",
        &format!(
            "vhost_user=true,socket={},num_queues={queues},queue_size=256",
            sock.display()
        ),
        "--serial",
        "tty",
        "--console",
        "off",
        "-v",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Vmm::spawn_program(ch, argv, Stdio::null())
}

/// Runs the guest in Cloud Hypervisor to its exit; returns its BLK report. Cloud Hypervisor
/// has no debug-exit port: the guest powers off through ACPI (Cloud Hypervisor then exits 0)
/// and its own status is its last serial line.
fn boot_cloud_hypervisor(ch: &Path, backend: &Backend, queues: u16, args: &str) -> Value {
    let mut vm = spawn_cloud_hypervisor(ch, &backend.sock, queues, args);
    let status = vm.wait_exit(Duration::from_secs(120));
    let console = vm.console_text();
    assert!(
        status.success() && console.lines().any(|l| l == "osprey-test-guest: exit 0"),
        "guest exit 0 and Cloud Hypervisor exit 0 (got {status}) for {args}; console:\n{console}\n\
         Cloud Hypervisor:\n{}\nbackend:\n{}",
        vm.log_text(),
        backend.vmm.log_text()
    );
    let report = common::blk::report(&console, args, &backend.vmm.log_text());
    println!("Cloud Hypervisor, {args}: BLK {report}");
    report
}

#[test]
#[ignore = "needs a Cloud Hypervisor binary: make test-cloud-hypervisor (OSPREY_CLOUD_HYPERVISOR=PATH)"]
fn cloud_hypervisor_verify_sees_every_write_at_qd1_and_qd16_on_two_queues() {
    let Some(ch) = cloud_hypervisor_or_not_run() else {
        return;
    };
    let backend = Backend::start("ch-verify");
    let one = boot_cloud_hypervisor(&ch, &backend, 1, "rw=verify qd=1 count=1000");
    assert_verified(&one, 1, 1);
    let two = boot_cloud_hypervisor(&ch, &backend, 2, "rw=verify qd=16 count=4000");
    assert_verified(&two, 2, 16);
    assert_eq!(two["event_idx"], true, "EVENT_IDX negotiated: {two}");
    assert_eq!(two["flush"], true, "FLUSH negotiated: {two}");
}

#[test]
#[ignore = "needs a Cloud Hypervisor binary: make test-cloud-hypervisor (OSPREY_CLOUD_HYPERVISOR=PATH)"]
fn cloud_hypervisor_killed_mid_io_and_started_again_verifies() {
    let Some(ch) = cloud_hypervisor_or_not_run() else {
        return;
    };
    let mut backend = Backend::start("ch-kill");
    // A long QD16 run on two queues, killed once both rings run and I/O flows (random writes,
    // which the disk's size does not end, as it ends a verify run).
    let mut vm = spawn_cloud_hypervisor(&ch, &backend.sock, 2, "rw=randwrite qd=16 count=10000000");
    backend.vmm.wait_log_count("rings [0, 1] running", 1);
    std::thread::sleep(Duration::from_millis(300));
    let (status, drive) = common::api_call(&backend.api, "GET", "/drives/vhost0", None);
    assert_eq!(status, 200, "{drive}");
    let before_kill = drive["requests"].as_u64().expect("requests");
    assert!(before_kill > 0, "I/O flows before the kill: {drive}");
    vm.signal(libc::SIGKILL);
    vm.wait_exit(Duration::from_secs(10));
    assert!(
        !vm.console_text().contains("BLK "),
        "killed before the guest's report:\n{}",
        vm.console_text()
    );
    println!("Cloud Hypervisor killed after {before_kill} requests");
    // Logged once the device drained every request and the connection's state is gone.
    backend.vmm.wait_log_count("waiting for a frontend", 1);

    let report = boot_cloud_hypervisor(&ch, &backend, 2, "rw=verify qd=16 count=4000");
    assert_verified(&report, 2, 16);
}
