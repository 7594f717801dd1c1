//! The queue rig: what a virtio-blk queue handler needs around it in a test, without a guest or
//! an iothread. Guest memory at address 0, a fake interrupt, the queue's counters, a drive's
//! limits, engine options, a disk image, and the handler built over a `virtio_queue::Queue`
//! (usually from `virtio_queue::mock::MockSplitQueue`, whose descriptors [`desc`] writes and
//! whose request headers [`write_header`] fills).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::engine::{EngineKind, EngineOptions, IoUringFlags};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::desc::RawDescriptor;
use virtio_queue::Queue;
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use crate::block::queue::BlockQueueHandler;
use crate::block::request::DiskLimits;
use crate::block::stats::QueueStats;
use crate::block::ID_BYTES;
use crate::virtio::inflight::{queue_region_bytes, InflightQueue, QueueRegion};
use crate::virtio::{ActivatedQueue, GuestMemory, VirtioInterrupt};

/// `VRING_DESC_F_NEXT`.
pub const F_NEXT: u16 = 1;
/// `VRING_DESC_F_WRITE`.
pub const F_WRITE: u16 = 2;

/// A descriptor for `MockSplitQueue::add_desc_chains` / `build_desc_chain`.
pub fn desc(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(Descriptor::new(addr, len, flags, next))
}

/// Writes a virtio-blk request header (`kind`, `sector`) at guest address `at`.
pub fn write_header(mem: &GuestMemory, at: u64, kind: u32, sector: u64) {
    mem.write_obj(kind, GuestAddress(at)).expect("header type");
    mem.write_obj(sector, GuestAddress(at + 8))
        .expect("header sector");
}

/// `bytes` of anonymous guest memory mapped at guest address 0.
pub fn guest_memory(bytes: u64) -> GuestMemory {
    GuestMemory::from_ranges(&[(GuestAddress(0), bytes as usize)]).expect("guest memory")
}

/// A drive of `capacity_sectors`, with the GET_ID string `serial` (at most 20 bytes).
pub fn disk_limits(capacity_sectors: u64, read_only: bool, serial: &[u8]) -> DiskLimits {
    let mut id = [0u8; ID_BYTES];
    id[..serial.len()].copy_from_slice(serial);
    DiskLimits {
        capacity_sectors,
        read_only,
        serial: id,
    }
}

/// A `kind` engine `depth` deep: default io_uring flags, no O_DIRECT, no fault injection.
pub fn engine(kind: EngineKind, depth: u32) -> EngineOptions {
    EngineOptions {
        kind,
        depth,
        io_uring: IoUringFlags::default(),
        direct: false,
        fault: None,
    }
}

/// Creates (or truncates) the disk image `osprey-q-<pid>-<name>` of `len` bytes in the temp
/// folder and returns its path; the caller removes it.
pub fn disk_image(name: &str, len: u64) -> PathBuf {
    let path = std::env::temp_dir().join(format!("osprey-q-{}-{name}", std::process::id()));
    let f = File::create(&path).expect("create the disk image");
    f.set_len(len).expect("size the disk image");
    path
}

/// Opens a disk image for reading and writing.
pub fn open_disk(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open the disk image")
}

/// A guest interrupt for tests: counts queue notifications, records the device's request for a
/// reset and, when made by [`FakeInterrupt::with_eventfd`], also writes an eventfd per
/// notification, as the irqfd the VMM gives a device is written.
#[derive(Debug, Default)]
pub struct FakeInterrupt {
    /// Queue notifications sent.
    pub notifications: AtomicU64,
    /// The device asked for a reset.
    pub needs_reset: AtomicBool,
    /// Configuration-change notifications sent.
    pub config_changes: AtomicU64,
    /// Written once per queue notification (a non-blocking eventfd), when present.
    pub fd: Option<EventFd>,
}

impl FakeInterrupt {
    /// Counts only.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Counts, and writes a non-blocking eventfd per notification.
    pub fn with_eventfd() -> Arc<Self> {
        Arc::new(Self {
            fd: Some(EventFd::new(libc::EFD_NONBLOCK).expect("eventfd")),
            ..Self::default()
        })
    }

    /// Queue notifications so far.
    pub fn notifications(&self) -> u64 {
        self.notifications.load(Ordering::SeqCst)
    }

    /// Whether the device asked for a reset.
    pub fn needs_reset(&self) -> bool {
        self.needs_reset.load(Ordering::SeqCst)
    }
}

impl VirtioInterrupt for FakeInterrupt {
    fn notify_queue(&self, _queue: u16) -> std::io::Result<()> {
        self.notifications.fetch_add(1, Ordering::SeqCst);
        match &self.fd {
            Some(fd) => fd.write(1),
            None => Ok(()),
        }
    }

    fn notify_config(&self) -> std::io::Result<()> {
        self.config_changes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn set_needs_reset(&self) {
        self.needs_reset.store(true, Ordering::SeqCst);
    }
}

/// What a virtio-blk queue handler is built with, besides its queue and backing file: guest
/// memory, the interrupt, the queue's counters and the drive's limits.
#[derive(Debug)]
pub struct QueueRig {
    /// Guest memory.
    pub mem: GuestMemory,
    /// The queue's interrupt.
    pub irq: Arc<FakeInterrupt>,
    /// The queue's counters.
    pub stats: Arc<QueueStats>,
    /// The drive.
    pub limits: DiskLimits,
}

impl QueueRig {
    /// Capacity of [`QueueRig::new`]'s drive: 2048 sectors (1 MiB).
    pub const CAPACITY_SECTORS: u64 = 2048;

    /// `mem`, a counting [`FakeInterrupt`], fresh counters and a writable drive of
    /// [`QueueRig::CAPACITY_SECTORS`] with an empty serial.
    pub fn new(mem: GuestMemory) -> Self {
        Self {
            mem,
            irq: FakeInterrupt::new(),
            stats: Arc::new(QueueStats::default()),
            limits: disk_limits(Self::CAPACITY_SECTORS, false, &[]),
        }
    }

    /// A handler (queue index 0, not yet attached: the caller runs `Handler::attach`, or an
    /// iothread does) serving `queue`, kicked through `kick`, with `engine` on `file`.
    pub fn handler(
        &self,
        queue: Queue,
        kick: EventFd,
        file: File,
        engine: EngineOptions,
    ) -> BlockQueueHandler {
        self.tracked_handler(queue, kick, file, engine, None)
    }

    /// [`QueueRig::handler`] whose ring records its heads in `inflight` (vhost-user's
    /// `INFLIGHT_SHMFD`; see [`inflight_queue`]).
    pub fn tracked_handler(
        &self,
        queue: Queue,
        kick: EventFd,
        file: File,
        engine: EngineOptions,
        inflight: Option<InflightQueue>,
    ) -> BlockQueueHandler {
        BlockQueueHandler::new(
            crate::block::queue::next_owner_id(),
            ActivatedQueue {
                index: 0,
                queue,
                kick,
                inflight,
            },
            self.mem.clone(),
            self.irq.clone(),
            (file, engine),
            Arc::new(self.limits.clone()),
            self.stats.clone(),
        )
    }
}

/// Inflight tracking for a ring of `ring_size` entries over a fresh anonymous region (what a
/// frontend's `SET_INFLIGHT_FD` maps, without the frontend).
pub fn inflight_queue(ring_size: u16) -> InflightQueue {
    let bytes = queue_region_bytes(ring_size) as usize;
    let mapping = Arc::new(vm_memory::MmapRegion::<()>::new(bytes).expect("anonymous mapping"));
    let base = std::ptr::NonNull::new(mapping.as_ptr()).expect("mapped");
    let keep: Arc<dyn std::any::Any + Send + Sync> = mapping;
    // SAFETY: `base` is the page-aligned start of `bytes` = queue_region_bytes(ring_size) bytes
    // that `keep` keeps mapped.
    let region = unsafe { QueueRegion::new(base, ring_size, keep) };
    InflightQueue::recover(region, ring_size, 0)
        .expect("a ring as large as its region")
        .0
}
