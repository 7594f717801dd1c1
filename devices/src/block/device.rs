//! The virtio-blk device model: features, config space, and activation, which moves each queue
//! with a fresh I/O engine onto the drive's iothread; reset takes them back after in-flight I/O
//! has drained. The backing file and capacity are shared with the drive's [`DriveSwap`].

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

use dataplane::engine::EngineOptions;
use dataplane::{Detach, IoThread};

use super::config::{self, BlockGeometry, CONFIG_LEN};
use super::features;
use super::queue::{next_owner_id, BlockQueueHandler};
use super::request::DiskLimits;
use super::stats::QueueStats;
use super::swap::{DriveBacking, DriveSwap};
use super::throttle::DriveRateLimits;
use super::ID_BYTES;
use crate::virtio::{
    device_type, ActivateError, ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice,
    VirtioInterrupt, VIRTIO_F_VERSION_1, VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};

/// How long the guest's reset waits (its vCPU blocked) for in-flight I/O before the reset is
/// left pending.
const RESET_DRAIN_WAIT: Duration = Duration::from_millis(500);

/// What the VMM decided about a drive.
#[derive(Debug)]
pub struct BlockDeviceConfig {
    /// The drive id (becomes the GET_ID serial, truncated to 20 bytes).
    pub drive_id: String,
    /// The opened backing file.
    pub file: File,
    /// Refuse writes and offer VIRTIO_BLK_F_RO.
    pub read_only: bool,
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Number of queues (MQ is offered when > 1).
    pub num_queues: u16,
    /// Maximum size of each queue.
    pub queue_size: u16,
    /// The engine each queue gets (`depth` is replaced by each queue's size).
    pub engine: EngineOptions,
    /// The rate limiters that govern the drive (inactive ones by default).
    pub rate_limits: DriveRateLimits,
}

/// A virtio-blk device.
pub struct VirtioBlock {
    owner: u64,
    drive_id: String,
    backing: Arc<DriveBacking>,
    engine: EngineOptions,
    queue_sizes: Vec<u16>,
    offered: u64,
    acked: u64,
    config_space: [u8; CONFIG_LEN],
    limits: Arc<DiskLimits>,
    rate_limits: DriveRateLimits,
    stats: Vec<Arc<QueueStats>>,
    iothread: Arc<IoThread>,
    active: bool,
    /// A reset is waiting for in-flight I/O (the handlers are still on the iothread).
    resetting: bool,
    /// Where the queues come back when their handlers leave the iothread.
    returned: Option<Receiver<ActivatedQueue>>,
}

impl std::fmt::Debug for VirtioBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioBlock")
            .field("drive_id", &self.drive_id)
            .finish()
    }
}

impl VirtioBlock {
    /// A device for `cfg`, served by `iothread`.
    pub fn new(cfg: BlockDeviceConfig, iothread: Arc<IoThread>) -> Self {
        let mut serial = [0u8; ID_BYTES];
        let id = cfg.drive_id.as_bytes();
        let n = id.len().min(ID_BYTES);
        serial[..n].copy_from_slice(&id[..n]);
        let mut offered = VIRTIO_F_VERSION_1
            | VIRTIO_RING_F_EVENT_IDX
            | VIRTIO_RING_F_INDIRECT_DESC
            | features::SEG_MAX
            | features::BLK_SIZE
            | features::FLUSH
            | features::DISCARD
            | features::WRITE_ZEROES;
        if cfg.read_only {
            offered |= features::RO;
        }
        if cfg.num_queues > 1 {
            offered |= features::MQ;
        }
        let geometry = BlockGeometry {
            capacity_sectors: cfg.capacity_sectors,
            blk_size: 512,
            num_queues: cfg.num_queues,
        };
        Self {
            owner: next_owner_id(),
            drive_id: cfg.drive_id,
            backing: DriveBacking::new(cfg.file, cfg.capacity_sectors),
            engine: cfg.engine,
            queue_sizes: vec![cfg.queue_size; usize::from(cfg.num_queues)],
            offered,
            acked: 0,
            config_space: config::encode(&geometry),
            limits: Arc::new(DiskLimits {
                capacity_sectors: cfg.capacity_sectors,
                read_only: cfg.read_only,
                serial,
            }),
            rate_limits: cfg.rate_limits,
            stats: (0..cfg.num_queues)
                .map(|_| Arc::new(QueueStats::default()))
                .collect(),
            iothread,
            active: false,
            resetting: false,
            returned: None,
        }
    }

    /// Per-queue counters, readable from any thread.
    pub fn stats(&self) -> Vec<Arc<QueueStats>> {
        self.stats.clone()
    }

    /// The handle that swaps the drive's backing file while the guest runs.
    pub fn swap_handle(&self) -> DriveSwap {
        DriveSwap {
            owner: self.owner,
            drive_id: self.drive_id.clone(),
            backing: self.backing.clone(),
            iothread: self.iothread.clone(),
        }
    }

    /// What a queue of `depth` entries needs to build its engine on the iothread.
    fn engine_spec(&self, depth: u16) -> Result<(File, EngineOptions), ActivateError> {
        let file = self
            .backing
            .dup_file()
            .map_err(|source| ActivateError::Os {
                what: "dup backing file",
                source,
            })?;
        Ok((
            file,
            EngineOptions {
                depth: u32::from(depth).max(1),
                ..self.engine
            },
        ))
    }
}

impl VirtioDevice for VirtioBlock {
    fn device_type(&self) -> u32 {
        device_type::BLOCK
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn features(&self) -> u64 {
        self.offered
    }

    fn ack_features(&mut self, features: u64) {
        self.acked = features & self.offered;
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // The capacity changes when the backing file is swapped.
        let mut space = self.config_space;
        config::set_capacity(&mut space, self.backing.capacity_sectors());
        config::read(&space, offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        // `writeback` (offset 32) is the only writable field and needs CONFIG_WCE, not offered.
        log::debug!(
            "virtio-blk {}: ignored config write at {offset} ({} bytes)",
            self.drive_id,
            data.len()
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActivatedQueue>,
    ) -> Result<(), ActivateError> {
        if self.active || self.resetting {
            return Err(ActivateError::AlreadyActive);
        }
        if queues.is_empty() {
            return Err(ActivateError::BadConfig("no queue is ready".into()));
        }
        // No swap between the file read here and the queues' arrival on the iothread.
        let backing = self.backing.clone();
        let _order = backing.order();
        backing.set_interrupt(interrupt.clone());
        let capacity = backing.capacity_sectors();
        if capacity != self.limits.capacity_sectors {
            self.limits = Arc::new(DiskLimits {
                capacity_sectors: capacity,
                ..(*self.limits).clone()
            });
        }
        let (owner_end, returned) = mpsc::channel();
        let mut handlers: Vec<Box<dyn dataplane::Handler>> = Vec::with_capacity(queues.len());
        for q in queues {
            let Some(stats) = self.stats.get(usize::from(q.index)).cloned() else {
                return Err(ActivateError::BadConfig(format!(
                    "queue {} does not exist",
                    q.index
                )));
            };
            let engine = self.engine_spec(virtio_queue::QueueT::size(&q.queue))?;
            handlers.push(Box::new(
                BlockQueueHandler::new(
                    self.owner,
                    q,
                    mem.clone(),
                    interrupt.clone(),
                    engine,
                    self.limits.clone(),
                    stats,
                )
                .with_rate_limits(self.rate_limits.clone())
                .with_capacity_source(backing.capacity_source())
                .returning_to(owner_end.clone()),
            ));
        }
        self.iothread.attach(handlers)?;
        self.active = true;
        self.returned = Some(returned);
        log::info!(
            "virtio-blk {}: active on iothread {} (features {:#x})",
            self.drive_id,
            self.iothread.name(),
            self.acked
        );
        Ok(())
    }

    fn reset(&mut self) -> ResetOutcome {
        if !self.active && !self.resetting {
            return ResetOutcome::Inactive;
        }
        // The first try blocks the guest's reset a little; later ones (the driver polling the
        // status) only look.
        let wait = if self.resetting {
            Duration::ZERO
        } else {
            RESET_DRAIN_WAIT
        };
        self.active = false;
        self.resetting = true;
        let left = match self.iothread.detach(self.owner, wait) {
            Ok(Detach::Done(n)) => n,
            Ok(Detach::Draining { in_flight }) => {
                self.set_reset_pending(true);
                return ResetOutcome::Pending { in_flight };
            }
            Err(e) => {
                // The thread did not answer: it may still hold the queues and their I/O.
                log::error!("virtio-blk {}: reset: {e}", self.drive_id);
                self.set_reset_pending(true);
                return ResetOutcome::Pending { in_flight: 0 };
            }
        };
        self.resetting = false;
        self.set_reset_pending(false);
        // Each handler sent its queue before the thread answered.
        let mut queues: Vec<ActivatedQueue> = self
            .returned
            .take()
            .map(|r| r.try_iter().collect())
            .unwrap_or_default();
        if queues.len() != left {
            log::error!(
                "virtio-blk {}: {left} queue handlers left the iothread, {} queues came back",
                self.drive_id,
                queues.len()
            );
        }
        queues.sort_by_key(|q| q.index);
        ResetOutcome::Done(queues)
    }
}

impl VirtioBlock {
    fn set_reset_pending(&self, pending: bool) {
        for q in &self.stats {
            q.reset_pending.store(u64::from(pending), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::queue::{engine, guest_memory, FakeInterrupt};
    use dataplane::engine::EngineKind;
    use std::os::unix::fs::FileExt;
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{Address, Bytes, GuestAddress};
    use vmm_sys_util::eventfd::EventFd;

    fn queue(mem: &GuestMemory) -> ActivatedQueue {
        let vq = MockSplitQueue::new(mem, 16);
        ActivatedQueue {
            index: 0,
            queue: vq.create_queue().expect("queue"),
            kick: EventFd::new(libc::EFD_NONBLOCK).expect("efd"),
            inflight: None,
        }
    }

    /// The transport refuses a second DRIVER_OK (found by fuzzing); the device must not rely on
    /// it: a second activation would put a second handler on the same rings.
    #[test]
    fn a_second_activation_is_refused_until_reset() {
        let mem = guest_memory(0x10_0000);
        let file = tempfile_in_tmp();
        let thread = IoThread::spawn("dev-activate", 0).expect("iothread");
        let mut dev = VirtioBlock::new(
            BlockDeviceConfig {
                drive_id: "d0".into(),
                file,
                read_only: false,
                capacity_sectors: 8,
                num_queues: 1,
                queue_size: 16,
                engine: engine(EngineKind::Sync, 16),
                rate_limits: Default::default(),
            },
            thread.clone(),
        );
        let irq: Arc<dyn VirtioInterrupt> = FakeInterrupt::new();
        dev.activate(mem.clone(), irq.clone(), vec![queue(&mem)])
            .expect("first activation");
        let again = dev.activate(mem.clone(), irq.clone(), vec![queue(&mem)]);
        assert!(
            matches!(again, Err(ActivateError::AlreadyActive)),
            "{again:?}"
        );
        assert_eq!(
            dataplane::stats::IoThreadStats::get(&thread.stats().handlers),
            1,
            "one handler on the rings"
        );
        assert!(matches!(dev.reset(), ResetOutcome::Done(q) if q.len() == 1));
        assert!(matches!(dev.reset(), ResetOutcome::Inactive));
        dev.activate(mem.clone(), irq, vec![queue(&mem)])
            .expect("activation after reset");
        thread.shutdown();
    }

    /// A 512-byte read of `sector` into 0x20_0000, status at 0x30_0000, descriptors from
    /// `first`.
    fn read_chain(mem: &GuestMemory, sector: u64, first: u16) -> [RawDescriptor; 3] {
        use crate::test_utils::queue::{desc, write_header, F_NEXT, F_WRITE};
        write_header(mem, 0x10_0000, crate::block::request_type::IN, sector);
        mem.write_obj(0xffu8, GuestAddress(0x30_0000))
            .expect("status");
        [
            desc(0x10_0000, 16, F_NEXT, first + 1),
            desc(0x20_0000, 512, F_NEXT | F_WRITE, first + 2),
            desc(0x30_0000, 1, F_WRITE, 0),
        ]
    }

    #[track_caller]
    fn wait_used(mem: &GuestMemory, vq: &MockSplitQueue<GuestMemory>, n: u16) {
        for _ in 0..1000 {
            let idx: u16 = mem
                .read_obj(vq.used_addr().unchecked_add(2))
                .expect("used idx");
            if idx == n {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("used idx never reached {n}");
    }

    /// A read past the old file's end succeeds after the swap: the queue runs on the new file
    /// with the new capacity, the config space shows it and the guest was told; with every
    /// engine (io_uring's registered file, Linux AIO's context, Auto's inline path and ring).
    #[test]
    fn a_swap_moves_the_queues_to_the_new_file_and_tells_the_guest() {
        for kind in [
            EngineKind::Sync,
            EngineKind::IoUring,
            EngineKind::LinuxAio,
            EngineKind::Auto,
        ] {
            if dataplane::engine::probe(kind).is_err() {
                eprintln!("{kind:?}: not on this host, skipped");
                continue;
            }
            swap_with(kind);
        }
    }

    fn swap_with(kind: EngineKind) {
        let mem = guest_memory(0x100_0000);
        let old = tempfile_in_tmp();
        old.write_all_at(&[0xaa; 4096], 0).expect("old");
        let new = tempfile_in_tmp();
        new.set_len(8192).expect("len");
        new.write_all_at(&[0xbb; 8192], 0).expect("new");
        let thread = IoThread::spawn("dev-swap", 0).expect("iothread");
        let mut dev = VirtioBlock::new(
            BlockDeviceConfig {
                drive_id: "d0".into(),
                file: old,
                read_only: false,
                capacity_sectors: 8,
                num_queues: 1,
                queue_size: 16,
                engine: engine(kind, 16),
                rate_limits: Default::default(),
            },
            thread.clone(),
        );
        let swap = dev.swap_handle();
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&read_chain(&mem, 0, 0), 0)
            .expect("chain");
        let kick = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
        let queue = ActivatedQueue {
            index: 0,
            queue: vq.create_queue().expect("queue"),
            kick: kick.try_clone().expect("dup"),
            inflight: None,
        };
        let irq = FakeInterrupt::new();
        dev.activate(mem.clone(), irq.clone(), vec![queue])
            .expect("activate");
        wait_used(&mem, &vq, 1);
        let mut data = [0u8; 512];
        mem.read_slice(&mut data, GuestAddress(0x20_0000))
            .expect("data");
        assert_eq!(data, [0xaa; 512], "{kind:?}: the old file");

        assert_eq!(swap.swap(new, 16, Duration::from_secs(1)).expect("swap"), 0);
        assert_eq!(irq.config_changes.load(Ordering::SeqCst), 1);
        let mut capacity = [0u8; 8];
        dev.read_config(0, &mut capacity);
        assert_eq!(u64::from_le_bytes(capacity), 16);
        assert_eq!(swap.capacity_sectors(), 16);

        // Sector 12 lies past the old file's 8 sectors.
        vq.add_desc_chains(&read_chain(&mem, 12, 3), 3)
            .expect("chain");
        kick.write(1).expect("kick");
        wait_used(&mem, &vq, 2);
        let status: u8 = mem.read_obj(GuestAddress(0x30_0000)).expect("status");
        assert_eq!(status, crate::block::status::OK);
        mem.read_slice(&mut data, GuestAddress(0x20_0000))
            .expect("data");
        assert_eq!(data, [0xbb; 512], "{kind:?}: the new file");
        assert!(matches!(dev.reset(), ResetOutcome::Done(q) if q.len() == 1));
        thread.shutdown();
    }

    fn tempfile_in_tmp() -> File {
        let path = std::env::temp_dir().join(format!("osprey-dev-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        f.set_len(4096).expect("len");
        std::fs::remove_file(&path).ok();
        f
    }
}
