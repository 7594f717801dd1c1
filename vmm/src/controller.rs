//! The control thread's side of the API: how each [`ApiCommand`] (it reaches the control loop as
//! a [`crate::events::ControlEvent`]) is carried out against the running VM ([`Controller`]). The
//! HTTP layer never touches devices; this is the only place API commands change anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::command::{
    ApiCommand, ApiError, ApiReply, DriveUpdate, Reply, VmAction, VmStateChange,
};
use crate::api::replies::{ConfigReply, DriveReport, DriveView, MetricsReport};
use crate::config::{DriveConfig, VmConfig};
use crate::device_manager::{iothread_report, Devices};
use crate::events::PauseState;
use crate::instance::InstanceState;
use crate::live_tuning::{group_reports, not_found, Dataplane};
use crate::metrics::report::VmReport;

/// What a command asks of the control loop beyond its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing more.
    None,
    /// Pause the vCPUs (the loop kicks them and waits until they park).
    Pause,
    /// Stop the VM cleanly.
    Shutdown,
    /// Write a line to the metrics file now.
    FlushMetrics,
}

/// Carries out API commands against the VM's devices and configuration.
pub struct Controller<'a> {
    /// The effective configuration (kept up to date by PATCH).
    pub config: &'a mut VmConfig,
    /// The devices.
    pub devices: &'a Devices,
    /// vCPU pause state.
    pub pause: &'a Arc<PauseState>,
    /// When the VM started.
    pub started: Instant,
}

impl std::fmt::Debug for Controller<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Controller")
    }
}

/// How long a swap of a drive's file waits for the requests in flight on the old file: past it
/// the swap is given up (500) and the drive keeps its old file. Below the API's reply timeout.
const SWAP_DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Each drive's id and rate-limit group.
fn drive_groups(drives: &[DriveConfig]) -> Vec<(&str, Option<&str>)> {
    drives
        .iter()
        .map(|d| (d.drive_id.as_str(), d.rate_limit_group.as_deref()))
        .collect()
}

/// Opens `path` as start-up's preflight opens a drive (same checks and messages, the drive's
/// read-only and O_DIRECT options) once it passed the drive's swap folder, and swaps it in;
/// returns the absolute path opened.
fn swap_drive_file(
    drive: &crate::device_manager::DriveHandle,
    path: &std::path::Path,
    read_only: bool,
    direct: bool,
) -> Result<std::path::PathBuf, ApiError> {
    let bad = |why: String| ApiError::BadRequest(format!("path_on_host: {why}"));
    let full = drive
        .swap_folder
        .check(path)
        .map_err(|e| ApiError::invalid_field("path_on_host", e))?;
    let opened = crate::drive::open(&full, read_only, direct).map_err(|e| {
        let denied = matches!(&e, crate::drive::DriveOpenError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::PermissionDenied);
        let hint = if denied {
            " (a symlink out of the drive's folder is refused by the sandbox)"
        } else {
            ""
        };
        bad(format!("{e}{hint}"))
    })?;
    if let Some(warning) = opened.tail_warning(path) {
        log::warn!("drive {}: path_on_host: {warning}", drive.id);
    }
    let old_capacity = drive.swap.capacity_sectors();
    let started = Instant::now();
    let drained = drive
        .swap
        .swap(opened.file, opened.capacity_sectors, SWAP_DRAIN_WAIT)
        .map_err(|e| ApiError::Internal(format!("drive {}: swapping the file: {e}", drive.id)))?;
    log::info!(
        "drive {}: backing file swapped by the API to {} ({old_capacity} -> {} sectors) in \
         {} us, {drained} requests completed on the old file first",
        drive.id,
        full.display(),
        opened.capacity_sectors,
        started.elapsed().as_micros()
    );
    Ok(full)
}

impl Controller<'_> {
    /// `Running` or `Paused`.
    pub fn state(&self) -> &'static str {
        if self.pause.is_paused() {
            "Paused"
        } else {
            "Running"
        }
    }

    /// Carries out `command`; returns the reply and what the loop must do next.
    pub fn execute(&mut self, command: ApiCommand) -> (ApiReply, Effect) {
        if let Some(route) = command.preboot_only() {
            return (
                Err(ApiError::BadRequest(format!(
                    "{route} is only allowed before InstanceStart; the VM is running"
                ))),
                Effect::None,
            );
        }
        match command {
            ApiCommand::GetInfo => (
                Ok(Reply::Info(crate::instance::InstanceInfo::new(
                    if self.pause.is_paused() {
                        InstanceState::Paused
                    } else {
                        InstanceState::Running
                    },
                    Some(crate::boot_timing::timings()),
                ))),
                Effect::None,
            ),
            ApiCommand::GetMachineConfig => (
                Ok(Reply::Machine(self.config.machine.clone())),
                Effect::None,
            ),
            ApiCommand::SetVmState(r) => self.set_state(r.state),
            // Refused above (pre-boot only).
            ApiCommand::SnapshotLoad(_) => (
                Err(ApiError::BadRequest(
                    "PUT /snapshot/load: the VM runs already".into(),
                )),
                Effect::None,
            ),
            // The running VM takes snapshots itself (it holds the KVM fds and memory).
            ApiCommand::SnapshotCreate(_) => (
                Err(ApiError::BadRequest(
                    "PUT /snapshot/create: this VM cannot take snapshots".into(),
                )),
                Effect::None,
            ),
            ApiCommand::GetConfig => (
                Ok(Reply::Config(Box::new(ConfigReply {
                    config: self.config.clone(),
                    has_boot_source: true,
                }))),
                Effect::None,
            ),
            ApiCommand::ListIoThreads
            | ApiCommand::GetIoThread(_)
            | ApiCommand::PatchIoThread(..)
            | ApiCommand::ListRateLimitGroups
            | ApiCommand::GetRateLimitGroup(_)
            | ApiCommand::PatchRateLimitGroup(..) => {
                (self.dataplane().execute(&command), Effect::None)
            }
            ApiCommand::ListDrives => (
                self.devices
                    .drives
                    .iter()
                    .map(|d| self.drive_report(d).map(DriveView::Running))
                    .collect::<Result<_, _>>()
                    .map(Reply::Drives),
                Effect::None,
            ),
            ApiCommand::GetDrive(id) => (
                self.devices
                    .drives
                    .iter()
                    .find(|d| d.id == id)
                    .ok_or_else(|| not_found("drive", &id))
                    .and_then(|d| self.drive_report(d))
                    .map(|d| Reply::Drive(Box::new(DriveView::Running(d)))),
                Effect::None,
            ),
            ApiCommand::PatchDrive(id, update) => (self.patch_drive(&id, &update), Effect::None),
            ApiCommand::PatchNetworkInterface(id, update) => (
                crate::live_tuning::patch_nic(
                    self.devices
                        .nics
                        .iter()
                        .find(|n| n.id == id)
                        .map(|n| (&n.rate_limits, &*n.iothread)),
                    &mut self.config.network_interfaces,
                    &id,
                    &update,
                )
                .map(|()| Reply::Done),
                Effect::None,
            ),
            ApiCommand::GetMetrics => (Ok(Reply::Metrics(Box::new(self.metrics()))), Effect::None),
            ApiCommand::Action(action) => self.action(action),
            ApiCommand::PutMachineConfig(_)
            | ApiCommand::PatchMachineConfig(_)
            | ApiCommand::PutBootSource(_)
            | ApiCommand::PutDrive(..)
            | ApiCommand::PutNetworkInterface(..)
            | ApiCommand::PutIoThread(..)
            | ApiCommand::PutRateLimitGroup(..)
            | ApiCommand::PutLogger(_)
            | ApiCommand::PutMetrics(_)
            | ApiCommand::PutVsock(_) => (
                Err(ApiError::Internal(
                    "a pre-boot command reached the running VM".into(),
                )),
                Effect::None,
            ),
        }
    }

    /// `PATCH /vm`: Firecracker's pause and resume, done when the VM is already so.
    fn set_state(&mut self, state: VmStateChange) -> (ApiReply, Effect) {
        match (state, self.pause.is_paused()) {
            (VmStateChange::Paused, false) => (Ok(Reply::Done), Effect::Pause),
            (VmStateChange::Resumed, true) => {
                self.pause.set(false);
                (Ok(Reply::Done), Effect::None)
            }
            _ => (Ok(Reply::Done), Effect::None),
        }
    }

    fn action(&mut self, action: VmAction) -> (ApiReply, Effect) {
        match (action, self.pause.is_paused()) {
            (VmAction::FlushMetrics, _) if self.config.metrics.is_none() => (
                Err(ApiError::BadRequest(
                    "FlushMetrics: no metrics file is configured (PUT /metrics before \
                     InstanceStart, or the config's metrics section)"
                        .into(),
                )),
                Effect::None,
            ),
            (VmAction::FlushMetrics, _) => (Ok(Reply::Done), Effect::FlushMetrics),
            (VmAction::SendCtrlAltDel, _) => (
                self.devices
                    .send_ctrl_alt_del()
                    .map(|()| Reply::Done)
                    .map_err(|e| ApiError::BadRequest(format!("SendCtrlAltDel: {e}"))),
                Effect::None,
            ),
            (VmAction::InstanceStart, _) => (
                Err(ApiError::BadRequest("the VM is already running".into())),
                Effect::None,
            ),
            (VmAction::Pause, true) => (
                Err(ApiError::Conflict("the VM is already paused".into())),
                Effect::None,
            ),
            (VmAction::Pause, false) => (Ok(Reply::Done), Effect::Pause),
            (VmAction::Resume, false) => (
                Err(ApiError::Conflict(
                    "the VM is running; Resume needs a paused VM".into(),
                )),
                Effect::None,
            ),
            (VmAction::Resume, true) => {
                self.pause.set(false);
                (Ok(Reply::Done), Effect::None)
            }
            (VmAction::Shutdown, _) => (Ok(Reply::Done), Effect::Shutdown),
        }
    }

    /// The iothreads and rate-limit groups with their config entries.
    fn dataplane(&mut self) -> Dataplane<'_> {
        Dataplane::new(
            &self.devices.iothreads,
            &mut self.config.iothreads,
            &self.devices.rate_limit_groups,
            &mut self.config.rate_limit_groups,
            drive_groups(&self.config.drives),
        )
    }

    /// Swaps a drive's backing file (`path_on_host`) and sets, changes or removes its own
    /// limits; all or nothing: every value is checked and the new file opened before anything
    /// changes, and a failed swap leaves the limits as they were. The drive's queues see new
    /// limits at their next request (a throttled queue is woken to look).
    fn patch_drive(&mut self, id: &str, u: &DriveUpdate) -> ApiReply {
        crate::live_tuning::check_drive_id(u, id)?;
        let drive = self
            .devices
            .drives
            .iter()
            .find(|d| d.id == id)
            .ok_or_else(|| not_found("drive", id))?;
        let cfg = self
            .config
            .drives
            .iter_mut()
            .find(|c| c.drive_id == id)
            .ok_or_else(|| ApiError::Internal(format!("drive {id} has no config")))?;
        if let Some(Some(r)) = &u.rate_limiter {
            r.check("rate_limiter").map_err(ApiError::invalid)?;
        }
        if let Some(path) = &u.path_on_host {
            cfg.path_on_host = swap_drive_file(drive, path, cfg.is_read_only, cfg.direct)?;
        }
        if let Some(limits) = u.rate_limiter {
            crate::live_tuning::patch_drive_limits(
                &drive.rate_limits,
                &drive.iothread,
                &mut cfg.rate_limiter,
                id,
                limits,
            )?;
        }
        Ok(Reply::Done)
    }

    fn drive_report(
        &self,
        d: &crate::device_manager::DriveHandle,
    ) -> Result<DriveReport, ApiError> {
        let cfg = self
            .config
            .drives
            .iter()
            .find(|c| c.drive_id == d.id)
            .ok_or_else(|| ApiError::Internal(format!("drive {} has no config", d.id)))?;
        Ok(DriveReport::new(d.counters(), cfg, d.slot).with_capacity(d.swap.capacity_sectors()))
    }

    /// Everything countable, in the shape the API documents for `GET /metrics`.
    pub fn metrics(&self) -> MetricsReport {
        let vm = crate::metrics::VmMetrics {
            uptime_ms: self.started.elapsed().as_millis() as u64,
            vcpus: u64::from(self.config.machine.vcpu_count),
            running: !self.pause.is_paused(),
        };
        MetricsReport {
            vm: VmReport {
                state: self.state().to_string(),
                metrics: crate::metrics::report::MetricFields::of(&vm),
            },
            iothreads: self
                .devices
                .iothreads
                .iter()
                .map(|(id, t)| iothread_report(id, t))
                .collect(),
            drives: self.devices.drives.iter().map(|d| d.counters()).collect(),
            network_interfaces: self
                .devices
                .nics
                .iter()
                .map(|n| crate::metrics::nic::NicCounters::new(&n.id, &n.stats))
                .collect(),
            rate_limit_groups: group_reports(
                &self.devices.rate_limit_groups,
                &drive_groups(&self.config.drives),
            ),
            threads: crate::live_tuning::thread_reports(),
        }
    }
}
