//! The virtio-pci modern transport (virtio 1.2, 4.1): a [`PciDevice`] that exposes a
//! [`VirtioDevice`] through virtio capabilities and BAR0, owns its queues until `DRIVER_OK`, and
//! signals the guest through MSI-X.
//!
//! Submodules: [`layout`] (BAR0 map and capabilities), `common_cfg` (the common configuration
//! registers), [`interrupt`] (MSI-X backed [`crate::virtio::VirtioInterrupt`]). This module owns
//! the device status state machine, activation and reset, and BAR0 dispatch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::pci::{
    ConfigSpaceError, IoEventRegistry, MsiRouting, MsiVector, MsixError, MsixTable, PciBar,
    PciConfigSpace, PciDevice, PciIds,
};
use crate::virtio::{
    status, ActivateError, ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice,
    VirtioInterrupt, VIRTIO_F_VERSION_1, VIRTIO_RING_F_EVENT_IDX,
};

mod common_cfg;
pub mod interrupt;
pub mod layout;
pub mod state;

use common_cfg::CommonConfig;
pub use interrupt::{VirtioPciInterrupt, NO_VECTOR};
use layout::*;

/// PCI vendor id of virtio devices.
pub const VIRTIO_PCI_VENDOR_ID: u16 = 0x1af4;
/// Modern device ids are this plus the virtio device type.
pub const VIRTIO_PCI_DEVICE_ID_BASE: u16 = 0x1040;

/// Errors while building a virtio-pci device.
#[derive(Debug, thiserror::Error)]
pub enum VirtioPciError {
    /// The device has no queues, or more than the notification region holds.
    #[error("Unsupported queue count {0}")]
    QueueCount(usize),
    /// A queue's maximum size is not a power of two in 1..=32768.
    #[error("Invalid maximum size {size} of queue {queue}")]
    QueueMaxSize {
        /// Queue index.
        queue: usize,
        /// The offending size.
        size: u16,
    },
    /// More MSI-X vectors than the table region holds.
    #[error("Too many MSI-X vectors: {0}")]
    VectorCount(usize),
    /// Building the configuration space failed.
    #[error("Configuration space: {0}")]
    ConfigSpace(#[from] ConfigSpaceError),
    /// Setting up MSI-X failed.
    #[error("MSI-X: {0}")]
    Msix(#[from] MsixError),
    /// Creating a queue notification eventfd failed.
    #[error("Creating a notification eventfd failed: {0}")]
    EventFd(#[source] std::io::Error),
}

/// A virtio device on the PCI bus.
pub struct VirtioPciDevice {
    cfg: PciConfigSpace,
    device: Box<dyn VirtioDevice>,
    mem: GuestMemory,
    msix: MsixTable,
    irq: Arc<VirtioPciInterrupt>,
    common: CommonConfig,
    kicks: Vec<EventFd>,
    ioevents: Arc<dyn IoEventRegistry>,
    /// BAR0 address at which the kicks are registered as ioeventfds.
    registered_at: Option<u64>,
    pci_cfg: PciCfgWindow,
    /// A reset the device has not finished (in-flight I/O): when it was last tried. Until it
    /// is done, `device_status` reads back its old value and other status writes are ignored.
    reset_pending: Option<Instant>,
    /// A snapshot's ring positions, per queue, for the activation that restores it
    /// (`state.rs`); taken by that activation.
    resume_at: Option<Vec<u16>>,
}

/// How often a driver polling `device_status` during a pending reset makes the transport ask the
/// device again (each try is a round trip to the device's iothread).
const RESET_RETRY_INTERVAL: Duration = Duration::from_millis(1);

impl std::fmt::Debug for VirtioPciDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioPciDevice")
            .field("device_type", &self.device.device_type())
            .field("status", &self.irq.status())
            .field("bar0", &self.cfg.bar_address(VIRTIO_BAR))
            .field("msix", &self.msix)
            .finish()
    }
}

impl VirtioPciDevice {
    /// Wraps `device`, with one MSI-X table entry per element of `vectors` (the VMM passes
    /// `num_queues + 1`). Notification eventfds are registered with `ioevents` once BAR0 gets an
    /// address (when the device is added to a [`crate::pci::PciRoot`]).
    pub fn new(
        device: Box<dyn VirtioDevice>,
        mem: GuestMemory,
        vectors: Vec<MsiVector>,
        msi: Arc<dyn MsiRouting>,
        ioevents: Arc<dyn IoEventRegistry>,
    ) -> Result<Self, VirtioPciError> {
        let max_sizes = device.queue_max_sizes().to_vec();
        if max_sizes.is_empty() || max_sizes.len() > MAX_QUEUES {
            return Err(VirtioPciError::QueueCount(max_sizes.len()));
        }
        if let Some((queue, &size)) = max_sizes
            .iter()
            .enumerate()
            .find(|(_, s)| !s.is_power_of_two() || **s > 32768)
        {
            return Err(VirtioPciError::QueueMaxSize { queue, size });
        }
        if vectors.len() > MAX_VECTORS {
            return Err(VirtioPciError::VectorCount(vectors.len()));
        }
        let device_type = device.device_type();
        let mut cfg = PciConfigSpace::new(PciIds {
            vendor: VIRTIO_PCI_VENDOR_ID,
            device: VIRTIO_PCI_DEVICE_ID_BASE.wrapping_add(device_type as u16),
            revision: 1,
            class: class_code(device_type),
            subsystem_vendor: VIRTIO_PCI_VENDOR_ID,
            subsystem: device_type as u16,
        });
        cfg.add_bar(VIRTIO_BAR, PciBar::memory64(BAR0_SIZE))?;
        let pci_cfg = PciCfgWindow {
            cap: add_virtio_capabilities(&mut cfg, max_sizes.len())?,
        };
        let mut msix = MsixTable::new(vectors, msi)?;
        let bar = VIRTIO_BAR as u8;
        msix.add_capability(
            &mut cfg,
            (bar, MSIX_TABLE_OFFSET as u32),
            (bar, MSIX_PBA_OFFSET as u32),
        )?;
        let kicks = (0..max_sizes.len())
            .map(|_| EventFd::new(EFD_NONBLOCK))
            .collect::<Result<Vec<_>, _>>()
            .map_err(VirtioPciError::EventFd)?;
        let irq = Arc::new(VirtioPciInterrupt::new(msix.interrupts(), max_sizes.len()));
        let common = CommonConfig::new(device.features(), &max_sizes, Arc::clone(&irq));
        Ok(Self {
            cfg,
            device,
            mem,
            msix,
            irq,
            common,
            kicks,
            ioevents,
            registered_at: None,
            pci_cfg,
            reset_pending: None,
            resume_at: None,
        })
    }

    /// The wrapped device model.
    pub fn device(&self) -> &dyn VirtioDevice {
        self.device.as_ref()
    }

    /// The interrupt handle the device receives at activation.
    pub fn interrupt(&self) -> Arc<VirtioPciInterrupt> {
        Arc::clone(&self.irq)
    }

    /// Applies a driver write to `device_status`.
    fn write_status(&mut self, value: u8) {
        if self.reset_pending.is_some() {
            // The driver must wait for the reset to read back 0 before anything else.
            self.retry_reset(true);
            return;
        }
        if value == 0 {
            self.reset();
            return;
        }
        let old = self.irq.status();
        // Status bits are cleared only by a reset (virtio 1.2, 2.1.1: the driver MUST NOT clear
        // a device status bit). Keeping them set means DRIVER_OK cannot be cleared and set
        // again, which would activate the device a second time over the same queues.
        let mut new = value | old;
        if new & status::FEATURES_OK != 0 && old & status::FEATURES_OK == 0 {
            let driver = self.common.driver_features;
            let unoffered = driver & !self.device.features();
            if unoffered != 0 || driver & VIRTIO_F_VERSION_1 == 0 {
                log::warn!("virtio-pci: refusing features {driver:#x} (unoffered {unoffered:#x})");
                new &= !status::FEATURES_OK;
            } else {
                self.device.ack_features(driver);
            }
        }
        let activate = new & status::DRIVER_OK != 0 && old & status::DRIVER_OK == 0;
        if activate && new & status::FEATURES_OK == 0 {
            log::warn!("virtio-pci: DRIVER_OK without FEATURES_OK; ignored");
            new &= !status::DRIVER_OK;
        }
        self.irq.set_status(new);
        if activate && new & status::DRIVER_OK != 0 {
            if let Err(e) = self.activate() {
                log::error!("virtio-pci: activating device failed: {e}");
                self.irq.set_needs_reset();
            }
        }
    }

    /// Moves every enabled queue into the device.
    fn activate(&mut self) -> Result<(), ActivateError> {
        let event_idx = self.common.driver_features & VIRTIO_RING_F_EVENT_IDX != 0;
        let resume_at = self.resume_at.take();
        let mut queues = Vec::new();
        for (index, regs) in self.common.queues.iter().enumerate() {
            if !regs.enabled {
                continue;
            }
            let bad = |source| ActivateError::Queue { index, source };
            let mut queue = Queue::new(regs.max_size).map_err(bad)?;
            queue.try_set_size(regs.size).map_err(bad)?;
            queue
                .try_set_desc_table_address(GuestAddress(regs.desc))
                .map_err(bad)?;
            queue
                .try_set_avail_ring_address(GuestAddress(regs.driver))
                .map_err(bad)?;
            queue
                .try_set_used_ring_address(GuestAddress(regs.device))
                .map_err(bad)?;
            queue.set_event_idx(event_idx);
            if let Some(&at) = resume_at.as_ref().and_then(|r| r.get(index)) {
                // A restored snapshot: every request the guest had made available up to `at`
                // was completed before it was taken (the pause drains), so both indices resume
                // at the used ring's index.
                queue.set_next_avail(at);
                queue.set_next_used(at);
            }
            queue.set_ready(true);
            if !queue.is_valid(&self.mem) {
                return Err(ActivateError::BadConfig(format!(
                    "queue {index}: rings outside guest memory"
                )));
            }
            let kick = self.kicks[index]
                .try_clone()
                .map_err(|source| ActivateError::Os {
                    what: "cloning a kick eventfd",
                    source,
                })?;
            queues.push(ActivatedQueue {
                index: index as u16,
                queue,
                kick,
                inflight: None,
            });
        }
        let irq: Arc<dyn VirtioInterrupt> = self.irq.clone();
        self.device.activate(self.mem.clone(), irq, queues)
    }

    /// Device reset: stops the device, takes its queues back and clears the registers. While
    /// the device still has I/O in flight (which may write guest memory), the reset stays
    /// pending: `device_status` keeps its value, as virtio allows (the driver waits for it to
    /// read back 0), and reads of it retry.
    fn reset(&mut self) {
        match self.device.reset() {
            ResetOutcome::Inactive | ResetOutcome::Done(_) => self.finish_reset(),
            ResetOutcome::Pending { in_flight } => {
                log::error!(
                    "virtio-pci: reset waits for {in_flight} requests the backing store has not \
                     completed; the device stays in reset until they do"
                );
                self.reset_pending = Some(Instant::now());
            }
        }
    }

    /// Asks the device again whether a pending reset is done (at most every
    /// `RESET_RETRY_INTERVAL` unless `now`).
    fn retry_reset(&mut self, now: bool) {
        let Some(last) = self.reset_pending else {
            return;
        };
        if !now && last.elapsed() < RESET_RETRY_INTERVAL {
            return;
        }
        match self.device.reset() {
            ResetOutcome::Inactive | ResetOutcome::Done(_) => {
                log::info!("virtio-pci: pending reset done");
                self.reset_pending = None;
                self.finish_reset();
            }
            ResetOutcome::Pending { .. } => self.reset_pending = Some(Instant::now()),
        }
    }

    fn finish_reset(&mut self) {
        // The returned queues (and their kick clones) are dropped: the registers are the truth.
        for kick in &self.kicks {
            // Discard stale notifications; EAGAIN just means there were none.
            let _ = kick.read();
        }
        self.common.reset();
        self.irq.reset();
    }

    /// Registers the kicks at `base`'s notify addresses, replacing any earlier registration.
    fn register_ioevents(&mut self, base: u64) {
        if let Some(old) = self.registered_at.take() {
            for (q, kick) in self.kicks.iter().enumerate() {
                if let Err(e) = self
                    .ioevents
                    .unregister(kick, old + notify_offset(q as u16))
                {
                    log::warn!("virtio-pci: unregistering queue {q} ioeventfd failed: {e}");
                }
            }
        }
        for (q, kick) in self.kicks.iter().enumerate() {
            if let Err(e) = self.ioevents.register(kick, base + notify_offset(q as u16)) {
                log::warn!("virtio-pci: registering queue {q} ioeventfd failed: {e}");
            }
        }
        self.registered_at = Some(base);
    }

    fn bar0_read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let len = data.len() as u64;
        if self.reset_pending.is_some() && common_cfg::covers_status(offset, len) {
            self.retry_reset(false);
        }
        match offset {
            o if o + len <= COMMON_CFG_OFFSET + COMMON_CFG_LEN => self.common.read(o, data),
            ISR_OFFSET => data[0] = self.irq.take_isr(),
            o if (DEVICE_CFG_OFFSET..DEVICE_CFG_OFFSET + DEVICE_CFG_LEN).contains(&o) => {
                self.device.read_config(o - DEVICE_CFG_OFFSET, data)
            }
            o if (MSIX_TABLE_OFFSET..MSIX_PBA_OFFSET).contains(&o) => {
                self.msix.read_table(o - MSIX_TABLE_OFFSET, data)
            }
            o if o >= MSIX_PBA_OFFSET => self.msix.read_pba(o - MSIX_PBA_OFFSET, data),
            _ => {}
        }
    }

    fn bar0_write(&mut self, offset: u64, data: &[u8]) {
        let len = data.len() as u64;
        match offset {
            o if o + len <= COMMON_CFG_OFFSET + COMMON_CFG_LEN => {
                if let Some(value) = self.common.write(o, data) {
                    self.write_status(value);
                }
            }
            o if (DEVICE_CFG_OFFSET..DEVICE_CFG_OFFSET + DEVICE_CFG_LEN).contains(&o) => {
                self.device.write_config(o - DEVICE_CFG_OFFSET, data)
            }
            o if (NOTIFY_OFFSET..MSIX_TABLE_OFFSET).contains(&o) => {
                // Reaches us only when no ioeventfd caught it.
                let queue = (o - NOTIFY_OFFSET) / u64::from(NOTIFY_OFF_MULTIPLIER);
                if let Some(kick) = self.kicks.get(queue as usize) {
                    if let Err(e) = kick.write(1) {
                        log::warn!("virtio-pci: signalling queue {queue} failed: {e}");
                    }
                }
            }
            o if (MSIX_TABLE_OFFSET..MSIX_PBA_OFFSET).contains(&o) => {
                self.msix.write_table(o - MSIX_TABLE_OFFSET, data)
            }
            _ => {}
        }
    }

    fn in_bar0(offset: u64, len: usize) -> bool {
        offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= BAR0_SIZE && len > 0 && len <= 8)
    }
}

impl PciDevice for VirtioPciDevice {
    fn config_space(&self) -> &PciConfigSpace {
        &self.cfg
    }

    fn config_read(&mut self, offset: usize, data: &mut [u8]) {
        if !self.pci_cfg.hits_data(offset, data.len()) {
            self.cfg.read(offset, data);
            return;
        }
        let mut window = [0u8; 4];
        if let Some((bar_offset, len)) = self.pci_cfg.target(&self.cfg) {
            self.bar0_read(bar_offset, &mut window[..len]);
        }
        let start = self.pci_cfg.data_index(offset);
        let end = (start + data.len()).min(4);
        data.fill(0);
        data[..end - start].copy_from_slice(&window[start..end]);
    }

    fn config_write(&mut self, offset: usize, data: &[u8]) {
        if self.pci_cfg.hits_data(offset, data.len()) {
            let target = self.pci_cfg.target(&self.cfg);
            if let Some((bar_offset, len)) = target.filter(|_| self.pci_cfg.data_index(offset) == 0)
            {
                let mut window = [0u8; 4];
                let n = data.len().min(4);
                window[..n].copy_from_slice(&data[..n]);
                self.bar0_write(bar_offset, &window[..len]);
            }
            return;
        }
        self.cfg.write(offset, data);
        self.msix.config_written(&self.cfg, offset, data.len());
    }

    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        if bar != VIRTIO_BAR || !Self::in_bar0(offset, data.len()) {
            data.fill(0xff);
            return;
        }
        self.bar0_read(offset, data);
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        if bar == VIRTIO_BAR && Self::in_bar0(offset, data.len()) {
            self.bar0_write(offset, data);
        }
    }

    fn bar_moved(&mut self, bar: usize, _old: u64, new: u64) {
        if bar == VIRTIO_BAR {
            self.register_ioevents(new);
        }
    }
}

impl Drop for VirtioPciDevice {
    fn drop(&mut self) {
        if let Some(base) = self.registered_at {
            for (q, kick) in self.kicks.iter().enumerate() {
                let _ = self
                    .ioevents
                    .unregister(kick, base + notify_offset(q as u16));
            }
        }
    }
}

/// The PCI class code for a virtio device type.
fn class_code(device_type: u32) -> u32 {
    match device_type {
        crate::virtio::device_type::BLOCK => 0x01_80_00,
        _ => 0xff_00_00,
    }
}

#[cfg(test)]
mod tests;
