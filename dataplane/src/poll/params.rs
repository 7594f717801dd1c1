//! The polling parameters as a user sets them (QMP's poll-max-ns, poll-grow, poll-shrink,
//! poll-weight, and the policy), their ranges and defaults, and their validation.

/// Which policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Per-handler windows, reset on a miss (QEMU's classic behaviour).
    Classic,
    /// One thread window from weighted event-interval estimates, shrinking gradually.
    Weighted,
    /// Classic windows, suspended while the host is busy (the thread waits for a CPU) or while
    /// sleeping between events completes more requests.
    Adaptive,
}

/// The tunable parameters (QMP: poll-max-ns, poll-grow, poll-shrink, poll-weight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollParams {
    /// Longest window in ns; 0 disables polling.
    pub max_ns: u64,
    /// Growth factor; 0 means 2.
    pub grow: u64,
    /// Shrink divisor; 0 means reset to 0 (classic) or 2 (weighted).
    pub shrink: u64,
    /// The policy.
    pub policy: PolicyKind,
    /// Weighted policy: the newest sample counts 2^-weight (a shift, 1..=16).
    pub weight: u32,
}

impl Default for PollParams {
    fn default() -> Self {
        Self {
            max_ns: DEFAULT_MAX_NS,
            grow: 0,
            shrink: 0,
            policy: PolicyKind::Adaptive,
            weight: DEFAULT_WEIGHT,
        }
    }
}

/// Default `poll_max_ns` (32 µs).
pub const DEFAULT_MAX_NS: u64 = 32_768;
/// Default `poll_weight`.
pub const DEFAULT_WEIGHT: u32 = 3;
/// Largest `poll_weight`.
pub const MAX_WEIGHT: u32 = 16;
/// Largest `poll_max_ns` (1 s): longer windows are a configuration mistake.
pub const MAX_MAX_NS: u64 = 1_000_000_000;
/// Largest `poll_grow` / `poll_shrink`.
pub const MAX_FACTOR: u64 = 1 << 16;
/// The classic policy's first step.
pub const FIRST_STEP_NS: u64 = 4_000;
/// A classic handler with no event for this long leaves the poll set.
pub const IDLE_EVICT_NS: u64 = 7_000_000_000;

/// A polling parameter out of range: the field (our spelling; QMP's in the docs) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PollParamError {
    /// `poll_max_ns`, `poll_grow`, `poll_shrink` or `poll_weight`.
    pub field: &'static str,
    /// What the value must be, and what it was.
    pub reason: String,
}

impl PollParams {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PollParamError> {
        let err = |field, reason| Err(PollParamError { field, reason });
        if self.max_ns > MAX_MAX_NS {
            return err(
                "poll_max_ns",
                format!("must be at most {MAX_MAX_NS}, got {}", self.max_ns),
            );
        }
        if self.grow > MAX_FACTOR {
            return err(
                "poll_grow",
                format!("must be at most {MAX_FACTOR}, got {}", self.grow),
            );
        }
        if self.shrink > MAX_FACTOR {
            return err(
                "poll_shrink",
                format!("must be at most {MAX_FACTOR}, got {}", self.shrink),
            );
        }
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return err(
                "poll_weight",
                format!(
                    "must be a shift from 1 to {MAX_WEIGHT}, got {}",
                    self.weight
                ),
            );
        }
        Ok(())
    }

    pub(super) fn grow_factor(&self) -> u64 {
        if self.grow == 0 {
            2
        } else {
            self.grow
        }
    }
}
