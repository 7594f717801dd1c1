//! Holding a device still while a snapshot reads its state ([`Hold`], shared by the device, its
//! handlers on the iothread and the VMM): a held handler moves nothing between its backend (a
//! tap, host sockets) and guest memory, so the used indices the snapshot saves match the rings
//! in the memory it writes (a frame or packet delivered in between would leave the restored
//! ring ahead of the restored device: the guest's driver then sees its used index go backwards
//! and stops the device). A handler reads the hold at the start of each turn; the VMM makes a
//! turn boundary happen (a no-op run on the iothread) before it reads the rings, and nudges the
//! queues when it releases the hold, since the wakes of the held turns were spent. virtio-net's
//! queue pairs and the vsock handler use it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use dataplane::{IoThread, IoThreadError};

use super::pci::VirtioPciDevice;

/// Whether the handlers may move data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HoldState {
    /// Normal work.
    Open = 0,
    /// A snapshot is reading the device's state: its handlers do nothing until released.
    Held = 1,
}

/// A device's hold, shared by its device model, handlers and the VMM's handle.
#[derive(Debug, Clone, Default)]
pub struct Hold(Arc<AtomicU8>);

impl Hold {
    /// The state now.
    pub fn state(&self) -> HoldState {
        match self.0.load(Ordering::Acquire) {
            0 => HoldState::Open,
            _ => HoldState::Held,
        }
    }

    /// Sets the state. Holding takes effect at each handler's next turn: the caller waits for
    /// one (`IoThread::run_on_thread` runs between turns) before it reads the rings.
    pub fn set(&self, state: HoldState) {
        self.0.store(state as u8, Ordering::Release);
    }

    /// Whether the handlers must do nothing.
    pub fn is_held(&self) -> bool {
        self.state() == HoldState::Held
    }

    /// Holds the device whose handlers run on `iothread`: once this returns, a turn in
    /// progress when the hold was set has ended (the iothread ran a no-op between two turns),
    /// and the handlers move nothing until [`Hold::release`].
    pub fn hold_on(&self, iothread: &IoThread) -> Result<(), IoThreadError> {
        self.set(HoldState::Held);
        iothread.run_on_thread(Box::new(|| Ok(())))
    }

    /// Ends a hold and nudges the device's queues on `transport`: the wakes of the held turns
    /// were spent, so the handlers look again at what waited (frames in a tap, chains on a
    /// ring, an asked TRANSPORT_RESET).
    pub fn release(&self, transport: &Mutex<VirtioPciDevice>) {
        self.set(HoldState::Open);
        transport
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .nudge_queues();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_round_trips_and_is_shared() {
        let h = Hold::default();
        let other = h.clone();
        assert_eq!(h.state(), HoldState::Open);
        h.set(HoldState::Held);
        assert!(other.is_held());
        other.set(HoldState::Open);
        assert_eq!(h.state(), HoldState::Open);
    }
}
