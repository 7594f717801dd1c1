//! The receive path, tap → guest: reads one frame at a time from the tap into a host buffer
//! (only when the guest has posted an rx chain: otherwise frames stay in the tap, whose own
//! bounded queue drops them when full), then copies it into the guest's rx chains, one chain,
//! or with MRG_RXBUF as many as it takes, writing their count into the header's
//! `num_buffers`. At most one frame waits in the host (the guest ran out of buffers mid-frame,
//! or the rate limiter refused it): the handler's memory is bounded whatever the guest does.
//!
//! A chain that is not a receive buffer (a readable descriptor, a buffer outside guest memory,
//! a chain that does not end where it says) or a frame larger than the guest's buffers without
//! MRG_RXBUF costs the guest that frame: the chains taken for it go back used with length 0
//! (the driver drops them and posts new ones) and the frame is counted in `rx_dropped`.

use std::io::ErrorKind;

use super::stats::NetStats;
use super::{LogLimit, PathIo, MAX_FRAME_LEN, MIN_FRAME_LEN, NUM_BUFFERS_OFFSET, VNET_HDR_LEN};
use crate::virtio::host_ring::{HostMemory, HostRing, RingError};

/// The most buffers (descriptors) one frame may be spread over.
pub const MAX_RX_SEGMENTS: usize = 256;

/// Why the receive side stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxStop {
    /// The tap has no frame.
    Empty,
    /// The guest has no (or not enough) rx buffers: the frame waits, or stays in the tap.
    NoBuffers,
    /// The turn's budget is spent and frames may remain.
    Budget,
    /// The rate limiter refused the waiting frame.
    Throttled,
    /// The guest broke the ring.
    Broken(RingError),
}

/// The frame waiting in the host buffer.
#[derive(Debug, Clone, Copy)]
struct Pending {
    len: usize,
    /// The rate limiter let it pass already.
    admitted: bool,
}

/// What `deliver` did with the waiting frame.
enum Delivered {
    /// Copied into the guest's chains, or dropped (the guest's chains could not take it).
    Done,
    /// The guest has too few buffers: nothing was taken from the ring.
    NoBuffers,
}

/// The receive side: the host buffer, the frame in it, and scratch, all allocated once.
#[derive(Debug)]
pub struct RxPath {
    buf: Box<[u8]>,
    pending: Option<Pending>,
    /// Buffers of the chains taken for the frame: (host address, length).
    segs: Vec<(usize, usize)>,
    /// The chains taken for the frame: (head, index in `segs` past its last buffer).
    chains: Vec<(u16, usize)>,
    mergeable: bool,
    log: LogLimit,
}

impl RxPath {
    /// A receive side; `mergeable`: the driver accepted MRG_RXBUF.
    pub fn new(mergeable: bool) -> Self {
        Self {
            buf: vec![0u8; MAX_FRAME_LEN].into_boxed_slice(),
            pending: None,
            segs: Vec::with_capacity(MAX_RX_SEGMENTS),
            chains: Vec::new(),
            mergeable,
            log: LogLimit::default(),
        }
    }

    /// Whether a frame waits in the host buffer.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Moves up to `budget` frames from the tap to the guest; `io.used` is set when a used
    /// entry was added.
    pub fn run(&mut self, io: PathIo<'_>, budget: usize) -> RxStop {
        for _ in 0..budget {
            let pending = match self.pending {
                Some(p) => p,
                None => {
                    if !io.ring.has_avail() {
                        // Leave the frames in the tap until the guest posts buffers.
                        return RxStop::NoBuffers;
                    }
                    match io.tap.read_frame(&mut self.buf) {
                        Ok(len) if len < MIN_FRAME_LEN => {
                            NetStats::add(&io.stats.rx_dropped, 1);
                            continue;
                        }
                        Ok(len) => {
                            let p = Pending {
                                len,
                                admitted: false,
                            };
                            self.pending = Some(p);
                            p
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return RxStop::Empty,
                        Err(e) => {
                            // The tap is gone or down: nothing to receive, the VM runs on.
                            if self.log.allow() {
                                log::warn!("virtio-net: reading tap {}: {e}", io.tap.name());
                            }
                            return RxStop::Empty;
                        }
                    }
                }
            };
            if !pending.admitted {
                let bytes = (pending.len - VNET_HDR_LEN) as u64;
                if !io.throttle.admit(bytes, &io.stats.rx_throttled) {
                    return RxStop::Throttled;
                }
                self.pending = Some(Pending {
                    admitted: true,
                    ..pending
                });
            }
            match self.deliver(io.ring, io.mem, pending.len, io.stats) {
                Ok(Delivered::Done) => {
                    self.pending = None;
                    *io.used = true;
                    // Visible now, not after the next tap read (a syscall; at one frame at a
                    // time, the one that finds the tap empty): a polling guest answers sooner.
                    io.ring.publish_used();
                }
                Ok(Delivered::NoBuffers) => {
                    NetStats::add(&io.stats.rx_no_buffers, 1);
                    return RxStop::NoBuffers;
                }
                Err(e) => return RxStop::Broken(e),
            }
        }
        RxStop::Budget
    }

    /// Takes chains for the waiting frame of `len` bytes and copies it into them (or drops it
    /// when they cannot take it).
    fn deliver(
        &mut self,
        ring: &mut HostRing,
        mem: &HostMemory,
        len: usize,
        stats: &NetStats,
    ) -> Result<Delivered, RingError> {
        self.segs.clear();
        self.chains.clear();
        let mut room = 0usize;
        let mut bad = false;
        while room < len {
            let Some(head) = ring.pop()? else {
                // Too few buffers: put back what was taken (untouched) and wait for more.
                for _ in 0..self.chains.len() {
                    ring.undo_pop();
                }
                return Ok(Delivered::NoBuffers);
            };
            match self.collect(ring, head, mem, len - room) {
                Some(n) => room += n,
                None => bad = true,
            }
            self.chains.push((head, self.segs.len()));
            if bad || !self.mergeable {
                break;
            }
        }
        if bad || room < len {
            NetStats::add(&stats.rx_dropped, 1);
            if self.log.allow() {
                log::warn!(
                    "virtio-net: a {len}-byte frame dropped: {}",
                    if bad {
                        "a bad rx chain"
                    } else {
                        "larger than the guest's buffer"
                    }
                );
            }
            for &(head, _) in &self.chains {
                ring.add_used(head, 0)?;
            }
            return Ok(Delivered::Done);
        }
        let count = u16::try_from(self.chains.len()).unwrap_or(u16::MAX);
        self.buf[NUM_BUFFERS_OFFSET..NUM_BUFFERS_OFFSET + 2].copy_from_slice(&count.to_le_bytes());
        let mut copied = 0usize;
        let mut first_seg = 0usize;
        for &(head, seg_end) in &self.chains {
            let mut chain_bytes = 0usize;
            for &(host, seg_len) in &self.segs[first_seg..seg_end] {
                let n = seg_len.min(len - copied);
                // SAFETY: `host` is the host address of `seg_len` bytes of guest memory
                // (`HostMemory::range` checked it; `mem` keeps it mapped), `n <= seg_len`, and
                // `copied + n <= len <= buf.len()`. Guest memory is plain bytes the guest may
                // race on: the copy writes it and never reads it back.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.buf.as_ptr().add(copied),
                        host as *mut u8,
                        n,
                    );
                }
                copied += n;
                chain_bytes += n;
            }
            first_seg = seg_end;
            ring.add_used(head, u32::try_from(chain_bytes).unwrap_or(u32::MAX))?;
        }
        NetStats::add(&stats.rx_frames, 1);
        NetStats::add(&stats.rx_bytes, (len - VNET_HDR_LEN) as u64);
        Ok(Delivered::Done)
    }

    /// Appends the chain's writable buffers (up to `want` bytes of them) to `self.segs`; the
    /// bytes they hold, or None for a chain that is not a receive buffer.
    fn collect(
        &mut self,
        ring: &HostRing,
        head: u16,
        mem: &HostMemory,
        want: usize,
    ) -> Option<usize> {
        let mut room = 0usize;
        let mut last_has_next = false;
        for d in ring.chain(head, mem) {
            last_has_next = d.has_next();
            if !d.is_write_only() {
                return None;
            }
            let len = d.len() as usize;
            let host = mem.range(d.addr().0, len as u64)?;
            if room >= want || len == 0 {
                continue;
            }
            if self.segs.len() == MAX_RX_SEGMENTS {
                return None;
            }
            self.segs.push((host as usize, len));
            room += len;
        }
        if last_has_next {
            return None;
        }
        Some(room)
    }
}
