//! Keeping a pause out of a ring-3 software exception's delivery (docs/snapshot.md, "A vCPU
//! on its way into a software exception"): whether a vCPU kicked out of `KVM_RUN` may be
//! between a guest `int3` (or `int n`) and its delivery, and how often it may run on to leave
//! that window before it parks anyway.
//!
//! `KVM_GET_VCPU_EVENTS` never reports a software exception KVM is about to deliver (the ABI
//! has no field for its instruction length): KVM counts on RIP still pointing at the `int3`,
//! so that the guest meets it again after a restore. On kvm_pvm a ring-3 `int3` traps into the
//! host with RIP already past it; a kick that lands between that trap and the delivery leaves a
//! vCPU whose saved state has RIP after the `int3`, no exception, and ring 3: restored, the
//! guest goes on as if the `int3` had never run. A snapshot cannot save the exception, so the
//! pause must not stop the vCPU there: when the vCPU is in ring 3 right after an `int3` (`CC`)
//! or `int n` (`CD nn`), it runs on until the next kick (the control thread kicks every 1 ms
//! until all vCPUs park), at most [`MAX_EXTRA_RUNS`] times. A false match (a ring-3 RIP after an
//! `int3` the guest already handled, or an instruction whose last bytes happen to be `CC`/`CD`)
//! only costs a pause one more kick.

use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// How many times a pausing vCPU runs on to leave the window before it parks regardless.
pub const MAX_EXTRA_RUNS: u32 = 16;

const INT3: u8 = 0xcc;
const INT_N: u8 = 0xcd;

/// Whether the two bytes before RIP (`None`: not readable) end a software exception
/// instruction: `int3` just before RIP, or `int n` (`CD nn`) two bytes before.
fn ends_software_exception(before: [Option<u8>; 2]) -> bool {
    matches!(before, [_, Some(INT3)] | [Some(INT_N), _])
}

/// The guest byte at linear address `gva` through the vCPU's page tables, when mapped and in
/// RAM.
fn guest_byte(fd: &VcpuFd, mem: &GuestMemoryMmap, gva: u64) -> Option<u8> {
    let t = fd.translate_gva(gva).ok()?;
    if t.valid == 0 {
        return None;
    }
    mem.read_obj::<u8>(GuestAddress(t.physical_address)).ok()
}

/// Whether the vCPU (out of `KVM_RUN`) may hold a software exception KVM has not delivered
/// yet: it is in ring 3 and the instruction before RIP is `int3` or `int n`. Any error reading
/// the state counts as no (the pause goes ahead, as before).
pub fn may_be_delivering(fd: &VcpuFd, mem: &GuestMemoryMmap) -> bool {
    let Ok(sregs) = fd.get_sregs() else {
        return false;
    };
    if sregs.cs.selector & 3 != 3 {
        return false;
    }
    let Ok(regs) = fd.get_regs() else {
        return false;
    };
    let rip = sregs.cs.base.wrapping_add(regs.rip);
    let before = [
        guest_byte(fd, mem, rip.wrapping_sub(2)),
        guest_byte(fd, mem, rip.wrapping_sub(1)),
    ];
    ends_software_exception(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int3_and_int_n_before_rip_match() {
        assert!(ends_software_exception([Some(0x90), Some(INT3)]));
        assert!(ends_software_exception([None, Some(INT3)]));
        assert!(ends_software_exception([Some(INT_N), Some(0x80)]));
    }

    #[test]
    fn anything_else_does_not() {
        assert!(!ends_software_exception([Some(0x0f), Some(0x0b)]));
        assert!(!ends_software_exception([Some(INT3), Some(0x90)]));
        assert!(!ends_software_exception([None, None]));
        assert!(!ends_software_exception([Some(0x90), None]));
    }
}
