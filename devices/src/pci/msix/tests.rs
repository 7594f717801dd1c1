//! Tests for MSI-X: routes, masking, pending bits and the capability's control bits.

use super::*;
use crate::pci::config_space::PciIds;
use crate::pci::mocks::{count, vectors, RecordingRouting};

fn setup(
    n: usize,
) -> (
    MsixTable,
    Arc<RecordingRouting>,
    Vec<vmm_sys_util::eventfd::EventFd>,
) {
    let routing = Arc::new(RecordingRouting::default());
    let (vecs, probes) = vectors(n);
    let table = MsixTable::new(vecs, routing.clone()).expect("table");
    (table, routing, probes)
}

fn program(table: &mut MsixTable, vector: u64, addr: u64, data: u32, masked: bool) {
    let base = vector * MSIX_ENTRY_SIZE;
    table.write_table(base, &addr.to_le_bytes());
    table.write_table(base + 8, &data.to_le_bytes());
    table.write_table(base + 12, &u32::from(masked).to_le_bytes());
}

const ENABLE: u16 = 1 << 15;
const FMASK: u16 = 1 << 14;

#[test]
fn rejects_bad_vector_counts() {
    let routing = Arc::new(RecordingRouting::default());
    assert_eq!(
        MsixTable::new(Vec::new(), routing).err(),
        Some(MsixError::VectorCount(0))
    );
}

#[test]
fn route_installed_on_unmask_and_removed_on_disable() {
    let (mut t, routing, _probes) = setup(3);
    t.set_message_control(ENABLE);
    assert!(routing.take().is_empty(), "all entries start masked");
    program(&mut t, 1, 0xfee0_0000, 0x41, true);
    assert!(routing.take().is_empty(), "still masked");
    t.write_table(16 + 12, &0u32.to_le_bytes());
    let msg = MsiMessage {
        address: 0xfee0_0000,
        data: 0x41,
    };
    assert_eq!(routing.take(), vec![(101, Some(msg))]);
    // Rewriting the same data does not reinstall; a new message does.
    t.write_table(16 + 8, &0x41u32.to_le_bytes());
    assert!(routing.take().is_empty());
    t.write_table(16 + 8, &0x42u32.to_le_bytes());
    assert_eq!(routing.take().len(), 1);
    t.set_message_control(0);
    assert_eq!(routing.take(), vec![(101, None)]);
}

#[test]
fn entry_reads_back_and_bad_accesses_are_ignored() {
    let (mut t, _routing, _probes) = setup(2);
    program(&mut t, 0, 0x1_fee0_1000, 7, false);
    let mut q = [0u8; 8];
    t.read_table(0, &mut q);
    assert_eq!(u64::from_le_bytes(q), 0x1_fee0_1000);
    let mut d = [0u8; 4];
    t.read_table(12, &mut d);
    assert_eq!(u32::from_le_bytes(d), 0);
    t.read_table(16 + 12, &mut d);
    assert_eq!(u32::from_le_bytes(d), 1, "entry 1 starts masked");
    t.read_table(2, &mut d);
    assert_eq!(d, [0xff; 4], "unaligned");
    t.read_table(32, &mut d);
    assert_eq!(d, [0xff; 4], "beyond the table");
    t.write_table(32, &[1, 2, 3, 4]);
    t.write_table(1, &[1, 2, 3, 4]);
}

#[test]
fn masked_vector_pends_then_delivers_on_unmask() {
    let (mut t, routing, probes) = setup(2);
    let irq = t.interrupts();
    program(&mut t, 0, 0xfee0_0000, 0x30, true);
    irq.trigger(0).expect("trigger");
    assert!(!irq.is_pending(0), "disabled: dropped, not pending");
    t.set_message_control(ENABLE);
    irq.trigger(0).expect("trigger");
    assert!(irq.is_pending(0));
    assert_eq!(count(&probes[0]), 0);
    let mut pba = [0u8; 8];
    t.read_pba(0, &mut pba);
    assert_eq!(u64::from_le_bytes(pba), 1);
    routing.take();
    t.write_table(12, &0u32.to_le_bytes());
    assert_eq!(routing.take().len(), 1, "route installed before delivery");
    assert_eq!(count(&probes[0]), 1, "pending delivered on unmask");
    assert!(!irq.is_pending(0));
    irq.trigger(0).expect("trigger");
    irq.trigger(0).expect("trigger");
    assert_eq!(count(&probes[0]), 2);
    assert_eq!(count(&probes[1]), 0);
    irq.trigger(9).expect("unknown vectors are ignored");
}

#[test]
fn function_mask_holds_every_vector() {
    let (mut t, _routing, probes) = setup(2);
    let irq = t.interrupts();
    program(&mut t, 0, 0xfee0_0000, 0x30, false);
    program(&mut t, 1, 0xfee0_0000, 0x31, false);
    t.set_message_control(ENABLE | FMASK);
    irq.trigger(1).expect("trigger");
    assert_eq!(count(&probes[1]), 0);
    let mut pba = [0u8; 1];
    t.read_pba(0, &mut pba);
    assert_eq!(pba[0], 0b10);
    t.set_message_control(ENABLE);
    assert_eq!(count(&probes[1]), 1);
    assert_eq!(count(&probes[0]), 0);
    t.read_pba(0, &mut pba);
    assert_eq!(pba[0], 0);
    t.read_pba(8, &mut pba);
    assert_eq!(pba[0], 0xff, "beyond the PBA");
}

#[test]
fn capability_bits_follow_config_writes() {
    let (mut t, routing, probes) = setup(4);
    let mut cfg = PciConfigSpace::new(PciIds {
        vendor: 1,
        device: 2,
        revision: 0,
        class: 0,
        subsystem_vendor: 0,
        subsystem: 0,
    });
    let off = t
        .add_capability(&mut cfg, (0, 0x4000), (0, 0x5000))
        .expect("cap");
    assert_eq!(cfg.read_u32(off), 0x0003_0011, "id and table size - 1");
    assert_eq!(cfg.read_u32(off + 4), 0x4000);
    assert_eq!(cfg.read_u32(off + 8), 0x5000);
    program(&mut t, 2, 0xfee0_0000, 0x22, false);
    assert!(routing.take().is_empty());
    // Linux enables with the function masked, then clears the mask (a 16-bit write).
    cfg.write(off + 2, &(ENABLE | FMASK | 3).to_le_bytes());
    t.config_written(&cfg, off + 2, 2);
    assert_eq!(cfg.read_u32(off) >> 16, u32::from(ENABLE | FMASK | 3));
    assert_eq!(routing.take().len(), 1);
    t.interrupts().trigger(2).expect("trigger");
    assert_eq!(count(&probes[2]), 0);
    cfg.write(off + 3, &[0x80]);
    t.config_written(&cfg, off + 3, 1);
    assert_eq!(count(&probes[2]), 1);
    // A write elsewhere does not touch MSI-X state.
    t.config_written(&cfg, off + 4, 4);
    assert_eq!(count(&probes[2]), 0);
}
