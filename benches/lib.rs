//! Shared set-up for Osprey's criterion benches (see `README.md`): the driver's side of a split
//! virtqueue ([`ring`]), virtio-blk request chains and a Null-engine queue handler ([`block`]),
//! a fake guest driver thread ([`driver`]) and the trimmed criterion settings every bench uses
//! ([`criterion`]).

use std::time::Duration;

use criterion::Criterion;

pub mod block;
pub mod driver;
pub mod ring;

/// Criterion settings trimmed so each bench binary finishes in well under a minute: 0.5 s of
/// warm-up, 2 s of measurement and 20 samples per benchmark (command-line flags still apply).
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dataplane::poll::PollParams;
    use dataplane::{Handler, IoThread};
    use devices::block::request_type;
    use devices::block::stats::QueueStats;
    use vm_memory::GuestAddress;
    use vmm_sys_util::eventfd::EventFd;

    use crate::block::{guest_memory, null_handler, ChainSpec, Chains, EventFdInterrupt};
    use crate::driver::{DriverSetup, FakeDriver};
    use crate::ring::DriverRing;

    /// The fake driver and a real iothread agree on the ring protocol, polling on and off.
    #[test]
    fn the_fake_driver_runs_requests_through_an_iothread() {
        for max_ns in [0, PollParams::default().max_ns] {
            let mem = guest_memory();
            let ring = DriverRing::new(mem.clone(), GuestAddress(0), 256, true);
            let spec = ChainSpec {
                descriptors: 3,
                kind: request_type::IN,
                segment: 4096,
            };
            let chains = Chains::write(&ring, &mem, 32, spec);
            let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
            let irq = EventFdInterrupt::new();
            let stats = Arc::new(QueueStats::default());
            let handler = null_handler(
                &ring,
                &mem,
                kick.try_clone().expect("clone"),
                irq.clone(),
                stats.clone(),
            );
            let poll = PollParams {
                max_ns,
                ..PollParams::default()
            };
            let owner = handler.owner();
            let thread = IoThread::spawn_with("bench-test", 8, poll).expect("iothread");
            thread.attach(vec![Box::new(handler)]).expect("attach");
            let driver = FakeDriver::spawn(DriverSetup {
                ring,
                mem,
                chains,
                kick,
                irq: irq.fd.try_clone().expect("clone"),
            });
            let mut done = 0;
            for n in [1, 31, 32, 33, 5000] {
                done += driver.run(n).requests;
            }
            drop(driver);
            assert_eq!(thread.detach(owner).expect("detach").len(), 1);
            thread.shutdown();
            let s = stats.snapshot();
            assert_eq!(s.requests, done, "every request completed once");
            assert_eq!((s.io_errors, s.malformed), (0, 0));
            assert_eq!(
                stats.largest_batch_bound(),
                Some(8),
                "max_batch caps a submission"
            );
            assert!(!irq.needs_reset.load(std::sync::atomic::Ordering::SeqCst));
        }
    }
}
