//! Opening a drive's backing file as the config asks (read-only or read-write, O_DIRECT or not;
//! O_NOATIME where allowed) and sizing it: the capacity is the file size in whole 512-byte
//! sectors. Start-up's preflight and a live swap (`PATCH /drives/{id}` with `path_on_host`)
//! both open drives here.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A drive's backing file, opened and sized.
#[derive(Debug)]
pub struct OpenedDrive {
    /// The file.
    pub file: File,
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Bytes past the last whole sector that the guest cannot see (0 when the size is aligned).
    pub ignored_tail: u64,
}

/// Why a backing file cannot be a drive; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum DriveOpenError {
    /// Opening, inspecting or sizing the file failed.
    #[error("{}: {source}{}", path.display(), direct_hint(*direct, source))]
    Io {
        /// The file.
        path: PathBuf,
        /// Whether it was opened with O_DIRECT (an EINVAL then gets a hint).
        direct: bool,
        /// The OS error.
        source: std::io::Error,
    },
    /// It is a directory.
    #[error("{}: is a directory", path.display())]
    Directory {
        /// The path.
        path: PathBuf,
    },
    /// It is neither a regular file nor a block device (a FIFO, a socket, a character device).
    #[error("{}: is not a regular file or a block device", path.display())]
    NotFileOrDevice {
        /// The path.
        path: PathBuf,
    },
}

fn direct_hint(direct: bool, e: &std::io::Error) -> &'static str {
    if direct && e.raw_os_error() == Some(libc::EINVAL) {
        " (the file system does not support O_DIRECT; set \"direct\": false)"
    } else {
        ""
    }
}

impl OpenedDrive {
    /// The warning for a size that is not a whole number of sectors (`None` when it is).
    pub fn tail_warning(&self, path: &Path) -> Option<String> {
        (self.ignored_tail != 0).then(|| {
            format!(
                "{}: {} bytes is not a multiple of 512: the guest sees {} bytes, the last {} are \
                 not visible to it",
                path.display(),
                self.capacity_sectors * 512 + self.ignored_tail,
                self.capacity_sectors * 512,
                self.ignored_tail
            )
        })
    }
}

/// Opens a drive's backing file (read-only or read-write, with O_DIRECT or not) and sizes it.
/// The kind is checked before the open (a FIFO would block it).
pub fn open(path: &Path, read_only: bool, direct: bool) -> Result<OpenedDrive, DriveOpenError> {
    use std::os::unix::fs::FileTypeExt;
    let io = |direct: bool| {
        move |source| DriveOpenError::Io {
            path: path.to_path_buf(),
            direct,
            source,
        }
    };
    let kind = std::fs::metadata(path).map_err(io(false))?.file_type();
    if kind.is_dir() {
        return Err(DriveOpenError::Directory {
            path: path.to_path_buf(),
        });
    }
    if !kind.is_file() && !kind.is_block_device() {
        return Err(DriveOpenError::NotFileOrDevice {
            path: path.to_path_buf(),
        });
    }
    let direct_flag = if direct { libc::O_DIRECT } else { 0 };
    let open_with = |flags: i32| {
        OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(flags)
            .open(path)
    };
    // O_NOATIME: a guest's reads do not touch the image's access time, which spares the kernel
    // an access-time check on every read. Only the file's owner (or CAP_FOWNER) may ask for it;
    // anyone else opens without it.
    let mut file = match open_with(direct_flag | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open_with(direct_flag),
        other => other,
    }
    .map_err(io(direct))?;
    if file.metadata().map_err(io(false))?.is_dir() {
        return Err(DriveOpenError::Directory {
            path: path.to_path_buf(),
        });
    }
    // Seeking to the end sizes regular files and block devices alike. A file of less than a
    // sector is a drive of capacity 0, as in Firecracker: orchestrators put zero-byte
    // placeholders in a VM and swap a device behind them later (docs/orchestration.md); the
    // guest's requests to an empty drive fail its bounds check.
    let size = file.seek(SeekFrom::End(0)).map_err(io(false))?;
    Ok(OpenedDrive {
        file,
        capacity_sectors: size / 512,
        ignored_tail: size % 512,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rounds_down() {
        let p = std::env::temp_dir().join(format!("osprey-drive-{}", std::process::id()));
        std::fs::write(&p, vec![0u8; 4096 + 100]).expect("write");
        let d = open(&p, false, false).expect("open");
        assert_eq!((d.capacity_sectors, d.ignored_tail), (8, 100));
        std::fs::write(&p, vec![0u8; 100]).expect("write");
        let d = open(&p, false, false).expect("less than a sector");
        assert_eq!((d.capacity_sectors, d.ignored_tail), (0, 100));
        std::fs::write(&p, []).expect("write");
        let d = open(&p, false, false).expect("a zero-byte placeholder");
        assert_eq!((d.capacity_sectors, d.ignored_tail), (0, 0));
        std::fs::remove_file(&p).ok();
        let e = open(&p, false, false).expect_err("missing");
        assert!(e.to_string().contains("No such file or directory"), "{e}");
        let e = open(Path::new("/dev/null"), true, false).expect_err("a character device");
        assert_eq!(
            e.to_string(),
            "/dev/null: is not a regular file or a block device"
        );
        let e = open(&std::env::temp_dir(), true, false).expect_err("a folder");
        assert!(e.to_string().ends_with(": is a directory"), "{e}");
    }
}
