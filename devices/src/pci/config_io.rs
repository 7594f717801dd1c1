//! PCI configuration mechanism #1: the CONFIG_ADDRESS / CONFIG_DATA port pair at 0xCF8..=0xCFF,
//! as a [`BusDevice`] for the port-I/O bus.
//!
//! CONFIG_ADDRESS (dword at 0xCF8) latches enable (bit 31), bus, device, function and register;
//! CONFIG_DATA (0xCFC..=0xCFF) then reaches that register with byte, word or dword accesses at
//! the sub-offset. Only dword accesses touch CONFIG_ADDRESS (0xCF9 is the reset control port on a
//! PC, which we do not model); everything else reads as all ones and is dropped.

use std::sync::{Arc, Mutex};

use super::root::{lock, PciRoot};
use crate::bus::BusDevice;

/// First port of the mechanism #1 pair.
pub const PCI_CONFIG_IO_BASE: u64 = 0xcf8;
/// Ports the pair spans.
pub const PCI_CONFIG_IO_LEN: u64 = 8;

const ENABLE: u32 = 1 << 31;
/// Bits of CONFIG_ADDRESS that hold state: enable, bus, device, function, dword register.
const ADDRESS_BITS: u32 = ENABLE | 0x00ff_fffc;

/// The CONFIG_ADDRESS / CONFIG_DATA ports of a [`PciRoot`].
#[derive(Debug)]
pub struct PciConfigIo {
    root: Arc<Mutex<PciRoot>>,
    address: u32,
}

impl PciConfigIo {
    /// Ports for `root`; register at [`PCI_CONFIG_IO_BASE`] for [`PCI_CONFIG_IO_LEN`] ports.
    pub fn new(root: Arc<Mutex<PciRoot>>) -> Self {
        Self { root, address: 0 }
    }

    /// The latched CONFIG_ADDRESS. A snapshot keeps it: a guest paused between its write to
    /// 0xCF8 and its access to 0xCFC must reach the same register after a restore.
    pub fn address(&self) -> u32 {
        self.address
    }

    /// Latches a saved CONFIG_ADDRESS (its state bits only, as a guest write would).
    pub fn set_address(&mut self, address: u32) {
        self.address = address & ADDRESS_BITS;
    }

    /// The latched target as (bus, device, function, register + `sub`), if enabled and the
    /// `len`-byte access at `sub` stays inside the dword.
    fn target(&self, sub: u64, len: usize) -> Option<(u8, u8, u8, usize)> {
        let a = self.address;
        let fits =
            matches!(len, 1 | 2 | 4) && sub + len as u64 <= 4 && sub.is_multiple_of(len as u64);
        (a & ENABLE != 0 && fits).then(|| {
            (
                (a >> 16) as u8,
                ((a >> 11) & 0x1f) as u8,
                ((a >> 8) & 0x7) as u8,
                (a & 0xfc) as usize + sub as usize,
            )
        })
    }
}

impl BusDevice for PciConfigIo {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        match offset {
            0 if data.len() == 4 => data.copy_from_slice(&self.address.to_le_bytes()),
            4..=7 => match self.target(offset - 4, data.len()) {
                Some((bus, dev, func, reg)) => {
                    lock(&self.root).config_read(bus, dev, func, reg, data)
                }
                None => data.fill(0xff),
            },
            _ => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        match offset {
            0 => {
                if let Ok(bytes) = <[u8; 4]>::try_from(data) {
                    self.address = u32::from_le_bytes(bytes) & ADDRESS_BITS;
                }
            }
            4..=7 => {
                if let Some((bus, dev, func, reg)) = self.target(offset - 4, data.len()) {
                    lock(&self.root).config_write(bus, dev, func, reg, data);
                }
            }
            _ => {}
        }
    }
}
