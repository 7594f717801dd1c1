//! The Linux kit as the runner's guest (`--guest linux`): the Debian cloud kernel (`bzImage`)
//! and the kit's initramfs (`initramfs.cpio`: busybox, fio, virtio modules, an init) from
//! `guest-images/cache/linux`, booted with one `osprey.fio=<spec>` per run that drives `/dev/vda`
//! with the point's workload; the init prints fio's JSON between markers (`kit_report.rs`).
//!
//! Linux user space needs hardware virtualization: on kvm_pvm (software nested KVM) the guest
//! never gets to fio, so the runner refuses such hosts unless `--force-linux-guest`. The runner
//! does not build the kit (that needs root and apt); it names the command when a file is missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::guest::{Boot, GuestError, GuestRun};
use crate::kit_report::{kit_sample, KitError};
use crate::machine::HostKvm;
use crate::matrix::Point;
use crate::sample::RunSample;
use crate::vm_run::VmOutput;
use crate::vmm_log::VmmLog;

/// Kernel command line before the fio spec: serial console, reset on reboot and on panic (so
/// Osprey exits), kernel messages only from warnings up.
pub const BOOT_ARGS: &str = "console=ttyS0 reboot=k panic=-1 loglevel=4";
/// The guest's memory when fio's buffers are small, MiB.
pub const BASE_MEM_MIB: u64 = 1024;
/// fio's engine in the guest, for every point (Osprey's engine is the point's; this one is not).
pub const FIO_ENGINE: &str = "io_uring";
/// The drive as the guest sees it.
pub const DEVICE: &str = "/dev/vda";
/// The kit directory, relative to the repository root.
pub const DEFAULT_KIT_DIR: &str = "guest-images/cache/linux";

/// `--guest linux` cannot run here.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LinuxGuestError {
    /// The host's KVM is not hardware virtualization.
    #[error(
        "--guest linux needs hardware virtualization (kvm_intel or kvm_amd: a host with vmx or svm), \
         but this host's /dev/kvm is {0}: Linux user space, and so fio, cannot run in its guests. \
         Use --guest test-guest on this host, or --force-linux-guest to try anyway"
    )]
    NotHardware(&'static str),
    /// Kit files are missing.
    #[error("the Linux kit in {dir} is incomplete: {missing}")]
    MissingKit {
        /// The kit directory.
        dir: String,
        /// Each missing file with the command that makes it.
        missing: String,
    },
}

/// Refuses a host whose KVM is not hardware virtualization unless `force`; with `force`, the
/// warning to print.
pub fn check_host(flavor: HostKvm, force: bool) -> Result<Option<String>, LinuxGuestError> {
    if flavor.is_hardware() {
        return Ok(None);
    }
    if force {
        return Ok(Some(format!(
            "--force-linux-guest: running Linux guests on {}; expect them to stop before fio runs",
            flavor.describe()
        )));
    }
    Err(LinuxGuestError::NotHardware(flavor.describe()))
}

/// The kit's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinuxKit {
    /// The directory.
    pub dir: PathBuf,
    /// The kernel.
    pub bzimage: PathBuf,
    /// The initramfs with fio.
    pub initrd: PathBuf,
}

impl LinuxKit {
    /// The kit in `given`, or in `guest-images/cache/linux` under `root`; both files must exist.
    pub fn find(root: &Path, given: Option<&Path>) -> Result<Self, LinuxGuestError> {
        let default = given.is_none();
        let dir = given.map_or_else(|| root.join(DEFAULT_KIT_DIR), Path::to_path_buf);
        let kit = LinuxKit {
            bzimage: dir.join("bzImage"),
            initrd: dir.join("initramfs.cpio"),
            dir,
        };
        let out = if default {
            String::new()
        } else {
            format!(" --out {}", kit.dir.display())
        };
        let mut missing = Vec::new();
        if !kit.bzimage.is_file() {
            missing.push(format!(
                "{} is missing (the kernel: {}; build-kit.sh also fetches it)",
                kit.bzimage.display(),
                if default {
                    "`make kernel`".to_string()
                } else {
                    format!("`bash guest-images/linux/fetch-kernel.sh{out}`")
                }
            ));
        }
        if !kit.initrd.is_file() {
            missing.push(format!(
                "{} is missing (the initramfs with fio: `bash guest-images/linux/build-kit.sh{out}`, \
                 as root)",
                kit.initrd.display()
            ));
        }
        if missing.is_empty() {
            Ok(kit)
        } else {
            Err(LinuxGuestError::MissingKit {
                dir: kit.dir.display().to_string(),
                missing: missing.join("; "),
            })
        }
    }

    /// `Linux kit in DIR (kernel PACKAGE VERSION)`, from fetch-kernel.sh's `version` file.
    pub fn describe(&self) -> String {
        let kernel = std::fs::read_to_string(self.dir.join("version"))
            .ok()
            .and_then(|v| v.lines().next().map(|l| l.trim().to_string()))
            .filter(|l| !l.is_empty());
        match kernel {
            Some(k) => format!("Linux kit in {} (kernel {k})", self.dir.display()),
            None => format!("Linux kit in {}", self.dir.display()),
        }
    }
}

/// vCPUs for `p`: one per queue, so blk-mq maps one CPU to each hardware queue (virtio_blk
/// creates no more queues than there are CPUs).
pub fn vcpus(p: &Point) -> u32 {
    p.queues
}

/// Guest memory for `p`, MiB: 1024, plus fio's buffers (`bs · qd · queues`) rounded up to
/// 256 MiB when they are above 256 MiB.
pub fn mem_mib(p: &Point) -> u64 {
    let pool_mib = p.guest_pool_bytes().div_ceil(1 << 20);
    if pool_mib <= 256 {
        BASE_MEM_MIB
    } else {
        BASE_MEM_MIB + pool_mib.next_multiple_of(256)
    }
}

/// fio's time option in ms (at least 100 ms), as the native runs give it.
fn fio_ms(seconds: f64) -> u64 {
    (seconds * 1000.0).round().max(100.0) as u64
}

/// The `osprey.fio=` spec of a run of `p`: job `name` on [`DEVICE`] over its first `range` bytes,
/// `seconds` long after `ramp` seconds of unrecorded I/O (0: none). `numjobs` = queues with
/// `group_reporting` (one JSON job for the whole group), each job pinned to its own CPU
/// (`cpus_allowed_policy:split`) and so to its own hardware queue; `randrepeat:0` and
/// `norandommap` as in the native runs.
pub fn fio_spec(p: &Point, name: &str, range: u64, seconds: f64, ramp: f64) -> String {
    let mut items = vec![
        format!("name:{name}"),
        format!("filename:{DEVICE}"),
        format!("rw:{}", p.rw),
        format!("bs:{}", p.bs),
        format!("iodepth:{}", p.qd),
        format!("numjobs:{}", p.queues),
        "group_reporting:1".into(),
        format!("ioengine:{FIO_ENGINE}"),
        "direct:1".into(),
        format!("size:{range}"),
        "time_based".into(),
        format!("runtime:{}ms", fio_ms(seconds)),
    ];
    if ramp > 0.0 {
        items.push(format!("ramp_time:{}ms", fio_ms(ramp)));
    }
    items.extend([
        "randrepeat:0".into(),
        "norandommap".into(),
        if p.queues > 1 {
            format!("cpus_allowed:0-{}", p.queues - 1)
        } else {
            "cpus_allowed:0".into()
        },
        "cpus_allowed_policy:split".into(),
    ]);
    items.join(",")
}

/// One Linux run of a point: one boot, one fio run.
#[derive(Debug, Clone)]
pub struct LinuxRun<'a> {
    /// The kit.
    pub kit: &'a LinuxKit,
    /// fio's job name (`point-003-run1`).
    pub name: String,
    /// Bytes of the disk fio uses from offset 0.
    pub range: u64,
    /// fio's runtime, s.
    pub seconds: f64,
    /// fio's ramp_time, s (0: none).
    pub ramp: f64,
}

impl LinuxRun<'_> {
    /// How long the run may take: the boot, the ramp and the run, with room to spare.
    pub fn deadline(&self) -> Duration {
        Duration::from_secs_f64((120.0 + 3.0 * (self.seconds + self.ramp)).min(4.0 * 3600.0))
    }
}

impl GuestRun for LinuxRun<'_> {
    fn boot(&self, p: &Point) -> Boot {
        Boot {
            kernel: self.kit.bzimage.clone(),
            initrd: Some(self.kit.initrd.clone()),
            cmdline: format!(
                "{BOOT_ARGS} osprey.fio={}",
                fio_spec(p, &self.name, self.range, self.seconds, self.ramp)
            ),
            vcpus: vcpus(p),
            mem_mib: mem_mib(p),
        }
    }

    /// fio run 1 of the console with Osprey's log; Osprey must have exited 0 (the guest
    /// rebooted).
    fn sample(&self, p: &Point, out: &VmOutput) -> Result<RunSample, GuestError> {
        let log = VmmLog::of_run(&out.log, out.metrics.as_ref())?;
        let sample = kit_sample(&out.console, p, &log)?;
        if !out.status.success() {
            return Err(KitError::Exit(out.status.to_string()).into());
        }
        Ok(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, PollSetting, Rw};
    use crate::vm_config::{vm_config, DriveParams};

    fn point(rw: Rw, bs: u64, qd: u32, queues: u32) -> Point {
        Point {
            rw,
            bs,
            qd,
            queues,
            engine: Engine::IoUring,
            poll: PollSetting::Off,
            max_batch: 32,
            irq: true,
            hog: 0,
        }
    }

    fn kit() -> LinuxKit {
        LinuxKit {
            dir: PathBuf::from("/kit"),
            bzimage: PathBuf::from("/kit/bzImage"),
            initrd: PathBuf::from("/kit/initramfs.cpio"),
        }
    }

    #[test]
    fn fio_specs_of_a_few_points() {
        assert_eq!(
            fio_spec(
                &point(Rw::RandRead, 4096, 32, 1),
                "point-001-run1",
                1 << 30,
                2.0,
                0.5
            ),
            "name:point-001-run1,filename:/dev/vda,rw:randread,bs:4096,iodepth:32,numjobs:1,\
             group_reporting:1,ioengine:io_uring,direct:1,size:1073741824,time_based,\
             runtime:2000ms,ramp_time:500ms,randrepeat:0,norandommap,cpus_allowed:0,\
             cpus_allowed_policy:split"
        );
        assert_eq!(
            fio_spec(&point(Rw::Write, 131072, 8, 4), "p7", 64 << 20, 1.5, 0.0),
            "name:p7,filename:/dev/vda,rw:write,bs:131072,iodepth:8,numjobs:4,group_reporting:1,\
             ioengine:io_uring,direct:1,size:67108864,time_based,runtime:1500ms,randrepeat:0,\
             norandommap,cpus_allowed:0-3,cpus_allowed_policy:split"
        );
        // A very short run is still 100 ms, like the native runs.
        assert_eq!(
            fio_spec(&point(Rw::RandWrite, 512, 1, 8), "x", 1 << 20, 0.01, 0.0),
            "name:x,filename:/dev/vda,rw:randwrite,bs:512,iodepth:1,numjobs:8,group_reporting:1,\
             ioengine:io_uring,direct:1,size:1048576,time_based,runtime:100ms,randrepeat:0,\
             norandommap,cpus_allowed:0-7,cpus_allowed_policy:split"
        );
    }

    #[test]
    fn the_vm_config_is_the_test_guest_drive_with_the_kit_boot() {
        let p = Point {
            engine: Engine::LinuxAio,
            poll: PollSetting::Weighted(3),
            max_batch: 128,
            ..point(Rw::RandRead, 4096, 32, 4)
        };
        let kit = kit();
        let run = LinuxRun {
            kit: &kit,
            name: "point-002-run1".into(),
            range: 1 << 30,
            seconds: 2.0,
            ramp: 0.0,
        };
        let drive = DriveParams {
            store: Path::new("/dev/loop0"),
            direct: true,
        };
        let c = vm_config(&p, &drive, &run.boot(&p));
        assert_eq!(c["machine-config"]["vcpu_count"], 4);
        assert_eq!(c["machine-config"]["mem_size_mib"], 1024);
        assert_eq!(c["boot-source"]["kernel_image_path"], "/kit/bzImage");
        assert_eq!(c["boot-source"]["initrd_path"], "/kit/initramfs.cpio");
        let args = c["boot-source"]["boot_args"].as_str().expect("args");
        assert!(
            args.starts_with(
                "console=ttyS0 reboot=k panic=-1 loglevel=4 osprey.fio=name:point-002-run1,"
            ),
            "{args}"
        );
        assert_eq!(args.matches("osprey.fio=").count(), 1);
        // The spec is one word: the kernel splits its command line on spaces.
        assert_eq!(args.split(' ').count(), 5, "{args}");
        assert_eq!(c["drives"][0]["io_engine"], "LinuxAio");
        assert_eq!(c["drives"][0]["num_queues"], 4);
        assert_eq!(c["drives"][0]["queue_size"], 256);
        assert_eq!(c["iothreads"][0]["poll_policy"], "Weighted");
        assert_eq!(c["iothreads"][0]["max_batch"], 128);
    }

    #[test]
    fn memory_grows_with_fio_buffers() {
        assert_eq!(mem_mib(&point(Rw::RandRead, 4096, 32, 1)), 1024);
        // 1 MiB · 256 · 1 = 256 MiB still fits the base.
        assert_eq!(mem_mib(&point(Rw::RandRead, 1 << 20, 256, 1)), 1024);
        // 1 MiB · 256 · 8 = 2 GiB of buffers.
        assert_eq!(mem_mib(&point(Rw::RandRead, 1 << 20, 256, 8)), 1024 + 2048);
        // 1 MiB · 129 · 3 = 387 MiB, rounded up to 512.
        assert_eq!(mem_mib(&point(Rw::RandRead, 1 << 20, 129, 3)), 1024 + 512);
        assert_eq!(vcpus(&point(Rw::RandRead, 4096, 1, 6)), 6);
    }

    #[test]
    fn refuses_non_hardware_kvm_unless_forced() {
        let e = check_host(HostKvm::Pvm, false).expect_err("must fail");
        let msg = e.to_string();
        assert!(msg.contains("kvm_pvm"), "{msg}");
        assert!(msg.contains("hardware virtualization"), "{msg}");
        assert!(msg.contains("--force-linux-guest"), "{msg}");
        assert!(check_host(HostKvm::Unknown, false).is_err());
        let warning = check_host(HostKvm::Pvm, true).expect("forced");
        assert!(warning.is_some_and(|w| w.contains("kvm_pvm")));
        assert_eq!(check_host(HostKvm::Hardware("kvm_intel"), false), Ok(None));
    }

    #[test]
    fn names_missing_kit_files_and_their_commands() {
        let dir = std::env::temp_dir().join(format!("osprey-bench-kit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let kit_dir = dir.join(DEFAULT_KIT_DIR);
        std::fs::create_dir_all(&kit_dir).expect("mkdir");
        let msg = LinuxKit::find(&dir, None)
            .expect_err("must fail")
            .to_string();
        assert!(msg.contains("bzImage is missing"), "{msg}");
        assert!(msg.contains("`make kernel`"), "{msg}");
        assert!(msg.contains("initramfs.cpio is missing"), "{msg}");
        assert!(
            msg.contains("`bash guest-images/linux/build-kit.sh`"),
            "{msg}"
        );
        std::fs::write(kit_dir.join("bzImage"), b"k").expect("write");
        let msg = LinuxKit::find(&dir, None)
            .expect_err("must fail")
            .to_string();
        assert!(!msg.contains("bzImage"), "{msg}");
        assert!(msg.contains("initramfs.cpio is missing"), "{msg}");
        // Another directory: the commands name it.
        let msg = LinuxKit::find(&dir, Some(&dir))
            .expect_err("must fail")
            .to_string();
        assert!(
            msg.contains(&format!("build-kit.sh --out {}`", dir.display())),
            "{msg}"
        );
        std::fs::write(kit_dir.join("initramfs.cpio"), b"i").expect("write");
        std::fs::write(
            kit_dir.join("version"),
            "linux-image-6.1.0-56-cloud-amd64 6.1.192-2\n",
        )
        .expect("write");
        let kit = LinuxKit::find(&dir, None).expect("complete");
        assert_eq!(kit.initrd, kit_dir.join("initramfs.cpio"));
        assert!(kit
            .describe()
            .ends_with("(kernel linux-image-6.1.0-56-cloud-amd64 6.1.192-2)"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The kit's own init turns the spec into the fio command line the runner means (its dry-run
    /// hook, run with the host's sh). Skipped when the init is not in the tree.
    #[test]
    fn the_kit_init_reads_the_spec_as_meant() {
        let init = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-images/linux/init");
        if !init.is_file() {
            eprintln!("skipped: {} is missing", init.display());
            return;
        }
        let kit = kit();
        let run = LinuxRun {
            kit: &kit,
            name: "point-004-run2".into(),
            range: 1 << 30,
            seconds: 2.0,
            ramp: 0.5,
        };
        let p = point(Rw::RandWrite, 4096, 16, 2);
        let out = std::process::Command::new("sh")
            .arg(&init)
            .env("OSPREY_KIT_DRYRUN", "1")
            .env("OSPREY_KIT_CMDLINE", run.boot(&p).cmdline)
            .output()
            .expect("sh");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "OSPREY-KIT-DRYRUN fio --output-format=json --name=point-004-run2 --filename=/dev/vda \
             --rw=randwrite --bs=4096 --iodepth=16 --numjobs=2 --group_reporting=1 \
             --ioengine=io_uring --direct=1 --size=1073741824 --time_based --runtime=2000ms \
             --ramp_time=500ms --randrepeat=0 --norandommap --cpus_allowed=0-1 \
             --cpus_allowed_policy=split"
        );
    }
}
