//! Base address registers: what a BAR is (kind, size, flags) and how its register bits encode an
//! address, a size mask during sizing, and the read-only type flags.
//!
//! Only memory BARs exist here (Osprey has no I/O BARs). A 64-bit BAR occupies two consecutive
//! register slots: the low dword carries the flags, the high dword the upper address bits.

/// Number of BAR slots in a type-0 header.
pub const NUM_BARS: usize = 6;
/// Smallest BAR size we hand out: one page, so a BAR never shares a page with another.
pub const MIN_BAR_SIZE: u64 = 0x1000;

/// Flag bits 2:1 = 0b10: the BAR is 64 bits wide.
const FLAG_MEM64: u32 = 0b100;
/// Flag bit 3: the region is prefetchable.
const FLAG_PREFETCHABLE: u32 = 0b1000;
/// Low dword bits that are flags rather than address.
pub(crate) const FLAG_BITS: u32 = 0xf;

/// The address width of a memory BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// A 32-bit memory BAR: one slot, below 4 GiB.
    Memory32,
    /// A 64-bit memory BAR: two slots (this one and the next).
    Memory64,
}

/// A memory BAR as the device declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciBar {
    /// Address width.
    pub kind: BarKind,
    /// Size in bytes: a power of two, at least [`MIN_BAR_SIZE`].
    pub size: u64,
    /// Whether the region is prefetchable (no read side effects).
    pub prefetchable: bool,
}

impl PciBar {
    /// A 32-bit, non-prefetchable memory BAR of `size` bytes.
    pub fn memory32(size: u64) -> Self {
        Self {
            kind: BarKind::Memory32,
            size,
            prefetchable: false,
        }
    }

    /// A 64-bit, non-prefetchable memory BAR of `size` bytes.
    pub fn memory64(size: u64) -> Self {
        Self {
            kind: BarKind::Memory64,
            size,
            prefetchable: false,
        }
    }

    /// Whether `size` is acceptable: a power of two, at least one page, and within the
    /// addressable range of the kind.
    pub fn is_valid(&self) -> bool {
        let max = match self.kind {
            BarKind::Memory32 => 1 << 31,
            BarKind::Memory64 => 1 << 63,
        };
        self.size.is_power_of_two() && self.size >= MIN_BAR_SIZE && self.size <= max
    }

    /// Number of register slots the BAR takes.
    pub fn slots(&self) -> usize {
        match self.kind {
            BarKind::Memory32 => 1,
            BarKind::Memory64 => 2,
        }
    }

    /// The read-only flag bits of the low dword.
    pub(crate) fn flags(&self) -> u32 {
        let width = match self.kind {
            BarKind::Memory32 => 0,
            BarKind::Memory64 => FLAG_MEM64,
        };
        let prefetch = if self.prefetchable {
            FLAG_PREFETCHABLE
        } else {
            0
        };
        width | prefetch
    }

    /// Writable address bits of the low dword (sizing reads these back after all ones).
    pub(crate) fn low_mask(&self) -> u32 {
        // Truncation intended: the low 32 bits of the 64-bit address mask.
        (!(self.size - 1) as u32) & !FLAG_BITS
    }

    /// Writable address bits of the high dword of a 64-bit BAR.
    pub(crate) fn high_mask(&self) -> u32 {
        (!(self.size - 1) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_flags() {
        let bar = PciBar::memory64(0x8000);
        assert!(bar.is_valid());
        assert_eq!(bar.low_mask(), 0xffff_8000);
        assert_eq!(bar.high_mask(), 0xffff_ffff);
        assert_eq!(bar.flags(), 0b100);
        let big = PciBar::memory64(1 << 33);
        assert_eq!(big.low_mask(), 0);
        assert_eq!(big.high_mask(), 0xffff_fffe);
        assert!(!PciBar::memory32(0x800).is_valid());
        assert!(!PciBar::memory32(0x3000).is_valid());
        assert!(!PciBar::memory32(1 << 32).is_valid());
    }
}
