//! The virtio-pci register layout: where each structure lives in BAR0, and the vendor-specific
//! capabilities (virtio 1.2, 4.1.4) that tell the driver so.
//!
//! BAR0 (64-bit memory, 32 KiB):
//!
//! | offset   | region                                   |
//! |----------|------------------------------------------|
//! | `0x0000` | common configuration (`0x38` bytes)      |
//! | `0x1000` | ISR status (1 byte, read to clear)       |
//! | `0x2000` | device-specific configuration (4 KiB)    |
//! | `0x3000` | notifications: queue `q` at `0x3000 + 4q` |
//! | `0x4000` | MSI-X table (16 bytes per vector)        |
//! | `0x5000` | MSI-X pending-bit array                  |

use crate::pci::{ConfigSpaceError, PciConfigSpace};

/// The BAR holding every virtio structure.
pub const VIRTIO_BAR: usize = 0;
/// Size of BAR0.
pub const BAR0_SIZE: u64 = 0x8000;
/// Common configuration.
pub const COMMON_CFG_OFFSET: u64 = 0x0000;
/// Length of the common configuration structure we implement (up to `queue_device`).
pub const COMMON_CFG_LEN: u64 = 0x38;
/// ISR status.
pub const ISR_OFFSET: u64 = 0x1000;
/// Length of the ISR region.
pub const ISR_LEN: u64 = 1;
/// Device-specific configuration.
pub const DEVICE_CFG_OFFSET: u64 = 0x2000;
/// Length of the device-specific configuration region.
pub const DEVICE_CFG_LEN: u64 = 0x1000;
/// Notification region.
pub const NOTIFY_OFFSET: u64 = 0x3000;
/// Bytes between two queues' notification addresses.
pub const NOTIFY_OFF_MULTIPLIER: u32 = 4;
/// MSI-X table.
pub const MSIX_TABLE_OFFSET: u64 = 0x4000;
/// MSI-X pending-bit array.
pub const MSIX_PBA_OFFSET: u64 = 0x5000;
/// The most queues the notification region holds.
pub const MAX_QUEUES: usize = ((MSIX_TABLE_OFFSET - NOTIFY_OFFSET) / 4) as usize;
/// The most MSI-X vectors the table region holds.
pub const MAX_VECTORS: usize = ((MSIX_PBA_OFFSET - MSIX_TABLE_OFFSET) / 16) as usize;

/// Capability id of vendor-specific capabilities.
const CAP_ID_VENDOR: u8 = 0x09;
/// `cfg_type` values of `struct virtio_pci_cap`.
const CFG_COMMON: u8 = 1;
const CFG_NOTIFY: u8 = 2;
const CFG_ISR: u8 = 3;
const CFG_DEVICE: u8 = 4;
const CFG_PCI: u8 = 5;

/// Offset of queue `q`'s notification address inside BAR0.
pub fn notify_offset(queue: u16) -> u64 {
    NOTIFY_OFFSET + u64::from(queue) * u64::from(NOTIFY_OFF_MULTIPLIER)
}

/// `struct virtio_pci_cap` with `extra` appended (notify multiplier or PCI_CFG data).
fn virtio_cap(cfg_type: u8, offset: u64, length: u64, extra: Option<u32>) -> Vec<u8> {
    let len = if extra.is_some() { 20 } else { 16 };
    let mut cap = vec![CAP_ID_VENDOR, 0, len, cfg_type, VIRTIO_BAR as u8, 0, 0, 0];
    cap.extend_from_slice(&(offset as u32).to_le_bytes());
    cap.extend_from_slice(&(length as u32).to_le_bytes());
    if let Some(extra) = extra {
        cap.extend_from_slice(&extra.to_le_bytes());
    }
    cap
}

/// Adds the common, notify, ISR, device and PCI_CFG capabilities for `num_queues` queues.
/// Returns the offset of the PCI_CFG capability.
pub fn add_virtio_capabilities(
    cfg: &mut PciConfigSpace,
    num_queues: usize,
) -> Result<usize, ConfigSpaceError> {
    let notify_len = num_queues as u64 * u64::from(NOTIFY_OFF_MULTIPLIER);
    cfg.add_capability(&virtio_cap(
        CFG_COMMON,
        COMMON_CFG_OFFSET,
        COMMON_CFG_LEN,
        None,
    ))?;
    cfg.add_capability(&virtio_cap(
        CFG_NOTIFY,
        NOTIFY_OFFSET,
        notify_len,
        Some(NOTIFY_OFF_MULTIPLIER),
    ))?;
    cfg.add_capability(&virtio_cap(CFG_ISR, ISR_OFFSET, ISR_LEN, None))?;
    cfg.add_capability(&virtio_cap(
        CFG_DEVICE,
        DEVICE_CFG_OFFSET,
        DEVICE_CFG_LEN,
        None,
    ))?;
    // The driver picks the window: bar, offset and length are writable. The data field is
    // intercepted by the transport, never stored.
    let mut writable = [0u8; 16];
    writable[PciCfgWindow::BAR] = 0xff;
    writable[PciCfgWindow::OFFSET..PciCfgWindow::OFFSET + 8].fill(0xff);
    cfg.add_writable_capability(&virtio_cap(CFG_PCI, 0, 0, Some(0)), &writable)
}

/// The PCI_CFG access window (`struct virtio_pci_cfg_cap`) at a known config offset.
#[derive(Debug, Clone, Copy)]
pub struct PciCfgWindow {
    /// Config-space offset of the capability.
    pub cap: usize,
}

impl PciCfgWindow {
    const BAR: usize = 4;
    const OFFSET: usize = 8;
    const LENGTH: usize = 12;
    const DATA: usize = 16;

    /// Whether a `len`-byte config access at `offset` targets `pci_cfg_data`.
    pub fn hits_data(&self, offset: usize, len: usize) -> bool {
        let data = self.cap + Self::DATA;
        offset < data + 4 && offset + len > data
    }

    /// Byte position of `offset` inside `pci_cfg_data`.
    pub fn data_index(&self, offset: usize) -> usize {
        offset.saturating_sub(self.cap + Self::DATA)
    }

    /// The BAR offset and length the driver selected, if they name a valid BAR0 access.
    pub fn target(&self, cfg: &PciConfigSpace) -> Option<(u64, usize)> {
        let bar = cfg.read_u32(self.cap + Self::BAR) & 0xff;
        let offset = u64::from(cfg.read_u32(self.cap + Self::OFFSET));
        let length = cfg.read_u32(self.cap + Self::LENGTH) as usize;
        let ok = bar == VIRTIO_BAR as u32
            && matches!(length, 1 | 2 | 4)
            && offset.is_multiple_of(length as u64)
            && offset + length as u64 <= BAR0_SIZE;
        ok.then_some((offset, length))
    }
}
