//! One vsock stream connection between a guest socket and a host Unix socket: its state
//! machine (virtio 1.2, 5.10.6.4) and its credit-based flow control both ways.
//!
//! Host memory per connection is bounded: data from the guest waits where the guest put it (its
//! [`Span`]s) until the muxer flushes it at the end of the turn that took it (one write for all
//! of a turn's packets, straight from guest memory), and after that, copied into `to_host`, only
//! while the host socket will not take it; the guest may send at most the
//! `buf_alloc` this side advertises ([`HOST_BUF_ALLOC`]) beyond what was forwarded; a guest
//! that sends more is reset.
//! Data to the guest is read from the socket only as far as the guest's credit allows, so a
//! guest that never grants credit leaves the bytes in the kernel's socket buffer.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::num::Wrapping;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::packet::{Header, Op, HOST_CID, SHUTDOWN_RCV, SHUTDOWN_SEND, TYPE_STREAM};
use super::span::{self, Span, IOVECS_PER_WRITE};

/// The receive buffer this side advertises to the guest (`buf_alloc`).
pub const HOST_BUF_ALLOC: u32 = 256 * 1024;

/// How long the guest has to answer a REQUEST (Firecracker's `CONN_REQUEST_TIMEOUT_MS`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the guest has to end a connection after the host's SHUTDOWN (Firecracker's
/// `CONN_SHUTDOWN_TIMEOUT_MS`).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// A host client asked for it (`CONNECT`): a REQUEST is owed to the guest.
    LocalInit,
    /// The REQUEST went; the guest's RESPONSE (then `OK <port>` to the client) or RST is next.
    AwaitingResponse,
    /// The guest asked for it and the host socket connected: a RESPONSE is owed.
    PeerInit,
    /// Open both ways.
    Established,
    /// The guest shut down (SHUTDOWN flags) part of it; data flows where it may.
    PeerClosed {
        /// The guest will send nothing more.
        no_more_from_guest: bool,
        /// The guest will take nothing more.
        no_more_to_guest: bool,
    },
    /// Ended: an RST is owed to the guest (or none, if the guest ended it), then it goes.
    Closing {
        /// Whether an RST still has to go to the guest.
        rst_owed: bool,
    },
}

/// What a connection has for the guest next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outgoing {
    /// A control packet, no payload.
    Control(Op),
    /// Data may be read from the socket (credit and readiness allow).
    Data,
    /// Nothing.
    Nothing,
}

/// A connection.
#[derive(Debug)]
pub struct Connection {
    /// The host socket.
    pub stream: UnixStream,
    /// The guest's CID.
    pub guest_cid: u64,
    /// The host-side port.
    pub local_port: u32,
    /// The guest-side port.
    pub peer_port: u32,
    /// Where it is.
    pub state: ConnState,
    /// The guest's receive buffer.
    peer_buf_alloc: u32,
    /// What the guest has consumed of what it received.
    peer_fwd_cnt: Wrapping<u32>,
    /// Bytes sent to the guest.
    rx_cnt: Wrapping<u32>,
    /// Bytes from the guest handed to the host socket.
    fwd_cnt: Wrapping<u32>,
    /// Bytes from the guest received (forwarded or waiting in `to_host`).
    recv_cnt: Wrapping<u32>,
    /// `fwd_cnt` as last told to the guest.
    fwd_cnt_told: Wrapping<u32>,
    /// Guest data the host socket did not take by the end of the turn that brought it.
    to_host: VecDeque<u8>,
    /// This turn's guest data, after `to_host`'s bytes, where it lies in guest memory (from
    /// `pending_head` on); empty outside a turn (see [`span`]).
    pending: Vec<Span>,
    /// The first span of `pending` not written yet.
    pending_head: usize,
    /// Bytes in `pending[pending_head..]`.
    pending_len: usize,
    /// A control packet owed to the guest (besides the state's own).
    owed: Option<Op>,
    /// The socket may have bytes to read (edge-triggered: set on EPOLLIN, cleared on EAGAIN
    /// or a short read).
    pub readable: bool,
    /// The socket reported a hang-up: no edge comes again, so reads go on to end of file.
    hang_up_seen: bool,
    /// The host side reached end of file.
    host_eof: bool,
    /// When the connection is reset if the guest has not answered by then (its REQUEST, the
    /// host's SHUTDOWN).
    expiry: Option<Instant>,
    /// Reads and writes made on the host socket (for tests and profiles: each is a syscall).
    pub socket_calls: SocketCalls,
}

/// Syscalls a connection made on its host socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketCalls {
    /// Reads (`recv`).
    pub reads: u64,
    /// Writes (`send`, `writev`).
    pub writes: u64,
}

impl Connection {
    /// A connection in `state` over `stream`.
    pub fn new(
        stream: UnixStream,
        guest_cid: u64,
        local_port: u32,
        peer_port: u32,
        state: ConnState,
    ) -> Self {
        Self {
            stream,
            guest_cid,
            local_port,
            peer_port,
            state,
            peer_buf_alloc: 0,
            peer_fwd_cnt: Wrapping(0),
            rx_cnt: Wrapping(0),
            fwd_cnt: Wrapping(0),
            recv_cnt: Wrapping(0),
            fwd_cnt_told: Wrapping(0),
            to_host: VecDeque::new(),
            pending: Vec::new(),
            pending_head: 0,
            pending_len: 0,
            owed: None,
            readable: true,
            hang_up_seen: false,
            host_eof: false,
            expiry: None,
            socket_calls: SocketCalls::default(),
        }
    }

    /// A header from this side to the guest.
    pub fn header(&self, op: Op) -> Header {
        Header {
            src_cid: HOST_CID,
            dst_cid: self.guest_cid,
            src_port: self.local_port,
            dst_port: self.peer_port,
            len: 0,
            kind: TYPE_STREAM,
            op: op.code(),
            flags: 0,
            buf_alloc: HOST_BUF_ALLOC,
            fwd_cnt: self.fwd_cnt.0,
        }
    }

    /// Bytes the guest can still take.
    pub fn peer_credit(&self) -> u32 {
        let in_flight = (self.rx_cnt - self.peer_fwd_cnt).0;
        self.peer_buf_alloc.saturating_sub(in_flight)
    }

    /// Bytes waiting for the host socket.
    pub fn buffered(&self) -> usize {
        self.to_host.len() + self.pending_len
    }

    /// Whether it holds guest data where the guest put it (this turn's spans): the muxer must
    /// flush it before the turn ends.
    pub fn holds_spans(&self) -> bool {
        self.pending_len > 0
    }

    fn to_guest_open(&self) -> bool {
        match self.state {
            ConnState::Established => true,
            ConnState::PeerClosed {
                no_more_to_guest, ..
            } => !no_more_to_guest,
            _ => false,
        }
    }

    /// Whether data may still go to the guest (open that way, not reset).
    pub fn may_send_data(&self) -> bool {
        self.to_guest_open()
    }

    /// Ends the connection; an RST goes to the guest if `rst`.
    pub fn kill(&mut self, rst: bool) {
        if let ConnState::Closing { rst_owed } = self.state {
            self.state = ConnState::Closing {
                rst_owed: rst_owed && rst,
            };
            return;
        }
        self.state = ConnState::Closing { rst_owed: rst };
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Whether the connection is finished and may be dropped.
    pub fn is_done(&self) -> bool {
        self.state == ConnState::Closing { rst_owed: false }
    }

    /// What it has for the guest next.
    pub fn outgoing(&self) -> Outgoing {
        match self.state {
            ConnState::Closing { rst_owed: true } => return Outgoing::Control(Op::Rst),
            ConnState::Closing { rst_owed: false } => return Outgoing::Nothing,
            ConnState::LocalInit => return Outgoing::Control(Op::Request),
            ConnState::PeerInit => return Outgoing::Control(Op::Response),
            ConnState::AwaitingResponse => return Outgoing::Nothing,
            _ => {}
        }
        if let Some(op) = self.owed {
            return Outgoing::Control(op);
        }
        if self.to_guest_open() && self.readable && !self.host_eof && self.peer_credit() > 0 {
            return Outgoing::Data;
        }
        if self.host_eof && self.to_guest_open() {
            return Outgoing::Control(Op::Shutdown);
        }
        Outgoing::Nothing
    }

    /// The control packet [`Connection::outgoing`] named went to the guest.
    pub fn sent_control(&mut self, op: Op) {
        match (self.state, op) {
            (ConnState::Closing { .. }, Op::Rst) => {
                self.state = ConnState::Closing { rst_owed: false }
            }
            // Waiting for the guest's RESPONSE: the REQUEST went.
            (ConnState::LocalInit, Op::Request) => {
                self.state = ConnState::AwaitingResponse;
                self.expiry = Some(Instant::now() + REQUEST_TIMEOUT);
            }
            (ConnState::PeerInit, Op::Response) => self.state = ConnState::Established,
            (_, Op::Shutdown) => {
                // Host end of file told: nothing more to the guest.
                self.state = match self.state {
                    ConnState::PeerClosed {
                        no_more_from_guest, ..
                    } => ConnState::PeerClosed {
                        no_more_from_guest,
                        no_more_to_guest: true,
                    },
                    _ => ConnState::PeerClosed {
                        no_more_from_guest: false,
                        no_more_to_guest: true,
                    },
                };
                self.owed = None;
                self.expiry = Some(Instant::now() + SHUTDOWN_TIMEOUT);
            }
            _ => {
                if self.owed == Some(op) {
                    self.owed = None;
                }
            }
        }
        self.fwd_cnt_told = self.fwd_cnt;
    }

    /// The header to send for control packet `op` (SHUTDOWN carries both flags: the host side
    /// sends and takes nothing more once its socket hit end of file).
    pub fn control_header(&self, op: Op) -> Header {
        let mut h = self.header(op);
        if op == Op::Shutdown {
            h.flags = SHUTDOWN_RCV | SHUTDOWN_SEND;
        }
        h
    }

    /// Reads at most `room` bytes (capped by the guest's credit) from the socket into `buf`
    /// for an RW packet; returns the bytes read (0: nothing now). Marks end of file.
    pub fn read_data(&mut self, buf: &mut [u8], room: usize) -> usize {
        let n = room.min(self.peer_credit() as usize).min(buf.len());
        if n == 0 {
            return 0;
        }
        self.socket_calls.reads += 1;
        match self.stream.read(&mut buf[..n]) {
            Ok(0) => {
                self.host_eof = true;
                0
            }
            Ok(got) => {
                // Short of what was asked: the socket is empty now, and bytes that come later
                // raise a new edge, so no read to EAGAIN. After a hang-up no edge comes again:
                // read on to end of file.
                if got < n && !self.hang_up_seen {
                    self.readable = false;
                }
                self.rx_cnt += Wrapping(got as u32);
                self.fwd_cnt_told = self.fwd_cnt;
                got
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.readable = false;
                0
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => 0,
            Err(_) => {
                self.kill(true);
                0
            }
        }
    }

    /// Flushes what waits for the host socket: `to_host`'s two slices, then this turn's spans
    /// straight from guest memory, in one `writev` (more for a turn of many spans); what the
    /// socket does not take is copied into `to_host`, so no span outlives the call. Returns
    /// false if the socket is gone. Once the guest's SHUTDOWN said it sends no more and all is
    /// written, the socket's write side is shut down.
    pub fn flush_to_host(&mut self) -> bool {
        let gone = !self.write_out();
        self.spill_pending();
        if gone {
            return false;
        }
        self.maybe_credit_update();
        if self.to_host.is_empty() {
            self.guest_shutdown_reached_host();
        }
        true
    }

    /// Writes what waits, as far as the socket takes it; false if the socket is gone.
    fn write_out(&mut self) -> bool {
        // Bounded: a pass writes all it offered (at least one iovec of what waits) or is one of
        // the two short writes allowed (a short write leaves room for a second try only when
        // the socket took part of it).
        let passes = 3 + (self.pending.len() - self.pending_head) / (IOVECS_PER_WRITE - 2);
        let mut short = 0;
        for _ in 0..passes {
            if self.buffered() == 0 {
                break;
            }
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; IOVECS_PER_WRITE];
            let mut n_iov = 0;
            let mut offered = 0;
            let (a, b) = self.to_host.as_slices();
            for s in [a, b].into_iter().filter(|s| !s.is_empty()) {
                iov[n_iov] = libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                };
                n_iov += 1;
                offered += s.len();
            }
            for sp in self.pending[self.pending_head..]
                .iter()
                .take(IOVECS_PER_WRITE - n_iov)
            {
                iov[n_iov] = sp.iovec();
                n_iov += 1;
                offered += sp.len();
            }
            self.socket_calls.writes += 1;
            // SAFETY: the first `n_iov` iovecs describe `to_host`'s slices (borrowed for the
            // call) and spans whose memory `Span::new`'s contract keeps readable until they are
            // written or copied; the kernel only reads them.
            let r = unsafe {
                libc::writev(self.stream.as_raw_fd(), iov.as_ptr(), n_iov as libc::c_int)
            };
            if r < 0 {
                match std::io::Error::last_os_error().kind() {
                    ErrorKind::WouldBlock => break,
                    ErrorKind::Interrupted => continue,
                    _ => return false,
                }
            }
            if r == 0 {
                return false;
            }
            let n = r as usize;
            self.consume(n);
            self.fwd_cnt += Wrapping(n as u32);
            if n < offered {
                short += 1;
                if short == 2 {
                    break;
                }
            }
        }
        true
    }

    /// Drops the first `n` bytes of what waits (`to_host`'s, then the spans').
    fn consume(&mut self, n: usize) {
        let from_buffer = n.min(self.to_host.len());
        self.to_host.drain(..from_buffer);
        let mut left = n - from_buffer;
        self.pending_len -= left.min(self.pending_len);
        // Bounded by the spans.
        while left > 0 && self.pending_head < self.pending.len() {
            let sp = &mut self.pending[self.pending_head];
            if sp.len() <= left {
                left -= sp.len();
                self.pending_head += 1;
            } else {
                sp.advance(left);
                left = 0;
            }
        }
    }

    /// Copies the spans not written into `to_host` (the turn ends: their chains go back to the
    /// guest).
    fn spill_pending(&mut self) {
        for sp in &self.pending[self.pending_head..] {
            sp.copy_into(&mut self.to_host);
        }
        self.pending.clear();
        self.pending_head = 0;
        self.pending_len = 0;
    }

    /// Once nothing waits for the host socket, passes on the guest's SHUTDOWN: the host client
    /// reads end of file after the last byte (SEND), and a connection the guest closed both
    /// ways ends with an RST. Called again after every flush: data buffered when the SHUTDOWN
    /// came goes first.
    fn guest_shutdown_reached_host(&mut self) {
        if let ConnState::PeerClosed {
            no_more_from_guest: true,
            no_more_to_guest,
        } = self.state
        {
            if no_more_to_guest {
                self.kill(true);
            } else {
                let _ = self.stream.shutdown(std::net::Shutdown::Write);
            }
        }
    }

    /// Owes the guest a CREDIT_UPDATE once it has forwarded a good part of its window since it
    /// last told the guest.
    fn maybe_credit_update(&mut self) {
        if (self.fwd_cnt - self.fwd_cnt_told).0 >= HOST_BUF_ALLOC / 4 && self.owed.is_none() {
            self.owed = Some(Op::CreditUpdate);
        }
    }

    /// Takes packet `hdr` (with `payload`, where it lies) from the guest. Its data waits in
    /// the spans until [`Connection::flush_to_host`], which the muxer calls before the turn
    /// ends.
    pub fn from_guest(&mut self, hdr: &Header, payload: &[Span]) {
        self.peer_buf_alloc = hdr.buf_alloc;
        self.peer_fwd_cnt = Wrapping(hdr.fwd_cnt);
        let Some(op) = hdr.op() else {
            self.kill(true);
            return;
        };
        match (self.state, op) {
            (_, Op::Rst) => {
                // What the guest sent before its RST still goes to the host, as far as the
                // socket takes it now.
                let _ = self.flush_to_host();
                self.kill(false);
            }
            (ConnState::Closing { .. }, _) => {}
            (ConnState::AwaitingResponse, Op::Response) => {
                self.state = ConnState::Established;
                self.expiry = None;
                // Firecracker's protocol: the client learns the host-side port.
                let ok = format!("OK {}\n", self.local_port);
                if self.stream.write(ok.as_bytes()).ok() != Some(ok.len()) {
                    self.kill(true);
                }
            }
            (ConnState::LocalInit | ConnState::AwaitingResponse, _) => self.kill(true),
            (_, Op::Rw) => {
                let closed = matches!(
                    self.state,
                    ConnState::PeerClosed {
                        no_more_from_guest: true,
                        ..
                    }
                );
                let len = span::total(payload);
                let in_window = (self.recv_cnt - self.fwd_cnt).0 as usize + len;
                if closed || in_window > HOST_BUF_ALLOC as usize {
                    // Data past SHUTDOWN, or past the credit it was given.
                    self.kill(true);
                    return;
                }
                self.recv_cnt += Wrapping(len as u32);
                // Written by [`Connection::flush_to_host`] once the turn's packets are in:
                // one syscall for all of them.
                self.pending
                    .extend(payload.iter().copied().filter(|s| !s.is_empty()));
                self.pending_len += len;
            }
            (_, Op::CreditRequest) => self.owed = Some(Op::CreditUpdate),
            (_, Op::CreditUpdate) => {}
            (_, Op::Shutdown) => {
                let (mut from_guest, mut to_guest) = match self.state {
                    ConnState::PeerClosed {
                        no_more_from_guest,
                        no_more_to_guest,
                    } => (no_more_from_guest, no_more_to_guest),
                    _ => (false, false),
                };
                from_guest |= hdr.flags & SHUTDOWN_SEND != 0;
                to_guest |= hdr.flags & SHUTDOWN_RCV != 0;
                self.state = ConnState::PeerClosed {
                    no_more_from_guest: from_guest,
                    no_more_to_guest: to_guest,
                };
                // What waits for the host socket goes first: the end of file (and, closed both
                // ways, the RST) follows the flush that empties it, here or on EPOLLOUT.
                if !self.flush_to_host() {
                    self.kill(true);
                }
            }
            (_, Op::Request | Op::Response) => self.kill(true),
        }
    }

    /// When the connection is reset unless the guest answers first (see [`Connection::expire`]).
    pub fn expiry(&self) -> Option<Instant> {
        self.expiry
    }

    /// Resets the connection if its kill timer ran out by `now` (an RST goes to the guest);
    /// returns whether it did.
    pub fn expire(&mut self, now: Instant) -> bool {
        match self.expiry {
            Some(at) if at <= now && !matches!(self.state, ConnState::Closing { .. }) => {
                self.expiry = None;
                self.kill(true);
                true
            }
            _ => false,
        }
    }

    /// The host socket has bytes (EPOLLIN) or hung up (`hang_up`: EPOLLHUP/RDHUP; reading
    /// then goes on to end of file).
    pub fn host_readable(&mut self, hang_up: bool) {
        self.readable = true;
        self.hang_up_seen |= hang_up;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(state: ConnState) -> (Connection, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (Connection::new(a, 3, 1 << 30, 1234, state), b)
    }

    /// `bytes` as a packet's payload that lives as long as the test needs it (leaked).
    fn payload(bytes: &[u8]) -> [Span; 1] {
        [Span::of(Box::leak(bytes.to_vec().into_boxed_slice()))]
    }

    fn from_guest(op: Op, buf_alloc: u32, fwd_cnt: u32) -> Header {
        Header {
            src_cid: 3,
            dst_cid: HOST_CID,
            src_port: 1234,
            dst_port: 1 << 30,
            len: 0,
            kind: TYPE_STREAM,
            op: op.code(),
            flags: 0,
            buf_alloc,
            fwd_cnt,
        }
    }

    #[test]
    fn host_initiated_handshake_then_data() {
        let (mut c, mut peer) = pair(ConnState::LocalInit);
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Request));
        c.sent_control(Op::Request);
        assert_eq!(c.outgoing(), Outgoing::Nothing);
        c.from_guest(&from_guest(Op::Response, 4096, 0), &[]);
        assert_eq!(c.state, ConnState::Established);
        let mut ok = [0u8; 14];
        peer.read_exact(&mut ok).unwrap();
        assert_eq!(&ok, b"OK 1073741824\n");
        c.from_guest(&from_guest(Op::Rw, 4096, 0), &payload(b"ping"));
        // Written at the turn's flush, not before.
        assert_eq!(c.buffered(), 4);
        assert!(c.flush_to_host());
        assert_eq!(c.buffered(), 0);
        let mut b = [0u8; 4];
        peer.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        peer.write_all(b"pong").unwrap();
        assert_eq!(c.outgoing(), Outgoing::Data);
        let mut buf = [0u8; 100];
        assert_eq!(c.read_data(&mut buf, 100), 4);
    }

    #[test]
    fn a_short_read_ends_reading_until_the_next_edge_and_a_hang_up_reads_to_eof() {
        let (mut c, mut peer) = pair(ConnState::LocalInit);
        c.sent_control(Op::Request);
        c.from_guest(&from_guest(Op::Response, 4096, 0), &[]);
        let mut ok = [0u8; 14];
        peer.read_exact(&mut ok).unwrap();
        peer.write_all(b"pong").unwrap();
        c.host_readable(false);
        let mut buf = [0u8; 100];
        assert_eq!(c.read_data(&mut buf, 100), 4);
        assert_eq!(
            c.outgoing(),
            Outgoing::Nothing,
            "short read: empty until an edge"
        );
        assert_eq!(c.socket_calls.reads, 1, "no read to EAGAIN");
        // More bytes, then the client closes: its edge says so, reading goes on to EOF.
        peer.write_all(b"last").unwrap();
        drop(peer);
        c.host_readable(true);
        assert_eq!(c.outgoing(), Outgoing::Data);
        assert_eq!(c.read_data(&mut buf, 100), 4);
        assert_eq!(&buf[..4], b"last");
        assert_eq!(c.read_data(&mut buf, 100), 0);
        assert_ne!(c.outgoing(), Outgoing::Data, "end of file reached");
        assert!(c.host_eof);
    }

    #[test]
    fn a_guest_that_never_grants_credit_gets_nothing_and_host_memory_stays_bounded() {
        let (mut c, mut peer) = pair(ConnState::Established);
        c.from_guest(&from_guest(Op::CreditUpdate, 10, 0), &[]);
        peer.write_all(&[7u8; 100]).unwrap();
        let mut buf = [0u8; 100];
        assert_eq!(c.read_data(&mut buf, 100), 10);
        assert_eq!(c.peer_credit(), 0);
        assert_ne!(c.outgoing(), Outgoing::Data);
        assert_eq!(c.read_data(&mut buf, 100), 0);
        // The guest consumed 10: 10 more.
        c.from_guest(&from_guest(Op::CreditUpdate, 10, 10), &[]);
        assert_eq!(c.read_data(&mut buf, 100), 10);
    }

    #[test]
    fn a_guest_sending_past_its_credit_is_reset() {
        let (mut c, _peer) = pair(ConnState::Established);
        // The host side never reads: the socket buffer fills, then `to_host`.
        let chunk = vec![1u8; 64 * 1024];
        let mut sent = 0usize;
        for _ in 0..64 {
            c.from_guest(&from_guest(Op::Rw, 4096, 0), &payload(&chunk));
            sent += chunk.len();
            assert!(c.buffered() <= HOST_BUF_ALLOC as usize);
            if matches!(c.state, ConnState::Closing { .. }) {
                break;
            }
        }
        assert_eq!(c.state, ConnState::Closing { rst_owed: true }, "{sent}");
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Rst));
        c.sent_control(Op::Rst);
        assert!(c.is_done());
    }

    #[test]
    fn bogus_ops_and_a_second_request_reset() {
        let (mut c, _p) = pair(ConnState::Established);
        let mut h = from_guest(Op::Rw, 0, 0);
        h.op = 99;
        c.from_guest(&h, &[]);
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Rst));
        let (mut c, _p) = pair(ConnState::Established);
        c.from_guest(&from_guest(Op::Request, 0, 0), &[]);
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Rst));
    }

    #[test]
    fn host_eof_sends_shutdown_and_guest_shutdown_both_ways_resets() {
        let (mut c, peer) = pair(ConnState::Established);
        c.from_guest(&from_guest(Op::CreditUpdate, 4096, 0), &[]);
        drop(peer);
        let mut buf = [0u8; 16];
        assert_eq!(c.read_data(&mut buf, 16), 0);
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Shutdown));
        c.sent_control(Op::Shutdown);
        let mut h = from_guest(Op::Shutdown, 4096, 0);
        h.flags = SHUTDOWN_RCV | SHUTDOWN_SEND;
        c.from_guest(&h, &[]);
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Rst));
        // The guest's RST needs no answer.
        let (mut c, _p) = pair(ConnState::Established);
        c.from_guest(&from_guest(Op::Rst, 0, 0), &[]);
        assert!(c.is_done());
    }

    /// Fills the host socket until the connection buffers `to_host` bytes; returns every byte
    /// the guest sent.
    fn fill_until_buffered(c: &mut Connection) -> Vec<u8> {
        let mut sent = Vec::new();
        for i in 0..64u8 {
            let chunk = vec![i; 16 * 1024];
            c.from_guest(&from_guest(Op::Rw, 4096, 0), &payload(&chunk));
            sent.extend_from_slice(&chunk);
            if c.buffered() > 0 {
                return sent;
            }
        }
        panic!("the host socket never filled");
    }

    /// Reads `peer` until end of file (draining the connection as EPOLLOUT would).
    fn read_to_eof(c: &mut Connection, peer: &mut UnixStream) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        for _ in 0..10_000 {
            match peer.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if c.buffered() == 0 && c.flush_to_host() {
                        // Nothing left to flush and no end of file: the client waits forever.
                        if matches!(peer.read(&mut buf), Err(ref e) if e.kind() == ErrorKind::WouldBlock)
                        {
                            panic!("no end of file after {} bytes", got.len());
                        }
                    }
                    assert!(c.flush_to_host() || c.buffered() == 0);
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("never reached end of file");
    }

    /// The guest closes (SHUTDOWN both ways) while the host client is slow: what waits in
    /// `to_host` still reaches the client, then end of file, then the RST.
    #[test]
    fn a_guest_close_delivers_what_waits_for_the_host_then_resets() {
        let (mut c, mut peer) = pair(ConnState::Established);
        let sent = fill_until_buffered(&mut c);
        let mut h = from_guest(Op::Shutdown, 4096, 0);
        h.flags = SHUTDOWN_RCV | SHUTDOWN_SEND;
        c.from_guest(&h, &[]);
        let got = read_to_eof(&mut c, &mut peer);
        assert_eq!(got.len(), sent.len(), "bytes lost");
        assert!(got == sent, "bytes reordered");
        assert_eq!(c.outgoing(), Outgoing::Control(Op::Rst));
        c.sent_control(Op::Rst);
        assert!(c.is_done());
    }

    /// The guest shuts down its sending side while data waits for the slow host client: once
    /// it is flushed the client reads end of file (it would wait forever otherwise).
    #[test]
    fn a_guest_half_close_reaches_the_host_after_the_buffered_data() {
        let (mut c, mut peer) = pair(ConnState::Established);
        let sent = fill_until_buffered(&mut c);
        let mut h = from_guest(Op::Shutdown, 4096, 0);
        h.flags = SHUTDOWN_SEND;
        c.from_guest(&h, &[]);
        let got = read_to_eof(&mut c, &mut peer);
        assert_eq!(got.len(), sent.len(), "bytes lost");
        assert!(got == sent, "bytes reordered");
        // The host side may still send to the guest.
        peer.write_all(b"reply").unwrap();
        if let Outgoing::Control(op) = c.outgoing() {
            assert_eq!(op, Op::CreditUpdate);
            c.sent_control(op);
        }
        assert_eq!(c.outgoing(), Outgoing::Data);
        let mut buf = [0u8; 16];
        assert_eq!(c.read_data(&mut buf, 16), 5);
    }

    /// Data and the guest's SHUTDOWN(send) in one turn: the host reads the data, then end of
    /// file (the write side is shut once the flush has written everything).
    #[test]
    fn guest_shutdown_after_data_of_the_same_turn_reaches_the_host_after_the_data() {
        let (mut c, mut peer) = pair(ConnState::Established);
        c.from_guest(&from_guest(Op::Rw, 4096, 0), &payload(b"last words"));
        let mut h = from_guest(Op::Shutdown, 4096, 0);
        h.flags = SHUTDOWN_SEND;
        c.from_guest(&h, &[]);
        assert!(c.flush_to_host());
        peer.set_nonblocking(false).unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
    }

    #[test]
    fn credit_request_is_answered() {
        let (mut c, _p) = pair(ConnState::Established);
        c.from_guest(&from_guest(Op::CreditRequest, 0, 0), &[]);
        assert_eq!(c.outgoing(), Outgoing::Control(Op::CreditUpdate));
        c.sent_control(Op::CreditUpdate);
        assert_eq!(c.outgoing(), Outgoing::Nothing);
    }
}
