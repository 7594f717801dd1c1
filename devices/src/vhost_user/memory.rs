//! The frontend's guest memory: `SET_MEM_TABLE`'s regions (a file descriptor and an offset
//! each) mapped shared into this process as a [`GuestMemory`], the same type Osprey's own guest
//! memory is, and the map from the frontend's virtual addresses (how `SET_VRING_ADDR` names the
//! rings) to guest-physical ones.
//!
//! The frontend is not trusted: every region must lie inside its file as `fstat` sees it (a
//! mapping past the end of a file raises `SIGBUS` on first touch, which would kill the whole
//! backend), inside the address space, and apart from every other region, in guest-physical and
//! in the frontend's address space alike. [`MemoryTable::check_files`] looks again before a ring
//! starts, so a file shrunk since `SET_MEM_TABLE` stops that frontend's rings, not the backend;
//! a file shrunk while the rings run is caught at the fault ([`super::fault`]).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

use vhost::vhost_user::message::VhostUserMemoryRegion;
use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

use super::{fault, VhostUserError};
use crate::virtio::GuestMemory;

/// Most regions a table may hold (the protocol's fixed message carries at most 8; QEMU's
/// `CONFIGURE_MEM_SLOTS`, not offered, would allow more).
pub const MAX_REGIONS: usize = 8;

/// One region's file and how much of it the region needs (offset + size).
#[derive(Debug)]
struct Backing {
    file: Arc<File>,
    end: u64,
    gpa: u64,
}

impl Backing {
    /// Whether the file is a regular file (or memfd) at least `end` bytes long now.
    fn check(&self) -> Result<(), VhostUserError> {
        // fstat itself, not `File::metadata` (statx): the serving thread's seccomp list has
        // fstat only.
        // SAFETY: a zeroed `stat` is a valid value of the C struct, which fstat fills; the fd
        // is open (the Arc owns it).
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(self.file.as_raw_fd(), &mut st) != 0 {
                return Err(VhostUserError::MemoryTable(format!(
                    "fstat of region {:#x}'s file: {}",
                    self.gpa,
                    std::io::Error::last_os_error()
                )));
            }
            st
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(VhostUserError::MemoryTable(format!(
                "region at {:#x}: its fd is not a regular file or memfd",
                self.gpa
            )));
        }
        // A negative size is no size.
        let len = u64::try_from(st.st_size).unwrap_or(0);
        if len < self.end {
            return Err(VhostUserError::MemoryTable(format!(
                "region at {:#x} needs {:#x} bytes of its file, which has {:#x}",
                self.gpa, self.end, len
            )));
        }
        Ok(())
    }
}

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
    /// The mappings as [`fault`] knows them: dropped (unregistered) before `mem` may unmap.
    _faults: Vec<fault::Registration>,
    mem: GuestMemory,
    mappings: Vec<AddrMapping>,
    backings: Vec<Backing>,
}

impl MemoryTable {
    /// Maps every region of `regions` from its file (`files[i]` for `regions[i]`), shared with
    /// the frontend. Fails on an empty or oversized table, a count mismatch, a region of size 0,
    /// one that wraps, overlaps another (guest-physical or frontend address) or does not fit in
    /// its file (`fstat`), or an mmap failure; nothing stays mapped then.
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
        let mut mappings: Vec<AddrMapping> = Vec::with_capacity(regions.len());
        let mut backings = Vec::with_capacity(regions.len());
        // Every check before the first mmap: a refused table maps nothing.
        for (r, file) in regions.iter().zip(files) {
            let (gpa, frontend_va, len, offset) =
                (r.guest_phys_addr, r.user_addr, r.memory_size, r.mmap_offset);
            let end = offset.checked_add(len);
            let wraps = len == 0
                || gpa.checked_add(len).is_none()
                || frontend_va.checked_add(len).is_none()
                || end.is_none()
                || usize::try_from(len).is_err()
                || i64::try_from(offset).is_err();
            if wraps {
                return Err(VhostUserError::MemoryTable(format!(
                    "region at {gpa:#x}: bad size {len:#x} or offset {offset:#x}"
                )));
            }
            let clash = mappings.iter().find(|m| {
                overlap(m.gpa, m.len, gpa, len) || overlap(m.frontend_va, m.len, frontend_va, len)
            });
            if let Some(m) = clash {
                return Err(VhostUserError::RegionOverlap {
                    gpa,
                    frontend_va,
                    len,
                    other_gpa: m.gpa,
                    other_frontend_va: m.frontend_va,
                    other_len: m.len,
                });
            }
            let backing = Backing {
                file: Arc::new(file),
                end: end.unwrap_or(u64::MAX),
                gpa,
            };
            backing.check()?;
            backings.push(backing);
            mappings.push(AddrMapping {
                frontend_va,
                gpa,
                len,
            });
        }
        let mut guest_regions = Vec::with_capacity(regions.len());
        let mut faults = Vec::with_capacity(regions.len());
        for (m, b) in mappings.iter().zip(&backings) {
            let (gpa, len) = (m.gpa, m.len);
            let offset = b.end - len;
            let size = usize::try_from(len).map_err(|_| {
                VhostUserError::MemoryTable(format!("region at {gpa:#x}: bad size {len:#x}"))
            })?;
            let mapped =
                MmapRegion::<()>::from_file(FileOffset::from_arc(b.file.clone(), offset), size)
                    .map_err(|source| VhostUserError::MapRegion { gpa, source })?;
            match fault::register(mapped.as_ptr() as usize, mapped.size()) {
                Some(r) => faults.push(r),
                None => log::warn!(
                    "vhost-user: region at {gpa:#x}: no slot left to guard it against a file \
                     shrunk under running rings"
                ),
            }
            let region = GuestRegionMmap::new(mapped, GuestAddress(gpa)).ok_or_else(|| {
                VhostUserError::MemoryTable(format!("region at {gpa:#x} wraps the address space"))
            })?;
            guest_regions.push(region);
        }
        let mem = GuestMemory::from_regions(guest_regions).map_err(VhostUserError::Regions)?;
        Ok(Self {
            _faults: faults,
            mem,
            mappings,
            backings,
        })
    }

    /// Looks at every region's file again: fails if one is now shorter than its region (the
    /// frontend shrank it since `SET_MEM_TABLE`), before a ring starts on the memory.
    pub fn check_files(&self) -> Result<(), VhostUserError> {
        self.backings.iter().try_for_each(Backing::check)
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

/// Whether `[a, a + a_len)` and `[b, b + b_len)` share a byte (neither wraps: checked before).
fn overlap(a: u64, a_len: u64, b: u64, b_len: u64) -> bool {
    a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
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
            matches!(e, Err(VhostUserError::RegionOverlap { other_gpa: 0, .. })),
            "overlap, told apart from the other refusals: {e:?}"
        );
    }

    #[test]
    fn regions_must_fit_their_files_and_not_share_frontend_addresses() {
        let refused = |regions: &[VhostUserMemoryRegion], files: Vec<File>, what: &str| {
            let e = MemoryTable::map(regions, files);
            assert!(
                matches!(
                    e,
                    Err(VhostUserError::MemoryTable(_) | VhostUserError::RegionOverlap { .. })
                ),
                "{what}: {e:?}"
            );
        };
        refused(
            &[region(0, 0x10_0000, 0, 0)],
            vec![memfd(0x1000)],
            "1 MiB on 4 KiB",
        );
        refused(
            &[region(0, 1 << 40, 0, 0)],
            vec![memfd(0x1000)],
            "1 TiB on 4 KiB",
        );
        refused(
            &[region(0, 0x1000, 0, 1 << 62)],
            vec![memfd(0x1000)],
            "offset 2^62",
        );
        refused(
            &[region(0, 0x1000, 0, 0x800)],
            vec![memfd(0x1000)],
            "past the end",
        );
        refused(
            &[region(0, 0x1000, 0, 0), region(0x1000, 0x1000, 0x800, 0)],
            vec![memfd(0x1000), memfd(0x1000)],
            "frontend addresses overlap",
        );
        let dev_null = File::open("/dev/null").expect("/dev/null");
        refused(
            &[region(0, 0x1000, 0, 0)],
            vec![dev_null],
            "not a regular file",
        );
        // What fits is taken, and a file shrunk afterwards is found out before a ring starts.
        let file = memfd(0x2000);
        let keep = file.try_clone().expect("dup");
        let table = MemoryTable::map(&[region(0, 0x1000, 0, 0x1000)], vec![file]).expect("map");
        table.check_files().expect("still fits");
        keep.set_len(0x1800).expect("shrink");
        assert!(table.check_files().is_err());
    }
}
