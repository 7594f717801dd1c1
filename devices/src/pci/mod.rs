//! PCI: configuration space, BARs, capabilities, MSI-X and the root bus with its host bridge.
//!
//! Generic PCI only: nothing here knows virtio. The VMM supplies the two things PCI needs from
//! KVM through small traits: installing MSI routes ([`MsiRouting`]) and registering ioeventfds on
//! MMIO addresses that move when the guest reprograms a BAR ([`IoEventRegistry`]).

use vmm_sys_util::eventfd::EventFd;

pub mod bar;
pub mod config_io;
pub mod config_space;
pub mod mmio_window;
pub mod msix;
pub mod root;

#[cfg(test)]
pub(crate) mod mocks;

pub use bar::{BarKind, PciBar};
pub use config_io::{PciConfigIo, PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN};
pub use config_space::{BarMove, ConfigSpaceError, PciConfigSpace, PciIds};
pub use mmio_window::PciMmioWindow;
pub use msix::{MsixError, MsixInterrupts, MsixTable};
pub use root::{BarTarget, PciDevice, PciRoot, PciRootError};

/// An MSI message as the guest programs it into an MSI-X table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsiMessage {
    /// Message address (64-bit).
    pub address: u64,
    /// Message data.
    pub data: u32,
}

/// One MSI-X vector's interrupt: a KVM GSI with an irqfd bound to it by the VMM.
#[derive(Debug)]
pub struct MsiVector {
    /// The GSI the VMM allocated for this vector.
    pub gsi: u32,
    /// Writing 1 raises the interrupt routed to `gsi`.
    pub irqfd: EventFd,
}

/// Installs MSI routes (KVM_SET_GSI_ROUTING on the VMM side).
pub trait MsiRouting: Send + Sync {
    /// Routes `gsi` to `msg`, or removes its route with `None`.
    fn set_msi_route(&self, gsi: u32, msg: Option<MsiMessage>) -> std::io::Result<()>;
}

/// Registers eventfds signalled by guest writes to an MMIO address (KVM_IOEVENTFD), any length,
/// no data match.
pub trait IoEventRegistry: Send + Sync {
    /// Starts signalling `fd` on writes to `addr`.
    fn register(&self, fd: &EventFd, addr: u64) -> std::io::Result<()>;
    /// Stops signalling `fd` on writes to `addr`.
    fn unregister(&self, fd: &EventFd, addr: u64) -> std::io::Result<()>;
}
