//! The state file: a fixed header, then [`SnapshotState`] in postcard (serde's compact binary
//! format). Every check runs before the body is trusted, so a bad file is refused with a clear
//! error before a restore builds anything.
//!
//! Layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `OSPREYSN` |
//! | 8..12 | format version ([`FORMAT_VERSION`]) |
//! | 12..20 | body length |
//! | 20..24 | CRC-32 (IEEE) of the body |
//! | 24.. | body: postcard of [`SnapshotState`], its first field the writer's Osprey version |
//!
//! Compatibility rule: a file is read only by the Osprey version that wrote it (the same
//! `CARGO_PKG_VERSION` and the same format version). The format version is checked first, so a
//! file of another layout is named as such rather than failing to decode.

use std::path::{Path, PathBuf};

use super::state::SnapshotState;

/// The file's first bytes.
pub const MAGIC: [u8; 8] = *b"OSPREYSN";
/// The layout of the header and body this build writes and reads.
pub const FORMAT_VERSION: u32 = 5;
/// The Osprey version this build writes and accepts.
pub const OSPREY_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Header length in bytes.
pub const HEADER_LEN: usize = 24;
/// The largest state file read (its body is registers and device state, a few hundred KiB for
/// the largest VM; guest memory is a file of its own).
pub const MAX_FILE_LEN: u64 = 64 << 20;

/// Why a state file was refused (or could not be written).
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// Reading or writing the file failed.
    #[error("snapshot file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Larger than any state file.
    #[error("snapshot file {}: {len} bytes is larger than a state file can be ({MAX_FILE_LEN})", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// Shorter than the header.
    #[error("not an Osprey snapshot: {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    ShortHeader {
        /// The length found.
        len: usize,
    },
    /// The magic bytes are wrong.
    #[error("not an Osprey snapshot (its first bytes are not \"OSPREYSN\")")]
    BadMagic,
    /// Another layout.
    #[error("snapshot format version {found}; this Osprey ({OSPREY_VERSION}) reads version {FORMAT_VERSION}")]
    FormatVersion {
        /// The file's.
        found: u32,
    },
    /// The body is shorter or longer than the header says.
    #[error(
        "snapshot truncated or padded: the header says {expected} body bytes, the file has {found}"
    )]
    BodyLength {
        /// The header's length.
        expected: u64,
        /// The bytes after the header.
        found: u64,
    },
    /// The body's checksum does not match.
    #[error("snapshot corrupted: body CRC-32 {computed:#010x}, the header says {stored:#010x}")]
    Checksum {
        /// The header's.
        stored: u32,
        /// The body's.
        computed: u32,
    },
    /// Written by another Osprey version.
    #[error("snapshot written by Osprey {found}; this is Osprey {OSPREY_VERSION} (a snapshot is restored by the version that took it)")]
    OspreyVersion {
        /// The writer's version.
        found: String,
    },
    /// The body does not decode (with a correct checksum: a writer's bug).
    #[error("snapshot body does not decode: {0}")]
    Body(postcard::Error),
}

/// The whole file for `state`.
pub fn encode(state: &SnapshotState) -> Result<Vec<u8>, StateFileError> {
    let body = postcard::to_stdvec(state).map_err(StateFileError::Body)?;
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Checks and decodes a whole file: magic, format version, length, checksum, Osprey version,
/// then the body.
pub fn decode(bytes: &[u8]) -> Result<SnapshotState, StateFileError> {
    if bytes.len() < HEADER_LEN {
        return Err(StateFileError::ShortHeader { len: bytes.len() });
    }
    let (header, body) = bytes.split_at(HEADER_LEN);
    if header[..8] != MAGIC {
        return Err(StateFileError::BadMagic);
    }
    let found = le_u32(&header[8..12]);
    if found != FORMAT_VERSION {
        return Err(StateFileError::FormatVersion { found });
    }
    let expected = le_u64(&header[12..20]);
    if expected != body.len() as u64 {
        return Err(StateFileError::BodyLength {
            expected,
            found: body.len() as u64,
        });
    }
    let stored = le_u32(&header[20..24]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(StateFileError::Checksum { stored, computed });
    }
    let (version, _) = postcard::take_from_bytes::<String>(body).map_err(StateFileError::Body)?;
    if version != OSPREY_VERSION {
        return Err(StateFileError::OspreyVersion { found: version });
    }
    let (state, rest) =
        postcard::take_from_bytes::<SnapshotState>(body).map_err(StateFileError::Body)?;
    if !rest.is_empty() {
        return Err(StateFileError::BodyLength {
            expected: (body.len() - rest.len()) as u64,
            found: body.len() as u64,
        });
    }
    Ok(state)
}

/// What a state file says of itself: its format version and, for this build's format, the Osprey
/// version that wrote it (`--describe-snapshot`, Firecracker's flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// The header's format version.
    pub format_version: u32,
    /// The writer's Osprey version, when the format is this build's and the body starts with it.
    pub osprey_version: Option<String>,
}

impl std::fmt::Display for Description {
    /// `v5 (written by Osprey 0.1.0)`: Firecracker prints `v` and the format version first.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v{}", self.format_version)?;
        match &self.osprey_version {
            Some(v) => write!(f, " (written by Osprey {v})"),
            None => write!(f, " (not this Osprey's format, v{FORMAT_VERSION})"),
        }
    }
}

/// This build's format, as `--snapshot-version` prints it: `v5 (Osprey 0.1.0)`.
pub fn supported_version() -> String {
    format!("v{FORMAT_VERSION} (Osprey {OSPREY_VERSION})")
}

/// Reads the header of the state file at `path` (and the writer's version after it): the file
/// need not be one this build restores.
pub fn describe(path: &Path) -> Result<Description, StateFileError> {
    use std::io::Read;
    let io = |source| StateFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = super::open::open_for_reading(path, false).map_err(io)?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + 64);
    f.take((HEADER_LEN + 64) as u64)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() < HEADER_LEN {
        return Err(StateFileError::ShortHeader { len: bytes.len() });
    }
    let (header, body) = bytes.split_at(HEADER_LEN);
    if header[..8] != MAGIC {
        return Err(StateFileError::BadMagic);
    }
    let format_version = le_u32(&header[8..12]);
    let osprey_version = (format_version == FORMAT_VERSION)
        .then(|| postcard::take_from_bytes::<String>(body).ok())
        .flatten()
        .map(|(v, _)| v);
    Ok(Description {
        format_version,
        osprey_version,
    })
}

/// Reads and checks the file at `path` (a regular file: opened without blocking, so a FIFO
/// there is refused at once).
pub fn read(path: &Path) -> Result<SnapshotState, StateFileError> {
    use std::io::Read;
    let io = |source| StateFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = super::open::open_for_reading(path, false).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    if len > MAX_FILE_LEN {
        return Err(StateFileError::TooLarge {
            path: path.to_path_buf(),
            len,
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // At most one byte past the limit: a file that grew since its size was read is refused
    // as too large rather than read whole.
    f.take(MAX_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    decode(&bytes)
}

#[cfg(test)]
mod tests;
