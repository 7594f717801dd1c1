//! The folders a sandboxed Osprey may take files from beyond its own, as a jailer's chroot
//! bounds what its VMM can name: the API socket's folder (before `InstanceStart`: the jail's
//! folder, where an orchestrator puts the VM's files) and the folders the operator allows
//! (`sandbox.allowed_folders`, `--allow-folder`). ONE list serves the pre-boot API's paths
//! (logger, metrics, drives, kernel, initrd, a snapshot to load: [`AllowedFolders::check_real`])
//! and a live drive swap's new file ([`AllowedFolders::check`], after the drive's own folder).
//! With `--sandbox off` no list is made and any path is taken. A leaf: paths in, a path or an
//! error out. docs/security.md.

use std::path::{Component, Path, PathBuf};

/// [`AllowedFolder::what`] of the API socket's folder.
pub const SOCKET_FOLDER: &str = "API socket's folder";
/// [`AllowedFolder::what`] of a folder the operator allows.
pub const OPERATOR_FOLDER: &str = "--allow-folder";

/// One folder, and why it is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedFolder {
    /// The folder as given (made absolute by [`AllowedFolders::resolve`]).
    pub path: PathBuf,
    /// [`SOCKET_FOLDER`] or [`OPERATOR_FOLDER`].
    pub what: &'static str,
}

/// Whether `folder` (absolute) may never be allowed: the root folder (the whole file system),
/// `/dev` itself (every device; a folder beneath it, such as `/dev/mapper`, may be allowed) and
/// anything under `/proc` or `/sys` (the kernel's interfaces).
pub fn is_off_limits(folder: &Path) -> bool {
    let folder = normalize(folder);
    folder.parent().is_none()
        || folder == Path::new("/dev")
        || ["/proc", "/sys"].iter().any(|d| folder.starts_with(d))
}

/// Whether `folder` is the root of a jail given to this process: `/`, owned by the process's
/// effective uid, which is not root. Only a chroot made for an unprivileged VMM (a jailer's,
/// runc's: docs/orchestration.md) has such a root; the host's `/` is root's. The API socket's
/// folder may then be `/`: the whole file system the VMM sees is the jail.
pub fn is_own_jail_root(folder: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    normalize(folder).parent().is_none()
        && euid != 0
        && std::fs::metadata(folder).is_ok_and(|m| m.uid() == euid)
}

/// Whether the API socket's folder `folder` may serve: not off limits, or a jail's root.
fn socket_folder_allowed(folder: &Path) -> bool {
    !is_off_limits(folder) || is_own_jail_root(folder)
}

/// The folder holding the API socket `socket`: absolute (from the working directory; call before
/// the sandbox), `.` and `..` resolved by name. `None` for a socket path with no parent (`/`).
pub fn socket_folder(socket: &Path) -> Option<PathBuf> {
    let socket = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    normalize(&socket).parent().map(Path::to_path_buf)
}

/// The folder of the API socket `socket` (made absolute from the working directory), unless it
/// is off limits, then the operator's `allowed` folders, in that order.
pub fn with_socket_folder(socket: Option<&Path>, allowed: &[PathBuf]) -> Vec<AllowedFolder> {
    let mut folders = Vec::new();
    if let Some(folder) = socket.and_then(socket_folder) {
        if socket_folder_allowed(&folder) {
            folders.push(AllowedFolder {
                path: folder,
                what: SOCKET_FOLDER,
            });
        }
    }
    folders.extend(allowed.iter().map(|p| AllowedFolder {
        path: p.clone(),
        what: OPERATOR_FOLDER,
    }));
    folders
}

/// A folder resolved before the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    /// Absolute, `.` and `..` resolved by name.
    absolute: PathBuf,
    /// The same folder with every symlink resolved.
    real: PathBuf,
    what: &'static str,
}

/// The folders, resolved against the working directory (before the sandbox: resolving
/// symlinks and reading the working directory take calls the sandboxed threads may not make).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedFolders {
    /// The folders that exist (a missing one allows nothing).
    folders: Vec<Resolved>,
    /// What a relative path is relative to: the working directory at start.
    base: PathBuf,
}

/// A path outside every allowed folder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}: outside the folders Osprey may use with the sandbox on: {allowed} (allow another with \
     --allow-folder DIR or sandbox.allowed_folders, or run with --sandbox off; docs/security.md)",
    path.display()
)]
pub struct OutsideError {
    /// The path as given.
    pub path: PathBuf,
    /// The folders in words: `/run/vm (API socket's folder), /srv (--allow-folder)`, or `none`.
    pub allowed: String,
}

impl AllowedFolders {
    /// Resolves `folders` against the working directory now; a folder that does not exist (or
    /// is off limits once its symlinks are resolved) is left out.
    pub fn resolve(folders: &[AllowedFolder]) -> AllowedFolders {
        let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let folders = folders
            .iter()
            .filter_map(|f| {
                let absolute = normalize(&base.join(&f.path));
                let real = std::fs::canonicalize(&absolute).ok()?;
                let allowed = if f.what == SOCKET_FOLDER {
                    socket_folder_allowed(&real)
                } else {
                    !is_off_limits(&real)
                };
                allowed.then_some(Resolved {
                    absolute,
                    real,
                    what: f.what,
                })
            })
            .collect();
        AllowedFolders { folders, base }
    }

    /// `path` made absolute (from the working directory at start; `.` and `..` by name).
    fn absolute(&self, path: &Path) -> PathBuf {
        normalize(&self.base.join(path))
    }

    /// Checks `path` by name: beneath a folder as written or as resolved. Returns the absolute
    /// path. For a sandboxed thread (Landlock refuses a symlink that leads outside).
    pub fn check(&self, path: &Path) -> Result<PathBuf, OutsideError> {
        let full = self.absolute(path);
        let beneath = |folder: &Path| full.starts_with(folder) && full != folder;
        if self
            .folders
            .iter()
            .any(|f| beneath(&f.absolute) || beneath(&f.real))
        {
            Ok(full)
        } else {
            Err(self.outside(path))
        }
    }

    /// [`check`](Self::check), and the path with its symlinks resolved (the deepest part that
    /// exists; the rest as written) lies beneath a folder's real path too: for a thread that
    /// Landlock does not hold (the pre-boot phase's main thread), so a symlink in a folder that
    /// leads outside is refused here.
    pub fn check_real(&self, path: &Path) -> Result<PathBuf, OutsideError> {
        let full = self.check(path)?;
        let real = real_path(&full);
        let beneath = |folder: &Path| real.starts_with(folder) && real != folder;
        if self.folders.iter().any(|f| beneath(&f.real)) {
            Ok(full)
        } else {
            Err(self.outside(path))
        }
    }

    fn outside(&self, path: &Path) -> OutsideError {
        OutsideError {
            path: path.to_path_buf(),
            allowed: self.describe(),
        }
    }

    /// The folders in words, for messages: `/run/vm (API socket's folder)`, or `none`.
    pub fn describe(&self) -> String {
        if self.folders.is_empty() {
            return "none".into();
        }
        self.folders
            .iter()
            .map(|f| format!("{} ({})", f.absolute.display(), f.what))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `path` (absolute, normalized) with the symlinks of its deepest existing ancestor resolved.
fn real_path(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// `path` with `.` dropped and each `..` removing the name before it (never above `/`).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("osprey-allowed-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::canonicalize(&dir).expect("real")
    }

    #[test]
    fn off_limits_folders() {
        for f in ["/", "/dev", "/dev/", "/proc", "/proc/1", "/sys/fs", "/x/.."] {
            assert!(is_off_limits(Path::new(f)), "{f}");
        }
        for f in ["/dev/mapper", "/srv", "/devices", "/tmp/proc"] {
            assert!(!is_off_limits(Path::new(f)), "{f}");
        }
    }

    #[test]
    fn only_a_root_owned_by_a_non_root_uid_is_a_jail() {
        // The host's `/` is root's; any other folder is no root at all.
        assert!(!is_own_jail_root(Path::new("/")));
        assert!(!is_own_jail_root(&std::env::temp_dir()));
        assert!(with_socket_folder(Some(Path::new("/api.sock")), &[]).is_empty());
    }

    #[test]
    fn the_socket_folder_then_the_operators() {
        let list = with_socket_folder(Some(Path::new("/run/vm/api.sock")), &["/srv".into()]);
        assert_eq!(
            list,
            vec![
                AllowedFolder {
                    path: "/run/vm".into(),
                    what: SOCKET_FOLDER
                },
                AllowedFolder {
                    path: "/srv".into(),
                    what: OPERATOR_FOLDER
                }
            ]
        );
        assert!(with_socket_folder(Some(Path::new("/api.sock")), &[]).is_empty());
        assert!(with_socket_folder(Some(Path::new("/dev/api.sock")), &[]).is_empty());
    }

    #[test]
    fn paths_beneath_pass_others_and_symlinks_out_do_not() {
        let jail = scratch("jail");
        let other = scratch("other");
        std::os::unix::fs::symlink(&other, jail.join("out")).expect("symlink");
        let f = AllowedFolders::resolve(&with_socket_folder(Some(&jail.join("api.sock")), &[]));
        assert_eq!(
            f.check_real(&jail.join("new.log")),
            Ok(jail.join("new.log"))
        );
        assert!(f.check_real(&jail.join("a/b/new.log")).is_ok());
        for outside in [
            PathBuf::from("/etc/osprey-evil.log"),
            PathBuf::from("/dev/null"),
            jail.join("../x.log"),
            jail.clone(),
            other.join("x.log"),
        ] {
            let e = f.check_real(&outside).expect_err("outside");
            assert!(
                e.to_string()
                    .contains(&format!("{} (API socket's folder)", jail.display())),
                "{e}"
            );
        }
        // By name the symlink passes (Landlock's job on a sandboxed thread); resolved, not.
        assert!(f.check(&jail.join("out/x.log")).is_ok());
        assert!(f.check_real(&jail.join("out/x.log")).is_err());
        let none = AllowedFolders::resolve(&[]);
        assert!(none
            .check(Path::new("/tmp/x"))
            .expect_err("none")
            .to_string()
            .contains(": none (allow another with --allow-folder"));
        let _ = std::fs::remove_dir_all(&jail);
        let _ = std::fs::remove_dir_all(&other);
    }
}
