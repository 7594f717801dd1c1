//! The model-specific registers a vCPU starts with: the values Linux expects at entry (syscall
//! MSRs cleared, fast strings on, MTRRs enabled with write-back as the default type).

use kvm_bindings::{kvm_msr_entry, Msrs};

const MSR_IA32_SYSENTER_CS: u32 = 0x174;
const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const MSR_IA32_TSC: u32 = 0x10;
const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;

const MISC_ENABLE_FAST_STRING: u64 = 1;
const MTRR_ENABLE: u64 = 1 << 11;
const MTRR_TYPE_WRBACK: u64 = 6;

/// The boot MSRs as `(index, value)` pairs.
pub fn boot_msrs() -> Vec<(u32, u64)> {
    vec![
        (MSR_IA32_SYSENTER_CS, 0),
        (MSR_IA32_SYSENTER_ESP, 0),
        (MSR_IA32_SYSENTER_EIP, 0),
        (MSR_STAR, 0),
        (MSR_CSTAR, 0),
        (MSR_KERNEL_GS_BASE, 0),
        (MSR_SYSCALL_MASK, 0),
        (MSR_LSTAR, 0),
        (MSR_IA32_TSC, 0),
        (MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING),
        (MSR_MTRR_DEF_TYPE, MTRR_ENABLE | MTRR_TYPE_WRBACK),
    ]
}

/// Packs `(index, value)` pairs for `KVM_SET_MSRS`.
pub fn to_kvm(pairs: &[(u32, u64)]) -> Result<Msrs, vmm_sys_util::fam::Error> {
    let entries: Vec<kvm_msr_entry> = pairs
        .iter()
        .map(|&(index, data)| kvm_msr_entry {
            index,
            data,
            ..Default::default()
        })
        .collect();
    Msrs::from_entries(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_msrs_pack_in_order() {
        let pairs = boot_msrs();
        let msrs = to_kvm(&pairs).expect("pack");
        assert_eq!(msrs.as_slice().len(), pairs.len());
        let misc = msrs
            .as_slice()
            .iter()
            .find(|e| e.index == MSR_IA32_MISC_ENABLE)
            .expect("misc");
        assert_eq!(misc.data, 1);
        let mtrr = msrs
            .as_slice()
            .iter()
            .find(|e| e.index == MSR_MTRR_DEF_TYPE)
            .expect("mtrr");
        assert_eq!(mtrr.data, 0x806);
    }
}
