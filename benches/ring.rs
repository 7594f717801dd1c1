//! The driver's side of a split virtqueue in guest memory: the descriptor table, the available
//! ring it fills and the used ring it consumes, with the EVENT_IDX rules a guest driver follows
//! (kick only when the device's `avail_event` was crossed; ask for an interrupt by writing
//! `used_event`). The device side is a real [`virtio_queue::Queue`] on the same memory
//! ([`DriverRing::queue`]).
//!
//! Unlike `virtio_queue::mock::MockSplitQueue`, which indexes the avail ring without wrapping,
//! this ring can be refilled forever, so benches can reuse it for millions of requests. Like a
//! guest's driver, it touches the rings natively (host pointers resolved once, atomic index
//! loads and stores), not through `vm-memory`'s per-access lookups.

use std::sync::atomic::{fence, AtomicU16, Ordering};

use devices::virtio::host_ring::HostMemory;
use devices::virtio::GuestMemory;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress};

/// `VRING_DESC_F_NEXT`.
pub const DESC_F_NEXT: u16 = 1;
/// `VRING_DESC_F_WRITE`.
pub const DESC_F_WRITE: u16 = 2;

/// The virtio spec's `vring_need_event`: whether moving an index from `old` to `new` crossed
/// `event` (the other side asked to be notified once `event` was passed).
pub fn vring_need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// The driver's view of one split virtqueue.
#[derive(Debug)]
pub struct DriverRing {
    mem: GuestMemory,
    /// Host addresses of the avail and used rings.
    avail_host: *mut u8,
    used_host: *mut u8,
    size: u16,
    event_idx: bool,
    desc: GuestAddress,
    avail: GuestAddress,
    used: GuestAddress,
    /// The driver's shadow of `avail.idx`.
    avail_idx: u16,
    /// Used entries consumed so far.
    used_seen: u16,
    /// The last `used.idx` loaded (entries up to it may be consumed without another load).
    used_known: u16,
}

// SAFETY: the raw pointers point into the guest memory `mem` keeps mapped; they carry no thread
// affinity and every access through them is atomic or volatile.
unsafe impl Send for DriverRing {}

impl DriverRing {
    /// Lays a queue of `size` entries out at `base` (descriptor table, then the avail ring, then
    /// the used ring, all zeroed). With `event_idx`, the device side negotiates EVENT_IDX.
    pub fn new(mem: GuestMemory, base: GuestAddress, size: u16, event_idx: bool) -> Self {
        assert!(
            size.is_power_of_two(),
            "queue size {size} is not a power of 2"
        );
        let n = u64::from(size);
        let desc = base;
        let avail = desc.unchecked_add(16 * n);
        let used = GuestAddress((avail.raw_value() + 6 + 2 * n + 3) & !3);
        let end = used.raw_value() + 6 + 8 * n;
        let zeros = vec![0u8; (end - base.raw_value()) as usize];
        mem.write_slice(&zeros, base)
            .expect("the rings lie inside guest memory");
        let host = HostMemory::new(&mem);
        let avail_host = host
            .range(avail.raw_value(), 6 + 2 * n)
            .expect("avail ring in one region");
        let used_host = host
            .range(used.raw_value(), 6 + 8 * n)
            .expect("used ring in one region");
        Self {
            mem,
            avail_host,
            used_host,
            size,
            event_idx,
            desc,
            avail,
            used,
            avail_idx: 0,
            used_seen: 0,
            used_known: 0,
        }
    }

    /// Queue size.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// The first guest address after the rings.
    pub fn end(&self) -> GuestAddress {
        self.used.unchecked_add(6 + 8 * u64::from(self.size))
    }

    /// The device side: a ready queue on these rings, EVENT_IDX as negotiated.
    pub fn queue(&self) -> Queue {
        let mut q = Queue::new(self.size).expect("valid queue size");
        q.set_size(self.size);
        let split = |a: GuestAddress| (Some(a.0 as u32), Some((a.0 >> 32) as u32));
        let (lo, hi) = split(self.desc);
        q.set_desc_table_address(lo, hi);
        let (lo, hi) = split(self.avail);
        q.set_avail_ring_address(lo, hi);
        let (lo, hi) = split(self.used);
        q.set_used_ring_address(lo, hi);
        q.set_event_idx(self.event_idx);
        q.set_ready(true);
        assert!(q.is_valid(&self.mem), "the device rejects the queue layout");
        q
    }

    /// Writes descriptor `index`.
    pub fn set_desc(&self, index: u16, addr: GuestAddress, len: u32, flags: u16, next: u16) {
        assert!(index < self.size, "descriptor {index} outside the table");
        let at = self.desc.unchecked_add(16 * u64::from(index));
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&addr.raw_value().to_le_bytes());
        raw[8..12].copy_from_slice(&len.to_le_bytes());
        raw[12..14].copy_from_slice(&flags.to_le_bytes());
        raw[14..].copy_from_slice(&next.to_le_bytes());
        self.mem.write_slice(&raw, at).expect("descriptor write");
    }

    /// Makes the chains starting at `heads` available with one index publish. Returns whether
    /// the driver must kick: with EVENT_IDX when the new index crossed the device's
    /// `avail_event`, without it when the device did not set `VRING_USED_F_NO_NOTIFY`.
    pub fn publish(&mut self, heads: &[u16]) -> bool {
        let old = self.avail_idx;
        for &head in heads {
            let slot = u64::from(self.avail_idx % self.size);
            self.avail_u16(4 + 2 * slot)
                .store(head.to_le(), Ordering::Relaxed);
            self.avail_idx = self.avail_idx.wrapping_add(1);
        }
        // The ring entries before the index (the device loads the index with Acquire).
        self.avail_u16(2)
            .store(self.avail_idx.to_le(), Ordering::Release);
        // The index before reading the device's suppression state (pairs with the fence the
        // device puts between writing that state and re-checking the index).
        fence(Ordering::SeqCst);
        if self.event_idx {
            let event = self
                .used_u16(4 + 8 * u64::from(self.size))
                .load(Ordering::Relaxed);
            vring_need_event(u16::from_le(event), self.avail_idx, old)
        } else {
            u16::from_le(self.used_u16(0).load(Ordering::Relaxed)) & 1 == 0 // VRING_USED_F_NO_NOTIFY
        }
    }

    /// Whether the device published used entries the driver has not consumed.
    pub fn has_used(&mut self) -> bool {
        if self.used_known == self.used_seen {
            self.used_known = self.load_used_idx();
        }
        self.used_known != self.used_seen
    }

    /// Consumes the next used entry: (descriptor head, bytes written).
    pub fn pop_used(&mut self) -> Option<(u16, u32)> {
        if !self.has_used() {
            return None;
        }
        let slot = usize::from(self.used_seen % self.size);
        // SAFETY: the used ring was resolved by `new` to `6 + 8 * size` bytes of mapped guest
        // memory (kept alive by `self.mem`), 4-aligned; element `slot < size` is at
        // `4 + 8 * slot`. Volatile: the device thread writes it.
        let (id, len) = unsafe {
            let elem = self.used_host.add(4 + 8 * slot).cast::<u32>();
            (elem.read_volatile(), elem.add(1).read_volatile())
        };
        self.used_seen = self.used_seen.wrapping_add(1);
        Some((u32::from_le(id) as u16, u32::from_le(len)))
    }

    /// Asks for an interrupt at the next used entry (`used_event`, EVENT_IDX only), then checks
    /// once more; returns true when entries arrived meanwhile (do not sleep then).
    pub fn arm_interrupt(&mut self) -> bool {
        self.avail_u16(4 + 2 * u64::from(self.size))
            .store(self.used_seen.to_le(), Ordering::Relaxed);
        // `used_event` before re-reading `used.idx` (pairs with the device's fence between
        // publishing `used.idx` and reading `used_event`).
        fence(Ordering::SeqCst);
        self.has_used()
    }

    fn load_used_idx(&self) -> u16 {
        // Acquire: the used entries are visible once the index is.
        u16::from_le(self.used_u16(2).load(Ordering::Acquire))
    }

    fn avail_u16(&self, offset: u64) -> &AtomicU16 {
        // SAFETY: `avail_host` is the avail ring, resolved by `new` to `6 + 2 * size` bytes of
        // mapped guest memory (kept alive by `self.mem`), 2-aligned; callers pass even offsets
        // below `6 + 2 * size`. The device thread reads these fields concurrently: atomics.
        unsafe { AtomicU16::from_ptr(self.avail_host.add(offset as usize).cast()) }
    }

    fn used_u16(&self, offset: u64) -> &AtomicU16 {
        // SAFETY: as `avail_u16`, for the used ring (`6 + 8 * size` bytes, 4-aligned).
        unsafe { AtomicU16::from_ptr(self.used_host.add(offset as usize).cast()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn need_event_follows_the_spec() {
        assert!(vring_need_event(0, 1, 0), "crossing the event");
        assert!(!vring_need_event(1, 1, 0), "event not yet reached");
        assert!(vring_need_event(5, 9, 3));
        assert!(
            !vring_need_event(2, 9, 3),
            "event already passed before old"
        );
        assert!(
            vring_need_event(u16::MAX, 1, u16::MAX - 1),
            "across the wrap"
        );
    }

    #[test]
    fn the_avail_ring_wraps_and_the_device_sees_every_chain() {
        let mem = GuestMemory::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("mem");
        let mut ring = DriverRing::new(mem.clone(), GuestAddress(0), 4, true);
        ring.set_desc(0, GuestAddress(0x8000), 16, DESC_F_WRITE, 0);
        let mut q = ring.queue();
        for round in 0..10u16 {
            let kick = ring.publish(&[0, 0, 0]);
            assert_eq!(kick, round == 0, "avail_event stays at 0: one kick");
            let popped = virtio_queue::QueueOwnedT::iter(&mut q, &mem)
                .expect("iter")
                .count();
            assert_eq!(popped, 3);
        }
    }
}
