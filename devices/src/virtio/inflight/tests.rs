//! The inflight region's marking, and its recovery from what a crashed backend, or a hostile
//! frontend, left in it.

use super::*;
use vm_memory::MmapRegion;

/// Two views of one zeroed, anonymous region of `desc_num` states: one for the tracking, one
/// for the test to look at and scribble on.
pub(crate) fn anon_region(desc_num: u16) -> (QueueRegion, QueueRegion) {
    let bytes = queue_region_bytes(desc_num) as usize;
    let mapping = Arc::new(MmapRegion::<()>::new(bytes).expect("anonymous mapping"));
    let base = NonNull::new(mapping.as_ptr()).expect("mapped");
    let keep: Arc<dyn Any + Send + Sync> = mapping;
    // SAFETY: `bytes` = queue_region_bytes(desc_num) of a page-aligned mapping `keep` holds.
    unsafe {
        (
            QueueRegion::new(base, desc_num, keep.clone()),
            QueueRegion::new(base, desc_num, keep),
        )
    }
}

/// A used region (version 1) agreeing with used index `used`, tracked for a ring of `size`.
fn tracked(desc_num: u16, size: u16, used: u16) -> (InflightQueue, QueueRegion) {
    let (region, view) = anon_region(desc_num);
    let (queue, next_avail, found) = InflightQueue::recover(region, size, used).expect("recover");
    assert!(found.initialised && next_avail.is_none(), "{found:?}");
    (queue, view)
}

/// A backend that died: what a new one reads from the same memory.
fn restart(view: &QueueRegion, size: u16, used: u16) -> (InflightQueue, Option<u16>, Recovery) {
    InflightQueue::recover(view.same_mapping(), size, used).expect("recover")
}

fn resubmitted(q: &mut InflightQueue) -> Vec<u16> {
    std::iter::from_fn(|| q.take_resubmit()).collect()
}

#[test]
fn region_sizes_follow_the_layout() {
    assert_eq!(queue_region_bytes(1), 64);
    assert_eq!(queue_region_bytes(128), 16 + 16 * 128 + 48);
    assert_eq!(queue_region_bytes(256) % QUEUE_REGION_ALIGN, 0);
    assert_eq!(QueueRegion::desc_at(3, COUNTER_AT), 16 + 48 + 8);
}

#[test]
fn a_fresh_region_is_initialised_and_the_base_holds() {
    let (_, view) = tracked(8, 8, 300);
    assert_eq!(view.header_u16(VERSION_AT), VERSION);
    assert_eq!(view.header_u16(DESC_NUM_AT), 8);
    assert_eq!(view.header_u16(USED_IDX_AT), 300);
    let (mut q, next_avail, found) = restart(&view, 8, 300);
    assert_eq!(next_avail, Some(300), "nothing in flight: the used index");
    assert_eq!(found, Recovery::default());
    assert!(q.take_resubmit().is_none());
}

#[test]
fn marks_and_clears_follow_the_spec() {
    let (mut q, view) = tracked(8, 8, 0);
    for head in [3, 5, 7] {
        q.mark(head);
    }
    assert_eq!(
        (view.inflight(3), view.inflight(5), view.inflight(7)),
        (1, 1, 1)
    );
    assert_eq!(
        (view.counter(3), view.counter(5), view.counter(7)),
        (0, 1, 2)
    );
    assert!(q.put_used(5));
    assert!(q.put_used(3));
    q.before_publish();
    assert_eq!(view.header_u16(LAST_BATCH_HEAD_AT), 3, "the list's head");
    assert_eq!(view.next(3), 5, "3 → 5");
    assert_eq!(
        view.inflight(5),
        1,
        "still marked until the index is published"
    );
    q.after_publish(2);
    assert_eq!(
        (view.inflight(3), view.inflight(5), view.inflight(7)),
        (0, 0, 1)
    );
    assert_eq!(view.header_u16(USED_IDX_AT), 2);
    // A head outside the ring is not tracked (the chain is refused when walked).
    q.mark(8);
    assert!(q.put_used(8));
    assert_eq!(q.batch.len(), 0);
}

#[test]
fn a_restart_resubmits_what_was_in_flight_in_counter_order() {
    let (mut q, view) = tracked(16, 16, 10);
    for head in [4, 2, 9, 0] {
        q.mark(head);
    }
    q.put_used(2);
    q.before_publish();
    q.after_publish(11);
    drop(q); // the backend dies
    let (mut q, next_avail, found) = restart(&view, 16, 11);
    assert_eq!(next_avail, Some(14), "used 11 + 3 still in flight");
    assert_eq!(found.resubmitted, 3);
    assert_eq!(resubmitted(&mut q), [4, 9, 0]);
    assert_eq!(q.counter, 4, "new heads count on from the last one");
    // The resubmitted heads stay marked until they complete.
    assert_eq!(view.inflight(9), 1);
}

#[test]
fn a_batch_published_but_not_cleared_is_cleared_on_restart() {
    let (mut q, view) = tracked(16, 16, 0);
    for head in [1, 2, 3] {
        q.mark(head);
    }
    q.put_used(1);
    q.put_used(3);
    q.before_publish();
    // The used index (2) reached the guest; the backend died before clearing the flags.
    drop(q);
    let (mut q, next_avail, found) = restart(&view, 16, 2);
    assert_eq!(found.batch_cleared, 2);
    assert_eq!(resubmitted(&mut q), [2]);
    assert_eq!(next_avail, Some(3));
    assert_eq!(view.header_u16(USED_IDX_AT), 2);
    // Entries added to the used ring but never published stay in flight.
    let (mut q, view) = tracked(16, 16, 0);
    q.mark(6);
    q.put_used(6);
    q.before_publish();
    drop(q);
    let (mut q, next_avail, _) = restart(&view, 16, 0);
    assert_eq!((resubmitted(&mut q), next_avail), (vec![6], Some(1)));
}

#[test]
fn an_undone_pop_leaves_the_region_as_before() {
    let (mut q, view) = tracked(8, 8, 0);
    q.mark(4);
    assert!(!q.undo_pop(), "an avail head: the avail index steps back");
    assert_eq!(view.inflight(4), 0);
    assert!(!q.undo_pop(), "nothing more to undo");
    // A resubmitted head goes back to the front of the list.
    q.mark(5);
    drop(q);
    let (mut q, _, _) = restart(&view, 8, 0);
    assert_eq!(q.take_resubmit(), Some(5));
    assert!(q.undo_pop(), "a resubmitted head: the avail index stays");
    assert_eq!(view.inflight(5), 1);
    assert_eq!(q.take_resubmit(), Some(5));
    assert_eq!(q.pending_resubmissions(), 0);
}

#[test]
fn a_full_batch_asks_for_a_publish() {
    let (mut q, _) = tracked(4, 2, 0);
    assert!(q.put_used(0));
    assert!(
        q.put_used(0),
        "a repeated head (a hostile guest) still counts"
    );
    assert!(!q.put_used(1), "a ring's worth: publish first");
    q.before_publish();
    q.after_publish(2);
    assert!(q.put_used(1));
}

#[test]
fn hostile_contents_are_bounded_and_cleared() {
    let (_, view) = tracked(16, 8, 100);
    // Flags that are not 0 or 1, marks past the ring, a looping batch list that claims a huge
    // batch, counters at the top of their range and repeated.
    view.set_inflight(0, 2);
    view.set_inflight(1, 255);
    view.set_inflight(9, 1);
    view.set_inflight(15, 1);
    for (head, counter) in [(2u16, u64::MAX), (3, u64::MAX), (4, 0), (5, 7)] {
        view.set_inflight(head, 1);
        view.set_counter(head, counter);
    }
    view.set_next(5, 6);
    view.set_next(6, 5);
    view.set_inflight(6, 1);
    view.set_header_u16(LAST_BATCH_HEAD_AT, 5);
    view.set_header_u16(USED_IDX_AT, 100u16.wrapping_sub(60000));
    let (mut q, next_avail, found) = restart(&view, 8, 100);
    assert_eq!(found.batch_cleared, 2, "5 and 6, once each: {found:?}");
    assert_eq!(
        found.garbage, 4,
        "two bad flags, two heads past the ring: {found:?}"
    );
    assert_eq!(resubmitted(&mut q), [4, 2, 3], "counter order, then index");
    assert_eq!(next_avail, Some(103));
    assert_eq!(q.counter, 0, "the counter after u64::MAX wraps");
    for i in [0, 1, 9, 15] {
        assert_eq!(view.inflight(i), 0, "state {i} cleared");
    }
    // A last batch head outside the ring ends the walk at once.
    let (_, view) = tracked(16, 8, 0);
    view.set_inflight(3, 1);
    view.set_header_u16(LAST_BATCH_HEAD_AT, 40000);
    view.set_header_u16(USED_IDX_AT, 5);
    let (mut q, _, found) = restart(&view, 8, 6);
    assert_eq!((found.batch_cleared, resubmitted(&mut q)), (0, vec![3]));
}

#[test]
fn an_unknown_version_or_size_starts_afresh() {
    for (at, value) in [(VERSION_AT, 7u16), (DESC_NUM_AT, 9)] {
        let (mut q, view) = tracked(16, 16, 0);
        q.mark(3);
        view.set_header_u16(at, value);
        drop(q);
        let (mut q, next_avail, found) = restart(&view, 16, 0);
        assert!(found.initialised, "{at}: {found:?}");
        assert_eq!(next_avail, None, "{at}: the frontend's base holds");
        assert!(q.take_resubmit().is_none());
        assert_eq!(view.inflight(3), 0, "{at}: states zeroed");
    }
}

#[test]
fn a_ring_larger_than_the_region_is_refused() {
    let (region, _) = anon_region(8);
    assert_eq!(
        InflightQueue::recover(region, 16, 0).err(),
        Some(InflightError::RingTooLarge {
            ring_size: 16,
            desc_num: 8
        })
    );
    let (region, _) = anon_region(8);
    assert!(InflightQueue::recover(region, 0, 0).is_err());
}

/// Random bytes in every field: recovery never panics, resubmits each head below the ring at
/// most once, and reads the avail ring from the used index plus their count.
#[test]
fn random_regions_recover_within_bounds() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..500 {
        let (region, view) = anon_region(64);
        let words = queue_region_bytes(64) as usize / 8;
        let dense = round % 2 == 0;
        for w in 0..words {
            let mut v = next();
            if dense {
                // Mostly small values: flags of 0 and 1, versions and sizes that match.
                v &= 0x0000_0101_0000_0001 * (next() & 1);
            }
            // SAFETY: word `w` of the region's `words` 8-byte words.
            unsafe { view.field::<u64>(8 * w).write_volatile(v) };
        }
        if dense {
            view.set_header_u16(VERSION_AT, VERSION);
            view.set_header_u16(DESC_NUM_AT, 64);
        }
        let size = 1u16 << (next() % 7);
        let used = next() as u16;
        let (mut q, next_avail, found) =
            InflightQueue::recover(region, size, used).expect("recover");
        let heads = resubmitted(&mut q);
        assert!(heads.iter().all(|&h| h < size), "{round}: {heads:?}");
        let mut unique = heads.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), heads.len(), "{round}: each head once");
        if !found.initialised {
            assert_eq!(next_avail, Some(used.wrapping_add(heads.len() as u16)));
        }
    }
}
