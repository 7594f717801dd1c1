//! The KVM side of a VM: the VM with its TSS, irqchip and PIT, guest memory registered as
//! memory slots, and each vCPU's boot state (CPUID, MSRs, LAPIC LINT pins, registers).

use kvm_bindings::{kvm_pit_config, kvm_userspace_memory_region, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};

use super::error::{kvm_err, VmError};
use crate::config::VmConfig;
use crate::host::KvmFlavor;
use arch::boot::BootEntry;
use arch::layout::ram_regions;
use arch::{cpuid, msr, regs};

/// Opens KVM, checks the vCPU count against it, and creates the VM with its TSS, guest memory
/// (zeroed, or mapped privately from a snapshot's `mem_file`), in-kernel irqchip and PIT.
pub(super) fn create_vm(
    config: &VmConfig,
    mem_file: Option<&std::fs::File>,
) -> Result<(Kvm, VmFd, GuestMemoryMmap), VmError> {
    let flavor = KvmFlavor::detect();
    log::info!("KVM: {}", flavor.describe());
    let kvm = Kvm::new().map_err(kvm_err("opening /dev/kvm"))?;
    let limits = crate::host::VcpuLimits {
        recommended: kvm.get_nr_vcpus(),
        max: kvm.get_max_vcpus(),
    };
    // Start-up's preflight checked the count and logged any warning; this guards the KVM the
    // VM is actually created on.
    limits.check(config.machine.vcpu_count)?;
    let vm = kvm.create_vm().map_err(kvm_err("creating the VM"))?;
    vm.set_tss_address(0xfffb_d000)
        .map_err(kvm_err("KVM_SET_TSS_ADDR"))?;
    let mem = create_memory(
        &vm,
        config.machine.mem_size_mib << 20,
        config.machine.mem_size_mib,
        mem_file,
    )?;
    crate::boot_timing::mark(crate::boot_timing::Step::MemorySetUp);
    vm.create_irq_chip()
        .map_err(kvm_err("creating the in-kernel irqchip"))?;
    let pit = kvm_pit_config {
        flags: KVM_PIT_SPEAKER_DUMMY,
        ..Default::default()
    };
    vm.create_pit2(pit).map_err(kvm_err("creating the PIT"))?;
    Ok((kvm, vm, mem))
}

/// Guest memory for `mem_bytes`, each RAM region a KVM memory slot: anonymous, or `mem_file`
/// mapped `MAP_PRIVATE` (pages load from the file on first touch; the guest's writes stay in
/// this process), its regions back to back in guest-physical order as a snapshot writes them.
fn create_memory(
    vm: &VmFd,
    mem_bytes: u64,
    mib: u64,
    mem_file: Option<&std::fs::File>,
) -> Result<GuestMemoryMmap, VmError> {
    let fail = |source: Box<dyn std::error::Error + Send + Sync>| VmError::Memory { mib, source };
    let mem = match mem_file {
        None => {
            GuestMemoryMmap::from_ranges(&ram_regions(mem_bytes)).map_err(|e| fail(e.into()))?
        }
        Some(file) => {
            let mut regions = Vec::new();
            let mut offset = 0u64;
            for (start, len) in ram_regions(mem_bytes) {
                let file = file.try_clone().map_err(|e| fail(e.into()))?;
                let mapping = vm_memory::mmap::MmapRegionBuilder::new(len)
                    .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
                    .with_mmap_flags(libc::MAP_PRIVATE | libc::MAP_NORESERVE)
                    .with_file_offset(vm_memory::FileOffset::new(file, offset))
                    .build()
                    .map_err(|e| fail(e.into()))?;
                regions.push(
                    vm_memory::GuestRegionMmap::new(mapping, start)
                        .ok_or_else(|| fail("region overflows".into()))?,
                );
                offset += len as u64;
            }
            GuestMemoryMmap::from_regions(regions).map_err(|e| fail(e.into()))?
        }
    };
    for (slot, region) in mem.iter().enumerate() {
        let host = region
            .get_host_address(MemoryRegionAddress(0))
            .map_err(|e| VmError::Memory {
                mib,
                source: e.into(),
            })?;
        let desc = kvm_userspace_memory_region {
            slot: slot as u32,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
            flags: 0,
        };
        // SAFETY: `host` is the start of a live mapping of `region.len()` bytes owned by `mem`,
        // which the returned `RunningVm` keeps alive for as long as the VM (and its vCPUs) run.
        unsafe { vm.set_user_memory_region(desc) }.map_err(kvm_err("registering guest memory"))?;
    }
    Ok(mem)
}

/// Sets vCPU `id`'s (of `count`) CPUID, MSRs, LAPIC and entry registers.
pub(super) fn configure_vcpu(
    fd: &VcpuFd,
    mem: &GuestMemoryMmap,
    supported: &kvm_bindings::CpuId,
    id: u8,
    count: u8,
    entry: BootEntry,
) -> Result<(), VmError> {
    fd.set_cpuid2(&cpuid::for_vcpu(supported, id, count))
        .map_err(kvm_err("KVM_SET_CPUID2"))?;
    let pairs = msr::boot_msrs();
    let msrs = msr::to_kvm(&pairs).map_err(|_| VmError::Kvm {
        what: "packing MSRs",
        source: kvm_ioctls::Error::new(libc::EINVAL),
    })?;
    let set = fd.set_msrs(&msrs).map_err(kvm_err("KVM_SET_MSRS"))?;
    if set != pairs.len() {
        log::warn!(
            "KVM accepted {set} of {} boot MSRs; first refused: {:#x}",
            pairs.len(),
            pairs[set].0
        );
    }
    let mut lapic = fd.get_lapic().map_err(kvm_err("KVM_GET_LAPIC"))?;
    set_lint(&mut lapic);
    fd.set_lapic(&lapic).map_err(kvm_err("KVM_SET_LAPIC"))?;
    let sregs = fd.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    fd.set_sregs(&regs::boot_sregs(mem, entry.mode, sregs)?)
        .map_err(kvm_err("KVM_SET_SREGS"))?;
    fd.set_regs(&regs::boot_regs(entry.mode, entry.entry))
        .map_err(kvm_err("KVM_SET_REGS"))?;
    fd.set_fpu(&regs::boot_fpu())
        .map_err(kvm_err("KVM_SET_FPU"))?;
    Ok(())
}

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

/// LINT0 delivers the PIC's interrupts (ExtINT), LINT1 delivers NMI, as firmware would set them.
fn set_lint(lapic: &mut kvm_bindings::kvm_lapic_state) {
    let mut update = |offset: usize, mode: u32| {
        let mut raw = [0u8; 4];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = lapic.regs[offset + i] as u8;
        }
        let v = u32::from_le_bytes(raw);
        let v = (v & !0x700) | (mode << 8);
        for (i, b) in v.to_le_bytes().iter().enumerate() {
            lapic.regs[offset + i] = *b as _;
        }
    };
    update(APIC_LVT0, APIC_MODE_EXTINT);
    update(APIC_LVT1, APIC_MODE_NMI);
}
