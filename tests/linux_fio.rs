//! Linux guests running fio on Osprey's virtio-blk disks: crc32c verify over 1 and 4 queues on each
//! engine, a boot from the ext4 root disk, and a short randread/randwrite matrix; and a Linux
//! guest reset by the API's Ctrl+Alt+Del (the i8042 probed with Firecracker's boot arguments). The guest is the
//! Linux kit (`guest-images/linux/build-kit.sh`: the Debian cloud kernel, an initramfs with
//! busybox, fio and the virtio modules, and an init that runs the fio jobs named on the command
//! line and prints their JSON between `OSPREY-FIO-BEGIN n` / `OSPREY-FIO-END n rc=…` markers).
//!
//! Linux user space needs hardware virtualization: on kvm_pvm hosts (software nested KVM) a
//! non-PVM guest's `syscall` does not work, so fio cannot run there. This file has its own test
//! harness (`harness = false`) so that it can say so: on such hosts every test that boots Linux
//! to user space prints `NOT RUN` with the reason and is counted apart from passes and failures.
//! What every host checks: the kit builds, and its init turns command lines into the fio
//! invocations this file relies on. (`tests/linux_milestones.rs` boots the kernel itself.)
//!
//! `OSPREY_LINUX_TESTS=force` runs the Linux tests on any host (they fail on kvm_pvm);
//! `OSPREY_LINUX_TESTS=skip` reports them as not run everywhere. Arguments: test-name filters
//! (substrings), `--list`, `--exact`; libtest's other flags are accepted and ignored.

mod common;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::{api_call, repo_root, run_to_exit, Vmm};
use serde_json::{json, Value};

/// How long one Linux boot with its fio jobs may take on a hardware-virtualization host.
const BOOT_TIMEOUT: Duration = Duration::from_secs(600);
const CMDLINE_BASE: &str = "console=ttyS0 reboot=k panic=-1 loglevel=4";

/// The kit's files.
struct Kit {
    dir: PathBuf,
}

impl Kit {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Builds (or finds cached) the kernel and the kit. `OSPREY_LINUX_KIT=DIR` uses a kit built
/// elsewhere instead (e.g. against a Fedora kernel: guest-images/README.md, "Fedora path").
fn kit() -> Kit {
    if let Some(dir) = std::env::var_os("OSPREY_LINUX_KIT") {
        let kit = Kit { dir: dir.into() };
        eprintln!(
            "    using the kit in {} (OSPREY_LINUX_KIT)",
            kit.dir.display()
        );
        check_kit(&kit);
        return kit;
    }
    let kit = Kit {
        dir: common::linux::build_kit(),
    };
    check_kit(&kit);
    kit
}

fn check_kit(kit: &Kit) {
    for f in [
        "bzImage",
        "initramfs.cpio",
        "initramfs-min.cpio",
        "rootfs.ext4",
        "busybox",
    ] {
        assert!(kit.path(f).is_file(), "{} missing", kit.path(f).display());
    }
}

/// A scratch folder under `target/linux-fio/` (disk images of up to 256 MiB: not on a tmpfs).
fn scratch_dir(name: &str) -> Scratch {
    Scratch::under(&repo_root().join("target/linux-fio"), name)
}

/// What one boot of the kit printed.
struct KitRun {
    /// `key=value` fields of the `OSPREY-KIT-READY` line.
    ready: BTreeMap<String, String>,
    /// fio's JSON and exit code, per run, in order.
    fio: Vec<(Value, i32)>,
    console: String,
    log: String,
}

impl KitRun {
    /// `disks=vda:SECTORS:QUEUES;…` as name → (sectors, queues).
    fn disks(&self) -> BTreeMap<String, (u64, u32)> {
        self.ready
            .get("disks")
            .map(|d| {
                d.split(';')
                    .filter(|s| !s.is_empty())
                    .filter_map(|s| {
                        let mut f = s.split(':');
                        let name = f.next()?.to_string();
                        Some((name, (f.next()?.parse().ok()?, f.next()?.parse().ok()?)))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Osprey's `drive stats` log line of `drive_id`.
    fn drive_stats(&self, drive_id: &str) -> Value {
        self.log
            .lines()
            .filter_map(|l| l.split_once("drive stats ").map(|(_, j)| j))
            .filter_map(|j| serde_json::from_str::<Value>(j).ok())
            .find(|v| v["drive_id"] == drive_id)
            .unwrap_or_else(|| panic!("no drive stats for {drive_id}:\n{}", self.log))
    }
}

/// A printk line (`[    1.234567] ...`) that the console may mix into fio's output.
fn is_kernel_message(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .is_some_and(|(stamp, _)| {
            stamp.contains('.') && stamp.trim().chars().all(|c| c.is_ascii_digit() || c == '.')
        })
}

/// The fio JSON runs between the kit's markers.
fn fio_runs(console: &str) -> Vec<(Value, i32)> {
    let mut runs = Vec::new();
    let mut body: Option<Vec<&str>> = None;
    for line in console.lines() {
        if line.starts_with("OSPREY-FIO-BEGIN ") {
            body = Some(Vec::new());
        } else if let Some(rest) = line.strip_prefix("OSPREY-FIO-END ") {
            let text = body.take().unwrap_or_default().join("\n");
            let rc = rest
                .split_once("rc=")
                .and_then(|(_, r)| r.trim().parse().ok())
                .unwrap_or(-1);
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("fio output is not JSON ({e}):\n{text}"));
            runs.push((json, rc));
        } else if let Some(b) = body.as_mut() {
            if !is_kernel_message(line) {
                b.push(line);
            }
        }
    }
    runs
}

/// Boots the kit with `drives` and `args` on the command line; waits for it to reboot.
fn boot_kit(kit: &Kit, scratch: &Scratch, cpus: u8, drives: Vec<Value>, args: &str) -> KitRun {
    boot_kit_with(kit, "initramfs.cpio", scratch, cpus, drives, args)
}

/// [`boot_kit`] with another initramfs of the kit.
fn boot_kit_with(
    kit: &Kit,
    initramfs: &str,
    scratch: &Scratch,
    cpus: u8,
    drives: Vec<Value>,
    args: &str,
) -> KitRun {
    let cfg = json!({
        "machine-config": {"vcpu_count": cpus, "mem_size_mib": 1024},
        "boot-source": {
            "kernel_image_path": kit.path("bzImage"),
            "initrd_path": kit.path(initramfs),
            "boot_args": format!("{CMDLINE_BASE} {args}"),
        },
        "drives": drives,
    });
    let cfg_path = scratch.0.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let t0 = Instant::now();
    let (status, console, log) =
        run_to_exit(["--config".as_ref(), cfg_path.as_os_str()], BOOT_TIMEOUT);
    eprintln!("    boot + fio: {:.1} s", t0.elapsed().as_secs_f64());
    assert!(
        status.success(),
        "the guest must reboot cleanly ({status})\nconsole:\n{console}\nlog:\n{log}"
    );
    assert!(
        !console.contains("OSPREY-KIT-ERROR"),
        "the kit reported an error:\n{console}"
    );
    let Some(ready) = parse_ready(&console) else {
        panic!("no OSPREY-KIT-READY line:\n{console}\n{log}");
    };
    let fio = fio_runs(&console);
    KitRun {
        ready,
        fio,
        console,
        log,
    }
}

/// The `key=value` fields of the `OSPREY-KIT-READY` line.
fn parse_ready(console: &str) -> Option<BTreeMap<String, String>> {
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("OSPREY-KIT-READY "))?;
    Some(
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// Runs everywhere: the console parsing above on a recorded fio run (host fio's JSON in the
/// kit's markers, from the matrix runner's fixtures) with a kernel message dropped into the JSON.
fn console_contract_parses_a_recorded_run() {
    let fixture = repo_root().join("tools/osprey-bench/testdata/kit/kit-randread-4k-qd8-2jobs.txt");
    let text = std::fs::read_to_string(&fixture).expect("fixture");
    let mut lines: Vec<&str> = text.lines().collect();
    let begin = lines
        .iter()
        .position(|l| l.starts_with("OSPREY-FIO-BEGIN"))
        .expect("BEGIN");
    lines.insert(
        begin + 3,
        "[    3.141592] virtio_blk virtio1: [vdb] 327680 512-byte logical blocks",
    );
    let console = lines.join("\n");
    let run = KitRun {
        ready: parse_ready(&console).expect("READY"),
        fio: fio_runs(&console),
        console: console.clone(),
        log: String::new(),
    };
    assert_eq!(run.disks().get("vda"), Some(&(2_097_152, 2)));
    assert_eq!(run.ready.get("cpus").map(String::as_str), Some("2"));
    assert_eq!(run.fio.len(), 1);
    assert_jobs_ok(&run.fio[0], "recorded randread");
    assert_eq!(run.fio[0].0["jobs"][0]["job options"]["rw"], "randread");
    assert!(is_kernel_message("[    0.000000] Linux version 6.1"));
    assert!(!is_kernel_message("[ {"));
    assert!(!is_kernel_message("  \"iops\" : 1.0,"));
}

fn drive(id: &str, path: &Path, engine: &str, queues: u16) -> Value {
    json!({"drive_id": id, "path_on_host": path, "io_engine": engine, "num_queues": queues})
}

/// `osprey.fio=` for a crc32c verify job on `dev`: `jobs` jobs on disjoint 32 MiB regions, job k
/// pinned to CPU k (so with one CPU per hardware queue, each job drives its own virtqueue).
fn verify_spec(name: &str, dev: &str, engine: &str, jobs: u32) -> String {
    format!(
        "osprey.fio=name:{name},filename:{dev},rw:randwrite,bs:4k,iodepth:16,ioengine:{engine},\
direct:1,size:32m,numjobs:{jobs},offset_increment:32m,verify:crc32c,do_verify:1,verify_fatal:1,\
group_reporting:0,cpus_allowed:0-{},cpus_allowed_policy:split",
        jobs - 1
    )
}

/// Each fio job of a run finished without error and moved data.
fn assert_jobs_ok(run: &(Value, i32), what: &str) {
    let (json, rc) = run;
    assert_eq!(*rc, 0, "{what}: fio exit code\n{json}");
    let jobs = json["jobs"].as_array().expect("jobs");
    assert!(!jobs.is_empty(), "{what}: no jobs");
    for j in jobs {
        assert_eq!(j["error"], 0, "{what}: job {} error", j["jobname"]);
        let bytes = j["read"]["io_bytes"].as_u64().unwrap_or(0)
            + j["write"]["io_bytes"].as_u64().unwrap_or(0);
        assert!(bytes > 0, "{what}: job {} moved no data", j["jobname"]);
    }
}

/// crc32c verify on a 1-queue and a 4-queue disk served by `engine`; 4 vCPUs so that blk-mq
/// maps a CPU to each of the 4 queues.
fn verify_on(engine: &str) {
    let kit = kit();
    let scratch = scratch_dir(&format!("verify-{engine}"));
    let (a, b) = (
        scratch.sparse("one.img", 64 << 20),
        scratch.sparse("four.img", 160 << 20),
    );
    let args = format!(
        "{} {}",
        verify_spec("q1", "/dev/vda", "io_uring", 1),
        verify_spec("q4", "/dev/vdb", "libaio", 4)
    );
    let r = boot_kit(
        &kit,
        &scratch,
        4,
        vec![drive("one", &a, engine, 1), drive("four", &b, engine, 4)],
        &args,
    );
    let disks = r.disks();
    assert_eq!(disks.get("vda"), Some(&(64 << 11, 1)), "{:?}", r.ready);
    assert_eq!(disks.get("vdb"), Some(&(160 << 11, 4)), "{:?}", r.ready);
    assert_eq!(r.ready.get("cpus").map(String::as_str), Some("4"));
    assert_eq!(r.fio.len(), 2, "two fio runs\n{}", r.console);
    assert_jobs_ok(&r.fio[0], "1 queue");
    assert_jobs_ok(&r.fio[1], "4 queues");
    assert_eq!(r.fio[1].0["jobs"].as_array().map(Vec::len), Some(4));
    for (id, queues) in [("one", 1), ("four", 4)] {
        let s = r.drive_stats(id);
        assert_eq!(s["io_errors"], 0, "{s}");
        assert_eq!(s["malformed"], 0, "{s}");
        let per_queue = s["queue_requests"].as_array().expect("queue_requests");
        assert_eq!(per_queue.len(), queues, "{s}");
        assert!(
            per_queue.iter().all(|n| n.as_u64().unwrap_or(0) > 0),
            "every queue of {id} must carry requests: {s}"
        );
        assert!(
            s["engine"].as_str().unwrap_or("").starts_with(engine),
            "{s}"
        );
    }
}

fn fio_verify_io_uring() {
    verify_on("IoUring");
}

fn fio_verify_linux_aio() {
    verify_on("LinuxAio");
}

fn fio_verify_sync() {
    verify_on("Sync");
}

/// Boots from the ext4 root disk (`root=/dev/vda`; the kit's small initramfs, without fio, loads
/// the virtio modules and switches root) and runs a short matrix on a second disk: randread and
/// randwrite at QD1 and QD32, 4 KiB. The table goes to `target/linux-fio-matrix.md`; no speed is
/// asserted.
fn root_disk_boot_and_fio_matrix() {
    let kit = kit();
    let scratch = scratch_dir("rootdisk");
    let root = scratch.0.join("root.ext4");
    std::fs::copy(kit.path("rootfs.ext4"), &root).expect("copy the root disk");
    let data = scratch.sparse("data.img", 256 << 20);
    let points = [
        ("randread", 1),
        ("randread", 32),
        ("randwrite", 1),
        ("randwrite", 32),
    ];
    let specs: Vec<String> = points
        .iter()
        .map(|(rw, qd)| {
            format!(
                "osprey.fio=name:{rw}-qd{qd},filename:/dev/vdb,rw:{rw},bs:4k,iodepth:{qd},\
ioengine:io_uring,direct:1,size:256m,time_based,runtime:5"
            )
        })
        .collect();
    // The small initramfs has no fio: the runs below can only work from the root disk.
    let r = boot_kit_with(
        &kit,
        "initramfs-min.cpio",
        &scratch,
        2,
        vec![
            json!({"drive_id": "root", "path_on_host": root}),
            drive("data", &data, "IoUring", 2),
        ],
        &format!("root=/dev/vda rw {}", specs.join(" ")),
    );
    assert!(
        r.console.contains("OSPREY-KIT: running from root disk"),
        "the second stage must run from /dev/vda:\n{}",
        r.console
    );
    assert_eq!(r.fio.len(), points.len(), "{}", r.console);
    let mut table = String::from("| point | IOPS | mean latency µs |\n|---|---|---|\n");
    for ((rw, qd), run) in points.iter().zip(&r.fio) {
        assert_jobs_ok(run, &format!("{rw} QD{qd}"));
        let side = if rw.contains("read") { "read" } else { "write" };
        let j = &run.0["jobs"][0][side];
        let iops = j["iops"].as_f64().unwrap_or(0.0);
        let lat = j["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0;
        table.push_str(&format!("| 4k {rw} QD{qd} | {iops:.0} | {lat:.1} |\n"));
    }
    eprintln!("{table}");
    let _ = std::fs::write(repo_root().join("target/linux-fio-matrix.md"), table);
}

/// Firecracker's i8042 boot arguments (its default command line has them).
const FIRECRACKER_I8042_ARGS: &str = "i8042.noaux i8042.nomux i8042.dumbkbd";

/// The kit's small initramfs with Firecracker's i8042 arguments and `osprey.shell=1` (after its
/// (empty) runs init waits in a shell on the console, whose input stays open): the kernel probes
/// the i8042 (`serio: i8042 KBD port`), atkbd binds, and `PUT /actions SendCtrlAltDel` makes the
/// kernel restart (`ctrl_alt_del()`, nobody turned Ctrl+Alt+Del off) through the keyboard
/// controller (`reboot=k`): Osprey exits 0 on the guest's reset. Nothing else ends this VM.
fn ctrl_alt_del_resets_linux() {
    let kit = kit();
    let scratch = scratch_dir("ctrl-alt-del");
    let sock = scratch.0.join("api.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 512},
        "boot-source": {
            "kernel_image_path": kit.path("bzImage"),
            "initrd_path": kit.path("initramfs-min.cpio"),
            // loglevel=7 after the base's 4: the probe's lines are KERN_INFO.
            "boot_args": format!("{CMDLINE_BASE} loglevel=7 {FIRECRACKER_I8042_ARGS} osprey.shell=1"),
        },
    });
    let cfg_path = scratch.0.join("vm.json");
    std::fs::write(&cfg_path, cfg.to_string()).expect("config");
    let mut vmm = Vmm::spawn_with_stdin(
        [
            "--config".as_ref(),
            cfg_path.as_os_str(),
            "--api-sock".as_ref(),
            sock.as_os_str(),
        ],
        std::process::Stdio::piped(),
    );
    let mut wait = |what: &str, pred: fn(&str) -> bool| {
        let line = vmm.wait_console(BOOT_TIMEOUT, pred).unwrap_or_else(|| {
            panic!(
                "no {what} line:
{}
log:
{}",
                vmm.console_text(),
                vmm.log_text()
            )
        });
        eprintln!("    {:.1} s: {}", line.at.as_secs_f64(), line.text);
    };
    wait("i8042 probe", |l| {
        l.contains("serio: i8042 KBD port at 0x60,0x64 irq 1")
    });
    wait("atkbd", |l| {
        l.contains("input: AT Translated Set 2 keyboard")
    });
    wait("shell", |l| l.contains("osprey.shell=1: starting sh"));
    let (st, info) = api_call(&sock, "GET", "/", None);
    assert_eq!(
        (st, info["state"].as_str()),
        (200, Some("Running")),
        "{info}"
    );
    let (st, reply) = api_call(
        &sock,
        "PUT",
        "/actions",
        Some(r#"{"action_type": "SendCtrlAltDel"}"#),
    );
    assert_eq!(st, 204, "{reply}");
    let status = vmm.wait_exit(Duration::from_secs(60));
    let (console, log) = (vmm.console_text(), vmm.log_text());
    for l in console
        .lines()
        .filter(|l| l.contains("i8042") || l.contains("serio"))
    {
        eprintln!("    console: {l}");
    }
    assert!(
        status.success(),
        "{status}
console:
{console}
log:
{log}"
    );
    assert!(
        console.contains("reboot: Restarting system"),
        "the kernel restarts:
{console}"
    );
    assert!(
        log.contains("the guest reset the machine (i8042)"),
        "through the keyboard controller:
{log}"
    );
    assert!(
        !console.contains("Can't read CTR") && !console.contains("Can't write CTR"),
        "the probe must not complain:
{console}"
    );
}

/// Runs everywhere: the kit builds, and the init script turns command lines into the fio
/// invocations the Linux tests rely on (checked with the kit's own static busybox).
fn kit_builds_and_init_translates_fio_specs() {
    let kit = kit();
    let init = repo_root().join("guest-images/linux/init");
    let dry = |cmdline: &str| -> Vec<String> {
        let out = Command::new(kit.path("busybox"))
            .arg("sh")
            .arg(&init)
            .env("OSPREY_KIT_DRYRUN", "1")
            .env("OSPREY_KIT_CMDLINE", cmdline)
            .output()
            .expect("run init in dry-run mode");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("OSPREY-KIT-DRYRUN "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        dry(&format!(
            "{CMDLINE_BASE} osprey.fio=name:a,filename:/dev/vda,rw:randread,time_based \
             root=/dev/vda osprey.fio=filename:/dev/vdb,bs:4k"
        )),
        vec![
            "fio --output-format=json --name=a --filename=/dev/vda --rw=randread --time_based",
            "fio --output-format=json --name=job2 --filename=/dev/vdb --bs=4k",
        ]
    );
    assert!(dry(CMDLINE_BASE).is_empty(), "no osprey.fio, no fio run");
    // The specs this file sends translate one to one.
    let spec = verify_spec("q4", "/dev/vdb", "libaio", 4);
    let got = dry(&spec);
    assert_eq!(got.len(), 1, "{got:?}");
    for kv in spec.trim_start_matches("osprey.fio=").split(',') {
        let (k, v) = kv.split_once(':').expect("key:value");
        assert!(
            got[0].contains(&format!(" --{k}={v}")),
            "{kv} missing: {}",
            got[0]
        );
    }
    // The initramfs holds what init needs.
    let list = Command::new("cpio")
        .arg("-t")
        .stdin(std::fs::File::open(kit.path("initramfs.cpio")).expect("cpio"))
        .output()
        .expect("cpio -t");
    let list = String::from_utf8_lossy(&list.stdout);
    for needle in [
        "init",
        "virtio_blk.ko",
        "virtio_pci.ko",
        "bin/busybox",
        "fio",
    ] {
        assert!(
            list.lines().any(|l| l.ends_with(needle)),
            "{needle} missing from initramfs.cpio"
        );
    }
}

/// A test case and whether it needs Linux user space in a guest.
struct Case {
    name: &'static str,
    run: fn(),
    needs_guest_user_space: bool,
}

fn main() {
    let cases = [
        Case {
            name: "kit_builds_and_init_translates_fio_specs",
            run: kit_builds_and_init_translates_fio_specs,
            needs_guest_user_space: false,
        },
        Case {
            name: "console_contract_parses_a_recorded_run",
            run: console_contract_parses_a_recorded_run,
            needs_guest_user_space: false,
        },
        Case {
            name: "fio_verify_1_and_4_queues_io_uring",
            run: fio_verify_io_uring,
            needs_guest_user_space: true,
        },
        Case {
            name: "fio_verify_1_and_4_queues_linux_aio",
            run: fio_verify_linux_aio,
            needs_guest_user_space: true,
        },
        Case {
            name: "fio_verify_1_and_4_queues_sync",
            run: fio_verify_sync,
            needs_guest_user_space: true,
        },
        Case {
            name: "root_disk_boot_and_fio_matrix",
            run: root_disk_boot_and_fio_matrix,
            needs_guest_user_space: true,
        },
        Case {
            name: "ctrl_alt_del_resets_linux",
            run: ctrl_alt_del_resets_linux,
            needs_guest_user_space: true,
        },
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    // libtest options that take a separate value; `--skip` is honoured, the others ignored.
    const WITH_VALUE: [&str; 6] = [
        "--test-threads",
        "--skip",
        "--format",
        "--color",
        "--logfile",
        "-Z",
    ];
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if WITH_VALUE.contains(&a.as_str()) {
            if let Some(v) = it.next() {
                if a == "--skip" {
                    skips.push(v.as_str());
                }
            }
        } else if !a.starts_with('-') {
            filters.push(a.as_str());
        }
    }
    let matches = |name: &str, f: &str| if exact { name == f } else { name.contains(f) };
    let selected: Vec<&Case> = cases
        .iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| matches(c.name, f)))
        .filter(|c| !skips.iter().any(|f| matches(c.name, f)))
        .collect();
    if args.iter().any(|a| a == "--list") {
        for c in &selected {
            println!("{}: test", c.name);
        }
        return;
    }

    let flavor = vmm::host::KvmFlavor::detect();
    let (can_run, reason) = match std::env::var("OSPREY_LINUX_TESTS").as_deref() {
        Ok("force") => (true, String::new()),
        Ok("skip") => (false, "OSPREY_LINUX_TESTS=skip".to_string()),
        _ if flavor.is_hardware() => (true, String::new()),
        _ => (
            false,
            format!(
                "this host's KVM is not hardware virtualization ({}); Linux user space (fio) \
                 cannot run in a guest here. Run on a vmx/svm host (see guest-images/README.md)",
                flavor.describe()
            ),
        ),
    };
    println!("\nrunning {} tests (Linux guests with fio)", selected.len());
    let (mut passed, mut failed, mut not_run) = (0, Vec::new(), 0);
    for c in &selected {
        if c.needs_guest_user_space && !can_run {
            println!("test {} ... NOT RUN: {reason}", c.name);
            not_run += 1;
            continue;
        }
        let t0 = Instant::now();
        let result = std::panic::catch_unwind(AssertUnwindSafe(c.run));
        let secs = t0.elapsed().as_secs_f64();
        match result {
            Ok(()) => {
                println!("test {} ... ok ({secs:.1} s)", c.name);
                passed += 1;
            }
            Err(_) => {
                println!("test {} ... FAILED ({secs:.1} s)", c.name);
                failed.push(c.name);
            }
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {not_run} NOT RUN{}\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        if not_run > 0 {
            " (not passes: see the reason on each line)"
        } else {
            ""
        }
    );
    if !failed.is_empty() {
        println!("failures: {failed:?}");
        std::process::exit(101);
    }
}
