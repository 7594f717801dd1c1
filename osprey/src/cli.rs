//! The `osprey` command line: a config file, or a kernel given directly, plus overrides; or,
//! with the `api` subcommand, one request to a running VM's REST API.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use vmm::api::client;
use vmm::config::{ApiConfig, BootSourceConfig, ConfigError, ConfigWarning, RelativeTo, VmConfig};

/// Osprey: a small KVM virtual machine monitor with an adaptive-polling block dataplane.
///
/// Boot what a JSON file describes:      osprey --config vm.json
/// Or boot a kernel without a file:      osprey --kernel vmlinux --cmdline "console=ttyS0" --cpus 2 --memory 256
///
/// Serve the REST API while it runs:     osprey --config vm.json --api-sock /tmp/osprey.sock
/// Then talk to it from another shell:   export OSPREY_API_SOCK=/tmp/osprey.sock
///                                       osprey api get /iothreads/io0
///                                       osprey api patch /iothreads/io0 '{"poll_max_ns": 0}'
/// (`osprey api --help` for more; the endpoints are in docs/api/README.md.)
///
/// Check a config without booting:      osprey --config vm.json --check-config
///   (every error start-up would give, then the effective config: defaults filled in, paths
///   absolute; relative paths in a config file are taken from the file's folder)
///
/// The guest's serial console (COM1) is on stdin/stdout; Osprey's own log goes to stderr.
/// Exit status: 0 when the guest resets, powers off or triple-faults, or on SIGINT/SIGTERM;
/// the byte the guest writes to I/O port 0xf4 (the debug-exit port); 1 when a vCPU fails (the
/// message names the exit, the suberror and the guest RIP); 2 for a bad command line or config.
#[derive(Debug, Parser)]
#[command(
    name = "osprey",
    version,
    disable_version_flag = true,
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true,
    group(clap::ArgGroup::new("any_config").args(["config", "config_file"]))
)]
pub struct Cli {
    /// Talk to a running VM instead of starting one.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Print the version (and, run as `firecracker`, the Firecracker API version first, as
    /// Firecracker's tools parse it: docs/orchestration.md).
    #[arg(short = 'V', long)]
    pub version: bool,

    /// VM config file (JSON) with the sections machine-config, boot-source, drives, iothreads,
    /// rate-limit-groups, api, metrics, snapshot and sandbox; relative paths in it are taken
    /// from the file's folder. See docs/config.md and examples/.
    #[arg(long, value_name = "FILE", conflicts_with = "config_file")]
    pub config: Option<PathBuf>,

    /// Firecracker's config file: the same sections as --config, but relative paths in it are
    /// taken from the working directory (as Firecracker takes them), and the API is served on
    /// /run/firecracker.socket unless --api-sock, --no-api or the file's api.socket says otherwise.
    #[arg(long, value_name = "FILE", help_heading = FIRECRACKER)]
    pub config_file: Option<PathBuf>,

    /// Kernel to boot: an ELF with a PVH note (entered in 32-bit PVH mode), an ELF vmlinux
    /// (64-bit entry) or a bzImage. Overrides boot-source.kernel_image_path.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,

    /// Initramfs to load. Overrides boot-source.initrd_path.
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,

    /// Boot a bzImage as its kernel does by itself (its decompressor runs in the guest)
    /// instead of unpacking it on the host first. Sets boot-source.unpack to false.
    #[arg(long)]
    pub no_unpack: bool,

    /// Guest command line. Overrides boot-source.boot_args.
    #[arg(long, value_name = "STRING", allow_hyphen_values = true)]
    pub cmdline: Option<String>,

    /// Number of vCPUs (1-64). Overrides machine-config.vcpu_count.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = cpus_in_range)]
    pub cpus: Option<u8>,

    /// Guest memory in MiB (at least 16). Overrides machine-config.mem_size_mib.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true, value_parser = memory_in_range)]
    pub memory: Option<u64>,

    /// Restore the snapshot in DIR (its state.snap and mem.snap, as docs/snapshot.md names
    /// them) and run it, instead of booting: the VM is rebuilt from the snapshot's own
    /// configuration, with the API on --api-sock if given (else none). A refused snapshot
    /// (truncated, corrupted, of another version, a drive or memory file missing or resized)
    /// exits 2 before any vCPU runs.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "config_file", "kernel"])]
    pub restore: Option<PathBuf>,

    /// With --restore: drive ID on the file PATH instead of the snapshot's (a clone's own copy,
    /// of the saved size). Repeatable.
    #[arg(long, value_name = "ID=PATH", requires = "restore", value_parser = drive_override)]
    pub restore_drive: Vec<(String, PathBuf)>,

    /// Serve the REST API on this Unix socket; overrides api.socket. Without --config and
    /// --kernel, Osprey starts with no VM, takes its config over the API (Firecracker's PUT
    /// /machine-config, /boot-source, /drives/{id}, /logger, /metrics; docs/api/README.md) and
    /// boots on PUT /actions {"action_type": "InstanceStart"}. With the sandbox on, that phase
    /// is confined too, and the paths its requests name must lie in the socket's folder or an
    /// --allow-folder (docs/security.md). Started with no VM source and no socket (or with
    /// --config-file alone), Osprey serves /run/firecracker.socket, as Firecracker does.
    #[arg(long, value_name = "PATH")]
    pub api_sock: Option<PathBuf>,

    /// Check the config (fields and files) and print it with defaults filled in, without booting.
    #[arg(long)]
    pub check_config: bool,

    /// Log level for Osprey's own messages on stderr: off, error, warn, info, debug, trace (any
    /// case; `--level` and `warning` are Firecracker's spellings). RUST_LOG, when set, takes
    /// precedence.
    #[arg(
        long,
        value_name = "LEVEL",
        default_value = "info",
        value_parser = log_level,
        visible_alias = "level"
    )]
    pub log_level: log::LevelFilter,

    /// Seccomp filters on every thread: on (the default) or off (for debugging; a forbidden
    /// syscall otherwise ends Osprey with a message). See docs/seccomp.md.
    #[arg(long, value_name = "MODE", value_enum, default_value = "on")]
    pub seccomp: vmm::seccomp::SeccompMode,

    /// The same as `--seccomp off` (Firecracker's flag).
    #[arg(long, conflicts_with = "seccomp")]
    pub no_seccomp: bool,

    /// Firecracker's custom BPF filter file: refused, with the reason (Osprey builds a seccomp
    /// list per thread type itself; see docs/seccomp.md).
    #[arg(long, value_name = "FILE")]
    pub seccomp_filter: Option<PathBuf>,

    /// A name for this VM in Osprey's log and in the API's `GET /` (Firecracker's `--id`;
    /// default anonymous-instance): 1-64 characters of A-Z, a-z, 0-9 and `-`.
    #[arg(long, value_name = "ID", value_parser = instance_id)]
    pub id: Option<String>,

    /// The sandbox each thread enters once set up: on (the default: seccomp, Landlock on the
    /// configured files only, no_new_privs, no capabilities; what the kernel lacks is logged),
    /// strict (the same, but anything the kernel cannot enforce is an error), off (debugging).
    /// Overrides sandbox.mode. See docs/security.md.
    #[arg(long, value_name = "MODE", value_enum)]
    pub sandbox: Option<vmm::sandbox::SandboxMode>,

    /// An existing folder where PUT /snapshot/create may write its files (besides the API
    /// socket's folder), with the sandbox on. Overrides snapshot.folder. See docs/snapshot.md.
    #[arg(long, value_name = "DIR")]
    pub snapshot_folder: Option<PathBuf>,

    /// A folder whose files, with the sandbox on, the pre-boot API may name (logger, metrics,
    /// drives, kernel, initrd, a snapshot to load; besides the API socket's folder) and a live
    /// drive swap may take (besides the drive's own folder). Repeatable; adds to
    /// sandbox.allowed_folders. Not /, /dev, nor under /proc or /sys. See docs/security.md.
    #[arg(long, value_name = "DIR")]
    pub allow_folder: Vec<PathBuf>,

    /// Run as this user once /dev/kvm, the drives and the API socket are open (give --gid too;
    /// e.g. 65534, nobody). Overrides sandbox.uid.
    #[arg(long, value_name = "UID", allow_negative_numbers = true, value_parser = id_in_range)]
    pub uid: Option<u32>,

    /// Run as this group once set up (with --uid). Overrides sandbox.gid.
    #[arg(long, value_name = "GID", allow_negative_numbers = true, value_parser = id_in_range)]
    pub gid: Option<u32>,

    /// Write the log to this file or FIFO instead of stderr (as PUT /logger's log_path).
    #[arg(long, value_name = "PATH", help_heading = FIRECRACKER)]
    pub log_path: Option<PathBuf>,

    /// Print each log line's level (as PUT /logger's show_level).
    #[arg(long, help_heading = FIRECRACKER)]
    pub show_level: bool,

    /// Print each log line's source file and line (as PUT /logger's show_log_origin).
    #[arg(long, help_heading = FIRECRACKER)]
    pub show_log_origin: bool,

    /// The metrics file: a JSON line of every counter each second. Overrides
    /// metrics.metrics_path.
    #[arg(long, value_name = "PATH", help_heading = FIRECRACKER)]
    pub metrics_path: Option<PathBuf>,

    /// Devices on PCI: Osprey's always are (virtio-pci); accepted and without effect.
    #[arg(long, help_heading = FIRECRACKER)]
    pub enable_pci: bool,

    /// No API server: Osprey serves none unless the config file has an api.socket; needs a
    /// config (--config-file or --config).
    #[arg(long, help_heading = FIRECRACKER, conflicts_with = "api_sock", requires = "any_config")]
    pub no_api: bool,

    /// Only log lines from modules whose path starts with this (such as vmm::vm or dataplane;
    /// as PUT /logger's module).
    #[arg(long, value_name = "MODULE", help_heading = FIRECRACKER)]
    pub module: Option<String>,

    /// Log the guest's boot time when it writes 123 to guest-physical 0xc0000000 (a byte
    /// write; Firecracker's boot timer): "Guest-boot-time = … us".
    #[arg(long, help_heading = FIRECRACKER)]
    pub boot_timer: bool,

    /// The largest API request body, in bytes (default 65536); larger ones are refused with
    /// 413.
    #[arg(long, value_name = "BYTES", help_heading = FIRECRACKER, value_parser = payload_size)]
    pub http_api_max_payload_size: Option<usize>,

    /// Firecracker's MMDS data store limit: accepted and logged (Osprey has no MMDS; every
    /// MMDS request is refused with 400).
    #[arg(long, value_name = "BYTES", help_heading = FIRECRACKER)]
    pub mmds_size_limit: Option<u64>,

    /// Firecracker's MMDS content file: refused with the reason (Osprey has no MMDS).
    #[arg(long, value_name = "FILE", help_heading = FIRECRACKER)]
    pub metadata: Option<PathBuf>,

    /// Print the format version of Osprey's snapshot state files this build writes and reads,
    /// and exit.
    #[arg(long, help_heading = FIRECRACKER)]
    pub snapshot_version: bool,

    /// Print the format version of the snapshot state file FILE (and the Osprey version that
    /// wrote it), and exit.
    #[arg(long, value_name = "FILE", help_heading = FIRECRACKER)]
    pub describe_snapshot: Option<PathBuf>,

    /// Start times (µs) Firecracker's jailer passes: accepted and logged.
    #[arg(long, value_name = "US", help_heading = FIRECRACKER)]
    pub start_time_us: Option<u64>,

    /// See --start-time-us.
    #[arg(long, value_name = "US", help_heading = FIRECRACKER)]
    pub start_time_cpu_us: Option<u64>,

    /// See --start-time-us.
    #[arg(long, value_name = "US", help_heading = FIRECRACKER)]
    pub parent_cpu_time_us: Option<u64>,
}

/// The help heading of the flags Firecracker's tools pass.
const FIRECRACKER: &str = "Firecracker's flags (its tools pass them; docs/orchestration.md)";

/// Why a flag's value is refused; clap prints it after "invalid value 'X' for '--flag'".
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// A number outside its range (`max` of `u64::MAX` means no upper bound).
    #[error("must be a whole number{unit}{range}, got {given}", range = range_words(*min, *max))]
    OutOfRange {
        /// The smallest value taken.
        min: u64,
        /// The largest value taken.
        max: u64,
        /// ` of MiB`, or empty.
        unit: &'static str,
        /// What was given.
        given: String,
    },
    /// Not a log level.
    #[error("must be one of off, error, warn, info, debug, trace; got {0}")]
    LogLevel(String),
    /// Not an instance id.
    #[error("must be 1-64 characters of A-Z, a-z, 0-9 and -; got {0}")]
    InstanceId(String),
    /// An API path that does not start with `/`.
    #[error("the path must start with '/', as in /{0}")]
    RelativePath(String),
    /// An API path with white space or control characters.
    #[error("the path must not contain spaces or control characters")]
    PathCharacters,
}

fn range_words(min: u64, max: u64) -> String {
    if max == u64::MAX {
        format!(", at least {min}")
    } else {
        format!(" from {min} to {max}")
    }
}

/// A whole number from `min` to `max`, or an error saying that range and what was given.
fn whole_number(text: &str, min: u64, max: u64, unit: &'static str) -> Result<u64, FlagError> {
    match text.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(FlagError::OutOfRange {
            min,
            max,
            unit,
            given: text.to_string(),
        }),
    }
}

fn log_level(text: &str) -> Result<log::LevelFilter, FlagError> {
    let word = if text.eq_ignore_ascii_case("warning") {
        "warn"
    } else {
        text
    };
    word.parse()
        .map_err(|_| FlagError::LogLevel(text.to_string()))
}

fn instance_id(text: &str) -> Result<String, FlagError> {
    let ok = (1..=64).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(text.to_string())
    } else {
        Err(FlagError::InstanceId(text.to_string()))
    }
}

fn cpus_in_range(text: &str) -> Result<u8, FlagError> {
    let max = u64::from(vmm::config::MAX_VCPUS);
    whole_number(text, 1, max, "").map(|n| n as u8)
}

fn memory_in_range(text: &str) -> Result<u64, FlagError> {
    whole_number(text, vmm::config::MIN_MEM_MIB, u64::MAX, " of MiB")
}

fn payload_size(text: &str) -> Result<usize, FlagError> {
    whole_number(text, 1, usize::MAX as u64, " of bytes").map(|n| n as usize)
}

fn id_in_range(text: &str) -> Result<u32, FlagError> {
    // u32::MAX is (uid_t)-1, which the kernel reads as "unchanged".
    whole_number(text, 0, u64::from(u32::MAX - 1), "").map(|n| n as u32)
}

/// The API socket Firecracker serves when given none.
pub const FIRECRACKER_API_SOCK: &str = "/run/firecracker.socket";

impl Cli {
    /// The logger the flags ask for (`--log-path`, `--show-level`, `--show-log-origin`,
    /// `--module`), if any, at `--log-level`.
    pub fn logger(&self) -> Option<vmm::logger::LoggerConfig> {
        if self.log_path.is_none()
            && !self.show_level
            && !self.show_log_origin
            && self.module.is_none()
        {
            return None;
        }
        Some(vmm::logger::LoggerConfig {
            level: Some(self.log_level.into()),
            log_path: self.log_path.clone(),
            show_level: self.show_level,
            show_log_origin: self.show_log_origin,
            module: self.module.clone(),
        })
    }

    /// The config file given, with where its relative paths are taken from.
    pub fn config_path(&self) -> Option<(&std::path::Path, RelativeTo)> {
        match (&self.config, &self.config_file) {
            (Some(p), _) => Some((p, RelativeTo::FileFolder)),
            (None, Some(p)) => Some((p, RelativeTo::WorkingDirectory)),
            (None, None) => None,
        }
    }

    /// Nothing says what to run (no config, kernel nor snapshot).
    fn no_vm_source(&self) -> bool {
        self.config_path().is_none() && self.kernel.is_none() && self.restore.is_none()
    }

    /// The socket to serve the API on: `--api-sock`; else, as Firecracker, its default
    /// [`FIRECRACKER_API_SOCK`] when started with Firecracker's flags only (`--config-file`
    /// without `--no-api`, or no VM source at all); else none (Osprey's own `--config` and
    /// `--kernel` serve no API unless asked). `--check-config` serves nothing.
    pub fn api_socket(&self) -> Option<PathBuf> {
        if let Some(s) = &self.api_sock {
            return Some(s.clone());
        }
        let firecrackers_way =
            self.no_vm_source() || (self.config_file.is_some() && self.config.is_none());
        (firecrackers_way && !self.no_api && !self.check_config)
            .then(|| PathBuf::from(FIRECRACKER_API_SOCK))
    }

    /// No config and no kernel, but an API socket: the VM is configured over the API and
    /// starts on `InstanceStart` (Firecracker's way; `--check-config` needs a config).
    pub fn waits_for_api(&self) -> bool {
        self.no_vm_source() && self.api_socket().is_some() && !self.check_config
    }

    /// The VM config: the file (if any) with command-line overrides applied and every path made
    /// absolute (the file's relative to its folder, the flags' to the working directory), with
    /// the file's warnings. Not yet validated. Also sets the process-wide seccomp mode.
    pub fn vm_config(&self) -> Result<(VmConfig, Vec<ConfigWarning>), ConfigError> {
        if let Some(filter) = &self.seccomp_filter {
            return Err(ConfigError::Invalid {
                field: "--seccomp-filter".into(),
                reason: format!(
                    "{}: Osprey takes no BPF filter file; it builds a seccomp list per thread \
                     type itself (docs/seccomp.md): keep the default, or give --no-seccomp",
                    filter.display()
                ),
            });
        }
        vmm::seccomp::set_mode(if self.no_seccomp {
            vmm::seccomp::SeccompMode::Off
        } else {
            self.seccomp
        });
        if let Some(file) = &self.metadata {
            return Err(ConfigError::Invalid {
                field: "--metadata".into(),
                reason: format!(
                    "{}: {} (docs/orchestration.md)",
                    file.display(),
                    vmm::config::AbsentFeature::Mmds.what()
                ),
            });
        }
        let (mut config, warnings) = match self.config_path() {
            Some((path, relative_to)) => VmConfig::from_file_relative_to(path, relative_to)?,
            None if self.waits_for_api() => (VmConfig::default(), Vec::new()),
            None => {
                let kernel = self.kernel.clone().ok_or_else(|| ConfigError::Invalid {
                    field: "--config".into(),
                    reason: "give a config file with --config FILE, a kernel with --kernel PATH, \
                             or an API socket with --api-sock PATH to configure the VM over the \
                             API"
                    .into(),
                })?;
                let config = VmConfig {
                    boot: BootSourceConfig {
                        kernel_image_path: kernel,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                (config, Vec::new())
            }
        };
        if let Some(k) = &self.kernel {
            config.boot.kernel_image_path = k.clone();
        }
        if let Some(i) = &self.initrd {
            config.boot.initrd_path = Some(i.clone());
        }
        if let Some(c) = &self.cmdline {
            config.boot.boot_args = c.clone();
        }
        if self.no_unpack {
            config.boot.unpack = false;
        }
        if let Some(n) = self.cpus {
            config.machine.vcpu_count = n;
        }
        if let Some(m) = self.memory {
            config.machine.mem_size_mib = m;
        }
        if let Some(mode) = self.sandbox {
            config.sandbox.mode = mode;
        }
        if let Some(folder) = &self.snapshot_folder {
            config.snapshot = Some(vmm::config::SnapshotConfig {
                folder: folder.clone(),
            });
        }
        config
            .sandbox
            .allowed_folders
            .extend(self.allow_folder.iter().cloned());
        if let Some(uid) = self.uid {
            config.sandbox.uid = Some(uid);
        }
        if let Some(gid) = self.gid {
            config.sandbox.gid = Some(gid);
        }
        if let Some(path) = &self.metrics_path {
            match &mut config.metrics {
                Some(m) => m.path = path.clone(),
                None => {
                    config.metrics = Some(vmm::config::MetricsConfig {
                        path: path.clone(),
                        interval_ms: vmm::config::DEFAULT_METRICS_INTERVAL_MS,
                    })
                }
            }
        }
        // `--api-sock` wins; Firecracker's default socket only where the file names none.
        match (&self.api_sock, self.api_socket()) {
            (Some(socket), _) => {
                config.api = Some(ApiConfig {
                    socket: socket.clone(),
                })
            }
            (None, Some(default)) if config.api.is_none() => {
                config.api = Some(ApiConfig { socket: default })
            }
            _ => {}
        }
        config.resolve_paths(std::path::Path::new(""));
        Ok((config, warnings))
    }
}

/// `ID=PATH` of `--restore-drive`.
fn drive_override(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((id, path)) if !id.is_empty() && !path.is_empty() => {
            Ok((id.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("{text:?}: expected ID=PATH")),
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send one request to a running VM's REST API and print the answer.
    ///
    /// Sends one HTTP request to the REST API of a VM started with --api-sock (or api.socket) and
    /// prints the response body, pretty-printed when it is JSON. The socket is --api-sock, or
    /// OSPREY_API_SOCK from the environment. Examples:
    ///
    ///   export OSPREY_API_SOCK=/tmp/osprey.sock
    ///   osprey api get /
    ///   osprey api get /iothreads/io0
    ///   osprey api patch /iothreads/io0 '{"poll_max_ns": 0}'
    ///   osprey api patch /iothreads/io0 '{"poll_policy": "Weighted", "poll_weight": 3}'
    ///   osprey api patch /drives/disk0 '{"rate_limiter": {"ops": {"size": 1000, "refill_time": 100}}}'
    ///   osprey api patch /rate-limit-groups/tenant '{"ops": null}'
    ///   osprey api get '/metrics?format=prometheus'
    ///   osprey api put /actions '{"action_type": "Pause"}'
    ///
    /// PATCH changes a running VM's iothreads, drives and rate-limit groups: a field left out
    /// stays as it is, a field set to null goes back to its default (docs/api/README.md).
    ///
    /// Exit status: 0 for a 2xx answer; 1 for any other answer (with "HTTP <status>: <fault_message>"
    /// on stderr) or when the socket cannot be reached; 2 for a bad command line.
    #[command(verbatim_doc_comment)]
    Api(ApiArgs),
    /// Serve a drive to another VMM's guest as a vhost-user-blk backend (docs/vhost-user.md).
    ///
    /// QEMU: -chardev socket,id=c,path=SOCK -device vhost-user-blk-pci,chardev=c, with guest
    /// memory shared (-object memory-backend-memfd,share=on). Runs until killed; a frontend that
    /// goes away leaves it ready for the next one.
    VhostUserBlk(vhost_user_blk::VhostUserBlkArgs),
}

/// `osprey api METHOD PATH [BODY] --api-sock SOCKET`: see [`Command::Api`].
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// HTTP method.
    #[arg(value_enum, ignore_case = true)]
    pub method: HttpMethod,

    /// Request path, starting with '/' (e.g. /iothreads/io0, '/metrics?format=prometheus').
    #[arg(value_parser = parse_api_path)]
    pub path: String,

    /// JSON request body (for patch and put); sent as application/json.
    pub body: Option<String>,

    /// The running VM's API socket (default: $OSPREY_API_SOCK).
    #[arg(long, value_name = "SOCKET", env = "OSPREY_API_SOCK")]
    pub api_sock: PathBuf,
}

/// The methods `osprey api` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HttpMethod {
    /// Read.
    Get,
    /// Change a running VM (iothreads, drives, rate-limit groups).
    Patch,
    /// Create, replace or act (/actions).
    Put,
    /// Not served by any route (405), accepted for completeness.
    Post,
    /// Not served by any route (405), accepted for completeness.
    Delete,
}

impl HttpMethod {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Put => "PUT",
            HttpMethod::Post => "POST",
            HttpMethod::Delete => "DELETE",
        }
    }
}

fn parse_api_path(path: &str) -> Result<String, FlagError> {
    if !path.starts_with('/') {
        return Err(FlagError::RelativePath(path.to_string()));
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(FlagError::PathCharacters);
    }
    Ok(path.to_string())
}

impl ApiArgs {
    /// Sends the request, prints the answer, and returns the exit status.
    pub fn run(&self) -> i32 {
        let sent = client::request(
            &self.api_sock,
            self.method.as_str(),
            &self.path,
            self.body.as_deref(),
        );
        match sent {
            Ok((status, body)) => {
                let outcome = client::outcome(status, &body);
                if !outcome.stdout.is_empty() {
                    println!("{}", outcome.stdout);
                }
                if let Some(e) = outcome.stderr {
                    eprintln!("{e}");
                }
                outcome.exit
            }
            Err(e) => {
                eprintln!("osprey: error: {e}");
                1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_and_build_a_config_without_a_file() {
        let cli = Cli::parse_from([
            "osprey",
            "--kernel",
            "/k",
            "--cmdline",
            "-x y",
            "--cpus",
            "2",
            "--memory",
            "64",
        ]);
        let (c, _) = cli.vm_config().expect("config");
        assert_eq!(c.boot.kernel_image_path, PathBuf::from("/k"));
        assert_eq!(c.boot.boot_args, "-x y");
        assert_eq!((c.machine.vcpu_count, c.machine.mem_size_mib), (2, 64));
    }

    #[test]
    fn seccomp_is_on_unless_turned_off() {
        use vmm::seccomp::SeccompMode;
        let cli = Cli::parse_from(["osprey", "--kernel", "/k"]);
        assert_eq!(cli.seccomp, SeccompMode::On);
        for off in [
            vec!["osprey", "--kernel", "/k", "--seccomp", "off"],
            vec!["osprey", "--kernel", "/k", "--seccomp=off"],
        ] {
            assert_eq!(Cli::parse_from(off).seccomp, SeccompMode::Off);
        }
        let on = Cli::parse_from(["osprey", "--kernel", "/k", "--seccomp", "on"]);
        assert_eq!(on.seccomp, SeccompMode::On);
        assert!(Cli::try_parse_from(["osprey", "--seccomp", "maybe"]).is_err());
    }

    #[test]
    fn api_sock_sets_the_api_section() {
        let cli = Cli::parse_from(["osprey", "--kernel", "/k", "--api-sock", "/tmp/a.sock"]);
        let (c, _) = cli.vm_config().expect("config");
        assert_eq!(
            c.api,
            Some(ApiConfig {
                socket: PathBuf::from("/tmp/a.sock")
            })
        );
        assert!(cli.command.is_none());
    }

    #[test]
    fn snapshot_folder_sets_the_snapshot_section() {
        let cli = Cli::parse_from(["osprey", "--api-sock", "/run/a.sock"]);
        assert_eq!(cli.vm_config().expect("config").0.snapshot, None);
        let cli = Cli::parse_from([
            "osprey",
            "--api-sock",
            "/run/a.sock",
            "--snapshot-folder",
            "/srv/snaps",
        ]);
        let (c, _) = cli.vm_config().expect("config");
        assert_eq!(
            c.snapshot.map(|s| s.folder),
            Some(PathBuf::from("/srv/snaps"))
        );
    }

    #[test]
    fn allow_folder_adds_to_the_sandbox_section() {
        let cli = Cli::parse_from([
            "osprey",
            "--api-sock",
            "/run/a.sock",
            "--allow-folder",
            "/srv/images",
            "--allow-folder",
            "/dev/mapper",
        ]);
        let (c, _) = cli.vm_config().expect("config");
        assert_eq!(
            c.sandbox.allowed_folders,
            [PathBuf::from("/srv/images"), PathBuf::from("/dev/mapper")]
        );
    }

    #[test]
    fn the_api_subcommand_parses_method_path_body_and_socket() {
        let cli = Cli::try_parse_from([
            "osprey",
            "api",
            "PATCH",
            "/iothreads/io0",
            r#"{"poll_max_ns":0}"#,
            "--api-sock",
            "/tmp/o.sock",
        ])
        .expect("parses");
        let Some(Command::Api(a)) = cli.command else {
            panic!("no api subcommand")
        };
        assert_eq!(a.method, HttpMethod::Patch);
        assert_eq!(a.path, "/iothreads/io0");
        assert_eq!(a.body.as_deref(), Some(r#"{"poll_max_ns":0}"#));
        assert_eq!(a.api_sock, PathBuf::from("/tmp/o.sock"));
        for bad in [
            vec!["osprey", "api", "get", "iothreads", "--api-sock", "s"],
            vec!["osprey", "api", "fetch", "/", "--api-sock", "s"],
            vec!["osprey", "api", "get", "/"],
            vec![
                "osprey",
                "--kernel",
                "k",
                "api",
                "get",
                "/",
                "--api-sock",
                "s",
            ],
        ] {
            let e = Cli::try_parse_from(&bad).expect_err("usage error");
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
    }

    #[test]
    fn firecrackers_flags_are_understood() {
        let cli = Cli::try_parse_from([
            "osprey",
            "--config-file",
            "/vm.json",
            "--id",
            "vm-1",
            "--no-seccomp",
            "--level",
            "Warning",
        ])
        .expect("Firecracker's flags");
        assert_eq!(cli.config_file, Some(PathBuf::from("/vm.json")));
        assert_eq!(cli.id.as_deref(), Some("vm-1"));
        assert!(cli.no_seccomp);
        assert_eq!(cli.log_level, log::LevelFilter::Warn);
        for bad in [
            vec!["osprey", "--id", "no spaces"],
            vec!["osprey", "--id", ""],
            vec!["osprey", "--no-seccomp", "--seccomp", "on"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
        let filter = Cli::parse_from(["osprey", "--kernel", "/k", "--seccomp-filter", "/f.bpf"]);
        let e = filter.vm_config().expect_err("refused").to_string();
        assert!(
            e.starts_with("--seccomp-filter: /f.bpf: Osprey takes no BPF filter file"),
            "{e}"
        );
    }

    #[test]
    fn the_jailer_and_logger_flags_are_understood() {
        let cli = Cli::try_parse_from([
            "osprey",
            "--api-sock",
            "/run/fc.sock",
            "--log-path",
            "/run/log.fifo",
            "--show-level",
            "--metrics-path",
            "/run/metrics.fifo",
            "--enable-pci",
            "--start-time-us",
            "1",
            "--start-time-cpu-us",
            "2",
            "--parent-cpu-time-us",
            "3",
        ])
        .expect("the jailer's and the logger's flags");
        assert!(
            cli.waits_for_api(),
            "a socket alone: configured over the API"
        );
        let logger = cli.logger().expect("a logger");
        assert_eq!(logger.log_path, Some(PathBuf::from("/run/log.fifo")));
        assert!(logger.show_level && !logger.show_log_origin);
        let (config, _) = cli.vm_config().expect("config");
        let metrics = config.metrics.expect("metrics");
        assert_eq!(metrics.path, PathBuf::from("/run/metrics.fifo"));
        assert_eq!(metrics.interval_ms, 1000);
        assert!(Cli::try_parse_from(["osprey", "--no-api", "--api-sock", "/s"]).is_err());
        assert!(
            Cli::try_parse_from(["osprey", "--no-api"]).is_err(),
            "needs a config"
        );
        assert!(Cli::parse_from(["osprey", "--kernel", "/k"])
            .logger()
            .is_none());
    }

    #[test]
    fn neither_config_nor_kernel_is_an_error() {
        let cli = Cli::parse_from(["osprey", "--check-config"]);
        let e = cli.vm_config().expect_err("must fail");
        assert!(
            e.to_string().starts_with("--config: give a config file"),
            "{e}"
        );
    }

    /// Started as Firecracker is, with no socket flag: the API on /run/firecracker.socket,
    /// before any VM (no source) or with `--config-file`; not for Osprey's own ways of starting.
    #[test]
    fn with_no_socket_flag_firecrackers_socket_is_served() {
        let sock = Some(PathBuf::from(FIRECRACKER_API_SOCK));
        let bare = Cli::parse_from(["osprey"]);
        assert!(bare.waits_for_api());
        assert_eq!(bare.api_socket(), sock);
        let file = Cli::parse_from(["osprey", "--config-file", "vm.json"]);
        assert_eq!(file.api_socket(), sock);
        assert!(!file.waits_for_api());
        for none in [
            vec!["osprey", "--config-file", "vm.json", "--no-api"],
            vec!["osprey", "--config", "vm.json"],
            vec!["osprey", "--kernel", "/k"],
            vec!["osprey", "--config-file", "vm.json", "--check-config"],
        ] {
            assert_eq!(Cli::parse_from(&none).api_socket(), None, "{none:?}");
        }
        let given = Cli::parse_from(["osprey", "--config-file", "vm.json", "--api-sock", "/s"]);
        assert_eq!(given.api_socket(), Some(PathBuf::from("/s")));
        assert!(Cli::try_parse_from(["osprey", "--config", "a", "--config-file", "b"]).is_err());
    }

    /// A `--config-file` naming its own `api.socket` is served there, not on Firecracker's
    /// default (which it used to replace); `--api-sock` still wins.
    #[test]
    fn a_config_files_api_socket_wins_over_firecrackers_default() {
        let dir = std::env::temp_dir().join(format!("osprey-cli-api-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("vm.json");
        std::fs::write(
            &file,
            r#"{"boot-source": {"kernel_image_path": "/k"}, "api": {"socket": "/tmp/file.sock"}}"#,
        )
        .expect("write");
        let socket = |extra: &[&str]| {
            let mut args = vec!["osprey", "--config-file", file.to_str().expect("utf-8")];
            args.extend_from_slice(extra);
            let (config, _) = Cli::parse_from(&args).vm_config().expect("config");
            config.api.map(|a| a.socket)
        };
        assert_eq!(socket(&[]), Some(PathBuf::from("/tmp/file.sock")));
        assert_eq!(socket(&["--no-api"]), Some(PathBuf::from("/tmp/file.sock")));
        assert_eq!(socket(&["--api-sock", "/s"]), Some(PathBuf::from("/s")));
        std::fs::write(&file, r#"{"boot-source": {"kernel_image_path": "/k"}}"#).expect("write");
        assert_eq!(socket(&[]), Some(PathBuf::from(FIRECRACKER_API_SOCK)));
        assert_eq!(socket(&["--no-api"]), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Firecracker v1.16.1's flags that used to end Osprey with "unexpected argument".
    #[test]
    fn firecrackers_other_flags_are_taken() {
        let cli = Cli::try_parse_from([
            "osprey",
            "--config-file",
            "vm.json",
            "--no-api",
            "--boot-timer",
            "--http-api-max-payload-size",
            "102400",
            "--mmds-size-limit",
            "51200",
            "--module",
            "vmm::vm",
        ])
        .expect("Firecracker's flags");
        assert!(cli.boot_timer);
        assert_eq!(cli.http_api_max_payload_size, Some(102_400));
        assert_eq!(cli.mmds_size_limit, Some(51_200));
        assert_eq!(
            cli.logger().and_then(|l| l.module).as_deref(),
            Some("vmm::vm")
        );
        assert_eq!(
            cli.config_path(),
            Some((
                std::path::Path::new("vm.json"),
                RelativeTo::WorkingDirectory
            ))
        );
        let exits = Cli::try_parse_from(["osprey", "--snapshot-version"]).expect("flag");
        assert!(exits.snapshot_version);
        let describe =
            Cli::try_parse_from(["osprey", "--describe-snapshot", "/s/state.snap"]).expect("flag");
        assert_eq!(
            describe.describe_snapshot,
            Some(PathBuf::from("/s/state.snap"))
        );
        assert!(
            Cli::try_parse_from(["osprey", "--version"])
                .expect("flag")
                .version
        );
        assert!(Cli::try_parse_from(["osprey", "--http-api-max-payload-size", "0"]).is_err());
        let metadata = Cli::parse_from(["osprey", "--kernel", "/k", "--metadata", "/m.json"]);
        let e = metadata.vm_config().expect_err("no MMDS").to_string();
        assert!(e.starts_with("--metadata: /m.json: MMDS"), "{e}");
    }
}
