//! The bodies of the API's answers, one type each: the control thread (or, before the VM
//! starts, [`crate::preboot`]) answers a command with a [`Reply`], which the HTTP layer
//! serializes (204 with no body for [`Reply::Done`]). The OpenAPI document's schemas are
//! generated from the same types ([`super::openapi`]).

use std::path::PathBuf;

use serde::Serialize;
use utoipa::ToSchema;

use crate::config::{
    CacheType, DriveConfig, IoEngineKind, IoThreadConfig, MachineConfig, VmConfig,
};
use crate::instance::InstanceInfo;
use crate::metrics::report::{DriveCounters, IoThreadReport, ThreadReport, VmReport};
use crate::rate_limit::{GroupReport, RateLimitGroupConfig, RateLimiterConfig};

/// A command's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// Done; nothing to show (204).
    Done,
    /// `GET /`.
    Info(InstanceInfo),
    /// `GET /version`.
    Version(VersionReply),
    /// `GET /vm/config`.
    Config(Box<ConfigReply>),
    /// `GET /machine-config`.
    Machine(MachineConfig),
    /// `GET /iothreads`.
    IoThreads(Vec<IoThreadView>),
    /// `GET /iothreads/{id}`.
    IoThread(Box<IoThreadView>),
    /// `GET /drives`.
    Drives(Vec<DriveView>),
    /// `GET /drives/{id}`.
    Drive(Box<DriveView>),
    /// `GET /rate-limit-groups`.
    Groups(Vec<GroupView>),
    /// `GET /rate-limit-groups/{id}`.
    Group(Box<GroupView>),
    /// `GET /metrics`.
    Metrics(Box<MetricsReport>),
}

impl Reply {
    /// The body as JSON; `None` for [`Reply::Done`].
    pub fn to_json(&self) -> Option<serde_json::Value> {
        match self {
            Reply::Done => None,
            // Maps, strings and numbers only: serializing cannot fail.
            other => Some(serde_json::to_value(other).unwrap_or_default()),
        }
    }
}

/// An iothread as `GET /iothreads` shows it: with its counters once the VM runs, as configured
/// before.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum IoThreadView {
    /// The VM runs: parameters in force and counters.
    Running(IoThreadReport),
    /// Before `InstanceStart`: the entry as given.
    Configured(IoThreadConfig),
}

/// A drive as `GET /drives` shows it: with its counters once the VM runs, as configured before.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum DriveView {
    /// The VM runs: counters and the configuration in force.
    Running(DriveReport),
    /// Before `InstanceStart`: the entry as given.
    Configured(DriveConfig),
}

/// A rate-limit group as `GET /rate-limit-groups` shows it: with its counters once the VM runs,
/// as configured before.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum GroupView {
    /// The VM runs: buckets in force, drives and counters.
    Running(GroupReport),
    /// Before `InstanceStart`: the entry as given.
    Configured(RateLimitGroupConfig),
}

/// `GET /vm/config`: the config file's sections with their effective values; before the start,
/// the sections given so far (no `boot-source` until one is). Its schema is [`VmConfig`]'s.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigReply {
    /// The configuration.
    pub config: VmConfig,
    /// Whether a boot source was given (`false` only before the start).
    pub has_boot_source: bool,
}

/// [`VmConfig`]'s schema, under its name, with `boot-source` optional: before the start it is
/// absent until given.
impl utoipa::PartialSchema for ConfigReply {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Schema;
        use utoipa::openapi::RefOr;
        let mut schema = <VmConfig as utoipa::PartialSchema>::schema();
        if let RefOr::T(Schema::Object(object)) = &mut schema {
            object.required.retain(|field| field != "boot-source");
            object.description = Some(
                "The whole VM: the JSON file's shape, with effective values; before the start, \
                 the sections given so far (no `boot-source` until one is)."
                    .into(),
            );
        }
        schema
    }
}

impl ToSchema for ConfigReply {
    fn name() -> std::borrow::Cow<'static, str> {
        <VmConfig as ToSchema>::name()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <VmConfig as ToSchema>::schemas(schemas);
    }
}

impl Serialize for ConfigReply {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.has_boot_source {
            return self.config.serialize(serializer);
        }
        let mut value = serde_json::to_value(&self.config).map_err(serde::ser::Error::custom)?;
        if let Some(sections) = value.as_object_mut() {
            sections.remove("boot-source");
        }
        value.serialize(serializer)
    }
}

/// `GET /drives/{id}` on a running VM: the drive's counters and its configuration in force.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Drive)]
pub struct DriveReport {
    /// The counters (and `drive_id`).
    #[serde(flatten)]
    pub counters: DriveCounters,
    /// The backing file or block device.
    #[schema(value_type = String)]
    pub path_on_host: PathBuf,
    /// The engine configured.
    pub io_engine: IoEngineKind,
    /// Opened read-only.
    pub is_read_only: bool,
    /// Firecracker's root device: the first virtio-blk device.
    pub is_root_device: bool,
    /// Firecracker's cache type.
    pub cache_type: CacheType,
    /// Opened with O_DIRECT.
    pub direct: bool,
    /// Virtqueues.
    pub num_queues: u16,
    /// Size of each virtqueue.
    pub queue_size: u16,
    /// The virtio-blk device's PCI slot.
    pub pci_slot: u8,
    /// The drive's own limits in force.
    pub rate_limiter: Option<RateLimiterConfig>,
    /// The rate-limit group it shares.
    pub rate_limit_group: Option<String>,
    /// The size the guest sees now, in bytes (whole 512-byte sectors of the backing file, as
    /// last opened: at start or by a `path_on_host` PATCH). Absent where the VMM does not
    /// track it (the vhost-user-blk backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
}

impl DriveReport {
    /// A running drive's report: its counters and `cfg`.
    pub fn new(counters: DriveCounters, cfg: &DriveConfig, pci_slot: u8) -> Self {
        Self {
            counters,
            path_on_host: cfg.path_on_host.clone(),
            io_engine: cfg.io_engine,
            is_read_only: cfg.is_read_only,
            is_root_device: cfg.is_root_device,
            cache_type: cfg.cache_type,
            direct: cfg.direct,
            num_queues: cfg.num_queues,
            queue_size: cfg.queue_size,
            pci_slot,
            rate_limiter: cfg.rate_limiter,
            rate_limit_group: cfg.rate_limit_group.clone(),
            capacity_bytes: None,
        }
    }

    /// With the capacity the guest sees, `capacity_sectors` 512-byte sectors.
    pub fn with_capacity(mut self, capacity_sectors: u64) -> Self {
        self.capacity_bytes = Some(capacity_sectors.saturating_mul(512));
        self
    }
}

/// `GET /version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = Version)]
pub struct VersionReply {
    /// The Firecracker API version whose routes and shapes Osprey follows.
    pub firecracker_version: &'static str,
    /// Osprey's own version.
    pub osprey_version: &'static str,
}

/// `GET /metrics` (and each line of the metrics file): everything countable.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Metrics)]
pub struct MetricsReport {
    /// The VM.
    pub vm: VmReport,
    /// Each iothread.
    pub iothreads: Vec<IoThreadReport>,
    /// Each drive's counters.
    pub drives: Vec<DriveCounters>,
    /// Each network interface's counters.
    pub network_interfaces: Vec<crate::metrics::nic::NicCounters>,
    /// Each rate-limit group.
    pub rate_limit_groups: Vec<GroupReport>,
    /// CPU time by thread name.
    pub threads: Vec<ThreadReport>,
}
