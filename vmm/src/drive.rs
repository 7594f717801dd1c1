//! Opening a drive's backing file as the config asks (read-only or read-write, O_DIRECT or not)
//! and sizing it: the capacity is the file size in whole 512-byte sectors.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

use crate::config::{ConfigError, DriveConfig};

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

/// Opens `drive` (the `index`-th in the config); errors name the field.
pub fn open(drive: &DriveConfig, index: usize) -> Result<OpenedDrive, ConfigError> {
    let field = format!("drives[{index}].path_on_host");
    let path = &drive.path_on_host;
    let mut opts = OpenOptions::new();
    opts.read(true).write(!drive.is_read_only);
    if drive.direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    let mut file = opts.open(path).map_err(|e| {
        let hint = if drive.direct && e.raw_os_error() == Some(libc::EINVAL) {
            " (the file system does not support O_DIRECT; set \"direct\": false)"
        } else {
            ""
        };
        ConfigError::Invalid {
            field: field.clone(),
            reason: format!("{}: {e}{hint}", path.display()),
        }
    })?;
    let meta = file.metadata().map_err(|e| ConfigError::Invalid {
        field: field.clone(),
        reason: format!("{}: {e}", path.display()),
    })?;
    if meta.is_dir() {
        return Err(ConfigError::Invalid {
            field,
            reason: format!("{}: is a directory", path.display()),
        });
    }
    // Seeking to the end sizes regular files and block devices alike.
    let size = file
        .seek(SeekFrom::End(0))
        .map_err(|e| ConfigError::Invalid {
            field: field.clone(),
            reason: format!("{}: {e}", path.display()),
        })?;
    if size < 512 {
        return Err(ConfigError::Invalid {
            field,
            reason: format!(
                "{}: {size} bytes is smaller than one 512-byte sector",
                path.display()
            ),
        });
    }
    Ok(OpenedDrive {
        file,
        capacity_sectors: size / 512,
        ignored_tail: size % 512,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(path: &std::path::Path) -> DriveConfig {
        serde_json::from_value(serde_json::json!({"drive_id": "d", "path_on_host": path}))
            .expect("drive")
    }

    #[test]
    fn sizes_and_rounds_down() {
        let p = std::env::temp_dir().join(format!("osprey-drive-{}", std::process::id()));
        std::fs::write(&p, vec![0u8; 4096 + 100]).expect("write");
        let d = open(&drive(&p), 0).expect("open");
        assert_eq!((d.capacity_sectors, d.ignored_tail), (8, 100));
        std::fs::write(&p, vec![0u8; 100]).expect("write");
        let e = open(&drive(&p), 3).expect_err("too small");
        assert!(e.to_string().starts_with("drives[3].path_on_host: "), "{e}");
        assert!(
            e.to_string()
                .ends_with("100 bytes is smaller than one 512-byte sector"),
            "{e}"
        );
        std::fs::remove_file(&p).ok();
        let e = open(&drive(&p), 0).expect_err("missing");
        assert!(e.to_string().contains("No such file or directory"), "{e}");
    }
}
