//! The backend's config: the VMM's own sections (`drives` with `io_engine`, `rate_limiter`,
//! `rate_limit_group`, `iothread`; `iothreads` with their poll parameters; `rate-limit-groups`),
//! each drive with the `socket` frontends connect to. Checked by the VMM's own validation (the
//! same JSON paths in errors); `num_queues` and `queue_size` are the most a frontend may use,
//! 8 queues of 1024 when left out; the VMM's `sandbox` section. The command line's one-drive form
//! builds the same config.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::args::{VhostUserBlkArgs, DEFAULT_MAX_QUEUES, DEFAULT_MAX_QUEUE_SIZE};
use vmm::config::{invalid, BootSourceConfig, ConfigError, DriveConfig, IoThreadConfig, VmConfig};
use vmm::rate_limit::RateLimitGroupConfig;

/// One served drive: the VMM's drive section and its socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VhostUserDriveConfig {
    /// The Unix socket frontends connect to for this drive.
    pub socket: PathBuf,
    /// The drive, as in the VMM's `drives`.
    #[serde(flatten)]
    pub drive: DriveConfig,
}

/// The whole backend: the JSON file's shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VhostUserConfig {
    /// The drives, each on its socket.
    #[serde(default)]
    pub drives: Vec<VhostUserDriveConfig>,
    /// Dataplane threads (default: one, `io0`).
    #[serde(default)]
    pub iothreads: Vec<IoThreadConfig>,
    /// Rate limits shared by several drives.
    #[serde(
        rename = "rate-limit-groups",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub rate_limit_groups: Vec<RateLimitGroupConfig>,
    /// The sandbox (the VMM's section; `--sandbox`, `--uid`, `--gid` override it).
    #[serde(default)]
    pub sandbox: vmm::sandbox::SandboxConfig,
}

impl VhostUserConfig {
    /// Reads a config file (relative paths from its folder), fills the defaults and checks it.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Self::from_json(&text)?;
        let folder = path.parent().unwrap_or(Path::new(""));
        for d in &mut config.drives {
            if d.socket.is_relative() {
                d.socket = folder.join(&d.socket);
            }
            if d.drive.path_on_host.is_relative() {
                d.drive.path_on_host = folder.join(&d.drive.path_on_host);
            }
        }
        Ok(config)
    }

    /// Parses JSON text, fills the defaults and checks it.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| invalid("(file)", e.to_string()))?;
        // A frontend may use up to 8 queues of 1024 unless the drive says otherwise (the VMM's
        // defaults, 1 of 256, are what its own guest gets).
        if let Some(drives) = value.get_mut("drives").and_then(|d| d.as_array_mut()) {
            for d in drives.iter_mut().filter_map(|d| d.as_object_mut()) {
                d.entry("num_queues").or_insert(DEFAULT_MAX_QUEUES.into());
                d.entry("queue_size")
                    .or_insert(DEFAULT_MAX_QUEUE_SIZE.into());
            }
        }
        let mut config: Self = serde_path_to_error::deserialize(value)
            .map_err(|e| invalid(e.path().to_string(), e.inner().to_string()))?;
        config.fill_and_check()?;
        Ok(config)
    }

    /// The one-drive config of `osprey vhost-user-blk --socket SOCK --path FILE ...`.
    pub fn from_args(args: &VhostUserBlkArgs) -> Result<Self, ConfigError> {
        let (Some(socket), Some(path)) = (&args.socket, &args.path) else {
            return Err(invalid("--socket/--path", "give both, or --config"));
        };
        let mut drive: DriveConfig = serde_json::from_value(serde_json::json!({
            "drive_id": args.drive_id,
            "path_on_host": path,
        }))
        .map_err(|e| invalid("--drive-id", e.to_string()))?;
        drive.is_read_only = args.readonly;
        drive.direct = args.direct;
        drive.io_engine = args.io_engine;
        drive.num_queues = args.num_queues;
        drive.queue_size = args.queue_size;
        let mut config = Self {
            drives: vec![VhostUserDriveConfig {
                socket: socket.clone(),
                drive,
            }],
            ..Self::default()
        };
        config.fill_and_check()?;
        Ok(config)
    }

    /// The VMM's view of these sections, for its checks and defaults and `GET /vm/config` (no
    /// machine or kernel; no sockets).
    pub fn as_vm_config(&self) -> VmConfig {
        VmConfig {
            boot: BootSourceConfig {
                // Only the sections above are checked; the VMM's check wants a kernel named.
                kernel_image_path: PathBuf::from("(none: vhost-user backend)"),
                ..BootSourceConfig::default()
            },
            drives: self.drives.iter().map(|d| d.drive.clone()).collect(),
            iothreads: self.iothreads.clone(),
            rate_limit_groups: self.rate_limit_groups.clone(),
            sandbox: self.sandbox.clone(),
            ..VmConfig::default()
        }
    }

    /// Applies the command line's `--sandbox`, `--uid`, `--gid`, then checks the section.
    pub fn with_sandbox_flags(mut self, args: &VhostUserBlkArgs) -> Result<Self, ConfigError> {
        if let Some(mode) = args.sandbox {
            self.sandbox.mode = mode;
        }
        if let (Some(uid), Some(gid)) = (args.uid, args.gid) {
            self.sandbox.uid = Some(uid);
            self.sandbox.gid = Some(gid);
        }
        self.sandbox
            .check()
            .map_err(|e| invalid(e.field(), e.to_string()))?;
        Ok(self)
    }

    /// The VMM's defaults (an `io0` iothread, drives on the first iothread), then its checks,
    /// and each socket named once.
    fn fill_and_check(&mut self) -> Result<(), ConfigError> {
        if self.drives.is_empty() {
            return Err(invalid("drives", "name at least one drive"));
        }
        let mut vm = self.as_vm_config();
        vm.fill_defaults();
        vm.check_values(u64::MAX)?;
        self.iothreads = vm.iothreads;
        for (d, filled) in self.drives.iter_mut().zip(vm.drives) {
            d.drive = filled;
        }
        let mut sockets = std::collections::HashSet::new();
        for (i, d) in self.drives.iter().enumerate() {
            if d.socket.as_os_str().is_empty() || !sockets.insert(d.socket.clone()) {
                return Err(invalid(
                    format!("drives[{i}].socket"),
                    "must name a socket no other drive uses",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vmms_sections_parse_with_a_socket_per_drive() {
        let c = VhostUserConfig::from_json(
            r#"{"drives": [
                  {"drive_id": "a", "path_on_host": "/a", "socket": "/s/a",
                   "io_engine": "IoUring", "iothread": "fast",
                   "rate_limiter": {"ops": {"size": 1000, "refill_time": 100}}},
                  {"drive_id": "b", "path_on_host": "/b", "socket": "/s/b",
                   "num_queues": 2, "queue_size": 128, "rate_limit_group": "g"}],
                "iothreads": [{"id": "fast", "poll_max_ns": 0}, {"id": "slow"}],
                "rate-limit-groups": [{"id": "g", "bandwidth": {"size": 1048576, "refill_time": 1000}}]}"#,
        )
        .expect("parse");
        let (a, b) = (&c.drives[0], &c.drives[1]);
        assert_eq!(a.socket, PathBuf::from("/s/a"));
        assert_eq!(a.drive.io_engine, vmm::config::IoEngineKind::IoUring);
        assert_eq!(
            (a.drive.num_queues, a.drive.queue_size),
            (8, 1024),
            "the backend's defaults"
        );
        assert_eq!((b.drive.num_queues, b.drive.queue_size), (2, 128));
        assert_eq!(
            b.drive.iothread.as_deref(),
            Some("fast"),
            "the first iothread by default"
        );
        assert_eq!(c.iothreads[0].poll_max_ns, 0);
        assert_eq!(c.rate_limit_groups[0].id, "g");
    }

    #[test]
    fn the_sandbox_flags_override_the_section() {
        use clap::Parser;
        let json = r#"{"drives": [{"drive_id": "a", "path_on_host": "/a", "socket": "/s"}],
                       "sandbox": {"mode": "strict"}}"#;
        let c = VhostUserConfig::from_json(json).expect("parse");
        assert_eq!(c.sandbox.mode, vmm::sandbox::SandboxMode::Strict);
        let cli = crate::args::test_cli::Cli::try_parse_from([
            "osprey",
            "vhost-user-blk",
            "--config",
            "c",
            "--sandbox",
            "off",
        ])
        .expect("parse");
        let Some(crate::args::test_cli::Command::VhostUserBlk(args)) = cli.command else {
            panic!("no subcommand");
        };
        let c = c.with_sandbox_flags(&args).expect("flags");
        assert_eq!(c.sandbox.mode, vmm::sandbox::SandboxMode::Off);
        let json = r#"{"drives": [{"drive_id": "a", "path_on_host": "/a", "socket": "/s"}],
                       "sandbox": {"uid": 1000}}"#;
        let e = VhostUserConfig::from_json(json).expect_err("uid without gid");
        assert!(e.to_string().contains("sandbox.gid"), "{e}");
    }

    #[test]
    fn mistakes_are_named_by_their_json_path() {
        for (json, path) in [
            (r#"{"drives": []}"#, "drives"),
            (
                r#"{"drives": [{"drive_id": "a", "path_on_host": "/a"}]}"#,
                "socket",
            ),
            (
                r#"{"drives": [{"drive_id": "a", "path_on_host": "/a", "socket": "/s", "iothread": "x"}]}"#,
                "drives[0].iothread",
            ),
            (
                r#"{"drives": [{"drive_id": "a", "path_on_host": "/a", "socket": "/s"},
                               {"drive_id": "b", "path_on_host": "/b", "socket": "/s"}]}"#,
                "drives[1].socket",
            ),
            (
                r#"{"drives": [{"drive_id": "a", "path_on_host": "/a", "socket": "/s", "num_queues": 0}]}"#,
                "drives[0].num_queues",
            ),
            (r#"{"drives": [], "machine-config": {}}"#, "machine-config"),
        ] {
            let e = VhostUserConfig::from_json(json)
                .expect_err(json)
                .to_string();
            assert!(e.contains(path), "{json}: {e}");
        }
    }
}
