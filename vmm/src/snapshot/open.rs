//! Opening a snapshot's files without trusting what the path names: never blocking (a FIFO at
//! the path must not hang the thread that opens it: `O_NONBLOCK`), and a file that is not
//! regular refused by its kind ([`NotRegular`]) before a byte is read.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a path holds when it is not a regular file, in words for messages: "a FIFO", "a
/// directory", "a symlink"...
pub fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symlink"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else {
        "a regular file"
    }
}

/// The path holds something other than a regular file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a regular file ({0})")]
pub struct NotRegular(pub &'static str);

impl From<NotRegular> for std::io::Error {
    fn from(e: NotRegular) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// Opens `path` for reading without blocking (`O_NONBLOCK`: opening a FIFO returns at once) and
/// refuses it unless it is a regular file (or, with `block_devices`, a block device: a drive).
pub fn open_for_reading(path: &Path, block_devices: bool) -> std::io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if t.is_file() || (block_devices && t.is_block_device()) {
        Ok(f)
    } else {
        Err(NotRegular(kind(t)).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once_and_a_file_is_opened() {
        let dir = std::env::temp_dir().join(format!("osprey-snap-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t0 = std::time::Instant::now();
        let e = open_for_reading(&fifo, true).expect_err("a FIFO");
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        let e = open_for_reading(&dir, false).expect_err("a directory");
        assert!(e.to_string().contains("a directory"), "{e}");
        std::fs::write(dir.join("f"), b"x").expect("file");
        open_for_reading(&dir.join("f"), false).expect("a regular file");
        std::fs::remove_dir_all(&dir).ok();
    }
}
