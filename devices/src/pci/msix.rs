//! MSI-X: the capability, the vector table and the pending-bit array, and interrupt delivery.
//!
//! The state splits in two. [`MsixTable`] holds what the guest programs (entries, enable and
//! function-mask bits) and is only touched from guest config/MMIO accesses, under its owner's
//! lock; it installs MSI routes as entries are unmasked. [`MsixInterrupts`] is the hot half,
//! shared through an `Arc`: per-vector atomic masked/pending bits and the irqfd, so
//! [`MsixInterrupts::trigger`] takes no lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::config_space::{ConfigSpaceError, PciConfigSpace};
use super::{MsiMessage, MsiRouting, MsiVector};

/// Capability id of MSI-X.
pub const MSIX_CAP_ID: u8 = 0x11;
/// Bytes per table entry.
pub const MSIX_ENTRY_SIZE: u64 = 16;
/// The most vectors a table may have.
pub const MSIX_MAX_VECTORS: usize = 2048;
/// Message control: MSI-X enable.
const CTRL_ENABLE: u16 = 1 << 15;
/// Message control: function mask.
const CTRL_FUNCTION_MASK: u16 = 1 << 14;
/// Vector control: the entry is masked.
const ENTRY_MASKED: u32 = 1;

/// Errors while setting up MSI-X.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MsixError {
    /// Zero vectors, or more than [`MSIX_MAX_VECTORS`].
    #[error("Invalid MSI-X vector count {0}")]
    VectorCount(usize),
    /// The capability did not fit in configuration space.
    #[error("Adding the MSI-X capability failed: {0}")]
    Capability(#[from] ConfigSpaceError),
}

#[derive(Debug)]
struct VectorSlot {
    gsi: u32,
    irqfd: vmm_sys_util::eventfd::EventFd,
    masked: AtomicBool,
    pending: AtomicBool,
}

/// The lock-free delivery half of MSI-X, shared with whoever raises interrupts.
#[derive(Debug)]
pub struct MsixInterrupts {
    enabled: AtomicBool,
    function_masked: AtomicBool,
    warned_disabled: AtomicBool,
    vectors: Box<[VectorSlot]>,
}

impl MsixInterrupts {
    /// Raises `vector`: delivers it through its irqfd, or records it as pending while it or the
    /// function is masked. Does nothing while MSI-X is disabled or for unknown vectors.
    pub fn trigger(&self, vector: u16) -> std::io::Result<()> {
        let Some(slot) = self.vectors.get(usize::from(vector)) else {
            return Ok(());
        };
        if !self.enabled.load(Ordering::SeqCst) {
            if !self.warned_disabled.swap(true, Ordering::Relaxed) {
                log::warn!("MSI-X vector {vector} raised while MSI-X is disabled; dropped");
            }
            return Ok(());
        }
        if !self.is_masked(slot) {
            return slot.irqfd.write(1);
        }
        slot.pending.store(true, Ordering::SeqCst);
        // The guest may have unmasked between the check and the store; whoever of us sees both
        // the unmask and the pending bit delivers, exactly once (swap).
        self.deliver_pending(slot)
    }

    /// Whether `vector`'s pending bit is set.
    pub fn is_pending(&self, vector: u16) -> bool {
        self.vectors
            .get(usize::from(vector))
            .is_some_and(|s| s.pending.load(Ordering::SeqCst))
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    /// Whether there are no vectors (never true for a constructed table).
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    fn is_masked(&self, slot: &VectorSlot) -> bool {
        self.function_masked.load(Ordering::SeqCst) || slot.masked.load(Ordering::SeqCst)
    }

    fn deliver_pending(&self, slot: &VectorSlot) -> std::io::Result<()> {
        if self.enabled.load(Ordering::SeqCst)
            && !self.is_masked(slot)
            && slot.pending.swap(false, Ordering::SeqCst)
        {
            return slot.irqfd.write(1);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct MsixEntry {
    addr_lo: u32,
    addr_hi: u32,
    data: u32,
    control: u32,
}

impl MsixEntry {
    fn message(&self) -> MsiMessage {
        MsiMessage {
            address: u64::from(self.addr_hi) << 32 | u64::from(self.addr_lo),
            data: self.data,
        }
    }
}

/// The guest-programmed half of MSI-X: table entries, message control and routes.
pub struct MsixTable {
    entries: Vec<MsixEntry>,
    installed: Vec<Option<MsiMessage>>,
    enabled: bool,
    function_masked: bool,
    cap_offset: Option<usize>,
    interrupts: Arc<MsixInterrupts>,
    routing: Arc<dyn MsiRouting>,
}

impl std::fmt::Debug for MsixTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsixTable")
            .field("vectors", &self.entries.len())
            .field("enabled", &self.enabled)
            .field("function_masked", &self.function_masked)
            .field("cap_offset", &self.cap_offset)
            .finish()
    }
}

impl MsixTable {
    /// A disabled table with one masked entry per vector in `vectors`.
    pub fn new(vectors: Vec<MsiVector>, routing: Arc<dyn MsiRouting>) -> Result<Self, MsixError> {
        let n = vectors.len();
        if n == 0 || n > MSIX_MAX_VECTORS {
            return Err(MsixError::VectorCount(n));
        }
        let slots = vectors
            .into_iter()
            .map(|v| VectorSlot {
                gsi: v.gsi,
                irqfd: v.irqfd,
                masked: AtomicBool::new(true),
                pending: AtomicBool::new(false),
            })
            .collect();
        let entry = MsixEntry {
            addr_lo: 0,
            addr_hi: 0,
            data: 0,
            control: ENTRY_MASKED,
        };
        Ok(Self {
            entries: vec![entry; n],
            installed: vec![None; n],
            enabled: false,
            function_masked: false,
            cap_offset: None,
            interrupts: Arc::new(MsixInterrupts {
                enabled: AtomicBool::new(false),
                function_masked: AtomicBool::new(false),
                warned_disabled: AtomicBool::new(false),
                vectors: slots,
            }),
            routing,
        })
    }

    /// The delivery half, for interrupt raisers.
    pub fn interrupts(&self) -> Arc<MsixInterrupts> {
        Arc::clone(&self.interrupts)
    }

    /// Bytes the table occupies in its BAR.
    pub fn table_len(&self) -> u64 {
        self.entries.len() as u64 * MSIX_ENTRY_SIZE
    }

    /// Bytes the pending-bit array occupies in its BAR (whole qwords).
    pub fn pba_len(&self) -> u64 {
        self.entries.len().div_ceil(64) as u64 * 8
    }

    /// Adds the MSI-X capability to `cfg`, pointing at the table and PBA (`bar`, `offset`, with
    /// offsets 8-byte aligned). Returns the capability's offset.
    pub fn add_capability(
        &mut self,
        cfg: &mut PciConfigSpace,
        table: (u8, u32),
        pba: (u8, u32),
    ) -> Result<usize, MsixError> {
        let size = (self.entries.len() - 1) as u16;
        let mut cap = [0u8; 12];
        cap[0] = MSIX_CAP_ID;
        cap[2..4].copy_from_slice(&size.to_le_bytes());
        cap[4..8].copy_from_slice(&(table.1 & !7 | u32::from(table.0 & 7)).to_le_bytes());
        cap[8..12].copy_from_slice(&(pba.1 & !7 | u32::from(pba.0 & 7)).to_le_bytes());
        let writable = (CTRL_ENABLE | CTRL_FUNCTION_MASK).to_le_bytes();
        let offset = cfg.add_writable_capability(&cap, &[0, 0, writable[0], writable[1]])?;
        self.cap_offset = Some(offset);
        Ok(offset)
    }

    /// Follows a guest config write of `len` bytes at `offset` (already applied to `cfg`): picks
    /// up changes to the enable and function-mask bits.
    pub fn config_written(&mut self, cfg: &PciConfigSpace, offset: usize, len: usize) {
        let Some(cap) = self.cap_offset else { return };
        let ctrl = cap + 2;
        if offset < ctrl + 2 && offset + len > ctrl {
            let dword = cfg.read_u32(cap);
            self.set_message_control((dword >> 16) as u16);
        }
    }

    /// Applies a new message control value.
    pub fn set_message_control(&mut self, ctrl: u16) {
        self.enabled = ctrl & CTRL_ENABLE != 0;
        self.function_masked = ctrl & CTRL_FUNCTION_MASK != 0;
        let irq = &self.interrupts;
        irq.function_masked
            .store(self.function_masked, Ordering::SeqCst);
        irq.enabled.store(self.enabled, Ordering::SeqCst);
        for i in 0..self.entries.len() {
            self.sync_vector(i);
        }
    }

    /// Reads the table at `offset` (aligned dword or qword accesses; others read all ones).
    pub fn read_table(&self, offset: u64, data: &mut [u8]) {
        let Some((index, field)) = self.entry_access(offset, data.len()) else {
            data.fill(0xff);
            return;
        };
        let e = &self.entries[index];
        let words = [e.addr_lo, e.addr_hi, e.data, e.control];
        for (chunk, word) in data.chunks_mut(4).zip(&words[field..]) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
    }

    /// Writes the table at `offset`, then installs the entry's route and delivers its pending
    /// interrupt as the new state requires.
    pub fn write_table(&mut self, offset: u64, data: &[u8]) {
        let Some((index, field)) = self.entry_access(offset, data.len()) else {
            return;
        };
        let e = &mut self.entries[index];
        for (i, chunk) in data.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w.copy_from_slice(chunk);
            let value = u32::from_le_bytes(w);
            match field + i {
                0 => e.addr_lo = value,
                1 => e.addr_hi = value,
                2 => e.data = value,
                _ => e.control = value & ENTRY_MASKED,
            }
        }
        self.sync_vector(index);
    }

    /// Reads the pending-bit array (any width up to 8, within the array).
    pub fn read_pba(&self, offset: u64, data: &mut [u8]) {
        let end = offset.checked_add(data.len() as u64);
        if data.len() > 8 || end.is_none_or(|end| end > self.pba_len()) {
            data.fill(0xff);
            return;
        }
        for (i, byte) in data.iter_mut().enumerate() {
            let first = (offset as usize + i) * 8;
            *byte = (0..8)
                .filter(|bit| self.interrupts.is_pending((first + bit) as u16))
                .fold(0, |acc, bit| acc | 1 << bit);
        }
    }

    /// Aligned 4- or 8-byte access inside one entry: (entry index, first dword in the entry).
    fn entry_access(&self, offset: u64, len: usize) -> Option<(usize, usize)> {
        let aligned = matches!(len, 4 | 8) && offset.is_multiple_of(len as u64);
        let index = usize::try_from(offset / MSIX_ENTRY_SIZE).ok()?;
        (aligned && index < self.entries.len())
            .then_some((index, (offset % MSIX_ENTRY_SIZE / 4) as usize))
    }

    /// Brings vector `i`'s route and atomic mask bit in line with the table, then delivers a
    /// pending interrupt if the vector is now deliverable.
    fn sync_vector(&mut self, i: usize) {
        let entry = self.entries[i];
        let slot = &self.interrupts.vectors[i];
        let masked = entry.control & ENTRY_MASKED != 0;
        let want = if !self.enabled {
            None
        } else if masked {
            // Keep whatever route exists: a masked vector never fires its irqfd.
            self.installed[i]
        } else {
            Some(entry.message())
        };
        if want != self.installed[i] {
            match self.routing.set_msi_route(slot.gsi, want) {
                Ok(()) => self.installed[i] = want,
                Err(e) => log::warn!("Setting the MSI route of GSI {} failed: {e}", slot.gsi),
            }
        }
        slot.masked.store(masked, Ordering::SeqCst);
        if let Err(e) = self.interrupts.deliver_pending(slot) {
            log::warn!("Delivering pending MSI-X vector {i} failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests;
