//! The virtio-blk queue handler (`BlockQueueHandler`, Null engine) processing arbitrary avail
//! rings, descriptor tables and buffers over several rounds of `run(32)`.
//!
//! Input: byte 0 = queue size exponent (bits 0-2: 2..=256), EVENT_IDX (bit 3), read-only drive
//! (bit 4), hostile mode (bit 5); byte 1 = engine depth (1..=64); bytes 2..10 = capacity in
//! sectors; byte 10 = rounds (1..=8); then each round (see below); the rest is the memory image
//! copied to guest address 0 (descriptor table 0x0, avail ring 0x1000, used ring 0x2000).
//!
//! * Model mode (bit 5 clear): the target plays a well-behaved driver for the rings only. It
//!   zeroes the avail/used rings, moves every descriptor buffer out of the ring area (and drops
//!   INDIRECT) so the device cannot scribble on the rings, and each round publishes up to `size`
//!   outstanding heads from the input. After each round the used ring must hold only published
//!   heads, each completed at most once per publication, and (unless the device asked for a
//!   reset) every published chain must be complete.
//! * Hostile mode (bit 5 set): each round patches arbitrary guest memory (rings included), then
//!   runs. Only "no panic, no hang" is checked.
//!
//! In both modes each round's `run` loop must end (return false) within a bounded number of turns.

use std::sync::atomic::Ordering;

use dataplane::engine::EngineKind;
use dataplane::{Handler, Poll, ThreadTurn, Watch};
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::common::*;
use crate::test_utils::queue::{engine, QueueRig};

const F_INDIRECT: u16 = 4;

enum Round {
    /// Model mode: publish these heads; `poll` wraps the run in a polling watch.
    Publish { heads: Vec<u16>, poll: bool },
    /// Hostile mode: write `bytes` at `addr`.
    Patch {
        addr: u64,
        bytes: Vec<u8>,
        poll: bool,
    },
}

/// One input.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let size = 1u16 << (1 + (flags & 7));
    let hostile = flags & 0x20 != 0;
    let depth = u32::from(input.u8() % 64) + 1;
    let capacity_sectors = input.u64() & ((1 << 54) - 1);
    let rounds = usize::from(input.u8() % 8) + 1;
    let mut plan = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let b = input.u8();
        let poll = b & 0x80 != 0;
        if hostile {
            let addr = u64::from(input.u32()) % MEM_SIZE;
            let len = usize::from(input.u8() % 64);
            plan.push(Round::Patch {
                addr,
                bytes: input.take(len).to_vec(),
                poll,
            });
        } else {
            let k = usize::from(b & 0x7f).min(usize::from(size));
            let heads = (0..k).map(|_| input.u16() % size).collect();
            plan.push(Round::Publish { heads, poll });
        }
    }

    let mem = memory();
    let image = input.take(MEM_SIZE as usize);
    mem.write_slice(image, GuestAddress(0)).expect("image fits");
    if !hostile {
        sanitize(&mem, size);
    }

    // The transport refuses DRIVER_OK for a queue that is not valid.
    let Some(queue) = ready_queue(&mem, size, flags & 0x08 != 0) else {
        return;
    };

    let rig = QueueRig {
        limits: disk_limits(capacity_sectors, flags & 0x10 != 0),
        ..QueueRig::new(mem.clone())
    };
    let irq = rig.irq.clone();
    // The Null engine never touches its file.
    let file = std::fs::File::open("/dev/null").expect("/dev/null");
    let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let mut h = rig.handler(queue, kick, file, engine(EngineKind::Null, depth));
    h.attach(&ThreadTurn::default())
        .expect("attach the Null engine");

    let mut avail_idx: u16 = 0;
    let mut used_seen: u16 = 0;
    let mut outstanding: Vec<u16> = Vec::new();
    let ring = |i: u16| u64::from(i % size);
    for round in plan {
        let poll = match round {
            Round::Publish { heads, poll } => {
                let room = usize::from(size) - outstanding.len();
                for head in heads.into_iter().take(room) {
                    mem.write_obj(head, GuestAddress(AVAIL_RING + 4 + 2 * ring(avail_idx)))
                        .expect("avail entry");
                    avail_idx = avail_idx.wrapping_add(1);
                    outstanding.push(head);
                }
                mem.write_obj(avail_idx, GuestAddress(AVAIL_RING + 2))
                    .expect("avail idx");
                poll
            }
            Round::Patch { addr, bytes, poll } => {
                let _ = mem.write_slice(&bytes, GuestAddress(addr));
                poll
            }
        };
        if poll {
            h.watch(Watch::Polling, true);
            let _ = h.poll();
        }
        // Null completes inside commit: each turn makes progress, so the loop must end.
        let bound = 2 * usize::from(size) + 8;
        run_until_idle(&mut h, bound, "");
        if poll {
            let _ = h.watch(Watch::Polling, false);
            run_until_idle(&mut h, bound, " after poll_end");
        }
        if hostile {
            continue;
        }
        // Every new used entry is a published, not yet completed head.
        let used_idx: u16 = mem.read_obj(GuestAddress(USED_RING + 2)).expect("used idx");
        let new = used_idx.wrapping_sub(used_seen);
        assert!(
            usize::from(new) <= outstanding.len(),
            "{new} completions but only {} chains outstanding",
            outstanding.len()
        );
        for j in 0..new {
            let slot = USED_RING + 4 + 8 * ring(used_seen.wrapping_add(j));
            let id: u32 = mem.read_obj(GuestAddress(slot)).expect("used entry");
            let pos = outstanding
                .iter()
                .position(|&h| u32::from(h) == id)
                .unwrap_or_else(|| panic!("used entry {id} was not outstanding: completed twice?"));
            outstanding.swap_remove(pos);
        }
        used_seen = used_idx;
        if !irq.needs_reset.load(Ordering::Relaxed) {
            assert!(
                outstanding.is_empty(),
                "{} published chains never completed and no reset was requested",
                outstanding.len()
            );
        }
    }
    h.drain(&ThreadTurn::default());
    let _ = h.into_queue();
}

/// Model mode: zero the rings, keep every descriptor's buffer out of the ring area and drop
/// INDIRECT, so only the device's ring updates touch the rings.
fn sanitize(mem: &crate::virtio::GuestMemory, size: u16) {
    let zeros = [0u8; (RING_END - AVAIL_RING) as usize];
    mem.write_slice(&zeros, GuestAddress(AVAIL_RING))
        .expect("zero rings");
    for i in 0..u64::from(size) {
        let at = GuestAddress(DESC_TABLE + 16 * i);
        let mut addr: u64 = mem.read_obj(at).expect("desc");
        if addr < RING_END {
            addr += RING_END;
        }
        let flags: u16 = mem.read_obj(GuestAddress(at.0 + 12)).expect("desc");
        mem.write_obj(addr, at).expect("desc");
        mem.write_obj(flags & !F_INDIRECT, GuestAddress(at.0 + 12))
            .expect("desc");
    }
}
