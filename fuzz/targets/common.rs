// Shared helpers for the virtio-blk targets (included with `#[path]`, not a crate).
#![allow(dead_code)]

use devices::block::request::DiskLimits;
use devices::block::ID_BYTES;
use devices::virtio::GuestMemory;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;

/// Guest memory size: 1 MiB, mapped at guest address 0.
pub const MEM_SIZE: u64 = 0x10_0000;
/// Where the rings live (the fuzz input supplies their contents).
pub const DESC_TABLE: u64 = 0x0;
pub const AVAIL_RING: u64 = 0x1000;
pub const USED_RING: u64 = 0x2000;
/// End of the ring area: [0, RING_END) holds descriptor table, avail ring and used ring.
pub const RING_END: u64 = 0x3000;

/// The drive both virtio-blk targets parse against: serial `fuzz-disk`.
pub fn disk_limits(capacity_sectors: u64, read_only: bool) -> DiskLimits {
    let mut serial = [0u8; ID_BYTES];
    serial[..9].copy_from_slice(b"fuzz-disk");
    DiskLimits {
        capacity_sectors,
        read_only,
        serial,
    }
}

pub fn memory() -> GuestMemory {
    GuestMemory::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).expect("guest memory")
}

/// A ready queue of `size` entries on the fixed ring addresses, or None when it is not valid
/// (the transport refuses DRIVER_OK for such a queue).
pub fn ready_queue(mem: &GuestMemory, size: u16, event_idx: bool) -> Option<Queue> {
    let mut queue = Queue::new(256).expect("queue");
    queue.set_size(size);
    queue.set_desc_table_address(Some(DESC_TABLE as u32), Some(0));
    queue.set_avail_ring_address(Some(AVAIL_RING as u32), Some(0));
    queue.set_used_ring_address(Some(USED_RING as u32), Some(0));
    queue.set_event_idx(event_idx);
    queue.set_ready(true);
    queue.is_valid(mem).then_some(queue)
}

/// A tiny cursor over the fuzz input.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    pub fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
