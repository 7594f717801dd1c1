//! Where `PUT /snapshot/create` may create its files while the sandbox is on: the API socket's
//! folder (Osprey created the socket there; Firecracker's jail likewise holds its socket and
//! its snapshots) and `snapshot.folder` when configured, or beneath either. The sandbox's
//! Landlock rules let the control thread create files there ([`rule_folders`]), and the API
//! checks both paths against them before the snapshot starts ([`SnapshotFolders::check`]), so a
//! path outside is a 400 that names it and the folders, and no file is created. With the
//! sandbox off any path is taken, and no check is made. `/` and the trees under `/dev`, `/proc`
//! and `/sys` never take snapshot files ([`is_off_limits`]): `snapshot.folder` there is a
//! config error, and a socket there gives its folder no such rights.

use std::path::{Path, PathBuf};

use crate::allowed_folders::socket_folder;
use crate::swap_folder::normalize;

/// One folder where snapshot files may be created, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedFolder {
    /// The folder: the socket's, absolute; `snapshot.folder` as the config has it (absolute once
    /// a config file's paths are resolved).
    pub path: PathBuf,
    /// Where it comes from: [`SOCKET_FOLDER`] or [`CONFIGURED_FOLDER`].
    pub what: &'static str,
}

/// [`AllowedFolder::what`] of the API socket's folder.
pub const SOCKET_FOLDER: &str = "API socket's folder";
/// [`AllowedFolder::what`] of `snapshot.folder`.
pub const CONFIGURED_FOLDER: &str = "snapshot.folder";

/// Whether `folder` (absolute) may never take snapshot files: the root folder (the whole file
/// system would become writable) or a folder under `/dev`, `/proc` or `/sys` (devices and the
/// kernel's interfaces).
pub fn is_off_limits(folder: &Path) -> bool {
    folder.parent().is_none()
        || ["/dev", "/proc", "/sys"]
            .iter()
            .any(|d| folder.starts_with(d))
}

/// The folders where snapshot files may be created: the folder of `api_socket` (when the VM
/// serves the API, made absolute, and unless it is off limits) and `configured`
/// (`snapshot.folder`, checked when the config was), in that order. Call before the sandbox:
/// a relative socket path is made absolute with the working directory.
pub fn rule_folders(api_socket: Option<&Path>, configured: Option<&Path>) -> Vec<AllowedFolder> {
    let mut folders = Vec::new();
    if let Some(socket) = api_socket {
        let folder = socket_folder(socket).unwrap_or_else(|| PathBuf::from("/"));
        if !is_off_limits(&folder) {
            folders.push(AllowedFolder {
                path: folder,
                what: SOCKET_FOLDER,
            });
        }
    }
    if let Some(folder) = configured {
        folders.push(AllowedFolder {
            path: folder.to_path_buf(),
            what: CONFIGURED_FOLDER,
        });
    }
    folders
}

/// A folder resolved at start: its path made absolute by the text, and without symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    /// Absolute, `.` and `..` resolved by name (a path through a symlinked folder, as the
    /// socket's path was written, passes).
    absolute: PathBuf,
    /// The same folder with every symlink resolved.
    real: PathBuf,
    /// Where it comes from.
    what: &'static str,
}

/// The folders a snapshot's files may be created in, resolved at start (before the sandbox:
/// resolving symlinks and reading the working directory take calls the control thread's
/// seccomp filter does not allow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFolders {
    /// The folders that exist (a missing one has no Landlock rule either).
    folders: Vec<Resolved>,
    /// The working directory at start: what a relative path in the request is relative to.
    base: PathBuf,
}

/// Why a path cannot take a snapshot file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotFolderError {
    /// The path lies outside every allowed folder.
    #[error(
        "{}: outside the folders where a snapshot may be created with the sandbox on: {} (a \
         snapshot file must lie in one of them or beneath it; docs/snapshot.md)",
        path.display(),
        allowed
    )]
    Outside {
        /// The path as given.
        path: PathBuf,
        /// The folders, in words: `/run/vm (API socket's folder), /srv/snaps
        /// (snapshot.folder)`, or `none`.
        allowed: String,
    },
}

impl SnapshotFolders {
    /// Resolves `folders` against the working directory now; a folder that does not exist
    /// (or cannot be resolved) is left out.
    pub fn resolve(folders: &[AllowedFolder]) -> SnapshotFolders {
        let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let folders = folders
            .iter()
            .filter_map(|f| {
                let absolute = normalize(&base.join(&f.path));
                let real = std::fs::canonicalize(&absolute).ok()?;
                Some(Resolved {
                    absolute,
                    real,
                    what: f.what,
                })
            })
            .collect();
        SnapshotFolders { folders, base }
    }

    /// Checks `path` (from the request) against the folders; returns the absolute path to
    /// create: relative to the working directory at start, `.` and `..` resolved by name (a
    /// symlink in a folder that leads outside is left to Landlock, which refuses to create
    /// through it).
    pub fn check(&self, path: &Path) -> Result<PathBuf, SnapshotFolderError> {
        let full = normalize(&self.base.join(path));
        let beneath = |folder: &Path| full.starts_with(folder) && full != folder;
        if self
            .folders
            .iter()
            .any(|f| beneath(&f.absolute) || beneath(&f.real))
        {
            return Ok(full);
        }
        Err(SnapshotFolderError::Outside {
            path: path.to_path_buf(),
            allowed: self.describe(),
        })
    }

    /// The folders in words, for messages: `/run/vm (API socket's folder)`, or `none`.
    pub fn describe(&self) -> String {
        if self.folders.is_empty() {
            return "none (no snapshot.folder, and no API socket in a folder that may take them)"
                .into();
        }
        self.folders
            .iter()
            .map(|f| format!("{} ({})", f.absolute.display(), f.what))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folders(list: &[(&str, &str)], base: &str) -> SnapshotFolders {
        SnapshotFolders {
            folders: list
                .iter()
                .map(|&(absolute, real)| Resolved {
                    absolute: absolute.into(),
                    real: real.into(),
                    what: SOCKET_FOLDER,
                })
                .collect(),
            base: base.into(),
        }
    }

    #[test]
    fn paths_beneath_an_allowed_folder_pass_and_others_do_not() {
        let f = SnapshotFolders {
            folders: vec![
                Resolved {
                    absolute: "/run/vm".into(),
                    real: "/run/vm".into(),
                    what: SOCKET_FOLDER,
                },
                Resolved {
                    absolute: "/srv/snaps".into(),
                    real: "/srv/snaps".into(),
                    what: CONFIGURED_FOLDER,
                },
            ],
            base: "/run/vm".into(),
        };
        for (given, created) in [
            ("/run/vm/state.snap", "/run/vm/state.snap"),
            ("/srv/snaps/a/mem.snap", "/srv/snaps/a/mem.snap"),
            ("state.snap", "/run/vm/state.snap"),
            ("../../srv/snaps/mem.snap", "/srv/snaps/mem.snap"),
            ("/run/vm/./x/../state.snap", "/run/vm/state.snap"),
        ] {
            assert_eq!(
                f.check(Path::new(given)),
                Ok(PathBuf::from(created)),
                "{given}"
            );
        }
        for outside in [
            "/etc/passwd",
            "/run/vm/../x.snap",
            "../x.snap",
            "/run/vmx/state.snap",
            "/run/vm",
            "/srv/snaps",
            "/srv",
        ] {
            let e = f.check(Path::new(outside)).expect_err(outside);
            assert_eq!(
                e.to_string(),
                format!(
                    "{outside}: outside the folders where a snapshot may be created with the \
                     sandbox on: /run/vm (API socket's folder), /srv/snaps (snapshot.folder) \
                     (a snapshot file must lie in one of them or beneath it; docs/snapshot.md)"
                )
            );
        }
    }

    #[test]
    fn a_folder_passes_by_its_written_path_and_by_its_real_one() {
        let f = folders(&[("/var/run/vm", "/run/vm")], "/");
        assert!(f.check(Path::new("/var/run/vm/s")).is_ok());
        assert!(f.check(Path::new("/run/vm/s")).is_ok());
        assert!(f.check(Path::new("/var/run/s")).is_err());
    }

    #[test]
    fn without_folders_everything_is_refused() {
        let f = folders(&[], "/");
        let e = f.check(Path::new("/tmp/s")).expect_err("no folder");
        assert!(
            e.to_string()
                .contains("none (no snapshot.folder, and no API"),
            "{e}"
        );
    }

    #[test]
    fn the_socket_folder_comes_first_then_the_configured_one() {
        assert_eq!(
            rule_folders(
                Some(Path::new("/run/vm/api.sock")),
                Some(Path::new("/srv/s"))
            ),
            vec![
                AllowedFolder {
                    path: "/run/vm".into(),
                    what: SOCKET_FOLDER
                },
                AllowedFolder {
                    path: "/srv/s".into(),
                    what: CONFIGURED_FOLDER
                },
            ]
        );
        let cwd = std::env::current_dir().expect("working directory");
        assert_eq!(
            rule_folders(Some(Path::new("api.sock")), None),
            vec![AllowedFolder {
                path: cwd.clone(),
                what: SOCKET_FOLDER
            }],
            "a socket named without a folder: the working directory"
        );
        assert_eq!(
            rule_folders(Some(Path::new("run/../api.sock")), None)[0].path,
            cwd
        );
        assert!(rule_folders(None, None).is_empty());
        for off_limits in [
            "/api.sock",
            "/dev/shm/api.sock",
            "/proc/x/api.sock",
            "/sys/api.sock",
        ] {
            assert!(
                rule_folders(Some(Path::new(off_limits)), None).is_empty(),
                "{off_limits}"
            );
        }
        assert!(!is_off_limits(Path::new("/devices")));
        assert!(!is_off_limits(Path::new("/srv/dev")));
    }

    #[test]
    fn resolving_keeps_existing_folders_only() {
        let dir = std::env::temp_dir().join(format!("osprey-snapfolder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let resolved = SnapshotFolders::resolve(&[
            AllowedFolder {
                path: dir.clone(),
                what: SOCKET_FOLDER,
            },
            AllowedFolder {
                path: dir.join("missing"),
                what: CONFIGURED_FOLDER,
            },
        ]);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(resolved.folders.len(), 1, "{resolved:?}");
        assert!(resolved.check(&dir.join("state.snap")).is_ok());
        assert!(resolved.check(&dir.join("missing/state.snap")).is_ok());
        assert!(resolved.describe().ends_with("(API socket's folder)"));
    }
}
