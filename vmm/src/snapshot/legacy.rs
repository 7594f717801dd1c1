//! The legacy devices' state a snapshot keeps: the PCI CONFIG_ADDRESS latch at 0xCF8 and COM1's
//! registers. Both are selectors or settings a guest writes once and relies on afterwards: a
//! guest paused between its 0xCF8 write and its 0xCFC access reached another register after a
//! restore (the test guest read all ones for a BAR and stopped), and a UART rebuilt at power-on
//! forgets the interrupts its driver enabled.

use std::sync::Mutex;

use devices::pci::PciConfigIo;
use devices::serial::{SerialConsole, SerialRegisters, SerialRestoreError};
use serde::{Deserialize, Serialize};

/// The legacy devices' registers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyState {
    /// The latched CONFIG_ADDRESS (0xCF8).
    pub pci_config_address: u32,
    /// COM1.
    pub serial: SerialRegisters,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LegacyState {
    /// Reads the state of a paused VM's devices.
    pub fn save(pci_config: &Mutex<PciConfigIo>, serial: &Mutex<SerialConsole>) -> Self {
        Self {
            pci_config_address: lock(pci_config).address(),
            serial: lock(serial).registers(),
        }
    }

    /// Puts the state back on freshly built devices, before any vCPU runs.
    pub fn apply(
        &self,
        pci_config: &Mutex<PciConfigIo>,
        serial: &Mutex<SerialConsole>,
    ) -> Result<(), SerialRestoreError> {
        lock(pci_config).set_address(self.pci_config_address);
        lock(serial).restore(&self.serial)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use devices::bus::BusDevice;
    use devices::pci::PciRoot;
    use vmm_sys_util::eventfd::EventFd;

    use super::*;

    fn devices() -> (Mutex<PciConfigIo>, Mutex<SerialConsole>, EventFd) {
        let root = PciRoot::new(0xc000_0000, 0x10_0000).expect("root");
        let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let serial = SerialConsole::new(irq.try_clone().expect("clone"), Box::new(std::io::sink()));
        (
            Mutex::new(PciConfigIo::new(Arc::new(Mutex::new(root)))),
            Mutex::new(serial),
            irq,
        )
    }

    #[test]
    fn a_guest_paused_between_0xcf8_and_0xcfc_reads_the_register_it_latched() {
        let (pci, serial, _irq) = devices();
        // The host bridge's ID register (bus 0, device 0, register 0), latched, not yet read;
        // COM1's transmit interrupt enabled.
        lock(&pci).write(0, &0x8000_0000u32.to_le_bytes());
        lock(&serial).write(1, &[0x02]);
        let saved = LegacyState::save(&pci, &serial);
        let bytes = postcard::to_allocvec(&saved).expect("encode");
        let back: LegacyState = postcard::from_bytes(&bytes).expect("decode");

        let (pci2, serial2, _irq2) = devices();
        back.apply(&pci2, &serial2).expect("apply");
        let mut id = [0u8; 4];
        lock(&pci2).read(4, &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x0d57_8086, "the host bridge's ID");
        let mut ier = [0u8];
        lock(&serial2).read(1, &mut ier);
        assert_eq!(ier[0], 0x02);
    }
}
