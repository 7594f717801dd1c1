//! The driver-side scenarios.

use super::*;

#[test]
fn identity_and_capabilities_describe_bar0() {
    let d = driver();
    assert_eq!(
        d.cfg_read(0, 4),
        0x1042_1af4,
        "virtio vendor, 0x1040 + block"
    );
    assert_eq!(d.cfg_read(0x08, 4), 0x0180_0001, "class 01/80, revision 1");
    assert_eq!(d.cfg_read(0x2c, 4), 0x0002_1af4, "subsystem = device type");
    assert_eq!(d.cfg_read(0x10, 4), WINDOW as u32 | 0b100, "64-bit BAR0");
    assert_eq!(d.cfg_read(0x14, 4), 0);
    assert_ne!(d.cfg_read(0x06, 2) & 0x10, 0, "capability list");
    let caps = d.caps();
    let vendor: Vec<(u8, u8, u32, u32)> = caps
        .iter()
        .filter(|c| c.1 == 0x09)
        .map(|&(off, _)| {
            let cfg_type = d.cfg_read(off + 3, 1) as u8;
            let bar = d.cfg_read(off + 4, 1) as u8;
            (
                cfg_type,
                bar,
                d.cfg_read(off + 8, 4),
                d.cfg_read(off + 12, 4),
            )
        })
        .collect();
    assert_eq!(
        vendor,
        vec![
            (1, 0, 0x0000, 0x38),
            (2, 0, 0x3000, 8),
            (3, 0, 0x1000, 1),
            (4, 0, 0x2000, 0x1000),
            (5, 0, 0, 0),
        ]
    );
    let notify = caps[1].0;
    assert_eq!(d.cfg_read(notify + 2, 1), 20, "notify cap length");
    assert_eq!(d.cfg_read(notify + 16, 4), 4, "notify_off_multiplier");
    let msix = d.msix_cap();
    assert_eq!(d.cfg_read(msix, 4), 0x0002_0011, "3 vectors, disabled");
    assert_eq!(d.cfg_read(msix + 4, 4), 0x4000);
    assert_eq!(d.cfg_read(msix + 8, 4), 0x5000);
}

#[test]
fn feature_negotiation_refuses_unoffered_bits_and_missing_version_1() {
    let d = driver();
    d.write(0x00, 1, 4);
    assert_eq!(d.read(0x04, 4), OFFERED >> 32);
    d.write(0x00, 0, 4);
    assert_eq!(d.read(0x04, 4), OFFERED & 0xffff_ffff);
    d.write(0x00, 7, 4);
    assert_eq!(d.read(0x04, 4), 0, "no such feature window");
    assert!(
        !d.negotiate(VIRTIO_F_VERSION_1 | 1 << 5),
        "bit 5 not offered"
    );
    assert!(!d.negotiate(FEATURE_BIT1), "VERSION_1 missing");
    assert_eq!(d.state.lock().expect("lock").acked, None);
    assert!(d.negotiate(VIRTIO_F_VERSION_1 | FEATURE_BIT1));
    assert_eq!(
        d.state.lock().expect("lock").acked,
        Some(VIRTIO_F_VERSION_1 | FEATURE_BIT1)
    );
    // Feature writes after FEATURES_OK are ignored.
    d.write(0x08, 0, 4);
    d.write(0x0c, 0, 4);
    assert_eq!(d.read(0x0c, 4), FEATURE_BIT1);
    // DRIVER_OK without FEATURES_OK does not activate.
    d.negotiate(FEATURE_BIT1);
    d.set_status(status::ACKNOWLEDGE | status::DRIVER | status::DRIVER_OK);
    assert!(d.state.lock().expect("lock").activations.is_empty());
    assert_eq!(d.status() & status::DRIVER_OK, 0);
}

#[test]
fn driver_ok_activates_programmed_queues() {
    let d = driver();
    assert_eq!(d.read(0x12, 2), 2, "num_queues");
    d.write(0x16, 1, 2);
    assert_eq!(d.read(0x18, 2), 128, "queue 1 max size");
    assert_eq!(d.read(0x1e, 2), 1, "queue_notify_off");
    d.write(0x18, 512, 2);
    assert_eq!(d.read(0x18, 2), 128, "larger than max is refused");
    d.write(0x16, 0, 2);
    d.write(0x18, 100, 2);
    d.write(0x1c, 1, 2);
    assert_eq!(
        d.read(0x1c, 2),
        0,
        "size not a power of two: enable refused"
    );
    d.bring_up();
    assert_eq!(d.status(), 0x0f);
    let s = d.state.lock().expect("lock");
    assert_eq!(
        s.activations,
        vec![vec![
            (0, 64, 0x1_0000, 0x1_1000, 0x1_2000, true, true),
            (1, 128, 0x2_0000, 0x2_1000, 0x2_2000, true, true),
        ]]
    );
    d.write(0x16, 0, 2);
    assert_eq!(d.read(0x20, 8), 0x1_0000, "64-bit read of queue_desc");
    assert_eq!(d.read(0x24, 4), 0);
    // Queue registers are frozen once enabled.
    d.write(0x16, 0, 2);
    d.write(0x20, 0x9000, 4);
    assert_eq!(d.read(0x20, 4), 0x1_0000);
}

#[test]
fn event_idx_follows_the_driver() {
    let d = driver();
    assert!(d.negotiate(VIRTIO_F_VERSION_1));
    d.setup_queue(0, 16, 0xffff, 0x3_0000);
    d.set_status(0x0f);
    let s = d.state.lock().expect("lock");
    assert_eq!(
        s.activations,
        vec![vec![(0, 16, 0x3_0000, 0x3_1000, 0x3_2000, true, false)]]
    );
}

#[test]
fn kicks_and_ioeventfds() {
    let d = driver();
    assert_eq!(
        d.ioevents.addresses(),
        vec![WINDOW + 0x3000, WINDOW + 0x3004]
    );
    d.bring_up();
    let kicks: Vec<EventFd> = {
        let s = d.state.lock().expect("lock");
        s.kicks
            .iter()
            .map(|k| k.try_clone().expect("clone"))
            .collect()
    };
    d.write(0x3004, 1, 2);
    assert_eq!(count(&kicks[1]), 1, "notify write reached the queue 1 kick");
    assert_eq!(count(&kicks[0]), 0);
    d.write(0x3000, 0, 4);
    assert_eq!(count(&kicks[0]), 1);
    d.write(0x3100, 0, 4);
    assert_eq!(count(&kicks[0]) + count(&kicks[1]), 0, "no such queue");

    // The guest moves BAR0: registrations follow, old ones are gone.
    let new = WINDOW + 0x8_0000;
    d.cfg_write(0x10, &(new as u32).to_le_bytes());
    assert_eq!(d.ioevents.addresses(), vec![new + 0x3000, new + 0x3004]);
    assert!(d.mmio.write(new + 0x3000, &[1]));
    assert_eq!(count(&kicks[0]), 1);
    let Driver {
        io,
        mmio,
        dev,
        ioevents,
        ..
    } = d;
    drop((io, mmio, dev));
    assert!(ioevents.addresses().is_empty(), "unregistered on drop");
}

#[test]
fn queue_interrupts_use_msix_vectors() {
    let d = driver();
    d.bring_up();
    let irq = d
        .state
        .lock()
        .expect("lock")
        .interrupt
        .clone()
        .expect("irq");
    assert_eq!(d.routing.take().len(), 3, "three routes installed");
    irq.notify_queue(1).expect("notify");
    assert_eq!(count(&d.irqfds[2]), 1, "queue 1 uses vector 2");
    irq.notify_config().expect("notify");
    assert_eq!(count(&d.irqfds[0]), 1);
    assert_eq!(d.read(0x15, 1), 1, "config generation moved");
    assert_eq!(d.read(0x1000, 1), 2, "ISR config bit");
    assert_eq!(d.read(0x1000, 1), 0, "read to clear");
}

#[test]
fn masked_vector_interrupt_sets_pba() {
    let d = driver();
    d.bring_up();
    let irq = d
        .state
        .lock()
        .expect("lock")
        .interrupt
        .clone()
        .expect("irq");
    d.write(0x4000 + 16 + 12, 1, 4);
    irq.notify_queue(0).expect("notify");
    assert_eq!(count(&d.irqfds[1]), 0);
    assert_eq!(d.read(0x5000, 8), 0b010);
    d.write(0x4000 + 16 + 12, 0, 4);
    assert_eq!(count(&d.irqfds[1]), 1, "delivered on unmask");
    assert_eq!(d.read(0x5000, 8), 0);
}

#[test]
fn out_of_range_vectors_read_back_no_vector() {
    let d = driver();
    d.write(0x16, 1, 2);
    d.write(0x1a, 3, 2);
    assert_eq!(d.read(0x1a, 2), 0xffff);
    d.write(0x1a, 2, 2);
    assert_eq!(d.read(0x1a, 2), 2);
    d.write(0x10, 0x100, 2);
    assert_eq!(d.read(0x10, 2), 0xffff);
    d.write(0x16, 9, 2);
    assert_eq!(d.read(0x18, 2), 0, "missing queue has size 0");
}

#[test]
fn reset_returns_to_initial_state() {
    let d = driver();
    d.bring_up();
    d.write(0x3000, 1, 4);
    let before = d.state.lock().expect("lock").resets;
    d.set_status(0);
    let s = d.state.lock().expect("lock");
    assert_eq!(s.resets, before + 1);
    assert!(s.queues.is_none(), "queues were taken back");
    assert_eq!(count(&s.kicks[0]), 0, "stale kick drained");
    drop(s);
    assert_eq!(d.status(), 0);
    assert_eq!(d.read(0x10, 2), 0xffff);
    d.write(0x08, 0, 4);
    assert_eq!(d.read(0x0c, 4), 0, "driver features cleared");
    for q in 0..2u64 {
        d.write(0x16, q, 2);
        assert_eq!(d.read(0x18, 2), [256, 128][q as usize]);
        assert_eq!(d.read(0x1a, 2), 0xffff);
        assert_eq!(d.read(0x1c, 2), 0);
        assert_eq!(d.read(0x20, 8), 0);
    }
    d.bring_up();
    assert_eq!(d.state.lock().expect("lock").activations.len(), 2);
}

/// A device whose I/O is still in flight at reset (a hung store) must not see the reset
/// reported done: `device_status` keeps its value, the driver's re-initialisation is ignored,
/// and reads of the status retry until the device has drained.
#[test]
fn a_reset_the_device_cannot_finish_stays_pending() {
    let d = driver();
    d.bring_up();
    let up = d.status();
    assert_ne!(up, 0);
    let before = {
        let mut s = d.state.lock().expect("lock");
        s.pending_resets = 2;
        s.resets
    };
    d.set_status(0);
    assert_eq!(d.status(), up, "not reset while I/O is in flight");
    d.set_status(1); // a driver that does not wait: ignored, but it asks again
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert_eq!(d.status(), 0, "the retry found the device drained");
    let s = d.state.lock().expect("lock");
    assert_eq!(
        s.resets - before,
        3,
        "the first try, the status write, the status read"
    );
    assert!(s.queues.is_none(), "queues were taken back");
    drop(s);
    d.bring_up();
    assert_eq!(d.state.lock().expect("lock").activations.len(), 2);
}

#[test]
fn failed_activation_sets_needs_reset() {
    let d = driver();
    d.state.lock().expect("lock").fail_activate = true;
    d.bring_up();
    assert_eq!(d.status(), 0x0f | status::DEVICE_NEEDS_RESET);
    assert_eq!(count(&d.irqfds[0]), 1, "config change signalled");
    d.set_status(0x0f);
    assert_ne!(
        d.status() & status::DEVICE_NEEDS_RESET,
        0,
        "sticky until reset"
    );
}

#[test]
fn invalid_rings_fail_activation() {
    let d = driver();
    assert!(d.negotiate(OFFERED));
    d.setup_queue(0, 64, 0xffff, 0x20_0000);
    d.set_status(0x0f);
    assert_ne!(d.status() & status::DEVICE_NEEDS_RESET, 0);
    assert!(d.state.lock().expect("lock").activations.is_empty());
}

#[test]
fn device_config_and_pci_cfg_window() {
    let d = driver();
    assert_eq!(d.read(0x2004, 2), 0xc5c4);
    d.write(0x2008, 0xab, 1);
    let pci_cfg = d.caps().iter().rev().find(|c| c.1 == 0x09).expect("cap").0;
    // Read device config byte 2 through the window.
    d.cfg_write(pci_cfg + 4, &[0]);
    d.cfg_write(pci_cfg + 8, &0x2002u32.to_le_bytes());
    d.cfg_write(pci_cfg + 12, &2u32.to_le_bytes());
    assert_eq!(d.cfg_read(pci_cfg + 16, 4), 0xc3c2);
    d.cfg_write(pci_cfg + 16, &[0x55, 0x66]);
    let writes = d.state.lock().expect("lock").config_writes.clone();
    assert_eq!(writes, vec![(8, vec![0xab]), (2, vec![0x55, 0x66])]);
}

/// Found by the `virtio_pci` fuzz target: clearing DRIVER_OK without a reset and setting it
/// again must not activate the device a second time over the same queues.
#[test]
fn status_bits_are_only_cleared_by_reset() {
    let d = driver();
    d.bring_up();
    assert_eq!(d.status(), 0x0f);
    d.set_status(0x0b); // try to clear DRIVER_OK
    assert_eq!(d.status(), 0x0f, "a write cannot clear a status bit");
    d.set_status(0x0f);
    assert_eq!(
        d.state.lock().expect("lock").activations.len(),
        1,
        "activated once"
    );
    d.set_status(0); // reset, then a fresh bring-up activates again
    assert_eq!(d.status(), 0);
    d.bring_up();
    assert_eq!(d.state.lock().expect("lock").activations.len(), 2);
}
