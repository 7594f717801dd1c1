//! The virtio-blk configuration space (virtio 1.2, 5.2.4) as bytes, and the limits Osprey offers.

use super::SECTOR_SIZE;

/// Most data segments per request (`seg_max`).
pub const SEG_MAX: u32 = 126;
/// Most discard / write-zeroes segments per request.
pub const MAX_DISCARD_SEG: u32 = 1;
/// Most sectors per discard / write-zeroes segment (256 MiB).
pub const MAX_DISCARD_SECTORS: u32 = (256 << 20) / SECTOR_SIZE as u32;
/// Size of the config space Osprey exposes.
pub const CONFIG_LEN: usize = 60;

/// The values the config space reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockGeometry {
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Logical block size reported to the guest.
    pub blk_size: u32,
    /// Number of request queues.
    pub num_queues: u16,
}

/// Encodes the config space.
pub fn encode(g: &BlockGeometry) -> [u8; CONFIG_LEN] {
    let mut c = [0u8; CONFIG_LEN];
    let mut put = |off: usize, bytes: &[u8]| c[off..off + bytes.len()].copy_from_slice(bytes);
    put(0, &g.capacity_sectors.to_le_bytes());
    put(8, &0u32.to_le_bytes()); // size_max: no limit (SIZE_MAX not offered)
    put(12, &SEG_MAX.to_le_bytes());
    put(20, &g.blk_size.to_le_bytes());
    put(34, &g.num_queues.to_le_bytes());
    put(36, &MAX_DISCARD_SECTORS.to_le_bytes());
    put(40, &MAX_DISCARD_SEG.to_le_bytes());
    put(44, &1u32.to_le_bytes()); // discard_sector_alignment
    put(48, &MAX_DISCARD_SECTORS.to_le_bytes()); // max_write_zeroes_sectors
    put(52, &MAX_DISCARD_SEG.to_le_bytes()); // max_write_zeroes_seg
    put(56, &[1]); // write_zeroes_may_unmap
    c
}

/// Sets the `capacity` field of an encoded config space.
pub fn set_capacity(config: &mut [u8; CONFIG_LEN], capacity_sectors: u64) {
    config[0..8].copy_from_slice(&capacity_sectors.to_le_bytes());
}

/// Reads `data.len()` bytes at `offset` of `config`; out-of-range bytes read as zero.
pub fn read(config: &[u8], offset: u64, data: &mut [u8]) {
    data.fill(0);
    let Ok(start) = usize::try_from(offset) else {
        return;
    };
    if start >= config.len() {
        return;
    }
    let end = start.saturating_add(data.len()).min(config.len());
    data[..end - start].copy_from_slice(&config[start..end]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_at_spec_offsets() {
        let c = encode(&BlockGeometry {
            capacity_sectors: 0x1_0000_0001,
            blk_size: 4096,
            num_queues: 4,
        });
        assert_eq!(
            u64::from_le_bytes(c[0..8].try_into().expect("8")),
            0x1_0000_0001
        );
        assert_eq!(
            u32::from_le_bytes(c[12..16].try_into().expect("4")),
            SEG_MAX
        );
        assert_eq!(u32::from_le_bytes(c[20..24].try_into().expect("4")), 4096);
        assert_eq!(u16::from_le_bytes(c[34..36].try_into().expect("2")), 4);
        assert_eq!(c[56], 1);
        let mut part = [0xffu8; 4];
        read(&c, 58, &mut part);
        assert_eq!(part, [0, 0, 0, 0], "past the end reads zero");
        read(&c, 34, &mut part[..2]);
        assert_eq!(&part[..2], &[4, 0]);
        read(&c, u64::MAX, &mut part);
        assert_eq!(part, [0; 4]);
    }
}
