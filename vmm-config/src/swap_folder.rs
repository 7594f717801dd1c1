//! Where a drive's new backing file may come from when `PATCH /drives/{id}` swaps it with the
//! sandbox on: the folder of the file the drive was configured with, or beneath it (as a
//! jailer's chroot holds every file its VMM may open), except under `/dev` (a block device's
//! folder would open every device), and the folders the operator allows
//! (`sandbox.allowed_folders`, `--allow-folder`: [`crate::allowed_folders`]). The sandbox's
//! Landlock rules allow these folders ([`rule_folder`]), and the API checks a path against them
//! first ([`SwapFolder::check`]), so a path outside is a clear 400. With `--sandbox off` any
//! path is taken (firecracker-containerd without its jailer swaps in `/dev/mapper/...`).
//! A leaf but for the allowed folders: paths in, a path or an error out.

use std::path::{Path, PathBuf};

/// The snapshot folders' check uses it too.
pub use crate::allowed_folders::normalize;
use crate::allowed_folders::AllowedFolders;

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
    /// The operator's folders; `None` with the sandbox off: any path is taken.
    allowed: Option<AllowedFolders>,
}

/// Why a path cannot replace a drive's file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapFolderError {
    /// The path lies outside the drive's folder.
    #[error(
        "{}: outside {}, the folder of the drive's configured file: a swapped-in file must lie \
         in that folder or beneath it, or in a folder the operator allows ({allowed}: \
         --allow-folder DIR, sandbox.allowed_folders) (docs/security.md)",
        path.display(),
        folder.display()
    )]
    Outside {
        /// The path as given.
        path: PathBuf,
        /// The drive's folder.
        folder: PathBuf,
        /// The operator's folders in words (`none`).
        allowed: String,
    },
    /// The drive's configured file is under `/dev` (or its folder could not be resolved).
    #[error(
        "{}: this drive takes no swapped-in file from its own folder: its configured file is a \
         device under /dev or its folder could not be resolved at start; the folders the \
         operator allows: {allowed} (--allow-folder DIR, sandbox.allowed_folders; \
         docs/security.md)",
        path.display()
    )]
    NoFolder {
        /// The path as given.
        path: PathBuf,
        /// The operator's folders in words (`none`).
        allowed: String,
    },
}

impl SwapFolder {
    /// The swap folder of a drive configured with `path`, resolved against the working
    /// directory now, with the operator's `allowed` folders (`None`: the sandbox is off, any
    /// path is taken).
    pub fn resolve(path: &Path, allowed: Option<AllowedFolders>) -> SwapFolder {
        let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let folder = rule_folder(path).and_then(|f| std::fs::canonicalize(base.join(f)).ok());
        SwapFolder {
            folder,
            base,
            allowed,
        }
    }

    /// Checks `path` (from a PATCH body) against the drive's folder, then the operator's;
    /// returns the absolute path to open: relative to the working directory at start, `.` and
    /// `..` resolved by name (a symlink that leads outside is left to Landlock, which refuses
    /// to open it). With the sandbox off, any path.
    pub fn check(&self, path: &Path) -> Result<PathBuf, SwapFolderError> {
        let full = normalize(&self.base.join(path));
        let Some(allowed) = &self.allowed else {
            return Ok(full);
        };
        if let Some(folder) = &self.folder {
            if full.starts_with(folder) && full != *folder {
                return Ok(full);
            }
        }
        if allowed.check(path).is_ok() {
            return Ok(full);
        }
        let path = path.to_path_buf();
        let allowed = allowed.describe();
        Err(match &self.folder {
            Some(folder) => SwapFolderError::Outside {
                path,
                folder: folder.clone(),
                allowed,
            },
            None => SwapFolderError::NoFolder { path, allowed },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(f: &str, base: &str) -> SwapFolder {
        SwapFolder {
            folder: Some(PathBuf::from(f)),
            base: PathBuf::from(base),
            allowed: Some(AllowedFolders::default()),
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
                base: "/".into(),
                allowed: Some(AllowedFolders::default()),
            }
            .check(Path::new("/dev/sdb")),
            Err(SwapFolderError::NoFolder { .. })
        ));
    }

    #[test]
    fn the_sandbox_off_takes_any_path_and_allowed_folders_widen_the_drives() {
        let off = SwapFolder {
            folder: Some("/jail/root".into()),
            base: "/jail/root".into(),
            allowed: None,
        };
        for (given, opened) in [
            ("/dev/null", "/dev/null"),
            ("/dev/mapper/stub1", "/dev/mapper/stub1"),
            ("../other/b.img", "/jail/other/b.img"),
        ] {
            assert_eq!(off.check(Path::new(given)), Ok(PathBuf::from(opened)));
        }
        let dir = std::env::temp_dir().join(format!("osprey-swapallow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let allowed = crate::allowed_folders::AllowedFolders::resolve(
            &crate::allowed_folders::with_socket_folder(None, std::slice::from_ref(&dir)),
        );
        let on = SwapFolder {
            folder: Some("/jail/root".into()),
            base: "/jail/root".into(),
            allowed: Some(allowed),
        };
        assert_eq!(on.check(&dir.join("b.img")), Ok(dir.join("b.img")));
        assert!(on.check(Path::new("/jail/root/c.img")).is_ok());
        let e = on.check(Path::new("/dev/null")).expect_err("refused");
        assert!(
            e.to_string()
                .contains(&format!("{} (--allow-folder)", dir.display())),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rule_folders_are_the_drive_files_folders_except_devices() {
        assert_eq!(rule_folder(Path::new("/d/a.img")), Some(Path::new("/d")));
        assert_eq!(rule_folder(Path::new("a.img")), Some(Path::new(".")));
        assert_eq!(rule_folder(Path::new("/dev/mapper/x")), None);
        assert_eq!(rule_folder(Path::new("/dev/sdb")), None);
    }
}
