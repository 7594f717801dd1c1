//! A driven device's state saved, then replayed into a fresh device: the same registers, MSI-X
//! table and pending bits, one activation with each queue resuming at its used index.

use vm_memory::Bytes;

use super::*;

/// Sets queue `base`'s used ring index (`setup_queue` puts the used ring at `base + 0x2000`).
fn set_used_idx(d: &Driver, base: u64, idx: u16) {
    let dev = d.dev.lock().expect("lock");
    dev.mem
        .write_obj(idx.to_le(), GuestAddress(base + 0x2000 + 2))
        .expect("used idx");
}

#[test]
fn a_saved_state_restores_into_a_fresh_device() {
    let d = driver();
    d.bring_up();
    set_used_idx(&d, 0x1_0000, 7);
    set_used_idx(&d, 0x2_0000, 65535);
    let irq = d
        .state
        .lock()
        .expect("lock")
        .interrupt
        .clone()
        .expect("irq");
    // Vector 2 (queue 1) masked, then raised: pending.
    d.write(0x4000 + 2 * 16 + 12, 1, 4);
    irq.notify_queue(1).expect("notify");
    irq.notify_config().expect("config change");
    let saved = d.dev.lock().expect("lock").save_state().expect("save");
    assert_eq!(saved.msix_pending, vec![2]);
    assert_eq!(saved.status, 0x0f);
    assert_eq!(saved.config_generation, 1);
    let used: Vec<u16> = saved.queues.iter().map(|q| q.used_idx).collect();
    assert_eq!(used, vec![7, 65535]);

    let fresh = driver();
    // Guest memory comes back from the snapshot's memory file.
    set_used_idx(&fresh, 0x1_0000, 7);
    set_used_idx(&fresh, 0x2_0000, 65535);
    for (offset, value) in saved.config_writes() {
        fresh.cfg_write(offset, &value.to_le_bytes());
    }
    fresh
        .dev
        .lock()
        .expect("lock")
        .restore_state(&saved)
        .expect("restore");
    let again = fresh.dev.lock().expect("lock").save_state().expect("save");
    assert_eq!(again, saved, "the restored device saves the same state");

    let s = fresh.state.lock().expect("lock");
    assert_eq!(s.acked, Some(OFFERED));
    assert_eq!(
        s.activations,
        vec![vec![
            (0, 64, 0x1_0000, 0x1_1000, 0x1_2000, true, true),
            (1, 128, 0x2_0000, 0x2_1000, 0x2_2000, true, true)
        ]],
        "activated once, with the saved queues"
    );
    let queues = s.queues.as_ref().expect("queues");
    let resumed: Vec<(u16, u16)> = queues
        .iter()
        .map(|q| (q.queue.next_avail(), q.queue.next_used()))
        .collect();
    assert_eq!(resumed, vec![(7, 7), (65535, 65535)]);
    drop(s);
    assert_eq!(
        count(&fresh.irqfds[1]),
        1,
        "queue 0 signalled once after the restore"
    );
    assert_eq!(fresh.read(0x5000, 8), 0b100, "vector 2 still pending");
    assert_eq!(count(&fresh.irqfds[2]), 0, "and not delivered while masked");
    fresh.write(0x4000 + 2 * 16 + 12, 0, 4);
    assert_eq!(count(&fresh.irqfds[2]), 1, "delivered on unmask");
    assert_eq!(
        fresh.ioevents.addresses(),
        d.ioevents.addresses(),
        "kicks registered at the same notify addresses"
    );
}

#[test]
fn a_state_of_another_shape_is_refused() {
    let d = driver();
    d.bring_up();
    let mut saved = d.dev.lock().expect("lock").save_state().expect("save");
    saved.queues.pop();
    let fresh = driver();
    let e = fresh
        .dev
        .lock()
        .expect("lock")
        .restore_state(&saved)
        .expect_err("one queue short");
    assert_eq!(
        e.to_string(),
        "virtio-pci state has 1 queues; this device has 2"
    );
}

#[test]
fn an_unconfigured_device_round_trips_without_activation() {
    let d = driver();
    let saved = d.dev.lock().expect("lock").save_state().expect("save");
    let fresh = driver();
    fresh
        .dev
        .lock()
        .expect("lock")
        .restore_state(&saved)
        .expect("restore");
    assert!(fresh.state.lock().expect("lock").activations.is_empty());
    assert_eq!(fresh.status(), 0);
}

/// Sets a ring's `idx` at `ring + 2`.
fn set_ring_idx(d: &Driver, ring: u64, idx: u16) {
    let dev = d.dev.lock().expect("lock");
    dev.mem
        .write_obj(idx.to_le(), GuestAddress(ring + 2))
        .expect("ring idx");
}

#[test]
fn rings_are_settled_once_every_available_request_is_used() {
    let d = driver();
    assert!(d.dev.lock().expect("lock").rings_settled().expect("check"));
    d.bring_up();
    let settled = || d.dev.lock().expect("lock").rings_settled().expect("check");
    assert!(settled(), "nothing made available");
    set_ring_idx(&d, 0x2_1000, 5);
    assert!(!settled(), "queue 1: 5 available, none used");
    set_ring_idx(&d, 0x2_2000, 4);
    assert!(!settled());
    set_ring_idx(&d, 0x2_2000, 5);
    assert!(settled());
}

#[test]
fn a_driver_paused_between_a_selector_and_its_register_resumes_where_it_was() {
    let d = driver();
    d.set_status(status::ACKNOWLEDGE);
    d.set_status(status::ACKNOWLEDGE | status::DRIVER);
    // The driver selected the low half of its features, then the snapshot came.
    d.write(0x08, 0, 4);
    let saved = d.dev.lock().expect("lock").save_state().expect("save");

    let fresh = driver();
    for (offset, value) in saved.config_writes() {
        fresh.cfg_write(offset, &value.to_le_bytes());
    }
    fresh
        .dev
        .lock()
        .expect("lock")
        .restore_state(&saved)
        .expect("restore");
    // The driver goes on: the low half into the selector it chose, then the high half.
    fresh.write(0x0c, OFFERED & 0xffff_ffff, 4);
    fresh.write(0x08, 1, 4);
    fresh.write(0x0c, OFFERED >> 32, 4);
    fresh.set_status(status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    assert_ne!(fresh.status() & status::FEATURES_OK, 0);
    let again = fresh.dev.lock().expect("lock").save_state().expect("save");
    assert_eq!(
        again.driver_features, OFFERED,
        "the features the driver wrote"
    );
}

#[test]
fn an_unsettled_queue_is_named_and_a_nudge_signals_its_kick() {
    let d = driver();
    d.bring_up();
    let dev = || d.dev.lock().expect("lock");
    assert!(dev().unsettled_queues().expect("check").is_empty());
    // Queue 1: 5 available, 4 used (a request its handler has not completed).
    set_ring_idx(&d, 0x2_1000, 5);
    set_ring_idx(&d, 0x2_2000, 4);
    assert_eq!(dev().unsettled_queues().expect("check"), vec![(1, 5, 4)]);
    let kicks: Vec<_> = d
        .state
        .lock()
        .expect("lock")
        .kicks
        .iter()
        .map(|k| k.try_clone().expect("clone"))
        .collect();
    assert!(kicks.iter().all(|k| k.read().is_err()), "no kick yet");
    dev().nudge_queues();
    for (q, k) in kicks.iter().enumerate() {
        assert_eq!(k.read().ok(), Some(1), "queue {q} signalled once");
    }
}
