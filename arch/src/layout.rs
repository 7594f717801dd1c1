//! The guest-physical memory layout: where RAM lives and where boot structures go.
//!
//! RAM starts at 0. Guest memory above [`MMIO_GAP_START`] (3 GiB) is placed from 4 GiB up, so the
//! last GiB below 4 GiB stays free for the LAPIC, IOAPIC and PCI BARs. Boot structures sit in the
//! first MiB, the kernel at 1 MiB.

use vm_memory::GuestAddress;

/// Largest vCPU count (the MP table and the APIC id space of a single package).
pub const MAX_VCPUS: u8 = 64;

/// GDT used by the VMM-built boot state.
pub const BOOT_GDT_START: u64 = 0x500;
/// An empty IDT for the 64-bit Linux entry.
pub const BOOT_IDT_START: u64 = 0x520;
/// PVH `hvm_start_info`.
pub const PVH_INFO_START: u64 = 0x6000;
/// PVH module list (the initrd).
pub const PVH_MODLIST_START: u64 = 0x6040;
/// PVH memory map.
pub const PVH_MEMMAP_START: u64 = 0x7000;
/// Linux `boot_params` (the zero page) for the 64-bit boot protocol.
pub const ZERO_PAGE_START: u64 = 0x7000;
/// Initial stack pointer for the 64-bit Linux entry.
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// Identity-map page tables for the 64-bit Linux entry: PML4, PDPT, PD.
pub const PML4_START: u64 = 0x9000;
/// Page-directory-pointer table.
pub const PDPTE_START: u64 = 0xa000;
/// Page directory (2 MiB pages, first GiB).
pub const PDE_START: u64 = 0xb000;
/// The kernel command line.
pub const CMDLINE_START: u64 = 0x20000;
/// Longest command line including its NUL.
pub const CMDLINE_MAX_SIZE: usize = 4096;
/// Start of the Extended BIOS Data Area: the MP table lives here, RAM below.
pub const EBDA_START: u64 = 0x9fc00;
/// Where the kernel is loaded (1 MiB); also the start of high memory.
pub const HIMEM_START: u64 = 0x10_0000;
/// Start of the MMIO gap below 4 GiB.
pub const MMIO_GAP_START: u64 = 0xc000_0000;
/// End of the MMIO gap (4 GiB).
pub const MMIO_GAP_END: u64 = 0x1_0000_0000;
/// Start of the PCI MMIO window where BARs are placed (the MMIO gap).
pub const PCI_MMIO_START: u64 = MMIO_GAP_START;
/// End of the PCI MMIO window (the IOAPIC's page starts here).
pub const PCI_MMIO_END: u64 = 0xfec0_0000;
/// The local APIC's default base.
pub const APIC_DEFAULT_PHYS_BASE: u32 = 0xfee0_0000;
/// The IOAPIC's default base.
pub const IOAPIC_DEFAULT_PHYS_BASE: u32 = 0xfec0_0000;

/// e820 type of usable RAM.
pub const E820_RAM: u32 = 1;
/// e820 type of reserved memory.
pub const E820_RESERVED: u32 = 2;

/// One e820 / PVH memory map entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryMapEntry {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// `E820_RAM` or `E820_RESERVED`.
    pub kind: u32,
}

/// The RAM regions for `mem_bytes` of guest memory: `(start, length)` pairs.
pub fn ram_regions(mem_bytes: u64) -> Vec<(GuestAddress, usize)> {
    if mem_bytes <= MMIO_GAP_START {
        vec![(GuestAddress(0), mem_bytes as usize)]
    } else {
        vec![
            (GuestAddress(0), MMIO_GAP_START as usize),
            (
                GuestAddress(MMIO_GAP_END),
                (mem_bytes - MMIO_GAP_START) as usize,
            ),
        ]
    }
}

/// The memory map the guest is told about: low RAM below the EBDA, the EBDA..1 MiB range
/// reserved (MP table, legacy holes), then RAM from 1 MiB and above 4 GiB.
pub fn memory_map(mem_bytes: u64) -> Vec<MemoryMapEntry> {
    let mut map = vec![
        MemoryMapEntry {
            addr: 0,
            size: EBDA_START,
            kind: E820_RAM,
        },
        MemoryMapEntry {
            addr: EBDA_START,
            size: HIMEM_START - EBDA_START,
            kind: E820_RESERVED,
        },
    ];
    let low_end = mem_bytes.min(MMIO_GAP_START);
    if low_end > HIMEM_START {
        map.push(MemoryMapEntry {
            addr: HIMEM_START,
            size: low_end - HIMEM_START,
            kind: E820_RAM,
        });
    }
    if mem_bytes > MMIO_GAP_START {
        map.push(MemoryMapEntry {
            addr: MMIO_GAP_END,
            size: mem_bytes - MMIO_GAP_START,
            kind: E820_RAM,
        });
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn small_memory_is_one_region() {
        assert_eq!(
            ram_regions(128 * MIB),
            vec![(GuestAddress(0), (128 * MIB) as usize)]
        );
        let map = memory_map(128 * MIB);
        assert_eq!(map.len(), 3);
        assert_eq!(
            map[2],
            MemoryMapEntry {
                addr: HIMEM_START,
                size: 127 * MIB,
                kind: E820_RAM
            }
        );
        let ram: u64 = map
            .iter()
            .filter(|e| e.kind == E820_RAM)
            .map(|e| e.size)
            .sum();
        assert_eq!(ram, 128 * MIB - (HIMEM_START - EBDA_START));
    }

    #[test]
    fn large_memory_skips_the_mmio_gap() {
        let mem = 4096 * MIB;
        assert_eq!(
            ram_regions(mem),
            vec![
                (GuestAddress(0), MMIO_GAP_START as usize),
                (GuestAddress(MMIO_GAP_END), (1024 * MIB) as usize)
            ]
        );
        let map = memory_map(mem);
        let last = map.last().copied().expect("entries");
        assert_eq!(
            last,
            MemoryMapEntry {
                addr: MMIO_GAP_END,
                size: 1024 * MIB,
                kind: E820_RAM
            }
        );
        assert_eq!(map[2].addr + map[2].size, MMIO_GAP_START);
        // Entries are sorted and never overlap.
        for w in map.windows(2) {
            assert!(w[0].addr + w[0].size <= w[1].addr);
        }
    }
}
