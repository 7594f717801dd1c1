//! The Intel MultiProcessor Specification 1.4 table: how a guest without ACPI learns its CPUs,
//! its IOAPIC and how ISA interrupts are wired.
//!
//! The table is built as bytes by a pure function ([`build`]) and written at the EBDA. Layout:
//! the floating pointer, then the configuration table header, then processor, bus, IOAPIC, I/O
//! interrupt and local interrupt entries.

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout::{APIC_DEFAULT_PHYS_BASE, EBDA_START, IOAPIC_DEFAULT_PHYS_BASE};

/// Errors writing the MP table.
#[derive(Debug, thiserror::Error)]
pub enum MptableError {
    /// Too many vCPUs to describe.
    #[error("Too many vCPUs for the MP table: {0}")]
    TooManyCpus(u8),
    /// The table does not fit in guest memory.
    #[error("Writing the MP table failed: {0}")]
    Write(vm_memory::GuestMemoryError),
}

/// The number of IOAPIC pins (and ISA/PCI IRQs routed to them).
pub const IOAPIC_PINS: u8 = 24;

const ENTRY_PROCESSOR: u8 = 0;
const ENTRY_BUS: u8 = 1;
const ENTRY_IOAPIC: u8 = 2;
const ENTRY_IOINTSRC: u8 = 3;
const ENTRY_LINTSRC: u8 = 4;
const INT_TYPE_INT: u8 = 0;
const INT_TYPE_NMI: u8 = 1;
const INT_TYPE_EXTINT: u8 = 3;
const CPU_ENABLED: u8 = 1;
const CPU_BOOTPROCESSOR: u8 = 2;
const APIC_VERSION: u8 = 0x14;
const IOAPIC_VERSION: u8 = 0x11;
const SPEC_REV: u8 = 4;
const HEADER_LEN: usize = 44;
const FLOATING_LEN: usize = 16;

fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)))
}

/// Builds the table for `num_cpus` vCPUs (APIC ids 0..num_cpus) to be placed at `base`.
pub fn build(num_cpus: u8, base: u64) -> Result<Vec<u8>, MptableError> {
    // The IOAPIC takes the APIC id after the last CPU; 0xff is the broadcast id.
    if num_cpus == 0 || num_cpus >= 0xfe {
        return Err(MptableError::TooManyCpus(num_cpus));
    }
    let ioapic_id = num_cpus;
    let mut entries: Vec<u8> = Vec::new();
    let mut count: u16 = 0;
    for cpu in 0..num_cpus {
        let flags = CPU_ENABLED | if cpu == 0 { CPU_BOOTPROCESSOR } else { 0 };
        entries.extend_from_slice(&[ENTRY_PROCESSOR, cpu, APIC_VERSION, flags]);
        entries.extend_from_slice(&0x0000_0600u32.to_le_bytes()); // family 6 signature
        entries.extend_from_slice(&0x0000_0201u32.to_le_bytes()); // FPU | APIC
        entries.extend_from_slice(&[0; 8]);
        count += 1;
    }
    entries.extend_from_slice(&[ENTRY_BUS, 0]);
    entries.extend_from_slice(b"ISA   ");
    count += 1;
    entries.extend_from_slice(&[ENTRY_IOAPIC, ioapic_id, IOAPIC_VERSION, CPU_ENABLED]);
    entries.extend_from_slice(&IOAPIC_DEFAULT_PHYS_BASE.to_le_bytes());
    count += 1;
    for irq in 0..IOAPIC_PINS {
        // type, irq type, flags (u16: conforming polarity/trigger), source bus, source irq,
        // destination IOAPIC, destination pin.
        entries.extend_from_slice(&[ENTRY_IOINTSRC, INT_TYPE_INT, 0, 0, 0, irq, ioapic_id, irq]);
        count += 1;
    }
    // LINT0 is ExtINT (the PIC), LINT1 is NMI, on every local APIC (0xff).
    entries.extend_from_slice(&[ENTRY_LINTSRC, INT_TYPE_EXTINT, 0, 0, 0, 0, 0xff, 0]);
    entries.extend_from_slice(&[ENTRY_LINTSRC, INT_TYPE_NMI, 0, 0, 0, 0, 0xff, 1]);
    count += 2;

    let table_addr = base + FLOATING_LEN as u64;
    let mut floating = Vec::with_capacity(FLOATING_LEN);
    floating.extend_from_slice(b"_MP_");
    floating.extend_from_slice(&(table_addr as u32).to_le_bytes());
    floating.extend_from_slice(&[1, SPEC_REV, 0, 0, 0, 0, 0, 0]);
    floating[10] = checksum(&floating);

    let table_len = (HEADER_LEN + entries.len()) as u16;
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(b"PCMP");
    header.extend_from_slice(&table_len.to_le_bytes());
    header.extend_from_slice(&[SPEC_REV, 0]);
    header.extend_from_slice(b"OSPREY  ");
    header.extend_from_slice(b"OSPREYVMM   ");
    header.extend_from_slice(&0u32.to_le_bytes()); // OEM table pointer
    header.extend_from_slice(&0u16.to_le_bytes()); // OEM table size
    header.extend_from_slice(&count.to_le_bytes());
    header.extend_from_slice(&APIC_DEFAULT_PHYS_BASE.to_le_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]); // extended table length, checksum, reserved
    let mut table = header;
    table.extend_from_slice(&entries);
    table[7] = checksum(&table);

    floating.extend_from_slice(&table);
    Ok(floating)
}

/// Writes the MP table for `num_cpus` vCPUs at the EBDA.
pub fn write(mem: &GuestMemoryMmap, num_cpus: u8) -> Result<(), MptableError> {
    let bytes = build(num_cpus, EBDA_START)?;
    mem.write_slice(&bytes, GuestAddress(EBDA_START))
        .map_err(MptableError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
    }

    #[test]
    fn checksums_and_counts_are_right() {
        for cpus in [1u8, 2, 4, 64] {
            let t = build(cpus, EBDA_START).expect("build");
            assert_eq!(&t[0..4], b"_MP_");
            assert_eq!(sum(&t[..16]), 0, "floating pointer checksum");
            let ptr = u32::from_le_bytes(t[4..8].try_into().expect("4")) as u64;
            assert_eq!(ptr, EBDA_START + 16);
            let table = &t[16..];
            assert_eq!(&table[0..4], b"PCMP");
            let len = u16::from_le_bytes([table[4], table[5]]) as usize;
            assert_eq!(len, table.len());
            assert_eq!(sum(table), 0, "config table checksum");
            let count = u16::from_le_bytes([table[34], table[35]]) as usize;
            assert_eq!(count, cpus as usize + 2 + IOAPIC_PINS as usize + 2);
            // Walk the entries and collect processors.
            let mut off = HEADER_LEN;
            let mut apic_ids = Vec::new();
            let mut bsps = 0;
            for _ in 0..count {
                let size = if table[off] == ENTRY_PROCESSOR { 20 } else { 8 };
                if table[off] == ENTRY_PROCESSOR {
                    apic_ids.push(table[off + 1]);
                    if table[off + 3] & CPU_BOOTPROCESSOR != 0 {
                        bsps += 1;
                    }
                }
                off += size;
            }
            assert_eq!(off, len);
            assert_eq!(apic_ids, (0..cpus).collect::<Vec<_>>());
            assert_eq!(bsps, 1);
        }
    }

    #[test]
    fn rejects_cpu_counts_it_cannot_describe() {
        assert!(build(0, 0).is_err());
        assert!(build(0xfe, 0).is_err());
    }

    #[test]
    fn fits_in_guest_memory_before_the_one_mib_mark() {
        let t = build(crate::layout::MAX_VCPUS, EBDA_START).expect("build");
        assert!(EBDA_START + t.len() as u64 <= crate::layout::HIMEM_START);
    }
}
