//! The instance's identity and state as Firecracker's `GET /` reports them (`InstanceInfo`):
//! the id given with `--id` (Firecracker's default `anonymous-instance` otherwise), the app's
//! name and version.

use std::sync::OnceLock;

use serde::Serialize;

/// Firecracker's id when `--id` is not given.
pub const DEFAULT_ID: &str = "anonymous-instance";

static ID: OnceLock<String> = OnceLock::new();

/// Sets the instance id (the first call wins).
pub fn set_id(id: &str) {
    let _ = ID.set(id.to_string());
}

/// The instance id.
pub fn id() -> &'static str {
    ID.get().map_or(DEFAULT_ID, String::as_str)
}

/// `GET /`: Firecracker's `InstanceInfo` and Osprey's own fields.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct InstanceInfo {
    /// `Osprey`.
    pub app_name: &'static str,
    /// The instance id.
    pub id: &'static str,
    /// `Not started`, `Running` or `Paused`.
    pub state: InstanceState,
    /// Osprey's version.
    pub vmm_version: &'static str,
    /// Osprey's name for itself (earlier replies had it).
    pub name: &'static str,
    /// Same as `vmm_version` (earlier replies had it).
    pub version: &'static str,
    /// Start-up's steps and their times (ms), once started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_timings: Option<crate::boot_timing::BootTimings>,
}

impl InstanceInfo {
    /// The info for a VM in `state`.
    pub fn new(
        state: InstanceState,
        boot_timings: Option<crate::boot_timing::BootTimings>,
    ) -> Self {
        Self {
            app_name: "Osprey",
            id: id(),
            state,
            vmm_version: env!("CARGO_PKG_VERSION"),
            name: "osprey",
            version: env!("CARGO_PKG_VERSION"),
            boot_timings,
        }
    }
}

/// The states `GET /` reports (the schema of [`InstanceInfo::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum InstanceState {
    /// Configured over the API, waiting for `InstanceStart`.
    #[serde(rename = "Not started")]
    NotStarted,
    /// The vCPUs run.
    Running,
    /// The vCPUs are paused.
    Paused,
}
