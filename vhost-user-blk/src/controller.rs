//! The backend's side of the REST API (`--api-sock`): the VMM's routes for what a backend has:
//! `GET /`, `GET /vm/config` (the backend's config), `GET|PATCH /iothreads[/{id}]` (poll
//! parameters and `max_batch`, live), `GET|PATCH /drives[/{id}]` (the drive's `rate_limiter`,
//! live), `GET|PATCH /rate-limit-groups[/{id}]`, `GET /metrics` (the VMM's typed replies: a
//! drive's `pci_slot` is 0, `vm` has no vCPU, and the sockets are not shown: they are in the
//! config file or on the command line). The VMM's API server (HTTP,
//! routing, bodies, replies) is reused as is; its commands land here instead of on a VM's
//! control thread. VM-only commands (actions, pause, pre-boot PUTs) answer 400.

use std::collections::BTreeMap;
use std::sync::Arc;

use dataplane::rate_limit::RateLimiter;
use dataplane::IoThread;
use devices::block::stats::QueueStats;
use devices::block::throttle::DriveRateLimits;

use super::config::VhostUserConfig;
use vmm::api::command::{
    ApiCommand, ApiError, ApiReply, DriveUpdate, GroupUpdate, IoThreadUpdate,
};
use vmm::api::replies::{
    ConfigReply, DriveReport, DriveView, GroupView, IoThreadView, MetricsReport, Reply,
};
use vmm::device_manager::iothread_report;
use vmm::instance::InstanceState;
use vmm::metrics::report::{DriveCounters, VmReport};
use vmm::rate_limit::GroupReport;

/// A served drive's live handles.
#[derive(Debug)]
pub struct BackendDrive {
    /// The drive's id.
    pub id: String,
    /// Its queues' counters.
    pub stats: Vec<Arc<QueueStats>>,
    /// Its own limiter and its group's.
    pub rate_limits: DriveRateLimits,
    /// Its iothread.
    pub iothread: Arc<IoThread>,
}

/// Carries out API commands against the backend's iothreads, drives and groups.
#[derive(Debug)]
pub struct BackendController {
    /// The effective config (kept up to date by PATCH).
    pub config: VhostUserConfig,
    /// Iothreads by id.
    pub iothreads: BTreeMap<String, Arc<IoThread>>,
    /// Drives in config order.
    pub drives: Vec<BackendDrive>,
    /// Rate-limit groups by id.
    pub groups: BTreeMap<String, Arc<RateLimiter>>,
    /// When the backend started.
    pub started: std::time::Instant,
}

fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("no {kind} with id `{id}`"))
}

impl BackendController {
    /// Carries out `command`.
    pub fn execute(&mut self, command: ApiCommand) -> ApiReply {
        match command {
            ApiCommand::GetInfo => Ok(Reply::Info(vmm::instance::InstanceInfo::new(
                InstanceState::Running,
                None,
            ))),
            ApiCommand::GetConfig => Ok(Reply::Config(Box::new(ConfigReply {
                config: self.config.as_vm_config(),
                has_boot_source: false,
            }))),
            ApiCommand::ListIoThreads => Ok(Reply::IoThreads(
                self.iothreads
                    .iter()
                    .map(|(id, t)| IoThreadView::Running(iothread_report(id, t)))
                    .collect(),
            )),
            ApiCommand::GetIoThread(id) => self
                .iothreads
                .get(&id)
                .map(|t| Reply::IoThread(Box::new(IoThreadView::Running(iothread_report(&id, t)))))
                .ok_or_else(|| not_found("iothread", &id)),
            ApiCommand::PatchIoThread(id, u) => self.patch_iothread(&id, &u),
            ApiCommand::ListDrives => self
                .drives
                .iter()
                .map(|d| self.drive_report(d).map(DriveView::Running))
                .collect::<Result<_, _>>()
                .map(Reply::Drives),
            ApiCommand::GetDrive(id) => self
                .drives
                .iter()
                .find(|d| d.id == id)
                .ok_or_else(|| not_found("drive", &id))
                .and_then(|d| self.drive_report(d))
                .map(|d| Reply::Drive(Box::new(DriveView::Running(d)))),
            ApiCommand::PatchDrive(id, u) => self.patch_drive(&id, &u),
            ApiCommand::ListRateLimitGroups => Ok(Reply::Groups(
                self.group_reports()
                    .into_iter()
                    .map(GroupView::Running)
                    .collect(),
            )),
            ApiCommand::GetRateLimitGroup(id) => self
                .group_report(&id)
                .map(|g| Reply::Group(Box::new(GroupView::Running(g))))
                .ok_or_else(|| not_found("rate limit group", &id)),
            ApiCommand::PatchRateLimitGroup(id, u) => self.patch_group(&id, &u),
            ApiCommand::GetMetrics => Ok(Reply::Metrics(Box::new(self.metrics()))),
            other => Err(ApiError::BadRequest(format!(
                "{} is not available in the vhost-user backend (it runs no VM)",
                command_name(&other)
            ))),
        }
    }

    /// Validates the whole update against the current values, then applies it: all or nothing
    /// (the VMM's rules for `PATCH /iothreads/{id}`).
    fn patch_iothread(&mut self, id: &str, u: &IoThreadUpdate) -> ApiReply {
        let thread = self
            .iothreads
            .get(id)
            .ok_or_else(|| not_found("iothread", id))?;
        let in_force = vmm::live_tuning::patch_iothread(thread, id, u)?;
        if let Some(entry) = self.config.iothreads.iter_mut().find(|t| t.id == id) {
            in_force.write_to(entry);
        }
        Ok(Reply::Done)
    }

    /// Sets, changes or removes a drive's own limits; its queues see them at their next request.
    /// A new `path_on_host` (the VMM's live swap) is refused.
    fn patch_drive(&mut self, id: &str, u: &DriveUpdate) -> ApiReply {
        if let Some(named) = u.drive_id.as_deref().filter(|named| *named != id) {
            return Err(ApiError::BadRequest(format!(
                "drive_id: `{named}` differs from the path's id `{id}`"
            )));
        }
        let drive = self
            .drives
            .iter()
            .find(|d| d.id == id)
            .ok_or_else(|| not_found("drive", id))?;
        if u.path_on_host.is_some() {
            return Err(ApiError::BadRequest(
                "path_on_host: swapping a drive's file is not available in the vhost-user \
                 backend yet"
                    .into(),
            ));
        }
        if let Some(limits) = u.rate_limiter {
            if let Some(r) = &limits {
                r.check("rate_limiter")
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            }
            // Every drive has a config entry (the command line's too); were one missing, the
            // change would still take effect, unrecorded.
            let mut unrecorded = None;
            let slot = match self
                .config
                .drives
                .iter_mut()
                .find(|c| c.drive.drive_id == id)
            {
                Some(cfg) => &mut cfg.drive.rate_limiter,
                None => &mut unrecorded,
            };
            vmm::live_tuning::patch_drive_limits(
                &drive.rate_limits,
                &drive.iothread,
                slot,
                id,
                limits,
            )?;
        }
        Ok(Reply::Done)
    }

    /// Changes a group's buckets (absent: kept; null: removed).
    fn patch_group(&mut self, id: &str, u: &GroupUpdate) -> ApiReply {
        let limiter = self
            .groups
            .get(id)
            .ok_or_else(|| not_found("rate limit group", id))?;
        let cfg = self
            .config
            .rate_limit_groups
            .iter_mut()
            .find(|g| g.id == id)
            .ok_or_else(|| ApiError::Internal(format!("group {id} has no config")))?;
        vmm::live_tuning::patch_group(limiter, cfg, self.iothreads.values(), id, u)?;
        Ok(Reply::Done)
    }

    /// Group `id`'s report, `None` if there is no such group.
    fn group_report(&self, id: &str) -> Option<GroupReport> {
        let drives: Vec<&str> = self
            .config
            .drives
            .iter()
            .filter(|d| d.drive.rate_limit_group.as_deref() == Some(id))
            .map(|d| d.drive.drive_id.as_str())
            .collect();
        let limiter = self.groups.get(id)?;
        Some(vmm::rate_limit::group_report(id, limiter, &drives))
    }

    fn group_reports(&self) -> Vec<GroupReport> {
        self.groups
            .keys()
            .filter_map(|id| self.group_report(id))
            .collect()
    }

    fn counters(d: &BackendDrive) -> DriveCounters {
        let queues: Vec<&QueueStats> = d.stats.iter().map(|q| q.as_ref()).collect();
        DriveCounters::new(&d.id, &queues, &d.rate_limits.drive.stats())
    }

    /// The VMM's drive report; `pci_slot` is 0 (the frontend places the device).
    fn drive_report(&self, d: &BackendDrive) -> Result<DriveReport, ApiError> {
        let cfg = self
            .config
            .drives
            .iter()
            .find(|c| c.drive.drive_id == d.id)
            .ok_or_else(|| ApiError::Internal(format!("drive {} has no config", d.id)))?;
        Ok(DriveReport::new(Self::counters(d), &cfg.drive, 0))
    }

    /// Everything countable, in the VMM's `GET /metrics` shape; `vm` has the backend's uptime
    /// and no vCPU.
    fn metrics(&self) -> MetricsReport {
        let vm = vmm::metrics::VmMetrics {
            uptime_ms: self.started.elapsed().as_millis() as u64,
            vcpus: 0,
            running: true,
        };
        MetricsReport {
            vm: VmReport {
                state: "Running".to_string(),
                metrics: vmm::metrics::report::MetricFields::of(&vm),
            },
            iothreads: self
                .iothreads
                .iter()
                .map(|(id, t)| iothread_report(id, t))
                .collect(),
            drives: self.drives.iter().map(Self::counters).collect(),
            rate_limit_groups: self.group_reports(),
            threads: vmm::live_tuning::thread_reports(),
        }
    }
}

/// A command's route, for the refusal of VM-only commands.
fn command_name(c: &ApiCommand) -> String {
    c.preboot_only().map(str::to_owned).unwrap_or_else(|| {
        let debug = format!("{c:?}");
        debug
            .split(['(', ' '])
            .next()
            .unwrap_or("this command")
            .to_owned()
    })
}
