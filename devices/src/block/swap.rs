//! A drive's backing file as the device model and the VMM share it, and the live swap of it
//! ([`DriveSwap`], `PATCH /drives/{id}` with `path_on_host`): the file new activations use, the
//! capacity the config space and the queues see, and the interrupt that tells the guest the
//! config changed.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dataplane::{IoThread, IoThreadError, SwapOutcome};

use crate::virtio::VirtioInterrupt;

/// The backing file of one drive and what follows from it.
pub(super) struct DriveBacking {
    /// The file each activation gives its queues (a duplicate per queue).
    file: Mutex<File>,
    /// Capacity in 512-byte sectors: the config space's and, at each activation or resume, the
    /// queues' bound.
    capacity_sectors: Arc<AtomicU64>,
    /// The transport's interrupt, known from the first activation on.
    interrupt: Mutex<Option<Arc<dyn VirtioInterrupt>>>,
    /// Held by an activation and by a whole swap: an activation never starts from the file a
    /// swap is replacing.
    order: Mutex<()>,
}

impl DriveBacking {
    pub(super) fn new(file: File, capacity_sectors: u64) -> Arc<Self> {
        Arc::new(Self {
            file: Mutex::new(file),
            capacity_sectors: Arc::new(AtomicU64::new(capacity_sectors)),
            interrupt: Mutex::new(None),
            order: Mutex::new(()),
        })
    }

    /// The capacity now.
    pub(super) fn capacity_sectors(&self) -> u64 {
        self.capacity_sectors.load(Ordering::Acquire)
    }

    /// The capacity as the queues follow it.
    pub(super) fn capacity_source(&self) -> Arc<AtomicU64> {
        self.capacity_sectors.clone()
    }

    /// A duplicate of the current file, for one queue's engine.
    pub(super) fn dup_file(&self) -> std::io::Result<File> {
        self.file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_clone()
    }

    /// Keeps the transport's interrupt for the config-change notification of a swap.
    pub(super) fn set_interrupt(&self, interrupt: Arc<dyn VirtioInterrupt>) {
        *self.interrupt.lock().unwrap_or_else(|p| p.into_inner()) = Some(interrupt);
    }

    /// Serialises an activation with swaps.
    pub(super) fn order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a swap done on the iothread, before the queues resume: the new file for later
    /// activations, the new capacity, and the guest told (config generation and the config
    /// MSI-X vector, virtio 1.2 4.1.4.3 and 4.1.5.3).
    fn swapped(&self, file: File, capacity_sectors: u64) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = file;
        self.capacity_sectors
            .store(capacity_sectors, Ordering::Release);
        let interrupt = self
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(irq) = interrupt {
            if let Err(e) = irq.notify_config() {
                log::warn!("virtio-blk: config-change interrupt after a swap failed: {e}");
            }
        }
    }
}

/// Why a swap did not happen; the drive keeps its old file in every case but `NotResponding`.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// The old file's requests did not complete in time: the swap was given up.
    #[error(
        "{in_flight} requests on the old file did not complete within {} ms; the drive keeps \
         its old file",
        wait.as_millis()
    )]
    TimedOut {
        /// Requests still in flight.
        in_flight: usize,
        /// How long the swap waited.
        wait: Duration,
    },
    /// Duplicating the new file failed.
    #[error("duplicating the new file: {0}")]
    Dup(#[source] std::io::Error),
    /// The iothread refused the swap (an engine could not be built on the new file; every
    /// queue kept the old one) or did not answer.
    #[error(transparent)]
    IoThread(#[from] IoThreadError),
}

/// The VMM's handle on a drive's backing file: swaps it while the guest runs.
pub struct DriveSwap {
    pub(super) owner: u64,
    pub(super) drive_id: String,
    pub(super) backing: Arc<DriveBacking>,
    pub(super) iothread: Arc<IoThread>,
}

impl std::fmt::Debug for DriveSwap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveSwap")
            .field("drive_id", &self.drive_id)
            .finish()
    }
}

impl DriveSwap {
    /// The drive's capacity now, in 512-byte sectors.
    pub fn capacity_sectors(&self) -> u64 {
        self.backing.capacity_sectors()
    }

    /// Puts `file` (opened by the caller as the drive's options say, `capacity_sectors` long)
    /// under the drive: its queues stop taking requests, those in flight complete on the old
    /// file (waiting at most `wait`), every queue's engine is rebuilt on `file`, the capacity
    /// and the config generation change and the config interrupt fires, then the queues
    /// resume with what the guest queued meanwhile. An inactive device only takes the new
    /// file for its next activation (and the guest is told).
    /// Returns the requests that were in flight on the old file when the swap began.
    pub fn swap(
        &self,
        file: File,
        capacity_sectors: u64,
        wait: Duration,
    ) -> Result<usize, SwapError> {
        let _order = self.backing.order();
        let for_queues = file.try_clone().map_err(SwapError::Dup)?;
        let backing = self.backing.clone();
        let hook = Box::new(move || backing.swapped(file, capacity_sectors));
        match self
            .iothread
            .swap_file(self.owner, for_queues, wait, hook)?
        {
            SwapOutcome::Swapped { drained } => {
                log::info!(
                    "virtio-blk {}: backing file swapped, {capacity_sectors} sectors; {drained} \
                     requests in flight completed on the old file first",
                    self.drive_id
                );
                Ok(drained)
            }
            SwapOutcome::TimedOut { in_flight } => Err(SwapError::TimedOut { in_flight, wait }),
        }
    }
}
