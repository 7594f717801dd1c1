//! The command line: the guest, the matrix as comma lists, the store, timing, outputs, and the
//! `--quick` preset; resolved into [`Settings`] with the defaults filled in.

use std::path::PathBuf;

use clap::Parser;

use crate::guest::GuestKind;
use crate::matrix::{
    parse_bs, parse_hog, parse_irq, parse_max_batch, parse_qd, parse_queues, Engine, Matrix,
    MatrixSpec, PollSetting, Rw,
};
use crate::store::{is_root, StoreKind};
use crate::units::parse_size;

/// Osprey's workload matrix runner: boots a guest (Osprey's test guest, or with --guest linux fio
/// in a Linux guest) once per run of every point of the matrix, runs host fio on the same store
/// for reference, and writes results.csv, results.md and SVG plots.
#[derive(Debug, Parser)]
#[command(name = "osprey-bench", version)]
pub struct Cli {
    /// The guest that drives the disk: test-guest or linux.
    ///
    /// test-guest: Osprey's own minimal guest (guest-images/test-guest, mode=blk), a small
    /// virtio-blk driver and load generator that times every request with the TSC. Runs on any
    /// KVM, kvm_pvm included. Built with make when missing (see --test-guest-elf).
    ///
    /// linux: the Linux kit (Debian cloud kernel bzImage + initramfs.cpio with busybox, fio and
    /// the virtio modules, in guest-images/cache/linux or --linux-kit) running fio on /dev/vda:
    /// ioengine io_uring, direct=1, iodepth = qd, numjobs = queues (one job pinned per vCPU, with
    /// group_reporting), runtime = --seconds, ramp_time = --warmup; vCPUs = queues, at least
    /// 1024 MiB. --irq does not apply (Linux takes the drive's MSI-X interrupts), nor does the
    /// test guest's 8 MiB buffer limit.
    ///
    /// linux needs hardware virtualization (kvm_intel or kvm_amd: a vmx/svm host); it is refused
    /// on kvm_pvm and unknown KVMs unless --force-linux-guest. The runner does not build the kit:
    /// run `make kernel` and then `bash guest-images/linux/build-kit.sh` (as root) first. See
    /// docs/benchmarks.md, "Linux guest (fio)".
    #[arg(long, value_name = "KIND", default_value = "test-guest", value_parser = parse_guest)]
    pub guest: GuestKind,
    /// Access patterns: randread, randwrite, read, write.
    #[arg(long, value_delimiter = ',')]
    pub rw: Vec<Rw>,
    /// Block sizes (512 B–1 MiB, multiples of 512): 4k,128k.
    #[arg(long, value_delimiter = ',', value_parser = parse_bs)]
    pub bs: Vec<u64>,
    /// Queue depths per queue (1–256).
    #[arg(long, value_delimiter = ',', value_parser = parse_qd)]
    pub qd: Vec<u32>,
    /// Virtqueues the guest drives (1–8); also fio's numjobs.
    #[arg(long, value_delimiter = ',', value_parser = parse_queues)]
    pub queues: Vec<u32>,
    /// Osprey I/O engines: Auto (the default), IoUring, LinuxAio, Sync, Null.
    #[arg(long, value_delimiter = ',')]
    pub engine: Vec<Engine>,
    /// Polling configs: off, classic, classic:<window> (e.g. classic:200us), weighted:<W>, adaptive.
    #[arg(long, value_delimiter = ',')]
    pub poll: Vec<PollSetting>,
    /// The iothread's max_batch values (0–1024; 0 = Osprey's default 32).
    #[arg(long = "max-batch", value_delimiter = ',', value_parser = parse_max_batch)]
    pub max_batch: Vec<u32>,
    /// Guest completion mode: 0 polls the used rings, 1 takes MSI-X interrupts (test guest only;
    /// the Linux guest always takes interrupts).
    #[arg(long, value_delimiter = ',', value_parser = parse_irq)]
    pub irq: Vec<bool>,
    /// A busy host: CPU-bound processes (plain busy loops, stopped when the point ends) running
    /// beside the VM during each run of the point, e.g. `--hog 0,1` for idle and busy side by side.
    #[arg(long, value_delimiter = ',', value_parser = parse_hog)]
    pub hog: Vec<u32>,
    /// Backing store [default: loop as root, else file].
    #[arg(long, value_enum)]
    pub store: Option<StoreKind>,
    /// Directory for `--store file`.
    #[arg(long, default_value = "target")]
    pub store_dir: PathBuf,
    /// Store size (the guest uses at most 1 GiB of it).
    #[arg(long, default_value = "1g", value_parser = parse_size)]
    pub store_size: u64,
    /// Seconds per recorded run (and per fio run) [default: 2; --quick 1].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Recorded runs per point; the report shows the median and the min–max spread
    /// [default: 3; --quick 1].
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Seconds of an unrecorded warm-up run per point, after the sizing probe (Linux guest: fio's
    /// ramp_time in every run); 0 for none [default: 0.5; --quick 0].
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Output directory [default: target/bench/<UTC timestamp>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Osprey binary [default: target/release/osprey, built with cargo if missing].
    #[arg(long)]
    pub osprey: Option<PathBuf>,
    /// Test guest ELF [default: guest-images/build/test-guest.elf, built with make if missing].
    #[arg(long, value_name = "PATH")]
    pub test_guest_elf: Option<PathBuf>,
    /// The Linux kit directory for --guest linux, holding bzImage and initramfs.cpio
    /// [default: guest-images/cache/linux].
    #[arg(long, value_name = "DIR")]
    pub linux_kit: Option<PathBuf>,
    /// Run --guest linux even though this host's KVM is not kvm_intel or kvm_amd.
    #[arg(long)]
    pub force_linux_guest: bool,
    /// A small preset (4k randread QD1/QD32, 1 queue, IoUring, polling off/classic, 1 s per
    /// point, no repeats); explicit options override it.
    #[arg(long)]
    pub quick: bool,
    /// Skip host fio (the native columns stay empty).
    #[arg(long)]
    pub no_native: bool,
    /// Print the matrix and exit.
    #[arg(long)]
    pub dry_run: bool,
}

fn parse_guest(s: &str) -> Result<GuestKind, String> {
    s.parse()
}

/// Everything the runner needs, defaults resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The guest kind.
    pub guest: GuestKind,
    /// The matrix lists.
    pub spec: MatrixSpec,
    /// Store kind.
    pub store: StoreKind,
    /// The store kind was chosen for the user (not root: file).
    pub store_defaulted_to_file: bool,
    /// Directory of a file store.
    pub store_dir: PathBuf,
    /// Store bytes.
    pub store_size: u64,
    /// Seconds per recorded run.
    pub seconds: f64,
    /// Recorded runs per point.
    pub repeats: u32,
    /// Warm-up seconds per point.
    pub warmup: f64,
    /// Output directory, if given.
    pub out: Option<PathBuf>,
    /// Osprey binary, if given.
    pub osprey: Option<PathBuf>,
    /// Test guest ELF, if given.
    pub test_guest_elf: Option<PathBuf>,
    /// Linux kit directory, if given.
    pub linux_kit: Option<PathBuf>,
    /// Run Linux guests on a host without hardware virtualization.
    pub force_linux_guest: bool,
    /// Run fio.
    pub native: bool,
    /// Only print the matrix.
    pub dry_run: bool,
}

fn or<T: Clone>(given: &[T], default: &[T]) -> Vec<T> {
    if given.is_empty() {
        default.to_vec()
    } else {
        given.to_vec()
    }
}

impl Settings {
    /// The expanded matrix, with the guest's pool limit.
    pub fn matrix(&self) -> Matrix {
        self.spec.expand_with(self.guest.pool_limit())
    }
}

impl Cli {
    /// Fills in the defaults (the `--quick` preset's when asked for).
    pub fn settings(&self) -> Result<Settings, String> {
        let q = self.quick;
        let linux = self.guest == GuestKind::Linux;
        if linux {
            if self.irq.contains(&false) {
                return Err(
                    "--irq 0 (polling the used rings) is a test-guest mode; the Linux \
                            guest always takes the drive's MSI-X interrupts (leave out --irq)"
                        .into(),
                );
            }
            if self.test_guest_elf.is_some() {
                return Err("--test-guest-elf is for --guest test-guest".into());
            }
        } else if self.linux_kit.is_some() || self.force_linux_guest {
            return Err("--linux-kit and --force-linux-guest are for --guest linux".into());
        }
        let spec = MatrixSpec {
            rw: or(
                &self.rw,
                if q {
                    &[Rw::RandRead]
                } else {
                    &[Rw::RandRead, Rw::RandWrite]
                },
            ),
            bs: or(&self.bs, &[4096]),
            qd: or(&self.qd, if q { &[1, 32] } else { &[1, 8, 32] }),
            queues: or(&self.queues, &[1]),
            engine: or(&self.engine, &[Engine::IoUring]),
            poll: or(
                &self.poll,
                if q {
                    &[PollSetting::Off, PollSetting::Classic(None)]
                } else {
                    &[
                        PollSetting::Off,
                        PollSetting::Classic(None),
                        PollSetting::Weighted(3),
                    ]
                },
            ),
            max_batch: or(&self.max_batch, &[32]),
            irq: or(&self.irq, if linux { &[true] } else { &[false] }),
            hog: or(&self.hog, &[0]),
        };
        let seconds = self.seconds.unwrap_or(if q { 1.0 } else { 2.0 });
        if !(seconds > 0.0 && seconds <= 3600.0) {
            return Err(format!("--seconds {seconds} must be in (0, 3600]"));
        }
        let warmup = self.warmup.unwrap_or(if q { 0.0 } else { 0.5 });
        if !(0.0..=3600.0).contains(&warmup) {
            return Err(format!("--warmup {warmup} must be in [0, 3600]"));
        }
        let repeats = self.repeats.unwrap_or(if q { 1 } else { 3 });
        if repeats == 0 {
            return Err("--repeats must be at least 1".into());
        }
        if self.store_size < 1 << 20 {
            return Err("--store-size must be at least 1m".into());
        }
        let (store, store_defaulted_to_file) = match self.store {
            Some(s) => (s, false),
            None if is_root() => (StoreKind::Loop, false),
            None => (StoreKind::File, true),
        };
        Ok(Settings {
            guest: self.guest,
            spec,
            store,
            store_defaulted_to_file,
            store_dir: self.store_dir.clone(),
            store_size: self.store_size,
            seconds,
            repeats,
            warmup,
            out: self.out.clone(),
            osprey: self.osprey.clone(),
            test_guest_elf: self.test_guest_elf.clone(),
            linux_kit: self.linux_kit.clone(),
            force_linux_guest: self.force_linux_guest,
            native: !self.no_native,
            dry_run: self.dry_run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Settings {
        let mut v = vec!["osprey-bench"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)
            .expect("parse")
            .settings()
            .expect("settings")
    }

    #[test]
    fn comma_lists_expand_into_the_matrix() {
        let s = settings(&[
            "--rw",
            "randread,randwrite",
            "--bs",
            "4k,128k",
            "--qd",
            "1,8,32",
            "--queues",
            "1,4",
            "--engine",
            "IoUring,LinuxAio",
            "--poll",
            "off,classic,weighted:3",
            "--max-batch",
            "32,1,128",
        ]);
        assert_eq!(s.spec.bs, vec![4096, 131072]);
        assert_eq!(s.spec.max_batch, vec![32, 1, 128]);
        let m = s.spec.expand();
        // 128k·32·4 = 16 MiB is the only combination over the pool: 2 rw × 2 engines × 3 poll ×
        // 3 max_batch of them.
        assert_eq!(m.skipped.len(), 2 * 2 * 3 * 3);
        assert_eq!(m.points.len() + m.skipped.len(), 2 * 2 * 3 * 2 * 2 * 3 * 3);
        assert!(m
            .skipped
            .iter()
            .all(|s| s.point.bs == 131072 && s.point.qd == 32 && s.point.queues == 4));
    }

    #[test]
    fn quick_is_small_and_overridable() {
        let s = settings(&["--quick"]);
        assert_eq!(s.spec.expand().points.len(), 4);
        assert_eq!((s.seconds, s.repeats, s.warmup), (1.0, 1, 0.0));
        let s = settings(&["--quick", "--engine", "Null", "--seconds", "0.5"]);
        assert_eq!(s.spec.engine, vec![Engine::Null]);
        assert_eq!(s.seconds, 0.5);
        let full = settings(&[]);
        assert_eq!(full.spec.expand().points.len(), 2 * 3 * 3);
        assert_eq!(full.repeats, 3);
    }

    #[test]
    fn bad_values_are_refused() {
        for args in [
            &["osprey-bench", "--qd", "0"][..],
            &["osprey-bench", "--bs", "1000"],
            &["osprey-bench", "--engine", "spdk"],
            &["osprey-bench", "--poll", "sometimes"],
            &["osprey-bench", "--queues", "9"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
        let c = Cli::try_parse_from(["osprey-bench", "--repeats", "0"]).expect("parse");
        assert!(c.settings().is_err());
    }

    #[test]
    fn the_guest_option() {
        let s = settings(&[]);
        assert_eq!(s.guest, GuestKind::TestGuest);
        assert_eq!(s.spec.irq, vec![false]);
        // Linux: interrupts, no 8 MiB pool limit, the kit options.
        let s = settings(&[
            "--guest",
            "linux",
            "--bs",
            "1m",
            "--qd",
            "256",
            "--queues",
            "8",
            "--linux-kit",
            "/kit",
            "--force-linux-guest",
        ]);
        assert_eq!(s.guest, GuestKind::Linux);
        assert_eq!(s.spec.irq, vec![true]);
        assert_eq!(s.linux_kit.as_deref(), Some(std::path::Path::new("/kit")));
        assert!(s.force_linux_guest);
        let m = s.matrix();
        // 2 rw × 3 polling configs, none skipped.
        assert_eq!((m.points.len(), m.skipped.len()), (2 * 3, 0));
        let t = settings(&["--bs", "1m", "--qd", "256", "--queues", "8"]).matrix();
        assert_eq!((t.points.len(), t.skipped.len()), (0, 2 * 3));
        // What does not apply to a guest is refused, and the old --guest PATH gets a hint.
        let refused = |args: &[&str]| {
            let mut v = vec!["osprey-bench"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v)
                .expect("parse")
                .settings()
                .expect_err("must fail")
        };
        assert!(refused(&["--guest", "linux", "--irq", "0,1"]).contains("MSI-X"));
        assert!(refused(&["--guest", "linux", "--test-guest-elf", "/g.elf"])
            .contains("--test-guest-elf"));
        assert!(refused(&["--force-linux-guest"]).contains("--guest linux"));
        let e = Cli::try_parse_from(["osprey-bench", "--guest", "guest-images/build/x.elf"])
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("--test-guest-elf"), "{e}");
    }
}
