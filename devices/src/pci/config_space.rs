//! A type-0 PCI configuration space: the 256-byte header with per-dword writable masks, the
//! memory BARs with their sizing protocol, and the capability list.
//!
//! Accesses are 1, 2 or 4 bytes, naturally aligned; anything else (and anything beyond the end)
//! reads as all ones and is dropped on write. A guest write that changes a BAR's address is
//! reported back to the caller as a [`BarMove`], so the owner can follow it (ioeventfds, routes).

use super::bar::{BarKind, PciBar, FLAG_BITS, NUM_BARS};

/// Size of the configuration space reachable through configuration mechanism #1.
pub const CONFIG_SPACE_SIZE: usize = 256;

/// Register offsets of the type-0 header.
pub mod reg {
    /// Vendor id (16 bits).
    pub const VENDOR_ID: usize = 0x00;
    /// Device id (16 bits).
    pub const DEVICE_ID: usize = 0x02;
    /// Command register (16 bits).
    pub const COMMAND: usize = 0x04;
    /// Status register (16 bits).
    pub const STATUS: usize = 0x06;
    /// Revision id (8 bits), then prog-if, subclass, class.
    pub const REVISION_ID: usize = 0x08;
    /// First BAR.
    pub const BAR0: usize = 0x10;
    /// Subsystem vendor id (16 bits).
    pub const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
    /// Subsystem id (16 bits).
    pub const SUBSYSTEM_ID: usize = 0x2e;
    /// Capabilities pointer (8 bits).
    pub const CAPABILITIES: usize = 0x34;
    /// Interrupt line (8 bits), then the interrupt pin.
    pub const INTERRUPT_LINE: usize = 0x3c;
}

/// Command register: the device decodes its memory BARs.
pub const COMMAND_MEMORY_SPACE: u16 = 1 << 1;
/// Command bits a guest may change: I/O, memory, bus master, parity, SERR, INTx disable.
const COMMAND_WRITABLE: u32 = 0x0547;
/// Status register: the capabilities pointer is valid.
const STATUS_CAPABILITIES: u32 = 1 << 4;
/// Where the capability list starts (right after the standard header).
const FIRST_CAPABILITY: usize = 0x40;

/// Errors while building a configuration space.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigSpaceError {
    /// The BAR index is out of range, taken, or a 64-bit BAR would not fit.
    #[error("BAR slot {0} is out of range or taken")]
    BarSlot(usize),
    /// The BAR size is not a power of two of at least 4 KiB.
    #[error("Invalid BAR size {0:#x}")]
    BarSize(u64),
    /// The capability is shorter than its 2-byte header or longer than the space left.
    #[error("Capability of {0} bytes does not fit")]
    CapabilitySize(usize),
}

/// The identity of a function: ids and class code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciIds {
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Revision id.
    pub revision: u8,
    /// Class code: class << 16 | subclass << 8 | prog-if.
    pub class: u32,
    /// Subsystem vendor id.
    pub subsystem_vendor: u16,
    /// Subsystem id.
    pub subsystem: u16,
}

/// A guest write moved a BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarMove {
    /// BAR index (the low slot of a 64-bit BAR).
    pub bar: usize,
    /// Previous address.
    pub old: u64,
    /// New address.
    pub new: u64,
}

#[derive(Debug, Clone, Copy)]
enum BarSlot {
    Empty,
    Bar(PciBar),
    /// The high half of the 64-bit BAR in the previous slot.
    Upper,
}

/// A type-0 configuration space.
#[derive(Debug, Clone)]
pub struct PciConfigSpace {
    regs: [u32; CONFIG_SPACE_SIZE / 4],
    writable: [u32; CONFIG_SPACE_SIZE / 4],
    bars: [BarSlot; NUM_BARS],
    /// Offset of the last capability, whose next pointer a new one is linked from.
    last_capability: Option<usize>,
    next_free: usize,
}

impl PciConfigSpace {
    /// A header with `ids`, no BARs and no capabilities.
    pub fn new(ids: PciIds) -> Self {
        let mut cfg = Self {
            regs: [0; CONFIG_SPACE_SIZE / 4],
            writable: [0; CONFIG_SPACE_SIZE / 4],
            bars: [BarSlot::Empty; NUM_BARS],
            last_capability: None,
            next_free: FIRST_CAPABILITY,
        };
        cfg.regs[0] = u32::from(ids.vendor) | u32::from(ids.device) << 16;
        cfg.regs[2] = u32::from(ids.revision) | (ids.class & 0xff_ffff) << 8;
        cfg.regs[reg::SUBSYSTEM_VENDOR_ID / 4] =
            u32::from(ids.subsystem_vendor) | u32::from(ids.subsystem) << 16;
        cfg.writable[reg::COMMAND / 4] = COMMAND_WRITABLE;
        // Cache line size and latency timer are plain storage; so is the interrupt line.
        cfg.writable[0x0c / 4] = 0xffff;
        cfg.writable[reg::INTERRUPT_LINE / 4] = 0xff;
        cfg
    }

    /// Declares BAR `index`; a 64-bit BAR also takes `index + 1`. Its address starts at 0.
    pub fn add_bar(&mut self, index: usize, bar: PciBar) -> Result<(), ConfigSpaceError> {
        if !bar.is_valid() {
            return Err(ConfigSpaceError::BarSize(bar.size));
        }
        let end = index + bar.slots();
        let free = self
            .bars
            .get(index..end)
            .is_some_and(|s| s.iter().all(|b| matches!(b, BarSlot::Empty)));
        if !free {
            return Err(ConfigSpaceError::BarSlot(index));
        }
        self.bars[index] = BarSlot::Bar(bar);
        self.regs[reg::BAR0 / 4 + index] = bar.flags();
        if bar.kind == BarKind::Memory64 {
            self.bars[index + 1] = BarSlot::Upper;
        }
        Ok(())
    }

    /// The declared BARs, by index.
    pub fn bars(&self) -> impl Iterator<Item = (usize, PciBar)> + '_ {
        self.bars.iter().enumerate().filter_map(|(i, b)| match b {
            BarSlot::Bar(bar) => Some((i, *bar)),
            _ => None,
        })
    }

    /// The address BAR `index` is programmed with, if it is declared.
    pub fn bar_address(&self, index: usize) -> Option<u64> {
        let BarSlot::Bar(bar) = self.bars.get(index)? else {
            return None;
        };
        let low = u64::from(self.regs[reg::BAR0 / 4 + index] & !FLAG_BITS);
        let high = match bar.kind {
            BarKind::Memory32 => 0,
            BarKind::Memory64 => u64::from(self.regs[reg::BAR0 / 4 + index + 1]),
        };
        Some(high << 32 | low)
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.regs[reg::COMMAND / 4] as u16
    }

    /// Whether the device decodes its memory BARs.
    pub fn memory_enabled(&self) -> bool {
        self.command() & COMMAND_MEMORY_SPACE != 0
    }

    /// Appends a read-only capability. `bytes[0]` is the capability id; `bytes[1]` (the next
    /// pointer) is filled in here. Returns the capability's offset.
    pub fn add_capability(&mut self, bytes: &[u8]) -> Result<usize, ConfigSpaceError> {
        self.add_writable_capability(bytes, &[])
    }

    /// Appends a capability whose bits set in `writable` (indexed like `bytes`, missing bytes
    /// read-only) the guest may change. Returns the capability's offset.
    pub fn add_writable_capability(
        &mut self,
        bytes: &[u8],
        writable: &[u8],
    ) -> Result<usize, ConfigSpaceError> {
        let offset = self.next_free;
        if bytes.len() < 2 || offset + bytes.len() > CONFIG_SPACE_SIZE {
            return Err(ConfigSpaceError::CapabilitySize(bytes.len()));
        }
        for (i, &b) in bytes.iter().enumerate() {
            self.set_byte(offset + i, b);
        }
        for (i, &w) in writable.iter().take(bytes.len()).enumerate() {
            let (idx, shift) = ((offset + i) / 4, (offset + i) % 4 * 8);
            self.writable[idx] = self.writable[idx] & !(0xff << shift) | u32::from(w) << shift;
        }
        // The next pointer is ours to manage, never the guest's.
        self.set_byte(offset + 1, 0);
        match self.last_capability {
            None => self.set_byte(reg::CAPABILITIES, offset as u8),
            Some(last) => self.set_byte(last + 1, offset as u8),
        }
        self.regs[reg::COMMAND / 4] |= STATUS_CAPABILITIES << 16;
        self.last_capability = Some(offset);
        self.next_free = (offset + bytes.len()).next_multiple_of(4);
        Ok(offset)
    }

    /// Reads `data.len()` (1, 2 or 4) bytes at `offset`; bad accesses read as all ones.
    pub fn read(&self, offset: usize, data: &mut [u8]) {
        let Some((idx, shift)) = check_access(offset, data.len()) else {
            data.fill(0xff);
            return;
        };
        let value = (self.regs[idx] >> shift).to_le_bytes();
        data.copy_from_slice(&value[..data.len()]);
    }

    /// Reads an aligned dword: a convenience for owners and tests.
    pub fn read_u32(&self, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(offset, &mut b);
        u32::from_le_bytes(b)
    }

    /// Applies a guest write of 1, 2 or 4 bytes at `offset` through the writable masks. Returns
    /// the BAR move it caused, if any.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Option<BarMove> {
        let (idx, shift) = check_access(offset, data.len())?;
        let mut value = [0u8; 4];
        value[..data.len()].copy_from_slice(data);
        let access_mask = (u32::MAX >> (32 - 8 * data.len())) << shift;
        let value = u32::from_le_bytes(value) << shift;
        let bar_regs = reg::BAR0 / 4..reg::BAR0 / 4 + NUM_BARS;
        if bar_regs.contains(&idx) {
            let merged = self.regs[idx] & !access_mask | value & access_mask;
            return self.write_bar_register(idx - reg::BAR0 / 4, merged);
        }
        let mask = self.writable[idx] & access_mask;
        self.regs[idx] = self.regs[idx] & !mask | value & mask;
        None
    }

    /// Programs BAR `index` with `addr` (as firmware would). Returns the move, if any.
    pub fn set_bar_address(&mut self, index: usize, addr: u64) -> Option<BarMove> {
        let BarSlot::Bar(bar) = *self.bars.get(index)? else {
            return None;
        };
        let old = self.bar_address(index)?;
        self.write_bar_register(index, addr as u32);
        if bar.kind == BarKind::Memory64 {
            self.write_bar_register(index + 1, (addr >> 32) as u32);
        }
        let new = self.bar_address(index)?;
        (new != old).then_some(BarMove {
            bar: index,
            old,
            new,
        })
    }

    /// Stores `value` into BAR register `slot`, keeping flags and the size's zero bits.
    fn write_bar_register(&mut self, slot: usize, value: u32) -> Option<BarMove> {
        let (owner, bar, high) = match self.bars[slot] {
            BarSlot::Empty => return None,
            BarSlot::Bar(bar) => (slot, bar, false),
            BarSlot::Upper => match self.bars[slot.checked_sub(1)?] {
                BarSlot::Bar(bar) => (slot - 1, bar, true),
                _ => return None,
            },
        };
        let old = self.bar_address(owner)?;
        self.regs[reg::BAR0 / 4 + slot] = if high {
            value & bar.high_mask()
        } else {
            value & bar.low_mask() | bar.flags()
        };
        let new = self.bar_address(owner)?;
        (new != old).then_some(BarMove {
            bar: owner,
            old,
            new,
        })
    }

    fn set_byte(&mut self, offset: usize, value: u8) {
        let (idx, shift) = (offset / 4, offset % 4 * 8);
        self.regs[idx] = self.regs[idx] & !(0xff << shift) | u32::from(value) << shift;
    }
}

/// Validates a 1/2/4-byte naturally aligned access inside the space; returns (dword, bit shift).
fn check_access(offset: usize, len: usize) -> Option<(usize, usize)> {
    let ok = matches!(len, 1 | 2 | 4)
        && offset.is_multiple_of(len)
        && offset.checked_add(len)? <= CONFIG_SPACE_SIZE;
    ok.then_some((offset / 4, offset % 4 * 8))
}

#[cfg(test)]
mod tests;
