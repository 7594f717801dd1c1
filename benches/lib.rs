//! Shared set-up for Osprey's criterion benches (see `README.md`): the driver's side of a split
//! virtqueue ([`ring`]), virtio-blk request chains and a Null-engine queue handler ([`block`]),
//! a fake guest driver thread ([`driver`]), an iothread rig combining them ([`rig`]) and the trimmed criterion settings every bench uses
//! ([`criterion`]).

use std::time::Duration;

use criterion::Criterion;

pub mod block;
pub mod driver;
pub mod rig;
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
    use dataplane::poll::PollParams;

    use crate::rig::LoopRig;

    /// The fake driver and a real iothread agree on the ring protocol, polling on and off.
    #[test]
    fn the_fake_driver_runs_requests_through_an_iothread() {
        for max_ns in [0, PollParams::default().max_ns] {
            let poll = PollParams {
                max_ns,
                ..PollParams::default()
            };
            let mut rig = LoopRig::new("bench-test", 256, 32, poll, 8);
            for n in [1, 31, 32, 33, 5000] {
                rig.run(n);
            }
            assert_eq!(rig.total.requests, 1 + 31 + 32 + 33 + 5000);
            assert_eq!(
                rig.stats.largest_batch_bound(),
                Some(8),
                "max_batch caps a submission"
            );
            assert!(!rig
                .irq
                .needs_reset
                .load(std::sync::atomic::Ordering::SeqCst));
            // Stops the driver, takes the handler back (exactly one) and checks that every
            // request completed once, without errors.
            rig.finish();
        }
    }
}
