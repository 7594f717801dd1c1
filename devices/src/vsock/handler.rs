//! The vsock device's work on an iothread: one [`Handler`] owns the rx, tx and event queues and
//! the [`Muxer`]. It wakes on the rx and tx kicks and on the muxer's epoll fd (one fd for any
//! number of connections, so the iothread's fixed fd set never changes), moves tx packets to
//! the muxer and the muxer's packets into rx buffers. Its [`Poll`] check reads the tx ring, and
//! the rx ring when the muxer has packets waiting; no syscall. Each turn first reads the
//! device's [`VsockControl`]: a held device does nothing, and an asked TRANSPORT_RESET drops
//! every connection and goes to the guest in the next event buffer. While a connection's kill
//! timer runs ([`Muxer::sweep`]) the turn asks the iothread to wake it at the deadline.

use std::os::unix::io::RawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use dataplane::{Handler, Poll, ThreadTurn, TurnEnd, Watch};
use virtio_queue::{Queue, QueueOwnedT, QueueT};

use super::control::VsockControl;
use super::muxer::Muxer;
use super::packet;
use super::span::Span;
use crate::virtio::{ActivatedQueue, GuestMemory, VirtioInterrupt};

/// The queues' indices.
pub const RX: u16 = 0;
/// The tx queue.
pub const TX: u16 = 1;
/// The event queue.
pub const EVENT: u16 = 2;
/// `VIRTIO_VSOCK_EVENT_TRANSPORT_RESET`.
pub const EVENT_TRANSPORT_RESET: u32 = 0;

/// What goes back to the device when the handler leaves its iothread.
#[derive(Debug)]
pub struct Returned {
    /// The queues, in index order.
    pub queues: Vec<ActivatedQueue>,
    /// The muxer.
    pub muxer: Muxer,
}

/// The device's queues, as the driver made them ready.
#[derive(Debug)]
pub struct VsockQueues {
    /// Packets to the guest.
    pub rx: ActivatedQueue,
    /// Packets from the guest.
    pub tx: ActivatedQueue,
    /// Events to the guest (optional: a driver may leave it unready).
    pub event: Option<ActivatedQueue>,
}

/// The vsock device's handler.
pub struct VsockHandler {
    owner: u64,
    mem: GuestMemory,
    interrupt: Arc<dyn VirtioInterrupt>,
    rx: ActivatedQueue,
    tx: ActivatedQueue,
    event: Option<ActivatedQueue>,
    muxer: Option<Muxer>,
    back: Option<Sender<Returned>>,
    /// The tx packet being read: where its payload lies in guest memory.
    payload: Vec<Span>,
    /// Heads of the tx chains this turn took: they go back to the guest once the muxer has
    /// written (or copied) their payloads.
    tx_taken: Vec<u16>,
    polling: bool,
    /// The guest's rx kicks are on: packets wait for rx buffers.
    rx_kicks_on: bool,
    broken: bool,
    completed: u64,
    /// A TRANSPORT_RESET event waits for an event buffer.
    reset_event_owed: bool,
    control: Arc<VsockControl>,
}

impl std::fmt::Debug for VsockHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VsockHandler")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl VsockHandler {
    /// A handler over `queues` and `muxer`; what it
    /// holds goes back through `back` when it leaves the thread.
    pub fn new(
        owner: u64,
        mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: VsockQueues,
        muxer: Muxer,
        back: Sender<Returned>,
    ) -> Self {
        let mut rx = queues.rx;
        // The device asks for rx buffers only when it runs out of them.
        let _ = rx.queue.disable_notification(&mem);
        Self {
            owner,
            mem,
            interrupt,
            rx,
            tx: queues.tx,
            event: queues.event,
            muxer: Some(muxer),
            back: Some(back),
            payload: Vec::new(),
            tx_taken: Vec::new(),
            polling: false,
            rx_kicks_on: false,
            broken: false,
            completed: 0,
            reset_event_owed: false,
            control: Arc::default(),
        }
    }

    /// Reads `control` (the device's) at each turn instead of a control block of its own.
    pub fn with_control(mut self, control: Arc<VsockControl>) -> Self {
        self.control = control;
        self
    }

    /// Whether a snapshot holds the device still.
    fn held(&self) -> bool {
        self.control.hold().is_held()
    }

    fn has_avail(q: &Queue, mem: &GuestMemory) -> bool {
        q.avail_idx(mem, Ordering::Acquire)
            .is_ok_and(|i| i.0 != q.next_avail())
    }

    /// Whether the guest's avail index is more than the ring's size ahead of the device (no
    /// driver does that; `pop_descriptor_chain` then finds nothing however often it is asked).
    /// A pop that finds nothing under a valid index only raced with the guest's next post.
    fn index_beyond_ring(q: &Queue, mem: &GuestMemory) -> bool {
        q.avail_idx(mem, Ordering::Acquire)
            .map_or(true, |i| i.0.wrapping_sub(q.next_avail()) > q.size())
    }

    fn fail(&mut self, why: &str) {
        if !self.broken {
            log::error!("virtio-vsock: {why}; the device needs a reset");
            self.broken = true;
            self.interrupt.set_needs_reset();
        }
    }

    /// Moves at most `budget` tx packets to the muxer; returns how many. Their chains wait in
    /// `tx_taken` for [`VsockHandler::return_tx`], after the muxer's flush: their payloads are
    /// written to the host sockets from where they lie.
    fn process_tx(&mut self, budget: usize) -> usize {
        let Some(muxer) = self.muxer.as_mut() else {
            return 0;
        };
        let mem = &self.mem;
        let q = &mut self.tx.queue;
        let _ = q.disable_notification(mem);
        let mut done = 0;
        let mut bad = None;
        // At most two passes: the second catches what raced in while notifications came on.
        for _ in 0..2 {
            while done < budget && !muxer.tx_paused() {
                let Some(chain) = q.pop_descriptor_chain(mem) else {
                    if Self::index_beyond_ring(q, mem) {
                        bad = Some("tx ring: avail index beyond the ring");
                    }
                    break;
                };
                let head = chain.head_index();
                match packet::read_tx(chain, mem, &mut self.payload) {
                    Ok(h) => muxer.from_guest(&h, &self.payload),
                    Err(e) => {
                        log::debug!("virtio-vsock: tx packet dropped: {e}");
                        muxer.wasted_packet();
                    }
                }
                self.tx_taken.push(head);
                done += 1;
            }
            if done >= budget || self.polling || bad.is_some() || muxer.tx_paused() {
                break;
            }
            match q.enable_notification(mem) {
                Ok(true) => {
                    let _ = q.disable_notification(mem);
                }
                _ => break,
            }
        }
        if let Some(why) = bad {
            self.fail(why);
        }
        done
    }

    /// Gives the tx chains this turn took back to the guest (their payloads are written or
    /// copied: the muxer flushed).
    fn return_tx(&mut self) {
        debug_assert!(
            !self.muxer.as_ref().is_some_and(Muxer::holds_spans),
            "a tx payload would outlive its chain"
        );
        let mem = &self.mem;
        let q = &mut self.tx.queue;
        let mut bad = false;
        for &head in &self.tx_taken {
            if q.add_used(mem, head, 0).is_err() {
                bad = true;
                break;
            }
        }
        self.tx_taken.clear();
        if bad {
            self.fail("tx used ring outside guest memory");
        }
    }

    /// Fills rx buffers with what the muxer has for the guest, at most `budget`; returns how
    /// many. The guest's rx kicks are on only while packets wait for buffers.
    fn process_rx(&mut self, budget: usize) -> usize {
        let Some(muxer) = self.muxer.as_mut() else {
            return 0;
        };
        let mem = &self.mem;
        let q = &mut self.rx.queue;
        let mut done = 0;
        let mut starved = false;
        let mut bad_index = false;
        while done < budget && muxer.has_rx() {
            let Some(chain) = q.pop_descriptor_chain(mem) else {
                if Self::index_beyond_ring(q, mem) {
                    bad_index = true;
                    break;
                }
                // Out of buffers: the guest's refill kicks. Buffers that raced in before the
                // kicks came on are taken now (the next pass pops them or finds the ring bad).
                if !self.rx_kicks_on {
                    self.rx_kicks_on = true;
                    if matches!(q.enable_notification(mem), Ok(true)) {
                        continue;
                    }
                }
                starved = true;
                break;
            };
            let head = chain.head_index();
            let used = match packet::rx_buffers(chain) {
                Ok(bufs) => match muxer.next_packet(packet::rx_room(&bufs)) {
                    Some((h, payload)) => packet::write_rx(mem, &bufs, &h, payload).unwrap_or(0),
                    None => {
                        q.go_to_previous_position();
                        break;
                    }
                },
                Err(e) => {
                    log::debug!("virtio-vsock: rx buffer dropped: {e}");
                    0
                }
            };
            if q.add_used(mem, head, used).is_err() {
                self.fail("rx used ring outside guest memory");
                return done;
            }
            done += 1;
        }
        if bad_index {
            self.fail("rx ring: avail index beyond the ring");
        } else if !starved && self.rx_kicks_on {
            // Each kick is a VM exit on the guest's path: none while the buffers suffice.
            self.rx_kicks_on = false;
            let _ = q.disable_notification(mem);
        }
        done
    }

    fn process_event(&mut self) -> bool {
        if !self.reset_event_owed {
            return false;
        }
        let Some(ev) = self.event.as_mut() else {
            return false;
        };
        let mem = &self.mem;
        let Some(chain) = ev.queue.pop_descriptor_chain(mem) else {
            return false;
        };
        let head = chain.head_index();
        let mut written = 0u32;
        if let Some(d) = chain.into_iter().next() {
            if d.is_write_only() && d.len() >= 4 {
                use vm_memory::Bytes;
                if mem
                    .write_obj(EVENT_TRANSPORT_RESET.to_le(), d.addr())
                    .is_ok()
                {
                    written = 4;
                }
            }
        }
        self.reset_event_owed = false;
        ev.queue.add_used(mem, head, written).is_ok()
    }

    fn notify(&mut self, queue: u16) {
        let mem = &self.mem;
        let q = match queue {
            RX => &mut self.rx.queue,
            TX => &mut self.tx.queue,
            _ => match self.event.as_mut() {
                Some(e) => &mut e.queue,
                None => return,
            },
        };
        if q.needs_notification(mem).unwrap_or(true) {
            if let Err(e) = self.interrupt.notify_queue(queue) {
                log::warn!("virtio-vsock: notifying queue {queue}: {e}");
            }
        }
    }
}

impl Handler for VsockHandler {
    fn owner(&self) -> u64 {
        self.owner
    }

    fn wake_fds(&self) -> Vec<RawFd> {
        use std::os::unix::io::AsRawFd;
        let mut fds = vec![self.rx.kick.as_raw_fd(), self.tx.kick.as_raw_fd()];
        if let Some(m) = &self.muxer {
            fds.push(m.epoll_fd());
        }
        if let Some(e) = &self.event {
            fds.push(e.kick.as_raw_fd());
        }
        fds
    }

    fn run(&mut self, max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        if self.broken {
            return TurnEnd {
                stopped: true,
                ..TurnEnd::IDLE
            };
        }
        if self.held() {
            // The wakes of this turn are lost: the release nudges the queues.
            return TurnEnd::IDLE;
        }
        if self.control.take_transport_reset() {
            // The connections were another VM's (the snapshot's): the guest drops its side on
            // the event, the host clients see their sockets closed.
            if let Some(m) = self.muxer.as_mut() {
                m.reset();
            }
            self.reset_event_owed = true;
        }
        let budget = max_batch.max(1);
        if let Some(m) = self.muxer.as_mut().filter(|m| m.tx_paused()) {
            // The clock is read only while the guest's flood keeps its tx ring waiting.
            m.sweep(std::time::Instant::now());
        }
        let tx = self.process_tx(budget);
        if let Some(m) = self.muxer.as_mut() {
            // One write per connection for all the packets this turn took, from guest memory;
            // only then do their chains go back to the guest.
            m.flush_to_host();
        }
        self.return_tx();
        let more_events = self.muxer.as_mut().is_some_and(Muxer::process_events);
        if let Some(m) = self.muxer.as_mut() {
            // Kill timers: read the clock only while one runs.
            if m.next_deadline().is_some() {
                m.sweep(std::time::Instant::now());
            }
        }
        let rx = self.process_rx(budget);
        if tx > 0 {
            self.notify(TX);
        }
        if rx > 0 {
            self.notify(RX);
        }
        if self.process_event() {
            self.notify(EVENT);
        }
        self.completed += (tx + rx) as u64;
        let rx_more = rx >= budget && self.muxer.as_ref().is_some_and(Muxer::has_rx);
        if self.broken {
            return TurnEnd {
                stopped: true,
                ..TurnEnd::IDLE
            };
        }
        TurnEnd {
            more: tx >= budget || rx_more || more_events,
            // No fd signals a kill timer running out.
            wake_at: self.muxer.as_ref().and_then(Muxer::next_deadline),
            ..TurnEnd::IDLE
        }
    }

    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }

    fn detach(mut self: Box<Self>) {
        let Some(muxer) = self.muxer.take() else {
            return;
        };
        let mut queues = vec![self.rx, self.tx];
        queues.extend(self.event);
        if let Some(back) = self.back.take() {
            if back.send(Returned { queues, muxer }).is_err() {
                log::warn!("virtio-vsock: its queues left the iothread after the device was gone");
            }
        }
    }

    fn poller(&mut self) -> Option<&mut dyn Poll> {
        Some(self)
    }
}

impl Poll for VsockHandler {
    fn poll(&mut self) -> bool {
        if self.broken || self.held() {
            return false;
        }
        let tx_open = self.muxer.as_ref().is_some_and(|m| !m.tx_paused());
        (tx_open && Self::has_avail(&self.tx.queue, &self.mem))
            || (self.muxer.as_ref().is_some_and(Muxer::has_rx)
                && Self::has_avail(&self.rx.queue, &self.mem))
    }

    fn watch(&mut self, what: Watch, on: bool) -> bool {
        if what != Watch::Polling {
            return false;
        }
        self.polling = on;
        let mem = &self.mem;
        if on {
            let _ = self.tx.queue.disable_notification(mem);
            return false;
        }
        if self.muxer.as_ref().is_some_and(Muxer::tx_paused) {
            // The pause's deadline wakes the thread; kicks would only wake it sooner for
            // nothing.
            return false;
        }
        matches!(self.tx.queue.enable_notification(mem), Ok(true))
    }

    fn completed(&self) -> u64 {
        self.completed
    }

    /// Host clients' bytes and connections arrive on the muxer's epoll fd.
    fn has_fd_sources(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::queue::{desc, guest_memory, FakeInterrupt, F_NEXT, F_WRITE};
    use crate::virtio::hold::HoldState;
    use crate::vsock::packet::{Header, Op, HOST_CID, TYPE_STREAM};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{Address, Bytes, GuestAddress};
    use vmm_sys_util::eventfd::EventFd;

    fn aq(index: u16, vq: &MockSplitQueue<GuestMemory>) -> ActivatedQueue {
        ActivatedQueue {
            index,
            queue: vq.create_queue().unwrap(),
            kick: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            inflight: None,
        }
    }

    fn turn() -> ThreadTurn {
        ThreadTurn::default()
    }

    /// The guest's RESPONSE (from its port 52) to the host's REQUEST `req`.
    fn response_to(req: &Header) -> Header {
        Header {
            src_cid: 3,
            dst_cid: HOST_CID,
            src_port: 52,
            dst_port: req.src_port,
            len: 0,
            kind: TYPE_STREAM,
            op: Op::Response.code(),
            flags: 0,
            buf_alloc: 65536,
            fwd_cnt: 0,
        }
    }

    #[test]
    fn host_connect_to_guest_round_trip_through_the_queues() {
        let mem = guest_memory(4 << 20);
        let rxq = MockSplitQueue::create(&mem, GuestAddress(0x10_0000), 16);
        let txq = MockSplitQueue::create(&mem, GuestAddress(0x20_0000), 16);
        // Two rx buffers of 4 KiB.
        rxq.add_desc_chains(
            &[
                desc(0x4_0000, 4096, F_WRITE, 0),
                desc(0x5_0000, 4096, F_WRITE, 0),
            ],
            0,
        )
        .unwrap();
        let path = std::env::temp_dir().join(format!("osprey-vsock-h-{}", std::process::id()));
        let muxer = Muxer::bind(3, &path).unwrap();
        let intr = FakeInterrupt::new();
        let (tx_back, back) = mpsc::channel();
        let mut h = VsockHandler::new(
            1,
            mem.clone(),
            intr.clone(),
            VsockQueues {
                rx: aq(RX, &rxq),
                tx: aq(TX, &txq),
                event: None,
            },
            muxer,
            tx_back,
        );
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        h.run(64, &turn());
        // The guest got a REQUEST in the first rx buffer.
        let mut b = [0u8; packet::HDR_LEN];
        mem.read_slice(&mut b, GuestAddress(0x4_0000)).unwrap();
        let req = Header::from_bytes(&b);
        assert_eq!(
            (req.op(), req.dst_port, req.dst_cid),
            (Some(Op::Request), 52, 3)
        );
        assert!(intr.notifications() > 0);
        // The guest answers RESPONSE.
        let resp = response_to(&req);
        mem.write_slice(&resp.to_bytes(), GuestAddress(0x6_0000))
            .unwrap();
        txq.add_desc_chains(&[desc(0x6_0000, 44, 0, 0)], 0).unwrap();
        assert!(h.poll(), "the tx ring has work");
        h.run(64, &turn());
        let mut ok = vec![0u8; format!("OK {}\n", req.src_port).len()];
        client.read_exact(&mut ok).unwrap();
        // The client writes; the guest receives it in the second buffer.
        client.write_all(b"data!").unwrap();
        h.run(64, &turn());
        mem.read_slice(&mut b, GuestAddress(0x5_0000)).unwrap();
        let rw = Header::from_bytes(&b);
        assert_eq!((rw.op(), rw.len), (Some(Op::Rw), 5));
        let mut d = [0u8; 5];
        mem.read_slice(&mut d, GuestAddress(0x5_0000 + 44)).unwrap();
        assert_eq!(&d, b"data!");
        Box::new(h).detach();
        let r: Returned = back.recv().unwrap();
        assert_eq!(r.queues.len(), 2);
    }

    /// A handler over three mock queues (rx with two 4 KiB buffers, tx empty, event with one
    /// 4-byte buffer at 0x7_0000 filled with 0xff) and a muxer on `name`'s socket.
    struct Rig {
        mem: GuestMemory,
        txq: MockSplitQueue<'static, GuestMemory>,
        evq: MockSplitQueue<'static, GuestMemory>,
        rxq: MockSplitQueue<'static, GuestMemory>,
        intr: Arc<FakeInterrupt>,
        control: Arc<VsockControl>,
        path: std::path::PathBuf,
    }

    fn rig(name: &str) -> (Rig, VsockHandler, mpsc::Receiver<Returned>) {
        // Leaked: the mock queues borrow their memory for the test's life.
        let mem: &'static GuestMemory = Box::leak(Box::new(guest_memory(4 << 20)));
        let rxq = MockSplitQueue::create(mem, GuestAddress(0x10_0000), 16);
        let txq = MockSplitQueue::create(mem, GuestAddress(0x20_0000), 16);
        let evq = MockSplitQueue::create(mem, GuestAddress(0x30_0000), 4);
        rxq.add_desc_chains(
            &[
                desc(0x4_0000, 4096, F_WRITE, 0),
                desc(0x5_0000, 4096, F_WRITE, 0),
            ],
            0,
        )
        .unwrap();
        mem.write_obj(u32::MAX, GuestAddress(0x7_0000)).unwrap();
        evq.add_desc_chains(&[desc(0x7_0000, 4, F_WRITE, 0)], 0)
            .unwrap();
        let path = std::env::temp_dir().join(format!("osprey-vsock-{name}-{}", std::process::id()));
        let muxer = Muxer::bind(3, &path).unwrap();
        let intr = FakeInterrupt::new();
        let control = Arc::new(VsockControl::default());
        let (tx_back, back) = mpsc::channel();
        let h = VsockHandler::new(
            1,
            mem.clone(),
            intr.clone(),
            VsockQueues {
                rx: aq(RX, &rxq),
                tx: aq(TX, &txq),
                event: Some(aq(EVENT, &evq)),
            },
            muxer,
            tx_back,
        )
        .with_control(control.clone());
        let r = Rig {
            mem: mem.clone(),
            txq,
            evq,
            rxq,
            intr,
            control,
            path,
        };
        (r, h, back)
    }

    /// A host client `CONNECT`s to guest port 52 and the guest answers RESPONSE: the
    /// connection is open, the client has read its `OK` line.
    fn open_connection(r: &Rig, h: &mut VsockHandler) -> UnixStream {
        let mut client = UnixStream::connect(&r.path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        h.run(64, &turn());
        let mut b = [0u8; packet::HDR_LEN];
        r.mem.read_slice(&mut b, GuestAddress(0x4_0000)).unwrap();
        let req = Header::from_bytes(&b);
        assert_eq!(req.op(), Some(Op::Request));
        let resp = response_to(&req);
        r.mem
            .write_slice(&resp.to_bytes(), GuestAddress(0x6_0000))
            .unwrap();
        r.txq
            .add_desc_chains(&[desc(0x6_0000, 44, 0, 0)], 0)
            .unwrap();
        h.run(64, &turn());
        let mut ok = vec![0u8; format!("OK {}\n", req.src_port).len()];
        client.read_exact(&mut ok).unwrap();
        client
    }

    fn used_idx(mem: &GuestMemory, q: &MockSplitQueue<'_, GuestMemory>) -> u16 {
        mem.read_obj(q.used_addr().unchecked_add(2)).unwrap()
    }

    /// A handler whose rx queue holds `bufs` chains of [header 44 B, `data` B] and whose tx
    /// queue is empty, with one host-initiated connection open (guest port 52, the guest's
    /// `buf_alloc` 64 KiB); the tx mock queue, its connection's host port and the client.
    #[allow(clippy::type_complexity)]
    fn bulk_rig(
        name: &str,
        bufs: u16,
        data: u32,
    ) -> (
        &'static GuestMemory,
        MockSplitQueue<'static, GuestMemory>,
        MockSplitQueue<'static, GuestMemory>,
        VsockHandler,
        UnixStream,
        u32,
    ) {
        let mem: &'static GuestMemory = Box::leak(Box::new(guest_memory(16 << 20)));
        let rxq = MockSplitQueue::create(mem, GuestAddress(0x10_0000), 256);
        let txq = MockSplitQueue::create(mem, GuestAddress(0x20_0000), 256);
        let mut descs = Vec::new();
        for i in 0..u64::from(bufs) {
            let at = 0x40_0000 + i * 0x1_1000;
            descs.push(desc(at, 44, F_WRITE | F_NEXT, (2 * i + 1) as u16));
            descs.push(desc(at + 0x1000, data, F_WRITE, 0));
        }
        rxq.add_desc_chains(&descs, 0).unwrap();
        let path = std::env::temp_dir().join(format!("osprey-vsock-{name}-{}", std::process::id()));
        let muxer = Muxer::bind(3, &path).unwrap();
        let (tx_back, _back) = mpsc::channel();
        let mut h = VsockHandler::new(
            1,
            mem.clone(),
            FakeInterrupt::new(),
            VsockQueues {
                rx: aq(RX, &rxq),
                tx: aq(TX, &txq),
                event: None,
            },
            muxer,
            tx_back,
        );
        let mut client = UnixStream::connect(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        client.write_all(b"CONNECT 52\n").unwrap();
        h.run(64, &turn());
        let mut b = [0u8; packet::HDR_LEN];
        mem.read_slice(&mut b, GuestAddress(0x40_0000)).unwrap();
        let req = Header::from_bytes(&b);
        assert_eq!(req.op(), Some(Op::Request));
        mem.write_slice(&response_to(&req).to_bytes(), GuestAddress(0xF0_0000))
            .unwrap();
        txq.add_desc_chains(&[desc(0xF0_0000, 44, 0, 0)], 0)
            .unwrap();
        h.run(64, &turn());
        let mut ok = vec![0u8; format!("OK {}\n", req.src_port).len()];
        client.read_exact(&mut ok).unwrap();
        (mem, rxq, txq, h, client, req.src_port)
    }

    /// Where the tx rigs' `i`th packet lies: a 44-byte header, then 4 KiB of payload.
    fn tx_packet_at(i: usize) -> u64 {
        0x80_0000 + i as u64 * 0x2000
    }

    /// Tx chains carrying 4 KiB chunks `range` of `data` as RW packets from the guest's side of
    /// connection `port`, one single-descriptor chain each, written at [`tx_packet_at`].
    fn rw_chains(
        mem: &GuestMemory,
        port: u32,
        data: &[u8],
        range: std::ops::Range<usize>,
    ) -> Vec<virtio_queue::desc::RawDescriptor> {
        let mut descs = Vec::new();
        for i in range {
            let at = tx_packet_at(i);
            let mut hd = response_to(&Header {
                src_port: port,
                ..Header::default()
            });
            hd.op = Op::Rw.code();
            hd.len = 4096;
            mem.write_slice(&hd.to_bytes(), GuestAddress(at)).unwrap();
            mem.write_slice(&data[i * 4096..(i + 1) * 4096], GuestAddress(at + 44))
                .unwrap();
            descs.push(desc(at, 44 + 4096, 0, 0));
        }
        descs
    }

    /// 64 KiB from the host client reach the guest's sixteen 4 KiB rx buffers with one read
    /// of the host socket, not one per packet, and arrive whole and in order.
    #[test]
    fn host_bytes_reach_many_rx_buffers_with_one_socket_read() {
        let (mem, rxq, _txq, mut h, mut client, _port) = bulk_rig("rxbatch", 17, 4096);
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 + i / 251) as u8).collect();
        client.write_all(&data).unwrap();
        let before = h.muxer.as_ref().unwrap().socket_calls();
        h.run(64, &turn());
        let after = h.muxer.as_ref().unwrap().socket_calls();
        let mut got = Vec::new();
        // Chain 0 carried the REQUEST; chains 1.. the data.
        for i in 1..17u64 {
            let at = 0x40_0000 + i * 0x1_1000;
            let mut b = [0u8; packet::HDR_LEN];
            mem.read_slice(&mut b, GuestAddress(at)).unwrap();
            let rw = Header::from_bytes(&b);
            assert_eq!((rw.op(), rw.len), (Some(Op::Rw), 4096), "packet {i}");
            let mut d = vec![0u8; 4096];
            mem.read_slice(&mut d, GuestAddress(at + 0x1000)).unwrap();
            got.extend_from_slice(&d);
        }
        assert!(got == data, "the bytes arrived in order");
        assert_eq!(used_idx(mem, &rxq), 17);
        assert!(
            after.reads - before.reads <= 2,
            "{} socket reads for 16 packets",
            after.reads - before.reads
        );
    }

    /// Sixteen 4 KiB packets the guest queued on tx at once reach the host client with one
    /// write of the host socket, whole and in order.
    #[test]
    fn guest_packets_of_one_turn_reach_the_host_with_one_socket_write() {
        let (mem, _rxq, txq, mut h, mut client, port) = bulk_rig("txbatch", 2, 4096);
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 13 + i / 241) as u8).collect();
        txq.add_desc_chains(&rw_chains(mem, port, &data, 0..16), 0)
            .unwrap();
        let before = h.muxer.as_ref().unwrap().socket_calls();
        h.run(64, &turn());
        let after = h.muxer.as_ref().unwrap().socket_calls();
        let mut got = vec![0u8; data.len()];
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        client.read_exact(&mut got).unwrap();
        assert!(got == data, "the bytes arrived in order");
        assert_eq!(
            after.writes - before.writes,
            1,
            "socket writes for 16 packets"
        );
    }

    /// Packets go to the host socket straight from guest memory, and their chains go back to
    /// the guest only once written or copied: a guest that reuses its tx buffers at once (here:
    /// overwrites them all after each turn) cannot change what the host reads, including the
    /// part a full socket left waiting and the packets that came after it.
    #[test]
    fn what_a_full_socket_leaves_is_copied_before_the_chains_go_back() {
        let (mem, _rxq, txq, mut h, mut client, port) = bulk_rig("txspill", 2, 4096);
        // 64 packets fill the socket; 16 more come while its bytes still wait.
        let data: Vec<u8> = (0..80 * 4096u32)
            .map(|i| (i * 31 + i / 509) as u8)
            .collect();
        let overwrite = |range: std::ops::Range<usize>| {
            for i in range {
                mem.write_slice(&[0xEE; 4096], GuestAddress(tx_packet_at(i) + 44))
                    .unwrap();
            }
        };
        txq.add_desc_chains(&rw_chains(mem, port, &data, 0..64), 0)
            .unwrap();
        h.run(64, &turn());
        assert_eq!(
            used_idx(mem, &txq),
            64 + 1,
            "every tx chain went back in the turn"
        );
        overwrite(0..64);
        txq.add_desc_chains(&rw_chains(mem, port, &data, 64..80), 64 + 1)
            .unwrap();
        h.run(64, &turn());
        assert_eq!(used_idx(mem, &txq), 80 + 1);
        overwrite(64..80);
        client.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        let mut first_read = None;
        for _ in 0..10_000 {
            match client.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    first_read.get_or_insert(got.len());
                    if got.len() >= data.len() {
                        break;
                    }
                    h.run(64, &turn());
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            first_read.unwrap_or(0) < 64 * 4096,
            "the socket took everything at once: nothing was left to copy"
        );
        assert!(
            got == data,
            "the host read what the guest sent ({} bytes)",
            got.len()
        );
    }

    /// After a restore the VMM asks for a TRANSPORT_RESET: the next turn closes every
    /// connection (the host client reads end of file) and puts the event (id 0, 4 bytes) in
    /// the guest's event buffer, with an interrupt; one event, however many turns follow.
    #[test]
    fn an_asked_transport_reset_closes_connections_and_fills_an_event_buffer() {
        let (r, mut h, back) = rig("reset");
        let mut client = open_connection(&r, &mut h);
        assert_eq!(used_idx(&r.mem, &r.evq), 0, "no event before it is asked");
        let before = r.intr.notifications();
        r.control.request_transport_reset();
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.evq), 1, "the event buffer was used");
        let id: u32 = r.mem.read_obj(GuestAddress(0x7_0000)).unwrap();
        assert_eq!(id, EVENT_TRANSPORT_RESET);
        let len: u32 = r
            .mem
            .read_obj(r.evq.used_addr().unchecked_add(4 + 4))
            .unwrap();
        assert_eq!(len, 4, "the used entry's length");
        assert!(r.intr.notifications() > before, "the guest was interrupted");
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 8];
        assert_eq!(client.read(&mut b).unwrap(), 0, "the host client sees EOF");
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.evq), 1, "one event only");
        Box::new(h).detach();
        let ret: Returned = back.recv().unwrap();
        assert_eq!(ret.muxer.connections(), 0);
        assert_eq!(ret.queues.len(), 3);
        let _ = std::fs::remove_file(&r.path);
    }

    /// A REQUEST the guest leaves unanswered: the turn that sent it asks the iothread to wake
    /// it at the kill deadline (no fd will), and the turn then resets the connection.
    #[test]
    fn the_kill_timer_wakes_the_thread_and_resets_the_connection() {
        let (r, mut h, _back) = rig("killtimer");
        let mut client = UnixStream::connect(&r.path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        let end = h.run(64, &turn());
        let at = end
            .wake_at
            .expect("the thread is asked to wake at the deadline");
        let left = at.saturating_duration_since(std::time::Instant::now());
        assert!(left <= crate::vsock::conn::REQUEST_TIMEOUT, "{left:?}");
        // The deadline passes (the thread would sleep until then).
        std::thread::sleep(left + std::time::Duration::from_millis(10));
        let end = h.run(64, &turn());
        assert_eq!(end.wake_at, None, "no timer left");
        let mut b = [0u8; packet::HDR_LEN];
        r.mem.read_slice(&mut b, GuestAddress(0x5_0000)).unwrap();
        let rst = Header::from_bytes(&b);
        assert_eq!((rst.op(), rst.dst_port), (Some(Op::Rst), 52));
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(
            client.read(&mut buf).unwrap(),
            0,
            "the client sees end of file"
        );
        let _ = std::fs::remove_file(&r.path);
    }

    /// A guest rx buffer outside guest memory is returned empty before any host byte is read
    /// for it: the bytes the client wrote reach the guest's next good buffer, none lost.
    #[test]
    fn an_rx_buffer_outside_memory_costs_no_host_bytes() {
        let (r, mut h, _back) = rig("badrx");
        let mut client = open_connection(&r, &mut h);
        // The rig's second buffer takes a first message: the next buffer is the bad one.
        client.write_all(b"first").unwrap();
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.rxq), 2);
        let used0 = used_idx(&r.mem, &r.rxq);
        r.rxq
            .add_desc_chains(
                &[
                    desc(0xfff0_0000, 4096, F_WRITE, 0),
                    desc(0x8_0000, 4096, F_WRITE, 0),
                ],
                0,
            )
            .unwrap();
        client.write_all(b"every byte counts").unwrap();
        for _ in 0..3 {
            h.run(64, &turn());
        }
        assert!(used_idx(&r.mem, &r.rxq) > used0);
        // The good buffer after the bad one holds the data packet.
        let mut b = [0u8; packet::HDR_LEN];
        r.mem.read_slice(&mut b, GuestAddress(0x8_0000)).unwrap();
        let hdr = Header::from_bytes(&b);
        let mut found = None;
        if hdr.op() == Some(Op::Rw) {
            let mut d = vec![0u8; hdr.len as usize];
            r.mem
                .read_slice(&mut d, GuestAddress(0x8_0000 + packet::HDR_LEN as u64))
                .unwrap();
            found = Some(d);
        }
        assert_eq!(
            found.as_deref(),
            Some(&b"every byte counts"[..]),
            "bytes lost"
        );
        let _ = std::fs::remove_file(&r.path);
    }

    fn used_flags(mem: &GuestMemory, q: &MockSplitQueue<'_, GuestMemory>) -> u16 {
        mem.read_obj(q.used_addr()).unwrap()
    }

    /// `VRING_USED_F_NO_NOTIFY`.
    const NO_NOTIFY: u16 = 1;

    /// The guest's rx kicks (an exit each) are off while the device has buffers for what it
    /// holds, and on only while it waits for buffers; the refill then delivers what waited.
    #[test]
    fn rx_kicks_are_on_only_while_the_device_waits_for_buffers() {
        let (r, mut h, _back) = rig("rxkick");
        let mut client = open_connection(&r, &mut h);
        assert_eq!(
            used_flags(&r.mem, &r.rxq) & NO_NOTIFY,
            NO_NOTIFY,
            "buffers to spare: no kicks"
        );
        client.write_all(b"first").unwrap();
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.rxq), 2, "both buffers used");
        client.write_all(b"waits").unwrap();
        h.run(64, &turn());
        assert_eq!(
            used_flags(&r.mem, &r.rxq) & NO_NOTIFY,
            0,
            "out of buffers with bytes waiting: the refill must kick"
        );
        r.rxq
            .add_desc_chains(
                &[
                    desc(0x8_0000, 4096, F_WRITE, 0),
                    desc(0x9_0000, 4096, F_WRITE, 0),
                ],
                2,
            )
            .unwrap();
        assert!(h.poll(), "the refill is work");
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.rxq), 3, "the waiting bytes delivered");
        assert_eq!(used_flags(&r.mem, &r.rxq) & NO_NOTIFY, NO_NOTIFY);
        let _ = std::fs::remove_file(&r.path);
    }

    /// With `VIRTIO_RING_F_EVENT_IDX` (Linux's drivers) the device asks for the refill's kick
    /// through `avail_event`: set to the first buffer it lacks when it runs out.
    #[test]
    fn with_event_idx_running_out_of_rx_buffers_asks_for_the_next_one() {
        let (r, mut h, _back) = rig("rxkickidx");
        h.rx.queue.set_event_idx(true);
        let mut client = open_connection(&r, &mut h);
        client.write_all(b"first").unwrap();
        h.run(64, &turn());
        client.write_all(b"waits").unwrap();
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.rxq), 2);
        // avail_event follows the used ring's 16 entries.
        let avail_event: u16 = r
            .mem
            .read_obj(r.rxq.used_addr().unchecked_add(4 + 8 * 16))
            .unwrap();
        assert_eq!(avail_event, 2, "the guest's next buffer must kick");
        let _ = std::fs::remove_file(&r.path);
    }

    /// A guest that moves an avail index more than a queue's size ahead loses its device; the
    /// turn ends and the cheap check stops finding work (no spinning thread).
    #[test]
    fn an_avail_index_beyond_the_queue_size_fails_the_device_without_spinning() {
        for ring in [RX, TX] {
            let (r, mut h, _back) = rig(&format!("badidx{ring}"));
            let mut client = open_connection(&r, &mut h);
            let q = if ring == RX { &r.rxq } else { &r.txq };
            q.avail().idx().store(1000);
            client.write_all(b"host bytes").unwrap();
            let (done_tx, done) = mpsc::channel();
            let t = std::thread::spawn(move || {
                let end = h.run(64, &turn());
                let polled = h.poll();
                let _ = done_tx.send((end.stopped, polled));
            });
            let (stopped, polled) = done
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("queue {ring}: the turn did not end"));
            t.join().unwrap();
            assert!(stopped && !polled, "queue {ring}: the device goes on");
            assert!(r.intr.needs_reset(), "queue {ring}: no reset asked");
            let _ = std::fs::remove_file(&r.path);
        }
    }

    /// A guest that sends nothing but REQUESTs no host program takes: the device handles a
    /// period's budget of them, then leaves the tx ring alone (no work for the cheap check, no
    /// used entries) until the period is over.
    #[test]
    fn a_request_flood_pauses_the_tx_ring_until_the_period_ends() {
        use crate::vsock::flood::WASTED_PER_PERIOD;
        let (r, mut h, _back) = rig("flood");
        // However slow the run, one period.
        let period = std::time::Duration::from_secs(600);
        h.muxer.as_mut().unwrap().set_flood_period(period);
        let request = |port: u32| Header {
            src_cid: 3,
            dst_cid: HOST_CID,
            src_port: port,
            dst_port: 9, // nobody listens on <uds_path>_9
            len: 0,
            kind: TYPE_STREAM,
            op: Op::Request.code(),
            flags: 0,
            buf_alloc: 65536,
            fwd_cnt: 0,
        };
        // One descriptor (index 0), posted again and again (the mock's own posting does not
        // wrap around the ring).
        r.txq
            .desc_table()
            .store(0, desc(0x6_0000, 44, 0, 0))
            .unwrap();
        let post = |port: u32| {
            r.mem
                .write_slice(&request(port).to_bytes(), GuestAddress(0x6_0000))
                .unwrap();
            let idx_at = r.txq.avail_addr().unchecked_add(2);
            let idx: u16 = r.mem.read_obj(idx_at).unwrap();
            let slot = r
                .txq
                .avail_addr()
                .unchecked_add(4 + u64::from(idx % 16) * 2);
            r.mem.write_obj(0u16, slot).unwrap();
            r.mem.write_obj(idx.wrapping_add(1), idx_at).unwrap();
        };
        let mut sent = 0u32;
        while !h.muxer.as_ref().unwrap().tx_paused() && sent < 2 * WASTED_PER_PERIOD {
            post(1000 + sent);
            h.run(64, &turn());
            sent += 1;
        }
        assert_eq!(
            sent, WASTED_PER_PERIOD,
            "paused by the budget's last packet"
        );
        let used = used_idx(&r.mem, &r.txq);
        post(1);
        assert!(!h.poll(), "a paused ring is no work");
        let end = h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.txq), used, "nothing taken while paused");
        let wake = end.wake_at.expect("the pause's end wakes the thread");
        assert!(wake <= std::time::Instant::now() + period);
        // The thread's turn at the deadline.
        h.muxer.as_mut().unwrap().sweep(wake);
        assert!(h.poll(), "the ring has work again");
        h.run(64, &turn());
        assert_eq!(
            used_idx(&r.mem, &r.txq),
            used.wrapping_add(1),
            "taken after the pause"
        );
        let _ = std::fs::remove_file(&r.path);
    }

    /// A held device (a snapshot reading its state) writes nothing to guest memory however
    /// much the host sends; released, it delivers what waited.
    #[test]
    fn a_held_device_delivers_nothing_until_released() {
        let (r, mut h, _back) = rig("held");
        let mut client = open_connection(&r, &mut h);
        let rx_used = used_idx(&r.mem, &r.rxq);
        r.control.hold().set(HoldState::Held);
        client.write_all(b"while paused").unwrap();
        r.control.request_transport_reset();
        for _ in 0..3 {
            h.run(64, &turn());
        }
        assert!(!h.poll(), "a held device has no work");
        assert_eq!(
            used_idx(&r.mem, &r.rxq),
            rx_used,
            "nothing delivered while held"
        );
        assert_eq!(used_idx(&r.mem, &r.evq), 0, "no event while held");
        r.control.hold().set(HoldState::Open);
        h.run(64, &turn());
        assert_eq!(used_idx(&r.mem, &r.evq), 1, "the event once released");
        let _ = std::fs::remove_file(&r.path);
    }
}
