//! A virtio-pci function's state for a snapshot ([`VirtioPciState`]): its configuration space,
//! MSI-X table and pending bits, the common configuration (features, status, vectors, each
//! queue's size, enable and ring addresses) and where each queue's rings stand.
//!
//! Restoring replays what a driver did, through the same register paths a guest uses, on a
//! freshly built device: [`VirtioPciState::config_writes`] through the PCI root (so its MMIO
//! routes follow the BARs), then [`VirtioPciDevice::restore_state`] (MSI-X table, features,
//! queues, status; `DRIVER_OK` activates the device with each queue resuming where it stood).
//!
//! The queue positions assume a drained device: when the state is saved, every request the
//! guest made available has been completed and its used entry written (the VMM's pause drains
//! the iothreads first), so each queue resumes with both `next_avail` and `next_used` at the
//! used ring's index, which is read from guest memory at save time.

use serde::{Deserialize, Serialize};
use vm_memory::{Bytes, GuestAddress};

use super::common_cfg::{
    CONFIG_MSIX_VECTOR, DEVICE_FEATURE_SELECT, DRIVER_FEATURE, DRIVER_FEATURE_SELECT, QUEUE_DESC,
    QUEUE_DEVICE, QUEUE_DRIVER, QUEUE_ENABLE, QUEUE_MSIX_VECTOR, QUEUE_SELECT, QUEUE_SIZE,
};
use super::VirtioPciDevice;
use crate::pci::config_space::{reg, CONFIG_SPACE_SIZE};
use crate::pci::msix::{MSIX_CAP_ID, MSIX_ENTRY_SIZE};
use crate::virtio::status;

/// One queue's registers and ring position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    /// Size the driver chose.
    pub size: u16,
    /// `queue_enable`.
    pub enabled: bool,
    /// Descriptor table address.
    pub desc: u64,
    /// Driver (avail) ring address.
    pub driver: u64,
    /// Device (used) ring address.
    pub device: u64,
    /// MSI-X vector.
    pub vector: u16,
    /// The used ring's `idx` at the snapshot (0 for a queue not enabled).
    pub used_idx: u16,
}

/// A virtio-pci function's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtioPciState {
    /// The 256-byte configuration space, as dwords.
    pub config_space: Vec<u32>,
    /// Each MSI-X table entry: address low, address high, data, vector control.
    pub msix_table: Vec<[u32; 4]>,
    /// The vectors whose pending bit is set.
    pub msix_pending: Vec<u16>,
    /// The features the driver accepted.
    pub driver_features: u64,
    /// `device_status`.
    pub status: u8,
    /// `config_generation`.
    pub config_generation: u8,
    /// `config_msix_vector`.
    pub config_vector: u16,
    /// Each queue.
    pub queues: Vec<QueueState>,
    /// The selector registers as the driver left them (`device_feature_select`,
    /// `driver_feature_select`, `queue_select`): a driver paused between writing a selector and
    /// the register it selects writes that register after the restore.
    pub selects: Selects,
}

/// The common configuration's selector registers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selects {
    /// `device_feature_select`.
    pub device_feature: u32,
    /// `driver_feature_select`.
    pub driver_feature: u32,
    /// `queue_select`.
    pub queue: u16,
}

/// Why a state cannot be saved or restored.
#[derive(Debug, thiserror::Error)]
pub enum VirtioPciStateError {
    /// The state is of a device with another shape.
    #[error("virtio-pci state has {saved} {what}; this device has {here}")]
    Shape {
        /// Queues or MSI-X vectors.
        what: &'static str,
        /// In the state.
        saved: usize,
        /// On this device.
        here: usize,
    },
    /// The device is in the middle of a reset (I/O still in flight).
    #[error("virtio-pci device is resetting (requests in flight); pause and retry")]
    Resetting,
    /// A queue's ring is outside guest memory.
    #[error("virtio-pci queue {queue}: ring at {addr:#x} is outside guest memory")]
    UsedRing {
        /// The queue.
        queue: usize,
        /// The ring's address.
        addr: u64,
    },
    /// Replaying the state did not bring the device back to its saved status.
    #[error("virtio-pci restore: status {got:#x} where the snapshot had {saved:#x}")]
    Status {
        /// The saved status.
        saved: u8,
        /// The status after the replay.
        got: u8,
    },
}

impl VirtioPciState {
    /// The configuration writes that restore the function's decoding, for the VMM to send
    /// through the PCI root (which then moves its MMIO routes): the BARs, the interrupt line,
    /// the MSI-X capability's message control, then the command register. Read-only bits are
    /// ignored by the device as for any guest write; the virtio PCI-config window is left
    /// alone (a driver programs it before each use).
    pub fn config_writes(&self) -> Vec<(usize, u32)> {
        let dword = |offset: usize| self.config_space.get(offset / 4).copied().unwrap_or(0);
        let mut out: Vec<(usize, u32)> = (0..6)
            .map(|i| reg::BAR0 + 4 * i)
            .map(|o| (o, dword(o)))
            .collect();
        out.push((0x3c, dword(0x3c)));
        if let Some(cap) = self.find_capability(MSIX_CAP_ID) {
            out.push((cap, dword(cap)));
        }
        out.push((reg::COMMAND & !3, dword(reg::COMMAND & !3)));
        out
    }

    /// The offset of the first capability with `id`, walking the saved list (bounded).
    fn find_capability(&self, id: u8) -> Option<usize> {
        let byte = |offset: usize| {
            let d = self.config_space.get(offset / 4).copied().unwrap_or(0);
            (d >> (8 * (offset % 4))) as u8
        };
        let mut ptr = usize::from(byte(0x34)) & !3;
        for _ in 0..48 {
            if !(0x40..CONFIG_SPACE_SIZE).contains(&ptr) {
                return None;
            }
            if byte(ptr) == id {
                return Some(ptr);
            }
            ptr = usize::from(byte(ptr + 1)) & !3;
        }
        None
    }
}

impl VirtioPciDevice {
    /// Whether every request the driver made available has been completed: each enabled
    /// queue's used ring index equals its avail ring index (both read from guest memory). With
    /// the vCPUs paused no request can be added, so once this holds the device is drained.
    pub fn rings_settled(&self) -> Result<bool, VirtioPciStateError> {
        Ok(self.unsettled_queues()?.is_empty())
    }

    /// The enabled queues whose avail index is ahead of their used index, as
    /// `(queue, avail, used)`: what a drain that does not settle is waiting for. None before
    /// `DRIVER_OK`.
    pub fn unsettled_queues(&self) -> Result<Vec<(usize, u16, u16)>, VirtioPciStateError> {
        if self.irq.status() & status::DRIVER_OK == 0 {
            return Ok(Vec::new());
        }
        let mut behind = Vec::new();
        for (queue, q) in self.common.queues.iter().enumerate() {
            if !q.enabled {
                continue;
            }
            let avail = self.ring_index(queue, q.driver)?;
            let used = self.ring_index(queue, q.device)?;
            if avail != used {
                behind.push((queue, avail, used));
            }
        }
        Ok(behind)
    }

    /// Signals every queue's kick as a driver's notify would: the queue's handler looks at its
    /// ring again. A drain uses it so that a handler that went to sleep without seeing the
    /// driver's last request (the driver cannot notify again while paused) still completes it.
    pub fn nudge_queues(&self) {
        for (queue, kick) in self.kicks.iter().enumerate() {
            if let Err(e) = kick.write(1) {
                log::warn!("virtio-pci: nudging queue {queue} failed: {e}");
            }
        }
    }

    /// The `idx` field (at offset 2) of the ring at `ring`.
    fn ring_index(&self, queue: usize, ring: u64) -> Result<u16, VirtioPciStateError> {
        let bad = VirtioPciStateError::UsedRing { queue, addr: ring };
        let addr = ring.checked_add(2).ok_or(bad)?;
        self.mem
            .read_obj::<u16>(GuestAddress(addr))
            .map(u16::from_le)
            .map_err(|_| VirtioPciStateError::UsedRing { queue, addr: ring })
    }

    /// The function's state. Call it with the vCPUs paused and the device drained (no request
    /// in flight): the queue positions are read from the used rings.
    pub fn save_state(&self) -> Result<VirtioPciState, VirtioPciStateError> {
        if self.reset_pending.is_some() {
            return Err(VirtioPciStateError::Resetting);
        }
        let config_space = (0..CONFIG_SPACE_SIZE / 4)
            .map(|i| self.cfg.read_u32(4 * i))
            .collect();
        let vectors = self.msix.interrupts().len();
        let msix_table = (0..vectors as u64)
            .map(|v| {
                let mut entry = [0u32; 4];
                for (w, word) in entry.iter_mut().enumerate() {
                    let mut b = [0u8; 4];
                    self.msix
                        .read_table(v * MSIX_ENTRY_SIZE + 4 * w as u64, &mut b);
                    *word = u32::from_le_bytes(b);
                }
                entry
            })
            .collect();
        let msix_pending = (0..vectors as u16)
            .filter(|&v| self.msix.interrupts().is_pending(v))
            .collect();
        let queues = self
            .common
            .queues
            .iter()
            .enumerate()
            .map(|(index, q)| {
                let used_idx = if q.enabled {
                    let addr = q
                        .device
                        .checked_add(2)
                        .ok_or(VirtioPciStateError::UsedRing {
                            queue: index,
                            addr: q.device,
                        })?;
                    self.mem.read_obj::<u16>(GuestAddress(addr)).map_err(|_| {
                        VirtioPciStateError::UsedRing {
                            queue: index,
                            addr: q.device,
                        }
                    })?
                } else {
                    0
                };
                Ok(QueueState {
                    size: q.size,
                    enabled: q.enabled,
                    desc: q.desc,
                    driver: q.driver,
                    device: q.device,
                    vector: self.irq.queue_vector(index),
                    used_idx,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(VirtioPciState {
            config_space,
            msix_table,
            msix_pending,
            driver_features: self.common.driver_features,
            status: self.irq.status(),
            config_generation: self.irq.config_generation(),
            config_vector: self.irq.config_vector(),
            queues,
            selects: self.common.selects(),
        })
    }

    /// Replays `state` on this freshly built device, after its
    /// [`VirtioPciState::config_writes`] went through the PCI root. With `DRIVER_OK` saved, the
    /// device is activated, each queue resuming at its saved used index.
    pub fn restore_state(&mut self, state: &VirtioPciState) -> Result<(), VirtioPciStateError> {
        let shape = |what, saved: usize, here: usize| {
            (saved != here).then_some(VirtioPciStateError::Shape { what, saved, here })
        };
        let vectors = self.msix.interrupts().len();
        if let Some(e) = shape("queues", state.queues.len(), self.common.queues.len())
            .or_else(|| shape("MSI-X vectors", state.msix_table.len(), vectors))
        {
            return Err(e);
        }
        for (v, entry) in state.msix_table.iter().enumerate() {
            for (w, word) in entry.iter().enumerate() {
                self.msix.write_table(
                    v as u64 * MSIX_ENTRY_SIZE + 4 * w as u64,
                    &word.to_le_bytes(),
                );
            }
        }
        let steps = [status::ACKNOWLEDGE, status::ACKNOWLEDGE | status::DRIVER];
        for s in steps.into_iter().filter(|s| state.status & s == *s) {
            self.write_status(s);
        }
        for half in 0..2u32 {
            self.common
                .write(DRIVER_FEATURE_SELECT, &half.to_le_bytes());
            let bits = (state.driver_features >> (32 * half)) as u32;
            self.common.write(DRIVER_FEATURE, &bits.to_le_bytes());
        }
        let negotiated = status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK;
        if state.status & negotiated == negotiated {
            self.write_status(negotiated);
        }
        for (index, q) in state.queues.iter().enumerate() {
            self.common
                .write(QUEUE_SELECT, &(index as u16).to_le_bytes());
            self.common.write(QUEUE_SIZE, &q.size.to_le_bytes());
            self.common
                .write(QUEUE_MSIX_VECTOR, &q.vector.to_le_bytes());
            for (offset, addr) in [
                (QUEUE_DESC, q.desc),
                (QUEUE_DRIVER, q.driver),
                (QUEUE_DEVICE, q.device),
            ] {
                self.common.write(offset, &addr.to_le_bytes());
            }
            if q.enabled {
                self.common.write(QUEUE_ENABLE, &1u16.to_le_bytes());
            }
        }
        let selects = state.selects;
        self.common
            .write(QUEUE_SELECT, &selects.queue.to_le_bytes());
        self.common
            .write(DEVICE_FEATURE_SELECT, &selects.device_feature.to_le_bytes());
        self.common
            .write(DRIVER_FEATURE_SELECT, &selects.driver_feature.to_le_bytes());
        self.common
            .write(CONFIG_MSIX_VECTOR, &state.config_vector.to_le_bytes());
        self.irq.set_config_generation(state.config_generation);
        // DEVICE_NEEDS_RESET and FAILED are the device's and the driver's verdicts, not steps:
        // a device that needed a reset is restored to need it.
        let last = state.status & !(status::DEVICE_NEEDS_RESET | status::FAILED);
        if last != self.irq.status() {
            self.resume_at = Some(state.queues.iter().map(|q| q.used_idx).collect());
            self.write_status(last);
            self.resume_at = None;
        }
        if state.status & status::DEVICE_NEEDS_RESET != 0 {
            crate::virtio::VirtioInterrupt::set_needs_reset(self.irq.as_ref());
        }
        if state.status & status::FAILED != 0 {
            self.irq.set_status(self.irq.status() | status::FAILED);
        }
        let got = self.irq.status();
        if got != state.status {
            return Err(VirtioPciStateError::Status {
                saved: state.status,
                got,
            });
        }
        if got & status::DRIVER_OK != 0 {
            // The snapshot may have been taken between a used-ring update and its interrupt:
            // each active queue signals once (a driver finding nothing new ignores it).
            for (index, q) in state.queues.iter().enumerate() {
                if q.enabled && q.vector != super::NO_VECTOR {
                    if let Err(e) = crate::virtio::VirtioInterrupt::notify_queue(
                        self.irq.as_ref(),
                        index as u16,
                    ) {
                        log::warn!("virtio-pci restore: queue {index} interrupt failed: {e}");
                    }
                }
            }
        }
        for &v in &state.msix_pending {
            // Masked (as it was when it became pending): sets the pending bit again. Unmasked
            // since: delivered, as the guest's unmask would have.
            if let Err(e) = self.msix.interrupts().trigger(v) {
                log::warn!("virtio-pci restore: re-raising vector {v} failed: {e}");
            }
        }
        Ok(())
    }
}
