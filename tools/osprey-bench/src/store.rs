//! The backing store every point (and fio) runs on, created before the matrix and removed after
//! it: a loop device with direct I/O over a /dev/shm file (RAM standing in for a fast NVMe
//! drive; needs root), or a regular file in a directory (O_DIRECT when the file system allows).
//! Both are filled with pseudo-random data so reads touch real blocks.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use crate::units::format_bytes;

/// The store could not be set up.
#[derive(Debug, Error)]
pub enum StoreError {
    /// losetup and zram need root.
    #[error(
        "--store loop and --store zram need root (losetup, /sys/block/zram0); run as root, or \
         use --store file|buffered|buffered-cold [--store-dir DIR]"
    )]
    NotRoot,
    /// zram is missing or busy.
    #[error("--store zram: {0}")]
    Zram(String),
    /// A file operation failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// losetup failed.
    #[error("losetup failed: {0}")]
    Losetup(String),
}

/// Which kind of store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// A loop device with direct I/O over a file in /dev/shm.
    Loop,
    /// A regular file in `--store-dir` (O_DIRECT when the file system allows; on /dev/shm it
    /// cannot: tmpfs).
    File,
    /// A regular file in `--store-dir` through the page cache, hot (read once after filling).
    Buffered,
    /// Like `buffered`, with the file's pages dropped from the cache (posix_fadvise DONTNEED)
    /// before every recorded run.
    BufferedCold,
    /// /dev/zram0 (a compressed RAM block device that completes in the submitter's context),
    /// configured for the run and reset afterwards; needs root and an unused zram0.
    Zram,
}

/// A live store; dropping it removes it.
#[derive(Debug)]
pub struct Store {
    /// The kind.
    pub kind: StoreKind,
    /// What Osprey and fio open.
    pub path: PathBuf,
    /// The backing file.
    pub backing: PathBuf,
    /// Open with O_DIRECT.
    pub direct: bool,
    /// Drop the file's pages from the page cache before every recorded run.
    pub cold: bool,
    /// Bytes.
    pub size: u64,
    loop_attached: bool,
}

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { what, path, source }
}

/// Writes `size` bytes of xorshift data to `path` and syncs it.
fn fill(path: &Path, size: u64) -> Result<(), StoreError> {
    let mut f = File::create(path).map_err(io("Cannot create", path))?;
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

/// Writes `size` bytes of xorshift data over the block device at `path`.
fn fill_device(path: &Path, size: u64) -> Result<(), StoreError> {
    let tmp = std::env::temp_dir().join(format!("osprey-bench-zram-{}", std::process::id()));
    fill(&tmp, size.min(64 << 20))?;
    let chunk = std::fs::read(&tmp).map_err(io("Cannot read", &tmp))?;
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io("Cannot open", path))?;
    let mut left = size;
    while left > 0 {
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
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if rc != 0 {
        return Err(StoreError::Io {
            what: "Cannot drop the page cache of",
            path: path.to_path_buf(),
            source: std::io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

/// Whether `path` opens with O_DIRECT.
fn supports_direct(path: &Path) -> bool {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .is_ok()
}

impl Store {
    /// Creates a store of `size` bytes (`dir` is used by `File`).
    pub fn create(kind: StoreKind, dir: &Path, size: u64) -> Result<Store, StoreError> {
        let name = format!("osprey-bench-{}.img", std::process::id());
        match kind {
            StoreKind::Loop => {
                if !is_root() {
                    return Err(StoreError::NotRoot);
                }
                let backing = Path::new("/dev/shm").join(name);
                fill(&backing, size)?;
                let out = Command::new("losetup")
                    .args(["--direct-io=on", "-f", "--show"])
                    .arg(&backing)
                    .output();
                let dev = match out {
                    Ok(o) if o.status.success() => {
                        String::from_utf8_lossy(&o.stdout).trim().to_string()
                    }
                    Ok(o) => {
                        let _ = std::fs::remove_file(&backing);
                        return Err(StoreError::Losetup(
                            String::from_utf8_lossy(&o.stderr).trim().to_string(),
                        ));
                    }
                    Err(e) => {
                        let _ = std::fs::remove_file(&backing);
                        return Err(StoreError::Losetup(e.to_string()));
                    }
                };
                Ok(Store {
                    kind,
                    path: PathBuf::from(dev),
                    backing,
                    direct: true,
                    cold: false,
                    size,
                    loop_attached: true,
                })
            }
            StoreKind::File => {
                std::fs::create_dir_all(dir).map_err(io("Cannot create", dir))?;
                let backing = dir.join(name);
                fill(&backing, size)?;
                let direct = supports_direct(&backing);
                Ok(Store {
                    kind,
                    path: backing.clone(),
                    backing,
                    direct,
                    cold: false,
                    size,
                    loop_attached: false,
                })
            }
            StoreKind::Buffered | StoreKind::BufferedCold => {
                std::fs::create_dir_all(dir).map_err(io("Cannot create", dir))?;
                let backing = dir.join(name);
                fill(&backing, size)?;
                // Hot: read it once so its pages are in the cache.
                let mut f = File::open(&backing).map_err(io("Cannot open", &backing))?;
                std::io::copy(&mut f, &mut std::io::sink()).map_err(io("Cannot read", &backing))?;
                Ok(Store {
                    kind,
                    path: backing.clone(),
                    backing,
                    direct: false,
                    cold: kind == StoreKind::BufferedCold,
                    size,
                    loop_attached: false,
                })
            }
            StoreKind::Zram => {
                if !is_root() {
                    return Err(StoreError::NotRoot);
                }
                let sys = Path::new("/sys/block/zram0");
                let disksize = std::fs::read_to_string(sys.join("disksize")).map_err(|_| {
                    StoreError::Zram("the kernel has no /dev/zram0 (zram module not loaded)".into())
                })?;
                if disksize.trim() != "0" {
                    return Err(StoreError::Zram(format!(
                        "/dev/zram0 is in use (disksize {}); reset it first",
                        disksize.trim()
                    )));
                }
                std::fs::write(sys.join("disksize"), size.to_string())
                    .map_err(io("Cannot size", &sys.join("disksize")))?;
                let dev = PathBuf::from("/dev/zram0");
                let store = Store {
                    kind,
                    path: dev.clone(),
                    backing: dev.clone(),
                    direct: true,
                    cold: false,
                    size,
                    loop_attached: false,
                };
                fill_device(&dev, size)?;
                Ok(store)
            }
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        match self.kind {
            StoreKind::Loop => format!(
                "loop device {} (direct-io over {}, {} of pseudo-random data)",
                self.path.display(),
                self.backing.display(),
                format_bytes(self.size)
            ),
            StoreKind::Buffered | StoreKind::BufferedCold => format!(
                "file {} ({} of pseudo-random data, page cache, {})",
                self.path.display(),
                format_bytes(self.size),
                if self.cold {
                    "dropped from the cache before every run"
                } else {
                    "hot"
                }
            ),
            StoreKind::Zram => format!(
                "zram block device {} ({} of pseudo-random data, O_DIRECT)",
                self.path.display(),
                format_bytes(self.size)
            ),
            StoreKind::File => format!(
                "file {} ({} of pseudo-random data, {})",
                self.path.display(),
                format_bytes(self.size),
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
        if self.loop_attached {
            match Command::new("losetup").arg("-d").arg(&self.path).output() {
                Ok(o) if o.status.success() => {}
                _ => eprintln!(
                    "osprey-bench: warning: could not detach {}; run `losetup -d {}`",
                    self.path.display(),
                    self.path.display()
                ),
            }
        }
        if let Err(e) = std::fs::remove_file(&self.backing) {
            eprintln!(
                "osprey-bench: warning: could not remove {}: {e}",
                self.backing.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_store_is_filled_and_removed() {
        let dir = std::env::temp_dir().join(format!("osprey-bench-store-{}", std::process::id()));
        let store = Store::create(StoreKind::File, &dir, 3 << 20).expect("create");
        let meta = std::fs::metadata(&store.path).expect("stat");
        assert_eq!(meta.len(), 3 << 20);
        let head = std::fs::read(&store.path).expect("read");
        assert!(head.iter().take(4096).any(|&b| b != 0));
        let path = store.path.clone();
        assert!(store.describe().contains("3 MiB"));
        drop(store);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }
}
