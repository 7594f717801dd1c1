//! Parsing a virtio-blk request from a descriptor chain, treating guest memory and descriptors
//! as hostile: every address and length is checked, the chain walk is bounded, and every
//! problem becomes a status for the guest (IOERR or UNSUPP) or, when no status can be written,
//! a [`Malformed::Broken`] chain that puts the device in `DEVICE_NEEDS_RESET`.

use dataplane::engine::{IoOp, IoVec, IoVecs};
use smallvec::SmallVec;
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Address, Bytes, GuestAddress};

use super::config::{MAX_DISCARD_SECTORS, MAX_DISCARD_SEG, SEG_MAX};
use super::{request_type, status, ID_BYTES, SECTOR_SIZE};
use crate::virtio::host_ring::{read_volatile_bytes, HostMemory};

/// The header every request starts with.
const HEADER_LEN: u32 = 16;
/// A discard / write-zeroes segment.
const DISCARD_SEGMENT_LEN: u32 = 16;
/// The write-zeroes `unmap` flag.
const WRITE_ZEROES_UNMAP: u32 = 1;
/// Descriptors kept per request: header, data segments, status.
const MAX_DESCRIPTORS: usize = SEG_MAX as usize + 2;
/// Descriptors a request keeps without a heap allocation: a header, `IOVECS_INLINE` data
/// segments and a status. Longer chains (up to [`MAX_DESCRIPTORS`]) spill to the heap; a fixed
/// array of `MAX_DESCRIPTORS` would be cleared (2 KiB) for every request.
const INLINE_DESCRIPTORS: usize = dataplane::engine::IOVECS_INLINE + 2;

/// What the disk looks like to the parser.
#[derive(Debug, Clone)]
pub struct DiskLimits {
    /// Capacity in sectors.
    pub capacity_sectors: u64,
    /// Writes are refused.
    pub read_only: bool,
    /// The GET_ID string.
    pub serial: [u8; ID_BYTES],
}

/// A parsed request.
#[derive(Debug)]
pub struct BlockRequest {
    /// What to do.
    pub op: RequestOp,
    /// Where the status byte goes (checked to lie in guest memory).
    pub status_addr: GuestAddress,
    /// The header's host address: a line the driver's next request will likely reuse.
    pub header: *const u8,
}

/// The operation of a parsed request. `Io` is large (its iovecs are inline, so a request needs
/// no allocation) and is moved straight into the engine; `GetId` is the rare small case.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum RequestOp {
    /// I/O for the engine: read, write, flush, discard or write-zeroes.
    Io(IoOp),
    /// GET_ID: `written` bytes of the serial were already copied into the guest's buffer.
    GetId {
        /// Bytes written.
        written: u32,
    },
}

/// Why a request cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Answer with `status` at `status_addr`.
    Status {
        /// IOERR or UNSUPP.
        status: u8,
        /// Where the status byte goes.
        status_addr: GuestAddress,
        /// Why, for the log.
        reason: &'static str,
    },
    /// No writable status byte: the chain is unusable (looping, cut short, no status).
    Broken {
        /// Why, for the log.
        reason: &'static str,
    },
}

fn ioerr(status_addr: GuestAddress, reason: &'static str) -> Malformed {
    Malformed::Status {
        status: status::IOERR,
        status_addr,
        reason,
    }
}

/// Host address of `[addr, addr + len)` if it lies inside one region of guest memory (a
/// zero-length buffer must still point into memory).
fn host_range(mem: &HostMemory, addr: GuestAddress, len: u32) -> Option<*mut u8> {
    mem.range(addr.raw_value(), u64::from(len))
}

/// Parses the chain's descriptors (a `virtio_queue::DescriptorChain` or the dataplane's
/// [`crate::virtio::host_ring::Chain`], both bounded walks). Keeps at most `SEG_MAX + 2`
/// descriptors; allocates nothing for up to `IOVECS_INLINE` data segments.
pub fn parse(
    chain: impl IntoIterator<Item = Descriptor>,
    mem: &HostMemory,
    limits: &DiskLimits,
) -> Result<BlockRequest, Malformed> {
    let mut descs: SmallVec<[Descriptor; INLINE_DESCRIPTORS]> = SmallVec::new();
    let mut count = 0usize;
    let mut last: Option<Descriptor> = None;
    for d in chain {
        if count < MAX_DESCRIPTORS {
            descs.push(d);
        }
        count += 1;
        last = Some(d);
    }
    let Some(last) = last else {
        return Err(Malformed::Broken {
            reason: "empty or unreadable descriptor chain",
        });
    };
    if last.has_next() {
        return Err(Malformed::Broken {
            reason: "descriptor chain loops or is cut short",
        });
    }
    if !last.is_write_only() || last.len() < 1 || host_range(mem, last.addr(), 1).is_none() {
        return Err(Malformed::Broken {
            reason: "no writable status byte at the end of the chain",
        });
    }
    let status_addr = last.addr();
    if count < 2 {
        return Err(ioerr(status_addr, "request without a header"));
    }
    if count > MAX_DESCRIPTORS {
        return Err(ioerr(status_addr, "more segments than seg_max"));
    }
    let Some(&header) = descs.first() else {
        return Err(ioerr(status_addr, "request without a header"));
    };
    if header.is_write_only() || header.len() < HEADER_LEN {
        return Err(ioerr(
            status_addr,
            "header not device-readable or shorter than 16 bytes",
        ));
    }
    // One read of the whole 16-byte header (type, reserved, sector): one guest-memory lookup.
    let Some(header_host) = host_range(mem, header.addr(), HEADER_LEN) else {
        return Err(ioerr(status_addr, "header outside guest memory"));
    };
    let raw: [u8; HEADER_LEN as usize] = read_volatile_bytes(header_host);
    let kind = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let mut sector_bytes = [0u8; 8];
    sector_bytes.copy_from_slice(&raw[8..16]);
    let sector = u64::from_le_bytes(sector_bytes);
    let data = descs[1..count - 1].iter();

    let op = match kind {
        request_type::IN | request_type::OUT => {
            let is_read = kind == request_type::IN;
            if !is_read && limits.read_only {
                return Err(ioerr(status_addr, "write to a read-only drive"));
            }
            let mut iovecs = IoVecs::new();
            let mut total: u64 = 0;
            for d in data {
                if d.is_write_only() != is_read {
                    return Err(ioerr(
                        status_addr,
                        "data descriptor has the wrong direction",
                    ));
                }
                let Some(base) = host_range(mem, d.addr(), d.len()) else {
                    return Err(ioerr(status_addr, "data buffer outside guest memory"));
                };
                total += u64::from(d.len());
                iovecs.push(IoVec {
                    base,
                    len: d.len() as usize,
                });
            }
            if !total.is_multiple_of(SECTOR_SIZE) {
                return Err(ioerr(status_addr, "data length is not a multiple of 512"));
            }
            let in_range = sector
                .checked_add(total / SECTOR_SIZE)
                .is_some_and(|end| end <= limits.capacity_sectors);
            if !in_range {
                return Err(ioerr(status_addr, "request past the end of the disk"));
            }
            let offset = sector * SECTOR_SIZE;
            RequestOp::Io(if is_read {
                IoOp::Read { offset, iovecs }
            } else {
                IoOp::Write { offset, iovecs }
            })
        }
        request_type::FLUSH => RequestOp::Io(IoOp::Flush),
        request_type::GET_ID => {
            let mut written = 0u32;
            for d in data {
                if !d.is_write_only() {
                    return Err(ioerr(status_addr, "GET_ID buffer is not device-writable"));
                }
                let want = (ID_BYTES - written as usize).min(d.len() as usize);
                if want == 0 {
                    break;
                }
                let chunk = &limits.serial[written as usize..written as usize + want];
                if mem.guest().write_slice(chunk, d.addr()).is_err() {
                    return Err(ioerr(status_addr, "GET_ID buffer outside guest memory"));
                }
                written += want as u32;
            }
            RequestOp::GetId { written }
        }
        request_type::DISCARD | request_type::WRITE_ZEROES => {
            if limits.read_only {
                return Err(ioerr(
                    status_addr,
                    "discard or write-zeroes on a read-only drive",
                ));
            }
            let mut segs = data.copied();
            let (Some(seg), None) = (segs.next(), segs.next()) else {
                return Err(ioerr(
                    status_addr,
                    "discard/write-zeroes needs exactly one data descriptor",
                ));
            };
            if seg.is_write_only() || seg.len() != DISCARD_SEGMENT_LEN * MAX_DISCARD_SEG {
                return Err(ioerr(status_addr, "bad discard/write-zeroes segment"));
            }
            let read = |off: u64| seg.addr().checked_add(off);
            let fields = (
                read(0).and_then(|a| mem.guest().read_obj::<u64>(a).ok()),
                read(8).and_then(|a| mem.guest().read_obj::<u32>(a).ok()),
                read(12).and_then(|a| mem.guest().read_obj::<u32>(a).ok()),
            );
            let (Some(start), Some(num), Some(flags)) = fields else {
                return Err(ioerr(status_addr, "discard segment outside guest memory"));
            };
            let (start, num, flags) = (u64::from_le(start), u32::from_le(num), u32::from_le(flags));
            let is_discard = kind == request_type::DISCARD;
            if flags & !WRITE_ZEROES_UNMAP != 0 || (is_discard && flags != 0) {
                return Err(Malformed::Status {
                    status: status::UNSUPP,
                    status_addr,
                    reason: "unsupported discard/write-zeroes flags",
                });
            }
            let fits = num <= MAX_DISCARD_SECTORS
                && start
                    .checked_add(u64::from(num))
                    .is_some_and(|e| e <= limits.capacity_sectors);
            if !fits {
                return Err(ioerr(
                    status_addr,
                    "discard/write-zeroes range past the end of the disk",
                ));
            }
            let (offset, len) = (start * SECTOR_SIZE, u64::from(num) * SECTOR_SIZE);
            RequestOp::Io(if is_discard {
                IoOp::Discard { offset, len }
            } else {
                IoOp::WriteZeroes {
                    offset,
                    len,
                    unmap: flags & WRITE_ZEROES_UNMAP != 0,
                }
            })
        }
        _ => {
            return Err(Malformed::Status {
                status: status::UNSUPP,
                status_addr,
                reason: "unknown request type",
            })
        }
    };
    Ok(BlockRequest {
        op,
        status_addr,
        header: header_host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::queue::{disk_limits, guest_memory};
    use crate::virtio::GuestMemory;
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::GuestAddress;

    const F_NEXT: u16 = 1;
    const F_WRITE: u16 = 2;
    const HDR: u64 = 0x10_0000;
    const DATA: u64 = 0x20_0000;
    const STATUS: u64 = 0x30_0000;

    fn mem() -> GuestMemory {
        guest_memory(0x100_0000)
    }

    fn limits() -> DiskLimits {
        disk_limits(2048, false, b"disk0")
    }

    fn d(addr: u64, len: u32, flags: u16) -> RawDescriptor {
        RawDescriptor::from(Descriptor::new(addr, len, flags, 0))
    }

    fn header(m: &GuestMemory, kind: u32, sector: u64) {
        m.write_obj(kind.to_le(), GuestAddress(HDR)).expect("w");
        m.write_obj(sector.to_le(), GuestAddress(HDR + 8))
            .expect("w");
    }

    fn run(
        m: &GuestMemory,
        descs: &[RawDescriptor],
        l: &DiskLimits,
    ) -> Result<BlockRequest, Malformed> {
        let q = MockSplitQueue::new(m, 16);
        let chain = q.build_desc_chain(descs).expect("chain");
        parse(chain, &HostMemory::new(m), l)
    }

    fn status_err(r: Result<BlockRequest, Malformed>) -> (u8, &'static str) {
        match r {
            Err(Malformed::Status {
                status,
                status_addr,
                reason,
            }) => {
                assert_eq!(status_addr, GuestAddress(STATUS));
                (status, reason)
            }
            other => panic!("expected a status error, got {other:?}"),
        }
    }

    #[test]
    fn read_write_and_flush_parse() {
        let m = mem();
        header(&m, request_type::IN, 8);
        let r = run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 4096, F_WRITE), d(STATUS, 1, F_WRITE)],
            &limits(),
        )
        .expect("read");
        let host = HostMemory::new(&m);
        assert_eq!(
            Some(r.header.cast_mut()),
            host.range(HDR, 16),
            "the header's line"
        );
        match r.op {
            RequestOp::Io(IoOp::Read { offset, iovecs }) => {
                assert_eq!((offset, iovecs.len(), iovecs[0].len), (4096, 1, 4096));
            }
            other => panic!("{other:?}"),
        }
        header(&m, request_type::OUT, 0);
        let w = run(
            &m,
            &[
                d(HDR, 16, 0),
                d(DATA, 512, 0),
                d(DATA + 512, 512, 0),
                d(STATUS, 1, F_WRITE),
            ],
            &limits(),
        )
        .expect("write");
        assert!(
            matches!(w.op, RequestOp::Io(IoOp::Write { offset: 0, ref iovecs }) if iovecs.len() == 2)
        );
        header(&m, request_type::FLUSH, 0);
        let f = run(&m, &[d(HDR, 16, 0), d(STATUS, 1, F_WRITE)], &limits()).expect("flush");
        assert!(matches!(f.op, RequestOp::Io(IoOp::Flush)));
    }

    #[test]
    fn get_id_writes_the_serial() {
        let m = mem();
        header(&m, request_type::GET_ID, 0);
        let r = run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 20, F_WRITE), d(STATUS, 1, F_WRITE)],
            &limits(),
        )
        .expect("id");
        assert!(matches!(r.op, RequestOp::GetId { written: 20 }));
        let mut got = [0u8; 20];
        m.read_slice(&mut got, GuestAddress(DATA)).expect("read");
        assert_eq!(&got[..6], b"disk0\0");
    }

    #[test]
    fn each_malformed_case_gets_its_status() {
        let m = mem();
        let l = limits();
        header(&m, request_type::IN, 0);
        // Data buffer outside guest memory.
        let (s, why) = status_err(run(
            &m,
            &[
                d(HDR, 16, 0),
                d(0x2000_0000, 512, F_WRITE),
                d(STATUS, 1, F_WRITE),
            ],
            &l,
        ));
        assert_eq!(
            (s, why),
            (status::IOERR, "data buffer outside guest memory")
        );
        // Wrong direction: a device-readable buffer for a read.
        let (s, why) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 512, 0), d(STATUS, 1, F_WRITE)],
            &l,
        ));
        assert_eq!(
            (s, why),
            (status::IOERR, "data descriptor has the wrong direction")
        );
        // Past the end of the disk.
        header(&m, request_type::IN, 2047);
        let (s, why) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 1024, F_WRITE), d(STATUS, 1, F_WRITE)],
            &l,
        ));
        assert_eq!(
            (s, why),
            (status::IOERR, "request past the end of the disk")
        );
        header(&m, request_type::IN, u64::MAX);
        let (s, _) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 512, F_WRITE), d(STATUS, 1, F_WRITE)],
            &l,
        ));
        assert_eq!(s, status::IOERR, "sector overflow");
        // Not a multiple of 512.
        header(&m, request_type::IN, 0);
        let (s, _) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 100, F_WRITE), d(STATUS, 1, F_WRITE)],
            &l,
        ));
        assert_eq!(s, status::IOERR);
        // Write to a read-only drive.
        header(&m, request_type::OUT, 0);
        let ro = DiskLimits {
            read_only: true,
            ..limits()
        };
        let (s, why) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 512, 0), d(STATUS, 1, F_WRITE)],
            &ro,
        ));
        assert_eq!((s, why), (status::IOERR, "write to a read-only drive"));
        // Unknown type.
        header(&m, 77, 0);
        let (s, _) = status_err(run(&m, &[d(HDR, 16, 0), d(STATUS, 1, F_WRITE)], &l));
        assert_eq!(s, status::UNSUPP);
        // Short or device-writable header.
        let (s, _) = status_err(run(&m, &[d(HDR, 8, 0), d(STATUS, 1, F_WRITE)], &l));
        assert_eq!(s, status::IOERR);
        let (s, _) = status_err(run(&m, &[d(HDR, 16, F_WRITE), d(STATUS, 1, F_WRITE)], &l));
        assert_eq!(s, status::IOERR);
        // Header outside memory.
        let (s, why) = status_err(run(&m, &[d(0x4000_0000, 16, 0), d(STATUS, 1, F_WRITE)], &l));
        assert_eq!((s, why), (status::IOERR, "header outside guest memory"));
    }

    #[test]
    fn chains_without_a_usable_status_are_broken() {
        let m = mem();
        header(&m, request_type::IN, 0);
        let l = limits();
        for (descs, why) in [
            (
                vec![d(HDR, 16, 0), d(STATUS, 0, F_WRITE)],
                "zero-length status",
            ),
            (vec![d(HDR, 16, 0), d(STATUS, 1, 0)], "read-only status"),
            (
                vec![d(HDR, 16, 0), d(0x5000_0000, 1, F_WRITE)],
                "status outside memory",
            ),
        ] {
            assert!(
                matches!(run(&m, &descs, &l), Err(Malformed::Broken { .. })),
                "{why}"
            );
        }
    }

    #[test]
    fn looping_chain_is_broken_not_hung() {
        let m = mem();
        header(&m, request_type::IN, 0);
        let q = MockSplitQueue::new(&m, 16);
        // 0 → 1 → 0 → …: built by hand, with NEXT pointing back.
        let descs = [
            RawDescriptor::from(Descriptor::new(HDR, 16, F_NEXT, 1)),
            RawDescriptor::from(Descriptor::new(DATA, 512, F_NEXT | F_WRITE, 0)),
        ];
        let chain = q.build_multiple_desc_chains(&descs).expect("chain");
        assert!(matches!(
            parse(chain, &HostMemory::new(&m), &l_owned()),
            Err(Malformed::Broken { .. })
        ));
    }

    fn l_owned() -> DiskLimits {
        limits()
    }

    #[test]
    fn discard_and_write_zeroes_check_segments() {
        let m = mem();
        let l = limits();
        let seg = |start: u64, num: u32, flags: u32| {
            m.write_obj(start.to_le(), GuestAddress(DATA)).expect("w");
            m.write_obj(num.to_le(), GuestAddress(DATA + 8)).expect("w");
            m.write_obj(flags.to_le(), GuestAddress(DATA + 12))
                .expect("w");
        };
        header(&m, request_type::WRITE_ZEROES, 0);
        seg(8, 16, 1);
        let r = run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, F_WRITE)],
            &l,
        )
        .expect("wz");
        assert!(matches!(
            r.op,
            RequestOp::Io(IoOp::WriteZeroes {
                offset: 4096,
                len: 8192,
                unmap: true
            })
        ));
        header(&m, request_type::DISCARD, 0);
        seg(2040, 16, 0);
        let (s, _) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, F_WRITE)],
            &l,
        ));
        assert_eq!(s, status::IOERR, "past the end");
        seg(0, 8, 1);
        let (s, _) = status_err(run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, F_WRITE)],
            &l,
        ));
        assert_eq!(s, status::UNSUPP, "unmap flag on discard");
        seg(0, 8, 0);
        let r = run(
            &m,
            &[d(HDR, 16, 0), d(DATA, 16, 0), d(STATUS, 1, F_WRITE)],
            &l,
        )
        .expect("discard");
        assert!(matches!(
            r.op,
            RequestOp::Io(IoOp::Discard {
                offset: 0,
                len: 4096
            })
        ));
    }
}
