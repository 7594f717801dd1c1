//! Inflight tracking of one split virtqueue in shared memory (vhost-user's `INFLIGHT_SHMFD`,
//! QEMU's docs/interop/vhost-user.rst, "Inflight I/O tracking"): the ring records in a region the
//! frontend keeps which chain heads it took from the avail ring and has not yet returned in the
//! used ring, so that a backend started after a crash resubmits exactly those.
//!
//! One queue's region, in the machine's byte order:
//!
//! ```text
//! 0   features u64          8  version u16 (0: never used)   10 desc_num u16
//! 12  last_batch_head u16   14 used_idx u16 (the used index the states agree with)
//! 16  desc[desc_num]: inflight u8, padding [u8; 5], next u16, counter u64   (16 bytes each)
//! ```
//!
//! On the ring's path ([`InflightQueue`]): a head taken from the avail ring gets the next
//! `counter` and `inflight = 1`; a head put in the used ring is linked into the batch list
//! (`next`, `last_batch_head`); once the batch's used index is published its heads get
//! `inflight = 0` and `used_idx` the published index. These are plain stores into the mapping
//! (volatile, so the compiler keeps their order), with a compiler fence after the used index:
//! only a backend started after this one ended reads them, and a process's stores are all
//! visible once it is gone, so no CPU barrier is needed.
//!
//! On a restart ([`InflightQueue::recover`]) the region is the frontend's and read as hostile:
//! if `used_idx` lags the used ring's index, the batch published last is cleared by walking at
//! most the difference of heads along `next`; then every head below the ring size marked
//! exactly 1 is resubmitted, ordered by counter (then index), before the avail ring is read
//! again from `used index + resubmitted` (every chain taken was either completed or is still
//! marked). Heads at or past the ring size, flags other than 0 and 1, a `desc_num` or version
//! that does not match, and batch lists that loop are cleared or bounded, never trusted.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::Arc;

/// Bytes of a queue region's header.
pub const HEADER_BYTES: u64 = 16;
/// Bytes of one descriptor's state.
pub const DESC_STATE_BYTES: u64 = 16;
/// Each queue's region starts on this boundary (as DPDK's and libvhost-user's do).
pub const QUEUE_REGION_ALIGN: u64 = 64;
/// The layout version written and understood here.
pub const VERSION: u16 = 1;
/// Most descriptor states a queue region may hold (the largest split ring).
pub const MAX_DESC_NUM: u16 = 32768;

const VERSION_AT: usize = 8;
const DESC_NUM_AT: usize = 10;
const LAST_BATCH_HEAD_AT: usize = 12;
const USED_IDX_AT: usize = 14;
const INFLIGHT_AT: usize = 0;
const NEXT_AT: usize = 6;
const COUNTER_AT: usize = 8;

/// Bytes of one queue's region for `desc_num` descriptor states (header and states, rounded up
/// to [`QUEUE_REGION_ALIGN`]).
pub fn queue_region_bytes(desc_num: u16) -> u64 {
    (HEADER_BYTES + DESC_STATE_BYTES * u64::from(desc_num)).next_multiple_of(QUEUE_REGION_ALIGN)
}

/// One queue's region inside a shared mapping.
pub struct QueueRegion {
    base: NonNull<u8>,
    desc_num: u16,
    /// Keeps the mapping alive while the region is used.
    _mapping: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for QueueRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueRegion")
            .field("base", &self.base)
            .field("desc_num", &self.desc_num)
            .finish()
    }
}

// SAFETY: the pointer points into a shared mapping that `_mapping` keeps alive; it has no thread
// affinity, and every access through it is volatile (the frontend shares the memory anyway).
unsafe impl Send for QueueRegion {}

impl QueueRegion {
    /// The region of `desc_num` states at `base`.
    ///
    /// # Safety
    ///
    /// `base` is 8-aligned and points to [`queue_region_bytes`]`(desc_num)` readable and
    /// writable bytes that stay mapped for as long as `mapping` lives.
    pub unsafe fn new(
        base: NonNull<u8>,
        desc_num: u16,
        mapping: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        Self {
            base,
            desc_num,
            _mapping: mapping,
        }
    }

    /// The descriptor states the region holds.
    pub fn desc_num(&self) -> u16 {
        self.desc_num
    }

    /// Another view of the same region (what a restarted backend maps).
    #[cfg(test)]
    pub(crate) fn same_mapping(&self) -> Self {
        Self {
            base: self.base,
            desc_num: self.desc_num,
            _mapping: self._mapping.clone(),
        }
    }

    /// A pointer to `T` at byte `at` of the region.
    ///
    /// # Safety
    ///
    /// `at + size_of::<T>()` is inside the region and `at` is aligned for `T` (the header's
    /// fields and a state below `desc_num`, at their offsets).
    unsafe fn field<T>(&self, at: usize) -> *mut T {
        // SAFETY: in bounds by the caller's promise.
        unsafe { self.base.as_ptr().add(at).cast::<T>() }
    }

    /// Byte offset of field `field` of descriptor state `i` (`i < desc_num` for any access).
    fn desc_at(i: u16, field: usize) -> usize {
        HEADER_BYTES as usize + DESC_STATE_BYTES as usize * usize::from(i) + field
    }

    fn header_u16(&self, at: usize) -> u16 {
        // SAFETY: callers pass one of the header's u16 offsets (8..16, even): inside the region,
        // 2-aligned (the base is 8-aligned). Volatile: the frontend shares the memory.
        unsafe { self.field::<u16>(at).read_volatile() }
    }

    fn set_header_u16(&self, at: usize, value: u16) {
        // SAFETY: as in `header_u16`.
        unsafe { self.field::<u16>(at).write_volatile(value) }
    }

    fn inflight(&self, i: u16) -> u8 {
        debug_assert!(i < self.desc_num);
        // SAFETY: callers check `i < desc_num`: the state's byte lies inside the region.
        unsafe {
            self.field::<u8>(Self::desc_at(i, INFLIGHT_AT))
                .read_volatile()
        }
    }

    fn set_inflight(&self, i: u16, value: u8) {
        debug_assert!(i < self.desc_num);
        // SAFETY: as in `inflight`.
        unsafe {
            self.field::<u8>(Self::desc_at(i, INFLIGHT_AT))
                .write_volatile(value)
        }
    }

    fn next(&self, i: u16) -> u16 {
        debug_assert!(i < self.desc_num);
        // SAFETY: `i < desc_num` (callers check); `next` is at an even offset of a 16-byte state.
        unsafe { self.field::<u16>(Self::desc_at(i, NEXT_AT)).read_volatile() }
    }

    fn set_next(&self, i: u16, value: u16) {
        debug_assert!(i < self.desc_num);
        // SAFETY: as in `next`.
        unsafe {
            self.field::<u16>(Self::desc_at(i, NEXT_AT))
                .write_volatile(value)
        }
    }

    fn counter(&self, i: u16) -> u64 {
        debug_assert!(i < self.desc_num);
        // SAFETY: `i < desc_num` (callers check); `counter` is at offset 8 of a state that starts
        // 16-aligned from an 8-aligned base.
        unsafe {
            self.field::<u64>(Self::desc_at(i, COUNTER_AT))
                .read_volatile()
        }
    }

    fn set_counter(&self, i: u16, value: u64) {
        debug_assert!(i < self.desc_num);
        // SAFETY: as in `counter`.
        unsafe {
            self.field::<u64>(Self::desc_at(i, COUNTER_AT))
                .write_volatile(value)
        }
    }

    /// Zeroes every state and writes a fresh header agreeing with used index `used_idx`.
    fn initialise(&self, used_idx: u16) {
        for i in 0..self.desc_num {
            self.set_inflight(i, 0);
            self.set_next(i, 0);
            self.set_counter(i, 0);
        }
        // SAFETY: the features field (offset 0, 8 bytes, 8-aligned base) is inside the region.
        unsafe { self.field::<u64>(0).write_volatile(0) };
        self.set_header_u16(DESC_NUM_AT, self.desc_num);
        self.set_header_u16(LAST_BATCH_HEAD_AT, 0);
        self.set_header_u16(USED_IDX_AT, used_idx);
        // The version last: a region with a version is a whole one.
        self.set_header_u16(VERSION_AT, VERSION);
    }
}

/// Why a queue's region cannot track its ring.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum InflightError {
    /// The ring has more entries than the region has states.
    #[error("the ring has {ring_size} entries, the inflight region {desc_num}")]
    RingTooLarge {
        /// The ring's size.
        ring_size: u16,
        /// The region's states.
        desc_num: u16,
    },
}

/// What [`InflightQueue::recover`] found in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Heads still in flight when the last backend stopped, to be resubmitted first.
    pub resubmitted: u16,
    /// Heads of the last published batch whose flags were still set (cleared).
    pub batch_cleared: u16,
    /// Flags that were neither 0 nor 1, or set on heads past the ring (cleared).
    pub garbage: u16,
    /// The region was (re)initialised: never used (version 0), or a version or `desc_num`
    /// this code does not know.
    pub initialised: bool,
}

/// Where the last `pop` came from, for `undo_pop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastPop {
    Nothing,
    Resubmitted,
    Avail(u16),
}

/// A ring's inflight tracking: its region, the heads left to resubmit, and the batch of used
/// entries not yet published.
#[derive(Debug)]
pub struct InflightQueue {
    region: QueueRegion,
    /// Heads below this are tracked (the ring's size, at most the region's `desc_num`).
    ring_size: u16,
    /// The next head's counter.
    counter: u64,
    /// The head of the batch list (the region's copy is written before each publish).
    last_batch_head: u16,
    /// Heads put in the used ring since the last publish (capacity: the ring size).
    batch: Vec<u16>,
    /// Heads to resubmit before the avail ring is read, in counter order, and the next one.
    resubmit: Vec<u16>,
    resubmit_next: usize,
    last_pop: LastPop,
}

impl InflightQueue {
    /// Reads `region` as a ring of `ring_size` entries whose used index is `used_idx` left it
    /// (see the module doc), and returns its tracking with the index the avail ring is to be
    /// read from next: `None` for a region never used (the frontend's base holds), else the used
    /// index plus the heads to resubmit.
    pub fn recover(
        region: QueueRegion,
        ring_size: u16,
        used_idx: u16,
    ) -> Result<(Self, Option<u16>, Recovery), InflightError> {
        let desc_num = region.desc_num;
        if ring_size == 0 || ring_size > desc_num {
            return Err(InflightError::RingTooLarge {
                ring_size,
                desc_num,
            });
        }
        let mut found = Recovery::default();
        let mut queue = Self {
            region,
            ring_size,
            counter: 0,
            last_batch_head: 0,
            batch: Vec::with_capacity(usize::from(ring_size)),
            resubmit: Vec::new(),
            resubmit_next: 0,
            last_pop: LastPop::Nothing,
        };
        let r = &queue.region;
        if r.header_u16(VERSION_AT) != VERSION || r.header_u16(DESC_NUM_AT) != desc_num {
            found.initialised = true;
            r.initialise(used_idx);
            return Ok((queue, None, found));
        }
        // A batch published but not yet cleared: at most a ring's worth of heads along the
        // list (it may loop or leave the ring: the walk stops there).
        let region_used = r.header_u16(USED_IDX_AT);
        if region_used != used_idx {
            let mut head = r.header_u16(LAST_BATCH_HEAD_AT);
            let batch = used_idx.wrapping_sub(region_used).min(ring_size);
            for _ in 0..batch {
                if head >= ring_size {
                    break;
                }
                if r.inflight(head) != 0 {
                    r.set_inflight(head, 0);
                    found.batch_cleared += 1;
                }
                head = r.next(head);
            }
            r.set_header_u16(USED_IDX_AT, used_idx);
        }
        let mut marked: Vec<(u64, u16)> = Vec::new();
        for i in 0..desc_num {
            match r.inflight(i) {
                0 => {}
                1 if i < ring_size => marked.push((r.counter(i), i)),
                _ => {
                    r.set_inflight(i, 0);
                    found.garbage += 1;
                }
            }
        }
        marked.sort_unstable();
        queue.counter = marked.last().map_or(0, |&(c, _)| c.wrapping_add(1));
        queue.resubmit = marked.into_iter().map(|(_, i)| i).collect();
        // At most `ring_size` heads (one flag each).
        found.resubmitted = queue.resubmit.len() as u16;
        let next_avail = used_idx.wrapping_add(found.resubmitted);
        Ok((queue, Some(next_avail), found))
    }

    /// The ring size the tracking was set up for.
    pub fn ring_size(&self) -> u16 {
        self.ring_size
    }

    /// Heads still waiting to be resubmitted.
    pub fn pending_resubmissions(&self) -> usize {
        self.resubmit.len() - self.resubmit_next
    }

    /// The next head to resubmit, if any (it stays marked in flight).
    #[inline]
    pub fn take_resubmit(&mut self) -> Option<u16> {
        let head = *self.resubmit.get(self.resubmit_next)?;
        self.resubmit_next += 1;
        self.last_pop = LastPop::Resubmitted;
        Some(head)
    }

    /// `head` was taken from the avail ring: it is in flight from now on.
    #[inline]
    pub fn mark(&mut self, head: u16) {
        if head < self.ring_size {
            self.region.set_counter(head, self.counter);
            self.region.set_inflight(head, 1);
            self.counter = self.counter.wrapping_add(1);
            self.last_pop = LastPop::Avail(head);
        } else {
            // The chain is refused when walked; nothing to track.
            self.last_pop = LastPop::Nothing;
        }
    }

    /// The last pop was put back: a resubmitted head goes back to the front of the list (true:
    /// the avail index must not move), an avail head is no longer in flight (false: the avail
    /// index steps back).
    pub fn undo_pop(&mut self) -> bool {
        match std::mem::replace(&mut self.last_pop, LastPop::Nothing) {
            LastPop::Resubmitted => {
                self.resubmit_next -= 1;
                true
            }
            LastPop::Avail(head) => {
                self.region.set_inflight(head, 0);
                false
            }
            LastPop::Nothing => false,
        }
    }

    /// `head` goes into the used ring: it joins the batch list. False (nothing recorded) when
    /// the batch already holds a ring's worth of heads: the caller publishes first.
    #[inline]
    pub fn put_used(&mut self, head: u16) -> bool {
        if head >= self.ring_size {
            return true;
        }
        if self.batch.len() == self.batch.capacity() {
            return false;
        }
        self.region.set_next(head, self.last_batch_head);
        self.last_batch_head = head;
        self.batch.push(head);
        true
    }

    /// Just before the used index is published: the batch list's head goes into the region.
    #[inline]
    pub fn before_publish(&self) {
        self.region
            .set_header_u16(LAST_BATCH_HEAD_AT, self.last_batch_head);
    }

    /// Just after the used index `used_idx` was published: the batch's heads are no longer in
    /// flight, and the region agrees with that index.
    #[inline]
    pub fn after_publish(&mut self, used_idx: u16) {
        // The flags are cleared after the index store, never before.
        compiler_fence(Ordering::SeqCst);
        for &head in &self.batch {
            self.region.set_inflight(head, 0);
        }
        self.batch.clear();
        self.region.set_header_u16(USED_IDX_AT, used_idx);
    }
}

#[cfg(test)]
pub(crate) mod tests;
