//! Putting a virtio device on the PCI bus: its MSI-X vectors (one per queue and one for
//! configuration changes), its virtio-pci function over guest memory, KVM's MSI routes and
//! ioeventfds, and the next free slot. Every device kind (drives, NICs, vsock) goes through
//! [`PciWiring::attach`].

use std::sync::{Arc, Mutex};

use devices::pci::root::{PciRoot, PciRootError};
use devices::virtio::pci::{VirtioPciDevice, VirtioPciError};
use devices::virtio::{GuestMemory, VirtioDevice};

use crate::interrupts::{GsiRouter, KvmIoEvents};

/// Why a virtio device could not be put on the bus.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// Its MSI-X vectors could not be routed.
    #[error("MSI-X vectors: {0}")]
    Vectors(#[source] std::io::Error),
    /// Its virtio-pci function could not be built.
    #[error("PCI: {0}")]
    VirtioPci(#[source] VirtioPciError),
    /// No PCI slot took it.
    #[error("PCI: {0}")]
    Slot(#[source] PciRootError),
}

/// A device on the bus.
#[derive(Debug)]
pub struct Attached {
    /// Its PCI slot.
    pub slot: u8,
    /// Its virtio-pci function (a snapshot saves and restores its state).
    pub transport: Arc<Mutex<VirtioPciDevice>>,
}

/// What a virtio-pci device is wired to: the root bus, MSI routes, ioeventfds, guest memory.
#[derive(Debug)]
pub struct PciWiring<'a> {
    pub(crate) pci: Arc<Mutex<PciRoot>>,
    pub(crate) router: Arc<GsiRouter>,
    pub(crate) ioevents: Arc<KvmIoEvents>,
    pub(crate) mem: &'a GuestMemory,
}

impl PciWiring<'_> {
    /// `device` as a virtio-pci function on the next free slot.
    pub fn attach(&self, device: Box<dyn VirtioDevice>) -> Result<Attached, AttachError> {
        let vectors = self
            .router
            .allocate_vectors(device.queue_max_sizes().len() + 1)
            .map_err(AttachError::Vectors)?;
        let dev = VirtioPciDevice::new(
            device,
            self.mem.clone(),
            vectors,
            self.router.clone(),
            self.ioevents.clone(),
        )
        .map_err(AttachError::VirtioPci)?;
        let transport = Arc::new(Mutex::new(dev));
        let slot = self
            .pci
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add_device(transport.clone())
            .map_err(AttachError::Slot)?;
        Ok(Attached { slot, transport })
    }
}
