//! A benchmark rig: one real `dataplane::IoThread` serving one Null-engine virtio-blk queue,
//! fed by the fake guest driver ([`crate::driver`]); used by the `dataplane_loop` bench and the
//! crate's own test.

use std::sync::Arc;
use std::time::Duration;

use dataplane::poll::PollParams;
use dataplane::stats::IoThreadStats;
use dataplane::{Handler, IoThread};
use devices::block::request_type;
use devices::block::stats::QueueStats;
use vm_memory::GuestAddress;
use vmm_sys_util::eventfd::EventFd;

use devices::test_utils::queue::FakeInterrupt;

use crate::block::{guest_memory, null_handler, ChainSpec, Chains};
use crate::driver::{DriverSetup, FakeDriver, RunReport};
use crate::ring::DriverRing;

/// One iothread with one Null-engine queue and its fake driver. Fields drop in order: the
/// driver stops before the iothread shuts down.
pub struct LoopRig {
    driver: Option<FakeDriver>,
    /// The iothread serving the queue.
    pub thread: Arc<IoThread>,
    owner: u64,
    /// The queue's counters.
    pub stats: Arc<QueueStats>,
    /// The queue's interrupt.
    pub irq: Arc<FakeInterrupt>,
    /// What the driver's runs did so far.
    pub total: RunReport,
}

impl std::fmt::Debug for LoopRig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopRig")
            .field("owner", &self.owner)
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl LoopRig {
    /// `depth` 4 KiB reads in flight on a `queue_size` queue, served by an iothread called
    /// `name` with `poll` and `max_batch`.
    pub fn new(
        name: &str,
        queue_size: u16,
        depth: u16,
        poll: PollParams,
        max_batch: usize,
    ) -> Self {
        let mem = guest_memory();
        let ring = DriverRing::new(mem.clone(), GuestAddress(0), queue_size, true);
        let spec = ChainSpec {
            descriptors: 3,
            kind: request_type::IN,
            segment: 4096,
        };
        let chains = Chains::write(&ring, &mem, depth, spec);
        let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let irq = FakeInterrupt::with_eventfd();
        let stats = Arc::new(QueueStats::default());
        let handler = null_handler(
            &ring,
            &mem,
            kick.try_clone().expect("eventfd clone"),
            irq.clone(),
            stats.clone(),
        );
        let owner = handler.owner();
        let thread = IoThread::spawn_with(name, max_batch, poll).expect("spawn the iothread");
        thread
            .attach(vec![Box::new(handler)])
            .expect("attach the queue handler");
        let driver = FakeDriver::spawn(DriverSetup {
            ring,
            mem,
            chains,
            kick,
            irq: irq
                .fd
                .as_ref()
                .expect("eventfd")
                .try_clone()
                .expect("eventfd clone"),
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

    /// Runs `requests` requests through; returns how long they took.
    pub fn run(&mut self, requests: u64) -> Duration {
        let r = self.driver.as_ref().expect("driver").run(requests);
        self.total.requests += r.requests;
        self.total.kicks += r.kicks;
        self.total.sleeps += r.sleeps;
        self.total.elapsed += r.elapsed;
        r.elapsed
    }

    /// Stops everything; returns a one-line summary of what the run cost per request.
    pub fn finish(mut self) -> String {
        self.driver = None;
        let back = self
            .thread
            .detach(self.owner, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("the iothread did not give the queue back: {e}"));
        assert!(
            back == dataplane::Detach::Done(1),
            "one handler comes back, drained: {back:?}"
        );
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
            per(self
                .irq
                .notifications
                .load(std::sync::atomic::Ordering::Relaxed)),
            per(IoThreadStats::get(&t.wakeups)),
            per(s.submissions),
            IoThreadStats::get(&t.poll_hits),
            IoThreadStats::get(&t.poll_misses),
            self.total.sleeps,
        )
    }
}
