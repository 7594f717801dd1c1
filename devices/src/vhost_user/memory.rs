//! The frontend's guest memory: `SET_MEM_TABLE`'s regions (a file descriptor and an offset
//! each) mapped shared into this process as a [`GuestMemory`], the same type Osprey's own guest
//! memory is, and the map from the frontend's virtual addresses (how `SET_VRING_ADDR` names the
//! rings) to guest-physical ones.

use std::fs::File;

use vhost::vhost_user::message::VhostUserMemoryRegion;
use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

use super::VhostUserError;
use crate::virtio::GuestMemory;

/// Most regions a table may hold (the protocol's fixed message carries at most 8; QEMU's
/// `CONFIGURE_MEM_SLOTS`, not offered, would allow more).
pub const MAX_REGIONS: usize = 8;

/// One region's place in the frontend's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AddrMapping {
    /// The region's start in the frontend's virtual address space.
    frontend_va: u64,
    /// The region's start in guest-physical space.
    gpa: u64,
    /// Its length in bytes.
    len: u64,
}

/// The mapped guest memory of one connection.
#[derive(Debug)]
pub struct MemoryTable {
    mem: GuestMemory,
    mappings: Vec<AddrMapping>,
}

impl MemoryTable {
    /// Maps every region of `regions` from its file (`files[i]` for `regions[i]`), shared with
    /// the frontend. Fails on an empty or oversized table, a count mismatch, a region that wraps
    /// or overlaps another, or an mmap failure; nothing stays mapped then.
    pub fn map(
        regions: &[VhostUserMemoryRegion],
        files: Vec<File>,
    ) -> Result<Self, VhostUserError> {
        if regions.is_empty() || regions.len() > MAX_REGIONS || regions.len() != files.len() {
            return Err(VhostUserError::MemoryTable(format!(
                "{} regions with {} file descriptors",
                regions.len(),
                files.len()
            )));
        }
        let mut guest_regions = Vec::with_capacity(regions.len());
        let mut mappings = Vec::with_capacity(regions.len());
        for (r, file) in regions.iter().zip(files) {
            let (gpa, frontend_va, len, offset) =
                (r.guest_phys_addr, r.user_addr, r.memory_size, r.mmap_offset);
            let wraps = len == 0
                || gpa.checked_add(len).is_none()
                || frontend_va.checked_add(len).is_none()
                || offset.checked_add(len).is_none();
            let size = usize::try_from(len)
                .ok()
                .filter(|_| !wraps)
                .ok_or_else(|| {
                    VhostUserError::MemoryTable(format!(
                        "region at {gpa:#x}: bad size {len:#x} or offset {offset:#x}"
                    ))
                })?;
            let mapped = MmapRegion::<()>::from_file(FileOffset::new(file, offset), size)
                .map_err(|source| VhostUserError::MapRegion { gpa, source })?;
            let region = GuestRegionMmap::new(mapped, GuestAddress(gpa)).ok_or_else(|| {
                VhostUserError::MemoryTable(format!("region at {gpa:#x} wraps the address space"))
            })?;
            guest_regions.push(region);
            mappings.push(AddrMapping {
                frontend_va,
                gpa,
                len,
            });
        }
        let mem = GuestMemory::from_regions(guest_regions).map_err(VhostUserError::Regions)?;
        Ok(Self { mem, mappings })
    }

    /// The mapped memory (clones share the mappings; they stay mapped while any clone lives).
    pub fn memory(&self) -> &GuestMemory {
        &self.mem
    }

    /// The guest-physical address of the frontend's virtual address `va`, if a region holds it.
    pub fn frontend_va_to_gpa(&self, va: u64) -> Option<u64> {
        self.mappings.iter().find_map(|m| {
            let off = va.checked_sub(m.frontend_va)?;
            (off < m.len).then(|| m.gpa + off)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestMemoryBackend};

    fn memfd(len: u64) -> File {
        crate::vhost_user::tests::shared_file(len)
    }

    fn region(gpa: u64, len: u64, va: u64, offset: u64) -> VhostUserMemoryRegion {
        VhostUserMemoryRegion::new(gpa, len, va, offset)
    }

    #[test]
    fn regions_map_shared_and_addresses_translate() {
        let file = memfd(0x3000);
        let again = file.try_clone().expect("dup");
        let whole = file.try_clone().expect("dup");
        let table = MemoryTable::map(
            &[
                region(0, 0x1000, 0x7f00_0000_0000, 0),
                region(0x10_0000, 0x2000, 0x7f00_0010_0000, 0x1000),
            ],
            vec![file, again],
        )
        .expect("map");
        assert_eq!(table.memory().num_regions(), 2);
        table
            .memory()
            .write_obj(0xabcd_u32, GuestAddress(0x10_0000))
            .expect("write");
        // A second mapping of the whole file sees the write at file offset 0x1000: shared.
        let view = MemoryTable::map(&[region(0, 0x3000, 0, 0)], vec![whole]).expect("map");
        let seen: u32 = view.memory().read_obj(GuestAddress(0x1000)).expect("read");
        assert_eq!(seen, 0xabcd);
        assert_eq!(table.frontend_va_to_gpa(0x7f00_0000_0fff), Some(0xfff));
        assert_eq!(table.frontend_va_to_gpa(0x7f00_0010_0010), Some(0x10_0010));
        assert_eq!(table.frontend_va_to_gpa(0x7f00_0000_1000), None);
        assert_eq!(table.frontend_va_to_gpa(0), None);
    }

    #[test]
    fn bad_tables_are_refused() {
        let e = MemoryTable::map(&[], vec![]);
        assert!(matches!(e, Err(VhostUserError::MemoryTable(_))), "{e:?}");
        let e = MemoryTable::map(&[region(0, 0x1000, 0, 0)], vec![]);
        assert!(matches!(e, Err(VhostUserError::MemoryTable(_))), "{e:?}");
        let e = MemoryTable::map(
            &[region(u64::MAX - 0xfff, 0x1000, 0, 0)],
            vec![memfd(0x1000)],
        );
        assert!(matches!(e, Err(VhostUserError::MemoryTable(_))), "{e:?}");
        let e = MemoryTable::map(
            &[region(0, 0x1000, 0, 0), region(0x800, 0x1000, 0x1000, 0)],
            vec![memfd(0x1000), memfd(0x1000)],
        );
        assert!(
            matches!(
                e,
                Err(VhostUserError::Regions(
                    vm_memory::GuestRegionCollectionError::MemoryRegionOverlap
                ))
            ),
            "overlap, told apart from the other refusals: {e:?}"
        );
    }
}
