//! The vhost-user transport of a [`VirtioDevice`]: the backend side of the protocol's messages
//! (through rust-vmm's `vhost` crate, which frames them and passes the fds), turned into what the
//! virtio-pci transport does with register writes: features acked, config read, queues activated
//! onto the device with their kick eventfds, and reset (in-flight I/O drained) when a ring stops,
//! the memory changes or the frontend goes away.
//!
//! Rings start and stop one at a time in vhost-user, while a `VirtioDevice` activates all its
//! queues at once; so every change of the set of running rings resets the device (its handlers
//! hand the queues back with their indexes, once their I/O is reaped) and activates it again
//! with the rings that should run.
//!
//! With `INFLIGHT_SHMFD` each ring records its heads in flight in the frontend's region
//! (`SET_INFLIGHT_FD`); a ring that starts on a region it has not read yet resumes from it: the
//! heads a backend before this one left in flight are resubmitted first, and the avail ring is
//! read from the used index plus their count (the frontend's base counts only completions when
//! the backend died).

use std::fs::File;
use std::os::unix::io::{FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVirtioFeatures,
    VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{Error as ProtocolError, GpuBackend, VhostUserBackendReqHandlerMut};
use vhost::VhostUserMemoryRegionBase;
use vmm_sys_util::eventfd::EventFd;

use super::inflight::{self, InflightRegion};
use super::interrupt::CallFds;
use super::memory::MemoryTable;
use super::ring::{RingAddrs, RingState};
use super::VhostUserError;
use crate::virtio::inflight::InflightQueue;
use crate::virtio::{
    ActivatedQueue, ResetOutcome, VirtioDevice, VirtioInterrupt, VIRTIO_RING_F_EVENT_IDX,
};

type Result<T> = std::result::Result<T, ProtocolError>;

/// Most bytes of config space one `GET_CONFIG` may ask for (the protocol's limit).
const MAX_CONFIG_BYTES: u32 = 256;
/// How long stopping the device waits for in-flight I/O before giving up on the message.
const STOP_WAIT: Duration = Duration::from_secs(30);
/// The pause between two looks at a device that is still draining.
const STOP_RETRY: Duration = Duration::from_millis(5);

/// The protocol features the backend offers (`REPLY_ACK` is added by the `vhost` crate).
pub fn protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::RESET_DEVICE
        | VhostUserProtocolFeatures::INFLIGHT_SHMFD
}

/// A virtio device served over vhost-user, one frontend connection at a time.
pub struct VhostUserDevice {
    name: String,
    device: Box<dyn VirtioDevice>,
    acked_features: u64,
    acked_protocol: u64,
    memory: Option<MemoryTable>,
    /// The frontend's inflight region (`SET_INFLIGHT_FD`).
    inflight: Option<InflightRegion>,
    rings: Vec<RingState>,
    calls: Arc<CallFds>,
    /// The rings inside the device now (ascending), empty while it is inactive.
    running: Vec<usize>,
}

impl std::fmt::Debug for VhostUserDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostUserDevice")
            .field("name", &self.name)
            .field("running", &self.running)
            .finish()
    }
}

fn handler_error(e: VhostUserError) -> ProtocolError {
    log::warn!("vhost-user: {e}");
    ProtocolError::ReqHandlerError(std::io::Error::other(e))
}

/// An eventfd from the file the frontend sent.
fn eventfd(file: File) -> EventFd {
    // SAFETY: `into_raw_fd` gives up the file's sole ownership of the descriptor, which the
    // EventFd takes over (and closes on drop); it is the eventfd the frontend passed.
    unsafe { EventFd::from_raw_fd(file.into_raw_fd()) }
}

impl VhostUserDevice {
    /// Serves `device` (named `name` in the log).
    pub fn new(name: &str, device: Box<dyn VirtioDevice>) -> Self {
        let rings = device.queue_max_sizes().len();
        Self {
            name: name.to_owned(),
            device,
            acked_features: 0,
            acked_protocol: 0,
            memory: None,
            inflight: None,
            rings: (0..rings).map(|_| RingState::default()).collect(),
            calls: Arc::new(CallFds::new(rings)),
            running: Vec::new(),
        }
    }

    /// The rings running in the device.
    pub fn running_rings(&self) -> &[usize] {
        &self.running
    }

    /// The frontend went away: stop the device (every request reaped), unmap its memory, close
    /// its fds, forget its state; the next connection starts afresh.
    pub fn disconnect(&mut self) {
        let mut waited = Duration::ZERO;
        // The memory stays mapped (the handlers hold it) until every request is reaped, so a
        // slow store only delays the next connection.
        while let Err(e) = self.stop_device() {
            waited += STOP_WAIT;
            log::error!(
                "vhost-user {}: disconnect: {e} (waited {}s so far)",
                self.name,
                waited.as_secs()
            );
        }
        self.forget();
    }

    fn forget(&mut self) {
        self.memory = None;
        self.inflight = None;
        for r in &mut self.rings {
            r.clear();
        }
        self.calls.clear();
        self.acked_features = 0;
        self.acked_protocol = 0;
    }

    fn ring(&mut self, index: u32) -> Result<&mut RingState> {
        let i = usize::try_from(index).map_err(|_| ProtocolError::InvalidParam)?;
        self.rings.get_mut(i).ok_or(ProtocolError::InvalidParam)
    }

    /// Resets the device if it runs, waiting (bounded) for its I/O; the rings it hands back keep
    /// their position in `base`.
    fn stop_device(&mut self) -> std::result::Result<(), VhostUserError> {
        if self.running.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            match self.device.reset() {
                ResetOutcome::Inactive => break,
                ResetOutcome::Done(queues) => {
                    for q in queues {
                        if let Some(r) = self.rings.get_mut(usize::from(q.index)) {
                            r.base = virtio_queue::QueueT::next_avail(&q.queue);
                            r.inflight = q.inflight;
                        }
                    }
                    break;
                }
                ResetOutcome::Pending { in_flight } => {
                    if start.elapsed() >= STOP_WAIT {
                        return Err(VhostUserError::Draining { in_flight });
                    }
                    std::thread::sleep(STOP_RETRY);
                }
            }
        }
        self.running.clear();
        Ok(())
    }

    /// Brings the device in line with the rings that should run: stops it when the set changed
    /// (or `restart`: the memory or features changed under running rings) and activates it
    /// with the new set.
    fn reconcile(&mut self, restart: bool) -> std::result::Result<(), VhostUserError> {
        let wanted: Vec<usize> = match self.memory {
            Some(_) => (0..self.rings.len())
                .filter(|&i| self.rings[i].startable())
                .collect(),
            None => Vec::new(),
        };
        // Nothing changed, or a restart with nothing to run.
        if wanted == self.running && (!restart || wanted.is_empty()) {
            return Ok(());
        }
        self.stop_device()?;
        let Some(table) = self.memory.as_ref() else {
            return Ok(());
        };
        if wanted.is_empty() {
            return Ok(());
        }
        // A file the frontend shrank since SET_MEM_TABLE would raise SIGBUS on first touch.
        table.check_files()?;
        let event_idx = self.acked_features & VIRTIO_RING_F_EVENT_IDX != 0;
        let max_sizes = self.device.queue_max_sizes();
        let mut queues = Vec::with_capacity(wanted.len());
        // Rings with heads to resubmit: nothing else may kick them.
        let mut resubmitting = Vec::new();
        for &i in &wanted {
            let max = max_sizes.get(i).copied().unwrap_or(0);
            let (mut queue, kick) = self.rings[i].to_queue(i, max, event_idx, table)?;
            let inflight = ring_inflight(
                &self.name,
                &mut self.rings[i],
                self.inflight.as_ref(),
                i,
                &mut queue,
            );
            if inflight
                .as_ref()
                .is_some_and(|t| t.pending_resubmissions() > 0)
            {
                resubmitting.push(i);
            }
            queues.push(ActivatedQueue {
                index: u16::try_from(i).map_err(|_| VhostUserError::Ring {
                    index: i,
                    why: "index out of range".into(),
                })?,
                queue,
                kick,
                inflight,
            });
        }
        let interrupt: Arc<dyn VirtioInterrupt> = self.calls.clone();
        self.device
            .activate(table.memory().clone(), interrupt, queues)
            .map_err(VhostUserError::Activate)?;
        for i in resubmitting {
            // The guest already kicked for these requests, to the backend that went away.
            if let Some(Err(e)) = self.rings[i].kick.as_ref().map(|k| k.write(1)) {
                log::warn!("vhost-user {}: ring {i}: kick: {e}", self.name);
            }
        }
        log::info!(
            "vhost-user {}: rings {wanted:?} running (features {:#x})",
            self.name,
            self.acked_features
        );
        self.running = wanted;
        Ok(())
    }
}

/// Ring `i`'s (`ring`'s) inflight tracking as it starts as `queue`: the tracking it had when it
/// last stopped, or (the first start on `region`, or the ring resized) what the region says,
/// which may move `queue`'s next avail index past the heads to resubmit. `None` without a
/// region, or when the region does not cover the ring (it then runs untracked).
fn ring_inflight(
    name: &str,
    ring: &mut RingState,
    region: Option<&InflightRegion>,
    i: usize,
    queue: &mut virtio_queue::Queue,
) -> Option<InflightQueue> {
    use virtio_queue::QueueT;
    let size = queue.size();
    if let Some(kept) = ring.inflight.take() {
        if kept.ring_size() == size {
            return Some(kept);
        }
    }
    let region = region?;
    let Some(queue_region) = region.queue(i) else {
        log::warn!(
            "vhost-user {name}: ring {i} is not in the inflight region ({} queues): untracked",
            region.num_queues()
        );
        return None;
    };
    let used = queue.next_used();
    match InflightQueue::recover(queue_region, size, used) {
        Ok((tracking, next_avail, found)) => {
            if let Some(at) = next_avail {
                log::info!(
                    "vhost-user {name}: ring {i}: {} requests resubmitted from the inflight \
                     region (avail index {at}, the frontend's base {}, used index {used}; {} of \
                     the last batch and {} bad flags cleared)",
                    found.resubmitted,
                    queue.next_avail(),
                    found.batch_cleared,
                    found.garbage
                );
                queue.set_next_avail(at);
            }
            Some(tracking)
        }
        Err(e) => {
            log::warn!("vhost-user {name}: ring {i}: untracked: {e}");
            None
        }
    }
}

impl VhostUserBackendReqHandlerMut for VhostUserDevice {
    fn set_owner(&mut self) -> Result<()> {
        Ok(())
    }

    fn reset_owner(&mut self) -> Result<()> {
        self.reset_device()
    }

    fn reset_device(&mut self) -> Result<()> {
        self.stop_device().map_err(handler_error)?;
        let protocol = self.acked_protocol;
        self.forget();
        // The reset keeps the protocol state (the spec's RESET_DEVICE).
        self.acked_protocol = protocol;
        Ok(())
    }

    fn get_features(&mut self) -> Result<u64> {
        Ok(self.device.features() | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits())
    }

    fn set_features(&mut self, features: u64) -> Result<()> {
        let offered = self.get_features()?;
        if features & !offered != 0 {
            return Err(ProtocolError::InvalidParam);
        }
        let changed = features != self.acked_features;
        self.acked_features = features;
        self.device.ack_features(features);
        // Without PROTOCOL_FEATURES every ring is enabled from the start (the spec's ring states).
        if features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() == 0 {
            for r in &mut self.rings {
                r.enabled = true;
            }
        }
        self.reconcile(changed).map_err(handler_error)
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        postcopy_listening: Option<bool>,
    ) -> Result<Option<Vec<VhostUserMemoryRegionBase>>> {
        if postcopy_listening.is_some() {
            return Err(ProtocolError::InvalidOperation("postcopy is not supported"));
        }
        // Stop first: the running queues' pointers belong to the old table.
        self.stop_device().map_err(handler_error)?;
        self.memory = Some(MemoryTable::map(ctx, files).map_err(handler_error)?);
        self.reconcile(true).map_err(handler_error)?;
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> Result<()> {
        let max = usize::try_from(index)
            .ok()
            .and_then(|i| self.device.queue_max_sizes().get(i).copied())
            .ok_or(ProtocolError::InvalidParam)?;
        let size = u16::try_from(num).map_err(|_| ProtocolError::InvalidParam)?;
        if size == 0 || !size.is_power_of_two() || size > max {
            return Err(ProtocolError::InvalidParam);
        }
        self.ring(index)?.size = size;
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> Result<()> {
        self.ring(index)?.addrs = Some(RingAddrs {
            desc: descriptor,
            avail: available,
            used,
        });
        Ok(())
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> Result<()> {
        // Split rings: the next available index, 16 bits.
        self.ring(index)?.base = u16::try_from(base).map_err(|_| ProtocolError::InvalidParam)?;
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> Result<VhostUserVringState> {
        // The spec: stop the ring, answer with where it stopped.
        let ring = self.ring(index)?;
        ring.kick = None;
        let i = usize::try_from(index).map_err(|_| ProtocolError::InvalidParam)?;
        self.calls.set(i, None);
        if let Err(e) = self.reconcile(false) {
            // No answer the frontend could trust: the connection ends (and the disconnect
            // waits for the device to drain).
            log::error!("vhost-user {}: stopping ring {index}: {e}", self.name);
            return Err(ProtocolError::BackendInternalError);
        }
        let base = self.ring(index)?.base;
        Ok(VhostUserVringState::new(index, u32::from(base)))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let i = usize::from(index);
        let running = self.running.contains(&i);
        // No fd (the frontend would poll): unsupported, the ring does not start.
        self.ring(u32::from(index))?.kick = fd.map(eventfd);
        // A new kick fd for a running ring: restart it so the iothread watches the new one.
        self.reconcile(running).map_err(handler_error)
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        if self.calls.set(usize::from(index), fd.map(eventfd)) {
            Ok(())
        } else {
            Err(ProtocolError::InvalidParam)
        }
    }

    fn set_vring_err(&mut self, index: u8, _fd: Option<File>) -> Result<()> {
        // Errors are reported by stopping the queue; the fd is closed at once.
        self.ring(u32::from(index)).map(|_| ())
    }

    fn get_protocol_features(&mut self) -> Result<VhostUserProtocolFeatures> {
        Ok(protocol_features())
    }

    fn set_protocol_features(&mut self, features: u64) -> Result<()> {
        if features & !protocol_features().bits() != 0 {
            return Err(ProtocolError::InvalidParam);
        }
        self.acked_protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> Result<u64> {
        Ok(self.rings.len() as u64)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> Result<()> {
        self.ring(index)?.enabled = enable;
        self.reconcile(false).map_err(handler_error)
    }

    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _flags: VhostUserConfigFlags,
    ) -> Result<Vec<u8>> {
        if size > MAX_CONFIG_BYTES || offset.saturating_add(size) > MAX_CONFIG_BYTES {
            return Err(ProtocolError::InvalidParam);
        }
        let mut data = vec![0u8; size as usize];
        self.device.read_config(u64::from(offset), &mut data);
        Ok(data)
    }

    fn set_config(&mut self, offset: u32, buf: &[u8], _flags: VhostUserConfigFlags) -> Result<()> {
        self.device.write_config(u64::from(offset), buf);
        Ok(())
    }

    fn set_gpu_socket(&mut self, _gpu_backend: GpuBackend) -> Result<()> {
        Err(ProtocolError::InvalidOperation("not a GPU device"))
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> Result<File> {
        Err(ProtocolError::InvalidOperation("no shared objects"))
    }

    fn get_inflight_fd(
        &mut self,
        inflight: &VhostUserInflight,
    ) -> Result<(VhostUserInflight, File)> {
        inflight::create(inflight, self.rings.len()).map_err(handler_error)
    }

    fn set_inflight_fd(&mut self, inflight: &VhostUserInflight, file: File) -> Result<()> {
        let region =
            InflightRegion::map(inflight, file, self.rings.len()).map_err(handler_error)?;
        // Running rings track into the old region: stop them and read every ring afresh from
        // the new one as it starts.
        self.stop_device().map_err(handler_error)?;
        for r in &mut self.rings {
            r.inflight = None;
        }
        log::info!(
            "vhost-user {}: inflight region of {} queues of {} mapped",
            self.name,
            inflight.num_queues,
            inflight.queue_size
        );
        self.inflight = Some(region);
        self.reconcile(true).map_err(handler_error)
    }

    fn get_max_mem_slots(&mut self) -> Result<u64> {
        Err(ProtocolError::InvalidOperation(
            "CONFIGURE_MEM_SLOTS is not offered",
        ))
    }

    fn add_mem_region(
        &mut self,
        _region: &VhostUserSingleMemoryRegion,
        _fd: File,
        _postcopy_listening: Option<bool>,
    ) -> Result<Option<VhostUserMemoryRegionBase>> {
        Err(ProtocolError::InvalidOperation(
            "CONFIGURE_MEM_SLOTS is not offered",
        ))
    }

    fn remove_mem_region(&mut self, _region: &VhostUserSingleMemoryRegion) -> Result<()> {
        Err(ProtocolError::InvalidOperation(
            "CONFIGURE_MEM_SLOTS is not offered",
        ))
    }

    fn set_device_state_fd(
        &mut self,
        _direction: VhostTransferStateDirection,
        _phase: VhostTransferStatePhase,
        _fd: File,
    ) -> Result<Option<File>> {
        Err(ProtocolError::InvalidOperation(
            "DEVICE_STATE is not offered",
        ))
    }

    fn check_device_state(&mut self) -> Result<()> {
        Err(ProtocolError::InvalidOperation(
            "DEVICE_STATE is not offered",
        ))
    }

    fn get_shmem_config(&mut self) -> Result<VhostUserShMemConfig> {
        Err(ProtocolError::InvalidOperation("SHMEM is not offered"))
    }

    fn set_log_base(&mut self, _log: &VhostUserLog, _file: File) -> Result<()> {
        Err(ProtocolError::InvalidOperation("LOG_SHMFD is not offered"))
    }
}
