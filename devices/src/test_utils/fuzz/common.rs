//! What the queue fuzz targets share: the fixed guest layout, the drive (virtio-blk), ready
//! queues on that layout or elsewhere, the bounded run loop and a cursor over the input. Guest memory, the drive's limits and the
//! interrupt come from the queue rig ([`crate::test_utils::queue`]).

use dataplane::{Handler, Poll, ThreadTurn, Watch};
use virtio_queue::{Queue, QueueT};

use crate::block::request::DiskLimits;
use crate::test_utils::queue;
use crate::virtio::{ActivatedQueue, GuestMemory};

/// Guest memory size: 1 MiB, mapped at guest address 0.
pub const MEM_SIZE: u64 = 0x10_0000;
/// Where the descriptor table lives (the fuzz input supplies the rings' contents).
pub const DESC_TABLE: u64 = 0x0;
/// Where the avail ring lives.
pub const AVAIL_RING: u64 = 0x1000;
/// Where the used ring lives.
pub const USED_RING: u64 = 0x2000;
/// End of the ring area: [0, RING_END) holds descriptor table, avail ring and used ring.
pub const RING_END: u64 = 0x3000;

/// The drive both virtio-blk targets parse against: serial `fuzz-disk`.
pub fn disk_limits(capacity_sectors: u64, read_only: bool) -> DiskLimits {
    queue::disk_limits(capacity_sectors, read_only, b"fuzz-disk")
}

/// [`MEM_SIZE`] of guest memory at guest address 0.
pub fn memory() -> GuestMemory {
    queue::guest_memory(MEM_SIZE)
}

/// A ready queue of `size` entries on the fixed ring addresses, or None when it is not valid
/// (the transport refuses DRIVER_OK for such a queue).
pub fn ready_queue(mem: &GuestMemory, size: u16, event_idx: bool) -> Option<Queue> {
    ready_queue_at(mem, size, event_idx, [DESC_TABLE, AVAIL_RING, USED_RING])
}

/// As [`ready_queue`], with the descriptor table, avail ring and used ring at `rings` (guest
/// addresses below 4 GiB).
pub fn ready_queue_at(
    mem: &GuestMemory,
    size: u16,
    event_idx: bool,
    rings: [u64; 3],
) -> Option<Queue> {
    let [desc, avail, used] = rings.map(|a| u32::try_from(a).expect("ring below 4 GiB"));
    let mut queue = Queue::new(256).expect("queue");
    queue.set_size(size);
    queue.set_desc_table_address(Some(desc), Some(0));
    queue.set_avail_ring_address(Some(avail), Some(0));
    queue.set_used_ring_address(Some(used), Some(0));
    queue.set_event_idx(event_idx);
    queue.set_ready(true);
    queue.is_valid(mem).then_some(queue)
}

/// Queue `index` of a device whose queues sit one after the other from guest address 0, each
/// in a 0x3000-byte block (descriptor table, avail ring and used ring 0x1000 apart), ready and
/// activated with a kick of its own; None when the queue is not valid.
pub fn activated_queue(
    mem: &GuestMemory,
    index: u16,
    size: u16,
    event_idx: bool,
) -> Option<ActivatedQueue> {
    let base = u64::from(index) * 0x3000;
    let queue = ready_queue_at(mem, size, event_idx, [base, base + 0x1000, base + 0x2000])?;
    Some(ActivatedQueue {
        index,
        queue,
        kick: vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
        inflight: None,
    })
}

/// Runs `run(32)` turns until one asks for no other; panics (a finding) when that takes
/// `bound` turns or more. `when` says which loop, for the message.
pub fn run_until_idle<H: Handler + ?Sized>(h: &mut H, bound: usize, when: &str) {
    let mut turns = 0;
    while h.run(32, &ThreadTurn::default()).more {
        turns += 1;
        assert!(
            turns < bound,
            "run(32){when} still wants another turn after {turns} turns"
        );
    }
}

/// One round of a queue target: with `poll`, inside a polling watch (notifications off, one
/// cheap check first), then [`run_until_idle`] with `bound`.
pub fn run_round<H: Handler + Poll>(h: &mut H, poll: bool, bound: usize) {
    if poll {
        h.watch(Watch::Polling, true);
        let _ = h.poll();
    }
    run_until_idle(h, bound, "");
    if poll {
        let _ = h.watch(Watch::Polling, false);
    }
}

/// A tiny cursor over the fuzz input: reads past its end give zeros (`take`: fewer bytes).
#[derive(Debug)]
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    /// Two bytes, little endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// Four bytes, little endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Eight bytes, little endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    /// Whether the input is used up.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
