//! What the frontend told the backend about one ring (`SET_VRING_NUM/ADDR/BASE/KICK/ENABLE`),
//! kept between messages and turned into a [`virtio_queue::Queue`] when the ring starts, and its
//! inflight tracking while it is stopped.

use std::sync::atomic::Ordering;

use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::memory::MemoryTable;
use super::VhostUserError;
use crate::virtio::inflight::InflightQueue;

/// The ring's areas as the frontend's virtual addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingAddrs {
    /// Descriptor table.
    pub desc: u64,
    /// Available (driver) ring.
    pub avail: u64,
    /// Used (device) ring.
    pub used: u64,
}

/// One ring's state on the backend side.
#[derive(Debug, Default)]
pub struct RingState {
    /// Entries (`SET_VRING_NUM`), 0 until set.
    pub size: u16,
    /// Ring areas (`SET_VRING_ADDR`).
    pub addrs: Option<RingAddrs>,
    /// The next available index to process (`SET_VRING_BASE`; updated when the ring stops).
    pub base: u16,
    /// The kick eventfd (`SET_VRING_KICK`); the device gets a duplicate while the ring runs.
    pub kick: Option<EventFd>,
    /// `SET_VRING_ENABLE` (or every ring, at `SET_FEATURES` without `PROTOCOL_FEATURES`).
    pub enabled: bool,
    /// The ring's inflight tracking while it is stopped (it goes into the device with the
    /// queue and comes back at reset); `None` until the ring first starts on an inflight
    /// region, or after `SET_INFLIGHT_FD` (it is then read from the new region).
    pub inflight: Option<InflightQueue>,
}

impl RingState {
    /// Whether the ring should be processing: configured, kicked into life and enabled.
    pub fn startable(&self) -> bool {
        self.size > 0 && self.addrs.is_some() && self.kick.is_some() && self.enabled
    }

    /// Forgets everything (a device reset or a new connection).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The ring as a ready queue on `table`'s memory: addresses translated to guest-physical,
    /// `next_avail` from the base, `next_used` from the used ring's index in memory (what the
    /// device published before it stopped, or the driver's 0), and its kick eventfd duplicated.
    /// Fails, touching no memory, when an area is not whole inside one region.
    pub fn to_queue(
        &self,
        index: usize,
        max_size: u16,
        event_idx: bool,
        table: &MemoryTable,
    ) -> Result<(Queue, EventFd), VhostUserError> {
        let bad = |what: &str| VhostUserError::Ring {
            index,
            why: what.to_owned(),
        };
        let addrs = self.addrs.ok_or_else(|| bad("no ring addresses"))?;
        let gpa = |va: u64, what: &str| {
            table
                .frontend_va_to_gpa(va)
                .ok_or_else(|| bad(&format!("{what} at {va:#x} is in no memory region")))
        };
        let (desc, avail, used) = (
            gpa(addrs.desc, "descriptor table")?,
            gpa(addrs.avail, "available ring")?,
            gpa(addrs.used, "used ring")?,
        );
        let refused = |what: String| {
            move |source| VhostUserError::RingConfig {
                index,
                what,
                source,
            }
        };
        let mut queue = Queue::new(max_size).map_err(refused(format!("queue of {max_size}")))?;
        queue
            .try_set_size(self.size)
            .map_err(refused(format!("size {}", self.size)))?;
        queue
            .try_set_desc_table_address(vm_memory::GuestAddress(desc))
            .map_err(refused(format!("descriptor table {desc:#x}")))?;
        queue
            .try_set_avail_ring_address(vm_memory::GuestAddress(avail))
            .map_err(refused(format!("available ring {avail:#x}")))?;
        queue
            .try_set_used_ring_address(vm_memory::GuestAddress(used))
            .map_err(refused(format!("used ring {used:#x}")))?;
        queue.set_next_avail(self.base);
        queue.set_ready(true);
        // Every area whole inside one mapped region before anything reads it (a ring that
        // starts in a region and runs past its end is refused here, not found out by the
        // device).
        if !queue.is_valid(table.memory()) {
            return Err(bad(&format!(
                "size {}: descriptor table {desc:#x}, available ring {avail:#x} or used ring \
                 {used:#x} runs past the end of its memory region",
                self.size
            )));
        }
        // An unreadable used ring leaves 0: the queue handler finds the ring unusable and stops.
        let next_used = queue
            .used_idx(table.memory(), Ordering::Acquire)
            .map(|w| w.0)
            .unwrap_or(0);
        queue.set_next_used(next_used);
        queue.set_event_idx(event_idx);
        let kick = self
            .kick
            .as_ref()
            .ok_or_else(|| bad("no kick eventfd"))?
            .try_clone()
            .map_err(|source| VhostUserError::RingKick { index, source })?;
        Ok((queue, kick))
    }
}
