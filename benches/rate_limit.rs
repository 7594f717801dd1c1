//! The cost of a rate-limit admission as a queue pays it per request: `admit` on one drive
//! limiter (ops + bandwidth buckets far above the rate asked), on a drive and its group, and the
//! inactive limiter (no limit set: the check a queue without limits makes).

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use dataplane::rate_limit::{admit, BucketConfig, LimitConfig, RateLimiter};

fn high() -> LimitConfig {
    let b = |size| {
        Some(BucketConfig {
            size,
            one_time_burst: 0,
            refill_time_ms: 1,
        })
    };
    LimitConfig {
        bandwidth: b(1 << 40),
        ops: b(1 << 30),
    }
}

fn admission(c: &mut Criterion) {
    let mut group = c.benchmark_group("rate_limit_admit");
    let drive = RateLimiter::new(high());
    let tenant = RateLimiter::new(high());
    let none = RateLimiter::default();
    let now = Instant::now();
    group.bench_function("inactive", |b| {
        b.iter(|| black_box(admit(&[&none], black_box(4096), now)))
    });
    group.bench_function("drive", |b| {
        b.iter(|| black_box(admit(&[&drive], black_box(4096), now)))
    });
    group.bench_function("drive_and_group", |b| {
        b.iter(|| black_box(admit(&[&drive, &tenant], black_box(4096), now)))
    });
    group.finish();
}

criterion_group!(benches, admission);
criterion_main!(benches);
