//! The KVM side of a snapshot: each vCPU's architectural state ([`VcpuState`]) and the VM's
//! in-kernel devices ([`VmState`]: irqchip, PIT, kvmclock), read from KVM and written back.
//!
//! Every piece is required. A KVM that refuses one of these ioctls (docs/snapshot.md lists what
//! this project's kvm_pvm hosts accept) fails the snapshot with the ioctl's name: a snapshot
//! missing a piece would restore a VM that is broken in ways nobody would trace back to it.

use kvm_bindings::{
    kvm_clock_data, kvm_cpuid_entry2, kvm_debugregs, kvm_fpu, kvm_irqchip, kvm_lapic_state,
    kvm_mp_state, kvm_pit_state2, kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs, kvm_xsave, CpuId,
    Msrs, KVM_CLOCK_REALTIME, KVM_CLOCK_TSC_STABLE, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER,
    KVM_IRQCHIP_PIC_SLAVE,
};
use kvm_ioctls::{Cap, Kvm, VcpuFd, VmFd};
use serde::{Deserialize, Serialize};

/// A KVM state ioctl failed (or did only part of its work).
#[derive(Debug, thiserror::Error)]
pub enum KvmStateError {
    /// `clock_realtime` asked for, but the host did not give kvmclock's real time at the
    /// snapshot (its clock source is not the TSC).
    #[error(
        "clock_realtime: the snapshot has no real-time stamp of kvmclock (the snapshotting \
         host's clock source is not the TSC); load it without clock_realtime"
    )]
    ClockRealtimeNotSaved,
    /// The ioctl failed.
    #[error("KVM refused {what}: {source}")]
    Ioctl {
        /// The ioctl, by its KVM name.
        what: &'static str,
        /// Its error.
        source: kvm_ioctls::Error,
    },
    /// `KVM_GET_MSRS`/`KVM_SET_MSRS` handled fewer MSRs than asked.
    #[error("{what} handled {done} of {asked} MSRs; first refused: {first_refused:#x}")]
    PartialMsrs {
        /// The ioctl.
        what: &'static str,
        /// How many it handled.
        done: usize,
        /// How many it was given.
        asked: usize,
        /// The index of the first one it did not handle.
        first_refused: u32,
    },
    /// The host's XSAVE area is larger than `KVM_GET_XSAVE`'s 4 KiB (AMX tiles): saving only
    /// the first 4 KiB would lose state.
    #[error("this host's XSAVE area is {size} bytes; snapshots save 4096 (KVM_GET_XSAVE)")]
    XsaveTooLarge {
        /// `KVM_CAP_XSAVE2`'s size.
        size: i32,
    },
    /// The saved state does not fit this KVM (a packing limit).
    #[error("saved {what} does not fit KVM's structure")]
    Packing {
        /// Which part.
        what: &'static str,
    },
}

fn ioctl(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> KvmStateError {
    move |source| KvmStateError::Ioctl { what, source }
}

/// The x87/SSE state of `KVM_GET_FPU` (kvm-bindings gives `kvm_fpu` no serde form).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FpuState {
    /// x87 registers ST0-7, 16 bytes each.
    pub fpr: Vec<[u8; 16]>,
    /// Control word.
    pub fcw: u16,
    /// Status word.
    pub fsw: u16,
    /// Abridged tag word.
    pub ftwx: u8,
    /// Last opcode.
    pub last_opcode: u16,
    /// Last instruction pointer.
    pub last_ip: u64,
    /// Last data pointer.
    pub last_dp: u64,
    /// XMM0-15.
    pub xmm: Vec<[u8; 16]>,
    /// SSE control and status.
    pub mxcsr: u32,
}

impl From<&kvm_fpu> for FpuState {
    fn from(f: &kvm_fpu) -> Self {
        FpuState {
            fpr: f.fpr.to_vec(),
            fcw: f.fcw,
            fsw: f.fsw,
            ftwx: f.ftwx,
            last_opcode: f.last_opcode,
            last_ip: f.last_ip,
            last_dp: f.last_dp,
            xmm: f.xmm.to_vec(),
            mxcsr: f.mxcsr,
        }
    }
}

impl FpuState {
    fn to_kvm(&self) -> Result<kvm_fpu, KvmStateError> {
        let mut f = kvm_fpu {
            fcw: self.fcw,
            fsw: self.fsw,
            ftwx: self.ftwx,
            last_opcode: self.last_opcode,
            last_ip: self.last_ip,
            last_dp: self.last_dp,
            mxcsr: self.mxcsr,
            ..Default::default()
        };
        if self.fpr.len() != f.fpr.len() || self.xmm.len() != f.xmm.len() {
            return Err(KvmStateError::Packing { what: "FPU state" });
        }
        f.fpr.copy_from_slice(&self.fpr);
        f.xmm.copy_from_slice(&self.xmm);
        Ok(f)
    }
}

/// One vCPU's state, everything `KVM_RUN` needs to carry on where it stopped.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct VcpuState {
    /// The vCPU's index (its APIC id).
    pub id: u8,
    /// The CPUID table it was given.
    pub cpuid: Vec<kvm_cpuid_entry2>,
    /// MSRs as `(index, value)`, the [`saveable_msrs`] list.
    pub msrs: Vec<(u32, u64)>,
    /// General registers.
    pub regs: kvm_regs,
    /// Segment, control and descriptor-table registers, pending interrupt bitmap.
    pub sregs: kvm_sregs,
    /// x87/SSE state.
    pub fpu: FpuState,
    /// The full XSAVE area (AVX and beyond), when the host has XSAVE.
    pub xsave: Option<kvm_xsave>,
    /// Extended control registers (XCR0), when the host has XSAVE.
    pub xcrs: Option<kvm_xcrs>,
    /// The local APIC's registers.
    pub lapic: kvm_lapic_state,
    /// Pending exceptions, interrupts, NMIs, SMIs.
    pub vcpu_events: kvm_vcpu_events,
    /// Running, halted, waiting for INIT/SIPI.
    pub mp_state: kvm_mp_state,
    /// DR0-3, DR6, DR7.
    pub debug_regs: kvm_debugregs,
    /// The guest TSC's frequency (kHz).
    pub tsc_khz: u32,
}

/// Whether vCPUs have XSAVE state to save (`KVM_CAP_XSAVE`); an error when it is larger than
/// the 4 KiB `KVM_GET_XSAVE` reads.
pub fn xsave_support(vm: &VmFd) -> Result<bool, KvmStateError> {
    if !vm.check_extension(Cap::Xsave) {
        return Ok(false);
    }
    let size = vm.check_extension_int(Cap::Xsave2);
    if size > 4096 {
        return Err(KvmStateError::XsaveTooLarge { size });
    }
    Ok(true)
}

/// The MSRs KVM lists (`KVM_GET_MSR_INDEX_LIST`) that it also lets this vCPU read: what a
/// snapshot saves. Some listed MSRs belong to features the host lacks and fail to read; they
/// are left out here, once, rather than failing every snapshot. Osprey's boot MSRs
/// (`msr::boot_msrs`, MTRR default type among them) are added: KVM does not list all of them.
pub fn saveable_msrs(kvm: &Kvm, vcpu: &VcpuFd) -> Result<Vec<u32>, KvmStateError> {
    let listed = kvm
        .get_msr_index_list()
        .map_err(ioctl("KVM_GET_MSR_INDEX_LIST"))?;
    let mut candidates = listed.as_slice().to_vec();
    for (index, _) in arch::msr::boot_msrs() {
        if !candidates.contains(&index) {
            candidates.push(index);
        }
    }
    let mut keep = Vec::with_capacity(candidates.len());
    for index in candidates {
        let mut one = packed_msrs(&[(index, 0)])?;
        if matches!(vcpu.get_msrs(&mut one), Ok(1)) {
            keep.push(index);
        }
    }
    Ok(keep)
}

fn packed_msrs(pairs: &[(u32, u64)]) -> Result<Msrs, KvmStateError> {
    arch::msr::to_kvm(pairs).map_err(|_| KvmStateError::Packing { what: "MSR list" })
}

/// Reads `msr_indices` in one `KVM_GET_MSRS`; all of them or an error.
fn get_msrs(vcpu: &VcpuFd, msr_indices: &[u32]) -> Result<Vec<(u32, u64)>, KvmStateError> {
    let pairs: Vec<(u32, u64)> = msr_indices.iter().map(|&i| (i, 0)).collect();
    let mut msrs = packed_msrs(&pairs)?;
    let done = vcpu.get_msrs(&mut msrs).map_err(ioctl("KVM_GET_MSRS"))?;
    if done != pairs.len() {
        return Err(KvmStateError::PartialMsrs {
            what: "KVM_GET_MSRS",
            done,
            asked: pairs.len(),
            first_refused: pairs[done].0,
        });
    }
    Ok(msrs.as_slice().iter().map(|e| (e.index, e.data)).collect())
}

impl VcpuState {
    /// Reads vCPU `id`'s state. The vCPU must not be in `KVM_RUN` (the VM is paused).
    pub fn save(
        id: u8,
        vcpu: &VcpuFd,
        msr_indices: &[u32],
        has_xsave: bool,
    ) -> Result<Self, KvmStateError> {
        // The order Firecracker and Cloud Hypervisor use: mp_state first (it may flush pending
        // events into the LAPIC), vcpu_events last among the event state.
        let mp_state = vcpu.get_mp_state().map_err(ioctl("KVM_GET_MP_STATE"))?;
        let regs = vcpu.get_regs().map_err(ioctl("KVM_GET_REGS"))?;
        let sregs = vcpu.get_sregs().map_err(ioctl("KVM_GET_SREGS"))?;
        let fpu = FpuState::from(&vcpu.get_fpu().map_err(ioctl("KVM_GET_FPU"))?);
        let (xsave, xcrs) = if has_xsave {
            (
                Some(vcpu.get_xsave().map_err(ioctl("KVM_GET_XSAVE"))?),
                Some(vcpu.get_xcrs().map_err(ioctl("KVM_GET_XCRS"))?),
            )
        } else {
            (None, None)
        };
        let debug_regs = vcpu.get_debug_regs().map_err(ioctl("KVM_GET_DEBUGREGS"))?;
        let lapic = vcpu.get_lapic().map_err(ioctl("KVM_GET_LAPIC"))?;
        let tsc_khz = vcpu.get_tsc_khz().map_err(ioctl("KVM_GET_TSC_KHZ"))?;
        let cpuid = vcpu
            .get_cpuid2(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
            .map_err(ioctl("KVM_GET_CPUID2"))?
            .as_slice()
            .to_vec();
        let msrs = get_msrs(vcpu, msr_indices)?;
        let vcpu_events = vcpu
            .get_vcpu_events()
            .map_err(ioctl("KVM_GET_VCPU_EVENTS"))?;
        Ok(VcpuState {
            id,
            cpuid,
            msrs,
            regs,
            sregs,
            fpu,
            xsave,
            xcrs,
            lapic,
            vcpu_events,
            mp_state,
            debug_regs,
            tsc_khz,
        })
    }

    /// Writes the state into a fresh vCPU (created, not yet run).
    pub fn restore(&self, vcpu: &VcpuFd) -> Result<(), KvmStateError> {
        let cpuid = CpuId::from_entries(&self.cpuid)
            .map_err(|_| KvmStateError::Packing { what: "CPUID" })?;
        vcpu.set_cpuid2(&cpuid).map_err(ioctl("KVM_SET_CPUID2"))?;
        // The TSC frequency before the MSRs, so the TSC value is read at the saved rate.
        let host_khz = vcpu.get_tsc_khz().map_err(ioctl("KVM_GET_TSC_KHZ"))?;
        if host_khz != self.tsc_khz {
            vcpu.set_tsc_khz(self.tsc_khz)
                .map_err(ioctl("KVM_SET_TSC_KHZ"))?;
        }
        vcpu.set_sregs(&self.sregs)
            .map_err(ioctl("KVM_SET_SREGS"))?;
        vcpu.set_regs(&self.regs).map_err(ioctl("KVM_SET_REGS"))?;
        vcpu.set_fpu(&self.fpu.to_kvm()?)
            .map_err(ioctl("KVM_SET_FPU"))?;
        if let Some(xsave) = &self.xsave {
            // SAFETY: `xsave` is a whole `kvm_xsave` (the 4 KiB legacy layout) read by
            // KVM_GET_XSAVE, not a KVM_GET_XSAVE2 area with a larger FAM that this call would
            // truncate.
            unsafe { vcpu.set_xsave(xsave) }.map_err(ioctl("KVM_SET_XSAVE"))?;
        }
        if let Some(xcrs) = &self.xcrs {
            vcpu.set_xcrs(xcrs).map_err(ioctl("KVM_SET_XCRS"))?;
        }
        vcpu.set_debug_regs(&self.debug_regs)
            .map_err(ioctl("KVM_SET_DEBUGREGS"))?;
        vcpu.set_lapic(&self.lapic)
            .map_err(ioctl("KVM_SET_LAPIC"))?;
        let msrs = packed_msrs(&self.msrs)?;
        let done = vcpu.set_msrs(&msrs).map_err(ioctl("KVM_SET_MSRS"))?;
        if done != self.msrs.len() {
            return Err(KvmStateError::PartialMsrs {
                what: "KVM_SET_MSRS",
                done,
                asked: self.msrs.len(),
                first_refused: self.msrs[done].0,
            });
        }
        vcpu.set_mp_state(self.mp_state)
            .map_err(ioctl("KVM_SET_MP_STATE"))?;
        vcpu.set_vcpu_events(&self.vcpu_events)
            .map_err(ioctl("KVM_SET_VCPU_EVENTS"))?;
        Ok(())
    }
}

/// The VM-wide in-kernel state: both PICs, the IOAPIC, the PIT and kvmclock.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VmState {
    /// The master 8259.
    pub pic_master: kvm_irqchip,
    /// The slave 8259.
    pub pic_slave: kvm_irqchip,
    /// The IOAPIC.
    pub ioapic: kvm_irqchip,
    /// The PIT (8254), channel states and flags.
    pub pit: kvm_pit_state2,
    /// kvmclock at the snapshot.
    pub clock: kvm_clock_data,
}

fn get_irqchip(vm: &VmFd, chip_id: u32, what: &'static str) -> Result<kvm_irqchip, KvmStateError> {
    let mut chip = kvm_irqchip {
        chip_id,
        ..Default::default()
    };
    vm.get_irqchip(&mut chip).map_err(ioctl(what))?;
    Ok(chip)
}

impl VmState {
    /// Reads the VM's state; its vCPUs paused.
    pub fn save(vm: &VmFd) -> Result<Self, KvmStateError> {
        let mut clock = vm.get_clock().map_err(ioctl("KVM_GET_CLOCK"))?;
        // Only `clock` and `flags` are inputs to KVM_SET_CLOCK; the stable-TSC flag is an
        // output KVM refuses as input.
        clock.flags &= !KVM_CLOCK_TSC_STABLE;
        Ok(VmState {
            pic_master: get_irqchip(vm, KVM_IRQCHIP_PIC_MASTER, "KVM_GET_IRQCHIP (PIC master)")?,
            pic_slave: get_irqchip(vm, KVM_IRQCHIP_PIC_SLAVE, "KVM_GET_IRQCHIP (PIC slave)")?,
            ioapic: get_irqchip(vm, KVM_IRQCHIP_IOAPIC, "KVM_GET_IRQCHIP (IOAPIC)")?,
            pit: vm.get_pit2().map_err(ioctl("KVM_GET_PIT2"))?,
            clock,
        })
    }

    /// Firecracker's `clock_realtime` rule for `PUT /snapshot/load`: with it, kvmclock is
    /// advanced by the real time since the snapshot (`KVM_CLOCK_REALTIME`, which the snapshot
    /// must have saved: else an error); without it, it goes on from the saved value (no flag).
    /// Osprey's `--restore` keeps the saved flags.
    pub fn set_clock_realtime(&mut self, realtime: bool) -> Result<(), KvmStateError> {
        if !realtime {
            self.clock.flags = 0;
        } else if self.clock.flags & KVM_CLOCK_REALTIME == 0 {
            return Err(KvmStateError::ClockRealtimeNotSaved);
        } else {
            self.clock.flags = KVM_CLOCK_REALTIME;
        }
        Ok(())
    }

    /// Writes the state into a fresh VM (irqchip and PIT created, no vCPU run yet).
    pub fn restore(&self, vm: &VmFd) -> Result<(), KvmStateError> {
        vm.set_irqchip(&self.pic_master)
            .map_err(ioctl("KVM_SET_IRQCHIP (PIC master)"))?;
        vm.set_irqchip(&self.pic_slave)
            .map_err(ioctl("KVM_SET_IRQCHIP (PIC slave)"))?;
        vm.set_irqchip(&self.ioapic)
            .map_err(ioctl("KVM_SET_IRQCHIP (IOAPIC)"))?;
        vm.set_pit2(&self.pit).map_err(ioctl("KVM_SET_PIT2"))?;
        vm.set_clock(&self.clock).map_err(ioctl("KVM_SET_CLOCK"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
