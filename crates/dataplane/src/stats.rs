//! Per-iothread statistics, written by the thread and read lock-free by anyone (the API, tests).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one iothread.
#[derive(Debug, Default)]
pub struct IoThreadStats {
    /// Returns from epoll_wait with at least one event.
    pub wakeups: AtomicU64,
    /// Handler runs.
    pub handler_runs: AtomicU64,
    /// Control commands processed (attach, detach, shutdown).
    pub commands: AtomicU64,
    /// Handlers currently attached.
    pub handlers: AtomicU64,
}

impl IoThreadStats {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
