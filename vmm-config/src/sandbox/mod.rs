//! The sandbox Osprey puts itself in, on by default: once a thread's set-up is done it restricts
//! itself with Landlock (only the configured files stay reachable, nothing can be executed),
//! drops every capability (and, with `sandbox.uid`/`gid` or `--uid`/`--gid`, becomes that user),
//! and installs its seccomp allow-list; `no_new_privs` is set on the main thread before any other
//! thread exists, so all inherit it. With `sandbox.namespaces`, Osprey first leaves the host's
//! mount, IPC, UTS and network namespaces. `--sandbox off` turns all of it off for debugging;
//! `--sandbox strict` makes any part the kernel cannot enforce an error instead of a log line.
//! Every thread type enters through [`Sandbox::hook`] (the control thread through
//! [`Sandbox::enter`]). What each part does and how it compares with Firecracker's jailer and
//! Cloud Hypervisor: docs/security.md.

pub mod credentials;
pub mod fs_rules;
pub mod namespaces;
pub mod preboot;
#[cfg(any(debug_assertions, feature = "test-hooks"))]
mod probe;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::seccomp::{Filters, SeccompError, ThreadKind};
use credentials::{CredentialsError, Dropped};
pub use fs_rules::{DrivePath, VmPaths};
use fs_rules::{FsSandbox, LandlockError};
use namespaces::NamespaceError;

/// `--sandbox` and `sandbox.mode`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Everything off (for debugging): no seccomp, no Landlock, privileges kept.
    Off,
    /// Everything the kernel supports; what it lacks is logged (the default).
    #[default]
    On,
    /// Like `on`, but a part the kernel cannot enforce is an error before boot.
    Strict,
}

/// `sandbox`: the config section (the command line's `--sandbox`, `--uid`, `--gid` override it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `on` (default), `off` or `strict`.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Run as this user once set up (give `gid` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Run as this group once set up (give `uid` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Leave the host's mount, IPC, UTS and network namespaces before set-up (needs root).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub namespaces: bool,
    /// Folders whose files the pre-boot API may name (besides the API socket's folder) and a
    /// live drive swap may take (besides the drive's own folder); `--allow-folder` adds to
    /// them. Not `/`, `/dev`, nor under `/proc` or `/sys`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    pub allowed_folders: Vec<std::path::PathBuf>,
}

/// A `sandbox` section whose fields do not go together; each names the field at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SandboxConfigError {
    /// `uid` without `gid`.
    #[error("sandbox.gid: missing: give the group with the user (--gid with --uid)")]
    GidMissing,
    /// `gid` without `uid`.
    #[error("sandbox.uid: missing: give the user with the group (--uid with --gid)")]
    UidMissing,
    /// `mode` off with parts that need the sandbox.
    #[error("sandbox.mode: is off, but sandbox.uid/gid or sandbox.namespaces need the sandbox")]
    OffButNeeded,
    /// An allowed folder that may never be allowed (its index).
    #[error(
        "sandbox.allowed_folders[{0}]: /, /dev and anything under /proc or /sys may not be \
         allowed (name a folder of the VM's own files)"
    )]
    FolderOffLimits(usize),
}

impl SandboxConfigError {
    /// The JSON path of the field at fault.
    pub fn field(self) -> &'static str {
        match self {
            Self::GidMissing => "sandbox.gid",
            Self::UidMissing => "sandbox.uid",
            Self::OffButNeeded => "sandbox.mode",
            Self::FolderOffLimits(_) => "sandbox.allowed_folders",
        }
    }
}

impl SandboxConfig {
    /// Checks the combination; the error names the field.
    pub fn check(&self) -> Result<(), SandboxConfigError> {
        match (self.uid, self.gid) {
            (Some(_), None) => return Err(SandboxConfigError::GidMissing),
            (None, Some(_)) => return Err(SandboxConfigError::UidMissing),
            _ => {}
        }
        if self.mode == SandboxMode::Off && (self.uid.is_some() || self.namespaces) {
            return Err(SandboxConfigError::OffButNeeded);
        }
        if let Some(i) = self
            .allowed_folders
            .iter()
            .position(|f| crate::allowed_folders::is_off_limits(f))
        {
            return Err(SandboxConfigError::FolderOffLimits(i));
        }
        Ok(())
    }

    /// The uid and gid to become, when both are given.
    pub fn ids(&self) -> Option<(u32, u32)> {
        self.uid.zip(self.gid)
    }
}

/// Errors putting Osprey in its sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A seccomp filter could not be built or installed.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    /// The Landlock ruleset could not be built or applied.
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    /// Privileges could not be dropped.
    #[error("Dropping privileges: {0}")]
    Credentials(#[from] CredentialsError),
    /// New namespaces could not be entered.
    #[error(transparent)]
    Namespaces(#[from] NamespaceError),
    /// The pre-boot main thread's filter could not be built.
    #[error(transparent)]
    PrebootFilter(#[from] crate::seccomp::preboot::PrebootFilterError),
    /// `--sandbox strict` and the kernel enforces less than asked.
    #[error("--sandbox strict: {0}")]
    NotStrict(String),
}

/// What `--sandbox strict` needs of this host, checked before start-up: seccomp on, and a kernel
/// that enforces every Landlock feature Osprey asks for (a ruleset is built, with no rule, and
/// dropped). Other modes need nothing.
pub fn check_strict(config: &SandboxConfig) -> Result<(), SandboxError> {
    if config.mode != SandboxMode::Strict {
        return Ok(());
    }
    if crate::seccomp::mode() == crate::seccomp::SeccompMode::Off {
        return Err(SandboxError::NotStrict(
            "seccomp is off (--seccomp off); strict needs every part".into(),
        ));
    }
    FsSandbox::build(Vec::new(), true)?;
    Ok(())
}

/// What runs on a thread to put it in the sandbox (the thread types' start hooks take it).
pub type ThreadHook = Box<dyn FnOnce() -> Result<(), SandboxError> + Send>;

/// The sandbox of one VM: compiled once, entered by each thread.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    seccomp: Option<Filters>,
    landlock: Option<FsSandbox>,
    /// Capabilities (a bit mask) iothreads keep: `CAP_SYS_NICE` for dynamic thread weights
    /// where `RLIMIT_NICE` cannot be raised ([`crate::thread_weights::InForce`]).
    iothread_capabilities: u64,
}

/// How one thread's entry went, for the start-up log ([`Sandbox::describe`]).
#[derive(Debug, Clone, Default)]
pub struct Entered {
    /// Landlock's status in words (empty without Landlock).
    landlock: String,
    /// What dropping privileges did (`None` with the sandbox off).
    dropped: Option<Dropped>,
}

impl Sandbox {
    /// The first step, on the main thread before it starts any other: new namespaces when
    /// asked, then `no_new_privs` (inherited by every thread created later).
    pub fn enter_early(config: &SandboxConfig) -> Result<(), SandboxError> {
        if config.mode == SandboxMode::Off {
            return Ok(());
        }
        if config.namespaces {
            namespaces::enter()?;
        }
        credentials::set_no_new_privs()?;
        Ok(())
    }

    /// Compiles the seccomp filters (unless `seccomp` is `None`: `--seccomp off`) and the
    /// Landlock ruleset for the VM's files, `paths`. Files must exist: call after the metrics
    /// file and the API socket's directory are there.
    /// Iothreads keep the capabilities in `iothread_capabilities` (a bit mask; their seccomp
    /// filter bounds what they may do with them).
    pub fn prepare(
        config: &SandboxConfig,
        paths: &VmPaths,
        seccomp: Option<Filters>,
        iothread_capabilities: u64,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let config = config.clone();
        if config.mode == SandboxMode::Off {
            return Ok(Arc::new(Sandbox {
                config,
                seccomp: None,
                landlock: None,
                iothread_capabilities: 0,
            }));
        }
        let strict = config.mode == SandboxMode::Strict;
        if strict && seccomp.is_none() {
            return Err(SandboxError::NotStrict(
                "seccomp is off (--seccomp off); strict needs every part".into(),
            ));
        }
        let landlock = FsSandbox::build(fs_rules::rules_for(paths), strict)?;
        Ok(Arc::new(Sandbox {
            config,
            seccomp,
            landlock: Some(landlock),
            iothread_capabilities,
        }))
    }

    /// Whether anything is in force.
    pub fn is_on(&self) -> bool {
        self.config.mode != SandboxMode::Off
    }

    /// The hook a thread of type `kind` runs once its set-up is done.
    pub fn hook(self: &Arc<Self>, kind: ThreadKind) -> ThreadHook {
        let sandbox = self.clone();
        Box::new(move || sandbox.enter(kind).map(|_| ()))
    }

    /// Puts the calling thread in the sandbox, for good: Landlock, then privileges, then its
    /// seccomp filter (last: the calls before it are not on the lists).
    pub fn enter(&self, kind: ThreadKind) -> Result<Entered, SandboxError> {
        let entered = if self.is_on() {
            self.confine(kind)?
        } else {
            Entered::default()
        };
        #[cfg(any(debug_assertions, feature = "test-hooks"))]
        probe::run(kind);
        Ok(entered)
    }

    fn confine(&self, kind: ThreadKind) -> Result<Entered, SandboxError> {
        let mut landlock = String::new();
        if let Some(l) = &self.landlock {
            let status = l.restrict_thread()?;
            landlock = fs_rules::describe_status(&status);
            if self.config.mode == SandboxMode::Strict
                && status.ruleset != landlock::RulesetStatus::FullyEnforced
            {
                return Err(SandboxError::NotStrict(landlock));
            }
        }
        let keep = if kind == ThreadKind::IoThread {
            self.iothread_capabilities
        } else {
            0
        };
        let dropped = credentials::drop_privileges(self.config.ids(), keep)?;
        if let Some(f) = &self.seccomp {
            f.of(kind).install()?;
        }
        Ok(Entered {
            landlock,
            dropped: Some(dropped),
        })
    }

    /// Gives the API socket to the sandbox's user (so that, once set up, Osprey may still
    /// remove it at exit); nothing without `uid`.
    pub fn hand_over(&self, path: &std::path::Path) -> std::io::Result<()> {
        match self.config.ids() {
            Some((uid, gid)) if self.is_on() => {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
            }
            _ => Ok(()),
        }
    }

    /// One line for the start-up log, from how a thread's entry went (the control thread's).
    pub fn describe(&self, entered: &Entered) -> String {
        if !self.is_on() {
            return "off (--sandbox off): no seccomp, no Landlock, privileges kept".into();
        }
        let mut parts = Vec::new();
        parts.push(match &self.seccomp {
            Some(_) => format!("seccomp on all {} thread types", ThreadKind::ALL.len()),
            None => "seccomp OFF (--seccomp off)".into(),
        });
        if let Some(l) = &self.landlock {
            parts.push(format!(
                "{} ({} rules: {})",
                entered.landlock,
                l.len(),
                l.describe_rules()
            ));
        }
        parts.push("no_new_privs".into());
        parts.push(match entered.dropped {
            Some(d) if d.bounding_set => "every capability dropped".into(),
            _ => "capabilities dropped (bounding set kept: no CAP_SETPCAP)".into(),
        });
        if self.iothread_capabilities != 0 {
            parts.push(
                "but iothreads keep CAP_SYS_NICE (setpriority on themselves, nice 0-19)".into(),
            );
        }
        if let Some((uid, gid)) = self.config.ids() {
            parts.push(format!("uid {uid} gid {gid}"));
        }
        if self.config.namespaces {
            parts.push(format!("namespaces {}", namespaces::describe()));
        }
        format!(
            "{}: {}",
            match self.config.mode {
                SandboxMode::Strict => "strict",
                _ => "on",
            },
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> SandboxConfig {
        serde_json::from_value(v).expect("sandbox config")
    }

    #[test]
    fn on_by_default_and_checked() {
        let d = parse(serde_json::json!({}));
        assert_eq!(d.mode, SandboxMode::On);
        assert!(d.check().is_ok());
        let both = parse(serde_json::json!({"uid": 65534, "gid": 65534, "mode": "strict"}));
        assert_eq!(both.check(), Ok(()));
        let uid_only = parse(serde_json::json!({"uid": 1000}));
        assert_eq!(uid_only.check().map_err(|e| e.field()), Err("sandbox.gid"));
        let gid_only = parse(serde_json::json!({"gid": 1000}));
        assert_eq!(gid_only.check().map_err(|e| e.field()), Err("sandbox.uid"));
        let off_with_ns = parse(serde_json::json!({"mode": "off", "namespaces": true}));
        assert_eq!(
            off_with_ns.check().map_err(|e| e.field()),
            Err("sandbox.mode")
        );
        let slash = parse(serde_json::json!({"allowed_folders": ["/srv/vm", "/"]}));
        assert_eq!(
            slash.check(),
            Err(SandboxConfigError::FolderOffLimits(1)),
            "the whole file system may not be allowed"
        );
        let mapper = parse(serde_json::json!({"allowed_folders": ["/dev/mapper"]}));
        assert_eq!(mapper.check(), Ok(()));
        let bad: Result<SandboxConfig, _> =
            serde_json::from_value(serde_json::json!({"mode": "on", "chroot": "/x"}));
        assert!(bad.is_err(), "unknown fields are refused");
    }

    #[test]
    fn off_enters_nothing() {
        let vm: crate::config::VmConfig = serde_json::from_value(serde_json::json!({
            "boot-source": {"kernel_image_path": "/nonexistent"},
            "sandbox": {"mode": "off"},
        }))
        .expect("config");
        let s = Sandbox::prepare(&vm.sandbox, &vm.sandbox_paths(), None, 0).expect("prepare");
        assert!(!s.is_on());
        let nnp = std::thread::spawn(move || {
            s.enter(ThreadKind::Stdin).expect("enter");
            credentials::status_field("NoNewPrivs")
        })
        .join()
        .expect("join");
        assert_eq!(nnp.as_deref(), Some("0"));
    }
}
