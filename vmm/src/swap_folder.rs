//! Where a drive's new backing file may come from when `PATCH /drives/{id}` swaps it: the
//! folder of the file the drive was configured with, or beneath it (as a jailer's chroot holds
//! every file its VMM may open), except under `/dev` (a block device's folder would open every
//! device). The sandbox's Landlock rules allow these folders ([`rule_folder`]), and the API
//! checks a path against the drive's folder first ([`SwapFolder::check`]), so a path outside
//! is a clear 400 with the sandbox on or off. A leaf: paths in, a path or an error out.

use std::path::{Component, Path, PathBuf};

/// The folder whose files may replace the drive's configured `path` (as written in the config),
/// or `None` when the drive cannot take a swapped-in file (its file is under `/dev`).
pub fn rule_folder(path: &Path) -> Option<&Path> {
    if path.starts_with("/dev") {
        return None;
    }
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => Some(p),
        _ => Some(Path::new(".")),
    }
}

/// A drive's swap folder, resolved at start (before the sandbox: it may resolve symlinks and
/// read the working directory, which the control thread's seccomp filter does not allow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapFolder {
    /// The folder, absolute and without symlinks; `None`: the drive takes no swapped-in file.
    folder: Option<PathBuf>,
    /// The working directory at start: what a relative path in a PATCH is relative to.
    base: PathBuf,
}

/// Why a path cannot replace a drive's file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapFolderError {
    /// The path lies outside the drive's folder.
    #[error(
        "{}: outside {}, the folder of the drive's configured file: a swapped-in file must lie \
         in that folder or beneath it (docs/security.md)",
        path.display(),
        folder.display()
    )]
    Outside {
        /// The path as given.
        path: PathBuf,
        /// The drive's folder.
        folder: PathBuf,
    },
    /// The drive's configured file is under `/dev` (or its folder could not be resolved).
    #[error(
        "{}: this drive takes no swapped-in file: its configured file is a device under /dev \
         or its folder could not be resolved at start (docs/security.md)",
        path.display()
    )]
    NoFolder {
        /// The path as given.
        path: PathBuf,
    },
}

impl SwapFolder {
    /// The swap folder of a drive configured with `path`, resolved against the working
    /// directory now.
    pub fn resolve(path: &Path) -> SwapFolder {
        let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let folder = rule_folder(path).and_then(|f| std::fs::canonicalize(base.join(f)).ok());
        SwapFolder { folder, base }
    }

    /// Checks `path` (from a PATCH body) against the folder; returns the absolute path to
    /// open: relative to the working directory at start, `.` and `..` resolved by name (a
    /// symlink that leads outside is left to Landlock, which refuses to open it).
    pub fn check(&self, path: &Path) -> Result<PathBuf, SwapFolderError> {
        let Some(folder) = &self.folder else {
            return Err(SwapFolderError::NoFolder {
                path: path.to_path_buf(),
            });
        };
        let full = normalize(&self.base.join(path));
        if full.starts_with(folder) && full != *folder {
            Ok(full)
        } else {
            Err(SwapFolderError::Outside {
                path: path.to_path_buf(),
                folder: folder.clone(),
            })
        }
    }
}

/// `path` with `.` dropped and each `..` removing the name before it (never above `/`); the
/// snapshot folders' check uses it too.
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

    fn folder(f: &str, base: &str) -> SwapFolder {
        SwapFolder {
            folder: Some(PathBuf::from(f)),
            base: PathBuf::from(base),
        }
    }

    #[test]
    fn paths_beneath_the_drive_folder_pass_and_others_do_not() {
        let f = folder("/jail/root", "/jail/root");
        assert_eq!(
            f.check(Path::new("/jail/root/b.img")),
            Ok(PathBuf::from("/jail/root/b.img"))
        );
        assert_eq!(
            f.check(Path::new("images/c.img")),
            Ok(PathBuf::from("/jail/root/images/c.img")),
            "relative to the working directory at start"
        );
        for outside in [
            "/etc/shadow",
            "/jail/root/../x.img",
            "../x.img",
            "/jail/rootx/a",
            "/jail/root",
        ] {
            let e = f.check(Path::new(outside)).expect_err(outside);
            assert!(
                e.to_string()
                    .contains("outside /jail/root, the folder of the drive's configured"),
                "{e}"
            );
        }
        assert!(matches!(
            SwapFolder {
                folder: None,
                base: "/".into()
            }
            .check(Path::new("/dev/sdb")),
            Err(SwapFolderError::NoFolder { .. })
        ));
    }

    #[test]
    fn rule_folders_are_the_drive_files_folders_except_devices() {
        assert_eq!(rule_folder(Path::new("/d/a.img")), Some(Path::new("/d")));
        assert_eq!(rule_folder(Path::new("a.img")), Some(Path::new(".")));
        assert_eq!(rule_folder(Path::new("/dev/mapper/x")), None);
        assert_eq!(rule_folder(Path::new("/dev/sdb")), None);
    }
}
