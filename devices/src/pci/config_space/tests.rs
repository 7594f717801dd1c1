//! Tests for the type-0 configuration space.

use super::*;

fn ids() -> PciIds {
    PciIds {
        vendor: 0x1af4,
        device: 0x1042,
        revision: 1,
        class: 0x01_80_00,
        subsystem_vendor: 0x1af4,
        subsystem: 2,
    }
}

fn read16(cfg: &PciConfigSpace, offset: usize) -> u16 {
    let mut b = [0u8; 2];
    cfg.read(offset, &mut b);
    u16::from_le_bytes(b)
}

fn read8(cfg: &PciConfigSpace, offset: usize) -> u8 {
    let mut b = [0u8; 1];
    cfg.read(offset, &mut b);
    b[0]
}

#[test]
fn header_ids_and_widths() {
    let cfg = PciConfigSpace::new(ids());
    assert_eq!(cfg.read_u32(0), 0x1042_1af4);
    assert_eq!(read16(&cfg, reg::DEVICE_ID), 0x1042);
    assert_eq!(read8(&cfg, 0x0b), 0x01, "class");
    assert_eq!(read8(&cfg, 0x0a), 0x80, "subclass");
    assert_eq!(read8(&cfg, reg::REVISION_ID), 1);
    assert_eq!(cfg.read_u32(reg::SUBSYSTEM_VENDOR_ID), 0x0002_1af4);
    assert_eq!(read16(&cfg, reg::STATUS) & 0x10, 0, "no capabilities yet");
}

#[test]
fn bad_accesses_are_ignored() {
    let mut cfg = PciConfigSpace::new(ids());
    let mut b = [0u8; 4];
    cfg.read(2, &mut b);
    assert_eq!(b, [0xff; 4], "unaligned dword");
    let mut b = [0u8; 2];
    cfg.read(255, &mut b);
    assert_eq!(b, [0xff; 2], "beyond the end");
    let mut b = [0u8; 3];
    cfg.read(0, &mut b);
    assert_eq!(b, [0xff; 3], "odd width");
    assert_eq!(cfg.write(0x05, &[1, 2]), None);
    assert_eq!(cfg.write(300, &[1]), None);
    assert_eq!(cfg.read_u32(reg::COMMAND), 0);
}

#[test]
fn command_mask_and_read_only_ids() {
    let mut cfg = PciConfigSpace::new(ids());
    cfg.write(reg::COMMAND, &0xffffu16.to_le_bytes());
    assert_eq!(cfg.command(), 0x0547);
    assert!(cfg.memory_enabled());
    cfg.write(reg::COMMAND, &[0]);
    assert!(!cfg.memory_enabled(), "byte write clears the low byte only");
    assert_eq!(cfg.command(), 0x0500);
    cfg.write(0, &0xdead_beefu32.to_le_bytes());
    assert_eq!(cfg.read_u32(0), 0x1042_1af4);
    cfg.write(reg::INTERRUPT_LINE, &[0x0b]);
    assert_eq!(read8(&cfg, reg::INTERRUPT_LINE), 0x0b);
}

#[test]
fn bar32_sizing_and_reprogramming() {
    let mut cfg = PciConfigSpace::new(ids());
    cfg.add_bar(1, PciBar::memory32(0x4000)).expect("bar");
    let off = reg::BAR0 + 4;
    assert_eq!(cfg.read_u32(off), 0, "32-bit, non-prefetchable, address 0");
    let mv = cfg.write(off, &u32::MAX.to_le_bytes());
    assert_eq!(cfg.read_u32(off), 0xffff_c000, "size mask");
    assert_eq!(
        mv,
        Some(BarMove {
            bar: 1,
            old: 0,
            new: 0xffff_c000
        })
    );
    let mv = cfg.write(off, &0xe000_1234u32.to_le_bytes());
    assert_eq!(cfg.read_u32(off), 0xe000_0000);
    assert_eq!(cfg.bar_address(1), Some(0xe000_0000));
    assert_eq!(mv.map(|m| m.new), Some(0xe000_0000));
    assert_eq!(cfg.write(off, &0xe000_0000u32.to_le_bytes()), None);
    // A byte write to the top byte only changes that byte.
    cfg.write(off + 3, &[0xd0]);
    assert_eq!(cfg.bar_address(1), Some(0xd000_0000));
    assert_eq!(cfg.bar_address(0), None);
}

#[test]
fn bar64_sizing_and_reprogramming() {
    let mut cfg = PciConfigSpace::new(ids());
    let mut bar = PciBar::memory64(0x8000);
    bar.prefetchable = true;
    cfg.add_bar(0, bar).expect("bar");
    assert_eq!(cfg.read_u32(reg::BAR0), 0b1100, "64-bit prefetchable flags");
    cfg.write(reg::BAR0, &u32::MAX.to_le_bytes());
    cfg.write(reg::BAR0 + 4, &u32::MAX.to_le_bytes());
    assert_eq!(cfg.read_u32(reg::BAR0), 0xffff_800c);
    assert_eq!(cfg.read_u32(reg::BAR0 + 4), 0xffff_ffff);
    let mv = cfg.set_bar_address(0, 0x1_2345_8000);
    assert_eq!(mv.map(|m| m.new), Some(0x1_2345_8000));
    assert_eq!(cfg.read_u32(reg::BAR0), 0x2345_800c);
    assert_eq!(cfg.read_u32(reg::BAR0 + 4), 1);
    let mv = cfg.write(reg::BAR0 + 4, &0u32.to_le_bytes());
    assert_eq!(
        mv,
        Some(BarMove {
            bar: 0,
            old: 0x1_2345_8000,
            new: 0x2345_8000
        })
    );
    assert_eq!(cfg.bars().collect::<Vec<_>>(), vec![(0, bar)]);
}

#[test]
fn bar_declaration_errors() {
    let mut cfg = PciConfigSpace::new(ids());
    assert_eq!(
        cfg.add_bar(5, PciBar::memory64(0x1000)),
        Err(ConfigSpaceError::BarSlot(5))
    );
    assert_eq!(
        cfg.add_bar(0, PciBar::memory32(0x1800)),
        Err(ConfigSpaceError::BarSize(0x1800))
    );
    cfg.add_bar(0, PciBar::memory64(0x1000)).expect("bar");
    assert_eq!(
        cfg.add_bar(1, PciBar::memory32(0x1000)),
        Err(ConfigSpaceError::BarSlot(1))
    );
    // Writes to the upper slot of a 64-bit BAR and to empty slots are harmless.
    assert_eq!(cfg.write(reg::BAR0 + 8, &u32::MAX.to_le_bytes()), None);
    assert_eq!(cfg.read_u32(reg::BAR0 + 8), 0);
}

#[test]
fn capability_chain_walk() {
    let mut cfg = PciConfigSpace::new(ids());
    let a = cfg.add_capability(&[0x09, 0xaa, 5, 1, 2]).expect("cap");
    let b = cfg
        .add_writable_capability(&[0x11, 0, 0, 0], &[0, 0, 0x00, 0xc0])
        .expect("cap");
    assert_eq!((a, b), (0x40, 0x48), "dword aligned, after the header");
    assert_ne!(read16(&cfg, reg::STATUS) & 0x10, 0);
    let mut walked = Vec::new();
    let mut ptr = usize::from(read8(&cfg, reg::CAPABILITIES));
    while ptr != 0 {
        walked.push((ptr, read8(&cfg, ptr)));
        ptr = usize::from(read8(&cfg, ptr + 1));
    }
    assert_eq!(walked, vec![(0x40, 0x09), (0x48, 0x11)]);
    cfg.write(0x48, &0xffff_ffffu32.to_le_bytes());
    assert_eq!(
        cfg.read_u32(0x48),
        0xc000_0011,
        "only the masked bits changed"
    );
    cfg.write(0x40, &0u32.to_le_bytes());
    assert_eq!(cfg.read_u32(0x40), 0x0105_4809, "read-only capability");
    assert_eq!(
        cfg.add_capability(&[0x09; 200]),
        Err(ConfigSpaceError::CapabilitySize(200))
    );
}
