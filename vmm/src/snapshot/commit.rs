//! Where a create writes its two files, and how it puts them in place so that a crash (SIGKILL,
//! power loss) at any moment leaves the folder with the old snapshot whole or the new one
//! whole (docs/snapshot.md, "Crash consistency").
//!
//! Names, for `snapshot_path` S and `mem_file_path` M: each is written as `X.partial`, synced,
//! and renamed to `X.tmp` (so an `X.tmp` is always complete), M first; then `M.tmp` is renamed
//! to M (the commit point), then `S.tmp` to S, each folder synced after its renames. So:
//!
//! | the folder holds | the create stopped | the snapshot there |
//! |---|---|---|
//! | `M.tmp` (and maybe `S.tmp`) | before the commit point | the old M and S, whole |
//! | `S.tmp`, no `M.tmp` | between the two renames | the new M with `S.tmp` (a load rolls forward to it) |
//! | neither | before staging, or after the last rename | M and S, a pair |
//!
//! Before it writes, a create runs the same table ([`Targets::recover`]): it finishes the
//! rename an earlier create left undone, or removes what that create left (`S.tmp` before
//! `M.tmp`, so a crash during the clean-up leaves a row of the table), without reading either
//! file (the sandbox lets the control thread create, write, rename and remove files in a
//! snapshot folder, not read them). The memory file's trailer and the state file carry the
//! same id (`mem_file.rs`), so a loader pairs them by content, not by these names alone.
//!
//! The checks ([`Targets::check`]): no name (the two paths and their temporaries) may be the
//! same as another, nor hold anything but a regular file, nor be a file the VM uses, compared by
//! device and inode ([`Protected`]): a rename over a drive's name would leave the VM running on
//! an unlinked disk, gone at exit.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::open::kind;

/// A file the VM uses, which no snapshot file may replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    /// In words: "drive disk0's file", "the kernel", "the API socket".
    pub what: String,
    /// Device and inode.
    pub id: (u64, u64),
}

impl Protected {
    /// `path`'s file (through symlinks) as `what`, or `None` when there is none.
    pub fn of_path(what: String, path: &Path) -> Option<Protected> {
        let m = std::fs::metadata(path).ok()?;
        Some(Protected {
            what: format!("{what} ({})", path.display()),
            id: (m.dev(), m.ino()),
        })
    }

    /// The file open as `fd` (standard input, output or error) as `what`.
    pub fn of_fd(what: &str, fd: std::os::fd::BorrowedFd<'_>) -> Option<Protected> {
        let f = File::from(fd.try_clone_to_owned().ok()?);
        let m = f.metadata().ok()?;
        m.file_type().is_file().then(|| Protected {
            what: what.to_string(),
            id: (m.dev(), m.ino()),
        })
    }
}

/// Why the files cannot be written where asked.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Two of the names are the same (or the same file).
    #[error("{field}: {}: the same file as {other}", path.display())]
    Same {
        /// `snapshot_path` or `mem_file_path`.
        field: &'static str,
        /// The name.
        path: PathBuf,
        /// The other name, in words.
        other: String,
    },
    /// A name holds a file the VM uses.
    #[error("{field}: {}: would replace {what}; a snapshot never replaces a file the VM uses", path.display())]
    Clobber {
        /// `snapshot_path` or `mem_file_path`.
        field: &'static str,
        /// The name (the path, or its temporary).
        path: PathBuf,
        /// The file, in words.
        what: String,
    },
    /// A name holds something that is not a regular file.
    #[error("{field}: {}: not a regular file ({kind}); a snapshot writes and replaces regular files only", path.display())]
    NotRegular {
        /// `snapshot_path` or `mem_file_path`.
        field: &'static str,
        /// The name.
        path: PathBuf,
        /// What it holds.
        kind: &'static str,
    },
    /// A file system call failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Which of the two files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// `snapshot_path`.
    State,
    /// `mem_file_path`.
    Memory,
}

/// The two paths of a create, checked, with their temporaries.
#[derive(Debug, Clone)]
pub struct Targets {
    state: PathBuf,
    mem: PathBuf,
}

/// `path` with `suffix` appended to its file name.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The temporary a complete file waits under before its rename (`X.tmp`): the name a load
/// rolls forward from (`restore.rs`).
pub fn staged(path: &Path) -> PathBuf {
    suffixed(path, ".tmp")
}

fn partial(path: &Path) -> PathBuf {
    suffixed(path, ".partial")
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TargetError + '_ {
    move |source| TargetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `path` exists (without following a symlink there).
fn exists(path: &Path) -> Result<bool, TargetError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

/// Syncs the folder that holds `path` (its entries: a rename there is on disk afterwards).
fn sync_folder(path: &Path) -> Result<(), TargetError> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(folder)
        .map_err(io(folder))?;
    f.sync_all().map_err(io(folder))
}

fn rename(from: &Path, to: &Path) -> Result<(), TargetError> {
    std::fs::rename(from, to).map_err(io(to))
}

fn remove(path: &Path) -> Result<(), TargetError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
        _ => Ok(()),
    }
}

impl Targets {
    /// Checks the names `state` and `mem` (and their temporaries): all different, each absent
    /// or a regular file, none a file the VM uses (`protected`) nor the same file as another.
    pub fn check(
        state: &Path,
        mem: &Path,
        protected: &[Protected],
    ) -> Result<Targets, TargetError> {
        let names = |field: &'static str, p: &Path| {
            [
                (field, p.to_path_buf()),
                (field, staged(p)),
                (field, partial(p)),
            ]
        };
        let mut all: Vec<(&'static str, PathBuf)> = names("snapshot_path", state).into();
        all.extend(names("mem_file_path", mem));
        let mut seen: Vec<(PathBuf, Option<(u64, u64)>)> = Vec::new();
        for (field, path) in &all {
            let m = match std::fs::symlink_metadata(path) {
                Ok(m) => Some(m),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(path)(e)),
            };
            let id = m.as_ref().map(|m| (m.dev(), m.ino()));
            if let Some(p) = id.and_then(|id| protected.iter().find(|p| p.id == id)) {
                return Err(TargetError::Clobber {
                    field,
                    path: path.clone(),
                    what: p.what.clone(),
                });
            }
            if let Some((other, _)) = seen
                .iter()
                .find(|(n, i)| n == path || (id.is_some() && *i == id))
            {
                return Err(TargetError::Same {
                    field,
                    path: path.clone(),
                    other: format!(
                        "{} (snapshot_path, mem_file_path or a temporary of one: docs/snapshot.md)",
                        other.display()
                    ),
                });
            }
            if let Some(m) = &m {
                if !m.file_type().is_file() {
                    return Err(TargetError::NotRegular {
                        field,
                        path: path.clone(),
                        kind: kind(m.file_type()),
                    });
                }
            }
            seen.push((path.clone(), id));
        }
        Ok(Targets {
            state: state.to_path_buf(),
            mem: mem.to_path_buf(),
        })
    }

    fn path(&self, which: Which) -> &Path {
        match which {
            Which::State => &self.state,
            Which::Memory => &self.mem,
        }
    }

    /// Finishes or undoes what an earlier, interrupted create left (the table in the module
    /// doc), and removes its partial files.
    pub fn recover(&self) -> Result<(), TargetError> {
        let (state_tmp, mem_tmp) = (staged(&self.state), staged(&self.mem));
        match (exists(&mem_tmp)?, exists(&state_tmp)?) {
            (false, true) => {
                // The memory file was renamed into place: the state file's rename is owed.
                log::warn!(
                    "snapshot: {} left by an interrupted create; renamed into place",
                    state_tmp.display()
                );
                rename(&state_tmp, &self.state)?;
                sync_folder(&self.state)?;
            }
            (true, _) => {
                // Before the commit point: the old pair stands. The state's temporary goes
                // first (a crash in between leaves `M.tmp` alone: the same row).
                remove(&state_tmp)?;
                remove(&mem_tmp)?;
            }
            (false, false) => {}
        }
        remove(&partial(&self.state))?;
        remove(&partial(&self.mem))
    }

    /// Creates `which`'s partial file (new, `0600`, never through a symlink nor blocking).
    pub fn create(&self, which: Which) -> Result<File, TargetError> {
        let p = partial(self.path(which));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&p)
            .map_err(io(&p))
    }

    /// Syncs `which`'s partial file `f` and renames it to its temporary (complete from then).
    pub fn stage(&self, which: Which, mut f: File) -> Result<(), TargetError> {
        let p = partial(self.path(which));
        f.flush().map_err(io(&p))?;
        f.sync_all().map_err(io(&p))?;
        drop(f);
        rename(&p, &staged(self.path(which)))
    }

    /// Puts both staged files in place: the folders synced (the temporaries' names on disk),
    /// the memory file renamed (the commit point), then the state file.
    pub fn commit(&self) -> Result<(), TargetError> {
        sync_folder(&self.mem)?;
        sync_folder(&self.state)?;
        rename(&staged(&self.mem), &self.mem)?;
        sync_folder(&self.mem)?;
        rename(&staged(&self.state), &self.state)?;
        sync_folder(&self.state)
    }

    /// Removes what a create that failed before its commit point wrote (the old pair stands).
    pub fn abandon(&self) {
        for p in [
            partial(&self.state),
            partial(&self.mem),
            staged(&self.state),
            staged(&self.mem),
        ] {
            if let Err(e) = remove(&p) {
                log::warn!("snapshot: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
