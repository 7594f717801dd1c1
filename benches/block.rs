//! virtio-blk set-up shared by the benches: guest memory, request chains written once into a
//! [`DriverRing`] (header, data segments, status byte at fixed addresses per chain), and a
//! [`BlockQueueHandler`] on the Null engine built by the shared queue rig
//! (`devices::test_utils::queue`), whose `FakeInterrupt::with_eventfd` is the interrupt.

use std::sync::Arc;

use dataplane::engine::EngineKind;
use devices::block::queue::BlockQueueHandler;
use devices::block::request::DiskLimits;
use devices::block::request_type;
use devices::block::stats::QueueStats;
use devices::test_utils::queue::{self, disk_limits, engine, FakeInterrupt, QueueRig};
use devices::virtio::inflight::InflightQueue;
use devices::virtio::GuestMemory;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use crate::ring::{DriverRing, DESC_F_NEXT, DESC_F_WRITE};

/// Guest memory the benches map: rings, headers, status bytes and data.
pub const GUEST_MEMORY_BYTES: u64 = 16 << 20;
/// Where request headers start (16 bytes each).
const HEADERS: GuestAddress = GuestAddress(1 << 20);
/// Where status bytes start (one per chain, 16 bytes apart).
const STATUS: GuestAddress = GuestAddress(2 << 20);
/// Where data segments start.
const DATA: GuestAddress = GuestAddress(4 << 20);
/// Sectors of the pretend disk (1 TiB): no request is past its end.
const CAPACITY_SECTORS: u64 = 1 << 31;

/// Maps `GUEST_MEMORY_BYTES` of anonymous memory at guest address 0.
pub fn guest_memory() -> GuestMemory {
    queue::guest_memory(GUEST_MEMORY_BYTES)
}

/// The shape of the request chains.
#[derive(Debug, Clone, Copy)]
pub struct ChainSpec {
    /// Descriptors per chain: header, `descriptors - 2` data segments, status.
    pub descriptors: u16,
    /// `request_type::IN` (the device writes the data) or `request_type::OUT`.
    pub kind: u32,
    /// Bytes per data segment (a multiple of 512).
    pub segment: u32,
}

/// `count` chains of `spec` written into `ring`'s descriptor table (chain `i` uses descriptors
/// `i * spec.descriptors ..`), with their headers in guest memory.
#[derive(Debug)]
pub struct Chains {
    /// The head descriptor of each chain, in order.
    pub heads: Vec<u16>,
    spec: ChainSpec,
}

impl Chains {
    /// Writes the chains.
    pub fn write(ring: &DriverRing, mem: &GuestMemory, count: u16, spec: ChainSpec) -> Self {
        let n = spec.descriptors;
        assert!(n >= 3, "a chain needs a header, data and a status byte");
        assert!(
            u32::from(count) * u32::from(n) <= u32::from(ring.size()),
            "{count} chains of {n} descriptors do not fit a queue of {}",
            ring.size()
        );
        assert!(ring.end() <= HEADERS, "the rings overlap the headers");
        let segs = u64::from(n - 2);
        let data_end = DATA.raw_value() + u64::from(count) * segs * u64::from(spec.segment);
        assert!(data_end <= GUEST_MEMORY_BYTES, "data past guest memory");
        let data_flags = if spec.kind == request_type::IN {
            DESC_F_WRITE | DESC_F_NEXT
        } else {
            DESC_F_NEXT
        };
        let sectors_per_request = segs * u64::from(spec.segment) / 512;
        let mut heads = Vec::with_capacity(usize::from(count));
        for i in 0..count {
            let head = i * n;
            let header = HEADERS.unchecked_add(16 * u64::from(i));
            mem.write_obj(spec.kind.to_le(), header).expect("header");
            let sector = u64::from(i) * sectors_per_request;
            mem.write_obj(sector.to_le(), header.unchecked_add(8))
                .expect("header");
            ring.set_desc(head, header, 16, DESC_F_NEXT, head + 1);
            for s in 0..n - 2 {
                let seg = u64::from(i) * segs + u64::from(s);
                let addr = DATA.unchecked_add(seg * u64::from(spec.segment));
                let idx = head + 1 + s;
                ring.set_desc(idx, addr, spec.segment, data_flags, idx + 1);
            }
            ring.set_desc(head + n - 1, status_addr(head / n), 1, DESC_F_WRITE, 0);
            heads.push(head);
        }
        Self { heads, spec }
    }

    /// The status byte of the chain starting at `head`.
    pub fn status_addr(&self, head: u16) -> GuestAddress {
        status_addr(head / self.spec.descriptors)
    }

    /// Bytes the device reports in the used entry of a successful request.
    pub fn used_len(&self) -> u32 {
        if self.spec.kind == request_type::IN {
            u32::from(self.spec.descriptors - 2) * self.spec.segment + 1
        } else {
            1
        }
    }
}

fn status_addr(chain: u16) -> GuestAddress {
    STATUS.unchecked_add(16 * u64::from(chain))
}

/// A queue handler on `ring` with the Null engine, not yet attached: the caller runs
/// `Handler::attach` (directly, or through an iothread). `kick` is the queue's eventfd.
pub fn null_handler(
    ring: &DriverRing,
    mem: &GuestMemory,
    kick: EventFd,
    irq: Arc<FakeInterrupt>,
    stats: Arc<QueueStats>,
) -> BlockQueueHandler {
    tracked_null_handler(ring, mem, kick, irq, stats, None)
}

/// [`null_handler`] whose ring records its heads in `inflight` (a vhost-user backend with
/// `INFLIGHT_SHMFD`).
pub fn tracked_null_handler(
    ring: &DriverRing,
    mem: &GuestMemory,
    kick: EventFd,
    irq: Arc<FakeInterrupt>,
    stats: Arc<QueueStats>,
    inflight: Option<InflightQueue>,
) -> BlockQueueHandler {
    let rig = QueueRig {
        mem: mem.clone(),
        irq,
        stats,
        limits: limits(),
    };
    let file = std::fs::File::open("/dev/null").expect("open /dev/null");
    rig.tracked_handler(
        ring.queue(),
        kick,
        file,
        engine(EngineKind::Null, u32::from(ring.size())),
        inflight,
    )
}

/// The disk limits `null_handler` uses, for benches that call the parser directly.
pub fn limits() -> DiskLimits {
    disk_limits(CAPACITY_SECTORS, false, &[])
}
