//! Facts about the host the VMM runs on: which KVM provides `/dev/kvm` (hardware VMX/SVM or the
//! software kvm_pvm, whose guest ring 0 is emulated) and how much memory there is.

use std::path::Path;

/// The KVM implementation behind `/dev/kvm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvmFlavor {
    /// Intel VMX (kvm_intel).
    Intel,
    /// AMD SVM (kvm_amd).
    Amd,
    /// kvm_pvm: software nested KVM; guest ring 0 runs in the instruction emulator.
    Pvm,
    /// None of the above could be identified.
    Unknown,
}

impl KvmFlavor {
    /// Identifies the flavor from the loaded kernel modules under `sys_module`.
    pub fn detect_in(sys_module: &Path) -> Self {
        let has = |m: &str| sys_module.join(m).exists();
        if has("kvm_pvm") {
            Self::Pvm
        } else if has("kvm_intel") {
            Self::Intel
        } else if has("kvm_amd") {
            Self::Amd
        } else {
            Self::Unknown
        }
    }

    /// Identifies the running host's flavor.
    pub fn detect() -> Self {
        Self::detect_in(Path::new("/sys/module"))
    }

    /// True when guests run with hardware virtualization.
    pub fn is_hardware(self) -> bool {
        matches!(self, Self::Intel | Self::Amd)
    }

    /// One line for the start-up log.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Intel => "kvm_intel (hardware VMX): guest code runs natively",
            Self::Amd => "kvm_amd (hardware SVM): guest code runs natively",
            Self::Pvm => {
                "kvm_pvm (software nested KVM): guest ring 3 runs natively, guest ring 0 is \
                 emulated (~600 ns/instruction; SSE, x87, xsave in ring 0 fail)"
            }
            Self::Unknown => "unknown KVM module",
        }
    }
}

/// What KVM says about vCPU counts: KVM_CAP_NR_VCPUS (recommended: the host's CPUs) and
/// KVM_CAP_MAX_VCPUS (the hard limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuLimits {
    /// Recommended most vCPUs.
    pub recommended: usize,
    /// Hard limit.
    pub max: usize,
}

impl VcpuLimits {
    /// Checks `count` as QEMU does: above the hard limit is an error naming the config field;
    /// above the recommended count (more vCPUs than host CPUs) is allowed with a warning about
    /// `machine-config.vcpu_count`, returned for the caller to log.
    pub fn check(self, count: u8) -> Result<Option<String>, VcpuLimitError> {
        let n = usize::from(count);
        if n > self.max {
            return Err(VcpuLimitError {
                count: n,
                max: self.max,
            });
        }
        if n > self.recommended {
            return Ok(Some(format!(
                "{n} vCPUs is more than the {} KVM recommends on this host (its CPU count); the \
                 vCPUs will share CPUs",
                self.recommended
            )));
        }
        Ok(None)
    }
}

/// More vCPUs than this host's KVM allows: a limit of the host, reported like a config error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("machine-config.vcpu_count: {count} vCPUs is more than this host's KVM allows ({max})")]
pub struct VcpuLimitError {
    /// vCPUs asked for.
    pub count: usize,
    /// KVM_CAP_MAX_VCPUS.
    pub max: usize,
}

/// Total host memory in MiB, from /proc/meminfo (`u64::MAX` when unreadable).
pub fn host_mem_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| parse_mem_total_kib(&s))
        .map(|kib| kib / 1024)
        .unwrap_or(u64::MAX)
}

fn parse_mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_limits_error_above_max_and_warn_above_recommended() {
        let l = VcpuLimits {
            recommended: 2,
            max: 8,
        };
        assert_eq!(l.check(1), Ok(None));
        assert_eq!(l.check(2), Ok(None));
        let warn = l.check(4).expect("allowed").expect("warning");
        assert!(
            warn.contains("4 vCPUs is more than the 2 KVM recommends"),
            "{warn}"
        );
        let err = l.check(9).expect_err("above the hard limit").to_string();
        assert!(
            err.starts_with(
                "machine-config.vcpu_count: 9 vCPUs is more than this host's KVM allows (8)"
            ),
            "{err}"
        );
    }

    #[test]
    fn parses_mem_total() {
        let s = "MemTotal:       24601232 kB\nMemFree:        1 kB\n";
        assert_eq!(parse_mem_total_kib(s), Some(24_601_232));
        assert_eq!(parse_mem_total_kib("nothing"), None);
    }

    #[test]
    fn detects_flavor_from_module_dirs() {
        let dir = std::env::temp_dir().join(format!("osprey-host-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("kvm")).expect("mkdir");
        assert_eq!(KvmFlavor::detect_in(&dir), KvmFlavor::Unknown);
        std::fs::create_dir_all(dir.join("kvm_amd")).expect("mkdir");
        assert_eq!(KvmFlavor::detect_in(&dir), KvmFlavor::Amd);
        assert!(KvmFlavor::detect_in(&dir).is_hardware());
        std::fs::create_dir_all(dir.join("kvm_pvm")).expect("mkdir");
        assert_eq!(KvmFlavor::detect_in(&dir), KvmFlavor::Pvm);
        std::fs::remove_dir_all(dir).ok();
    }
}
