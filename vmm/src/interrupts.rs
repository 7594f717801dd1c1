//! KVM interrupt plumbing for devices: the GSI routing table (the default PIC/IOAPIC routes plus
//! one MSI route per MSI-X vector) and ioeventfd registration on MMIO addresses. Devices reach
//! these through the `devices::pci` traits and never see a `VmFd`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use devices::pci::{IoEventRegistry, MsiMessage, MsiRouting, MsiVector};
use kvm_bindings::{
    kvm_irq_routing_entry, kvm_irq_routing_entry__bindgen_ty_1, kvm_irq_routing_irqchip,
    kvm_irq_routing_msi, KvmIrqRouting, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER,
    KVM_IRQCHIP_PIC_SLAVE, KVM_IRQ_ROUTING_IRQCHIP, KVM_IRQ_ROUTING_MSI,
};
use kvm_ioctls::{IoEventAddress, NoDatamatch, VmFd};
use vmm_sys_util::eventfd::EventFd;

/// GSIs below this are the IOAPIC's pins; MSI vectors get GSIs from here up.
pub const FIRST_MSI_GSI: u32 = 24;

fn irqchip(gsi: u32, chip: u32, pin: u32) -> kvm_irq_routing_entry {
    kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_IRQCHIP,
        u: kvm_irq_routing_entry__bindgen_ty_1 {
            irqchip: kvm_irq_routing_irqchip { irqchip: chip, pin },
        },
        ..Default::default()
    }
}

fn msi(gsi: u32, m: MsiMessage) -> kvm_irq_routing_entry {
    kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_MSI,
        u: kvm_irq_routing_entry__bindgen_ty_1 {
            msi: kvm_irq_routing_msi {
                address_lo: m.address as u32,
                address_hi: (m.address >> 32) as u32,
                data: m.data,
                ..Default::default()
            },
        },
        ..Default::default()
    }
}

/// KVM's default routes: GSIs 0-15 to the PICs and the IOAPIC, 16-23 to the IOAPIC.
pub fn default_routes() -> Vec<kvm_irq_routing_entry> {
    let mut v = Vec::with_capacity(40);
    for gsi in 0..FIRST_MSI_GSI {
        if gsi < 16 {
            let chip = if gsi < 8 {
                KVM_IRQCHIP_PIC_MASTER
            } else {
                KVM_IRQCHIP_PIC_SLAVE
            };
            v.push(irqchip(gsi, chip, gsi % 8));
        }
        v.push(irqchip(gsi, KVM_IRQCHIP_IOAPIC, gsi));
    }
    v
}

/// The VM's GSI routing table; installs MSI routes for devices.
pub struct GsiRouter {
    vm: Arc<VmFd>,
    msi: Mutex<BTreeMap<u32, MsiMessage>>,
    next_gsi: Mutex<u32>,
}

impl std::fmt::Debug for GsiRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GsiRouter")
    }
}

impl GsiRouter {
    /// A router for `vm` with no MSI routes yet.
    pub fn new(vm: Arc<VmFd>) -> Self {
        Self {
            vm,
            msi: Mutex::new(BTreeMap::new()),
            next_gsi: Mutex::new(FIRST_MSI_GSI),
        }
    }

    /// Allocates `n` MSI vectors: a GSI each and an irqfd bound to it.
    pub fn allocate_vectors(&self, n: usize) -> std::io::Result<Vec<MsiVector>> {
        let mut next = self.next_gsi.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let gsi = *next;
            let irqfd = EventFd::new(libc::EFD_NONBLOCK)?;
            self.vm
                .register_irqfd(&irqfd, gsi)
                .map_err(std::io::Error::from)?;
            *next += 1;
            out.push(MsiVector { gsi, irqfd });
        }
        Ok(out)
    }

    fn install(&self, msi_routes: &BTreeMap<u32, MsiMessage>) -> std::io::Result<()> {
        let mut entries = default_routes();
        entries.extend(msi_routes.iter().map(|(&gsi, &m)| msi(gsi, m)));
        let routing = KvmIrqRouting::from_entries(&entries)
            .map_err(|e| std::io::Error::other(format!("routing table: {e}")))?;
        self.vm
            .set_gsi_routing(&routing)
            .map_err(std::io::Error::from)
    }
}

impl MsiRouting for GsiRouter {
    fn set_msi_route(&self, gsi: u32, msg: Option<MsiMessage>) -> std::io::Result<()> {
        let mut routes = self.msi.lock().unwrap_or_else(|p| p.into_inner());
        let before = routes.get(&gsi).copied();
        match msg {
            Some(m) => routes.insert(gsi, m),
            None => routes.remove(&gsi),
        };
        if routes.get(&gsi).copied() == before {
            return Ok(());
        }
        self.install(&routes)
    }
}

/// Registers MMIO ioeventfds with KVM.
#[derive(Debug)]
pub struct KvmIoEvents(pub Arc<VmFd>);

impl IoEventRegistry for KvmIoEvents {
    fn register(&self, fd: &EventFd, addr: u64) -> std::io::Result<()> {
        self.0
            .register_ioevent(fd, &IoEventAddress::Mmio(addr), NoDatamatch)
            .map_err(std::io::Error::from)
    }

    fn unregister(&self, fd: &EventFd, addr: u64) -> std::io::Result<()> {
        self.0
            .unregister_ioevent(fd, &IoEventAddress::Mmio(addr), NoDatamatch)
            .map_err(std::io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_routes_match_kvms_table() {
        let r = default_routes();
        assert_eq!(r.len(), 16 * 2 + 8);
        let pins = |gsi: u32| -> Vec<(u32, u32)> {
            r.iter()
                .filter(|e| e.gsi == gsi)
                // SAFETY: every entry built by `irqchip` has the irqchip variant.
                .map(|e| unsafe { (e.u.irqchip.irqchip, e.u.irqchip.pin) })
                .collect()
        };
        assert_eq!(
            pins(4),
            vec![(KVM_IRQCHIP_PIC_MASTER, 4), (KVM_IRQCHIP_IOAPIC, 4)]
        );
        assert_eq!(
            pins(12),
            vec![(KVM_IRQCHIP_PIC_SLAVE, 4), (KVM_IRQCHIP_IOAPIC, 12)]
        );
        assert_eq!(pins(20), vec![(KVM_IRQCHIP_IOAPIC, 20)]);
    }

    #[test]
    fn msi_entry_splits_the_address() {
        let e = msi(
            30,
            MsiMessage {
                address: 0x1_fee0_1000,
                data: 0x41,
            },
        );
        assert_eq!((e.gsi, e.type_), (30, KVM_IRQ_ROUTING_MSI));
        // SAFETY: built with the msi variant just above.
        let m = unsafe { e.u.msi };
        assert_eq!((m.address_lo, m.address_hi, m.data), (0xfee0_1000, 1, 0x41));
    }
}
