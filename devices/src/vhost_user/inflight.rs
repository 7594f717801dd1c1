//! `INFLIGHT_SHMFD`'s shared region (`GET_INFLIGHT_FD` / `SET_INFLIGHT_FD`): the memfd the backend
//! creates for a frontend, sized for its queues, and the frontend's fd mapped back, checked
//! against what the device has, and cut into one [`QueueRegion`] per queue. What a queue's
//! region holds and how a ring reads and writes it is `virtio::inflight`'s.
//!
//! The frontend keeps the fd across backend restarts and hands it to each new backend: its size,
//! offset and counts are checked here before anything is mapped; its contents are read as
//! hostile by `InflightQueue::recover`. As with guest memory, the frontend is trusted not to
//! truncate the file while it is mapped (the memfd created here is sealed against that).

use std::fs::File;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use vhost::vhost_user::message::VhostUserInflight;
use vm_memory::{FileOffset, MmapRegion};

use super::VhostUserError;
use crate::virtio::inflight::{queue_region_bytes, QueueRegion, MAX_DESC_NUM};

/// The page size mmap offsets must be multiples of.
const PAGE: u64 = 4096;

/// Checks a frontend's queue count and size against the device's `rings` (and the largest
/// split ring); returns the bytes the region needs.
fn region_bytes(num_queues: u16, queue_size: u16, rings: usize) -> Result<u64, VhostUserError> {
    if num_queues == 0 || usize::from(num_queues) > rings {
        return Err(VhostUserError::Inflight(format!(
            "{num_queues} queues (the device has {rings})"
        )));
    }
    if queue_size == 0 || queue_size > MAX_DESC_NUM {
        return Err(VhostUserError::Inflight(format!(
            "queue size {queue_size} (1 to {MAX_DESC_NUM})"
        )));
    }
    Ok(u64::from(num_queues) * queue_region_bytes(queue_size))
}

/// `GET_INFLIGHT_FD`: a zeroed memfd for `ask.num_queues` queues of `ask.queue_size` states
/// (the device has `rings`), sealed against shrinking and growing, and its description.
pub fn create(
    ask: &VhostUserInflight,
    rings: usize,
) -> Result<(VhostUserInflight, File), VhostUserError> {
    let bytes = region_bytes(ask.num_queues, ask.queue_size, rings)?;
    let err = |what, source| VhostUserError::InflightOs { what, source };
    // SAFETY: a NUL-terminated name and flags; the call only creates a descriptor.
    let fd = unsafe {
        libc::memfd_create(
            c"osprey-inflight".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(err("memfd_create", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    // A new memfd reads as zeros: every state "not in flight", version 0 ("never used").
    file.set_len(bytes)
        .map_err(|e| err("sizing the memfd", e))?;
    // SAFETY: fcntl on a descriptor this function owns, with integer arguments.
    let sealed = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )
    };
    if sealed < 0 {
        return Err(err("sealing the memfd", std::io::Error::last_os_error()));
    }
    Ok((
        VhostUserInflight {
            mmap_size: bytes,
            mmap_offset: 0,
            num_queues: ask.num_queues,
            queue_size: ask.queue_size,
        },
        file,
    ))
}

/// The size of `file`.
fn file_len(file: &File) -> std::io::Result<u64> {
    // SAFETY: an all-zero `stat` is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `stat`; the descriptor is open for the call.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    u64::try_from(st.st_size).map_err(|_| std::io::Error::other("negative file size"))
}

/// A frontend's inflight region, mapped shared (`SET_INFLIGHT_FD`).
#[derive(Debug)]
pub struct InflightRegion {
    /// The mapping as [`super::fault`] knows it (a file shrunk later reads as zeros): dropped
    /// before `mapping` may unmap.
    _fault: Option<super::fault::Registration>,
    mapping: Arc<MmapRegion<()>>,
    num_queues: u16,
    queue_size: u16,
}

impl InflightRegion {
    /// Maps `file` as `msg` describes it, for a device with `rings` rings. Refuses counts the
    /// device cannot have, a size too small for them, an offset that is not page-aligned or
    /// wraps, and a file shorter than the region.
    pub fn map(msg: &VhostUserInflight, file: File, rings: usize) -> Result<Self, VhostUserError> {
        let bytes = region_bytes(msg.num_queues, msg.queue_size, rings)?;
        let bad = |why: String| VhostUserError::Inflight(why);
        if msg.mmap_size < bytes {
            return Err(bad(format!(
                "{} bytes for {} queues of {} (need {bytes})",
                msg.mmap_size, msg.num_queues, msg.queue_size
            )));
        }
        if !msg.mmap_offset.is_multiple_of(PAGE) {
            return Err(bad(format!(
                "offset {:#x} is not page-aligned",
                msg.mmap_offset
            )));
        }
        let end = msg
            .mmap_offset
            .checked_add(bytes)
            .ok_or_else(|| bad(format!("offset {:#x} wraps", msg.mmap_offset)))?;
        let len = file_len(&file).map_err(|source| VhostUserError::InflightOs {
            what: "fstat",
            source,
        })?;
        if len < end {
            return Err(bad(format!(
                "the file has {len} bytes, the region ends at {end}"
            )));
        }
        let size = usize::try_from(bytes).map_err(|_| bad(format!("{bytes} bytes")))?;
        // Only the bytes the queues use are mapped (the frontend may have sent more).
        let mapping = MmapRegion::<()>::from_file(FileOffset::new(file, msg.mmap_offset), size)
            .map_err(VhostUserError::InflightMap)?;
        let fault = super::fault::register(mapping.as_ptr() as usize, mapping.size());
        Ok(Self {
            _fault: fault,
            mapping: Arc::new(mapping),
            num_queues: msg.num_queues,
            queue_size: msg.queue_size,
        })
    }

    /// The queues the region covers.
    pub fn num_queues(&self) -> u16 {
        self.num_queues
    }

    /// Queue `index`'s region, if the region covers it.
    pub fn queue(&self, index: usize) -> Option<QueueRegion> {
        if index >= usize::from(self.num_queues) {
            return None;
        }
        let stride = usize::try_from(queue_region_bytes(self.queue_size)).ok()?;
        let at = index.checked_mul(stride)?;
        if at.checked_add(stride)? > self.mapping.size() {
            return None;
        }
        let base = NonNull::new(self.mapping.as_ptr().wrapping_add(at))?;
        let mapping: Arc<dyn std::any::Any + Send + Sync> = self.mapping.clone();
        // SAFETY: `at + stride` bytes lie inside the mapping (checked above), which `mapping`
        // keeps alive; the mapping is page-aligned and the stride a multiple of 64, so `base`
        // is 8-aligned; `stride` is `queue_region_bytes(queue_size)`.
        Some(unsafe { QueueRegion::new(base, self.queue_size, mapping) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::inflight::InflightQueue;

    fn ask(num_queues: u16, queue_size: u16) -> VhostUserInflight {
        VhostUserInflight {
            mmap_size: 0,
            mmap_offset: 0,
            num_queues,
            queue_size,
        }
    }

    #[test]
    fn a_created_region_maps_back_and_starts_unused() {
        let (desc, file) = create(&ask(2, 128), 8).expect("create");
        // (16 + 16·128) rounded up to 64, twice.
        assert_eq!(desc.mmap_size, 2 * 2112);
        assert_eq!((desc.num_queues, desc.queue_size), (2, 128));
        assert_eq!(file_len(&file).expect("len"), desc.mmap_size);
        // Sealed: the frontend cannot shrink it under a mapping.
        assert!(file.set_len(16).is_err(), "shrinking a sealed memfd");
        let again = file.try_clone().expect("dup");
        let region = InflightRegion::map(&desc, file, 8).expect("map");
        assert_eq!(region.num_queues(), 2);
        let q1 = region.queue(1).expect("queue 1");
        assert!(region.queue(2).is_none(), "only two queues");
        let (_, next_avail, found) = InflightQueue::recover(q1, 128, 7).expect("recover");
        assert!(found.initialised, "a zeroed region is initialised");
        assert_eq!(next_avail, None, "the frontend's base holds");
        // The initialised header is in the file, at queue 1's place (version at +8).
        let view = InflightRegion::map(&desc, again, 8).expect("map again");
        let (_, _, found) =
            InflightQueue::recover(view.queue(1).expect("q1"), 128, 7).expect("recover");
        assert!(!found.initialised, "the second look sees version 1");
    }

    #[test]
    fn bad_descriptions_are_refused_before_mapping() {
        let (desc, file) = create(&ask(2, 128), 8).expect("create");
        let refused = |msg: VhostUserInflight, rings: usize| {
            let f = file.try_clone().expect("dup");
            let r = InflightRegion::map(&msg, f, rings);
            assert!(
                matches!(r, Err(VhostUserError::Inflight(_))),
                "{} bytes at {:#x}, {} queues of {}",
                msg.mmap_size,
                msg.mmap_offset,
                msg.num_queues,
                msg.queue_size
            );
        };
        refused(
            VhostUserInflight {
                num_queues: 0,
                ..desc
            },
            8,
        );
        refused(desc, 1); // more queues than the device has
        refused(
            VhostUserInflight {
                queue_size: 0,
                ..desc
            },
            8,
        );
        refused(
            VhostUserInflight {
                queue_size: 40000,
                ..desc
            },
            8,
        );
        refused(
            VhostUserInflight {
                mmap_size: desc.mmap_size - 1,
                ..desc
            },
            8,
        );
        refused(
            VhostUserInflight {
                mmap_offset: 100,
                ..desc
            },
            8,
        );
        refused(
            VhostUserInflight {
                mmap_offset: !(PAGE - 1),
                ..desc
            },
            8,
        );
        // Past the end of the file.
        refused(
            VhostUserInflight {
                mmap_offset: PAGE,
                ..desc
            },
            8,
        );
        refused(
            VhostUserInflight {
                queue_size: 256,
                mmap_size: u64::MAX,
                ..desc
            },
            8,
        );
        assert!(matches!(
            create(&ask(9, 128), 8),
            Err(VhostUserError::Inflight(_))
        ));
        assert!(matches!(
            create(&ask(1, 0), 8),
            Err(VhostUserError::Inflight(_))
        ));
    }
}
