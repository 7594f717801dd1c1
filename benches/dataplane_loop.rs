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

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::poll::PollParams;
use dataplane::stats::IoThreadStats;
use dataplane::{Handler, IoThread};
use devices::block::request_type;
use devices::block::stats::QueueStats;
use osprey_benches::block::{guest_memory, null_handler, ChainSpec, Chains, EventFdInterrupt};
use osprey_benches::driver::{DriverSetup, FakeDriver, RunReport};
use osprey_benches::ring::DriverRing;
use vm_memory::GuestAddress;
use vmm_sys_util::eventfd::EventFd;

/// Requests in flight.
const DEPTH: u16 = 32;
/// Queue size.
const QUEUE_SIZE: u16 = 256;
/// `max_batch` values.
const MAX_BATCHES: [usize; 4] = [1, 8, 32, 128];

/// One iothread with one Null-engine queue and its fake driver. Fields drop in order: the
/// driver stops before the iothread shuts down.
struct Rig {
    driver: Option<FakeDriver>,
    thread: Arc<IoThread>,
    owner: u64,
    stats: Arc<QueueStats>,
    irq: Arc<EventFdInterrupt>,
    total: RunReport,
}

impl Rig {
    fn new(poll: PollParams, max_batch: usize) -> Self {
        let mem = guest_memory();
        let ring = DriverRing::new(mem.clone(), GuestAddress(0), QUEUE_SIZE, true);
        let spec = ChainSpec {
            descriptors: 3,
            kind: request_type::IN,
            segment: 4096,
        };
        let chains = Chains::write(&ring, &mem, DEPTH, spec);
        let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let irq = EventFdInterrupt::new();
        let stats = Arc::new(QueueStats::default());
        let handler = null_handler(
            &ring,
            &mem,
            kick.try_clone().expect("eventfd clone"),
            irq.clone(),
            stats.clone(),
        );
        let owner = handler.owner();
        let thread = IoThread::spawn_with("bench", max_batch, poll).expect("spawn the iothread");
        thread
            .attach(vec![Box::new(handler)])
            .expect("attach the queue handler");
        let driver = FakeDriver::spawn(DriverSetup {
            ring,
            mem,
            chains,
            kick,
            irq: irq.fd.try_clone().expect("eventfd clone"),
        });
        Self {
            driver: Some(driver),
            thread,
            owner,
            stats,
            irq,
            total: RunReport::default(),
        }
    }

    fn run(&mut self, requests: u64) -> Duration {
        let r = self.driver.as_ref().expect("driver").run(requests);
        self.total.requests += r.requests;
        self.total.kicks += r.kicks;
        self.total.sleeps += r.sleeps;
        self.total.elapsed += r.elapsed;
        r.elapsed
    }

    /// Stops everything; returns a one-line summary of what the run cost per request.
    fn finish(mut self) -> String {
        self.driver = None;
        let back = self.thread.detach(self.owner).unwrap_or_else(|e| {
            panic!("dataplane_loop: the iothread did not give the queue back: {e}")
        });
        assert_eq!(back.len(), 1, "dataplane_loop: one handler comes back");
        self.thread.shutdown();
        let s = self.stats.snapshot();
        assert_eq!(
            s.requests, self.total.requests,
            "every request completed once"
        );
        assert_eq!((s.io_errors, s.malformed), (0, 0), "{s:?}");
        let t = self.thread.stats();
        let per = |n: u64| n as f64 / s.requests.max(1) as f64;
        format!(
            "{} requests: {:.3} kicks, {:.3} interrupts, {:.3} iothread wake-ups, {:.3} \
             submissions per request; poll hits {}, misses {}; driver slept {} times",
            s.requests,
            per(self.total.kicks),
            per(self.irq.sent.load(std::sync::atomic::Ordering::Relaxed)),
            per(IoThreadStats::get(&t.wakeups)),
            per(s.submissions),
            IoThreadStats::get(&t.poll_hits),
            IoThreadStats::get(&t.poll_misses),
            self.total.sleeps,
        )
    }
}

fn dataplane_loop(c: &mut Criterion) {
    let mut group = c.benchmark_group("dataplane_loop");
    group.throughput(Throughput::Elements(1));
    let off = PollParams {
        max_ns: 0,
        ..PollParams::default()
    };
    for (name, poll) in [("poll_off", off), ("poll_on", PollParams::default())] {
        for max_batch in MAX_BATCHES {
            let mut rig = Rig::new(poll, max_batch);
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
