//! The vsock handler (`VsockHandler` with its muxer on a Unix socket of its own) over arbitrary
//! rx, tx and event rings and packets, with a host client connected or not, over several rounds
//! of `run(32)`: a hostile guest. Only "no panic, no hang" is checked, and that each round's
//! `run` loop ends within a bounded number of turns (a turn that did nothing asks for no other).
//!
//! Input: byte 0 = flags: queue size exponent (bits 0-2: 2..=256), EVENT_IDX (bit 3), an event
//! queue (bit 4), a host client that sends `CONNECT 52` (bit 5); byte 1 = rounds (1..=8); then
//! each round: a byte (bit 7: wrap the round in a polling watch; bits 0-5: how many bytes the
//! client writes, in units of 512), a u32 guest address and a byte length (0..64) of a patch;
//! the rest is the memory image copied to guest address 0. Rings: rx at 0x0 (descriptors),
//! 0x1000 (avail), 0x2000 (used); tx at 0x3000, 0x4000, 0x5000; event at 0x6000, 0x7000, 0x8000.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use dataplane::Handler;
use vm_memory::{Bytes, GuestAddress};

use super::common::{activated_queue, memory, run_round, Input, MEM_SIZE};
use crate::test_utils::queue::FakeInterrupt;
use crate::vsock::handler::{VsockHandler, VsockQueues, EVENT, RX, TX};
use crate::vsock::muxer::Muxer;

/// A socket path of this process's own.
fn socket_path() -> std::path::PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "osprey-fuzz-vsock-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// One input.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let size = 1u16 << (1 + (flags & 7));
    let event_idx = flags & 0x08 != 0;
    let rounds = usize::from(input.u8() % 8) + 1;
    let mut plan = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let b = input.u8();
        let addr = u64::from(input.u32()) % MEM_SIZE;
        let len = usize::from(input.u8() % 64);
        plan.push((b, addr, input.take(len).to_vec()));
    }
    let mem = memory();
    let image = input.take(MEM_SIZE as usize);
    mem.write_slice(image, GuestAddress(0)).expect("image fits");

    // The transport refuses DRIVER_OK for a queue that is not valid.
    let (Some(rx), Some(tx)) = (
        activated_queue(&mem, RX, size, event_idx),
        activated_queue(&mem, TX, size, event_idx),
    ) else {
        return;
    };
    let event = if flags & 0x10 != 0 {
        activated_queue(&mem, EVENT, size, event_idx)
    } else {
        None
    };
    let path = socket_path();
    let Ok(muxer) = Muxer::bind(3, &path) else {
        return;
    };
    let mut client = (flags & 0x20 != 0)
        .then(|| UnixStream::connect(&path).ok())
        .flatten();
    if let Some(c) = client.as_mut() {
        let _ = c.set_nonblocking(true);
        let _ = c.write_all(b"CONNECT 52\n");
    }
    let (back_tx, _back) = mpsc::channel();
    let mut h = VsockHandler::new(
        1,
        mem.clone(),
        FakeInterrupt::new(),
        VsockQueues { rx, tx, event },
        muxer,
        back_tx,
    );
    let chunk = [0x5au8; 512];
    for (b, addr, bytes) in plan {
        let _ = mem.write_slice(&bytes, GuestAddress(addr));
        if let Some(c) = client.as_mut() {
            for _ in 0..(b & 0x3f) {
                if c.write(&chunk).is_err() {
                    break;
                }
            }
        }
        // Each turn moves at most 32 packets each way; the guest's rings hold at most `size`
        // and the host's bytes are bounded by the guest's credit: the loop must end.
        run_round(&mut h, b & 0x80 != 0, 4 * usize::from(size) + 64);
    }
    Box::new(h).detach();
    let _ = std::fs::remove_file(&path);
}
