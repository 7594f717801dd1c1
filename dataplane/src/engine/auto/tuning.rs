//! The `Auto` engine's thresholds that hold only for the kind of host they were chosen on (how
//! long a device's calls take, when a batch beats a call per request): one struct, with the
//! development host's values as its defaults, the one place to change them. Thresholds that
//! follow from the algorithm alone stay constants beside the code they bound.

/// Host-dependent thresholds of the `Auto` engine. [`AutoTuning::default`] holds the values
/// chosen on the development host (`docs/performance.md` has the measurements behind them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoTuning {
    /// An inline call that holds up other requests (one of a turn's, or a probe) and takes
    /// longer than this blocked the thread: it counts as a failed attempt. O_DIRECT on a
    /// device completes synchronously even with RWF_NOWAIT, so only the clock tells.
    pub slow_call_ns: u64,
    /// The same bound for a call whose request is alone on the thread: it holds up only the
    /// requests that arrive while it runs, so it counts as failed only on a store this slow
    /// (a disk, a network store), not when a busy host preempts a fast one.
    pub slow_lone_call_ns: u64,
    /// O_DIRECT: inline calls that average less than this cost no more than handing the
    /// request to another engine, at any depth; slower ones serialize requests the
    /// asynchronous engine would overlap, so only a request alone goes inline.
    pub fast_direct_call_ns: u64,
    /// The turn size, in requests, from which one submission for the whole turn beats a call
    /// per request: a page-cache turn goes to io_uring (or its refused-flag writes to one
    /// `io_submit`), a fast device's turn to one `io_submit`; below it, O_DIRECT turns of a
    /// device that sleeps go to the Linux AIO engine beside the ring.
    pub batch_requests: usize,
}

impl Default for AutoTuning {
    fn default() -> Self {
        Self {
            slow_call_ns: 20_000,
            slow_lone_call_ns: 500_000,
            fast_direct_call_ns: 4_000,
            batch_requests: 4,
        }
    }
}
