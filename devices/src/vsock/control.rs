//! What the VMM asks of the vsock device from outside its iothread, for snapshots
//! ([`VsockControl`], shared by the device, its handler and the VMM's handle): hold the device
//! still while a snapshot reads its rings and guest memory (no packet delivered to the guest,
//! no host socket read: [`crate::virtio::hold`]), and, after a restore, send the guest a
//! `VIRTIO_VSOCK_EVENT_TRANSPORT_RESET`. The handler reads both at the start of each turn; the
//! VMM makes a turn happen (a barrier on the iothread, a queue nudge) so the request takes
//! effect at once.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::virtio::hold::Hold;

/// The device's control block.
#[derive(Debug, Default)]
pub struct VsockControl {
    hold: Hold,
    reset_due: AtomicBool,
}

impl VsockControl {
    /// The hold a snapshot sets to keep the device still.
    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Asks the handler to drop every connection and send the guest a TRANSPORT_RESET event
    /// (at its next turn, as soon as the guest has an event buffer).
    pub fn request_transport_reset(&self) {
        self.reset_due.store(true, Ordering::Release);
    }

    /// Whether a TRANSPORT_RESET was asked for since the last call (the handler's side).
    pub fn take_transport_reset(&self) -> bool {
        self.reset_due.swap(false, Ordering::AcqRel)
    }

    /// Forgets an asked TRANSPORT_RESET (the driver reset the device: a new driver instance
    /// starts without connections anyway).
    pub fn cancel_transport_reset(&self) {
        self.reset_due.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_and_the_reset_request_round_trip() {
        use crate::virtio::hold::HoldState;
        let c = VsockControl::default();
        assert_eq!(c.hold().state(), HoldState::Open);
        c.hold().set(HoldState::Held);
        assert_eq!(c.hold().state(), HoldState::Held);
        c.hold().set(HoldState::Open);
        assert_eq!(c.hold().state(), HoldState::Open);
        assert!(!c.take_transport_reset());
        c.request_transport_reset();
        assert!(c.take_transport_reset());
        assert!(!c.take_transport_reset(), "taken once");
        c.request_transport_reset();
        c.cancel_transport_reset();
        assert!(!c.take_transport_reset());
    }
}
