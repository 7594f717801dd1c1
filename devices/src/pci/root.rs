//! The PCI root: bus 0 with a host bridge at 00:00.0 and up to 31 single-function devices, the
//! allocation of their BARs from the MMIO window, and the table that routes an MMIO address to
//! the BAR that currently decodes it.
//!
//! The root watches every configuration write that reaches a device: when a BAR moves it tells
//! the device ([`PciDevice::bar_moved`]) and updates its routes, so guest reprogramming needs no
//! bus re-registration. A BAR decodes only while its device's memory-space enable bit is set.

use std::sync::{Arc, Mutex, MutexGuard};

use super::bar::NUM_BARS;
use super::config_space::{reg, PciConfigSpace, PciIds};

/// Number of device slots on the bus (slot 0 is the host bridge).
pub const NUM_SLOTS: usize = 32;
/// Class code of a host bridge.
const CLASS_HOST_BRIDGE: u32 = 0x06_00_00;
/// Configuration registers whose writes may change a BAR's decoding: command and the BARs.
const DECODE_REGS: std::ops::Range<usize> = reg::COMMAND..reg::BAR0 + 4 * NUM_BARS;

/// A PCI function as the root sees it.
pub trait PciDevice: Send {
    /// The function's configuration space (the root reads BARs and the command register).
    fn config_space(&self) -> &PciConfigSpace;
    /// A guest configuration read of 1, 2 or 4 bytes at `offset`.
    fn config_read(&mut self, offset: usize, data: &mut [u8]) {
        self.config_space().read(offset, data);
    }
    /// A guest configuration write of 1, 2 or 4 bytes at `offset`.
    fn config_write(&mut self, offset: usize, data: &[u8]);
    /// A read of `data.len()` bytes at `offset` inside BAR `bar`.
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]);
    /// A write of `data` at `offset` inside BAR `bar`.
    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]);
    /// BAR `bar` now lives at `new` instead of `old` (0 before the first assignment).
    fn bar_moved(&mut self, _bar: usize, _old: u64, _new: u64) {}
}

/// Errors while building the PCI root.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PciRootError {
    /// The MMIO window is empty, wraps, starts at 0 or is not page aligned.
    #[error("Invalid PCI MMIO window {start:#x}+{len:#x}")]
    BadWindow {
        /// Window start.
        start: u64,
        /// Window length.
        len: u64,
    },
    /// All 31 device slots are taken.
    #[error("No free PCI slot")]
    NoFreeSlot,
    /// The device's BARs do not fit in what is left of the MMIO window.
    #[error("PCI MMIO window exhausted (BAR of {0:#x} bytes)")]
    WindowFull(u64),
}

/// The host bridge at 00:00.0: identity only.
#[derive(Debug)]
struct HostBridge(PciConfigSpace);

impl PciDevice for HostBridge {
    fn config_space(&self) -> &PciConfigSpace {
        &self.0
    }
    fn config_write(&mut self, offset: usize, data: &[u8]) {
        self.0.write(offset, data);
    }
    fn bar_read(&mut self, _bar: usize, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn bar_write(&mut self, _bar: usize, _offset: u64, _data: &[u8]) {}
}

/// Where an MMIO access lands: a device, one of its BARs and the offset inside it.
pub struct BarTarget {
    /// The device owning the BAR.
    pub device: Arc<Mutex<dyn PciDevice>>,
    /// BAR index.
    pub bar: usize,
    /// Offset from the start of the BAR.
    pub offset: u64,
}

impl std::fmt::Debug for BarTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BarTarget")
            .field("bar", &self.bar)
            .field("offset", &self.offset)
            .finish()
    }
}

struct Slot {
    device: Arc<Mutex<dyn PciDevice>>,
    /// Last known (address, size) of each declared BAR.
    bars: [Option<(u64, u64)>; NUM_BARS],
    decoding: bool,
}

/// Bus 0 of the PCI hierarchy.
pub struct PciRoot {
    slots: Vec<Option<Slot>>,
    window_start: u64,
    window_end: u64,
    next_free: u64,
}

impl std::fmt::Debug for PciRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used: Vec<usize> = (0..NUM_SLOTS)
            .filter(|&s| self.slots[s].is_some())
            .collect();
        f.debug_struct("PciRoot")
            .field("slots", &used)
            .field("window", &(self.window_start..self.window_end))
            .field("next_free", &self.next_free)
            .finish()
    }
}

impl PciRoot {
    /// A bus with only the host bridge; device BARs come from `[start, start + len)`.
    pub fn new(mmio_window_start: u64, mmio_window_len: u64) -> Result<Self, PciRootError> {
        let (start, len) = (mmio_window_start, mmio_window_len);
        let end = start
            .checked_add(len)
            .filter(|_| len > 0 && start != 0 && start.is_multiple_of(0x1000))
            .ok_or(PciRootError::BadWindow { start, len })?;
        let bridge = HostBridge(PciConfigSpace::new(PciIds {
            vendor: 0x8086,
            device: 0x0d57,
            revision: 0,
            class: CLASS_HOST_BRIDGE,
            subsystem_vendor: 0,
            subsystem: 0,
        }));
        let mut slots: Vec<Option<Slot>> = (0..NUM_SLOTS).map(|_| None).collect();
        slots[0] = Some(Slot {
            device: Arc::new(Mutex::new(bridge)),
            bars: [None; NUM_BARS],
            decoding: false,
        });
        Ok(Self {
            slots,
            window_start: start,
            window_end: end,
            next_free: start,
        })
    }

    /// The MMIO window as (start, length): register a [`super::PciMmioWindow`] there.
    pub fn mmio_window(&self) -> (u64, u64) {
        (self.window_start, self.window_end - self.window_start)
    }

    /// Plugs `device` into the first free slot, assigns its BARs from the MMIO window (naturally
    /// aligned) and tells it where they are. Returns the device number (slot).
    pub fn add_device(&mut self, device: Arc<Mutex<dyn PciDevice>>) -> Result<u8, PciRootError> {
        let slot = (1..NUM_SLOTS)
            .find(|&s| self.slots[s].is_none())
            .ok_or(PciRootError::NoFreeSlot)?;
        let mut dev = lock(&device);
        let mut next = self.next_free;
        let mut assigned = Vec::new();
        for (index, bar) in dev.config_space().bars() {
            let addr = next
                .checked_next_multiple_of(bar.size)
                .filter(|a| {
                    a.checked_add(bar.size)
                        .is_some_and(|e| e <= self.window_end)
                })
                .ok_or(PciRootError::WindowFull(bar.size))?;
            assigned.push((index, addr, bar.slots() == 2));
            next = addr + bar.size;
        }
        for (index, addr, wide) in assigned {
            // Program the BAR as firmware would, through ordinary config writes.
            let offset = reg::BAR0 + 4 * index;
            dev.config_write(offset, &(addr as u32).to_le_bytes());
            if wide {
                dev.config_write(offset + 4, &((addr >> 32) as u32).to_le_bytes());
            }
        }
        self.next_free = next;
        let mut entry = Slot {
            device: Arc::clone(&device),
            bars: [None; NUM_BARS],
            decoding: false,
        };
        for (index, bar) in dev.config_space().bars() {
            entry.bars[index] = Some((0, bar.size));
        }
        refresh(&mut entry, &mut *dev);
        drop(dev);
        self.slots[slot] = Some(entry);
        Ok(slot as u8)
    }

    /// A configuration read of function `func` of device `dev` on bus `bus`; absent functions
    /// read as all ones.
    pub fn config_read(&self, bus: u8, dev: u8, func: u8, offset: usize, data: &mut [u8]) {
        match self.slot(bus, dev, func) {
            Some(slot) => lock(&slot.device).config_read(offset, data),
            None => data.fill(0xff),
        }
    }

    /// A configuration write; writes to absent functions are dropped.
    pub fn config_write(&mut self, bus: u8, dev: u8, func: u8, offset: usize, data: &[u8]) {
        if self.slot(bus, dev, func).is_none() {
            return;
        }
        let Some(slot) = self.slots[usize::from(dev)].as_mut() else {
            return;
        };
        let device = Arc::clone(&slot.device);
        let mut device = lock(&device);
        device.config_write(offset, data);
        let end = offset.saturating_add(data.len());
        if offset < DECODE_REGS.end && end > DECODE_REGS.start {
            refresh(slot, &mut *device);
        }
    }

    /// The BAR decoding `[addr, addr + len)`, if any.
    pub fn route(&self, addr: u64, len: usize) -> Option<BarTarget> {
        let end = addr.checked_add(len as u64)?;
        self.slots
            .iter()
            .flatten()
            .filter(|s| s.decoding)
            .find_map(|s| {
                s.bars.iter().enumerate().find_map(|(index, bar)| {
                    let (base, size) = (*bar)?;
                    let inside = addr >= base && end <= base.checked_add(size)?;
                    inside.then(|| BarTarget {
                        device: Arc::clone(&s.device),
                        bar: index,
                        offset: addr - base,
                    })
                })
            })
    }

    fn slot(&self, bus: u8, dev: u8, func: u8) -> Option<&Slot> {
        if bus != 0 || func != 0 {
            return None;
        }
        self.slots.get(usize::from(dev))?.as_ref()
    }
}

/// Re-reads `device`'s BAR addresses and decode bit, telling it about every BAR that moved.
fn refresh(slot: &mut Slot, device: &mut dyn PciDevice) {
    slot.decoding = device.config_space().memory_enabled();
    for index in 0..NUM_BARS {
        let Some((old, size)) = slot.bars[index] else {
            continue;
        };
        let Some(new) = device.config_space().bar_address(index) else {
            continue;
        };
        if new != old {
            slot.bars[index] = Some((new, size));
            device.bar_moved(index, old, new);
        }
    }
}

/// Locks a device, recovering from poisoning: a vCPU must not panic because another did.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
