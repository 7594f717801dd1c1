//! The memory file's trailer: what ties a memory file to its state file. Guest memory fills the
//! file's first `mem_size_bytes` (mapped privately from offset 0 at a restore); the
//! [`TRAILER_LEN`] bytes after it hold a magic, the memory size and the snapshot's id, a random
//! 128-bit number drawn for each create and written into both files ([`SnapshotState::mem_id`]).
//! A restore reads the trailer (one small `pread`) and refuses a pair whose ids differ, so an
//! older state file is never paired with a newer memory file or the other way round. The check
//! costs nothing beside the memory (a checksum of it would cost a read of every byte) and is
//! sound: the id is new for every create and both files are synced before either is renamed
//! into place (`commit.rs`).
//!
//! Layout (little-endian): 0..8 magic `OSPREYMM`, 8..16 memory size, 16..32 id, 32..36 CRC-32 of
//! bytes 0..32, 36..64 zero.
//!
//! [`SnapshotState::mem_id`]: super::state::SnapshotState::mem_id

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The trailer's first bytes.
pub const MAGIC: [u8; 8] = *b"OSPREYMM";
/// The trailer's length.
pub const TRAILER_LEN: u64 = 64;

/// A snapshot's id: drawn for each create, written into the state file and the memory file.
pub type SnapshotId = [u8; 16];

/// Why a memory file's trailer was refused.
#[derive(Debug, thiserror::Error)]
pub enum TrailerError {
    /// Reading it failed.
    #[error("reading its trailer: {0}")]
    Io(#[source] std::io::Error),
    /// No Osprey trailer where the memory ends.
    #[error("no Osprey memory trailer after {mem_size} bytes of memory (not a memory file of this Osprey, or damaged)")]
    Missing {
        /// The memory size the state file gives.
        mem_size: u64,
    },
    /// The trailer is for another memory size.
    #[error("its trailer says {found} bytes of memory; the state file says {expected}")]
    Size {
        /// The state file's.
        expected: u64,
        /// The trailer's.
        found: u64,
    },
}

/// A new id: 16 bytes from the kernel's random source (`getrandom`, allowed on every thread);
/// should it fail, the time and process id, which still differ from any earlier create's.
pub fn new_id() -> SnapshotId {
    let mut id = [0u8; 16];
    // SAFETY: `getrandom` writes at most `id.len()` bytes into `id`, a live local buffer.
    let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    if n != id.len() as isize {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        id[..12].copy_from_slice(&nanos.to_le_bytes()[..12]);
        id[12..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    id
}

/// The trailer for `mem_size` bytes of memory and `id`.
pub fn encode(mem_size: u64, id: &SnapshotId) -> [u8; TRAILER_LEN as usize] {
    let mut t = [0u8; TRAILER_LEN as usize];
    t[..8].copy_from_slice(&MAGIC);
    t[8..16].copy_from_slice(&mem_size.to_le_bytes());
    t[16..32].copy_from_slice(id);
    let crc = crc32fast::hash(&t[..32]);
    t[32..36].copy_from_slice(&crc.to_le_bytes());
    t
}

/// Reads the trailer of `file` (whose memory is `mem_size` bytes) and returns its id.
pub fn read_id(file: &File, mem_size: u64) -> Result<SnapshotId, TrailerError> {
    let mut t = [0u8; TRAILER_LEN as usize];
    file.read_exact_at(&mut t, mem_size)
        .map_err(TrailerError::Io)?;
    let crc = u32::from_le_bytes([t[32], t[33], t[34], t[35]]);
    if t[..8] != MAGIC || crc != crc32fast::hash(&t[..32]) {
        return Err(TrailerError::Missing { mem_size });
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&t[8..16]);
    let found = u64::from_le_bytes(size);
    if found != mem_size {
        return Err(TrailerError::Size {
            expected: mem_size,
            found,
        });
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&t[16..32]);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_round_trips_and_a_damaged_one_is_refused() {
        let path = std::env::temp_dir().join(format!("osprey-mem-trailer-{}", std::process::id()));
        let id = new_id();
        assert_ne!(id, new_id(), "a new id each time");
        let mut bytes = vec![7u8; 8192];
        bytes.extend_from_slice(&encode(8192, &id));
        std::fs::write(&path, &bytes).expect("write");
        let f = File::open(&path).expect("open");
        assert_eq!(read_id(&f, 8192).expect("read"), id);
        let e = read_id(&f, 4096).expect_err("another size");
        assert!(matches!(e, TrailerError::Missing { .. }), "{e}");
        bytes[8192 + 20] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        let f = File::open(&path).expect("open");
        let e = read_id(&f, 8192).expect_err("flipped");
        assert!(matches!(e, TrailerError::Missing { .. }), "{e}");
        std::fs::remove_file(&path).ok();
    }
}
