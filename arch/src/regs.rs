//! The register state a vCPU starts in: 32-bit flat protected mode for PVH, or 64-bit long mode
//! with identity-mapped page tables for Linux's 64-bit boot protocol. The GDTs and segment
//! descriptors are built here; the page tables are written to guest memory.

use kvm_bindings::{kvm_fpu, kvm_regs, kvm_segment, kvm_sregs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout::{
    BOOT_GDT_START, BOOT_IDT_START, BOOT_STACK_POINTER, PDE_START, PDPTE_START, PML4_START,
    PVH_INFO_START, ZERO_PAGE_START,
};

/// How the kernel is entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryMode {
    /// PVH: 32-bit protected mode, paging off, EBX = `hvm_start_info`.
    Pvh,
    /// Linux 64-bit boot protocol: long mode, RSI = `boot_params`.
    Linux64,
}

const X86_CR0_PE: u64 = 0x1;
const X86_CR0_ET: u64 = 0x10;
const X86_CR0_PG: u64 = 0x8000_0000;
const X86_CR4_PAE: u64 = 0x20;
const EFER_LME: u64 = 0x100;
const EFER_LMA: u64 = 0x400;

/// Encodes a GDT descriptor from its access/flags word, base and limit.
pub fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    let (flags, base, limit) = (u64::from(flags), u64::from(base), u64::from(limit));
    ((base & 0xff00_0000) << 32)
        | ((flags & 0xf0ff) << 40)
        | ((limit & 0x000f_0000) << 32)
        | ((base & 0x00ff_ffff) << 16)
        | (limit & 0x0000_ffff)
}

/// Decodes a GDT descriptor into KVM's segment form, with selector `index * 8`.
pub fn segment_from_gdt(entry: u64, index: u8) -> kvm_segment {
    let g = ((entry >> 55) & 1) as u8;
    let raw_limit = (((entry >> 32) & 0x000f_0000) | (entry & 0xffff)) as u32;
    let present = ((entry >> 47) & 1) as u8;
    kvm_segment {
        base: ((entry >> 16) & 0x00ff_ffff) | ((entry >> 32) & 0xff00_0000),
        limit: if g == 1 {
            (raw_limit << 12) | 0xfff
        } else {
            raw_limit
        },
        selector: u16::from(index) * 8,
        type_: ((entry >> 40) & 0xf) as u8,
        present,
        dpl: ((entry >> 45) & 0x3) as u8,
        db: ((entry >> 54) & 1) as u8,
        s: ((entry >> 44) & 1) as u8,
        l: ((entry >> 53) & 1) as u8,
        g,
        avl: ((entry >> 52) & 1) as u8,
        unusable: u8::from(present == 0),
        padding: 0,
    }
}

/// The boot GDT for `mode`: null, code, data, TSS.
pub fn boot_gdt(mode: EntryMode) -> [u64; 4] {
    match mode {
        EntryMode::Pvh => [
            0,
            gdt_entry(0xc09b, 0, 0xffff_ffff), // 32-bit code, 4 GiB
            gdt_entry(0xc093, 0, 0xffff_ffff), // data
            gdt_entry(0x008b, 0, 0x67),        // 32-bit TSS (busy)
        ],
        EntryMode::Linux64 => [
            0,
            gdt_entry(0xa09b, 0, 0xfffff), // 64-bit code
            gdt_entry(0xc093, 0, 0xfffff), // data
            gdt_entry(0x808b, 0, 0xfffff), // TSS
        ],
    }
}

/// Errors writing boot state to guest memory.
#[derive(Debug, thiserror::Error)]
#[error("Writing the boot {what} to guest memory failed: {source}")]
pub struct RegsError {
    what: &'static str,
    source: vm_memory::GuestMemoryError,
}

/// Writes the GDT (and, for 64-bit entry, the identity page tables) and returns the special
/// registers for `mode`, starting from the vCPU's current `sregs`.
pub fn boot_sregs(
    mem: &GuestMemoryMmap,
    mode: EntryMode,
    mut sregs: kvm_sregs,
) -> Result<kvm_sregs, RegsError> {
    let gdt = boot_gdt(mode);
    for (i, e) in gdt.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(BOOT_GDT_START + 8 * i as u64))
            .map_err(|source| RegsError {
                what: "GDT",
                source,
            })?;
    }
    mem.write_obj(0u64, GuestAddress(BOOT_IDT_START))
        .map_err(|source| RegsError {
            what: "IDT",
            source,
        })?;
    let code = segment_from_gdt(gdt[1], 1);
    let data = segment_from_gdt(gdt[2], 2);
    let tss = segment_from_gdt(gdt[3], 3);
    sregs.gdt.base = BOOT_GDT_START;
    sregs.gdt.limit = (gdt.len() * 8 - 1) as u16;
    sregs.idt.base = BOOT_IDT_START;
    sregs.idt.limit = 7;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    match mode {
        EntryMode::Pvh => {
            sregs.cr0 = X86_CR0_PE | X86_CR0_ET;
            sregs.cr3 = 0;
            sregs.cr4 = 0;
            sregs.efer = 0;
        }
        EntryMode::Linux64 => {
            write_identity_page_tables(mem)?;
            sregs.cr0 = X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
            sregs.cr3 = PML4_START;
            sregs.cr4 = X86_CR4_PAE;
            sregs.efer = EFER_LME | EFER_LMA;
        }
    }
    Ok(sregs)
}

/// Identity-maps the first GiB with 2 MiB pages (what the 64-bit boot protocol requires).
fn write_identity_page_tables(mem: &GuestMemoryMmap) -> Result<(), RegsError> {
    let w = |v: u64, a: u64| {
        mem.write_obj(v, GuestAddress(a))
            .map_err(|source| RegsError {
                what: "page tables",
                source,
            })
    };
    w(PDPTE_START | 0x03, PML4_START)?;
    w(PDE_START | 0x03, PDPTE_START)?;
    for i in 0..512u64 {
        w((i << 21) | 0x83, PDE_START + i * 8)?;
    }
    Ok(())
}

/// General registers at entry.
pub fn boot_regs(mode: EntryMode, entry: u64) -> kvm_regs {
    let mut regs = kvm_regs {
        rflags: 0x2,
        rip: entry,
        ..Default::default()
    };
    match mode {
        EntryMode::Pvh => regs.rbx = PVH_INFO_START,
        EntryMode::Linux64 => {
            regs.rsp = BOOT_STACK_POINTER;
            regs.rbp = BOOT_STACK_POINTER;
            regs.rsi = ZERO_PAGE_START;
        }
    }
    regs
}

/// FPU state at entry: the reset control word and MXCSR.
pub fn boot_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdt_entries_round_trip_to_segments() {
        let code64 = segment_from_gdt(gdt_entry(0xa09b, 0, 0xfffff), 1);
        assert_eq!(
            (code64.selector, code64.l, code64.db, code64.type_),
            (8, 1, 0, 0xb)
        );
        assert_eq!(
            (code64.present, code64.s, code64.g, code64.limit),
            (1, 1, 1, 0xffff_ffff)
        );
        let code32 = segment_from_gdt(gdt_entry(0xc09b, 0, 0xffff_ffff), 1);
        assert_eq!((code32.l, code32.db, code32.base), (0, 1, 0));
        let tss = segment_from_gdt(gdt_entry(0x008b, 0, 0x67), 3);
        assert_eq!(
            (tss.s, tss.type_, tss.limit, tss.g, tss.selector),
            (0, 0xb, 0x67, 0, 0x18)
        );
        let null = segment_from_gdt(0, 0);
        assert_eq!(null.unusable, 1);
        assert_eq!(
            gdt_entry(0xc093, 0x1234_5678, 0xfffff),
            0x12cf_9334_5678_ffff
        );
    }

    #[test]
    fn long_mode_state_and_page_tables() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("mem");
        let s = boot_sregs(&mem, EntryMode::Linux64, kvm_sregs::default()).expect("sregs");
        assert_eq!(s.cr3, PML4_START);
        assert_ne!(s.cr0 & X86_CR0_PG, 0);
        assert_eq!(s.efer, EFER_LME | EFER_LMA);
        assert_eq!(
            mem.read_obj::<u64>(GuestAddress(PML4_START)).expect("pml4"),
            PDPTE_START | 3
        );
        assert_eq!(
            mem.read_obj::<u64>(GuestAddress(PDE_START + 8 * 511))
                .expect("pde"),
            (511 << 21) | 0x83
        );
        assert_eq!(
            mem.read_obj::<u64>(GuestAddress(BOOT_GDT_START + 8))
                .expect("gdt"),
            gdt_entry(0xa09b, 0, 0xfffff)
        );
        let r = boot_regs(EntryMode::Linux64, 0x100_0200);
        assert_eq!(
            (r.rip, r.rsi, r.rsp),
            (0x100_0200, ZERO_PAGE_START, BOOT_STACK_POINTER)
        );
    }

    #[test]
    fn pvh_state_is_flat_protected_mode_without_paging() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("mem");
        let s = boot_sregs(&mem, EntryMode::Pvh, kvm_sregs::default()).expect("sregs");
        assert_eq!(s.cr0, X86_CR0_PE | X86_CR0_ET);
        assert_eq!((s.cr4, s.efer), (0, 0));
        assert_eq!(
            (s.cs.db, s.cs.l, s.cs.limit, s.cs.selector),
            (1, 0, 0xffff_ffff, 8)
        );
        assert_eq!(s.ds.selector, 0x10);
        let r = boot_regs(EntryMode::Pvh, 0x10_0000);
        assert_eq!((r.rip, r.rbx, r.rflags), (0x10_0000, PVH_INFO_START, 2));
    }
}
