//! The transmit path, guest → tap: pops the tx ring's chains, gathers each into an iovec list
//! over guest memory (checked: readable descriptors only, every buffer inside guest memory, at
//! most [`MAX_TX_SEGMENTS`] buffers and [`MAX_FRAME_LEN`] bytes, a chain that ends where it
//! says it ends) and writes it to the tap in one `writev`. A malformed chain is the guest's own
//! frame lost: it is returned unsent and counted. A full tap answers EAGAIN: the chain goes back
//! on the ring (back-pressure; the guest's ring fills and its driver stops) and the handler asks
//! for a retry. Past [`MALFORMED_PER_PERIOD`] malformed chains in [`MALFORMED_PERIOD`] the ring
//! waits out the period ([`WasteBudget`]): a guest posting nothing else as fast as they come
//! back kept three quarters of a core busy here.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use super::stats::NetStats;
use super::{LogLimit, PathIo, MAX_FRAME_LEN, MIN_FRAME_LEN, VNET_HDR_LEN};
use crate::virtio::host_ring::{HostMemory, HostRing, RingError};
use crate::virtio::waste::WasteBudget;

/// The most buffers one tx chain may have.
pub const MAX_TX_SEGMENTS: usize = 64;
/// Malformed tx chains per [`MALFORMED_PERIOD`] before the ring waits for the next period.
pub const MALFORMED_PER_PERIOD: u32 = 100;
/// The malformed chains' period.
pub const MALFORMED_PERIOD: Duration = Duration::from_millis(100);

/// Why the transmit side stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStop {
    /// The ring is empty.
    Empty,
    /// The turn's budget is spent and chains may remain.
    Budget,
    /// The tap's queue is full: the chain stays on the ring.
    TapFull,
    /// The rate limiter refused the next frame: it stays on the ring.
    Throttled,
    /// The guest spent its budget of malformed chains: the ring waits out the period.
    Paused,
    /// The guest broke the ring.
    Broken(RingError),
}

/// Why a chain is not a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Malformed {
    WriteOnly,
    OutsideMemory,
    TooManySegments,
    TooLong,
    TooShort,
    Truncated,
}

/// The transmit side's scratch: the iovec list, allocated once.
#[derive(Debug)]
pub struct TxPath {
    iov: Vec<libc::iovec>,
    log: LogLimit,
    malformed: WasteBudget,
}

// SAFETY: the iovecs point into guest memory only between `gather` and the `writev` of the same
// call; between calls they are stale values never dereferenced.
unsafe impl Send for TxPath {}

impl Default for TxPath {
    fn default() -> Self {
        Self {
            iov: Vec::with_capacity(MAX_TX_SEGMENTS),
            log: LogLimit::default(),
            malformed: WasteBudget::new(MALFORMED_PER_PERIOD, MALFORMED_PERIOD, "virtio-net tx"),
        }
    }
}

impl TxPath {
    /// Until when the ring waits for malformed chains, if it does.
    pub fn paused_until(&self) -> Option<Instant> {
        self.malformed.paused_until()
    }

    /// Ends a pause whose period is over by `now`; whether the ring still waits.
    pub fn resume_if_due(&mut self, now: Instant) -> bool {
        self.malformed.resume_if_due(now);
        self.malformed.paused()
    }

    /// Sends up to `budget` frames; `io.used` is set when a used entry was added.
    pub fn run(&mut self, io: PathIo<'_>, budget: usize) -> TxStop {
        if self.malformed.paused() {
            return TxStop::Paused;
        }
        for _ in 0..budget {
            let head = match io.ring.pop() {
                Ok(Some(head)) => head,
                Ok(None) => return TxStop::Empty,
                Err(e) => return TxStop::Broken(e),
            };
            match self.gather(io.ring, head, io.mem) {
                Err(why) => {
                    NetStats::add(&io.stats.tx_malformed, 1);
                    self.malformed.wasted();
                    if self.log.allow() {
                        log::warn!("virtio-net: tx chain {head} dropped: {why:?}");
                    }
                }
                Ok(len) => {
                    let bytes = (len - VNET_HDR_LEN) as u64;
                    if !io.throttle.admit(bytes, &io.stats.tx_throttled) {
                        io.ring.undo_pop();
                        return TxStop::Throttled;
                    }
                    match io.tap.write_frame(&self.iov) {
                        Ok(_) => {
                            NetStats::add(&io.stats.tx_frames, 1);
                            NetStats::add(&io.stats.tx_bytes, bytes);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            io.ring.undo_pop();
                            NetStats::add(&io.stats.tx_tap_full, 1);
                            return TxStop::TapFull;
                        }
                        Err(e) => {
                            // The tap is gone or down: the frame is lost, the VM runs on.
                            NetStats::add(&io.stats.tx_errors, 1);
                            if self.log.allow() {
                                log::warn!("virtio-net: writing to tap {}: {e}", io.tap.name());
                            }
                        }
                    }
                }
            }
            if let Err(e) = io.ring.add_used(head, 0) {
                return TxStop::Broken(e);
            }
            *io.used = true;
            if self.malformed.paused() {
                return TxStop::Paused;
            }
        }
        TxStop::Budget
    }

    /// Fills `self.iov` with the chain's buffers; the frame's length.
    fn gather(&mut self, ring: &HostRing, head: u16, mem: &HostMemory) -> Result<usize, Malformed> {
        self.iov.clear();
        let mut total = 0usize;
        let mut last_has_next = false;
        for d in ring.chain(head, mem) {
            last_has_next = d.has_next();
            if d.is_write_only() {
                return Err(Malformed::WriteOnly);
            }
            let len = d.len() as usize;
            total += len;
            if total > MAX_FRAME_LEN {
                return Err(Malformed::TooLong);
            }
            let addr = d.addr().0;
            let host = mem
                .range(addr, len as u64)
                .ok_or(Malformed::OutsideMemory)?;
            if len == 0 {
                continue;
            }
            if self.iov.len() == MAX_TX_SEGMENTS {
                return Err(Malformed::TooManySegments);
            }
            self.iov.push(libc::iovec {
                iov_base: host.cast(),
                iov_len: len,
            });
        }
        if last_has_next {
            // The walk ended early: a loop, a next index outside the table, a bad indirect table.
            return Err(Malformed::Truncated);
        }
        if total < MIN_FRAME_LEN {
            return Err(Malformed::TooShort);
        }
        Ok(total)
    }
}
