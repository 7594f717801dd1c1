//! Which KVM provides this host's `/dev/kvm`: hardware VMX/SVM (kvm_intel, kvm_amd) or the
//! software nested kvm_pvm, whose guests cannot run Linux user space. The same rule as
//! `vmm::host::KvmFlavor` (loaded modules under `/sys/module`, kvm_pvm first), repeated here so
//! the runner does not link the VMM crate; Osprey logs the same description as `KVM: …`.

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
    /// None of the above is loaded.
    Unknown,
}

impl KvmFlavor {
    /// Identifies the flavour from the kernel modules under `sys_module`.
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

    /// This host's flavour.
    pub fn detect() -> Self {
        Self::detect_in(Path::new("/sys/module"))
    }

    /// True when guests run with hardware virtualization.
    pub fn is_hardware(self) -> bool {
        matches!(self, Self::Intel | Self::Amd)
    }

    /// The description Osprey logs at start-up (`KVM: …`).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_from_module_directories() {
        let dir = std::env::temp_dir().join(format!("osprey-bench-kvm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert_eq!(KvmFlavor::detect_in(&dir), KvmFlavor::Unknown);
        std::fs::create_dir(dir.join("kvm_intel")).expect("mkdir");
        assert_eq!(KvmFlavor::detect_in(&dir), KvmFlavor::Intel);
        assert!(KvmFlavor::detect_in(&dir).is_hardware());
        // kvm_pvm wins: it is what /dev/kvm is when both are loaded.
        std::fs::create_dir(dir.join("kvm_pvm")).expect("mkdir");
        assert_eq!(KvmFlavor::detect_in(&dir), KvmFlavor::Pvm);
        assert!(!KvmFlavor::Pvm.is_hardware());
        assert!(!KvmFlavor::Unknown.is_hardware());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
