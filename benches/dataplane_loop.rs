//! The dataplane's own ceiling in requests/s: a real `dataplane::IoThread` running a
//! `BlockQueueHandler` on the Null engine, fed by a fake guest driver thread
//! (`osprey_benches::driver`) that keeps 32 requests (4 KiB reads, 3 descriptors each) in flight
//! on a 256-entry queue in the same mmap'd guest memory. EVENT_IDX is negotiated: the driver
//! kicks the queue's eventfd only when `vring_need_event(avail_event, new, old)` says so, and
//! asks for an interrupt (`used_event`) only before it sleeps; it spins on the used ring first.
//!
//! Measured for polling off (`poll_max_ns: 0`) and on (the default classic policy, 32 µs), with
//! `max_batch` 1, 8, 32 and 128 (at 32 in flight, 128 cannot batch more than 32 does). Custom
//! timing: criterion asks for N iterations, the driver runs N requests through (the pipeline
//! fills and drains within the run) and reports the elapsed time. After each configuration a
//! line on stderr gives kicks, interrupts, submissions and iothread wake-ups per request.
//!
//! Clean stop: the driver's waits are bounded (a 5 s stall panics with the state), the caller's
//! wait for a run is bounded, and teardown stops the driver, detaches the handler (bounded by the
//! iothread's command timeout) and only then shuts the iothread down.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::poll::PollParams;
use osprey_benches::rig::LoopRig;

/// Requests in flight.
const DEPTH: u16 = 32;
/// Queue size.
const QUEUE_SIZE: u16 = 256;
/// `max_batch` values.
const MAX_BATCHES: [usize; 4] = [1, 8, 32, 128];

fn dataplane_loop(c: &mut Criterion) {
    let mut group = c.benchmark_group("dataplane_loop");
    group.throughput(Throughput::Elements(1));
    let off = PollParams {
        max_ns: 0,
        ..PollParams::default()
    };
    for (name, poll) in [("poll_off", off), ("poll_on", PollParams::default())] {
        for max_batch in MAX_BATCHES {
            let mut rig = LoopRig::new("bench", QUEUE_SIZE, DEPTH, poll, max_batch);
            group.bench_function(BenchmarkId::new(name, max_batch), |b| {
                b.iter_custom(|requests| rig.run(requests))
            });
            let summary = rig.finish();
            eprintln!("dataplane_loop/{name}/{max_batch}: {summary}");
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = osprey_benches::criterion();
    targets = dataplane_loop
}
criterion_main!(benches);
