//! Osprey's x86_64 guest, as pure functions over guest memory (no threads, no VM handle): the
//! guest-physical layout, the boot protocols and kernel image formats, the ACPI and MP tables,
//! the CPUID table, MSRs and the registers a vCPU starts in. Module map: `docs/ARCHITECTURE.md`.

#[cfg(not(target_arch = "x86_64"))]
compile_error!("Osprey runs x86_64 guests on x86_64 hosts only");

pub mod acpi;
pub mod boot;
pub mod cpuid;
pub mod kernel_image;
pub mod layout;
pub mod mptable;
pub mod msr;
pub mod regs;
pub mod unpack;
