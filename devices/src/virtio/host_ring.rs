//! Guest memory and a split virtqueue's rings seen through host pointers resolved once, for the
//! dataplane's per-request path.
//!
//! `virtio_queue::Queue` reaches every ring field, descriptor and header through `vm-memory`:
//! a region lookup, a slice and a copy per access, about a dozen per request. Here the three ring
//! areas are resolved to host addresses when the queue is handed to its handler (each must lie in
//! one memory region, as it does in any layout the guest can use), and guest buffers through a
//! short region table. What the guest controls is still checked on every use: the avail index
//! may run at most a queue's worth ahead, a chain is walked at most a table's worth of descriptors
//! with indirect tables only one level deep, a chain may carry at most 2^32 bytes, and every
//! buffer must lie inside one region. The semantics (ordering, EVENT_IDX, indirect tables) are
//! those of `virtio_queue::Queue` and its `DescriptorChain`, which the unit tests below compare
//! against; the queue's state goes back into the `Queue` with [`HostRing::sync_to`].
//!
//! Guest memory is shared with the guest's vCPUs, so it is only touched through volatile or
//! atomic accesses, never through Rust references. When a new avail index shows up, the lines
//! the chain will likely need (its avail entry, the last head's descriptors, a line the handler
//! names) are prefetched together rather than missed one after the other.

use std::sync::atomic::{fence, AtomicU16, Ordering};

use virtio_bindings::virtio_ring;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress};

use super::inflight::InflightQueue;
use super::GuestMemory;

/// The virtio ring's flag bits, as u16 (the bindings declare them u32).
const DESC_F_INDIRECT: u16 = virtio_ring::VRING_DESC_F_INDIRECT as u16;
const DESC_F_NEXT: u16 = virtio_ring::VRING_DESC_F_NEXT as u16;
const USED_F_NO_NOTIFY: u16 = virtio_ring::VRING_USED_F_NO_NOTIFY as u16;
/// Bytes per descriptor.
const DESC_SIZE: u64 = 16;

/// One mapped region of guest memory.
#[derive(Debug, Clone, Copy)]
struct HostRegion {
    start: u64,
    len: u64,
    host: *mut u8,
}

/// Guest memory with its regions' host addresses resolved once. Keeps the mappings alive (it
/// holds a clone of the `GuestMemory`, whose regions are reference-counted).
#[derive(Debug, Clone)]
pub struct HostMemory {
    regions: Box<[HostRegion]>,
    mem: GuestMemory,
}

// SAFETY: the raw pointers point into mmap'd guest memory that `mem` keeps mapped; they carry no
// thread affinity, and every access through them is volatile or atomic (the memory is shared with
// the guest's vCPU threads anyway).
unsafe impl Send for HostMemory {}
// SAFETY: as above; `&HostMemory` only hands out addresses and performs volatile/atomic accesses.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Resolves the regions of `mem`.
    pub fn new(mem: &GuestMemory) -> Self {
        let regions = mem
            .iter()
            .filter_map(|r| {
                let host = r.get_host_address(MemoryRegionAddress(0)).ok()?;
                Some(HostRegion {
                    start: r.start_addr().raw_value(),
                    len: r.len(),
                    host,
                })
            })
            .collect();
        Self {
            regions,
            mem: mem.clone(),
        }
    }

    /// The memory behind it, for the rare paths that want `vm-memory`'s accessors.
    pub fn guest(&self) -> &GuestMemory {
        &self.mem
    }

    /// The host address of `[addr, addr + len)` when the range lies inside one region; a
    /// zero-length range must still start inside one.
    #[inline]
    pub fn range(&self, addr: u64, len: u64) -> Option<*mut u8> {
        for r in self.regions.iter() {
            let off = addr.wrapping_sub(r.start);
            if addr >= r.start && off < r.len {
                return (len <= r.len - off).then(|| r.host.wrapping_add(off as usize));
            }
        }
        None
    }

    /// Writes one byte at guest address `addr`; false when it is not in guest memory.
    #[inline]
    pub fn write_u8(&self, addr: u64, value: u8) -> bool {
        match self.range(addr, 1) {
            Some(p) => {
                // SAFETY: `range` checked that the byte lies in a mapped region kept alive by
                // `self.mem`; the access is volatile (the guest shares this memory).
                unsafe { p.write_volatile(value) };
                true
            }
            None => false,
        }
    }

    /// Reads `N` bytes at guest address `addr`; None when they are not in one region.
    #[inline]
    pub fn read_bytes<const N: usize>(&self, addr: u64) -> Option<[u8; N]> {
        let p = self.range(addr, N as u64)?;
        Some(read_volatile_bytes(p))
    }
}

/// Asks the CPU to start loading the cache line at `p` (for writing when `write`). A hint: it
/// never faults and changes no memory, whatever `p` is.
#[inline(always)]
fn prefetch(p: *const u8, write: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        // SAFETY: SSE is part of x86_64's baseline; a prefetch reads and writes no memory and
        // never faults, whatever the address.
        unsafe {
            if write {
                _mm_prefetch::<_MM_HINT_ET0>(p.cast());
            } else {
                _mm_prefetch::<_MM_HINT_T0>(p.cast());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, write);
}

/// Reads `N` bytes from `p` with volatile accesses (8 at a time when `p` is aligned for it).
#[inline]
pub(crate) fn read_volatile_bytes<const N: usize>(p: *const u8) -> [u8; N] {
    let mut out = [0u8; N];
    if N.is_multiple_of(8) && (p as usize).is_multiple_of(8) {
        for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
            // SAFETY: callers pass a pointer to `N` readable bytes of mapped guest memory (from
            // `HostMemory::range` or a ring resolved by `HostRing::new`); `p` is 8-aligned and
            // `8 * i + 8 <= N`.
            let v = unsafe { p.cast::<u64>().add(i).read_volatile() };
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
    } else {
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: as above, byte by byte (`i < N`).
            *b = unsafe { p.add(i).read_volatile() };
        }
    }
    out
}

/// Why a queue's rings cannot be used.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// A ring area is misaligned or not inside one region of guest memory.
    #[error("the {0} is misaligned or not inside one region of guest memory")]
    Layout(&'static str),
    /// The queue size is not a power of two in 1..=32768.
    #[error("queue size {0} is not a power of two up to 32768")]
    Size(u16),
    /// The driver's avail index ran more than a queue's worth ahead of the device.
    #[error("the avail index is {ahead} entries ahead of the device (queue size {size})")]
    AvailIndex {
        /// How far ahead.
        ahead: u16,
        /// The queue size.
        size: u16,
    },
    /// A used entry named a descriptor outside the table.
    #[error("descriptor head {0} is outside the descriptor table")]
    Head(u16),
}

/// A split virtqueue's device side over host pointers. Holds the queue's indexes while its
/// handler runs; [`HostRing::sync_to`] writes them back into the `Queue`.
#[derive(Debug)]
pub struct HostRing {
    size: u16,
    desc: *mut u8,
    avail: *mut u8,
    used: *mut u8,
    event_idx: bool,
    next_avail: u16,
    next_used: u16,
    /// The used index the driver last saw published.
    published_used: u16,
    /// Entries added since the last `needs_notification`.
    num_added: u16,
    /// The avail index last loaded (chains up to it can be popped without another load).
    avail_known: u16,
    /// Inflight tracking in memory the frontend keeps (vhost-user's `INFLIGHT_SHMFD`); `None`
    /// for Osprey's own devices, which then pay one untaken branch per pop, used entry and
    /// publish.
    inflight: Option<InflightQueue>,
    /// The head popped last: a driver that reuses its freed descriptors (Linux does, and one
    /// request at a time always) posts it again.
    last_head: u16,
    /// A line the handler expects the next chain to touch (its last request's header), or null.
    expected_line: *const u8,
}

// SAFETY: the pointers point into guest memory kept mapped by the handler's `HostMemory` (which
// the handler holds for as long as it holds the ring); all accesses are volatile or atomic.
unsafe impl Send for HostRing {}

impl HostRing {
    /// Resolves `queue`'s rings in `mem`. The queue must be ready (the transport checked
    /// `is_valid`); its `next_avail` / `next_used` carry over.
    pub fn new(queue: &Queue, mem: &HostMemory) -> Result<Self, RingError> {
        let size = queue.size();
        if size == 0 || !size.is_power_of_two() || size > 32768 {
            return Err(RingError::Size(size));
        }
        let n = u64::from(size);
        let area = |addr: u64, len: u64, align: u64, what: &'static str| {
            if !addr.is_multiple_of(align) {
                return Err(RingError::Layout(what));
            }
            mem.range(addr, len).ok_or(RingError::Layout(what))
        };
        let desc = area(queue.desc_table(), DESC_SIZE * n, 16, "descriptor table")?;
        // flags, idx, ring[size], used_event.
        let avail = area(queue.avail_ring(), 6 + 2 * n, 2, "available ring")?;
        // flags, idx, ring[size] of (id, len), avail_event.
        let used = area(queue.used_ring(), 6 + 8 * n, 4, "used ring")?;
        let next_avail = queue.next_avail();
        let next_used = queue.next_used();
        Ok(Self {
            size,
            desc,
            avail,
            used,
            event_idx: queue.event_idx_enabled(),
            next_avail,
            next_used,
            published_used: next_used,
            num_added: 0,
            avail_known: next_avail,
            inflight: None,
            last_head: 0,
            expected_line: std::ptr::null(),
        })
    }

    /// Tracks the ring's heads in `inflight` from now on (resubmitting its heads first).
    pub fn set_inflight(&mut self, inflight: Option<InflightQueue>) {
        self.inflight = inflight;
    }

    /// Takes the inflight tracking back (the queue goes back to the transport).
    pub fn take_inflight(&mut self) -> Option<InflightQueue> {
        self.inflight.take()
    }

    /// Writes the indexes back into `queue` (before it goes back to the transport).
    pub fn sync_to(&self, queue: &mut Queue) {
        queue.set_next_avail(self.next_avail);
        queue.set_next_used(self.next_used);
    }

    /// The 16-bit ring field at `base + offset`, as an atomic: the guest writes these fields
    /// concurrently. `base` is the avail or used ring and `offset` an even offset inside it.
    fn u16_at(&self, base: *mut u8, offset: u64) -> &AtomicU16 {
        // SAFETY: `base` was resolved by `new` (inside one mapped region the handler's
        // `HostMemory` keeps alive, 2-aligned, at least `6 + 2 * size` bytes) and every caller
        // passes an even `offset` inside it; an AtomicU16 has u16's layout.
        unsafe { AtomicU16::from_ptr(base.add(offset as usize).cast::<u16>()) }
    }

    /// The driver's avail index.
    #[inline]
    pub fn avail_idx(&self, order: Ordering) -> u16 {
        u16::from_le(self.u16_at(self.avail, 2).load(order))
    }

    /// Whether the driver made chains available that the device has not taken: chains up to
    /// the index `pop` last read (a driver that moved its index back since cannot take them
    /// back: `pop` hands them out, then finds the index behind it and fails), or chains past it.
    #[inline]
    pub fn has_avail(&self) -> bool {
        self.avail_known != self.next_avail || self.avail_idx(Ordering::Acquire) != self.next_avail
    }

    /// Takes the next available chain's head index; `Ok(None)` when the ring is empty. With
    /// inflight tracking, the heads left to resubmit come first, and each head taken from the
    /// avail ring is marked in flight.
    #[inline]
    pub fn pop(&mut self) -> Result<Option<u16>, RingError> {
        if self.inflight.is_none() {
            return self.pop_avail();
        }
        self.pop_tracked()
    }

    /// `pop` with inflight tracking.
    #[inline]
    fn pop_tracked(&mut self) -> Result<Option<u16>, RingError> {
        if let Some(head) = self
            .inflight
            .as_mut()
            .and_then(InflightQueue::take_resubmit)
        {
            return Ok(Some(head));
        }
        let popped = self.pop_avail()?;
        if let (Some(head), Some(inflight)) = (popped, self.inflight.as_mut()) {
            inflight.mark(head);
        }
        Ok(popped)
    }

    /// The next head from the avail ring.
    #[inline]
    fn pop_avail(&mut self) -> Result<Option<u16>, RingError> {
        if self.avail_known == self.next_avail {
            let idx = self.avail_idx(Ordering::Acquire);
            let ahead = idx.wrapping_sub(self.next_avail);
            if ahead > self.size {
                return Err(RingError::AvailIndex {
                    ahead,
                    size: self.size,
                });
            }
            self.avail_known = idx;
            if ahead == 0 {
                return Ok(None);
            }
            self.warm_expected();
        }
        let slot = u64::from(self.next_avail % self.size);
        let head = u16::from_le(
            self.u16_at(self.avail, 4 + 2 * slot)
                .load(Ordering::Acquire),
        );
        self.next_avail = self.next_avail.wrapping_add(1);
        self.last_head = head;
        Ok(Some(head))
    }

    /// Names a line of guest memory the next chain will likely touch (a request's header, which
    /// a driver reusing its descriptors reuses too). Any pointer is allowed: it is only ever
    /// prefetched, never dereferenced.
    #[inline]
    pub fn expect_next(&mut self, line: *const u8) {
        self.expected_line = line;
    }

    /// Starts loading, side by side, the lines the chain just posted will likely need: its avail
    /// entry, the descriptors of the head popped last and the expected line. Otherwise each
    /// is a cache miss on the line the driver's CPU wrote, one after the other (the entry
    /// names the descriptor, the descriptor the header).
    #[inline]
    fn warm_expected(&self) {
        let slot = usize::from(self.next_avail % self.size);
        prefetch(self.avail.wrapping_add(4 + 2 * slot), false);
        if self.last_head < self.size {
            prefetch(
                self.desc
                    .wrapping_add(usize::from(self.last_head) * DESC_SIZE as usize),
                false,
            );
        }
        if !self.expected_line.is_null() {
            // For writing: the status byte the device writes back usually shares the line.
            prefetch(self.expected_line, true);
        }
    }

    /// Puts the last popped chain back (it is taken again by the next `pop`).
    pub fn undo_pop(&mut self) {
        if self.inflight.as_mut().is_some_and(InflightQueue::undo_pop) {
            // A resubmitted head: back on the list, the avail index did not move.
            return;
        }
        self.next_avail = self.next_avail.wrapping_sub(1);
    }

    /// The descriptors of the chain starting at `head`, as `virtio_queue`'s `DescriptorChain`
    /// yields them (indirect tables followed, the walk bounded).
    #[inline]
    pub fn chain<'a>(&self, head: u16, mem: &'a HostMemory) -> Chain<'a> {
        Chain {
            mem,
            table: self.desc,
            table_len: self.size,
            next_index: head,
            ttl: self.size,
            indirect: false,
            bytes: 0,
        }
    }

    /// Puts `(head, len)` on the used ring; the driver sees it at [`HostRing::publish_used`].
    #[inline]
    pub fn add_used(&mut self, head: u16, len: u32) -> Result<(), RingError> {
        if head >= self.size {
            return Err(RingError::Head(head));
        }
        if let Some(inflight) = self.inflight.as_mut() {
            if !inflight.put_used(head) {
                // A ring's worth of entries since the last publish (a guest that repeats
                // heads): publish those so the batch list stays whole.
                self.publish_used();
                if let Some(inflight) = self.inflight.as_mut() {
                    inflight.put_used(head);
                }
            }
        }
        let slot = u64::from(self.next_used % self.size);
        // SAFETY: the used ring was resolved by `new` to `6 + 8 * size` bytes, 4-aligned, inside
        // one mapped region the handler keeps alive; element `slot < size` lies at
        // `4 + 8 * slot`. Volatile: the guest shares the memory.
        unsafe {
            let elem = self.used.add(4 + 8 * slot as usize).cast::<u32>();
            elem.write_volatile(u32::from(head).to_le());
            elem.add(1).write_volatile(len.to_le());
        }
        self.next_used = self.next_used.wrapping_add(1);
        self.num_added = self.num_added.wrapping_add(1);
        Ok(())
    }

    /// Makes the added used entries visible to the driver (one index store for the batch).
    #[inline]
    pub fn publish_used(&mut self) {
        if self.published_used != self.next_used {
            if let Some(inflight) = self.inflight.as_ref() {
                inflight.before_publish();
            }
            // Release: the elements before the index.
            self.u16_at(self.used, 2)
                .store(self.next_used.to_le(), Ordering::Release);
            if let Some(inflight) = self.inflight.as_mut() {
                inflight.after_publish(self.next_used);
            }
            self.published_used = self.next_used;
        }
    }

    /// Whether the driver wants an interrupt for the entries published since the last call
    /// (EVENT_IDX's `used_event`, or the avail ring's NO_INTERRUPT flag without it).
    #[inline]
    pub fn needs_notification(&mut self) -> bool {
        self.publish_used();
        // The used index before reading the driver's suppression state.
        fence(Ordering::SeqCst);
        let added = std::mem::take(&mut self.num_added);
        if self.event_idx {
            let used_event = u16::from_le(
                self.u16_at(self.avail, 4 + 2 * u64::from(self.size))
                    .load(Ordering::Relaxed),
            );
            let new = self.next_used;
            let old = new.wrapping_sub(added);
            new.wrapping_sub(used_event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            added > 0 && u16::from_le(self.u16_at(self.avail, 0).load(Ordering::Relaxed)) & 1 == 0
        }
    }

    /// Asks the driver to notify (kick) for new chains; returns whether chains arrived
    /// meanwhile (then the caller must not sleep).
    #[inline]
    pub fn enable_notification(&mut self) -> bool {
        self.enable_notification_past(self.next_avail)
    }

    /// The avail index the last `pop` read: what the device has seen the driver post, taken
    /// or not (`undo_pop` puts chains back behind it).
    #[inline]
    pub fn avail_seen(&self) -> u16 {
        self.avail_known
    }

    /// Asks the driver to notify once it moves its avail index past `seen` (a device that
    /// took chains back with `undo_pop` and needs more than it saw waits for the next post,
    /// not for the chains it put back); returns whether the index moved past `seen` meanwhile.
    #[inline]
    pub fn enable_notification_past(&mut self, seen: u16) -> bool {
        if self.event_idx {
            self.u16_at(self.used, 4 + 8 * u64::from(self.size))
                .store(seen.to_le(), Ordering::Relaxed);
        } else {
            self.u16_at(self.used, 0).store(0, Ordering::Relaxed);
        }
        // The suppression state before re-reading the avail index.
        fence(Ordering::SeqCst);
        self.avail_idx(Ordering::Relaxed) != seen
    }

    /// Asks the driver not to notify (the device is looking at the ring anyway). With EVENT_IDX
    /// nothing is written: the driver notifies once past `avail_event` and then not again.
    #[inline]
    pub fn disable_notification(&mut self) {
        if !self.event_idx {
            self.u16_at(self.used, 0)
                .store(USED_F_NO_NOTIFY.to_le(), Ordering::Relaxed);
        }
    }
}

/// The descriptors of one chain, read from guest memory as they are walked. Ends (early, leaving
/// the last yielded descriptor with NEXT set) on an index outside its table, a nested or
/// malformed indirect table, more descriptors than the table holds, or more than 2^32 bytes.
#[derive(Debug)]
pub struct Chain<'a> {
    mem: &'a HostMemory,
    table: *const u8,
    table_len: u16,
    next_index: u16,
    ttl: u16,
    indirect: bool,
    bytes: u32,
}

impl Chain<'_> {
    #[inline]
    fn read(&self, index: u16) -> Descriptor {
        // SAFETY: `index < table_len`, and `table` points to `16 * table_len` bytes of mapped
        // guest memory: the descriptor table resolved by `HostRing::new`, or an indirect table
        // resolved by `HostMemory::range` below; `self.mem` keeps the mapping alive.
        let p = unsafe { self.table.add(usize::from(index) * DESC_SIZE as usize) };
        let raw: [u8; 16] = read_volatile_bytes(p);
        let [a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, l3, f0, f1, n0, n1] = raw;
        Descriptor::new(
            u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            u32::from_le_bytes([l0, l1, l2, l3]),
            u16::from_le_bytes([f0, f1]),
            u16::from_le_bytes([n0, n1]),
        )
    }
}

impl Iterator for Chain<'_> {
    type Item = Descriptor;

    #[inline]
    fn next(&mut self) -> Option<Descriptor> {
        // At most one switch to an indirect table, then at most `ttl` descriptors.
        loop {
            if self.ttl == 0 || self.next_index >= self.table_len {
                return None;
            }
            let d = self.read(self.next_index);
            if d.flags() & DESC_F_INDIRECT != 0 {
                if self.indirect || !d.len().is_multiple_of(DESC_SIZE as u32) {
                    return None;
                }
                let entries = u16::try_from(d.len() / DESC_SIZE as u32).ok()?;
                self.table = self.mem.range(d.addr().raw_value(), u64::from(d.len()))?;
                self.table_len = entries;
                self.ttl = entries;
                self.next_index = 0;
                self.indirect = true;
                continue;
            }
            self.bytes = self.bytes.checked_add(d.len())?;
            if d.flags() & DESC_F_NEXT != 0 {
                self.next_index = d.next();
                self.ttl -= 1;
            } else {
                self.ttl = 0;
            }
            return Some(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::queue::desc as d;
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{Bytes, GuestAddress};

    const F_NEXT: u16 = DESC_F_NEXT;
    const F_WRITE: u16 = virtio_ring::VRING_DESC_F_WRITE as u16;
    const F_INDIRECT: u16 = DESC_F_INDIRECT;

    fn mem() -> GuestMemory {
        GuestMemory::from_ranges(&[
            (GuestAddress(0), 0x10_0000),
            (GuestAddress(0x20_0000), 0x10_0000),
        ])
        .expect("mem")
    }

    fn same(a: &[Descriptor], b: &[Descriptor]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                (x.addr(), x.len(), x.flags(), x.next()) == (y.addr(), y.len(), y.flags(), y.next())
            })
    }

    /// Every chain walks as virtio-queue's `DescriptorChain` walks it, good or hostile.
    #[test]
    fn chains_walk_as_virtio_queue_walks_them() {
        let m = mem();
        let host = HostMemory::new(&m);
        // An indirect table at 0x8000: two descriptors.
        for (i, (addr, len, flags, next)) in
            [(0x9000u64, 16u32, F_NEXT, 1u16), (0x9100, 1, F_WRITE, 0)]
                .into_iter()
                .enumerate()
        {
            m.write_obj(
                Descriptor::new(addr, len, flags, next),
                GuestAddress(0x8000 + 16 * i as u64),
            )
            .expect("w");
        }
        let cases: Vec<Vec<RawDescriptor>> = vec![
            vec![
                d(0x1000, 16, F_NEXT, 1),
                d(0x2000, 512, F_NEXT | F_WRITE, 2),
                d(0x3000, 1, F_WRITE, 0),
            ],
            vec![d(0x8000, 32, F_INDIRECT, 0)],
            // A loop: 0 -> 1 -> 0.
            vec![d(0x1000, 16, F_NEXT, 1), d(0x2000, 16, F_NEXT, 0)],
            // Next index outside the table.
            vec![d(0x1000, 16, F_NEXT, 200)],
            // An indirect table with a bad length, one outside memory, a nested one.
            vec![d(0x8000, 17, F_INDIRECT, 0)],
            vec![d(0x1f_fff0, 32, F_INDIRECT, 0)],
            vec![
                d(0x1000, 16, F_NEXT, 1),
                d(0x8000, 32, F_INDIRECT | F_NEXT, 2),
                d(0x3000, 1, F_WRITE, 0),
            ],
            // More than 2^32 bytes.
            vec![d(0x1000, u32::MAX, F_NEXT, 1), d(0x2000, 2, F_WRITE, 0)],
        ];
        for (n, case) in cases.iter().enumerate() {
            let vq = MockSplitQueue::new(&m, 16);
            let theirs: Vec<Descriptor> = vq
                .build_multiple_desc_chains(case)
                .expect("chain")
                .collect();
            let q = vq.create_queue::<Queue>().expect("queue");
            let ring = HostRing::new(&q, &host).expect("ring");
            let ours: Vec<Descriptor> = ring.chain(0, &host).collect();
            assert!(same(&ours, &theirs), "case {n}: {ours:?} vs {theirs:?}");
        }
        // A head outside the table yields nothing.
        let vq = MockSplitQueue::new(&m, 16);
        let q = vq.create_queue::<Queue>().expect("queue");
        let ring = HostRing::new(&q, &host).expect("ring");
        assert_eq!(ring.chain(16, &host).count(), 0);
    }

    /// A 4-entry queue with three one-descriptor chains (heads 0, 1, 2) posted, its used ring
    /// moved clear of the avail ring (the mock's overlaps the avail ring's `used_event`).
    fn three_chains(m: &GuestMemory) -> Queue {
        let vq = MockSplitQueue::new(m, 4);
        let chains = [
            d(0x1000, 1, F_WRITE, 0),
            d(0x1010, 1, F_WRITE, 0),
            d(0x1020, 1, F_WRITE, 0),
        ];
        vq.add_desc_chains(&chains, 0).expect("chains");
        let mut q = vq.create_queue::<Queue>().expect("queue");
        q.set_used_ring_address(Some(0x100), Some(0));
        q
    }

    #[test]
    fn pop_add_used_and_notifications_match_the_spec() {
        let m = mem();
        let host = HostMemory::new(&m);
        let mut q = three_chains(&m);
        q.set_event_idx(true);
        let mut ring = HostRing::new(&q, &host).expect("ring");
        assert_eq!(ring.pop(), Ok(Some(0)));
        assert_eq!(ring.pop(), Ok(Some(1)));
        ring.undo_pop();
        assert_eq!(ring.pop(), Ok(Some(1)));
        assert_eq!(ring.pop(), Ok(Some(2)));
        assert_eq!(ring.pop(), Ok(None));
        // Nothing published until publish_used.
        ring.add_used(2, 7).expect("add");
        let used_idx = || m.read_obj::<u16>(GuestAddress(0x102)).expect("r");
        assert_eq!(used_idx(), 0);
        assert_eq!(ring.add_used(4, 1), Err(RingError::Head(4)));
        // used_event = 0: the first entry crosses it.
        assert!(ring.needs_notification());
        assert_eq!(used_idx(), 1);
        let e: [u32; 2] = m.read_obj(GuestAddress(0x104)).expect("r");
        assert_eq!(e, [2, 7]);
        ring.add_used(0, 1).expect("add");
        assert!(!ring.needs_notification(), "used_event 0 already passed");
        // Re-enabling notifications writes avail_event = next_avail and re-checks the ring.
        assert!(!ring.enable_notification());
        let avail_event: u16 = m
            .read_obj(GuestAddress(q.used_ring() + 4 + 8 * 4))
            .expect("r");
        assert_eq!(avail_event, 3);
        // The state goes back into the Queue.
        ring.sync_to(&mut q);
        assert_eq!((q.next_avail(), q.next_used()), (3, 2));
        // An avail index more than a queue ahead is refused.
        m.write_obj(3u16 + 5, GuestAddress(q.avail_ring() + 2))
            .expect("w");
        assert_eq!(ring.pop(), Err(RingError::AvailIndex { ahead: 5, size: 4 }));
    }

    /// The expected line and the last head are only prefetched: a wild pointer, or a guest
    /// head outside the table, changes nothing the ring reads or returns.
    #[test]
    fn expected_lines_are_hints_whatever_they_point_at() {
        let m = mem();
        let host = HostMemory::new(&m);
        let vq = MockSplitQueue::new(&m, 4);
        vq.add_desc_chains(&[d(0x1000, 1, F_WRITE, 0), d(0x1010, 1, F_WRITE, 0)], 0)
            .expect("chains");
        let q = vq.create_queue::<Queue>().expect("queue");
        let mut ring = HostRing::new(&q, &host).expect("ring");
        for wild in [1usize, usize::MAX - 63, 0xdead_0000_0000] {
            ring.expect_next(wild as *const u8);
            ring.last_head = u16::MAX;
            ring.avail_known = ring.next_avail;
            ring.warm_expected();
        }
        assert_eq!(ring.pop(), Ok(Some(0)));
        assert_eq!(ring.pop(), Ok(Some(1)));
        assert_eq!(ring.pop(), Ok(None));
        assert_eq!(ring.last_head, 1, "the head popped last is remembered");
    }

    /// A driver that moves its avail index back after the device read it: `has_avail` still
    /// sees the chains `pop` would hand out (a check that looked at the index alone said
    /// "nothing" while `enable_notification_past` said "more", and a virtio-net pair asked for
    /// turn after turn for ever), and `pop` ends on the index behind it.
    #[test]
    fn an_avail_index_moved_back_is_served_then_refused() {
        let m = mem();
        let host = HostMemory::new(&m);
        let q = three_chains(&m);
        let mut ring = HostRing::new(&q, &host).expect("ring");
        assert_eq!(ring.pop(), Ok(Some(0)));
        // The driver moves its index from 3 back to 1.
        m.write_obj(1u16, GuestAddress(q.avail_ring() + 2))
            .expect("w");
        assert!(ring.has_avail(), "chains 1 and 2 were seen");
        assert!(ring.enable_notification_past(ring.avail_seen()));
        assert_eq!(ring.pop(), Ok(Some(1)));
        assert_eq!(ring.pop(), Ok(Some(2)));
        assert_eq!(
            ring.pop(),
            Err(RingError::AvailIndex {
                ahead: 1u16.wrapping_sub(3),
                size: 4
            })
        );
    }

    /// With inflight tracking: avail heads are marked as they are taken; after a restart the
    /// heads left in flight come first (and can be put back), and published entries are no
    /// longer in flight.
    #[test]
    fn a_tracked_ring_resubmits_first_and_clears_what_it_publishes() {
        use crate::virtio::inflight::tests::anon_region;
        use crate::virtio::inflight::InflightQueue;
        let m = mem();
        let host = HostMemory::new(&m);
        let vq = MockSplitQueue::new(&m, 4);
        vq.add_desc_chains(&[d(0x1000, 1, F_WRITE, 0), d(0x1010, 1, F_WRITE, 0)], 0)
            .expect("chains");
        let mut q = vq.create_queue::<Queue>().expect("queue");
        q.set_used_ring_address(Some(0x100), Some(0));
        let (region, view) = anon_region(4);
        let (tracking, _, _) = InflightQueue::recover(region, 4, 0).expect("a fresh region");
        let mut ring = HostRing::new(&q, &host).expect("ring");
        ring.set_inflight(Some(tracking));
        assert_eq!(ring.pop(), Ok(Some(0)));
        // The backend dies with head 0 in flight; the next one resubmits it, then reads the
        // avail ring from 1.
        drop(ring);
        let (tracking, next_avail, found) =
            InflightQueue::recover(view.same_mapping(), 4, 0).expect("recover");
        assert_eq!((found.resubmitted, next_avail), (1, Some(1)));
        q.set_next_avail(1);
        let mut ring = HostRing::new(&q, &host).expect("ring");
        ring.set_inflight(Some(tracking));
        assert_eq!(ring.pop(), Ok(Some(0)), "the resubmitted head");
        ring.undo_pop();
        assert_eq!(ring.pop(), Ok(Some(0)), "put back, taken again");
        assert_eq!(ring.pop(), Ok(Some(1)), "then the avail ring");
        assert_eq!(ring.pop(), Ok(None));
        ring.add_used(1, 1).expect("add");
        ring.add_used(0, 1).expect("add");
        ring.publish_used();
        assert_eq!(m.read_obj::<u16>(GuestAddress(0x102)).expect("r"), 2);
        let (_, next_avail, found) =
            InflightQueue::recover(view.same_mapping(), 4, 2).expect("recover");
        assert_eq!((found.resubmitted, next_avail), (0, Some(2)), "{found:?}");
        assert!(
            ring.take_inflight().is_some(),
            "the tracking goes back with the queue"
        );
    }

    #[test]
    fn without_event_idx_the_flags_suppress_notifications() {
        let m = mem();
        let host = HostMemory::new(&m);
        let vq = MockSplitQueue::new(&m, 4);
        let mut q = vq.create_queue::<Queue>().expect("queue");
        q.set_used_ring_address(Some(0x100), Some(0));
        let mut ring = HostRing::new(&q, &host).expect("ring");
        let used_flags = || m.read_obj::<u16>(GuestAddress(q.used_ring())).expect("r");
        ring.disable_notification();
        assert_eq!(used_flags(), USED_F_NO_NOTIFY);
        ring.enable_notification();
        assert_eq!(used_flags(), 0);
        assert!(!ring.needs_notification(), "nothing added");
        ring.add_used(0, 1).expect("add");
        assert!(ring.needs_notification());
        ring.add_used(0, 1).expect("add");
        let no_interrupt = virtio_ring::VRING_AVAIL_F_NO_INTERRUPT as u16;
        m.write_obj(no_interrupt, GuestAddress(q.avail_ring()))
            .expect("w");
        assert!(!ring.needs_notification());
    }

    #[test]
    fn ranges_stay_inside_one_region() {
        let m = mem();
        let host = HostMemory::new(&m);
        assert!(host.range(0, 0x10_0000).is_some());
        assert!(
            host.range(0xf_ffff, 2).is_none(),
            "crosses the region's end"
        );
        assert!(host.range(0x10_0000, 0).is_none(), "in the gap");
        assert!(host.range(0x20_0000, 0).is_some());
        assert!(host.range(u64::MAX, 1).is_none());
        assert!(host.range(0x2f_ffff, u64::MAX).is_none());
        assert!(host.write_u8(0x20_0010, 9));
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x20_0010)).expect("r"), 9);
        assert_eq!(host.read_bytes::<2>(0x20_000f), Some([0, 9]));
        assert!(!host.write_u8(0x30_0000, 1));
    }

    #[test]
    fn rings_outside_memory_or_misaligned_are_refused() {
        let m = mem();
        let host = HostMemory::new(&m);
        let vq = MockSplitQueue::new(&m, 16);
        let mut q = vq.create_queue::<Queue>().expect("queue");
        q.set_desc_table_address(Some(0xf_ff80), Some(0));
        assert_eq!(
            HostRing::new(&q, &host).err(),
            Some(RingError::Layout("descriptor table"))
        );
        q.set_desc_table_address(Some(0x8), Some(0));
        assert_eq!(
            HostRing::new(&q, &host).err(),
            Some(RingError::Layout("descriptor table"))
        );
    }
}
