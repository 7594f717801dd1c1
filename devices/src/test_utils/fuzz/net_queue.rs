//! The virtio-net queue pair (`NetQueuePair`) over arbitrary rx and tx rings and frames, with a
//! `SOCK_SEQPACKET` pair as its tap (one message per frame, EAGAIN when full, as a tap's
//! queue), over several rounds of `run(32)`: a hostile guest and a host that sends frames of
//! any size. Checked: no panic, no hang (each round's `run` loop ends within a bounded number of
//! turns), and the device never hands the host a frame longer than a tap takes.
//!
//! Input: byte 0 = flags: queue size exponent (bits 0-2: 2..=256), EVENT_IDX (bit 3),
//! MRG_RXBUF (bit 4), a tx rate limit of 2 frames per 100 ms (bit 5), an rx one (bit 6), the host
//! leaves the device's frames unread, so its queue fills (bit 7); byte 1 = rounds (1..=8); then
//! each round: a byte (bit 7: wrap the round in a polling watch; bit 6: add 65,536 to the frame
//! length, past the largest frame a tap delivers; bits 0-4: how many frames the host sends), a
//! u16 frame length, a u32 guest address and a byte length (0..64) of a patch; the rest is the
//! memory image copied to guest address 0. Rings: rx at 0x0 (descriptors), 0x1000 (avail),
//! 0x2000 (used); tx at 0x3000, 0x4000, 0x5000.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::Arc;

use dataplane::rate_limit::{BucketConfig, LimitConfig, RateLimiter};
use dataplane::Handler;
use vm_memory::{Bytes, GuestAddress};

use super::common::{activated_queue, memory, run_round, Input, MEM_SIZE};
use crate::net::handler::NetQueuePair;
use crate::net::stats::NetStats;
use crate::net::tap::{frame_pair, Tap};
use crate::net::throttle::NetRateLimits;
use crate::net::MAX_FRAME_LEN;
use crate::test_utils::queue::FakeInterrupt;

/// Two frames per 100 ms.
fn slow() -> Arc<RateLimiter> {
    Arc::new(RateLimiter::new(LimitConfig {
        ops: Some(BucketConfig {
            size: 2,
            one_time_burst: 0,
            refill_time_ms: 100,
        }),
        bandwidth: None,
    }))
}

/// Reads every frame the device wrote; panics on one longer than a tap takes.
fn drain(host: &mut File, buf: &mut [u8]) {
    // The socket is non-blocking: a read on an empty queue answers EAGAIN.
    while let Ok(n) = host.read(buf) {
        assert!(
            n <= MAX_FRAME_LEN,
            "the device sent the host a frame of {n} bytes"
        );
        if n == 0 {
            break;
        }
    }
}

/// One input.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let size = 1u16 << (1 + (flags & 7));
    let event_idx = flags & 0x08 != 0;
    let mergeable = flags & 0x10 != 0;
    let limits = NetRateLimits {
        rx: if flags & 0x40 != 0 {
            slow()
        } else {
            Arc::default()
        },
        tx: if flags & 0x20 != 0 {
            slow()
        } else {
            Arc::default()
        },
    };
    let host_reads = flags & 0x80 == 0;
    let rounds = usize::from(input.u8() % 8) + 1;
    let mut plan = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let b = input.u8();
        let long = if b & 0x40 != 0 { 65_536 } else { 0 };
        let frame_len = usize::from(input.u16()) + long;
        let addr = u64::from(input.u32()) % MEM_SIZE;
        let len = usize::from(input.u8() % 64);
        plan.push((b, frame_len, addr, input.take(len).to_vec()));
    }
    let mem = memory();
    let image = input.take(MEM_SIZE as usize);
    mem.write_slice(image, GuestAddress(0)).expect("image fits");

    // The transport refuses DRIVER_OK for a queue that is not valid.
    let (Some(rx), Some(tx)) = (
        activated_queue(&mem, 0, size, event_idx),
        activated_queue(&mem, 1, size, event_idx),
    ) else {
        return;
    };
    let Ok((dev, mut host)) = frame_pair() else {
        return;
    };
    let mut p = NetQueuePair::new(
        1,
        (rx, tx),
        &mem,
        FakeInterrupt::new(),
        Tap::from_file(dev, "fuzz"),
        mergeable,
        &limits,
        Arc::new(NetStats::default()),
    );
    let mut buf = vec![0u8; 70_000];
    for (b, frame_len, addr, bytes) in plan {
        let _ = mem.write_slice(&bytes, GuestAddress(addr));
        let frame: Vec<u8> = (0..frame_len).map(|i| i as u8).collect();
        for _ in 0..(b & 0x1f) {
            // A full queue answers EAGAIN: the host stops sending.
            if host.write(&frame).is_err() {
                break;
            }
        }
        // Each turn moves at most 32 frames each way; the guest's rings hold at most `size`
        // chains and the host sent at most 31 frames: the loop must end.
        run_round(&mut p, b & 0x80 != 0, 4 * usize::from(size) + 64);
        if host_reads {
            drain(&mut host, &mut buf);
        }
    }
    drain(&mut host, &mut buf);
    Box::new(p).detach();
}
