//! Osprey's device models.
//!
//! This crate owns everything a guest touches through port I/O or MMIO: the [`bus`] that routes
//! accesses, the legacy devices a PC guest expects ([`serial`], [`i8042`], [`debug_exit`]), and
//! (later) PCI and virtio. It knows nothing of KVM: interrupts leave as `EventFd`s, and requests
//! to end the VM leave through the [`ExitRequester`] trait.

pub mod block;
pub mod bus;
pub mod debug_exit;
pub mod i8042;
pub mod net;
pub mod pci;
pub mod serial;
#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;
pub mod uds;
pub mod vhost_user;
pub mod virtio;
pub mod vsock;

/// Why a device asks the VMM to end the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitRequest {
    /// The guest asked for a reset (i8042 pulse, `reboot=k`): a clean stop.
    Reset,
    /// The guest wrote its exit status to the debug-exit port.
    DebugExit(u8),
}

/// Receives a device's request to end the VM. Implemented by the VMM.
pub trait ExitRequester: Send + Sync {
    /// Asks the VMM to stop the VM for `why`. Must not block.
    fn request_exit(&self, why: ExitRequest);
}
