//! Landlock: the file system a sandboxed Osprey may still reach, derived from its config. Every
//! access right the kernel can restrict is handled (read, write, execute, create, remove, rename,
//! truncate, device ioctls; TCP bind and connect; abstract Unix sockets outside the sandbox),
//! and only these paths get some back: each drive (read, or read and write), the files beneath
//! each drive's folder as that drive may use them (a live swap's new file,
//! [`crate::swap_folder`]; none for a drive under `/dev`), the kernel and
//! initrd (read), the metrics file (write), the API socket's directory (remove entries: the
//! socket at exit), the snapshot folders, the API socket's and `snapshot.folder`
//! ([`crate::snapshot_folder`]: create regular files, write and truncate them, and remove
//! entries, which the state file's rename from its temporary name over an older file needs;
//! no directories, links or other file types, and no rename between folders) and
//! `/proc/self/task` (read: each thread's CPU time when the VM stops). Nothing may be executed.
//! Files opened during set-up keep the access they were opened with.
//!
//! Landlock applies per thread (kernels before ABI 8 have no way to restrict a whole process at
//! once), so the ruleset is built once and each thread restricts itself with it in its sandbox
//! hook; sending signals is not scoped, since separately restricted threads are separate
//! domains and the control thread must still kick vCPUs.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath,
    PathFd, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus, Scope, ABI,
};

/// What a rule gives back on its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    /// Read the file.
    Read,
    /// Read and write the file.
    ReadWrite,
    /// Write the file.
    Write,
    /// Read the directory and every file beneath it.
    ReadTree,
    /// Remove files directly in the directory (or beneath it).
    RemoveFiles,
    /// Create regular files in the directory (or beneath it), write and truncate them, and
    /// remove files there: a snapshot's memory file, and its state file written under a
    /// temporary name and renamed (a rename within one folder needs no `Refer`); and open the
    /// folders (not the files) for reading, so a create can sync a folder after its renames.
    SnapshotFiles,
}

impl FsAccess {
    fn rights(self) -> BitFlags<AccessFs> {
        match self {
            FsAccess::Read => AccessFs::ReadFile.into(),
            FsAccess::ReadWrite => AccessFs::ReadFile | AccessFs::WriteFile,
            FsAccess::Write => AccessFs::WriteFile.into(),
            FsAccess::ReadTree => AccessFs::ReadFile | AccessFs::ReadDir,
            FsAccess::RemoveFiles => AccessFs::RemoveFile.into(),
            FsAccess::SnapshotFiles => {
                AccessFs::MakeReg
                    | AccessFs::WriteFile
                    | AccessFs::Truncate
                    | AccessFs::RemoveFile
                    | AccessFs::ReadDir
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            FsAccess::Read => "read",
            FsAccess::ReadWrite => "read-write",
            FsAccess::Write => "write",
            FsAccess::ReadTree => "read tree",
            FsAccess::RemoveFiles => "remove files",
            FsAccess::SnapshotFiles => "create and write files",
        }
    }
}

/// One path and what may be done there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRule {
    /// The path (a file, or a directory for the tree rights).
    pub path: PathBuf,
    /// The rights given back.
    pub access: FsAccess,
    /// What it is for (the config field or the use).
    pub what: String,
    /// The file may be missing (the metrics file, when Osprey could not create it: it then runs
    /// without metrics, as it always has); the rule is skipped instead of failing the start.
    pub optional: bool,
}

/// A drive's backing file, as the sandbox needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrivePath {
    /// The drive id (names the rule).
    pub id: String,
    /// The backing file.
    pub path: PathBuf,
    /// Read-only (else read and write).
    pub read_only: bool,
}

/// The host paths a VM uses after set-up: what the sandbox leaves reachable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmPaths {
    /// The drives' backing files.
    pub drives: Vec<DrivePath>,
    /// The kernel.
    pub kernel: PathBuf,
    /// The initrd, if any.
    pub initrd: Option<PathBuf>,
    /// The metrics file, if any.
    pub metrics: Option<PathBuf>,
    /// The API socket, if any.
    pub api_socket: Option<PathBuf>,
    /// The folders where a snapshot may create its files (none for the vhost-user backend).
    pub snapshot_folders: Vec<crate::snapshot_folder::AllowedFolder>,
    /// The folders the operator allows (`sandbox.allowed_folders`): files a swap may use.
    pub allowed_folders: Vec<PathBuf>,
    /// The vsock device's socket, if any (bound before the sandbox; removed at exit).
    pub vsock_socket: Option<PathBuf>,
}

/// The rules for `paths`: nothing else stays reachable.
pub fn rules_for(paths: &VmPaths) -> Vec<FsRule> {
    let mut rules = Vec::new();
    let mut add = |path: &Path, access, what: String, optional| {
        rules.push(FsRule {
            path: path.to_path_buf(),
            access,
            what,
            optional,
        })
    };
    for d in &paths.drives {
        let access = if d.read_only {
            FsAccess::Read
        } else {
            FsAccess::ReadWrite
        };
        add(&d.path, access, format!("drive {}", d.id), false);
    }
    for d in &paths.drives {
        let access = if d.read_only {
            FsAccess::Read
        } else {
            FsAccess::ReadWrite
        };
        if let Some(folder) = crate::swap_folder::rule_folder(&d.path) {
            add(
                folder,
                access,
                format!("folder of drive {} (files a swap may use)", d.id),
                false,
            );
        }
    }
    for folder in &paths.allowed_folders {
        // A folder that is gone allows nothing (the API's check leaves it out too).
        add(
            folder,
            FsAccess::ReadWrite,
            "allowed folder (files a swap may use)".into(),
            true,
        );
    }
    add(&paths.kernel, FsAccess::Read, "kernel".into(), false);
    if let Some(initrd) = &paths.initrd {
        add(initrd, FsAccess::Read, "initrd".into(), false);
    }
    if let Some(m) = &paths.metrics {
        add(m, FsAccess::Write, "metrics file".into(), true);
    }
    if let Some(socket) = &paths.api_socket {
        let dir = match socket.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        add(
            dir,
            FsAccess::RemoveFiles,
            "API socket directory".into(),
            false,
        );
    }
    if let Some(socket) = &paths.vsock_socket {
        let dir = match socket.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        add(
            dir,
            FsAccess::RemoveFiles,
            "vsock socket directory".into(),
            false,
        );
    }
    for folder in &paths.snapshot_folders {
        // A configured folder that is gone (a restore on another host) has no rule, and the
        // API's check leaves it out too.
        let optional = folder.what == crate::snapshot_folder::CONFIGURED_FOLDER;
        add(
            &folder.path,
            FsAccess::SnapshotFiles,
            format!("{} for snapshots", folder.what),
            optional,
        );
    }
    add(
        Path::new("/proc/self/task"),
        FsAccess::ReadTree,
        "thread CPU times".into(),
        false,
    );
    rules
}

/// Errors building the ruleset.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The kernel cannot enforce what `--sandbox strict` requires, or refused a rule.
    #[error("Landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A rule's path cannot be opened.
    #[error("Landlock rule for the {what}: {source}")]
    Path {
        /// The rule's use.
        what: String,
        /// The error (names the path).
        source: landlock::PathFdError,
    },
    /// Duplicating the ruleset for a thread failed.
    #[error("Landlock: duplicating the ruleset: {0}")]
    Clone(std::io::Error),
}

/// The ABI whose features Osprey asks for: file-system rights up to device ioctls (ABI 5),
/// TCP bind and connect (ABI 4), abstract Unix socket scoping (ABI 6). `--sandbox strict`
/// requires all of them (Linux 6.12 or later).
const WANTED_ABI: ABI = ABI::V6;

/// A compiled ruleset, ready for each thread to restrict itself with.
#[derive(Debug)]
pub struct FsSandbox {
    ruleset: RulesetCreated,
    rules: Vec<FsRule>,
}

impl FsSandbox {
    /// Builds the ruleset for `rules`; with `strict`, every wanted feature must be enforceable.
    pub fn build(rules: Vec<FsRule>, strict: bool) -> Result<FsSandbox, LandlockError> {
        let level = if strict {
            CompatLevel::HardRequirement
        } else {
            CompatLevel::BestEffort
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(level)
            .handle_access(AccessFs::from_all(WANTED_ABI))?
            .handle_access(AccessNet::from_all(WANTED_ABI))?
            .scope(Scope::AbstractUnixSocket)?
            .create()?;
        let mut kept = Vec::with_capacity(rules.len());
        for r in rules {
            let fd = match PathFd::new(&r.path) {
                Ok(fd) => fd,
                Err(_) if r.optional => {
                    log::warn!(
                        "Landlock: no rule for the {} ({}): it does not exist",
                        r.what,
                        r.path.display()
                    );
                    continue;
                }
                Err(source) => {
                    return Err(LandlockError::Path {
                        what: r.what.clone(),
                        source,
                    })
                }
            };
            ruleset = ruleset.add_rule(PathBeneath::new(fd, r.access.rights()))?;
            kept.push(r);
        }
        Ok(FsSandbox {
            ruleset,
            rules: kept,
        })
    }

    /// Restricts the calling thread (for good).
    pub fn restrict_thread(&self) -> Result<RestrictionStatus, LandlockError> {
        let ruleset = self.ruleset.try_clone().map_err(LandlockError::Clone)?;
        Ok(ruleset.restrict_self()?)
    }

    /// The rules, for the log: `read-write drive disk0 (/path), …`.
    pub fn describe_rules(&self) -> String {
        self.rules
            .iter()
            .map(|r| format!("{} {} ({})", r.access.name(), r.what, r.path.display()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules (never: `/proc/self/task` is always there).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// How a thread's restriction went, in words: `Landlock ABI 7 fully enforced`.
pub fn describe_status(status: &RestrictionStatus) -> String {
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => format!("ABI {}", effective_abi as i32),
        LandlockStatus::NotEnabled => "not enabled in this kernel".into(),
        LandlockStatus::NotImplemented => "not built into this kernel".into(),
    };
    let how = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced (an older kernel)",
        RulesetStatus::NotEnforced => "NOT enforced",
    };
    format!("Landlock {abi} {how}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> VmPaths {
        let mut base = serde_json::json!({
            "boot-source": {"kernel_image_path": "/k/vmlinux", "initrd_path": "/k/initrd"},
            "drives": [
                {"drive_id": "root", "path_on_host": "/d/root.img"},
                {"drive_id": "ro", "path_on_host": "/d/ro.img", "is_read_only": true}
            ],
        });
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let c: crate::config::VmConfig = serde_json::from_value(base).expect("config");
        c.sandbox_paths()
    }

    #[test]
    fn each_configured_path_gets_only_what_it_needs() {
        let c = config(serde_json::json!({
            "api": {"socket": "/run/osprey/api.sock"},
            "metrics": {"path": "/var/log/osprey.metrics"},
            "snapshot": {"folder": "/srv/snaps"},
        }));
        let got: Vec<(String, FsAccess)> = rules_for(&c)
            .into_iter()
            .map(|r| (r.path.display().to_string(), r.access))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/d/root.img".into(), FsAccess::ReadWrite),
                ("/d/ro.img".into(), FsAccess::Read),
                ("/d".into(), FsAccess::ReadWrite),
                ("/d".into(), FsAccess::Read),
                ("/k/vmlinux".into(), FsAccess::Read),
                ("/k/initrd".into(), FsAccess::Read),
                ("/var/log/osprey.metrics".into(), FsAccess::Write),
                ("/run/osprey".into(), FsAccess::RemoveFiles),
                ("/run/osprey".into(), FsAccess::SnapshotFiles),
                ("/srv/snaps".into(), FsAccess::SnapshotFiles),
                ("/proc/self/task".into(), FsAccess::ReadTree),
            ]
        );
        let optional: Vec<bool> = rules_for(&c)
            .iter()
            .filter(|r| r.access == FsAccess::SnapshotFiles)
            .map(|r| r.optional)
            .collect();
        assert_eq!(
            optional,
            [false, true],
            "only a configured folder may be gone"
        );
    }

    #[test]
    fn the_vsock_socket_folder_may_only_lose_files() {
        let c =
            config(serde_json::json!({"vsock": {"guest_cid": 3, "uds_path": "/run/vm/v.sock"}}));
        let rules: Vec<_> = rules_for(&c)
            .into_iter()
            .filter(|r| r.what.starts_with("vsock"))
            .map(|r| (r.path, r.access))
            .collect();
        assert_eq!(rules, vec![("/run/vm".into(), FsAccess::RemoveFiles)]);
    }

    #[test]
    fn a_socket_in_the_working_directory_names_it() {
        let c = config(serde_json::json!({"api": {"socket": "api.sock"}}));
        assert!(rules_for(&c)
            .iter()
            .any(|r| r.path == Path::new(".") && r.access == FsAccess::RemoveFiles));
    }

    #[test]
    fn no_rule_gives_execute_and_only_snapshot_folders_creation_of_regular_files() {
        for a in [
            FsAccess::Read,
            FsAccess::ReadWrite,
            FsAccess::Write,
            FsAccess::ReadTree,
            FsAccess::RemoveFiles,
            FsAccess::SnapshotFiles,
        ] {
            let r = a.rights();
            assert!(!r.contains(AccessFs::Execute), "{a:?}");
            assert!(
                !r.intersects(
                    AccessFs::MakeSock
                        | AccessFs::MakeSym
                        | AccessFs::MakeDir
                        | AccessFs::MakeChar
                        | AccessFs::MakeBlock
                        | AccessFs::MakeFifo
                        | AccessFs::RemoveDir
                        | AccessFs::Refer
                ),
                "{a:?}: {r:?}"
            );
            assert_eq!(
                r.contains(AccessFs::MakeReg),
                a == FsAccess::SnapshotFiles,
                "{a:?}"
            );
        }
    }

    #[test]
    fn a_snapshot_folder_takes_new_files_and_a_rename_but_nothing_else() {
        let dir = std::env::temp_dir().join(format!("osprey-landlock-snap-{}", std::process::id()));
        let folder = dir.join("snaps");
        std::fs::create_dir_all(&folder).expect("dir");
        std::fs::write(folder.join("state.snap"), b"older").expect("an older state file");
        let sandbox = FsSandbox::build(
            vec![FsRule {
                path: folder.clone(),
                access: FsAccess::SnapshotFiles,
                what: "snapshot folder".into(),
                optional: false,
            }],
            false,
        )
        .expect("ruleset");
        let errno = |r: std::io::Result<()>| r.map_err(|e| e.raw_os_error());
        let f = folder.clone();
        let d = dir.clone();
        let (created, renamed, read_back, mkdir, outside, status) = std::thread::spawn(move || {
            let status = describe_status(&sandbox.restrict_thread().expect("restrict"));
            let tmp = f.join("state.snap.tmp");
            let created = errno(std::fs::write(f.join("mem.snap"), b"memory"))
                .and(errno(std::fs::write(&tmp, b"state")))
                .and(errno(std::fs::write(
                    f.join("mem.snap"),
                    b"again, truncated",
                )));
            let renamed = errno(std::fs::rename(&tmp, f.join("state.snap")));
            let read_back = std::fs::read(f.join("state.snap")).map_err(|e| e.raw_os_error());
            let mkdir = errno(std::fs::create_dir(f.join("sub")));
            let outside = errno(std::fs::write(d.join("outside.snap"), b"no"));
            (created, renamed, read_back, mkdir, outside, status)
        })
        .join()
        .expect("join");
        let state = std::fs::read(folder.join("state.snap"));
        let _ = std::fs::remove_dir_all(&dir);
        if status.contains("not enabled") || status.contains("not built") {
            eprintln!("NOT RUN: {status}");
            return;
        }
        assert_eq!(created, Ok(()), "{status}");
        assert_eq!(renamed, Ok(()), "{status}: a rename over an older file");
        assert_eq!(state.ok(), Some(b"state".to_vec()));
        assert_eq!(read_back, Err(Some(libc::EACCES)), "no reading");
        assert_eq!(mkdir, Err(Some(libc::EACCES)), "no folders");
        assert_eq!(outside, Err(Some(libc::EACCES)), "nothing outside");
    }

    #[test]
    fn a_restricted_thread_reaches_its_files_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("osprey-landlock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let allowed = dir.join("allowed");
        let other = dir.join("other");
        std::fs::write(&allowed, b"yes").expect("write");
        std::fs::write(&other, b"no").expect("write");
        let sandbox = FsSandbox::build(
            vec![
                FsRule {
                    path: allowed.clone(),
                    access: FsAccess::Read,
                    what: "test".into(),
                    optional: false,
                },
                FsRule {
                    path: dir.join("never-created"),
                    access: FsAccess::Write,
                    what: "optional file".into(),
                    optional: true,
                },
            ],
            false,
        )
        .expect("ruleset: a missing optional file is skipped");
        assert_eq!(sandbox.len(), 1, "{}", sandbox.describe_rules());
        let (a, o, status) = std::thread::spawn(move || {
            let status = sandbox.restrict_thread().expect("restrict");
            (
                std::fs::read(&allowed).map_err(|e| e.raw_os_error()),
                std::fs::read(&other).map_err(|e| e.raw_os_error()),
                describe_status(&status),
            )
        })
        .join()
        .expect("join");
        let _ = std::fs::remove_dir_all(&dir);
        if status.contains("not enabled") || status.contains("not built") {
            eprintln!("NOT RUN: {status}");
            return;
        }
        assert_eq!(a, Ok(b"yes".to_vec()), "{status}");
        assert_eq!(o, Err(Some(libc::EACCES)), "{status}");
    }
}
