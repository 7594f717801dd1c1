//! Live changes to a running dataplane, shared by the VMM's controller (`controller.rs`) and the
//! vhost-user backend's (the vhost-user-blk crate's): an iothread's poll and batch parameters and a
//! rate-limit group's buckets, each checked whole before anything changes (the PATCH rule of
//! [`crate::field_update`]), the commands that touch only iothreads and groups ([`Dataplane`]),
//! and the per-thread CPU report of `GET /metrics`.

use std::collections::BTreeMap;
use std::sync::Arc;

use dataplane::rate_limit::RateLimiter;
use dataplane::IoThread;
use devices::block::throttle::DriveRateLimits;
use serde_json::json;

use crate::api::command::{
    ApiCommand, ApiError, ApiReply, DriveUpdate, GroupUpdate, IoThreadUpdate, Reply,
};
use crate::api::replies::{GroupView, IoThreadView};
use crate::config::{IoThreadConfig, PollPolicyKind};
use crate::device_manager::iothread_report;
use crate::field_update;
use crate::metrics::report::ThreadReport;
use crate::rate_limit::{GroupReport, RateLimitGroupConfig, RateLimiterConfig};

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
    params.validate().map_err(ApiError::invalid)?;
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
    let poll = thread.set_poll(params).map_err(ApiError::failed)?;
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
    iothread.wake_throttled().map_err(ApiError::failed)?;
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
    next.limits().check("").map_err(ApiError::invalid)?;
    limiter.set(next.limits().to_dataplane());
    *cfg = next;
    for t in iothreads {
        t.wake_throttled().map_err(ApiError::failed)?;
    }
    log::info!("rate limit group {id}: changed by the API: {}", json!(u));
    Ok(())
}

/// A `PATCH /drives/{id}` body that names another drive is refused.
pub fn check_drive_id(u: &DriveUpdate, id: &str) -> Result<(), ApiError> {
    match u.drive_id.as_deref().filter(|named| *named != id) {
        Some(named) => Err(ApiError::BadRequest(format!(
            "drive_id: `{named}` differs from the path's id `{id}`"
        ))),
        None => Ok(()),
    }
}

/// A `404` naming what has no such id.
pub fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("no {kind} with id `{id}`"))
}

/// The running dataplane a controller answers for, the VMM's and the vhost-user backend's
/// alike: its iothreads and rate-limit groups by id, with their config entries.
#[derive(Debug)]
pub struct Dataplane<'a> {
    /// Iothreads by id.
    pub iothreads: &'a BTreeMap<String, Arc<IoThread>>,
    /// Their config entries (kept up to date by PATCH).
    pub iothread_configs: &'a mut [IoThreadConfig],
    /// Rate-limit groups by id.
    pub groups: &'a BTreeMap<String, Arc<RateLimiter>>,
    /// Their config entries (kept up to date by PATCH).
    pub group_configs: &'a mut [RateLimitGroupConfig],
    /// Each drive's id and rate-limit group, for the groups' reports.
    pub drive_groups: Vec<(&'a str, Option<&'a str>)>,
}

impl<'a> Dataplane<'a> {
    /// The dataplane of `iothreads` and `groups` with their config entries, for drives whose
    /// ids and groups are `drive_groups`.
    pub fn new(
        iothreads: &'a BTreeMap<String, Arc<IoThread>>,
        iothread_configs: &'a mut [IoThreadConfig],
        groups: &'a BTreeMap<String, Arc<RateLimiter>>,
        group_configs: &'a mut [RateLimitGroupConfig],
        drive_groups: Vec<(&'a str, Option<&'a str>)>,
    ) -> Self {
        Self {
            iothreads,
            iothread_configs,
            groups,
            group_configs,
            drive_groups,
        }
    }

    /// Carries out a command that touches only iothreads and groups (`GET|PATCH
    /// /iothreads[/{id}]`, `GET|PATCH /rate-limit-groups[/{id}]`); any other is a 500.
    pub fn execute(&mut self, command: &ApiCommand) -> ApiReply {
        match command {
            ApiCommand::ListIoThreads => Ok(Reply::IoThreads(
                self.iothreads
                    .iter()
                    .map(|(id, t)| IoThreadView::Running(iothread_report(id, t)))
                    .collect(),
            )),
            ApiCommand::GetIoThread(id) => self
                .iothreads
                .get(id)
                .map(|t| Reply::IoThread(Box::new(IoThreadView::Running(iothread_report(id, t)))))
                .ok_or_else(|| not_found("iothread", id)),
            ApiCommand::PatchIoThread(id, u) => self.patch_iothread(id, u),
            ApiCommand::ListRateLimitGroups => Ok(Reply::Groups(
                self.group_reports()
                    .into_iter()
                    .map(GroupView::Running)
                    .collect(),
            )),
            ApiCommand::GetRateLimitGroup(id) => self
                .group_report(id)
                .map(|g| Reply::Group(Box::new(GroupView::Running(g))))
                .ok_or_else(|| not_found("rate limit group", id)),
            ApiCommand::PatchRateLimitGroup(id, u) => self.patch_group(id, u),
            _ => Err(ApiError::Internal(
                "not an iothread or rate-limit group command".into(),
            )),
        }
    }

    /// Validates the whole update against the current values, then applies it: all or nothing.
    fn patch_iothread(&mut self, id: &str, u: &IoThreadUpdate) -> ApiReply {
        let thread = self
            .iothreads
            .get(id)
            .ok_or_else(|| not_found("iothread", id))?;
        let in_force = patch_iothread(thread, id, u)?;
        let entry = self
            .iothread_configs
            .iter_mut()
            .find(|t| t.id == id)
            .ok_or_else(|| ApiError::Internal(format!("iothread {id} has no config")))?;
        in_force.write_to(entry);
        Ok(Reply::Done)
    }

    /// Changes a group's buckets (each absent: kept; null: removed); every drive of the group
    /// sees them at its next request.
    fn patch_group(&mut self, id: &str, u: &GroupUpdate) -> ApiReply {
        let limiter = self
            .groups
            .get(id)
            .ok_or_else(|| not_found("rate limit group", id))?;
        let cfg = self
            .group_configs
            .iter_mut()
            .find(|g| g.id == id)
            .ok_or_else(|| ApiError::Internal(format!("group {id} has no config")))?;
        patch_group(limiter, cfg, self.iothreads.values(), id, u)?;
        Ok(Reply::Done)
    }

    /// Every group's report, by id.
    pub fn group_reports(&self) -> Vec<GroupReport> {
        group_reports(self.groups, &self.drive_groups)
    }

    fn group_report(&self, id: &str) -> Option<GroupReport> {
        group_report(self.groups, &self.drive_groups, id)
    }
}

/// Group `id`'s report, `None` if there is no such group; `drive_groups` holds each drive's id
/// and group.
pub fn group_report(
    groups: &BTreeMap<String, Arc<RateLimiter>>,
    drive_groups: &[(&str, Option<&str>)],
    id: &str,
) -> Option<GroupReport> {
    let drives: Vec<&str> = drive_groups
        .iter()
        .filter(|(_, group)| *group == Some(id))
        .map(|(drive, _)| *drive)
        .collect();
    let limiter = groups.get(id)?;
    Some(crate::rate_limit::group_report(id, limiter, &drives))
}

/// Every group's report, by id ([`group_report`]).
pub fn group_reports(
    groups: &BTreeMap<String, Arc<RateLimiter>>,
    drive_groups: &[(&str, Option<&str>)],
) -> Vec<GroupReport> {
    groups
        .keys()
        .filter_map(|id| group_report(groups, drive_groups, id))
        .collect()
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

/// Changes interface `id`'s rx and tx limiters (each absent: kept; `{}` or null: removed),
/// checked whole first, in its device (`nic`: its limiters and iothread, `None` when there is no
/// such interface) and its config entry; wakes its iothread so a throttled direction looks
/// again at once.
pub fn patch_nic(
    nic: Option<(&devices::net::throttle::NetRateLimits, &IoThread)>,
    configs: &mut [crate::net::NetworkInterfaceConfig],
    id: &str,
    u: &crate::net::NetworkInterfaceUpdate,
) -> Result<(), ApiError> {
    if let Some(named) = &u.iface_id {
        if named != id {
            return Err(ApiError::BadRequest(format!(
                "iface_id: `{named}` does not match the path's `{id}`"
            )));
        }
    }
    let (rate_limits, iothread) =
        nic.ok_or_else(|| ApiError::NotFound(format!("no network interface `{id}`")))?;
    let cfg = configs
        .iter_mut()
        .find(|c| c.iface_id == id)
        .ok_or_else(|| ApiError::Internal(format!("network interface {id} has no config")))?;
    for (name, limits) in [
        ("rx_rate_limiter", &u.rx_rate_limiter),
        ("tx_rate_limiter", &u.tx_rate_limiter),
    ] {
        if let Some(Some(r)) = limits {
            r.check(name).map_err(ApiError::invalid)?;
        }
    }
    if let Some(l) = u.rx_rate_limiter {
        rate_limits.rx.set(l.unwrap_or_default().to_dataplane());
        cfg.rx_rate_limiter = l;
    }
    if let Some(l) = u.tx_rate_limiter {
        rate_limits.tx.set(l.unwrap_or_default().to_dataplane());
        cfg.tx_rate_limiter = l;
    }
    iothread.wake_throttled().map_err(ApiError::failed)?;
    log::info!(
        "network interface {id}: rate limiters changed by the API: rx {}, tx {}",
        json!(cfg.rx_rate_limiter),
        json!(cfg.tx_rate_limiter)
    );
    Ok(())
}

#[cfg(test)]
mod nic_tests {
    use super::*;
    use crate::net::{NetworkInterfaceConfig, NetworkInterfaceUpdate};
    use devices::net::throttle::NetRateLimits;

    /// A live `PATCH /network-interfaces/{id}`: the limiter the body names changes in the device
    /// and the config, the other stays; a bad value, another id in the body or an unknown
    /// interface changes nothing.
    #[test]
    fn patch_nic_sets_the_named_limiter_and_checks_first() {
        let thread = IoThread::spawn("nic-patch", 0).expect("iothread");
        let limits = NetRateLimits::default();
        let nic = |id: &str| (id == "eth0").then_some((&limits, &*thread));
        let mut cfgs: Vec<NetworkInterfaceConfig> =
            vec![
                serde_json::from_str(r#"{"iface_id":"eth0","host_dev_name":"tap0"}"#).expect("cfg"),
            ];
        let update =
            |json: &str| -> NetworkInterfaceUpdate { serde_json::from_str(json).expect("body") };
        patch_nic(
            nic("eth0"),
            &mut cfgs,
            "eth0",
            &update(
                r#"{"iface_id":"eth0","rx_rate_limiter":{"ops":{"size":10,"refill_time":100}}}"#,
            ),
        )
        .expect("patched");
        assert!(limits.rx.is_active());
        assert!(!limits.tx.is_active(), "absent: kept");
        assert!(cfgs[0].rx_rate_limiter.is_some());
        for (id, body, status) in [
            (
                "eth0",
                r#"{"rx_rate_limiter":{"ops":{"size":10,"refill_time":0}}}"#,
                400,
            ),
            ("eth0", r#"{"iface_id":"eth1","rx_rate_limiter":null}"#, 400),
            ("eth9", r#"{"rx_rate_limiter":null}"#, 404),
        ] {
            let e = patch_nic(nic(id), &mut cfgs, id, &update(body)).expect_err(body);
            assert_eq!(e.status(), status, "{body}: {e}");
            assert!(limits.rx.is_active(), "{body}: nothing changed");
        }
        patch_nic(
            nic("eth0"),
            &mut cfgs,
            "eth0",
            &update(r#"{"rx_rate_limiter":{}}"#),
        )
        .expect("removed");
        assert!(!limits.rx.is_active());
        thread.shutdown();
    }
}
