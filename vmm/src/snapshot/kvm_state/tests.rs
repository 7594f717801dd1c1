//! The probe of this host's KVM state ioctls (docs/snapshot.md records its findings) and the
//! round trip of a vCPU's and a VM's state into a second VM.
//!
//! `cargo test -p vmm --lib snapshot::kvm_state -- --nocapture` prints the probe's table.

use kvm_bindings::{kvm_pit_config, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};

use super::*;

/// A VM as Osprey creates one (TSS, irqchip, PIT) with one vCPU given its CPUID.
fn vm_with_vcpu(kvm: &Kvm) -> (VmFd, VcpuFd) {
    let vm = kvm.create_vm().expect("create a VM");
    vm.set_tss_address(0xfffb_d000).expect("TSS");
    vm.create_irq_chip().expect("irqchip");
    let pit = kvm_pit_config {
        flags: KVM_PIT_SPEAKER_DUMMY,
        ..Default::default()
    };
    vm.create_pit2(pit).expect("PIT");
    let vcpu = vm.create_vcpu(0).expect("vCPU");
    let cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .expect("supported CPUID");
    vcpu.set_cpuid2(&cpuid).expect("CPUID");
    (vm, vcpu)
}

/// Each ioctl read then written back unchanged: `Ok` or KVM's error.
fn probe(kvm: &Kvm, vm: &VmFd, vcpu: &VcpuFd) -> Vec<(&'static str, Result<String, String>)> {
    fn row<T>(
        name: &'static str,
        get: impl FnOnce() -> Result<T, kvm_ioctls::Error>,
        set: impl FnOnce(&T) -> Result<(), kvm_ioctls::Error>,
    ) -> (&'static str, Result<String, String>) {
        let outcome = match get() {
            Err(e) => Err(format!("GET: {e}")),
            Ok(v) => set(&v)
                .map(|()| "GET+SET".to_string())
                .map_err(|e| format!("GET ok, SET: {e}")),
        };
        (name, outcome)
    }
    let mut rows = vec![
        row("regs", || vcpu.get_regs(), |v| vcpu.set_regs(v)),
        row("sregs", || vcpu.get_sregs(), |v| vcpu.set_sregs(v)),
        row("fpu", || vcpu.get_fpu(), |v| vcpu.set_fpu(v)),
        row("lapic", || vcpu.get_lapic(), |v| vcpu.set_lapic(v)),
        row(
            "xsave",
            || vcpu.get_xsave(),
            // SAFETY: `v` is the whole legacy `kvm_xsave` KVM_GET_XSAVE just filled.
            |v| unsafe { vcpu.set_xsave(v) },
        ),
        row("xcrs", || vcpu.get_xcrs(), |v| vcpu.set_xcrs(v)),
        row(
            "vcpu_events",
            || vcpu.get_vcpu_events(),
            |v| vcpu.set_vcpu_events(v),
        ),
        row(
            "mp_state",
            || vcpu.get_mp_state(),
            |v| vcpu.set_mp_state(*v),
        ),
        row(
            "debugregs",
            || vcpu.get_debug_regs(),
            |v| vcpu.set_debug_regs(v),
        ),
        row("tsc_khz", || vcpu.get_tsc_khz(), |v| vcpu.set_tsc_khz(*v)),
        row(
            "clock",
            || vm.get_clock(),
            |v| {
                let mut c = *v;
                c.flags &= !KVM_CLOCK_TSC_STABLE;
                vm.set_clock(&c)
            },
        ),
        row("pit2", || vm.get_pit2(), |v| vm.set_pit2(v)),
    ];
    for (chip_id, name) in [
        (KVM_IRQCHIP_PIC_MASTER, "irqchip PIC master"),
        (KVM_IRQCHIP_PIC_SLAVE, "irqchip PIC slave"),
        (KVM_IRQCHIP_IOAPIC, "irqchip IOAPIC"),
    ] {
        rows.push(row(
            name,
            || {
                let mut c = kvm_irqchip {
                    chip_id,
                    ..Default::default()
                };
                vm.get_irqchip(&mut c).map(|()| c)
            },
            |c| vm.set_irqchip(c),
        ));
    }
    let xsave2 = vm.check_extension_int(kvm_ioctls::Cap::Xsave2);
    rows.push(("KVM_CAP_XSAVE2 size", Ok(format!("{xsave2} bytes"))));
    let listed = kvm.get_msr_index_list().map(|l| l.as_slice().len());
    let saveable = saveable_msrs(kvm, vcpu);
    rows.push((
        "msrs",
        match (listed, saveable) {
            (Ok(n), Ok(keep)) => {
                let set = get_msrs(vcpu, &keep).and_then(|pairs| {
                    let m = packed_msrs(&pairs)?;
                    vcpu.set_msrs(&m).map_err(ioctl("KVM_SET_MSRS"))
                });
                match set {
                    Ok(done) => Ok(format!(
                        "{n} listed, {} readable, {done} written back: {:x?}",
                        keep.len(),
                        keep
                    )),
                    Err(e) => Err(format!("{n} listed, {} readable: {e}", keep.len())),
                }
            }
            (l, s) => Err(format!("{l:?} {s:?}")),
        },
    ));
    rows
}

#[test]
fn probe_kvm_state_ioctls() {
    let kvm = Kvm::new().expect("open /dev/kvm");
    let (vm, vcpu) = vm_with_vcpu(&kvm);
    let rows = probe(&kvm, &vm, &vcpu);
    println!(
        "KVM state ioctls on this host ({}):",
        crate::host::KvmFlavor::detect().describe()
    );
    for (name, outcome) in &rows {
        match outcome {
            Ok(what) => println!("  {name:<20} ok: {what}"),
            Err(e) => println!("  {name:<20} REFUSED: {e}"),
        }
    }
    let refused: Vec<_> = rows.iter().filter(|(_, o)| o.is_err()).collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
}

#[test]
fn vcpu_and_vm_state_round_trip_into_a_second_vm() {
    let kvm = Kvm::new().expect("open /dev/kvm");
    let (vm, vcpu) = vm_with_vcpu(&kvm);
    let has_xsave = xsave_support(&vm).expect("XSAVE fits");
    let msrs = saveable_msrs(&kvm, &vcpu).expect("MSR list");
    let mut regs = vcpu.get_regs().expect("regs");
    regs.rax = 0x1234_5678;
    regs.rip = 0x10_0000;
    vcpu.set_regs(&regs).expect("regs");
    let saved = VcpuState::save(0, &vcpu, &msrs, has_xsave).expect("save the vCPU");
    let saved_vm = VmState::save(&vm).expect("save the VM");

    let (vm2, vcpu2) = vm_with_vcpu(&kvm);
    saved_vm.restore(&vm2).expect("restore the VM");
    saved.restore(&vcpu2).expect("restore the vCPU");
    let again = VcpuState::save(0, &vcpu2, &msrs, has_xsave).expect("save the copy");
    assert_eq!(again.regs.rax, 0x1234_5678);
    assert_eq!(again.regs.rip, 0x10_0000);
    assert_eq!(again.sregs.cr0, saved.sregs.cr0);
    assert_eq!(again.fpu, saved.fpu);
    assert_eq!(again.msrs.len(), saved.msrs.len());
}

#[test]
fn a_refused_msr_fails_the_restore_naming_it() {
    let kvm = Kvm::new().expect("open /dev/kvm");
    let (vm, vcpu) = vm_with_vcpu(&kvm);
    let has_xsave = xsave_support(&vm).expect("XSAVE fits");
    let mut saved = VcpuState::save(0, &vcpu, &[], has_xsave).expect("save");
    // An index no CPU has.
    saved.msrs = vec![(0xdead_0000, 1)];
    let err = saved.restore(&vcpu).expect_err("a bogus MSR must fail");
    assert!(err.to_string().contains("0xdead0000"), "{err}");
}
