//! The queue pair against hostile and well-behaved guests, on the queue mocks of
//! `crate::test_utils::queue`, with a `SOCK_SEQPACKET` pair as the tap (one message per frame,
//! EAGAIN when full, as a tap's queue).

use std::fs::File;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use dataplane::rate_limit::{BucketConfig, LimitConfig, RateLimiter};
use dataplane::{CompletionState, Handler, Poll, ThreadTurn, TurnEnd, Watch};
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::handler::NetQueuePair;
use super::stats::{NetStats, NetStatsSnapshot};
use super::tap::{frame_pair, Tap};
use super::throttle::NetRateLimits;
use super::{MAX_FRAME_LEN, NUM_BUFFERS_OFFSET, VNET_HDR_LEN};
use crate::test_utils::queue::{desc, guest_memory, FakeInterrupt, F_NEXT, F_WRITE};
use crate::virtio::{ActivatedQueue, GuestMemory};

const RX_BASE: u64 = 0;
const TX_BASE: u64 = 0x1_0000;
const SIZE: u16 = 256;
/// Guest buffers start here.
const BUFS: u64 = 0x10_0000;

/// A guest's side of one ring: the mock, and the next free descriptor slot.
struct GuestRing<'a> {
    vq: MockSplitQueue<'a, GuestMemory>,
    next: u16,
}

impl GuestRing<'_> {
    /// Posts one chain (its `next` fields are rebased onto the slots it lands in).
    fn post(&mut self, chain: &[RawDescriptor]) {
        let n = chain.len() as u16;
        if self.next + n > SIZE {
            self.next = 0;
        }
        let base = self.next;
        let rebased: Vec<RawDescriptor> = chain
            .iter()
            .map(|d| {
                let d = virtio_queue::desc::split::Descriptor::from(*d);
                desc(d.addr().0, d.len(), d.flags(), d.next() + base)
            })
            .collect();
        self.vq.add_desc_chains(&rebased, base).expect("post");
        self.next += n;
    }

    /// Posts one chain whose `next` fields are taken as they are (hostile chains).
    fn post_raw(&mut self, chain: &[RawDescriptor]) {
        let base = self.next;
        self.vq.add_desc_chains(chain, base).expect("post");
        self.next += chain.len() as u16;
    }

    fn used_idx(&self, mem: &GuestMemory) -> u16 {
        mem.read_obj(self.vq.used_addr().unchecked_add(2))
            .expect("used idx")
    }

    /// The used entry `i`: (head, len).
    fn used(&self, mem: &GuestMemory, i: u16) -> (u32, u32) {
        let at = self
            .vq
            .used_addr()
            .unchecked_add(4 + 8 * u64::from(i % SIZE));
        (
            mem.read_obj(at).expect("id"),
            mem.read_obj(at.unchecked_add(4)).expect("len"),
        )
    }
}

struct Rig {
    irq: Arc<FakeInterrupt>,
    stats: Arc<NetStats>,
    /// The host's end of the "tap".
    host: File,
}

fn activated(vq: &MockSplitQueue<GuestMemory>, index: u16) -> ActivatedQueue {
    ActivatedQueue {
        index,
        queue: vq.create_queue().expect("queue"),
        kick: EventFd::new(libc::EFD_NONBLOCK).expect("efd"),
        inflight: None,
    }
}

/// A pair over fresh rings; `mergeable` as the driver accepted; `limits` its rate limits.
fn pair<'a>(
    mem: &'a GuestMemory,
    mergeable: bool,
    limits: &NetRateLimits,
) -> (NetQueuePair, GuestRing<'a>, GuestRing<'a>, Rig) {
    let rx = MockSplitQueue::create(mem, GuestAddress(RX_BASE), SIZE);
    let tx = MockSplitQueue::create(mem, GuestAddress(TX_BASE), SIZE);
    let (dev, host) = frame_pair().expect("socketpair");
    let irq = FakeInterrupt::new();
    let stats = Arc::new(NetStats::default());
    let p = NetQueuePair::new(
        1,
        (activated(&rx, 0), activated(&tx, 1)),
        mem,
        irq.clone(),
        Tap::from_file(dev, "test"),
        mergeable,
        limits,
        stats.clone(),
    );
    (
        p,
        GuestRing { vq: rx, next: 0 },
        GuestRing { vq: tx, next: 0 },
        Rig { irq, stats, host },
    )
}

fn run(p: &mut NetQueuePair) -> TurnEnd {
    p.run(64, &ThreadTurn::default())
}

fn stats(r: &Rig) -> NetStatsSnapshot {
    r.stats.snapshot()
}

/// A frame of `len` bytes (header included) whose bytes count up from `seed`.
fn frame(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Writes a tx frame of `len` bytes at `at` as a chain of header + payload.
fn tx_chain(mem: &GuestMemory, at: u64, len: usize, seed: u8) -> Vec<RawDescriptor> {
    let f = frame(len, seed);
    mem.write_slice(&f, GuestAddress(at)).expect("frame");
    vec![
        desc(at, VNET_HDR_LEN as u32, F_NEXT, 1),
        desc(at + VNET_HDR_LEN as u64, (len - VNET_HDR_LEN) as u32, 0, 0),
    ]
}

fn host_read(host: &mut File) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_FRAME_LEN + 16];
    match host.read(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => panic!("host read: {e}"),
    }
}

#[test]
fn tx_sends_each_chain_as_one_frame_and_returns_it() {
    let mem = guest_memory(0x100_0000);
    let (mut p, _rx, mut tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    tx.post(&tx_chain(&mem, BUFS, 72, 1));
    tx.post(&tx_chain(&mem, BUFS + 0x1_0000, 1514 + VNET_HDR_LEN, 9));
    let end = run(&mut p);
    assert!(!end.more && !end.retry && !end.stopped, "{end:?}");
    assert_eq!(host_read(&mut r.host), Some(frame(72, 1)));
    assert_eq!(host_read(&mut r.host), Some(frame(1514 + VNET_HDR_LEN, 9)));
    assert_eq!(tx.used_idx(&mem), 2);
    assert_eq!(tx.used(&mem, 0), (0, 0));
    let s = stats(&r);
    assert_eq!((s.tx_frames, s.tx_bytes), (2, 60 + 1514));
    assert!(r.irq.notifications() >= 1);
}

/// Bad descriptors, an oversized frame and a looping chain each cost the guest its own frame:
/// returned unsent, counted, the device keeps running and sends the good frame after them.
#[test]
fn tx_drops_hostile_chains_and_sends_the_good_one() {
    let mem = guest_memory(0x100_0000);
    let (mut p, _rx, mut tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    // A write-only buffer.
    tx.post(&[desc(BUFS, 100, F_WRITE, 0)]);
    // A buffer outside guest memory.
    tx.post(&[desc(0xffff_0000, 100, 0, 0)]);
    // Larger than any frame.
    tx.post(&[desc(BUFS, (MAX_FRAME_LEN + 1) as u32, 0, 0)]);
    // Shorter than a header and an Ethernet header.
    tx.post(&[desc(BUFS, 20, 0, 0)]);
    // A loop: slot n -> n+1 -> n.
    let at = tx.next;
    tx.post_raw(&[desc(BUFS, 40, F_NEXT, at + 1), desc(BUFS, 40, F_NEXT, at)]);
    // A next index outside the table.
    tx.post_raw(&[desc(BUFS, 40, F_NEXT, 999)]);
    tx.post(&tx_chain(&mem, BUFS + 0x1_0000, 100, 3));
    let end = run(&mut p);
    assert!(!end.stopped, "{end:?}");
    assert!(
        !r.irq.needs_reset(),
        "the guest's own frames, not a broken device"
    );
    assert_eq!(
        host_read(&mut r.host),
        Some(frame(100, 3)),
        "only the good frame"
    );
    assert_eq!(host_read(&mut r.host), None);
    assert_eq!(tx.used_idx(&mem), 7, "every chain returned");
    let s = stats(&r);
    assert_eq!((s.tx_malformed, s.tx_frames), (6, 1));
}

/// A guest that posts nothing but malformed chains gets its budget's worth back per period:
/// then its ring waits (no kicks asked for, no polling, a timer to resume), and a good frame
/// behind them goes out once the period is over.
#[test]
fn a_flood_of_malformed_chains_waits_out_the_period() {
    use super::tx::{MALFORMED_PERIOD, MALFORMED_PER_PERIOD};
    let mem = guest_memory(0x100_0000);
    let (mut p, _rx, mut tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    let flood = MALFORMED_PER_PERIOD as u16 + 20;
    for _ in 0..flood {
        tx.post(&[desc(BUFS, 100, F_WRITE, 0)]);
    }
    tx.post(&tx_chain(&mem, BUFS + 0x1_0000, 100, 3));
    let t0 = std::time::Instant::now();
    let mut end = run(&mut p);
    while end.more {
        end = run(&mut p);
    }
    assert_eq!(
        tx.used_idx(&mem),
        MALFORMED_PER_PERIOD as u16,
        "the budget's worth came back"
    );
    let resume = end.wake_at.expect("a timer to resume the ring");
    assert!(
        resume > t0 && resume <= std::time::Instant::now() + MALFORMED_PERIOD,
        "{end:?}"
    );
    assert!(!p.poll(), "no polling while the ring waits");
    let used_flags: u16 = mem.read_obj(tx.vq.used_addr()).expect("flags");
    assert_eq!(
        used_flags & 1,
        1,
        "VRING_USED_F_NO_NOTIFY: no kicks while it waits"
    );
    assert_eq!(host_read(&mut r.host), None);
    std::thread::sleep(resume.saturating_duration_since(std::time::Instant::now()));
    let end = run(&mut p);
    assert!(!end.stopped && !r.irq.needs_reset(), "{end:?}");
    assert_eq!(tx.used_idx(&mem), flood + 1, "the rest, and the good frame");
    assert_eq!(host_read(&mut r.host), Some(frame(100, 3)));
    assert_eq!(stats(&r).tx_malformed, u64::from(flood));
}

/// A full tap leaves the guest's frames on its ring (nothing buffered in the host) and asks the
/// thread for a retry; once the tap drains, the rest goes out in order.
#[test]
fn a_full_tap_back_pressures_and_the_rest_follows_in_order() {
    let mem = guest_memory(0x100_0000);
    let (mut p, _rx, mut tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    // Two descriptors a chain: a ring's worth of chains in flight.
    let n = SIZE / 2;
    for i in 0..n {
        tx.post(&tx_chain(&mem, BUFS + u64::from(i) * 0x2000, 4000, i as u8));
    }
    let mut end = run(&mut p);
    while end.more {
        end = run(&mut p);
    }
    assert!(end.retry, "a full tap asks for a retry: {end:?}");
    let sent_first = tx.used_idx(&mem);
    assert!(sent_first < n, "the tap filled before {n} frames");
    assert!(!p.poll(), "no spinning on a full tap");
    assert!(stats(&r).tx_tap_full >= 1);
    let mut got = 0u16;
    for _ in 0..1000 {
        while let Some(f) = host_read(&mut r.host) {
            assert!(f == frame(4000, got as u8), "frame {got} out of order");
            got += 1;
        }
        if got == n {
            break;
        }
        run(&mut p);
    }
    assert_eq!(got, n);
    assert_eq!(tx.used_idx(&mem), n);
    assert_eq!(stats(&r).tx_frames, u64::from(n));
}

/// Posts `count` rx chains of one `len`-byte writable buffer each.
fn post_rx(mem: &GuestMemory, rx: &mut GuestRing<'_>, count: u16, len: u32) -> Vec<u64> {
    let _ = mem;
    (0..count)
        .map(|i| {
            let at = BUFS + 0x80_0000 + (u64::from(rx.next) + u64::from(i)) * 0x1_1000;
            rx.post(&[desc(at, len, F_WRITE, 0)]);
            at
        })
        .collect()
}

#[test]
fn rx_copies_a_frame_into_one_chain_with_num_buffers_one() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, _tx, mut r) = pair(&mem, false, &NetRateLimits::default());
    let bufs = post_rx(&mem, &mut rx, 4, 2048);
    let f = frame(VNET_HDR_LEN + 60, 5);
    r.host.write_all(&f).expect("host write");
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 1);
    assert_eq!(rx.used(&mem, 0), (0, f.len() as u32));
    let mut got = vec![0u8; f.len()];
    mem.read_slice(&mut got, GuestAddress(bufs[0]))
        .expect("read");
    let mut want = f.clone();
    want[NUM_BUFFERS_OFFSET..NUM_BUFFERS_OFFSET + 2].copy_from_slice(&1u16.to_le_bytes());
    assert_eq!(got, want);
    assert_eq!(stats(&r).rx_frames, 1);
    assert!(r.irq.notifications() >= 1);
}

#[test]
fn rx_spreads_a_large_frame_over_merged_buffers() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, _tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    let bufs = post_rx(&mem, &mut rx, 8, 1024);
    let f = frame(VNET_HDR_LEN + 3000, 7);
    r.host.write_all(&f).expect("host write");
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 3);
    let lens: Vec<u32> = (0..3).map(|i| rx.used(&mem, i).1).collect();
    assert_eq!(lens, [1024, 1024, f.len() as u32 - 2048]);
    let mut got = Vec::new();
    for (i, &at) in bufs.iter().take(3).enumerate() {
        let mut part = vec![0u8; lens[i] as usize];
        mem.read_slice(&mut part, GuestAddress(at)).expect("read");
        got.extend(part);
    }
    let mut want = f.clone();
    want[NUM_BUFFERS_OFFSET..NUM_BUFFERS_OFFSET + 2].copy_from_slice(&3u16.to_le_bytes());
    assert_eq!(got, want);
}

/// With no rx buffers the frames stay in the tap (the host holds none of them), the rx ring's
/// notifications are turned on, and the frames arrive when the guest posts buffers.
#[test]
fn no_rx_buffers_leaves_frames_in_the_tap_until_the_guest_posts_some() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, _tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    for i in 0..3 {
        r.host
            .write_all(&frame(VNET_HDR_LEN + 100, i))
            .expect("host write");
    }
    let end = run(&mut p);
    assert!(!end.more && !end.stopped, "{end:?}");
    assert_eq!(rx.used_idx(&mem), 0);
    assert!(!p.poll());
    post_rx(&mem, &mut rx, 1, 2048);
    assert!(p.poll(), "a starved rx side polls its ring for buffers");
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 1, "one buffer, one frame");
    // The second frame waits in the host buffer, the third in the tap.
    post_rx(&mem, &mut rx, 4, 2048);
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 3);
    let s = stats(&r);
    assert_eq!((s.rx_frames, s.rx_dropped), (3, 0));
}

/// Without MRG_RXBUF a frame larger than the guest's buffer, and a frame offered to a chain that
/// is not a receive buffer, are the guest's losses: its chain comes back empty, the next frame
/// is received.
#[test]
fn rx_drops_frames_the_guests_buffers_cannot_take() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, _tx, mut r) = pair(&mem, false, &NetRateLimits::default());
    post_rx(&mem, &mut rx, 1, 1000);
    rx.post(&[desc(BUFS, 2048, 0, 0)]); // readable: not a receive buffer
    post_rx(&mem, &mut rx, 1, 2048);
    r.host
        .write_all(&frame(VNET_HDR_LEN + 1500, 1))
        .expect("host write");
    r.host
        .write_all(&frame(VNET_HDR_LEN + 100, 2))
        .expect("host write");
    r.host
        .write_all(&frame(VNET_HDR_LEN + 100, 3))
        .expect("host write");
    run(&mut p);
    assert!(!r.irq.needs_reset());
    assert_eq!(rx.used_idx(&mem), 3);
    assert_eq!(rx.used(&mem, 0).1, 0, "too small: returned empty");
    assert_eq!(
        rx.used(&mem, 1).1,
        0,
        "not a receive buffer: returned empty"
    );
    assert_eq!(rx.used(&mem, 2).1, (VNET_HDR_LEN + 100) as u32);
    let s = stats(&r);
    assert_eq!((s.rx_frames, s.rx_dropped), (1, 2));
}

/// A guest that makes more chains available than its ring holds broke the ring: the pair asks
/// for a reset and stops.
#[test]
fn an_avail_index_past_the_ring_needs_a_reset() {
    let mem = guest_memory(0x100_0000);
    let (mut p, _rx, tx, r) = pair(&mem, true, &NetRateLimits::default());
    mem.write_obj(SIZE + 1, tx.vq.avail_addr().unchecked_add(2))
        .expect("avail idx");
    let end = run(&mut p);
    assert!(end.stopped && r.irq.needs_reset(), "{end:?}");
    assert!(!p.poll());
}

/// The tx limiter's frame bucket holds the rate: frames beyond it stay on the ring until the
/// deadline the pair hands the thread, and a live change applies at the next turn.
#[test]
fn tx_rate_limit_holds_frames_until_the_bucket_refills() {
    let mem = guest_memory(0x100_0000);
    let limits = NetRateLimits {
        rx: Arc::default(),
        tx: Arc::new(RateLimiter::new(LimitConfig {
            ops: Some(BucketConfig {
                size: 2,
                one_time_burst: 0,
                refill_time_ms: 100,
            }),
            bandwidth: None,
        })),
    };
    let (mut p, _rx, mut tx, r) = pair(&mem, true, &limits);
    for i in 0..5u16 {
        tx.post(&tx_chain(&mem, BUFS + u64::from(i) * 0x1000, 100, 0));
    }
    let end = run(&mut p);
    assert_eq!(tx.used_idx(&mem), 2);
    let wake = end.wake_at.expect("a deadline");
    assert!(wake <= std::time::Instant::now() + Duration::from_millis(60));
    assert!(!p.poll(), "a throttled side is not polled");
    assert_eq!(stats(&r).tx_throttled, 1);
    limits.tx.set(LimitConfig::default());
    run(&mut p);
    assert_eq!(tx.used_idx(&mem), 5, "the limit removed live");
}

/// While the thread polls, tx notifications are off; when it stops, they are on again and a
/// chain that raced in is reported.
#[test]
fn polling_turns_tx_notifications_off_and_back_on() {
    let mem = guest_memory(0x100_0000);
    let (mut p, _rx, mut tx, _r) = pair(&mem, true, &NetRateLimits::default());
    assert!(!p.watch(Watch::Polling, true));
    assert!(!p.watch(Watch::Polling, false), "nothing raced in");
    assert!(!p.watch(Watch::Polling, true));
    tx.post(&tx_chain(&mem, BUFS, 100, 0));
    assert!(p.poll());
    assert!(p.watch(Watch::Polling, false), "a chain raced in");
}

/// A merged frame that needs more buffers than the guest posted takes none of them: it waits
/// (one frame, in the host) and lands whole once enough are posted.
#[test]
fn a_merged_frame_waits_for_enough_buffers_and_takes_none_before() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, _tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    let mut bufs = post_rx(&mem, &mut rx, 1, 1024);
    let f = frame(VNET_HDR_LEN + 2500, 11);
    r.host.write_all(&f).expect("host write");
    let end = run(&mut p);
    assert_eq!(
        rx.used_idx(&mem),
        0,
        "no buffer taken for a frame that does not fit"
    );
    assert_eq!(stats(&r).rx_no_buffers, 1);
    // The buffer it put back cannot take the frame: nothing to do until the guest posts more
    // (a guest that never does must not keep the thread spinning), and the guest's next post
    // kicks.
    assert!(!end.more, "{end:?}");
    assert!(!p.poll(), "the buffer it saw is no work");
    assert!(
        !p.watch(Watch::Polling, false),
        "nor a reason to stay awake"
    );
    bufs.extend(post_rx(&mem, &mut rx, 2, 1024));
    assert!(p.poll());
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 3);
    let mut got = Vec::new();
    for (i, &at) in bufs.iter().enumerate() {
        let mut part = vec![0u8; rx.used(&mem, i as u16).1 as usize];
        mem.read_slice(&mut part, GuestAddress(at)).expect("read");
        got.extend(part);
    }
    let mut want = f;
    want[NUM_BUFFERS_OFFSET..NUM_BUFFERS_OFFSET + 2].copy_from_slice(&3u16.to_le_bytes());
    assert!(got == want, "the whole frame, in order");
}

/// The rx limiter's frame bucket: frames beyond it wait (one in the host, the rest in the tap)
/// until the deadline the pair hands the thread; removing the limit lets them all in.
#[test]
fn rx_rate_limit_holds_frames_in_the_tap_until_the_bucket_refills() {
    let mem = guest_memory(0x400_0000);
    let limits = NetRateLimits {
        rx: Arc::new(RateLimiter::new(LimitConfig {
            ops: Some(BucketConfig {
                size: 1,
                one_time_burst: 0,
                refill_time_ms: 100,
            }),
            bandwidth: None,
        })),
        tx: Arc::default(),
    };
    let (mut p, mut rx, _tx, mut r) = pair(&mem, true, &limits);
    post_rx(&mem, &mut rx, 4, 2048);
    for i in 0..3 {
        r.host
            .write_all(&frame(VNET_HDR_LEN + 100, i))
            .expect("host write");
    }
    let end = run(&mut p);
    assert_eq!(rx.used_idx(&mem), 1, "one frame a bucket");
    assert!(end.wake_at.is_some(), "{end:?}");
    assert!(!p.poll(), "a throttled side is not polled");
    assert_eq!(stats(&r).rx_throttled, 1);
    limits.rx.set(LimitConfig::default());
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 3, "the limit removed live");
    assert_eq!(stats(&r).rx_dropped, 0);
}

/// A snapshot holds the NIC: while held, neither a frame from the tap nor a tx chain moves (the
/// used indices it saves stay those of the guest memory it writes) and the pair polls nothing;
/// released, the frames that waited arrive in order and the tx chain goes out.
#[test]
fn a_held_pair_moves_nothing_until_released() {
    use crate::virtio::hold::{Hold, HoldState};
    let mem = guest_memory(0x400_0000);
    let (p, mut rx, mut tx, mut r) = pair(&mem, true, &NetRateLimits::default());
    let hold = Hold::default();
    let mut p = p.held_by(hold.clone());
    post_rx(&mem, &mut rx, 4, 2048);
    hold.set(HoldState::Held);
    for i in 0..2 {
        r.host
            .write_all(&frame(VNET_HDR_LEN + 100, i))
            .expect("host write");
    }
    tx.post(&tx_chain(&mem, BUFS, 72, 1));
    for _ in 0..3 {
        let end = run(&mut p);
        assert!(!end.more && !end.retry && !end.stopped, "{end:?}");
    }
    assert!(!p.poll(), "a held pair has no work");
    assert!(
        !p.watch(Watch::Polling, false),
        "nor does it keep its thread awake"
    );
    assert_eq!(
        rx.used_idx(&mem),
        0,
        "nothing written to guest memory while held"
    );
    assert_eq!(tx.used_idx(&mem), 0, "no tx chain returned while held");
    assert_eq!(host_read(&mut r.host), None, "no frame sent while held");
    hold.set(HoldState::Open);
    run(&mut p);
    assert_eq!(rx.used_idx(&mem), 2);
    assert_eq!(tx.used_idx(&mem), 1);
    assert_eq!(host_read(&mut r.host), Some(frame(72, 1)));
    let s = stats(&r);
    assert_eq!((s.rx_frames, s.rx_dropped, s.tx_frames), (2, 0, 1));
}

/// Hands the guest one frame from the host (the guest posted a buffer for it).
fn deliver_one(p: &mut NetQueuePair, mem: &GuestMemory, rx: &mut GuestRing<'_>, r: &mut Rig) {
    post_rx(mem, rx, 1, 2048);
    r.host
        .write_all(&frame(VNET_HDR_LEN + 60, 5))
        .expect("host write");
    run(p);
}

/// A frame handed to the guest makes its answer a pending completion, with a spin capped at a
/// few microseconds: a thread whose polling is suspended spins on the tx ring for it (tx
/// notifications off meanwhile) instead of sleeping until the guest kicks; the answer sent,
/// nothing is pending.
#[test]
fn a_delivered_frame_makes_the_guests_answer_a_short_pending_completion() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, mut tx, mut r) = pair(&mem, false, &NetRateLimits::default());
    assert_eq!(p.completion_state(), CompletionState::Idle);
    deliver_one(&mut p, &mem, &mut rx, &mut r);
    assert_eq!(rx.used_idx(&mem), 1);
    assert_eq!(p.completion_state(), CompletionState::Pending);
    let cap = p.completion_spin_cap_ns().expect("a cap");
    assert!(
        cap <= 20_000,
        "a short spin, not the thread's window: {cap} ns"
    );
    assert!(!p.watch(Watch::Completions, true));
    tx.post(&tx_chain(&mem, BUFS, 100, 7));
    assert_eq!(p.completion_state(), CompletionState::Ready);
    assert!(p.poll());
    run(&mut p);
    assert_eq!(host_read(&mut r.host), Some(frame(100, 7)));
    assert_eq!(p.completion_state(), CompletionState::Idle, "answered");
    assert!(!p.watch(Watch::Completions, false), "nothing raced in");
}

/// Ending the watch turns tx notifications back on and looks once more: an answer that raced
/// in keeps the thread awake.
#[test]
fn ending_an_answer_watch_rechecks_the_tx_ring() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, mut tx, mut r) = pair(&mem, false, &NetRateLimits::default());
    deliver_one(&mut p, &mem, &mut rx, &mut r);
    assert!(!p.watch(Watch::Completions, true));
    tx.post(&tx_chain(&mem, BUFS, 100, 7));
    assert!(p.watch(Watch::Completions, false), "a chain raced in");
}

/// A guest that never answers (a one-way stream) stops costing spins after a few misses.
#[test]
fn unanswered_frames_stop_being_waited_for() {
    let mem = guest_memory(0x400_0000);
    let (mut p, mut rx, _tx, mut r) = pair(&mem, false, &NetRateLimits::default());
    for _ in 0..super::answer::MAX_MISSES {
        deliver_one(&mut p, &mem, &mut rx, &mut r);
        assert_eq!(p.completion_state(), CompletionState::Pending);
        assert!(!p.watch(Watch::Completions, true));
        assert!(!p.watch(Watch::Completions, false));
    }
    deliver_one(&mut p, &mem, &mut rx, &mut r);
    assert_eq!(p.completion_state(), CompletionState::Idle);
    assert_eq!(
        stats(&r).rx_frames,
        u64::from(super::answer::MAX_MISSES) + 1
    );
}
