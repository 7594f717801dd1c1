//! The per-iteration cost of the adaptive poll policy, as the iothread pays it once per loop
//! iteration: `PollPolicy::update` followed by `window()`, for the Classic and Weighted policies
//! with 1, 4 and 16 handlers. Each iteration feeds the next entry of a fixed, pseudo-random cycle
//! of block times (0–48 µs around the 32 µs default `poll_max_ns`, so windows grow, hold and
//! reset) with an event on one handler, round-robin.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dataplane::poll::{PolicyKind, PollParams, PollPolicy};

/// Handlers on the thread.
const HANDLERS: [usize; 3] = [1, 4, 16];
/// Length of the input cycle.
const CYCLE: usize = 256;

/// (block_ns, handler with an event) for each iteration of the cycle.
fn inputs(handlers: usize) -> Vec<(u64, [usize; 1])> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..CYCLE)
        .map(|i| {
            // xorshift64: a fixed sequence, the same for every run.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 48_000, [i % handlers])
        })
        .collect()
}

fn update_and_window(c: &mut Criterion) {
    let mut group = c.benchmark_group("poll_policy");
    for (name, policy) in [
        ("classic", PolicyKind::Classic),
        ("weighted", PolicyKind::Weighted),
    ] {
        for handlers in HANDLERS {
            let params = PollParams {
                policy,
                ..PollParams::default()
            };
            let mut pol = PollPolicy::new(params);
            for slot in 0..handlers {
                pol.add(slot, 0);
            }
            let cycle = inputs(handlers);
            let mut i = 0;
            let mut now: u64 = 0;
            group.bench_function(BenchmarkId::new(name, handlers), |b| {
                b.iter(|| {
                    let (block_ns, events) = &cycle[i % CYCLE];
                    i += 1;
                    now += block_ns + 1_000;
                    pol.update(*block_ns, events, now);
                    black_box(pol.window())
                })
            });
            assert!(pol.window() <= params.max_ns, "the window stays bounded");
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = osprey_benches::criterion();
    targets = update_and_window
}
criterion_main!(benches);
