//! The backing store every point (and fio) runs on, created before the matrix and torn down after
//! it: a loop device with direct I/O over a /dev/shm file, a regular file (O_DIRECT when the file
//! system allows, or through the page cache, hot or cold), or /dev/zram0. Each is filled with
//! pseudo-random data so reads touch real blocks.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::ValueEnum;
use thiserror::Error;

use crate::units::format_bytes;

/// The store could not be set up.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error(
        "--store loop and --store zram need root (losetup, /sys/block/zram0); run as root, or \
         use --store file|buffered|buffered-cold [--store-dir DIR]"
    )]
    NotRoot,
    #[error("--store zram: {0}")]
    Zram(String),
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("losetup failed: {0}")]
    Losetup(String),
}

/// Which kind of store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// A loop device with direct I/O over a file in /dev/shm (needs root).
    Loop,
    /// A regular file in `--store-dir` (O_DIRECT when the file system allows; tmpfs does not).
    File,
    /// A regular file in `--store-dir` through the page cache, hot (read once after filling).
    Buffered,
    /// Like `buffered`, its pages dropped from the cache before every recorded run.
    BufferedCold,
    /// /dev/zram0, sized for the run and reset afterwards (needs root and an unused zram0).
    Zram,
}

crate::matrix::display_value_name!(StoreKind);

/// A live store; dropping it tears it down.
#[derive(Debug)]
pub struct Store {
    pub kind: StoreKind,
    /// What Osprey and fio open.
    pub path: PathBuf,
    /// The file behind a loop device (else `path`).
    pub backing: PathBuf,
    /// Open with O_DIRECT.
    pub direct: bool,
    /// Drop the store's pages from the page cache before every recorded run.
    pub cold: bool,
    pub size: u64,
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { what, path, source }
}

/// Writes and syncs `size` bytes of xorshift data over `path` (a new file or an existing device).
fn fill(path: &Path, size: u64, create: bool) -> Result<(), StoreError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(create)
        .truncate(create)
        .open(path)
        .map_err(io("Cannot create", path))?;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).map_err(io("Cannot write", path))?;
        left -= n as u64;
    }
    f.sync_all().map_err(io("Cannot sync", path))
}

/// Drops `path`'s pages from the page cache (a cold store for the next run).
pub fn drop_cache(path: &Path) -> Result<(), StoreError> {
    let f = File::open(path).map_err(io("Cannot open", path))?;
    f.sync_all().map_err(io("Cannot sync", path))?;
    // SAFETY: posix_fadvise on an fd we own, with in-range arguments, has no memory effects.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io("Cannot drop the page cache of", path)(
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

impl Store {
    /// Creates a store of `size` bytes (`dir` holds the file kinds' file).
    pub fn create(kind: StoreKind, dir: &Path, size: u64) -> Result<Store, StoreError> {
        let name = format!("osprey-bench-{}.img", std::process::id());
        let file = |backing: PathBuf, direct: bool, cold: bool| Store {
            kind,
            path: backing.clone(),
            backing,
            direct,
            cold,
            size,
        };
        if matches!(kind, StoreKind::Loop | StoreKind::Zram) && !is_root() {
            return Err(StoreError::NotRoot);
        }
        match kind {
            StoreKind::Loop => {
                let backing = Path::new("/dev/shm").join(name);
                fill(&backing, size, true)?;
                let mut losetup = Command::new("losetup");
                let out = losetup
                    .args(["--direct-io=on", "-f", "--show"])
                    .arg(&backing);
                let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
                match out.output() {
                    Ok(o) if o.status.success() => {
                        let mut store = file(backing, true, false);
                        store.path = text(&o.stdout).into();
                        Ok(store)
                    }
                    failed => {
                        let _ = std::fs::remove_file(&backing);
                        let e = failed.map_or_else(|e| e.to_string(), |o| text(&o.stderr));
                        Err(StoreError::Losetup(e))
                    }
                }
            }
            StoreKind::File | StoreKind::Buffered | StoreKind::BufferedCold => {
                std::fs::create_dir_all(dir).map_err(io("Cannot create", dir))?;
                let backing = dir.join(name);
                fill(&backing, size, true)?;
                if kind == StoreKind::File {
                    let direct = OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(&backing)
                        .is_ok();
                    return Ok(file(backing, direct, false));
                }
                // Hot: read it once so its pages are in the cache.
                let mut f = File::open(&backing).map_err(io("Cannot open", &backing))?;
                std::io::copy(&mut f, &mut std::io::sink()).map_err(io("Cannot read", &backing))?;
                Ok(file(backing, false, kind == StoreKind::BufferedCold))
            }
            StoreKind::Zram => {
                let disksize = Path::new("/sys/block/zram0/disksize");
                let current = std::fs::read_to_string(disksize).map_err(|_| {
                    StoreError::Zram("the kernel has no /dev/zram0 (zram module not loaded)".into())
                })?;
                if current.trim() != "0" {
                    return Err(StoreError::Zram(format!(
                        "/dev/zram0 is in use (disksize {}); reset it first",
                        current.trim()
                    )));
                }
                std::fs::write(disksize, size.to_string()).map_err(io("Cannot size", disksize))?;
                // From here on, dropping the store resets zram0.
                let store = file(PathBuf::from("/dev/zram0"), true, false);
                fill(&store.path, size, false)?;
                Ok(store)
            }
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let (path, size) = (self.path.display(), format_bytes(self.size));
        match self.kind {
            StoreKind::Loop => format!(
                "loop device {path} (direct-io over {}, {size} of pseudo-random data)",
                self.backing.display()
            ),
            StoreKind::Buffered | StoreKind::BufferedCold => format!(
                "file {path} ({size} of pseudo-random data, page cache, {})",
                if self.cold {
                    "dropped from the cache before every run"
                } else {
                    "hot"
                }
            ),
            StoreKind::Zram => {
                format!("zram block device {path} ({size} of pseudo-random data, O_DIRECT)")
            }
            StoreKind::File => format!(
                "file {path} ({size} of pseudo-random data, {})",
                if self.direct {
                    "O_DIRECT"
                } else {
                    "page cache: the file system refuses O_DIRECT"
                }
            ),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.kind == StoreKind::Zram {
            if let Err(e) = std::fs::write("/sys/block/zram0/reset", "1") {
                eprintln!("osprey-bench: warning: could not reset /dev/zram0: {e}");
            }
            return;
        }
        if self.kind == StoreKind::Loop {
            let detached = Command::new("losetup").arg("-d").arg(&self.path).output();
            if !detached.is_ok_and(|o| o.status.success()) {
                let dev = self.path.display();
                eprintln!("osprey-bench: warning: could not detach {dev}; run `losetup -d {dev}`");
            }
        }
        if let Err(e) = std::fs::remove_file(&self.backing) {
            let path = self.backing.display();
            eprintln!("osprey-bench: warning: could not remove {path}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stores_are_filled_and_removed() {
        let dir = std::env::temp_dir().join(format!("osprey-bench-store-{}", std::process::id()));
        for kind in [StoreKind::File, StoreKind::BufferedCold] {
            let store = Store::create(kind, &dir, 3 << 20).expect("create");
            let data = std::fs::read(&store.path).expect("read");
            assert_eq!(data.len(), 3 << 20);
            assert!(data.iter().take(4096).any(|&b| b != 0));
            assert!(store.describe().contains("3 MiB"), "{}", store.describe());
            assert_eq!(store.cold, kind == StoreKind::BufferedCold);
            drop_cache(&store.path).expect("drop cache");
            let path = store.path.clone();
            drop(store);
            assert!(!path.exists());
        }
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(StoreKind::BufferedCold.to_string(), "buffered-cold");
    }
}
