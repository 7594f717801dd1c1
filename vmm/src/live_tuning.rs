//! Live changes to a running dataplane, shared by the VMM's controller (`controller.rs`) and the
//! vhost-user backend's (the vhost-user-blk crate's): an iothread's poll and batch parameters and a
//! rate-limit group's buckets, each checked whole before anything changes (the PATCH rule of
//! [`crate::field_update`]), and the per-thread CPU report of `GET /metrics`.

use std::sync::Arc;

use dataplane::rate_limit::RateLimiter;
use dataplane::IoThread;
use devices::block::throttle::DriveRateLimits;
use serde_json::json;

use crate::api::command::{ApiError, GroupUpdate, IoThreadUpdate};
use crate::config::{IoThreadConfig, PollPolicyKind};
use crate::metrics::report::ThreadReport;
use crate::field_update;
use crate::rate_limit::{RateLimitGroupConfig, RateLimiterConfig};

/// An iothread's parameters in force after a PATCH, for its config entry.
#[derive(Debug, Clone, Copy)]
pub struct IoThreadInForce {
    poll: dataplane::poll::PollParams,
    max_batch: u32,
}

impl IoThreadInForce {
    /// Writes the values into the iothread's config entry.
    pub fn write_to(&self, entry: &mut IoThreadConfig) {
        entry.poll_max_ns = self.poll.max_ns;
        entry.poll_grow = self.poll.grow;
        entry.poll_shrink = self.poll.shrink;
        entry.poll_weight = self.poll.weight;
        entry.poll_policy = self.poll.policy.into();
        entry.max_batch = self.max_batch;
    }
}

/// Validates `u` against `thread`'s current values, then applies it: all or nothing. Returns
/// the values now in force.
pub fn patch_iothread(
    thread: &IoThread,
    id: &str,
    u: &IoThreadUpdate,
) -> Result<IoThreadInForce, ApiError> {
    let defaults = IoThreadConfig::with_id(id);
    let mut params = thread.poll_params();
    let mut policy = PollPolicyKind::from(params.policy);
    field_update::apply(&u.poll_max_ns, &mut params.max_ns, defaults.poll_max_ns);
    field_update::apply(&u.poll_grow, &mut params.grow, defaults.poll_grow);
    field_update::apply(&u.poll_shrink, &mut params.shrink, defaults.poll_shrink);
    field_update::apply(&u.poll_policy, &mut policy, defaults.poll_policy);
    field_update::apply(&u.poll_weight, &mut params.weight, defaults.poll_weight);
    params.policy = policy.into();
    params
        .validate()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let mut max_batch = thread.max_batch() as u32;
    field_update::apply(&u.max_batch, &mut max_batch, defaults.max_batch);
    if max_batch as usize > dataplane::iothread::MAX_MAX_BATCH {
        return Err(ApiError::BadRequest(format!(
            "max_batch: must be at most {} (0 means the default, {}), got {max_batch}",
            dataplane::iothread::MAX_MAX_BATCH,
            dataplane::iothread::DEFAULT_MAX_BATCH
        )));
    }
    // Everything is valid: apply.
    let poll = thread
        .set_poll(params)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    if u.max_batch.is_some() {
        thread.set_max_batch(max_batch as usize);
    }
    log::info!("iothread {id}: parameters changed by the API: {}", json!(u));
    Ok(IoThreadInForce {
        poll,
        max_batch: thread.max_batch() as u32,
    })
}

/// Puts drive `id`'s own buckets to `limits` (`None`: removed) in its queues' `rate_limits` and
/// its config entry `slot`, already checked; wakes its `iothread` so that a throttled queue
/// looks again.
pub fn patch_drive_limits(
    rate_limits: &DriveRateLimits,
    iothread: &IoThread,
    slot: &mut Option<RateLimiterConfig>,
    id: &str,
    limits: Option<RateLimiterConfig>,
) -> Result<(), ApiError> {
    rate_limits
        .drive
        .set(limits.unwrap_or_default().to_dataplane());
    *slot = limits;
    iothread
        .wake_throttled()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    log::info!(
        "drive {id}: rate_limiter changed by the API: {}",
        json!(limits)
    );
    Ok(())
}

/// Changes group `id`'s buckets (each absent: kept; null: removed) in `limiter` and its config
/// entry `cfg`, checked whole first; wakes `iothreads` so that throttled queues look again.
pub fn patch_group<'a>(
    limiter: &RateLimiter,
    cfg: &mut RateLimitGroupConfig,
    iothreads: impl IntoIterator<Item = &'a Arc<IoThread>>,
    id: &str,
    u: &GroupUpdate,
) -> Result<(), ApiError> {
    let mut next = cfg.clone();
    if let Some(b) = u.bandwidth {
        next.bandwidth = b;
    }
    if let Some(o) = u.ops {
        next.ops = o;
    }
    next.limits()
        .check("")
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    limiter.set(next.limits().to_dataplane());
    *cfg = next;
    for t in iothreads {
        t.wake_throttled()
            .map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    log::info!("rate limit group {id}: changed by the API: {}", json!(u));
    Ok(())
}

/// CPU time of every thread of the process, for `GET /metrics`.
pub fn thread_reports() -> Vec<ThreadReport> {
    crate::cpu_usage::by_thread()
        .iter()
        .map(|(name, u)| {
            let cpu = crate::metrics::ThreadCpu {
                cpu_ns: u.cpu_ns,
                kind: u.kind.as_str().into(),
            };
            ThreadReport::new(name, &cpu)
        })
        .collect()
}
