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

use super::config::{VhostUserConfig, VhostUserDriveConfig};
use vmm::api::command::{ApiCommand, ApiError, ApiReply, DriveUpdate};
use vmm::api::replies::{ConfigReply, DriveReport, DriveView, MetricsReport, Reply};
use vmm::device_manager::iothread_report;
use vmm::instance::InstanceState;
use vmm::live_tuning::{group_reports, not_found, Dataplane};
use vmm::metrics::report::{DriveCounters, VmReport};

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

/// Each drive's id and rate-limit group.
fn drive_groups(drives: &[VhostUserDriveConfig]) -> Vec<(&str, Option<&str>)> {
    drives
        .iter()
        .map(|d| {
            (
                d.drive.drive_id.as_str(),
                d.drive.rate_limit_group.as_deref(),
            )
        })
        .collect()
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
            ApiCommand::ListIoThreads
            | ApiCommand::GetIoThread(_)
            | ApiCommand::PatchIoThread(..)
            | ApiCommand::ListRateLimitGroups
            | ApiCommand::GetRateLimitGroup(_)
            | ApiCommand::PatchRateLimitGroup(..) => self.dataplane().execute(&command),
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
            ApiCommand::GetMetrics => Ok(Reply::Metrics(Box::new(self.metrics()))),
            other => Err(ApiError::BadRequest(format!(
                "{} is not available in the vhost-user backend (it runs no VM)",
                command_name(&other)
            ))),
        }
    }

    /// The iothreads and rate-limit groups with their config entries.
    fn dataplane(&mut self) -> Dataplane<'_> {
        Dataplane::new(
            &self.iothreads,
            &mut self.config.iothreads,
            &self.groups,
            &mut self.config.rate_limit_groups,
            drive_groups(&self.config.drives),
        )
    }

    /// Sets, changes or removes a drive's own limits; its queues see them at their next request.
    /// A new `path_on_host` (the VMM's live swap) is refused.
    fn patch_drive(&mut self, id: &str, u: &DriveUpdate) -> ApiReply {
        vmm::live_tuning::check_drive_id(u, id)?;
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
                r.check("rate_limiter").map_err(ApiError::invalid)?;
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
            network_interfaces: Vec::new(),
            rate_limit_groups: group_reports(&self.groups, &drive_groups(&self.config.drives)),
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
