//! virtio-blk request parsing and completion over arbitrary guest memory and descriptor tables.
//!
//! Input: byte 0 = queue size exponent (bits 0-2: size 2..=256), EVENT_IDX (bit 3), read-only
//! drive (bit 4); bytes 1..9 = disk capacity in sectors; the rest is copied to guest address 0
//! (descriptor table at 0x0, avail ring at 0x1000, used ring at 0x2000, buffers anywhere in the
//! 1 MiB of guest memory). Every chain the device's `HostRing` yields is walked side by side with
//! `virtio_queue`'s `DescriptorChain` (the two must yield the same descriptors), parsed with
//! `crate::block::request::parse` and completed as `BlockQueueHandler` does: parsed I/O runs
//! on the Null engine (which zero-fills read buffers through the parser's host pointers), the
//! status byte is written and the head goes on the used ring.

use super::common::*;
use crate::block::request::{parse, DiskLimits, Malformed, RequestOp};
use crate::block::{status, ID_BYTES, SECTOR_SIZE};
use crate::virtio::host_ring::{HostMemory, HostRing};
use dataplane::engine::null::NullEngine;
use dataplane::engine::{IoEngine, IoOp, IoRequest, ThreadTurn};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

/// One input.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let size = 1u16 << (1 + (flags & 7));
    // Real capacities come from a file size (< 2^63 bytes): keep them below 2^54 sectors.
    let capacity_sectors = input.u64() & ((1 << 54) - 1);
    let limits = disk_limits(capacity_sectors, flags & 0x10 != 0);

    let mem = memory();
    let image = input.take(MEM_SIZE as usize);
    mem.write_slice(image, GuestAddress(0)).expect("image fits");

    // The transport refuses DRIVER_OK for a queue that is not valid.
    let Some(mut queue) = ready_queue(&mem, size, flags & 0x08 != 0) else {
        return;
    };

    let host = HostMemory::new(&mem);
    let mut ring = HostRing::new(&queue, &host).expect("a valid queue's rings resolve");
    let mut engine = NullEngine::new(usize::from(size));
    let mut done = Vec::new();
    let fields = |d: &Descriptor| (d.addr(), d.len(), d.flags(), d.next());
    // A guest can publish at most `size` chains at once; bound the loop anyway.
    for _ in 0..2 * usize::from(size) {
        // The reference: virtio-queue's own walk of the same chain, in the same memory state.
        let reference = queue.pop_descriptor_chain(&mem);
        let Ok(Some(head)) = ring.pop() else {
            break;
        };
        // The avail index is re-read by virtio-queue on every pop and cached by the ring, so a
        // completion that overwrote it (a hostile layout) may make them disagree on the head.
        if let Some(reference) = reference.filter(|c| c.head_index() == head) {
            let theirs: Vec<_> = reference.map(|d| fields(&d)).collect();
            let ours: Vec<_> = ring.chain(head, &host).map(|d| fields(&d)).collect();
            assert_eq!(ours, theirs, "chain {head} walks differently");
        }
        let (status_addr, st, used_len) = match parse(ring.chain(head, &host), &host, &limits) {
            Ok(req) => match req.op {
                RequestOp::GetId { written } => {
                    assert!(written as usize <= ID_BYTES);
                    (req.status_addr, status::OK, written + 1)
                }
                RequestOp::Io(op) => {
                    check_bounds(&op, &limits);
                    check_host_ranges(&op, &mem);
                    let (len, is_read) = (op.data_len(), matches!(op, IoOp::Read { .. }));
                    engine
                        .submit(IoRequest {
                            op,
                            token: u64::from(head),
                        })
                        .expect("engine room");
                    assert_eq!(engine.commit(&ThreadTurn::default()), 1);
                    done.clear();
                    assert_eq!(engine.reap(&mut done, &ThreadTurn::default()), 1);
                    let used = if is_read {
                        (len as u32).saturating_add(1)
                    } else {
                        1
                    };
                    (req.status_addr, status::OK, used)
                }
            },
            Err(Malformed::Status {
                status,
                status_addr,
                ..
            }) => {
                assert!(status == status::IOERR || status == status::UNSUPP);
                (status_addr, status, 1)
            }
            Err(Malformed::Broken { .. }) => {
                // The device needs a reset: complete the chain with no status and stop.
                let _ = ring.add_used(head, 0);
                ring.publish_used();
                break;
            }
        };
        // The parser promised the status byte lies in guest memory.
        assert!(
            host.write_u8(status_addr.0, st),
            "status byte in guest memory"
        );
        let _ = ring.add_used(head, used_len);
        let _ = ring.needs_notification();
    }
}

/// A parsed request never reaches past the end of the disk.
fn check_bounds(op: &IoOp, limits: &DiskLimits) {
    let disk_bytes = limits.capacity_sectors * SECTOR_SIZE;
    match op {
        IoOp::Read { offset, iovecs } | IoOp::Write { offset, iovecs } => {
            let total: u64 = iovecs.iter().map(|v| v.len as u64).sum();
            assert_eq!(total % SECTOR_SIZE, 0);
            assert_eq!(offset % SECTOR_SIZE, 0);
            assert!(offset.checked_add(total).is_some_and(|e| e <= disk_bytes));
            assert!(!limits.read_only || matches!(op, IoOp::Read { .. }));
        }
        IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
            assert!(!limits.read_only);
            assert!(offset.checked_add(*len).is_some_and(|e| e <= disk_bytes));
        }
        IoOp::Flush => {}
    }
}

/// Every host pointer handed to the engine lies inside the guest memory mapping.
fn check_host_ranges(op: &IoOp, mem: &crate::virtio::GuestMemory) {
    let (IoOp::Read { iovecs, .. } | IoOp::Write { iovecs, .. }) = op else {
        return;
    };
    let start = mem.get_host_address(GuestAddress(0)).expect("host address") as usize;
    let end = start + MEM_SIZE as usize;
    for v in iovecs {
        let base = v.base as usize;
        assert!(
            base >= start && base.checked_add(v.len).is_some_and(|e| e <= end),
            "iovec outside guest memory"
        );
    }
}
