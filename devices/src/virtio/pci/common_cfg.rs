//! The common configuration structure (virtio 1.2, 4.1.4.3): feature windows, queue selection
//! and per-queue registers. Status writes are handed back to the transport, which owns the
//! state machine; everything else is plain register state here.
//!
//! Fields are accessed at their natural width (64-bit ring addresses also as two dwords); any
//! other access reads as zero and is dropped.

use std::sync::Arc;

use super::interrupt::VirtioPciInterrupt;
use crate::virtio::status;

pub(super) const DEVICE_FEATURE_SELECT: u64 = 0x00;
pub(super) const DEVICE_FEATURE: u64 = 0x04;
pub(super) const DRIVER_FEATURE_SELECT: u64 = 0x08;
pub(super) const DRIVER_FEATURE: u64 = 0x0c;
pub(super) const CONFIG_MSIX_VECTOR: u64 = 0x10;
pub(super) const NUM_QUEUES: u64 = 0x12;
pub(super) const DEVICE_STATUS: u64 = 0x14;

/// Whether a register access at `offset` of `len` bytes includes `device_status`.
pub(super) fn covers_status(offset: u64, len: u64) -> bool {
    offset <= DEVICE_STATUS && DEVICE_STATUS < offset.saturating_add(len)
}
pub(super) const CONFIG_GENERATION: u64 = 0x15;
pub(super) const QUEUE_SELECT: u64 = 0x16;
pub(super) const QUEUE_SIZE: u64 = 0x18;
pub(super) const QUEUE_MSIX_VECTOR: u64 = 0x1a;
pub(super) const QUEUE_ENABLE: u64 = 0x1c;
pub(super) const QUEUE_NOTIFY_OFF: u64 = 0x1e;
pub(super) const QUEUE_DESC: u64 = 0x20;
pub(super) const QUEUE_DRIVER: u64 = 0x28;
pub(super) const QUEUE_DEVICE: u64 = 0x30;
/// Last byte of `queue_device`.
pub(super) const QUEUE_DEVICE_END: u64 = 0x37;

/// One queue's registers as the driver programs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct QueueRegs {
    pub(super) max_size: u16,
    pub(super) size: u16,
    pub(super) enabled: bool,
    pub(super) desc: u64,
    pub(super) driver: u64,
    pub(super) device: u64,
}

impl QueueRegs {
    fn new(max_size: u16) -> Self {
        Self {
            max_size,
            size: max_size,
            enabled: false,
            desc: 0,
            driver: 0,
            device: 0,
        }
    }
}

/// The common configuration registers.
#[derive(Debug)]
pub(super) struct CommonConfig {
    device_features: u64,
    device_feature_select: u32,
    driver_feature_select: u32,
    pub(super) driver_features: u64,
    queue_select: u16,
    pub(super) queues: Vec<QueueRegs>,
    irq: Arc<VirtioPciInterrupt>,
}

impl CommonConfig {
    pub(super) fn new(
        device_features: u64,
        max_sizes: &[u16],
        irq: Arc<VirtioPciInterrupt>,
    ) -> Self {
        Self {
            device_features,
            device_feature_select: 0,
            driver_feature_select: 0,
            driver_features: 0,
            queue_select: 0,
            queues: max_sizes.iter().map(|&m| QueueRegs::new(m)).collect(),
            irq,
        }
    }

    /// The selector registers, for a snapshot.
    pub(super) fn selects(&self) -> super::state::Selects {
        super::state::Selects {
            device_feature: self.device_feature_select,
            driver_feature: self.driver_feature_select,
            queue: self.queue_select,
        }
    }

    /// Back to the power-on register state (vectors and status live in the interrupt).
    pub(super) fn reset(&mut self) {
        self.device_feature_select = 0;
        self.driver_feature_select = 0;
        self.driver_features = 0;
        self.queue_select = 0;
        for q in &mut self.queues {
            *q = QueueRegs::new(q.max_size);
        }
    }

    pub(super) fn read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let Some((value, width)) = self.field(offset) else {
            return;
        };
        if data.len() == width || (width == 8 && data.len() == 4) {
            data.copy_from_slice(&value.to_le_bytes()[..data.len()]);
        }
    }

    /// Applies a register write. Returns the value written to `device_status`, which the
    /// transport applies.
    pub(super) fn write(&mut self, offset: u64, data: &[u8]) -> Option<u8> {
        let mut bytes = [0u8; 8];
        bytes.get_mut(..data.len())?.copy_from_slice(data);
        let value = u64::from_le_bytes(bytes);
        let select = usize::from(self.queue_select);
        match (offset, data.len()) {
            (DEVICE_FEATURE_SELECT, 4) => self.device_feature_select = value as u32,
            (DRIVER_FEATURE_SELECT, 4) => self.driver_feature_select = value as u32,
            (DRIVER_FEATURE, 4) => self.write_driver_features(value as u32),
            (CONFIG_MSIX_VECTOR, 2) => self.irq.set_config_vector(value as u16),
            (DEVICE_STATUS, 1) => return Some(value as u8),
            (QUEUE_SELECT, 2) => self.queue_select = value as u16,
            (QUEUE_MSIX_VECTOR, 2) => self.irq.set_queue_vector(select, value as u16),
            (QUEUE_SIZE, 2) => {
                if let Some(q) = self.queues.get_mut(select).filter(|q| !q.enabled) {
                    if value <= u64::from(q.max_size) {
                        q.size = value as u16;
                    }
                }
            }
            (QUEUE_ENABLE, 2) => {
                if let Some(q) = self.queues.get_mut(select) {
                    if value == 1 && q.size.is_power_of_two() {
                        q.enabled = true;
                    } else if value == 1 {
                        log::warn!("virtio-pci: queue {select} enabled with size {}", q.size);
                    }
                }
            }
            (QUEUE_DESC..=QUEUE_DEVICE_END, 4 | 8) => {
                self.write_queue_address(offset, data.len(), value)
            }
            _ => log::debug!(
                "virtio-pci: ignored common cfg write {offset:#x}/{}",
                data.len()
            ),
        }
        None
    }

    fn write_driver_features(&mut self, half: u32) {
        if self.irq.status() & status::FEATURES_OK != 0 {
            return;
        }
        let shift = match self.driver_feature_select {
            0 => 0,
            1 => 32,
            _ => return,
        };
        self.driver_features =
            self.driver_features & !(0xffff_ffff << shift) | u64::from(half) << shift;
    }

    fn write_queue_address(&mut self, offset: u64, len: usize, value: u64) {
        let Some(q) = self
            .queues
            .get_mut(usize::from(self.queue_select))
            .filter(|q| !q.enabled)
        else {
            return;
        };
        let field = match offset & !7 {
            QUEUE_DESC => &mut q.desc,
            QUEUE_DRIVER => &mut q.driver,
            QUEUE_DEVICE => &mut q.device,
            _ => return,
        };
        *field = match (offset % 8, len) {
            (0, 8) => value,
            (0, 4) => *field & !0xffff_ffff | value,
            (4, 4) => *field & 0xffff_ffff | value << 32,
            _ => *field,
        };
    }

    /// The field at `offset` as (value, natural width).
    fn field(&self, offset: u64) -> Option<(u64, usize)> {
        let select = usize::from(self.queue_select);
        let q = self.queues.get(select);
        let feature_half = |features: u64, sel: u32| match sel {
            0 => features & 0xffff_ffff,
            1 => features >> 32,
            _ => 0,
        };
        Some(match offset {
            DEVICE_FEATURE_SELECT => (u64::from(self.device_feature_select), 4),
            DEVICE_FEATURE => (
                feature_half(self.device_features, self.device_feature_select),
                4,
            ),
            DRIVER_FEATURE_SELECT => (u64::from(self.driver_feature_select), 4),
            DRIVER_FEATURE => (
                feature_half(self.driver_features, self.driver_feature_select),
                4,
            ),
            CONFIG_MSIX_VECTOR => (u64::from(self.irq.config_vector()), 2),
            NUM_QUEUES => (self.queues.len() as u64, 2),
            DEVICE_STATUS => (u64::from(self.irq.status()), 1),
            CONFIG_GENERATION => (u64::from(self.irq.config_generation()), 1),
            QUEUE_SELECT => (u64::from(self.queue_select), 2),
            QUEUE_SIZE => (q.map_or(0, |q| u64::from(q.size)), 2),
            QUEUE_MSIX_VECTOR => (u64::from(self.irq.queue_vector(select)), 2),
            QUEUE_ENABLE => (q.map_or(0, |q| u64::from(q.enabled)), 2),
            QUEUE_NOTIFY_OFF => (q.map_or(0, |_| select as u64), 2),
            QUEUE_DESC..=QUEUE_DEVICE_END => {
                let q = q.copied().unwrap_or(QueueRegs::new(0));
                let value = match offset & !7 {
                    QUEUE_DESC => q.desc,
                    QUEUE_DRIVER => q.driver,
                    QUEUE_DEVICE => q.device,
                    _ => return None,
                };
                match offset % 8 {
                    0 => (value, 8),
                    4 => (value >> 32, 4),
                    _ => return None,
                }
            }
            _ => return None,
        })
    }
}
