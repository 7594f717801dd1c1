//! The address bus: routes a port-I/O or MMIO access to the device that owns the address.
//!
//! One `Bus` serves port I/O and another serves MMIO. Devices are registered on
//! non-overlapping ranges before the vCPUs start; accesses to unclaimed addresses read as all
//! ones and writes are dropped, as on real hardware.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A device reachable through a bus.
pub trait BusDevice: Send {
    /// Reads `data.len()` bytes at `offset` from the start of the device's range.
    fn read(&mut self, offset: u64, data: &mut [u8]);
    /// Writes `data` at `offset` from the start of the device's range.
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// Errors while registering devices on a bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    /// The new range overlaps one that is taken.
    #[error("Bus range {base:#x}+{len:#x} overlaps an existing device")]
    Overlap {
        /// Start of the rejected range.
        base: u64,
        /// Length of the rejected range.
        len: u64,
    },
    /// A zero-length or wrapping range.
    #[error("Bus range {base:#x}+{len:#x} is empty or wraps")]
    BadRange {
        /// Start of the rejected range.
        base: u64,
        /// Length of the rejected range.
        len: u64,
    },
}

struct Entry {
    len: u64,
    device: Arc<Mutex<dyn BusDevice>>,
}

/// A map from address ranges to devices.
#[derive(Default)]
pub struct Bus {
    ranges: BTreeMap<u64, Entry>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranges: Vec<(u64, u64)> = self.ranges.iter().map(|(b, e)| (*b, e.len)).collect();
        f.debug_struct("Bus").field("ranges", &ranges).finish()
    }
}

impl Bus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `device` on `[base, base + len)`.
    pub fn insert(
        &mut self,
        device: Arc<Mutex<dyn BusDevice>>,
        base: u64,
        len: u64,
    ) -> Result<(), BusError> {
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(BusError::BadRange { base, len })?;
        let before = self.ranges.range(..end).next_back();
        if let Some((b, e)) = before {
            if b + e.len > base {
                return Err(BusError::Overlap { base, len });
            }
        }
        self.ranges.insert(base, Entry { len, device });
        Ok(())
    }

    fn find(&self, addr: u64, len: usize) -> Option<(u64, &Entry)> {
        let (base, entry) = self.ranges.range(..=addr).next_back()?;
        let offset = addr - base;
        let end = offset.checked_add(len as u64)?;
        (end <= entry.len).then_some((offset, entry))
    }

    /// Reads from the device at `addr`; returns false (and fills `data` with 0xff) when no device
    /// claims the whole access.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((offset, entry)) => {
                lock(&entry.device).read(offset, data);
                true
            }
            None => {
                data.fill(0xff);
                false
            }
        }
    }

    /// Writes to the device at `addr`; returns false when no device claims the whole access.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((offset, entry)) => {
                lock(&entry.device).write(offset, data);
                true
            }
            None => false,
        }
    }
}

/// Locks a device, recovering from a poisoned lock: a device whose other user panicked is still
/// the best state we have, and the vCPU must not panic in turn.
fn lock(device: &Mutex<dyn BusDevice>) -> std::sync::MutexGuard<'_, dyn BusDevice + 'static> {
    device
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Recorder(Vec<(u64, Vec<u8>)>);
    impl BusDevice for Recorder {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, offset: u64, data: &[u8]) {
            self.0.push((offset, data.to_vec()));
        }
    }

    #[test]
    fn routes_by_offset_and_rejects_overlap() {
        let dev = Arc::new(Mutex::new(Recorder(Vec::new())));
        let mut bus = Bus::new();
        bus.insert(dev.clone(), 0x3f8, 8).expect("insert");
        assert_eq!(
            bus.insert(dev.clone(), 0x3f0, 9),
            Err(BusError::Overlap {
                base: 0x3f0,
                len: 9
            })
        );
        assert_eq!(
            bus.insert(dev.clone(), 0x3ff, 2),
            Err(BusError::Overlap {
                base: 0x3ff,
                len: 2
            })
        );
        assert!(bus.insert(dev.clone(), 0x400, 1).is_ok());
        assert_eq!(
            bus.insert(dev.clone(), 5, 0),
            Err(BusError::BadRange { base: 5, len: 0 })
        );
        let mut b = [0u8; 1];
        assert!(bus.read(0x3fa, &mut b));
        assert_eq!(b, [2]);
        assert!(bus.write(0x3fc, &[7]));
        assert_eq!(dev.lock().expect("lock").0, vec![(4, vec![7])]);
    }

    #[test]
    fn unclaimed_and_straddling_accesses_miss() {
        let dev = Arc::new(Mutex::new(Recorder(Vec::new())));
        let mut bus = Bus::new();
        bus.insert(dev, 0x100, 4).expect("insert");
        let mut b = [0u8; 4];
        assert!(!bus.read(0x50, &mut b));
        assert_eq!(b, [0xff; 4]);
        assert!(
            !bus.read(0x102, &mut b),
            "access straddling the end must miss"
        );
        assert!(!bus.write(u64::MAX, &[1, 2]));
    }
}
