//! The CPUID table each vCPU sees: KVM's supported set, patched with the vCPU's APIC id and a
//! topology of one package with one thread per core (`vcpu_count` cores).
//!
//! Note: on kvm_pvm hosts the guest's `cpuid` returns the host's values, not this table; on hosts
//! with hardware virtualization it is what the guest sees.

use kvm_bindings::{kvm_cpuid_entry2, CpuId};

const LEAF_FEATURES: u32 = 0x1;
const LEAF_CACHE: u32 = 0x4;
const LEAF_PMU: u32 = 0xa;
const LEAF_TOPOLOGY: u32 = 0xb;
const LEAF_TOPOLOGY_V2: u32 = 0x1f;
const LEAF_AMD_SIZE: u32 = 0x8000_0008;
const LEAF_AMD_TOPOLOGY: u32 = 0x8000_001e;

const ECX_HYPERVISOR: u32 = 1 << 31;
const EDX_HTT: u32 = 1 << 28;
const TOPOLOGY_LEVEL_SMT: u32 = 1;
const TOPOLOGY_LEVEL_CORE: u32 = 2;

/// Bits needed to hold `n` distinct APIC ids (ceil(log2(n))).
pub fn apic_id_bits(n: u8) -> u32 {
    let n = u32::from(n.max(1));
    32 - (n - 1).leading_zeros()
}

/// Patches `entries` (from `KVM_GET_SUPPORTED_CPUID`) for vCPU `cpu` of `count`.
pub fn patch_entries(entries: &mut [kvm_cpuid_entry2], cpu: u8, count: u8) {
    let apic = u32::from(cpu);
    let count32 = u32::from(count);
    let shift = apic_id_bits(count);
    for e in entries.iter_mut() {
        match e.function {
            LEAF_FEATURES => {
                e.ebx = (e.ebx & 0x0000_ffff) | (apic << 24) | ((count32 & 0xff) << 16);
                e.ecx |= ECX_HYPERVISOR;
                if count > 1 {
                    e.edx |= EDX_HTT;
                } else {
                    e.edx &= !EDX_HTT;
                }
            }
            LEAF_CACHE => {
                // EAX[31:26]: cores per package - 1; EAX[25:14]: threads sharing this cache - 1.
                let level = (e.eax >> 5) & 0x7;
                let sharing = if level >= 3 { count32 - 1 } else { 0 };
                e.eax =
                    (e.eax & 0x3fff) | ((sharing & 0xfff) << 14) | (((count32 - 1) & 0x3f) << 26);
            }
            LEAF_PMU => {
                // No virtual PMU: keep guests from programming counters we do not expose.
                e.eax = 0;
                e.ebx = 0;
                e.ecx = 0;
                e.edx = 0;
            }
            LEAF_TOPOLOGY | LEAF_TOPOLOGY_V2 => {
                e.edx = apic;
                match e.index {
                    0 => {
                        e.eax = 0;
                        e.ebx = 1;
                        e.ecx = (TOPOLOGY_LEVEL_SMT << 8) | e.index;
                    }
                    1 => {
                        e.eax = shift;
                        e.ebx = count32;
                        e.ecx = (TOPOLOGY_LEVEL_CORE << 8) | e.index;
                    }
                    _ => {
                        e.eax = 0;
                        e.ebx = 0;
                        e.ecx = e.index;
                    }
                }
            }
            LEAF_AMD_SIZE => {
                // ECX[15:12] ApicIdSize, ECX[7:0] NC (cores - 1).
                e.ecx = (e.ecx & !0xf0ff) | (shift << 12) | ((count32 - 1) & 0xff);
            }
            LEAF_AMD_TOPOLOGY => {
                e.eax = apic;
                e.ebx = apic & 0xff; // compute unit id, one thread per unit
                e.ecx = 0; // node 0
            }
            _ => {}
        }
    }
}

/// A patched copy of `supported` for vCPU `cpu` of `count`.
pub fn for_vcpu(supported: &CpuId, cpu: u8, count: u8) -> CpuId {
    let mut cpuid = supported.clone();
    patch_entries(cpuid.as_mut_slice(), cpu, count);
    cpuid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(function: u32, index: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            ..Default::default()
        }
    }

    #[test]
    fn apic_id_bits_rounds_up() {
        assert_eq!(apic_id_bits(1), 0);
        assert_eq!(apic_id_bits(2), 1);
        assert_eq!(apic_id_bits(3), 2);
        assert_eq!(apic_id_bits(4), 2);
        assert_eq!(apic_id_bits(5), 3);
        assert_eq!(apic_id_bits(64), 6);
    }

    #[test]
    fn leaf1_carries_apic_id_count_and_hypervisor_bit() {
        let mut e = vec![kvm_cpuid_entry2 {
            function: 1,
            ebx: 0x0000_0800,
            ..Default::default()
        }];
        patch_entries(&mut e, 3, 4);
        assert_eq!(e[0].ebx >> 24, 3);
        assert_eq!((e[0].ebx >> 16) & 0xff, 4);
        assert_eq!(e[0].ebx & 0xffff, 0x0800, "CLFLUSH size kept");
        assert_ne!(e[0].ecx & ECX_HYPERVISOR, 0);
        assert_ne!(e[0].edx & EDX_HTT, 0);
        let mut single = vec![kvm_cpuid_entry2 {
            function: 1,
            edx: EDX_HTT,
            ..Default::default()
        }];
        patch_entries(&mut single, 0, 1);
        assert_eq!(single[0].edx & EDX_HTT, 0);
    }

    #[test]
    fn extended_topology_describes_one_package() {
        let mut e = vec![entry(0xb, 0), entry(0xb, 1), entry(0xb, 2)];
        patch_entries(&mut e, 2, 3);
        assert_eq!((e[0].eax, e[0].ebx, e[0].ecx, e[0].edx), (0, 1, 0x100, 2));
        assert_eq!((e[1].eax, e[1].ebx, e[1].ecx, e[1].edx), (2, 3, 0x201, 2));
        assert_eq!((e[2].eax, e[2].ebx, e[2].ecx, e[2].edx), (0, 0, 2, 2));
    }

    #[test]
    fn cache_leaf_reports_cores_and_sharing() {
        let l1 = kvm_cpuid_entry2 {
            function: 4,
            index: 0,
            eax: (1 << 5) | 0x1,
            ..Default::default()
        };
        let l3 = kvm_cpuid_entry2 {
            function: 4,
            index: 3,
            eax: (3 << 5) | 0x3,
            ..Default::default()
        };
        let mut e = vec![l1, l3];
        patch_entries(&mut e, 0, 4);
        assert_eq!(e[0].eax >> 26, 3);
        assert_eq!((e[0].eax >> 14) & 0xfff, 0);
        assert_eq!((e[1].eax >> 14) & 0xfff, 3);
        assert_eq!(e[1].eax & 0x3fff, (3 << 5) | 0x3);
    }

    #[test]
    fn amd_leaves_match_the_count() {
        let mut e = vec![entry(0x8000_0008, 0), entry(0x8000_001e, 0)];
        patch_entries(&mut e, 1, 4);
        assert_eq!(e[0].ecx & 0xff, 3);
        assert_eq!((e[0].ecx >> 12) & 0xf, 2);
        assert_eq!(e[1].eax, 1);
    }
}
