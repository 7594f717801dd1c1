//! Request parsing and completion on a virtqueue in real mmap'd guest memory, in requests/s, for
//! chains of 3, 4, 8 and 34 descriptors (a header, 1, 2, 6 or 32 data segments of 4 KiB, a
//! status byte). Each iteration refills the avail ring with 32 chains (one index publish), then:
//!
//! - `parse/N`: pops them and runs `devices::block::request::parse` on each (no completion);
//! - `handler_turn/N`: gives a `BlockQueueHandler` on the Null engine one turn
//!   (`Handler::run`), which pops and parses the 32 requests, submits them, commits, reaps,
//!   writes the status bytes and used entries, publishes the used index once and signals one
//!   interrupt (an eventfd write, as the real irqfd is). The budget is `MAX_MAX_BATCH`, so the
//!   turn ends the way a real one does: ring empty, notifications re-enabled and re-checked.
//! - `handler_turn_inflight/3`: the same turn with the ring recording its heads in an inflight
//!   region (a vhost-user backend with `INFLIGHT_SHMFD`): what the marks cost per request.
//!
//! The requests are writes, so the Null engine does not zero the data buffers: the numbers are
//! the per-request and per-descriptor cost of the device model, not of a memset.

use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::iothread::MAX_MAX_BATCH;
use dataplane::{Handler, ThreadTurn};
use devices::block::request::parse;
use devices::block::request_type;
use devices::block::stats::QueueStats;
use devices::test_utils::queue::{inflight_queue, FakeInterrupt};
use devices::virtio::host_ring::HostMemory;
use osprey_benches::block::{self, guest_memory, tracked_null_handler, ChainSpec, Chains};
use osprey_benches::ring::DriverRing;
use virtio_queue::QueueOwnedT;
use vm_memory::GuestAddress;
use vmm_sys_util::eventfd::EventFd;

/// Chains published per iteration.
const BATCH: u16 = 32;
/// Room for 32 chains of 34 descriptors.
const QUEUE_SIZE: u16 = 2048;
/// Descriptors per chain.
const CHAIN_LENGTHS: [u16; 4] = [3, 4, 8, 34];

fn spec(descriptors: u16) -> ChainSpec {
    ChainSpec {
        descriptors,
        kind: request_type::OUT,
        segment: 4096,
    }
}

fn parse_only(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_parsing");
    group.throughput(Throughput::Elements(BATCH.into()));
    for n in CHAIN_LENGTHS {
        let mem = guest_memory();
        let host = HostMemory::new(&mem);
        let mut ring = DriverRing::new(mem.clone(), GuestAddress(0), QUEUE_SIZE, false);
        let chains = Chains::write(&ring, &mem, BATCH, spec(n));
        let limits = block::limits();
        let mut queue = ring.queue();

        ring.publish(&chains.heads);
        let parsed: Vec<_> = queue
            .iter(&mem)
            .expect("avail ring")
            .map(|chain| parse(chain, &host, &limits))
            .collect();
        assert_eq!(parsed.len(), usize::from(BATCH), "every chain is popped");
        assert!(
            parsed.iter().all(Result::is_ok),
            "the chains parse: {parsed:?}"
        );

        group.bench_function(BenchmarkId::new("parse", n), |b| {
            b.iter(|| {
                ring.publish(&chains.heads);
                for chain in queue.iter(&mem).expect("avail ring") {
                    let _ = black_box(parse(chain, &host, &limits));
                }
            })
        });
    }
    group.finish();
}

fn handler_turn(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_parsing");
    group.throughput(Throughput::Elements(BATCH.into()));
    let cases = CHAIN_LENGTHS
        .map(|n| (n, false))
        .into_iter()
        .chain([(3, true)]);
    for (n, tracked) in cases {
        let mem = guest_memory();
        let mut ring = DriverRing::new(mem.clone(), GuestAddress(0), QUEUE_SIZE, false);
        let chains = Chains::write(&ring, &mem, BATCH, spec(n));
        let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let irq = FakeInterrupt::with_eventfd();
        let stats = Arc::new(QueueStats::default());
        let inflight = tracked.then(|| inflight_queue(QUEUE_SIZE));
        let mut handler =
            tracked_null_handler(&ring, &mem, kick, irq.clone(), stats.clone(), inflight);
        handler
            .attach(&ThreadTurn::default())
            .expect("the Null engine");
        let turn = ThreadTurn::default();

        ring.publish(&chains.heads);
        assert!(
            !handler.run(MAX_MAX_BATCH, &turn).more,
            "one turn empties the ring"
        );
        let mut used = 0;
        while let Some((head, len)) = ring.pop_used() {
            assert!(chains.heads.contains(&head) && len == chains.used_len());
            used += 1;
        }
        assert_eq!(used, BATCH, "every request completed in the turn");

        let name = if tracked {
            "handler_turn_inflight"
        } else {
            "handler_turn"
        };
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| {
                ring.publish(&chains.heads);
                black_box(handler.run(MAX_MAX_BATCH, &turn))
            })
        });

        let s = stats.snapshot();
        assert_eq!(
            (s.io_errors, s.malformed, s.engine_full),
            (0, 0, 0),
            "{s:?}"
        );
        assert!(!irq.needs_reset.load(Ordering::SeqCst));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = osprey_benches::criterion();
    targets = parse_only, handler_turn
}
criterion_main!(benches);
