//! Stamp files for the test guest's `rw=stamp` (guest-images/test-guest/stamp.c): every
//! 512-byte sector holds `"OSPSTAMP"`, the little-endian u32 tag and u32 sector number, then 62
//! words derived from (tag, sector), so a guest can tell which file and which sector it read.

use std::io::Write;
use std::path::Path;

/// The guest's `pattern_word` (workload.c), bit for bit.
fn pattern_word(seed: u64, sector: u64, j: u32) -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ sector.wrapping_mul(0xbf58_476d_1ce4_e5b9)
        ^ (u64::from(j) + 1).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    x
}

/// Word `j` (2..64) of a stamped sector (stamp.c's `stamp_word`).
fn stamp_word(tag: u32, sector: u64, j: u32) -> u64 {
    pattern_word((u64::from(tag) << 32) | 0x5354_414d, sector, j)
}

/// One stamped sector.
pub fn stamp_sector(tag: u32, sector: u64) -> [u8; 512] {
    let mut s = [0u8; 512];
    s[..8].copy_from_slice(b"OSPSTAMP");
    s[8..12].copy_from_slice(&tag.to_le_bytes());
    s[12..16].copy_from_slice(&(sector as u32).to_le_bytes());
    for j in 2..64u32 {
        let at = j as usize * 8;
        s[at..at + 8].copy_from_slice(&stamp_word(tag, sector, j).to_le_bytes());
    }
    s
}

/// Writes `bytes` (a multiple of 512) of sectors stamped with `tag` to `path`.
pub fn write_stamp_file(path: &Path, tag: u32, bytes: u64) {
    assert_eq!(bytes % 512, 0, "whole sectors");
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display())),
    );
    for sector in 0..bytes / 512 {
        out.write_all(&stamp_sector(tag, sector))
            .expect("write stamp");
    }
    out.flush().expect("flush stamps");
}
