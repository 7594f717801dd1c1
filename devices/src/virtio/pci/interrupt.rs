//! The virtio-pci side of interrupts: [`VirtioInterrupt`] on top of MSI-X, plus the state the
//! interrupt path shares with the register file (device status, ISR, config generation and the
//! queue-to-vector map), all atomics so the dataplane never takes a lock.

use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};
use std::sync::Arc;

use crate::pci::MsixInterrupts;
use crate::virtio::{status, VirtioInterrupt};

/// `queue_msix_vector` / `config_msix_vector` value meaning "no vector".
pub const NO_VECTOR: u16 = 0xffff;
/// ISR bit: a queue interrupt.
const ISR_QUEUE: u8 = 1;
/// ISR bit: a configuration change.
const ISR_CONFIG: u8 = 2;

/// Interrupt delivery of one virtio-pci function.
#[derive(Debug)]
pub struct VirtioPciInterrupt {
    msix: Arc<MsixInterrupts>,
    config_vector: AtomicU16,
    queue_vectors: Box<[AtomicU16]>,
    status: AtomicU8,
    isr: AtomicU8,
    config_generation: AtomicU8,
}

impl VirtioPciInterrupt {
    /// Delivery through `msix` for `num_queues` queues, every vector unassigned.
    pub fn new(msix: Arc<MsixInterrupts>, num_queues: usize) -> Self {
        Self {
            msix,
            config_vector: AtomicU16::new(NO_VECTOR),
            queue_vectors: (0..num_queues).map(|_| AtomicU16::new(NO_VECTOR)).collect(),
            status: AtomicU8::new(0),
            isr: AtomicU8::new(0),
            config_generation: AtomicU8::new(0),
        }
    }

    /// The device status register.
    pub fn status(&self) -> u8 {
        self.status.load(Ordering::SeqCst)
    }

    pub(super) fn set_status(&self, value: u8) {
        self.status.store(value, Ordering::SeqCst);
    }

    /// Reads and clears the ISR.
    pub(super) fn take_isr(&self) -> u8 {
        self.isr.swap(0, Ordering::SeqCst)
    }

    pub(super) fn config_generation(&self) -> u8 {
        self.config_generation.load(Ordering::SeqCst)
    }

    /// Sets the config generation (a restored snapshot's).
    pub(super) fn set_config_generation(&self, generation: u8) {
        self.config_generation.store(generation, Ordering::SeqCst);
    }

    pub(super) fn config_vector(&self) -> u16 {
        self.config_vector.load(Ordering::Relaxed)
    }

    pub(super) fn queue_vector(&self, queue: usize) -> u16 {
        self.queue_vectors
            .get(queue)
            .map_or(NO_VECTOR, |v| v.load(Ordering::Relaxed))
    }

    /// Assigns the config vector; an out-of-range vector becomes [`NO_VECTOR`].
    pub(super) fn set_config_vector(&self, vector: u16) {
        self.config_vector
            .store(self.checked(vector), Ordering::Relaxed);
    }

    /// Assigns a queue's vector; an out-of-range vector becomes [`NO_VECTOR`].
    pub(super) fn set_queue_vector(&self, queue: usize, vector: u16) {
        if let Some(v) = self.queue_vectors.get(queue) {
            v.store(self.checked(vector), Ordering::Relaxed);
        }
    }

    /// Back to the power-on state: no vectors, status and ISR clear.
    pub(super) fn reset(&self) {
        self.config_vector.store(NO_VECTOR, Ordering::Relaxed);
        for v in self.queue_vectors.iter() {
            v.store(NO_VECTOR, Ordering::Relaxed);
        }
        self.status.store(0, Ordering::SeqCst);
        self.isr.store(0, Ordering::SeqCst);
    }

    fn checked(&self, vector: u16) -> u16 {
        if usize::from(vector) < self.msix.len() {
            vector
        } else {
            NO_VECTOR
        }
    }
}

impl VirtioInterrupt for VirtioPciInterrupt {
    fn notify_queue(&self, queue: u16) -> std::io::Result<()> {
        match self.queue_vector(usize::from(queue)) {
            NO_VECTOR => {
                self.isr.fetch_or(ISR_QUEUE, Ordering::SeqCst);
                Ok(())
            }
            vector => self.msix.trigger(vector),
        }
    }

    fn notify_config(&self) -> std::io::Result<()> {
        self.config_generation.fetch_add(1, Ordering::SeqCst);
        self.isr.fetch_or(ISR_CONFIG, Ordering::SeqCst);
        match self.config_vector() {
            NO_VECTOR => Ok(()),
            vector => self.msix.trigger(vector),
        }
    }

    fn set_needs_reset(&self) {
        let old = self
            .status
            .fetch_or(status::DEVICE_NEEDS_RESET, Ordering::SeqCst);
        if old & status::DRIVER_OK != 0 {
            if let Err(e) = self.notify_config() {
                log::warn!("Signalling DEVICE_NEEDS_RESET failed: {e}");
            }
        }
    }
}
