//! The PCI MMIO window as a [`BusDevice`] for the MMIO bus: one registration covers every BAR,
//! and each access goes to whichever BAR decodes its address at that moment.
//!
//! The root's lock is held only to look the BAR up; the device's own lock covers the access, so a
//! slow register write (e.g. a virtio reset draining I/O) does not stall configuration accesses.

use std::sync::{Arc, Mutex};

use super::root::{lock, PciRoot};
use crate::bus::BusDevice;

/// The BAR-decoding MMIO window of a [`PciRoot`].
#[derive(Debug)]
pub struct PciMmioWindow {
    root: Arc<Mutex<PciRoot>>,
    base: u64,
}

impl PciMmioWindow {
    /// The window of `root`; register it at `root.mmio_window()` (start, length).
    pub fn new(root: Arc<Mutex<PciRoot>>) -> Self {
        let base = lock(&root).mmio_window().0;
        Self { root, base }
    }
}

impl BusDevice for PciMmioWindow {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let Some(addr) = self.base.checked_add(offset) else {
            data.fill(0xff);
            return;
        };
        let target = lock(&self.root).route(addr, data.len());
        match target {
            Some(t) => lock(&t.device).bar_read(t.bar, t.offset, data),
            None => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(addr) = self.base.checked_add(offset) else {
            return;
        };
        let target = lock(&self.root).route(addr, data.len());
        if let Some(t) = target {
            lock(&t.device).bar_write(t.bar, t.offset, data);
        }
    }
}
