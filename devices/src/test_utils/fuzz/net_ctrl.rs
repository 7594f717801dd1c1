//! A multi-queue NIC's control queue handler (`CtrlHandler`) over an arbitrary control ring and
//! commands, over several rounds of `run(32)`: a hostile guest. Checked: no panic, no hang (each
//! round's `run` loop ends within a bounded number of turns), and the enabled pair count the
//! pairs share stays within 1..=the device's pairs whatever the guest asked for.
//!
//! Input: byte 0 = flags: queue size exponent (bits 0-2: 2..=256), EVENT_IDX (bit 3), the
//! device's pairs (bits 4-5: 1..=4; the taps are `SOCK_SEQPACKET` stand-ins, so steering them
//! fails and is only logged); byte 1 = rounds (1..=8); then each round: a u32 guest address and
//! a byte length (0..64) of a patch; the rest is the memory image copied to guest address 0.
//! The control ring: descriptors at 0x0, avail ring at 0x1000, used ring at 0x2000.

use dataplane::Handler;
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::common::{activated_queue, memory, run_until_idle, Input, MEM_SIZE};
use crate::net::mq::{CtrlHandler, PairGate};
use crate::net::tap::{frame_pair, Tap};
use crate::test_utils::queue::FakeInterrupt;

/// One input.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.u8();
    let size = 1u16 << (1 + (flags & 7));
    let event_idx = flags & 0x08 != 0;
    let pairs = u16::from((flags >> 4) & 3) + 1;
    let rounds = usize::from(input.u8() % 8) + 1;
    let mut plan = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let addr = u64::from(input.u32()) % MEM_SIZE;
        let len = usize::from(input.u8() % 64);
        plan.push((addr, input.take(len).to_vec()));
    }
    let mem = memory();
    let image = input.take(MEM_SIZE as usize);
    mem.write_slice(image, GuestAddress(0)).expect("image fits");

    // The transport refuses DRIVER_OK for a queue that is not valid.
    let Some(q) = activated_queue(&mem, 0, size, event_idx) else {
        return;
    };
    let mut taps = Vec::new();
    let mut kicks = Vec::new();
    for k in 0..pairs {
        let Ok((dev, _host)) = frame_pair() else {
            return;
        };
        taps.push(Tap::from_file(dev, &format!("fuzz{k}")));
        kicks.push(EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"));
    }
    let gate = PairGate::new(1);
    let mut h = CtrlHandler::new(
        1,
        q,
        &mem,
        FakeInterrupt::new(),
        gate.clone(),
        (taps, kicks),
    );
    for (addr, bytes) in plan {
        let _ = mem.write_slice(&bytes, GuestAddress(addr));
        // Each turn serves at most 32 commands and the ring holds at most `size`.
        run_until_idle(&mut h, 2 * usize::from(size) + 8, "");
        let enabled = gate.enabled();
        assert!(
            (1..=pairs).contains(&enabled),
            "{enabled} pairs enabled on a device of {pairs}"
        );
    }
    Box::new(h).detach();
}
