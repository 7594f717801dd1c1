//! Per-request stage stamps of a queue (cargo feature `stage-stamps`, off by default: without it
//! this module is not compiled and the handler carries no field and makes no call for it).
//!
//! For the QD1 latency breakdown in docs/performance.md ("Where a QD1 read's time goes"). The
//! test guest, booted with `tsc_stamp=1`, writes its `rdtsc` at submit into the first 8 bytes of
//! each read's buffer; the handler stamps the TSC when it pops the chain, as it hands the read to
//! the engine (`Auto` runs a tmpfs read inline right there), after the engine's commit (where
//! the other engines start it) and after the used entry is published. The host
//! and a ring-3 guest share the TSC on kvm_pvm (docs/performance.md checks it: every
//! "published → seen" difference must be small and positive). When the handler leaves its
//! iothread or is dropped it logs, per stage, the median and mean over the requests it stamped. Only turns
//! that carried exactly one request are recorded (QD1); the guest's stamp is taken as given and
//! a record whose stamps are not in order is counted and dropped.

/// The most requests one queue records (the rest are counted, not kept): 40 bytes each.
const MAX_RECORDS: usize = 1 << 18;

/// The stages, in order: guest submit, popped, handed to the engine, commit returned, used
/// published.
const STAGES: [&str; 4] = [
    "guest publishes -> popped",
    "popped -> to engine",
    "to engine -> commit returned",
    "commit returned -> used published",
];

/// The TSC now.
fn tsc() -> u64 {
    // SAFETY: `rdtsc` only reads the time-stamp counter; it touches no memory.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// One queue's stamps.
#[derive(Debug)]
pub struct StageStamps {
    queue: u16,
    /// The request of this turn: [guest, popped, started, ended]; 0 = not stamped.
    cur: [u64; 4],
    /// Requests popped this turn.
    popped: u32,
    records: Vec<[u64; 5]>,
    /// Records dropped: not in order, or over [`MAX_RECORDS`].
    dropped: u64,
}

impl StageStamps {
    /// Stamps for queue `queue`.
    pub fn new(queue: u16) -> Self {
        StageStamps {
            queue,
            cur: [0; 4],
            popped: 0,
            records: Vec::new(),
            dropped: 0,
        }
    }

    /// A chain was popped.
    pub fn popped(&mut self) {
        self.popped += 1;
        self.cur[1] = tsc();
    }

    /// The request goes to the engine: stamps the time and takes the guest's stamp of a read
    /// (the first 8 bytes of its first buffer).
    pub fn submitting(&mut self, op: &dataplane::engine::IoOp) {
        self.cur[2] = tsc();
        let dataplane::engine::IoOp::Read { iovecs, .. } = op else {
            return;
        };
        let Some(v) = iovecs.first().filter(|v| v.len >= 8) else {
            return;
        };
        // SAFETY: the parser resolved `v` inside guest memory, which is mapped for the VM's
        // life, and `len` >= 8 bytes were checked; `read_unaligned` needs no alignment.
        self.cur[0] = unsafe { v.base.cast::<u64>().read_unaligned() };
    }

    /// The engine's commit returned.
    pub fn commit_end(&mut self) {
        self.cur[3] = tsc();
    }

    /// The turn's used entries were published: records the turn when it carried one read.
    pub fn published(&mut self) {
        let [g, p, s, e] = self.cur;
        let one = std::mem::take(&mut self.popped) == 1;
        self.cur = [0; 4];
        if !one || g == 0 {
            return;
        }
        let u = tsc();
        if !(g <= p && p <= s && s <= e && e <= u) || self.records.len() >= MAX_RECORDS {
            self.dropped += 1;
            return;
        }
        self.records.push([g, p, s, e, u]);
    }

    /// Logs each stage's median and mean in TSC cycles, and the records' count (the host's
    /// TSC rate converts: `scripts/qd1-stages.sh` does).
    fn report(&self) {
        let n = self.records.len();
        if n == 0 {
            return;
        }
        let mut line = format!(
            "virtio-blk queue {}: stage stamps over {n} reads (TSC cycles)",
            self.queue
        );
        for (k, name) in STAGES.iter().enumerate() {
            let mut d: Vec<u64> = self
                .records
                .iter()
                .map(|r| r[k + 1].saturating_sub(r[k]))
                .collect();
            d.sort_unstable();
            let mean = d.iter().sum::<u64>() / n as u64;
            line += &format!("; {name}: median {} mean {mean}", d[n / 2]);
        }
        line += &format!("; dropped {}", self.dropped);
        log::info!("{line}");
    }
}

impl Drop for StageStamps {
    fn drop(&mut self) {
        self.report();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::engine::{iovecs, IoOp, IoVec};

    fn read_of(buf: &mut [u8; 16]) -> IoOp {
        IoOp::Read {
            offset: 0,
            iovecs: iovecs![IoVec {
                base: buf.as_mut_ptr(),
                len: buf.len(),
            }],
        }
    }

    fn turn(s: &mut StageStamps, buf: &mut [u8; 16], guest: u64, popped: u32) {
        buf[..8].copy_from_slice(&guest.to_le_bytes());
        for _ in 0..popped {
            s.popped();
        }
        s.submitting(&read_of(buf));
        s.commit_end();
        s.published();
    }

    #[test]
    fn records_lone_reads_in_order_and_drops_the_rest() {
        let mut s = StageStamps::new(0);
        let mut buf = [0u8; 16];
        // A lone read whose guest stamp is in the past: recorded, its stamps in order.
        turn(&mut s, &mut buf, 1, 1);
        assert_eq!(s.records.len(), 1);
        let r = s.records[0];
        assert!(r.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
        // A guest stamp from the future (another clock): dropped, not recorded.
        turn(&mut s, &mut buf, u64::MAX, 1);
        assert_eq!((s.records.len(), s.dropped), (1, 1));
        // Two requests in one turn: not a QD1 record.
        turn(&mut s, &mut buf, 1, 2);
        // A turn without a read (nothing stamped): nothing.
        s.published();
        assert_eq!((s.records.len(), s.dropped), (1, 1));
    }
}
