//! The typed commands the API thread sends to the control thread, with their replies.
//!
//! The HTTP layer ([`super`]) parses and validates the shape of a request, builds an
//! [`ApiCommand`] and waits for the [`ApiReply`]; the control thread (which owns the devices)
//! executes it. Nothing here touches a device.

use serde::{Deserialize, Serialize};

pub use super::replies::Reply;
use crate::config::{
    BootSourceConfig, DriveConfig, IoThreadConfig, MachineConfig, MetricsConfig, PollPolicyKind,
};
use crate::field_update::present;
use crate::logger::LoggerConfig;
use crate::rate_limit::RateLimitGroupConfig;
pub use crate::rate_limit::{DriveUpdate, GroupUpdate};

/// A request for the control thread.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiCommand {
    /// `GET /`: name, version, VM state.
    GetInfo,
    /// `GET /vm/config`: the config file's shape with effective values.
    GetConfig,
    /// `GET /iothreads`.
    ListIoThreads,
    /// `GET /iothreads/{id}`.
    GetIoThread(String),
    /// `PATCH /iothreads/{id}`: applied atomically; the reply carries the values in force.
    PatchIoThread(String, IoThreadUpdate),
    /// `GET /drives`.
    ListDrives,
    /// `GET /drives/{id}`.
    GetDrive(String),
    /// `PATCH /drives/{id}`: the drive's `rate_limiter`; the reply is the drive with the values
    /// in force.
    PatchDrive(String, DriveUpdate),
    /// `PATCH /network-interfaces/{id}`: the interface's rx/tx limiters, live.
    PatchNetworkInterface(String, crate::net::NetworkInterfaceUpdate),
    /// `GET /rate-limit-groups`.
    ListRateLimitGroups,
    /// `GET /rate-limit-groups/{id}`.
    GetRateLimitGroup(String),
    /// `PATCH /rate-limit-groups/{id}`: the group's buckets; the reply is the group in force.
    PatchRateLimitGroup(String, GroupUpdate),
    /// `GET /metrics`: see [`crate::api`] for the JSON shape the Prometheus view is built from.
    GetMetrics,
    /// `PUT /actions`.
    Action(VmAction),
    /// `PATCH /vm`: Firecracker's pause and resume, which succeed when already done.
    SetVmState(VmStateRequest),
    /// `GET /machine-config`.
    GetMachineConfig,
    /// `PUT /machine-config` (before `InstanceStart`): fields left out take their defaults.
    PutMachineConfig(MachineConfig),
    /// `PATCH /machine-config` (before `InstanceStart`): the fields given change.
    PatchMachineConfig(serde_json::Map<String, serde_json::Value>),
    /// `PUT /boot-source` (before `InstanceStart`).
    PutBootSource(BootSourceConfig),
    /// `PUT /drives/{id}` (before `InstanceStart`): adds or replaces the drive.
    PutDrive(String, Box<DriveConfig>),
    /// `PUT /network-interfaces/{id}` (before `InstanceStart`): adds or replaces the
    /// interface.
    PutNetworkInterface(String, Box<crate::net::NetworkInterfaceConfig>),
    /// `PUT /iothreads/{id}` (before `InstanceStart`): adds or replaces the iothread.
    PutIoThread(String, Box<IoThreadConfig>),
    /// `PUT /rate-limit-groups/{id}` (before `InstanceStart`): adds or replaces the group.
    PutRateLimitGroup(String, RateLimitGroupConfig),
    /// `PUT /logger`: Firecracker's logger (before `InstanceStart`).
    PutLogger(LoggerConfig),
    /// `PUT /metrics`: the metrics file (before `InstanceStart`).
    PutMetrics(MetricsConfig),
    /// `PUT /vsock`: the virtio-vsock device (before `InstanceStart`; a second replaces it).
    PutVsock(vmm_config::vsock::VsockConfig),
    /// `PUT /snapshot/create`: the paused VM to files (docs/snapshot.md).
    SnapshotCreate(SnapshotCreateRequest),
    /// `PUT /snapshot/load` (before `InstanceStart`): a VM restored from files.
    SnapshotLoad(SnapshotLoadRequest),
}

/// `PUT /snapshot/load` body (Firecracker's `SnapshotLoadParams`, the fields Osprey takes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotLoadRequest {
    /// The state file.
    #[schema(value_type = String)]
    pub snapshot_path: std::path::PathBuf,
    /// Where guest memory comes from.
    #[serde(default)]
    pub mem_backend: Option<MemBackend>,
    /// Deprecated by Firecracker for `mem_backend`: the memory file.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub mem_file_path: Option<std::path::PathBuf>,
    /// Run the VM once restored (else it stays paused until `PATCH /vm`).
    #[serde(default)]
    pub resume_vm: bool,
    /// Firecracker's dirty-page tracking for diff snapshots: Osprey takes full snapshots only,
    /// so only `false` is accepted.
    #[serde(default)]
    pub enable_diff_snapshots: bool,
    /// As `enable_diff_snapshots`, its newer name.
    #[serde(default)]
    pub track_dirty_pages: bool,
    /// Osprey's: other backing files for some drives (a clone's own copies; each of the saved
    /// size), as Firecracker's `network_overrides` does for tap devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drive_overrides: Vec<DriveOverride>,
    /// Firecracker's: advance the guest's kvmclock by the real time since the snapshot
    /// (`KVM_CLOCK_REALTIME`; the snapshot must have saved it). Without it the clock goes on
    /// from where it stopped, as in Firecracker.
    #[serde(default)]
    pub clock_realtime: bool,
    /// Firecracker's: other host taps for some network interfaces of the snapshot (a clone's
    /// own), opened in the load's preflight; an `iface_id` the snapshot lacks is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_overrides: Vec<NetworkOverride>,
}

/// Firecracker's `NetworkOverride`: a network interface of the snapshot on another host tap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkOverride {
    /// The interface (`iface_id` of the snapshot's `network-interfaces`).
    pub iface_id: String,
    /// Its host tap for this restore (1 to 15 bytes).
    pub host_dev_name: String,
}

/// A drive of the snapshot on another backing file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveOverride {
    /// The drive.
    pub drive_id: String,
    /// Its file for this restore.
    #[schema(value_type = String)]
    pub path_on_host: std::path::PathBuf,
}

/// Firecracker's `MemoryBackend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemBackend {
    /// `File` (Firecracker's `Uffd` is refused).
    pub backend_type: String,
    /// The memory file.
    #[schema(value_type = String)]
    pub backend_path: std::path::PathBuf,
}

impl SnapshotLoadRequest {
    /// The memory file: `mem_backend` (type `File`) or `mem_file_path`, exactly one.
    pub fn mem_path(&self) -> Result<&std::path::Path, ApiError> {
        if self.enable_diff_snapshots || self.track_dirty_pages {
            return Err(ApiError::BadRequest(
                "PUT /snapshot/load: Osprey takes full snapshots only (no dirty-page tracking)"
                    .into(),
            ));
        }
        match (&self.mem_backend, &self.mem_file_path) {
            (Some(b), None) if b.backend_type == "File" => Ok(&b.backend_path),
            (Some(b), None) => Err(ApiError::BadRequest(format!(
                "PUT /snapshot/load: mem_backend.backend_type {:?}: Osprey takes File only",
                b.backend_type
            ))),
            (None, Some(p)) => Ok(p),
            _ => Err(ApiError::BadRequest(
                "PUT /snapshot/load: give either mem_backend or mem_file_path".into(),
            )),
        }
    }
}

/// `PUT /snapshot/create` body (Firecracker's `SnapshotCreateParams`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotCreateRequest {
    /// `Full` (the only kind Osprey takes; Firecracker's `Diff` is refused).
    #[serde(default = "full_snapshot")]
    pub snapshot_type: String,
    /// Where the state file goes. With the sandbox on, in the API socket's folder or
    /// `snapshot.folder`, or beneath one.
    #[schema(value_type = String)]
    pub snapshot_path: std::path::PathBuf,
    /// Where guest memory goes. With the sandbox on, in the API socket's folder or
    /// `snapshot.folder`, or beneath one.
    #[schema(value_type = String)]
    pub mem_file_path: std::path::PathBuf,
}

fn full_snapshot() -> String {
    "Full".into()
}

impl ApiCommand {
    /// The route a pre-boot-only command came from, for the refusal once the VM runs.
    pub fn preboot_only(&self) -> Option<&'static str> {
        Some(match self {
            ApiCommand::PutMachineConfig(_) => "PUT /machine-config",
            ApiCommand::PatchMachineConfig(_) => "PATCH /machine-config",
            ApiCommand::PutBootSource(_) => "PUT /boot-source",
            ApiCommand::PutDrive(..) => "PUT /drives",
            ApiCommand::PutNetworkInterface(..) => "PUT /network-interfaces",
            ApiCommand::PutIoThread(..) => "PUT /iothreads",
            ApiCommand::PutRateLimitGroup(..) => "PUT /rate-limit-groups",
            ApiCommand::PutLogger(_) => "PUT /logger",
            ApiCommand::PutMetrics(_) => "PUT /metrics",
            ApiCommand::PutVsock(_) => "PUT /vsock",
            ApiCommand::SnapshotLoad(_) => "PUT /snapshot/load",
            _ => return None,
        })
    }
}

/// `PATCH /vm` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VmStateRequest {
    /// `Paused` or `Resumed`.
    pub state: VmStateChange,
}

/// `PATCH /vm`'s states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum VmStateChange {
    /// Stop the vCPUs.
    Paused,
    /// Run them again.
    Resumed,
}

/// `PATCH /iothreads/{id}` body: every field optional, unknown fields refused. A field left out
/// stays as it is; `null` puts it back to its default ([`crate::field_update`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IoThreadUpdate {
    /// Longest poll window in ns (0 turns polling off; default 32768).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub poll_max_ns: Option<Option<u64>>,
    /// Window growth factor (0 = ×2; default 0).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub poll_grow: Option<Option<u64>>,
    /// Window shrink divisor (default 0).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub poll_shrink: Option<Option<u64>>,
    /// `Classic`, `Weighted` or `Adaptive` (default `Adaptive`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub poll_policy: Option<Option<PollPolicyKind>>,
    /// Weighted policy shift (1-16; default 3).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub poll_weight: Option<Option<u32>>,
    /// Requests per queue per submission (0 = 32, at most 1024; default 32).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_batch: Option<Option<u32>>,
}

/// `PUT /actions` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionRequest {
    /// What to do.
    pub action_type: VmAction,
}

/// A VM action: Firecracker's (`InstanceStart`, `SendCtrlAltDel`, `FlushMetrics`) and Osprey's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum VmAction {
    /// Boot the VM configured over the API (only before it started).
    InstanceStart,
    /// Press Ctrl+Alt+Del on the guest's i8042 keyboard (a Linux guest with `reboot=k` then
    /// reboots, which stops the VM).
    SendCtrlAltDel,
    /// Write a line to the metrics file now.
    FlushMetrics,
    /// Stop the vCPUs (I/O in flight completes); 409 when already paused.
    Pause,
    /// Restart the vCPUs; 409 when running.
    Resume,
    /// Stop the VM and exit 0.
    Shutdown,
}

/// Why a command failed; maps to an HTTP status with a `{"fault_message": …}` body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed or a value is out of range (the message names the field).
    #[error("{0}")]
    BadRequest(String),
    /// 404: unknown id.
    #[error("{0}")]
    NotFound(String),
    /// 409: the VM's state does not allow the action.
    #[error("{0}")]
    Conflict(String),
    /// 500: the VMM failed.
    #[error("{0}")]
    Internal(String),
    /// 400: a value the layer below refused, with its typed error (the message is the error's,
    /// after the field it names when there is one).
    #[error(transparent)]
    Invalid(Cause),
    /// 500: a step the layer below failed, with its typed error.
    #[error(transparent)]
    Failed(Cause),
}

impl ApiError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) | ApiError::Invalid(_) => 400,
            ApiError::NotFound(_) => 404,
            ApiError::Conflict(_) => 409,
            ApiError::Internal(_) | ApiError::Failed(_) => 500,
        }
    }

    /// A 400 carrying `error` (a value check of a lower layer failed).
    pub fn invalid(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        ApiError::Invalid(Cause::new(None, error))
    }

    /// A 400 carrying `error`, about `field` (its message starts `field: `).
    pub fn invalid_field(
        field: &'static str,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ApiError::Invalid(Cause::new(Some(field), error))
    }

    /// A 500 carrying `error` (a step of a lower layer failed).
    pub fn failed(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        ApiError::Failed(Cause::new(None, error))
    }
}

/// A lower layer's typed error inside an [`ApiError`], with the request field it concerns: the
/// answer's message is its `Display`, a log or a caller walks its `source()` chain. Shared, so
/// that an `ApiError` stays `Clone`; two are equal when their messages are.
#[derive(Debug, Clone)]
pub struct Cause {
    field: Option<&'static str>,
    error: std::sync::Arc<dyn std::error::Error + Send + Sync>,
}

impl Cause {
    fn new(
        field: Option<&'static str>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            field,
            error: std::sync::Arc::new(error),
        }
    }

    /// The error carried.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(field) => write!(f, "{field}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// The control thread's answer: a typed body for 200 ([`Reply::Done`]: 204), or an error.
pub type ApiReply = Result<Reply, ApiError>;

/// A command with the channel its reply goes back on.
#[derive(Debug)]
pub struct ApiRequest {
    /// The command.
    pub command: ApiCommand,
    /// Where the reply goes.
    pub reply: tokio::sync::oneshot::Sender<ApiReply>,
}

/// How the API thread hands requests to the control thread.
pub type Submit = std::sync::Arc<dyn Fn(ApiRequest) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_refuses_unknown_fields_and_names_bad_types() {
        let ok: IoThreadUpdate =
            serde_json::from_str(r#"{"poll_max_ns": 0, "poll_policy": "Weighted"}"#).expect("ok");
        assert_eq!(ok.poll_max_ns, Some(Some(0)));
        assert_eq!(ok.poll_policy, Some(Some(PollPolicyKind::Weighted)));
        let reset: IoThreadUpdate = serde_json::from_str(r#"{"poll_max_ns": null}"#).expect("null");
        assert_eq!(reset.poll_max_ns, Some(None), "null resets to the default");
        assert_eq!(reset.poll_grow, None, "absent stays");
        assert!(serde_json::from_str::<IoThreadUpdate>(r#"{"poll_max": 1}"#).is_err());
        assert!(serde_json::from_str::<IoThreadUpdate>(r#"{"poll_max_ns": -1}"#).is_err());
        let a: ActionRequest = serde_json::from_str(r#"{"action_type": "Pause"}"#).expect("action");
        assert_eq!(a.action_type, VmAction::Pause);
        assert_eq!(ApiError::Conflict("x".into()).status(), 409);
    }

    #[test]
    fn an_error_from_below_keeps_its_type_status_and_message() {
        use std::error::Error as _;
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = ApiError::invalid_field("path_on_host", io());
        assert_eq!(e.status(), 400);
        assert_eq!(e.to_string(), "path_on_host: no such file");
        let cause = e.source().expect("the io::Error");
        assert!(
            cause.downcast_ref::<std::io::Error>().is_some(),
            "{cause:?}"
        );
        assert_eq!(ApiError::failed(io()).status(), 500);
        assert_eq!(ApiError::invalid(io()).to_string(), "no such file");
        assert_eq!(ApiError::invalid(io()), ApiError::invalid(io()));
    }
}
