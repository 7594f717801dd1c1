//! Which guest each run boots (`--guest test-guest|linux`) and what the rest of the runner needs
//! from it: the boot half of the VM config (kernel, initrd, command line, vCPUs, memory) and the
//! turning of a finished VM's console and log into a [`RunSample`]. The drive and iothread half of
//! the config is the same for every guest (`vm_config.rs`). One file per guest:
//! `guest_test.rs` (Osprey's test guest) and `guest_linux.rs` (the Linux kit with fio).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use thiserror::Error;

use crate::blk_report::BlkReportError;
use crate::guest_linux::LinuxKit;
use crate::kit_report::KitError;
use crate::matrix::{Point, GUEST_POOL_BYTES};
use crate::sample::{RunSample, SampleError};
use crate::vm_run::VmOutput;
use crate::vmm_log::VmmLogError;

/// The guest kind named on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GuestKind {
    /// Osprey's test guest (`mode=blk`).
    #[default]
    TestGuest,
    /// The Linux kit running fio.
    Linux,
}

impl GuestKind {
    /// The command line's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            GuestKind::TestGuest => "test-guest",
            GuestKind::Linux => "linux",
        }
    }

    /// The most guest buffer bytes (`bs · qd · queues`) a point may need; None: no limit (the
    /// Linux guest's memory grows with the point instead).
    pub fn pool_limit(self) -> Option<u64> {
        match self {
            GuestKind::TestGuest => Some(GUEST_POOL_BYTES),
            GuestKind::Linux => None,
        }
    }

    /// The paragraph the runner prints at start and `results.md` shows: what drives the disk.
    pub fn note(self) -> &'static str {
        match self {
            GuestKind::TestGuest => TEST_GUEST_NOTE,
            GuestKind::Linux => LINUX_GUEST_NOTE,
        }
    }

    /// What the numbers of `results.md` are, for its introduction.
    pub fn numbers_note(self) -> &'static str {
        match self {
            GuestKind::TestGuest => {
                "IOPS and latency are the guest's own measurements; CPU/IO is Osprey's CPU time \
                 (all threads, vCPU threads, dataplane threads) per completed request, boot \
                 included; native is host fio on the same store (see docs/benchmarks.md for every \
                 column and the fio mapping). Values are medians over the repeats; spread is the \
                 min–max IOPS."
            }
            GuestKind::Linux => {
                "IOPS, MiB/s and latency are fio's inside the Linux guest (latency: fio's clat, \
                 submission to completion); guest kicks/IO and irqs/IO are not measured (–); CPU/IO \
                 shows only the dataplane threads, per request Osprey completed (all-thread and \
                 vCPU CPU would be mostly the Linux boot, so they are left empty); drive \
                 kicks/irqs/batch are per request Osprey completed. Native is host fio on the same \
                 store (see docs/benchmarks.md, \"Linux guest (fio)\"). Values are medians over the \
                 repeats; spread is the min–max IOPS."
            }
        }
    }

    /// The VM line of `results.md`.
    pub fn vm_line(self) -> &'static str {
        match self {
            GuestKind::TestGuest => {
                "1 vCPU, 256 MiB, one virtio-blk drive (queue size 256) on iothread io0"
            }
            GuestKind::Linux => {
                "vCPUs = the point's queues, 1024 MiB (more when fio's buffers need it), one \
                 virtio-blk drive (queue size 256) on iothread io0"
            }
        }
    }
}

impl FromStr for GuestKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "test-guest" | "test_guest" | "testguest" | "test" => Ok(GuestKind::TestGuest),
            "linux" => Ok(GuestKind::Linux),
            _ if s.contains('/') || s.ends_with(".elf") => Err(format!(
                "{s:?} looks like a path: --guest now picks the guest kind (test-guest or linux); \
                 give the test guest's ELF with --test-guest-elf PATH"
            )),
            _ => Err(format!("{s:?}: expected test-guest or linux")),
        }
    }
}

impl fmt::Display for GuestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the runner drives Osprey's test guest by default.
pub const TEST_GUEST_NOTE: &str = "This runner drives Osprey's test guest \
(guest-images/test-guest, `mode=blk`): a minimal virtio-blk driver and load generator that runs \
its hot loop in ring 3. On kvm_pvm hosts (software nested KVM, no VMX/SVM) guest ring 0 runs in \
KVM's instruction emulator, so a Linux guest cannot get as far as user space and fio cannot run \
inside it. On hosts with hardware virtualization, `--guest linux` drives fio inside a Linux guest \
instead.";

/// What `--guest linux` runs.
pub const LINUX_GUEST_NOTE: &str = "This run drives fio inside a Linux guest (the Linux kit of \
guest-images/linux: Debian cloud kernel, busybox, fio, virtio modules) on /dev/vda, one Linux \
boot per recorded run. Its numbers are fio's, not the test guest's TSC timings, so compare them \
with test-guest results only with care (docs/benchmarks.md, \"Linux guest (fio)\").";

/// The boot half of a VM config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// `boot-source.kernel_image_path`.
    pub kernel: PathBuf,
    /// `boot-source.initrd_path`, if any.
    pub initrd: Option<PathBuf>,
    /// `boot-source.boot_args`.
    pub cmdline: String,
    /// `machine-config.vcpu_count`.
    pub vcpus: u32,
    /// `machine-config.mem_size_mib`.
    pub mem_mib: u64,
}

/// A run's guest outputs do not make a sample.
#[derive(Debug, Error)]
pub enum GuestError {
    /// The test guest's `BLK` report is missing or bad.
    #[error(transparent)]
    Blk(#[from] BlkReportError),
    /// The Linux kit's console is missing something or reports a failure.
    #[error(transparent)]
    Kit(#[from] KitError),
    /// Osprey's log is missing a line.
    #[error(transparent)]
    Log(#[from] VmmLogError),
    /// The numbers do not make a sample.
    #[error(transparent)]
    Sample(#[from] SampleError),
}

/// One run's guest: how it boots and how its outputs become a sample.
pub trait GuestRun {
    /// The boot half of the VM config for `p`.
    fn boot(&self, p: &Point) -> Boot;
    /// The sample of a finished run of `p`.
    fn sample(&self, p: &Point, out: &VmOutput) -> Result<RunSample, GuestError>;
}

/// The guest of a whole matrix, resolved to files.
#[derive(Debug, Clone)]
pub enum Guest {
    /// The test guest's ELF and the vCPU TSC frequency it is told.
    Test {
        /// `test-guest.elf`.
        elf: PathBuf,
        /// vCPU TSC kHz from Osprey's start-up probe.
        tsc_khz: u64,
    },
    /// The Linux kit.
    Linux(LinuxKit),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_guest_kinds_and_points_old_paths_to_the_new_option() {
        assert_eq!("test-guest".parse(), Ok(GuestKind::TestGuest));
        assert_eq!("Linux".parse(), Ok(GuestKind::Linux));
        let e = "guest-images/build/test-guest.elf"
            .parse::<GuestKind>()
            .expect_err("must fail");
        assert!(e.contains("--test-guest-elf"), "{e}");
        assert!("windows".parse::<GuestKind>().is_err());
        assert_eq!(GuestKind::Linux.pool_limit(), None);
        assert_eq!(GuestKind::TestGuest.pool_limit(), Some(8 << 20));
    }
}
