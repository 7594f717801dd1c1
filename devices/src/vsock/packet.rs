//! virtio-vsock packets (virtio 1.2, 5.10.6): the 44-byte header, and moving a packet out of a
//! guest's tx descriptor chain or into an rx chain. Everything here is guest-controlled: the
//! header's `len` is checked against the chain and against [`MAX_PAYLOAD`], a chain is walked at
//! most a queue's worth of descriptors (virtio-queue's iterator bounds it, so a looping chain
//! ends), and every copy goes through `vm-memory`'s bounds-checked accessors.

use virtio_queue::DescriptorChain;
use vm_memory::{Bytes, GuestAddress};

use super::span::Span;
use crate::virtio::GuestMemory;

/// Bytes of a packet header.
pub const HDR_LEN: usize = 44;
/// The largest payload a packet may carry, either way (Linux's `VIRTIO_VSOCK_MAX_PKT_BUF_SIZE`).
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// `type`: a stream socket, the only type this device knows.
pub const TYPE_STREAM: u16 = 1;
/// SHUTDOWN flag: the sender will receive no more data.
pub const SHUTDOWN_RCV: u32 = 1;
/// SHUTDOWN flag: the sender will send no more data.
pub const SHUTDOWN_SEND: u32 = 2;
/// The host's CID.
pub const HOST_CID: u64 = 2;

/// A packet's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Open a connection.
    Request,
    /// Accept a connection.
    Response,
    /// Refuse or abort a connection.
    Rst,
    /// Close one or both directions.
    Shutdown,
    /// Data.
    Rw,
    /// Here is my credit.
    CreditUpdate,
    /// Tell me your credit.
    CreditRequest,
}

impl Op {
    /// The wire value.
    pub fn code(self) -> u16 {
        match self {
            Op::Request => 1,
            Op::Response => 2,
            Op::Rst => 3,
            Op::Shutdown => 4,
            Op::Rw => 5,
            Op::CreditUpdate => 6,
            Op::CreditRequest => 7,
        }
    }

    /// The operation of wire value `code`, if it is one.
    pub fn from_code(code: u16) -> Option<Op> {
        Some(match code {
            1 => Op::Request,
            2 => Op::Response,
            3 => Op::Rst,
            4 => Op::Shutdown,
            5 => Op::Rw,
            6 => Op::CreditUpdate,
            7 => Op::CreditRequest,
            _ => return None,
        })
    }
}

/// A packet header, fields in host order (little-endian on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Header {
    /// Source CID.
    pub src_cid: u64,
    /// Destination CID.
    pub dst_cid: u64,
    /// Source port.
    pub src_port: u32,
    /// Destination port.
    pub dst_port: u32,
    /// Payload bytes.
    pub len: u32,
    /// Socket type ([`TYPE_STREAM`]).
    pub kind: u16,
    /// Operation (raw: the guest may send anything).
    pub op: u16,
    /// Operation flags (SHUTDOWN's).
    pub flags: u32,
    /// The sender's receive buffer size.
    pub buf_alloc: u32,
    /// Bytes the sender has consumed from its receive buffer.
    pub fwd_cnt: u32,
}

fn u32_at(b: &[u8; HDR_LEN], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8; HDR_LEN], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | (u64::from(u32_at(b, at + 4)) << 32)
}

impl Header {
    /// Decodes the wire form.
    pub fn from_bytes(b: &[u8; HDR_LEN]) -> Header {
        Header {
            src_cid: u64_at(b, 0),
            dst_cid: u64_at(b, 8),
            src_port: u32_at(b, 16),
            dst_port: u32_at(b, 20),
            len: u32_at(b, 24),
            kind: u16::from_le_bytes([b[28], b[29]]),
            op: u16::from_le_bytes([b[30], b[31]]),
            flags: u32_at(b, 32),
            buf_alloc: u32_at(b, 36),
            fwd_cnt: u32_at(b, 40),
        }
    }

    /// Encodes the wire form.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..8].copy_from_slice(&self.src_cid.to_le_bytes());
        b[8..16].copy_from_slice(&self.dst_cid.to_le_bytes());
        b[16..20].copy_from_slice(&self.src_port.to_le_bytes());
        b[20..24].copy_from_slice(&self.dst_port.to_le_bytes());
        b[24..28].copy_from_slice(&self.len.to_le_bytes());
        b[28..30].copy_from_slice(&self.kind.to_le_bytes());
        b[30..32].copy_from_slice(&self.op.to_le_bytes());
        b[32..36].copy_from_slice(&self.flags.to_le_bytes());
        b[36..40].copy_from_slice(&self.buf_alloc.to_le_bytes());
        b[40..44].copy_from_slice(&self.fwd_cnt.to_le_bytes());
        b
    }

    /// The operation, if the guest sent a known one.
    pub fn op(&self) -> Option<Op> {
        Op::from_code(self.op)
    }
}

/// Why a descriptor chain holds no usable packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The chain is shorter than a header.
    #[error("chain shorter than a packet header ({0} bytes)")]
    ShortHeader(usize),
    /// The header's `len` exceeds [`MAX_PAYLOAD`].
    #[error("payload length {0} over the {MAX_PAYLOAD}-byte limit")]
    TooLong(u32),
    /// The chain holds fewer payload bytes than the header's `len`.
    #[error("header says {said} payload bytes, the chain holds {held}")]
    ShortPayload {
        /// The header's `len`.
        said: u32,
        /// What the chain holds.
        held: usize,
    },
    /// A tx chain has a device-writable buffer, or an rx chain a device-readable one.
    #[error("descriptor of the wrong direction")]
    Direction,
    /// A buffer lies outside guest memory.
    #[error("buffer outside guest memory")]
    Memory,
    /// An rx chain is too small for a header.
    #[error("rx buffer of {0} bytes, smaller than a header")]
    SmallRx(usize),
}

/// Reads the packet of tx chain `chain`: its header, and where its payload lies in guest memory
/// as [`Span`]s in `payload` (cleared first; exactly the header's `len` bytes, at most
/// [`MAX_PAYLOAD`], each span inside one mapped region). The spans stay valid while `mem` is
/// alive, and are the guest's until the chain goes back to it (see [`super::span`]).
pub fn read_tx(
    chain: DescriptorChain<&GuestMemory>,
    mem: &GuestMemory,
    payload: &mut Vec<Span>,
) -> Result<Header, PacketError> {
    use vm_memory::GuestMemory as _;
    payload.clear();
    let mut hdr = [0u8; HDR_LEN];
    let mut got_hdr = 0usize;
    let mut want: Option<usize> = None;
    let mut held = 0usize;
    for d in chain {
        if d.is_write_only() {
            return Err(PacketError::Direction);
        }
        let mut addr = d.addr().0;
        let mut left = d.len() as usize;
        if got_hdr < HDR_LEN {
            let n = left.min(HDR_LEN - got_hdr);
            mem.read_slice(&mut hdr[got_hdr..got_hdr + n], GuestAddress(addr))
                .map_err(|_| PacketError::Memory)?;
            got_hdr += n;
            addr = addr.checked_add(n as u64).ok_or(PacketError::Memory)?;
            left -= n;
            if got_hdr < HDR_LEN {
                continue;
            }
        }
        let len = match want {
            Some(l) => l,
            None => {
                let h = Header::from_bytes(&hdr);
                if h.len as usize > MAX_PAYLOAD {
                    return Err(PacketError::TooLong(h.len));
                }
                want = Some(h.len as usize);
                h.len as usize
            }
        };
        let n = left.min(len - held);
        // Bounded: the slices cover `n` bytes, one per region they cross.
        let slices = mem
            .get_slices(GuestAddress(addr), n, vm_memory::Permissions::Read)
            .map_err(|_| PacketError::Memory)?;
        for slice in slices {
            let slice = slice.map_err(|_| PacketError::Memory)?;
            // SAFETY: the slice lies in a region of `mem`, mapped while `mem` lives (the
            // handler keeps it for as long as its queues); its `len` bytes are readable.
            payload.push(unsafe { Span::new(slice.ptr_guard().as_ptr(), slice.len()) });
        }
        held += n;
        if held == len {
            break;
        }
    }
    if got_hdr < HDR_LEN {
        return Err(PacketError::ShortHeader(got_hdr));
    }
    let h = Header::from_bytes(&hdr);
    if h.len as usize > MAX_PAYLOAD {
        return Err(PacketError::TooLong(h.len));
    }
    if held != h.len as usize {
        return Err(PacketError::ShortPayload { said: h.len, held });
    }
    Ok(h)
}

/// The device-writable bytes of rx chain `chain` as (address, length) pieces, at most
/// `HDR_LEN + MAX_PAYLOAD` bytes in all, each inside guest memory (checked here, before any
/// host byte is read for the chain: a packet that could not be written would lose them).
pub fn rx_buffers(
    chain: DescriptorChain<&GuestMemory>,
) -> Result<smallvec::SmallVec<[(u64, usize); 4]>, PacketError> {
    use vm_memory::GuestMemory as _;
    let mem = chain.memory();
    let mut out = smallvec::SmallVec::new();
    let mut total = 0usize;
    // A copy to walk (a few indices and a reference): `mem` borrows the chain.
    for d in chain.clone() {
        if !d.is_write_only() {
            return Err(PacketError::Direction);
        }
        let room = HDR_LEN + MAX_PAYLOAD - total;
        let n = (d.len() as usize).min(room);
        if n > 0 && !mem.check_range(d.addr(), n, vm_memory::Permissions::Write) {
            return Err(PacketError::Memory);
        }
        if n > 0 {
            out.push((d.addr().0, n));
            total += n;
        }
        if total == HDR_LEN + MAX_PAYLOAD {
            break;
        }
    }
    if total < HDR_LEN {
        return Err(PacketError::SmallRx(total));
    }
    Ok(out)
}

/// The payload room of rx buffers `bufs` (what follows the header).
pub fn rx_room(bufs: &[(u64, usize)]) -> usize {
    bufs.iter()
        .map(|b| b.1)
        .sum::<usize>()
        .saturating_sub(HDR_LEN)
}

/// Writes header `hdr` (its `len` set to `payload.len()`) and `payload` into rx buffers `bufs`;
/// returns the bytes written. `payload` must fit ([`rx_room`]).
pub fn write_rx(
    mem: &GuestMemory,
    bufs: &[(u64, usize)],
    hdr: &Header,
    payload: &[u8],
) -> Result<u32, PacketError> {
    let mut h = *hdr;
    h.len = u32::try_from(payload.len()).map_err(|_| PacketError::TooLong(u32::MAX))?;
    let hb = h.to_bytes();
    let mut src: [&[u8]; 2] = [&hb, payload];
    let mut written = 0usize;
    for &(addr, len) in bufs {
        let mut at = addr;
        let mut room = len;
        for s in src.iter_mut() {
            if room == 0 {
                break;
            }
            let n = s.len().min(room);
            if n == 0 {
                continue;
            }
            mem.write_slice(&s[..n], GuestAddress(at))
                .map_err(|_| PacketError::Memory)?;
            *s = &s[n..];
            at += n as u64;
            room -= n;
            written += n;
        }
    }
    if src.iter().any(|s| !s.is_empty()) {
        return Err(PacketError::SmallRx(written));
    }
    u32::try_from(written).map_err(|_| PacketError::TooLong(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::queue::{desc, guest_memory, F_NEXT, F_WRITE};
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::{Queue, QueueT};

    fn hdr(op: Op, len: u32) -> Header {
        Header {
            src_cid: 3,
            dst_cid: HOST_CID,
            src_port: 1000,
            dst_port: 52,
            len,
            kind: TYPE_STREAM,
            op: op.code(),
            flags: 0,
            buf_alloc: 4096,
            fwd_cnt: 0,
        }
    }

    fn pop(
        mem: &GuestMemory,
        vq: &MockSplitQueue<GuestMemory>,
    ) -> (Queue, Result<Header, PacketError>, Vec<u8>) {
        let mut q: Queue = vq.create_queue().expect("queue");
        let chain = q.pop_descriptor_chain(mem).expect("a chain");
        let mut spans = Vec::new();
        let r = read_tx(chain, mem, &mut spans);
        let mut p = std::collections::VecDeque::new();
        for s in &spans {
            s.copy_into(&mut p);
        }
        (q, r, p.into())
    }

    #[test]
    fn header_round_trips() {
        let h = hdr(Op::Rw, 7);
        assert_eq!(Header::from_bytes(&h.to_bytes()), h);
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(8), None);
    }

    #[test]
    fn reads_a_header_split_over_descriptors_and_its_payload() {
        let mem = guest_memory(1 << 20);
        let vq = MockSplitQueue::new(&mem, 16);
        let b = hdr(Op::Rw, 5).to_bytes();
        mem.write_slice(&b[..10], GuestAddress(0x1000)).unwrap();
        mem.write_slice(&b[10..], GuestAddress(0x2000)).unwrap();
        mem.write_slice(b"hello", GuestAddress(0x2000 + 34))
            .unwrap();
        vq.add_desc_chains(
            &[desc(0x1000, 10, F_NEXT, 1), desc(0x2000, 34 + 5, 0, 0)],
            0,
        )
        .unwrap();
        let (_, r, p) = pop(&mem, &vq);
        assert_eq!(r.unwrap().len, 5);
        assert_eq!(p, b"hello");
    }

    #[test]
    fn hostile_lengths_are_refused() {
        let mem = guest_memory(1 << 20);
        // Shorter than a header.
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&[desc(0x1000, 20, 0, 0)], 0).unwrap();
        assert_eq!(pop(&mem, &vq).1, Err(PacketError::ShortHeader(20)));
        // A len over the limit.
        let vq = MockSplitQueue::new(&mem, 16);
        mem.write_slice(&hdr(Op::Rw, u32::MAX).to_bytes(), GuestAddress(0x1000))
            .unwrap();
        vq.add_desc_chains(&[desc(0x1000, 4096, 0, 0)], 0).unwrap();
        assert_eq!(pop(&mem, &vq).1, Err(PacketError::TooLong(u32::MAX)));
        // A len the chain does not hold.
        let vq = MockSplitQueue::new(&mem, 16);
        mem.write_slice(&hdr(Op::Rw, 1000).to_bytes(), GuestAddress(0x1000))
            .unwrap();
        vq.add_desc_chains(&[desc(0x1000, 44 + 10, 0, 0)], 0)
            .unwrap();
        assert_eq!(
            pop(&mem, &vq).1,
            Err(PacketError::ShortPayload {
                said: 1000,
                held: 10
            })
        );
        // A buffer outside memory.
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&[desc(0xffff_0000_0000, 44, 0, 0)], 0)
            .unwrap();
        assert_eq!(pop(&mem, &vq).1, Err(PacketError::Memory));
        // A writable buffer in a tx chain.
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&[desc(0x1000, 44, F_WRITE, 0)], 0)
            .unwrap();
        assert_eq!(pop(&mem, &vq).1, Err(PacketError::Direction));
    }

    #[test]
    fn a_looping_chain_ends() {
        let mem = guest_memory(1 << 20);
        let vq = MockSplitQueue::new(&mem, 4);
        mem.write_slice(&hdr(Op::Rw, 60_000).to_bytes(), GuestAddress(0x1000))
            .unwrap();
        // 0 -> 1 -> 0 -> ...: never reaches 60,000 bytes.
        vq.add_desc_chains(
            &[desc(0x1000, 44, F_NEXT, 1), desc(0x3000, 100, F_NEXT, 0)],
            0,
        )
        .unwrap();
        let (_, r, p) = pop(&mem, &vq);
        assert!(matches!(r, Err(PacketError::ShortPayload { .. })), "{r:?}");
        assert!(p.len() <= 4 * 100);
    }

    #[test]
    fn rx_write_spans_buffers_and_refuses_small_ones() {
        let mem = guest_memory(1 << 20);
        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(
            &[
                desc(0x1000, 30, F_WRITE | F_NEXT, 1),
                desc(0x2000, 100, F_WRITE, 0),
            ],
            0,
        )
        .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let bufs = rx_buffers(q.pop_descriptor_chain(&mem).unwrap()).unwrap();
        assert_eq!(rx_room(&bufs), 86);
        let n = write_rx(&mem, &bufs, &hdr(Op::Rw, 0), b"abc").unwrap();
        assert_eq!(n, 47);
        let mut back = [0u8; 3];
        mem.read_slice(&mut back, GuestAddress(0x2000 + 14))
            .unwrap();
        assert_eq!(&back, b"abc");
        assert!(write_rx(&mem, &bufs, &hdr(Op::Rw, 0), &[0; 87]).is_err());

        let vq = MockSplitQueue::new(&mem, 16);
        vq.add_desc_chains(&[desc(0x1000, 43, F_WRITE, 0)], 0)
            .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        assert_eq!(
            rx_buffers(q.pop_descriptor_chain(&mem).unwrap()),
            Err(PacketError::SmallRx(43))
        );
    }
}
