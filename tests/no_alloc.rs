//! The request path allocates nothing: a virtio-blk queue handler serving 4 KiB reads in steady
//! state makes zero heap allocations per request, with the Null, Sync, io_uring and Auto engines.
//!
//! A counting global allocator (this test binary only) counts the allocations made by the test's
//! own thread while it drives the handler: a warm-up round first (engines and buffers reach their
//! working size), then many rounds of 32 requests, counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::engine::EngineKind;
use dataplane::{Handler, ThreadTurn};
use devices::block::queue::BlockQueueHandler;
use devices::block::{request_type, status};
use devices::test_utils::queue::{
    desc, disk_image, engine, guest_memory, open_disk, QueueRig, F_NEXT, F_WRITE,
};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::Queue;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator unchanged; counting has no effect on the
// memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc` is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc_zeroed` is passed through.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `realloc` is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const QUEUE_SIZE: u16 = 128;
const DEPTH: u16 = 32;
const USED_RING: GuestAddress = GuestAddress(0x8000);

/// Allocations per request over `rounds` rounds of `DEPTH` 4 KiB reads, after one warm-up round.
fn allocations_per_request(kind: EngineKind, rounds: u64) -> f64 {
    let rig = QueueRig::new(guest_memory(0x100_0000));
    let mem = rig.mem.clone();
    let vq = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let mut chains = Vec::new();
    for i in 0..DEPTH {
        let hdr = 0x10_0000 + u64::from(i) * 0x100;
        mem.write_obj(request_type::IN, GuestAddress(hdr))
            .expect("type");
        mem.write_obj(u64::from(i) * 8, GuestAddress(hdr + 8))
            .expect("sector");
        chains.push(desc(hdr, 16, F_NEXT, 3 * i + 1));
        chains.push(desc(
            0x40_0000 + u64::from(i) * 4096,
            4096,
            F_NEXT | F_WRITE,
            3 * i + 2,
        ));
        chains.push(desc(0x30_0000 + u64::from(i), 1, F_WRITE, 0));
    }
    vq.add_desc_chains(&chains, 0).expect("chains");
    let file = tempfile(1 << 20);
    let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    // The mock places its used ring too close behind the avail ring for a queue that goes round
    // (virtio-queue 0.18's `AvailRing::end` counts entries as bytes): move it out of the way.
    let mut queue: Queue = vq.create_queue().expect("queue");
    queue
        .try_set_used_ring_address(USED_RING)
        .expect("used ring");
    let used_idx = || -> u16 { mem.read_obj(USED_RING.unchecked_add(2)).expect("used idx") };
    let mut h = rig.handler(
        queue,
        kick.try_clone().expect("clone"),
        file,
        engine(kind, u32::from(QUEUE_SIZE)),
    );
    h.attach(&ThreadTurn::default()).expect("attach");
    let mut posted = DEPTH;
    let serve = |h: &mut BlockQueueHandler, want: u16| {
        for _ in 0..1_000_000 {
            if used_idx() == want {
                return;
            }
            h.run(32, &ThreadTurn::default());
            assert!(!rig.irq.needs_reset(), "{kind}: the queue broke");
        }
        panic!(
            "{kind}: requests did not complete: used {} want {want} avail {}",
            used_idx(),
            vq.avail().idx().load()
        );
    };
    serve(&mut h, posted);
    let mut count_round = |h: &mut BlockQueueHandler, counted: bool| {
        for i in 0..DEPTH {
            let slot = usize::from(posted.wrapping_add(i) % QUEUE_SIZE);
            vq.avail()
                .ring()
                .ref_at(slot)
                .expect("avail slot")
                .store(u16::to_le(3 * i));
        }
        posted = posted.wrapping_add(DEPTH);
        vq.avail().idx().store(u16::to_le(posted));
        COUNTING.with(|c| c.set(counted));
        serve(h, posted);
        COUNTING.with(|c| c.set(false));
    };
    count_round(&mut h, false); // warm-up: engines and scratch vectors reach their size
    ALLOCS.store(0, Ordering::Relaxed);
    for _ in 0..rounds {
        count_round(&mut h, true);
    }
    for i in 0..DEPTH {
        let st: u8 = mem
            .read_obj(GuestAddress(0x30_0000 + u64::from(i)))
            .expect("status");
        assert_eq!(st, status::OK, "{kind}: request {i}");
    }
    ALLOCS.load(Ordering::Relaxed) as f64 / (rounds * u64::from(DEPTH)) as f64
}

/// The disk image, opened and already unlinked.
fn tempfile(len: u64) -> std::fs::File {
    let path = disk_image("no-alloc", len);
    let f = open_disk(&path);
    std::fs::remove_file(&path).ok();
    f
}

#[test]
fn steady_state_requests_allocate_nothing() {
    for kind in [
        EngineKind::Null,
        EngineKind::Sync,
        EngineKind::IoUring,
        EngineKind::Auto,
    ] {
        let per_request = allocations_per_request(kind, 100);
        eprintln!("{kind}: {per_request} allocations per request");
        assert_eq!(per_request, 0.0, "{kind} allocates on the request path");
    }
}
