//! Holding a NIC still while a snapshot reads its state ([`NetHold`], shared by the device, its
//! queue pairs and the VMM): a held pair reads no frame from its tap and writes nothing to guest
//! memory, so the used indices the snapshot saves match the rings in the memory it writes (a
//! frame delivered in between would leave the restored ring ahead of the restored device: the
//! guest's driver then sees its used index go backwards and stops the NIC). A pair reads the
//! hold at the start of each turn; the VMM makes a turn boundary happen (a no-op run on the
//! iothread) before it reads the rings, and nudges the queues when it releases the hold, since
//! the wakes of the held turns were spent.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Whether the pairs may move frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HoldState {
    /// Normal work.
    Open = 0,
    /// A snapshot is reading the NIC's state: its pairs do nothing until released.
    Held = 1,
}

/// A NIC's hold, shared by its device, pairs and the VMM's handle.
#[derive(Debug, Clone, Default)]
pub struct NetHold(Arc<AtomicU8>);

impl NetHold {
    /// The state now.
    pub fn state(&self) -> HoldState {
        match self.0.load(Ordering::Acquire) {
            0 => HoldState::Open,
            _ => HoldState::Held,
        }
    }

    /// Sets the state (holding takes effect at each pair's next turn).
    pub fn set(&self, state: HoldState) {
        self.0.store(state as u8, Ordering::Release);
    }

    /// Whether the pairs must do nothing.
    pub fn is_held(&self) -> bool {
        self.state() == HoldState::Held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_round_trips_and_is_shared() {
        let h = NetHold::default();
        let other = h.clone();
        assert_eq!(h.state(), HoldState::Open);
        h.set(HoldState::Held);
        assert!(other.is_held());
        other.set(HoldState::Open);
        assert_eq!(h.state(), HoldState::Open);
    }
}
