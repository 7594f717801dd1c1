//! The VM configuration: one serde type per section of the JSON file, shared with the API.
//!
//! Parsing ([`parse`]) names the JSON path of a bad field (`machine-config.vcpu_count: invalid
//! type …`); [`VmConfig::check_values`] checks values ([`validate`]) without touching the host
//! (start-up's preflight, [`crate::preflight`], checks the host and opens the files);
//! [`effective`] fills in what start-up would choose; [`paths`] gathers the host paths the
//! sandbox keeps reachable. Field
//! names follow Firecracker (`machine-config`, `boot-source`, `drives`) and add Osprey's
//! `iothreads`, `rate-limit-groups`, `metrics`, `snapshot` and `sandbox`.

use std::path::PathBuf;

pub mod absent;
pub mod boot_rules;
pub mod effective;
pub mod parse;
pub mod paths;
pub mod validate;
pub mod words;

use serde::{Deserialize, Serialize};

pub use absent::{AbsentFeature, AbsentSection};
pub use parse::RelativeTo;

/// Smallest guest memory we boot (MiB).
pub const MIN_MEM_MIB: u64 = 16;
pub use arch::layout::MAX_VCPUS;
/// Most virtqueues per drive.
pub const MAX_QUEUES: u16 = 16;
/// Largest virtqueue size.
pub const MAX_QUEUE_SIZE: u16 = 1024;
/// The iothread drives use when the config names none.
pub const DEFAULT_IOTHREAD: &str = "io0";

/// Errors in a VM config: each names the file or JSON path at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A network interface's tap could not be opened (`field` names it).
    #[error("{field}: {source}")]
    Tap {
        /// The field (`network-interfaces[i].host_dev_name`).
        field: String,
        /// Why.
        source: devices::net::TapError,
    },
    /// The config file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The JSON is malformed, has an unknown field or a value of the wrong type.
    #[error("{file}: {path}: {message}")]
    Parse {
        /// The file (or `<inline>`).
        file: String,
        /// JSON path of the bad field (`.` for the document).
        path: String,
        /// What serde said.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("{field}: {reason}")]
    Invalid {
        /// JSON path of the field.
        field: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A rate limit out of range.
    #[error(transparent)]
    RateLimit(#[from] crate::rate_limit::RateLimitConfigError),
    /// A `fault_injection` section that cannot be carried out.
    #[error(transparent)]
    FaultInjection(#[from] crate::fault_injection::FaultInjectionError),
    /// `sandbox` fields that do not go together.
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxConfigError),
    /// `sandbox.mode` strict, and this host or the command line gives less than every part.
    #[error("sandbox.mode: {0}")]
    SandboxStrict(crate::sandbox::SandboxError),
    /// More vCPUs than this host's KVM allows (start-up's preflight asks KVM).
    #[error(transparent)]
    VcpuLimit(#[from] crate::host::VcpuLimitError),
    /// The kernel or initrd cannot be booted (start-up's preflight reads their headers).
    #[error("{field}: {source}")]
    KernelImage {
        /// `boot-source.kernel_image_path` or `boot-source.initrd_path`.
        field: &'static str,
        /// Why.
        source: arch::kernel_image::KernelImageError,
    },
    /// A drive's I/O engine does not run on this host (start-up's preflight probes it).
    #[error("drives[{index}].io_engine: {source}")]
    Engine {
        /// The drive's index in `drives`.
        index: usize,
        /// Why.
        source: dataplane::engine::EngineError,
    },
    /// A drive's backing file cannot be used (start-up's preflight opens it).
    #[error("drives[{index}].path_on_host: {source}")]
    Drive {
        /// The drive's index in `drives`.
        index: usize,
        /// Why.
        source: crate::drive::DriveOpenError,
    },
    /// An error found in a config file's values, named with the file.
    #[error("{file}: {source}")]
    InFile {
        /// The file.
        file: String,
        /// What is wrong.
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    /// Names the config file a value error came from (parse and read errors name it already).
    pub fn in_file(self, file: Option<&std::path::Path>) -> ConfigError {
        match (self, file) {
            (
                e @ (ConfigError::Read { .. }
                | ConfigError::Parse { .. }
                | ConfigError::InFile { .. }),
                _,
            )
            | (e, None) => e,
            (e, Some(f)) => ConfigError::InFile {
                file: f.display().to_string(),
                source: Box::new(e),
            },
        }
    }
}

/// Something start-up would warn about: the config works, but may not do what was meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The config file, when the warning is about its text.
    pub file: Option<String>,
    /// JSON path of the field.
    pub field: String,
    /// What to know or change.
    pub message: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A value error: `field` (its JSON path) and what is wrong with it.
pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The whole VM: the JSON file's shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    /// vCPUs and memory.
    #[serde(rename = "machine-config", default)]
    pub machine: MachineConfig,
    /// Kernel, initrd and command line.
    #[serde(rename = "boot-source")]
    pub boot: BootSourceConfig,
    /// Block devices.
    #[serde(default)]
    pub drives: Vec<DriveConfig>,
    /// Dataplane threads.
    #[serde(default)]
    pub iothreads: Vec<IoThreadConfig>,
    /// Rate limits shared by several drives (`drives[].rate_limit_group`). Spelled
    /// `rate_limit_groups` before; that name is still read, with a warning.
    #[serde(
        rename = "rate-limit-groups",
        alias = "rate_limit_groups",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub rate_limit_groups: Vec<crate::rate_limit::RateLimitGroupConfig>,
    /// The REST API socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<ApiConfig>,
    /// Periodic metrics to a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsConfig>,
    /// A folder for snapshot files besides the API socket's (with the sandbox on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotConfig>,
    /// The sandbox (seccomp, Landlock, privileges, namespaces).
    #[serde(default)]
    pub sandbox: crate::sandbox::SandboxConfig,
    /// Firecracker's logger, applied as `PUT /logger` is (before the VM is built).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<crate::logger::LoggerConfig>,
    /// Firecracker's custom CPU template: absent from Osprey (null only; [`absent`]).
    #[serde(
        rename = "cpu-config",
        default,
        skip_serializing_if = "AbsentSection::skip"
    )]
    #[schema(value_type = Option<Object>)]
    pub cpu_config: AbsentSection,
    /// Firecracker's balloon: absent from Osprey (null only).
    #[serde(default, skip_serializing_if = "AbsentSection::skip")]
    #[schema(value_type = Option<Object>)]
    pub balloon: AbsentSection,
    /// Network interfaces (virtio-net over host taps); null reads as none.
    #[serde(
        rename = "network-interfaces",
        default,
        deserialize_with = "crate::net::null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub network_interfaces: Vec<crate::net::NetworkInterfaceConfig>,
    /// Firecracker's vsock: a virtio-vsock device whose host side is Unix sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsock: Option<crate::vsock::VsockConfig>,
    /// Firecracker's MMDS: absent from Osprey (null only).
    #[serde(
        rename = "mmds-config",
        default,
        skip_serializing_if = "AbsentSection::skip"
    )]
    #[schema(value_type = Option<Object>)]
    pub mmds_config: AbsentSection,
    /// Firecracker's entropy device: absent from Osprey (null only).
    #[serde(default, skip_serializing_if = "AbsentSection::skip")]
    #[schema(value_type = Option<Object>)]
    pub entropy: AbsentSection,
    /// Firecracker's pmem devices: absent from Osprey (`[]` or null only).
    #[serde(default, skip_serializing_if = "AbsentSection::skip")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub pmem: AbsentSection,
    /// Firecracker's memory hot-plug: absent from Osprey (null only).
    #[serde(
        rename = "memory-hotplug",
        default,
        skip_serializing_if = "AbsentSection::skip"
    )]
    #[schema(value_type = Option<Object>)]
    pub memory_hotplug: AbsentSection,
}

/// `metrics`: a JSON line of every counter appended to `metrics_path` every `interval_ms`
/// (Firecracker's `metrics` section and `PUT /metrics` body, with Osprey's interval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// The file (created if missing, appended to; a FIFO works too). Firecracker's name;
    /// Osprey's earlier `path` is still read.
    #[serde(rename = "metrics_path", alias = "path")]
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// Interval in ms (at least 100).
    #[serde(default = "default_metrics_interval")]
    pub interval_ms: u64,
}

/// `metrics.interval_ms` when not given.
pub const DEFAULT_METRICS_INTERVAL_MS: u64 = 1000;

fn default_metrics_interval() -> u64 {
    DEFAULT_METRICS_INTERVAL_MS
}

/// `machine-config`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineConfig {
    /// Number of vCPUs (1 to 64).
    #[serde(default = "default_vcpus")]
    pub vcpu_count: u8,
    /// Guest memory in MiB.
    #[serde(default = "default_mem")]
    pub mem_size_mib: u64,
    /// How the scheduler weighs the VM's threads against each other.
    #[serde(default)]
    pub thread_weights: crate::thread_weights::ThreadWeights,
    /// Where the iothreads that serve only NICs run relative to the vCPUs.
    #[serde(default)]
    pub thread_placement: crate::thread_placement::ThreadPlacement,
    /// Host CPUs per vCPU: entry `i` pins vCPU `i`'s thread to those CPUs (an empty list, or
    /// no entry, leaves it to the scheduler). At most one entry per vCPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vcpu_affinity: Vec<Vec<usize>>,
    /// Firecracker's simultaneous multithreading flag: Osprey gives each vCPU its own core, so
    /// only `false` is accepted.
    #[serde(default)]
    pub smt: bool,
    /// Firecracker's dirty-page tracking for diff snapshots: only `false` is accepted.
    #[serde(default)]
    pub track_dirty_pages: bool,
    /// Firecracker's CPU template (deprecated there): only `None` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_template: Option<String>,
    /// Firecracker's huge pages for guest memory: only `None` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub huge_pages: Option<String>,
}

fn default_vcpus() -> u8 {
    1
}
fn default_mem() -> u64 {
    128
}

impl Default for MachineConfig {
    fn default() -> Self {
        Self {
            vcpu_count: default_vcpus(),
            mem_size_mib: default_mem(),
            thread_weights: Default::default(),
            thread_placement: Default::default(),
            vcpu_affinity: Vec::new(),
            smt: false,
            track_dirty_pages: false,
            cpu_template: None,
            huge_pages: None,
        }
    }
}

/// `boot-source`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BootSourceConfig {
    /// An ELF (with or without a PVH note) or a bzImage.
    #[schema(value_type = String)]
    pub kernel_image_path: PathBuf,
    /// Optional initramfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub initrd_path: Option<PathBuf>,
    /// The guest's command line (`null`, as Firecracker writes an unset one, is empty).
    #[serde(default, deserialize_with = "null_as_default")]
    pub boot_args: String,
    /// Unpack a bzImage's compressed kernel on the host and boot it as an ELF vmlinux (off:
    /// the kernel's own decompressor runs in the guest).
    #[serde(default = "default_unpack")]
    pub unpack: bool,
}

/// A value, or `null` for the type's default: Firecracker writes its unset `Option` fields as
/// `null` where Osprey's field has a plain default.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn default_unpack() -> bool {
    true
}

impl Default for BootSourceConfig {
    fn default() -> Self {
        Self {
            kernel_image_path: PathBuf::new(),
            initrd_path: None,
            boot_args: String::new(),
            unpack: default_unpack(),
        }
    }
}

/// The I/O engine a drive uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum IoEngineKind {
    /// Blocking preadv/pwritev on the dataplane thread.
    Sync,
    /// io_uring.
    IoUring,
    /// Linux native AIO.
    LinuxAio,
    /// Completes at once without touching the file.
    Null,
    /// The default: each read and write is tried inline on the iothread (`preadv2`/`pwritev2`
    /// with RWF_NOWAIT, which succeeds only when it will not block: page-cache hits, tmpfs);
    /// the rest goes to io_uring (else Linux AIO for O_DIRECT files, else Sync). Inline attempts
    /// stop while most of them would block, and are probed again now and then. Firecracker's
    /// `Async` (its io_uring engine) is read as `Auto`.
    #[serde(alias = "Async")]
    Auto,
}

/// A drive's `cache_type` (Firecracker's): `Unsafe` (its default) or `Writeback`. Osprey
/// offers FLUSH and honours it with `fdatasync` for both: a guest's flush is never dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum CacheType {
    /// Firecracker: no FLUSH offered. Osprey: treated as `Writeback`.
    #[default]
    Unsafe,
    /// FLUSH offered and honoured.
    Writeback,
}

/// One entry of `drives`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveConfig {
    /// Unique id; also the virtio-blk serial.
    pub drive_id: String,
    /// The backing file or block device.
    #[schema(value_type = String)]
    pub path_on_host: PathBuf,
    /// Open read-only and offer VIRTIO_BLK_F_RO (`null`, as Firecracker may write it, is
    /// false).
    #[serde(default, deserialize_with = "null_as_default")]
    pub is_read_only: bool,
    /// The guest's root disk (Firecracker's rule): it becomes the first virtio-blk device
    /// (`/dev/vda`) and `root=/dev/vda rw|ro` (or `root=PARTUUID=…`) joins the boot args.
    #[serde(default)]
    pub is_root_device: bool,
    /// With `is_root_device`: the root partition's UUID, for `root=PARTUUID=…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partuuid: Option<String>,
    /// Firecracker's cache type (see [`CacheType`]).
    #[serde(default)]
    pub cache_type: CacheType,
    /// Open with O_DIRECT.
    #[serde(default)]
    pub direct: bool,
    /// The I/O engine (default: `Auto`).
    #[serde(default = "default_engine")]
    pub io_engine: IoEngineKind,
    /// Number of virtqueues.
    #[serde(default = "default_queues")]
    pub num_queues: u16,
    /// Size of each virtqueue (a power of two).
    #[serde(default = "default_queue_size")]
    pub queue_size: u16,
    /// The iothread serving this drive's queues (default: the first one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iothread: Option<String>,
    /// Make chosen requests fail (EIO/ENOSPC) as if the backing store had; off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_injection: Option<crate::fault_injection::FaultInjectionConfig>,
    /// The drive's own IOPS and bandwidth limits (Firecracker's `rate_limiter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limiter: Option<crate::rate_limit::RateLimiterConfig>,
    /// A `rate-limit-groups` id: the drive also shares that group's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_group: Option<String>,
    /// Firecracker's vhost-user socket: absent from Osprey's VMM (null only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
}

impl IoEngineKind {
    /// The dataplane's name for this engine.
    pub fn to_dataplane(self) -> dataplane::EngineKind {
        match self {
            IoEngineKind::Sync => dataplane::EngineKind::Sync,
            IoEngineKind::IoUring => dataplane::EngineKind::IoUring,
            IoEngineKind::LinuxAio => dataplane::EngineKind::LinuxAio,
            IoEngineKind::Null => dataplane::EngineKind::Null,
            IoEngineKind::Auto => dataplane::EngineKind::Auto,
        }
    }
}

/// `Auto`: inline where the data is at hand, asynchronous where it is not.
fn default_engine() -> IoEngineKind {
    IoEngineKind::Auto
}

fn default_queues() -> u16 {
    1
}
fn default_queue_size() -> u16 {
    256
}

/// One entry of `iothreads`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IoThreadConfig {
    /// Unique id drives refer to.
    pub id: String,
    /// Longest poll window in ns (0 disables polling).
    #[serde(default = "default_poll_max_ns")]
    pub poll_max_ns: u64,
    /// Window growth factor (0 means 2).
    #[serde(default)]
    pub poll_grow: u64,
    /// Window shrink divisor (0: reset to 0 for Classic, halve for Weighted).
    #[serde(default)]
    pub poll_shrink: u64,
    /// The poll-window policy.
    #[serde(default = "default_poll_policy")]
    pub poll_policy: PollPolicyKind,
    /// Weighted policy: the newest event interval counts 2^-poll_weight (a shift, 1-16).
    #[serde(default = "default_poll_weight")]
    pub poll_weight: u32,
    /// Requests per queue per submission call (0 means the default, 32).
    #[serde(default = "default_max_batch")]
    pub max_batch: u32,
    /// io_uring set-up flags for the rings of this thread's queues.
    #[serde(default)]
    pub io_uring: IoUringConfig,
    /// Host CPUs to pin the thread to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_affinity: Vec<usize>,
}

/// `iothreads[].poll_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum PollPolicyKind {
    /// QEMU's adaptive polling: per-handler windows that grow ×poll_grow from 4 µs and reset
    /// (or divide by poll_shrink) when an event takes longer than poll_max_ns.
    Classic,
    /// The poll-weight policy: one window from weighted event-interval estimates, halving.
    Weighted,
    /// Osprey's: the classic windows, suspended while the host is busy (the iothread's run
    /// delay says the CPU it would poll with is wanted by someone else).
    Adaptive,
}

impl From<PollPolicyKind> for dataplane::poll::PolicyKind {
    fn from(k: PollPolicyKind) -> Self {
        match k {
            PollPolicyKind::Classic => Self::Classic,
            PollPolicyKind::Weighted => Self::Weighted,
            PollPolicyKind::Adaptive => Self::Adaptive,
        }
    }
}

impl From<dataplane::poll::PolicyKind> for PollPolicyKind {
    fn from(k: dataplane::poll::PolicyKind) -> Self {
        match k {
            dataplane::poll::PolicyKind::Classic => Self::Classic,
            dataplane::poll::PolicyKind::Weighted => Self::Weighted,
            dataplane::poll::PolicyKind::Adaptive => Self::Adaptive,
        }
    }
}

fn default_poll_policy() -> PollPolicyKind {
    PollPolicyKind::Adaptive
}

fn default_poll_weight() -> u32 {
    dataplane::poll::policy::DEFAULT_WEIGHT
}

impl IoThreadConfig {
    /// An iothread with every parameter at its default.
    pub fn with_id(id: &str) -> Self {
        Self {
            id: id.to_string(),
            poll_max_ns: default_poll_max_ns(),
            poll_grow: 0,
            poll_shrink: 0,
            poll_policy: default_poll_policy(),
            poll_weight: default_poll_weight(),
            max_batch: default_max_batch(),
            io_uring: IoUringConfig::default(),
            cpu_affinity: Vec::new(),
        }
    }

    /// The dataplane's poll parameters.
    pub fn poll_params(&self) -> dataplane::poll::PollParams {
        dataplane::poll::PollParams {
            max_ns: self.poll_max_ns,
            grow: self.poll_grow,
            shrink: self.poll_shrink,
            policy: self.poll_policy.into(),
            weight: self.poll_weight,
        }
    }
}

fn default_poll_max_ns() -> u64 {
    32768
}
fn default_max_batch() -> u32 {
    32
}

/// `iothreads[].io_uring`: the set-up flags to ask for (each falls back when the kernel refuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IoUringConfig {
    /// IORING_SETUP_SINGLE_ISSUER.
    #[serde(default = "yes")]
    pub single_issuer: bool,
    /// IORING_SETUP_COOP_TASKRUN.
    #[serde(default = "yes")]
    pub coop_taskrun: bool,
    /// IORING_SETUP_TASKRUN_FLAG (needs coop_taskrun).
    #[serde(default = "yes")]
    pub taskrun_flag: bool,
    /// The most io-wq worker threads the kernel may start for this iothread (0: the kernel's
    /// default, up to 4 per CPU).
    #[serde(default = "default_iowq_max_workers")]
    pub max_workers: u32,
}

fn default_iowq_max_workers() -> u32 {
    dataplane::engine::DEFAULT_IOWQ_MAX_WORKERS
}

fn yes() -> bool {
    true
}

impl Default for IoUringConfig {
    fn default() -> Self {
        Self {
            single_issuer: true,
            coop_taskrun: true,
            taskrun_flag: true,
            max_workers: default_iowq_max_workers(),
        }
    }
}

impl IoUringConfig {
    /// The dataplane's form.
    pub fn to_dataplane(self) -> dataplane::engine::IoUringFlags {
        dataplane::engine::IoUringFlags {
            single_issuer: self.single_issuer,
            coop_taskrun: self.coop_taskrun,
            taskrun_flag: self.taskrun_flag,
            max_workers: self.max_workers,
        }
    }
}

/// `api`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Path of the Unix socket.
    #[schema(value_type = String)]
    pub socket: PathBuf,
}

/// `snapshot`: where `PUT /snapshot/create` may create its files with the sandbox on, besides
/// the API socket's folder (docs/snapshot.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotConfig {
    /// An existing folder: snapshot files may be created in it or beneath it.
    #[schema(value_type = String)]
    pub folder: PathBuf,
}

#[cfg(test)]
mod tests;
