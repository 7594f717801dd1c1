//! The host side of the vsock device: Firecracker's hybrid vsock over Unix sockets. A client
//! connects to `uds_path` and writes `CONNECT <port>\n` (or `connect`); when the guest accepts,
//! it reads `OK <host_port>\n` and the stream is the guest's socket. A guest connecting to the
//! host's port P reaches the program listening on `<uds_path>_P`.
//!
//! The muxer owns the listener, the clients still sending their `CONNECT` line, and every
//! [`Connection`], all watched by its own epoll fd (edge-triggered), which is the one fd the
//! iothread watches for it. Everything is bounded: connections ([`MAX_CONNS`]), clients yet to
//! name a port ([`MAX_PENDING`]), RSTs owed for unknown connections ([`MAX_ORPHAN_RSTS`]; a
//! flood of bogus packets drops the excess), and work per call.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{ErrorKind, Read};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use super::conn::{ConnState, Connection, Outgoing};
use super::flood::FloodGuard;
use super::packet::{Header, Op, HOST_CID, TYPE_STREAM};
use super::span::Span;

/// Connections at once.
pub const MAX_CONNS: usize = 1024;
/// Clients connected to `uds_path` that have not sent their `CONNECT` line yet.
pub const MAX_PENDING: usize = 128;
/// RSTs owed to the guest for packets of no connection.
pub const MAX_ORPHAN_RSTS: usize = 256;
/// The longest `CONNECT <port>\n` line.
const MAX_LINE: usize = 32;
/// epoll events taken per call.
const EVENTS: usize = 64;
/// The first host-side port given to host-initiated connections.
const FIRST_LOCAL_PORT: u32 = 1 << 30;
/// How soon the muxer accepts again after an accept failed for want of fds or memory (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM): the clients stay queued in the backlog, and no new edge comes for
/// them unless another client connects.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Why the muxer could not start.
#[derive(Debug, thiserror::Error)]
pub enum MuxerError {
    /// Binding `uds_path`.
    #[error("binding the vsock socket {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Creating or filling the epoll set.
    #[error("vsock epoll set-up: {0}")]
    Epoll(#[source] std::io::Error),
}

/// A connection's key: (host-side port, guest-side port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnKey {
    /// Host-side port.
    pub local: u32,
    /// Guest-side port.
    pub peer: u32,
}

/// What an fd in the epoll set is.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Listener,
    /// A client yet to send its `CONNECT` line.
    Pending,
    Conn(ConnKey),
}

/// A client yet to send its `CONNECT` line.
#[derive(Debug)]
struct PendingClient {
    stream: UnixStream,
    line: Vec<u8>,
}

/// The host side of one vsock device. Dropping it does not remove `uds_path`: it may drop on
/// an iothread, whose seccomp filter has no `unlink`; the VMM removes the socket when the VM
/// stops (`vmm::vm::running`).
#[derive(Debug)]
pub struct Muxer {
    guest_cid: u64,
    uds_path: PathBuf,
    listener: UnixListener,
    epoll: Epoll,
    entries: HashMap<RawFd, Entry>,
    pending: HashMap<RawFd, PendingClient>,
    /// Arrival order of `pending`, to drop the oldest when full.
    pending_order: VecDeque<RawFd>,
    conns: HashMap<ConnKey, Connection>,
    ready: VecDeque<ConnKey>,
    queued: HashSet<ConnKey>,
    orphan_rsts: VecDeque<Header>,
    next_port: u32,
    events: Vec<EpollEvent>,
    /// The last accept batch ended full: the backlog may hold more clients, and no new edge
    /// will say so.
    accept_more: bool,
    /// An accept failed for want of resources: when to try again ([`ACCEPT_RETRY`]).
    accept_retry_at: Option<Instant>,
    /// Accepts have been failing since the last one that worked (logged once per episode).
    accept_failing: bool,
    /// Kill timers, in deadline order (every timeout is the same length): a connection's
    /// deadline when its REQUEST or SHUTDOWN went. An entry whose connection is gone or has a
    /// later deadline is dropped when it comes due.
    killq: VecDeque<(Instant, ConnKey)>,
    /// Connections the guest sent data to since the last [`Muxer::flush_to_host`].
    unflushed: Vec<ConnKey>,
    /// Bytes read from one connection's socket for the guest, handed out over as many rx
    /// packets as they need: one read per [`STAGE`] bytes rather than one per rx buffer.
    stage: Vec<u8>,
    /// Whose bytes `stage[start..end]` are.
    staged: Option<Staged>,
    /// What the guest's packets that lead nowhere may cost.
    flood: FloodGuard,
}

/// The part of the muxer's stage still owed to a connection's guest socket.
#[derive(Debug, Clone, Copy)]
struct Staged {
    key: ConnKey,
    start: usize,
    end: usize,
}

/// Bytes read from a host socket at once (Linux's largest packet payload: a guest with large rx
/// buffers takes it in one).
const STAGE: usize = super::packet::MAX_PAYLOAD;

/// Makes `stream` non-blocking with `fcntl` (std's `set_nonblocking` is an `ioctl`, which the
/// iothread's seccomp filter does not allow for sockets).
fn set_nonblocking(stream: &UnixStream) -> std::io::Result<()> {
    let fd = stream.as_raw_fd();
    // SAFETY: `fd` is a socket `stream` owns for the duration of the call; F_GETFL takes no
    // pointer.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFL takes an integer.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Connects to the Unix socket at `path` without blocking: a listener whose backlog is full
/// refuses at once (EAGAIN) instead of holding the iothread until its program accepts. The
/// socket comes back non-blocking.
fn connect_nonblocking(path: &std::ffi::OsStr) -> std::io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::FromRawFd;
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let bytes = path.as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::from(ErrorKind::InvalidInput));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    // SAFETY: socket() takes no pointer; the fd it returns is owned by the stream below.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nothing else owns; the stream closes it.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un that outlives the call, `len` within its size.
    let r = unsafe { libc::connect(fd, std::ptr::addr_of!(addr).cast(), len as libc::socklen_t) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stream)
}

/// Parses `CONNECT <port>` (any case of the verb); `line` without its newline.
pub fn parse_connect(line: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(line).ok()?;
    let s = s.strip_suffix('\r').unwrap_or(s);
    let (verb, port) = s.split_once(' ')?;
    if !verb.eq_ignore_ascii_case("connect") {
        return None;
    }
    port.trim().parse().ok()
}

impl Muxer {
    /// Binds `uds_path` (a stale socket file there is removed first), or takes the socket the
    /// pre-boot API bound there ([`super::prebound`]), for guest `guest_cid`.
    pub fn bind(guest_cid: u64, uds_path: &Path) -> Result<Self, MuxerError> {
        let bind_err = |source| MuxerError::Bind {
            path: uds_path.to_path_buf(),
            source,
        };
        let listener = match super::prebound::take(uds_path) {
            Some(listener) => listener,
            None => {
                super::prebound::remove_socket_file(uds_path);
                crate::uds::bind_listening(uds_path, None).map_err(bind_err)?
            }
        };
        listener.set_nonblocking(true).map_err(bind_err)?;
        let epoll = Epoll::new().map_err(MuxerError::Epoll)?;
        let fd = listener.as_raw_fd();
        epoll
            .ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(EventSet::IN | EventSet::EDGE_TRIGGERED, fd as u64),
            )
            .map_err(MuxerError::Epoll)?;
        let mut entries = HashMap::new();
        entries.insert(fd, Entry::Listener);
        Ok(Self {
            guest_cid,
            uds_path: uds_path.to_path_buf(),
            listener,
            epoll,
            entries,
            pending: HashMap::new(),
            pending_order: VecDeque::new(),
            conns: HashMap::new(),
            ready: VecDeque::new(),
            queued: HashSet::new(),
            orphan_rsts: VecDeque::new(),
            next_port: FIRST_LOCAL_PORT,
            events: vec![EpollEvent::default(); EVENTS],
            accept_more: false,
            accept_retry_at: None,
            accept_failing: false,
            killq: VecDeque::new(),
            unflushed: Vec::new(),
            stage: vec![0; STAGE],
            staged: None,
            flood: FloodGuard::default(),
        })
    }

    /// The fd that signals host-side work (the iothread watches it).
    pub fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// The bound path.
    pub fn uds_path(&self) -> &Path {
        &self.uds_path
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The host-socket syscalls of the open connections so far.
    pub fn socket_calls(&self) -> super::conn::SocketCalls {
        let mut t = super::conn::SocketCalls::default();
        for c in self.conns.values() {
            t.reads += c.socket_calls.reads;
            t.writes += c.socket_calls.writes;
        }
        t
    }

    /// Whether something may be owed to the guest (a cheap check, no syscall).
    pub fn has_rx(&self) -> bool {
        !self.orphan_rsts.is_empty() || !self.ready.is_empty() || self.staged.is_some()
    }

    fn mark(&mut self, key: ConnKey) {
        if self.queued.insert(key) {
            self.ready.push_back(key);
        }
    }

    fn orphan_rst(&mut self, to: &Header) {
        self.flood.wasted();
        if self.orphan_rsts.len() >= MAX_ORPHAN_RSTS {
            return;
        }
        self.orphan_rsts.push_back(Header {
            src_cid: HOST_CID,
            dst_cid: self.guest_cid,
            src_port: to.dst_port,
            dst_port: to.src_port,
            len: 0,
            kind: TYPE_STREAM,
            op: Op::Rst.code(),
            flags: 0,
            buf_alloc: 0,
            fwd_cnt: 0,
        });
    }

    fn remove(&mut self, key: ConnKey) {
        if let Some(c) = self.conns.remove(&key) {
            let fd = c.stream.as_raw_fd();
            self.entries.remove(&fd);
            let _ = self
                .epoll
                .ctl(ControlOperation::Delete, fd, EpollEvent::default());
        }
    }

    fn watch_conn(&mut self, fd: RawFd, key: ConnKey, op: ControlOperation) -> bool {
        let ev = EventSet::IN
            | EventSet::OUT
            | EventSet::READ_HANG_UP
            | EventSet::HANG_UP
            | EventSet::EDGE_TRIGGERED;
        if self
            .epoll
            .ctl(op, fd, EpollEvent::new(ev, fd as u64))
            .is_err()
        {
            return false;
        }
        self.entries.insert(fd, Entry::Conn(key));
        true
    }

    fn free_local_port(&mut self, peer: u32) -> Option<u32> {
        for _ in 0..=MAX_CONNS {
            let p = self.next_port;
            self.next_port = self.next_port.checked_add(1).unwrap_or(FIRST_LOCAL_PORT);
            if !self.conns.contains_key(&ConnKey { local: p, peer }) {
                return Some(p);
            }
        }
        None
    }

    /// Takes the host side's events (without blocking; at most [`EVENTS`] per call); returns
    /// true if it took as many as it could (more may wait).
    pub fn process_events(&mut self) -> bool {
        if self.accept_more {
            self.accept();
        }
        let n = match self.epoll.wait(0, &mut self.events) {
            Ok(n) => n,
            Err(_) => return false,
        };
        for i in 0..n {
            let ev = self.events[i];
            let fd = ev.fd();
            match self.entries.get(&fd).copied() {
                Some(Entry::Listener) => self.accept(),
                Some(Entry::Pending) => self.read_connect(fd),
                Some(Entry::Conn(key)) => {
                    let set = ev.event_set();
                    let Some(c) = self.conns.get_mut(&key) else {
                        continue;
                    };
                    if set.intersects(EventSet::IN | EventSet::READ_HANG_UP | EventSet::HANG_UP) {
                        c.host_readable(set.intersects(EventSet::READ_HANG_UP | EventSet::HANG_UP));
                    }
                    if set.contains(EventSet::OUT) && c.buffered() > 0 && !c.flush_to_host() {
                        c.kill(true);
                    }
                    self.mark(key);
                }
                None => {}
            }
        }
        n == EVENTS || self.accept_more
    }

    fn accept(&mut self) {
        // Edge-triggered: accept what is queued, at most a bounded number per call; a batch
        // that ends full leaves `accept_more` set, so `process_events` reports more and
        // accepts again at the next turn (no new edge comes for clients already queued).
        self.accept_more = true;
        for _ in 0..MAX_PENDING {
            let stream = match self.listener.accept() {
                Ok((s, _)) => {
                    self.accept_failing = false;
                    s
                }
                // That client gave up, or a signal came: the next one may be there.
                Err(e)
                    if e.kind() == ErrorKind::Interrupted
                        || e.raw_os_error() == Some(libc::ECONNABORTED) =>
                {
                    continue;
                }
                Err(e) => {
                    self.accept_more = false;
                    if e.kind() != ErrorKind::WouldBlock {
                        self.accept_failed(&e, Instant::now());
                    }
                    return;
                }
            };
            if set_nonblocking(&stream).is_err() {
                continue;
            }
            if self.pending.len() >= MAX_PENDING {
                if let Some(old) = self.pending_order.pop_front() {
                    self.drop_pending(old);
                }
            }
            let fd = stream.as_raw_fd();
            let ev = EventSet::IN | EventSet::READ_HANG_UP | EventSet::EDGE_TRIGGERED;
            if self
                .epoll
                .ctl(ControlOperation::Add, fd, EpollEvent::new(ev, fd as u64))
                .is_err()
            {
                continue;
            }
            self.entries.insert(fd, Entry::Pending);
            self.pending.insert(
                fd,
                PendingClient {
                    stream,
                    line: Vec::with_capacity(MAX_LINE),
                },
            );
            self.pending_order.push_back(fd);
            // The line may already be there.
            self.read_connect(fd);
        }
    }

    /// An accept failed with clients perhaps still queued: try again after [`ACCEPT_RETRY`]
    /// (through [`Muxer::next_deadline`] and [`Muxer::sweep`]), so none waits for another
    /// client's edge.
    fn accept_failed(&mut self, e: &std::io::Error, now: Instant) {
        if !std::mem::replace(&mut self.accept_failing, true) {
            log::warn!(
                "virtio-vsock: accepting on {}: {e}; retrying every {} ms",
                self.uds_path.display(),
                ACCEPT_RETRY.as_millis()
            );
        }
        self.accept_retry_at = Some(now + ACCEPT_RETRY);
    }

    fn drop_pending(&mut self, fd: RawFd) {
        self.pending.remove(&fd);
        self.entries.remove(&fd);
        self.pending_order.retain(|&f| f != fd);
        let _ = self
            .epoll
            .ctl(ControlOperation::Delete, fd, EpollEvent::default());
    }

    /// Reads a client's `CONNECT` line a byte at a time (what follows it is the stream's).
    fn read_connect(&mut self, fd: RawFd) {
        let Some(p) = self.pending.get_mut(&fd) else {
            return;
        };
        let mut done = None;
        for _ in 0..MAX_LINE {
            let mut b = [0u8; 1];
            match p.stream.read(&mut b) {
                Ok(0) => {
                    done = Some(None);
                    break;
                }
                Ok(_) if b[0] == b'\n' => {
                    done = Some(parse_connect(&p.line));
                    break;
                }
                Ok(_) => {
                    p.line.push(b[0]);
                    if p.line.len() >= MAX_LINE {
                        done = Some(None);
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    done = Some(None);
                    break;
                }
            }
        }
        let Some(port) = done else {
            return;
        };
        let Some(p) = self.pending.remove(&fd) else {
            return;
        };
        self.pending_order.retain(|&f| f != fd);
        self.entries.remove(&fd);
        let Some(port) = port else {
            // Not a CONNECT line (or the client left): closed, as Firecracker does.
            let _ = self
                .epoll
                .ctl(ControlOperation::Delete, fd, EpollEvent::default());
            return;
        };
        let local = match self.free_local_port(port) {
            Some(l) if self.conns.len() < MAX_CONNS => l,
            _ => {
                let _ = self
                    .epoll
                    .ctl(ControlOperation::Delete, fd, EpollEvent::default());
                return;
            }
        };
        let key = ConnKey { local, peer: port };
        if !self.watch_conn(fd, key, ControlOperation::Modify) {
            return;
        }
        self.conns.insert(
            key,
            Connection::new(p.stream, self.guest_cid, local, port, ConnState::LocalInit),
        );
        self.mark(key);
    }

    /// Takes packet `hdr` with `payload` (where it lies: see [`Span`]) from the guest's tx
    /// queue. Its data reaches the host socket at [`Muxer::flush_to_host`], which must come
    /// before the packet's chain goes back to the guest.
    pub fn from_guest(&mut self, hdr: &Header, payload: &[Span]) {
        // A source that is not the guest's CID is spoofed: dropped unanswered, since an RST
        // would be a packet for another CID.
        if hdr.src_cid != self.guest_cid {
            self.flood.wasted();
            return;
        }
        if hdr.dst_cid != HOST_CID || hdr.kind != TYPE_STREAM {
            if hdr.op() == Some(Op::Rst) {
                self.flood.wasted();
            } else {
                self.orphan_rst(hdr);
            }
            return;
        }
        let key = ConnKey {
            local: hdr.dst_port,
            peer: hdr.src_port,
        };
        if let Some(c) = self.conns.get_mut(&key) {
            let had_spans = c.holds_spans();
            c.from_guest(hdr, payload);
            if c.is_done() {
                self.remove(key);
            } else {
                if !had_spans && c.holds_spans() {
                    // Its spans must be written or copied before the turn's chains go back,
                    // whatever waited before them. At most once per connection between
                    // flushes (each empties the spans): bounded by MAX_CONNS.
                    self.unflushed.push(key);
                }
                self.mark(key);
            }
            return;
        }
        match hdr.op() {
            Some(Op::Request) => self.guest_connect(hdr, key),
            Some(Op::Rst) => self.flood.wasted(),
            _ => self.orphan_rst(hdr),
        }
    }

    /// Writes what the guest sent since the last call to the host sockets: one write per
    /// connection, however many packets it came in; what a socket does not take is copied out
    /// of guest memory, so every span taken since the last call is done with. A socket that is
    /// gone resets its connection; one that is full takes the rest when it signals room
    /// (EPOLLOUT).
    pub fn flush_to_host(&mut self) {
        let keys = std::mem::take(&mut self.unflushed);
        for &key in &keys {
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            if !c.flush_to_host() {
                c.kill(true);
            }
            self.mark(key);
        }
        // Keep the allocation for the next turn.
        self.unflushed = keys;
        self.unflushed.clear();
    }

    /// Whether a connection still holds guest data where the guest put it (never after
    /// [`Muxer::flush_to_host`]; checked before a turn's tx chains go back, in debug builds).
    pub fn holds_spans(&self) -> bool {
        self.conns.values().any(Connection::holds_spans)
    }

    /// The guest connects to host port `key.local`: `<uds_path>_<port>`.
    fn guest_connect(&mut self, hdr: &Header, key: ConnKey) {
        if self.conns.len() >= MAX_CONNS || !self.flood.may_connect() {
            self.orphan_rst(hdr);
            return;
        }
        let mut path = self.uds_path.clone().into_os_string();
        path.push(format!("_{}", key.local));
        // Not blocking: the iothread serves every device on it.
        let stream = match connect_nonblocking(&path) {
            Ok(s) => s,
            Err(_) => {
                self.flood.connect_failed();
                self.orphan_rst(hdr);
                return;
            }
        };
        if !self.watch_conn(stream.as_raw_fd(), key, ControlOperation::Add) {
            self.orphan_rst(hdr);
            return;
        }
        let mut c = Connection::new(
            stream,
            self.guest_cid,
            key.local,
            key.peer,
            ConnState::PeerInit,
        );
        c.from_guest(
            &Header {
                op: Op::CreditUpdate.code(),
                ..*hdr
            },
            &[],
        );
        self.conns.insert(key, c);
        self.mark(key);
    }

    /// The next packet for the guest, if any: its header (with `len` 0 for control packets),
    /// and for an RW packet its payload in `payload` (at most `room` bytes; cleared first).
    #[cfg(test)]
    pub fn next_rx(&mut self, room: usize, payload: &mut Vec<u8>) -> Option<Header> {
        payload.clear();
        let (h, p) = self.next_packet(room)?;
        payload.extend_from_slice(p);
        Some(h)
    }

    /// The next packet for the guest, if any: its header (`len` set) and its payload (empty
    /// for control packets; for an RW packet at most `room` bytes). Data is read from a host
    /// socket [`STAGE`] bytes at a time (as far as the guest's credit allows) and handed out
    /// from the stage over the next calls, before anything else but RSTs of no connection.
    pub fn next_packet(&mut self, room: usize) -> Option<(Header, &[u8])> {
        if let Some(h) = self.orphan_rsts.pop_front() {
            return Some((h, &[]));
        }
        if let Some(s) = self.staged {
            match self.conns.get(&s.key) {
                Some(c) if c.may_send_data() => {
                    let n = room.min(s.end - s.start);
                    if n > 0 {
                        let mut h = c.header(Op::Rw);
                        h.len = n as u32;
                        self.staged = (s.start + n < s.end).then_some(Staged {
                            start: s.start + n,
                            ..s
                        });
                        return Some((h, &self.stage[s.start..s.start + n]));
                    }
                }
                // Reset or gone: what it had staged is dropped with it.
                _ => self.staged = None,
            }
        }
        // Each connection is looked at most twice per call (a data read that found end of file
        // turns into a SHUTDOWN).
        for _ in 0..self.ready.len().saturating_mul(2) {
            let key = *self.ready.front()?;
            let Some(c) = self.conns.get_mut(&key) else {
                self.ready.pop_front();
                self.queued.remove(&key);
                continue;
            };
            match c.outgoing() {
                Outgoing::Control(op) => {
                    let h = c.control_header(op);
                    let before = c.expiry();
                    c.sent_control(op);
                    let armed = c.expiry().filter(|&at| Some(at) != before);
                    if c.is_done() {
                        self.ready.pop_front();
                        self.queued.remove(&key);
                        self.remove(key);
                    } else if c.outgoing() == Outgoing::Nothing {
                        self.ready.pop_front();
                        self.queued.remove(&key);
                    }
                    self.arm_kill_timer(key, armed);
                    return Some((h, &[]));
                }
                Outgoing::Data if self.staged.is_some() || room == 0 => {
                    // The stage is another connection's (or the buffer has no room for data):
                    // later, round robin.
                    self.ready.pop_front();
                    self.ready.push_back(key);
                }
                Outgoing::Data => {
                    let got = c.read_data(&mut self.stage, STAGE);
                    if got > 0 {
                        let n = room.min(got);
                        let mut h = c.header(Op::Rw);
                        h.len = n as u32;
                        if n < got {
                            self.staged = Some(Staged {
                                key,
                                start: n,
                                end: got,
                            });
                        }
                        // Round robin: to the back of the queue.
                        self.ready.pop_front();
                        self.ready.push_back(key);
                        return Some((h, &self.stage[..n]));
                    }
                }
                Outgoing::Nothing => {
                    self.ready.pop_front();
                    self.queued.remove(&key);
                }
            }
        }
        None
    }

    /// Resets the connections whose kill timer ran out by `now` (a REQUEST the guest never
    /// answered, a SHUTDOWN it never acknowledged: Firecracker's timers): the guest gets an
    /// RST, the host client end of file.
    pub fn sweep(&mut self, now: Instant) {
        self.flood.resume_if_due(now);
        if self.accept_retry_at.is_some_and(|at| at <= now) {
            self.accept_retry_at = None;
            self.accept();
        }
        // Bounded: each round pops an entry.
        while let Some(&(at, key)) = self.killq.front() {
            if at > now {
                break;
            }
            self.killq.pop_front();
            if self.conns.get_mut(&key).is_some_and(|c| c.expire(now)) {
                self.mark(key);
            }
        }
    }

    /// When [`Muxer::sweep`] has work next, if ever.
    pub fn next_deadline(&self) -> Option<Instant> {
        let kill = self.killq.front().map(|&(at, _)| at);
        [kill, self.accept_retry_at, self.flood.paused_until()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether the guest's tx ring waits: its packets that lead nowhere spent their budget
    /// ([`FloodGuard`]); [`Muxer::sweep`] ends the wait at [`Muxer::next_deadline`].
    pub fn tx_paused(&self) -> bool {
        self.flood.paused()
    }

    /// Counts a guest packet the device dropped unread (malformed).
    pub fn wasted_packet(&mut self) {
        self.flood.wasted();
    }

    /// Budgets the guest's packets that lead nowhere per `period` (tests: a run slower than
    /// [`super::flood::PERIOD`] must not start a new period).
    #[cfg(test)]
    pub fn set_flood_period(&mut self, period: Duration) {
        self.flood = FloodGuard::with_period(period);
    }

    /// Starts `key`'s kill timer if the control packet that just went set one.
    fn arm_kill_timer(&mut self, key: ConnKey, at: Option<Instant>) {
        let Some(at) = at else {
            return;
        };
        if self.killq.len() >= 2 * MAX_CONNS {
            // Connections come and go faster than their timers run out: forget the stale.
            let conns = &self.conns;
            self.killq
                .retain(|(t, k)| conns.get(k).is_some_and(|c| c.expiry() == Some(*t)));
        }
        self.killq.push_back((at, key));
    }

    /// Closes every connection without telling the guest (a device reset, a transport reset
    /// after a restore); the listener stays.
    pub fn reset(&mut self) {
        let keys: Vec<ConnKey> = self.conns.keys().copied().collect();
        for k in keys {
            self.remove(k);
        }
        self.ready.clear();
        self.queued.clear();
        self.orphan_rsts.clear();
        self.killq.clear();
        self.unflushed.clear();
        self.staged = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vsock::conn::SHUTDOWN_TIMEOUT;
    use std::io::Write;
    use std::time::Duration;

    fn sock_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("osprey-vsock-{}-{name}", std::process::id()))
    }

    fn guest(op: Op, src_port: u32, dst_port: u32) -> Header {
        Header {
            src_cid: 3,
            dst_cid: HOST_CID,
            src_port,
            dst_port,
            len: 0,
            kind: TYPE_STREAM,
            op: op.code(),
            flags: 0,
            buf_alloc: 65536,
            fwd_cnt: 0,
        }
    }

    fn drain(m: &mut Muxer) -> Vec<Header> {
        let mut out = Vec::new();
        let mut p = Vec::new();
        for _ in 0..100 {
            m.process_events();
            match m.next_rx(4096, &mut p) {
                Some(h) => out.push(h),
                None => break,
            }
        }
        out
    }

    #[test]
    fn parses_connect_lines() {
        assert_eq!(parse_connect(b"CONNECT 52"), Some(52));
        assert_eq!(parse_connect(b"connect 10789"), Some(10789));
        assert_eq!(parse_connect(b"CONNECT 52\r"), Some(52));
        assert_eq!(parse_connect(b"CONNECT"), None);
        assert_eq!(parse_connect(b"CONNECT -1"), None);
        assert_eq!(parse_connect(b"LISTEN 52"), None);
        assert_eq!(parse_connect(&[0xff, b' ', b'1']), None);
    }

    #[test]
    fn host_connect_refused_by_the_guest_closes_the_client() {
        let path = sock_path("refused");
        let mut m = Muxer::bind(3, &path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        let out = drain(&mut m);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].op(), Some(Op::Request));
        assert_eq!(out[0].dst_port, 52);
        let mut rst = guest(Op::Rst, 52, out[0].src_port);
        rst.buf_alloc = 0;
        m.from_guest(&rst, &[]);
        assert_eq!(m.connections(), 0);
        let mut b = [0u8; 8];
        assert_eq!(
            client.read(&mut b).unwrap(),
            0,
            "the client sees end of file"
        );
    }

    #[test]
    fn host_connect_accepted_gets_ok_and_data_flows() {
        let path = sock_path("ok");
        let mut m = Muxer::bind(3, &path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"connect 52\nhi").unwrap();
        let out = drain(&mut m);
        let local = out[0].src_port;
        m.from_guest(&guest(Op::Response, 52, local), &[]);
        let mut ok = vec![0u8; format!("OK {local}\n").len()];
        client.read_exact(&mut ok).unwrap();
        assert_eq!(ok, format!("OK {local}\n").as_bytes());
        // "hi" followed the line and is the stream's.
        let mut p = Vec::new();
        m.process_events();
        let h = m.next_rx(4096, &mut p).unwrap();
        assert_eq!((h.op(), h.len, p.as_slice()), (Some(Op::Rw), 2, &b"hi"[..]));
    }

    #[test]
    fn guest_connect_reaches_the_port_listener_or_is_reset() {
        let path = sock_path("gc");
        let mut m = Muxer::bind(3, &path).unwrap();
        // Nobody listens on port 7.
        m.from_guest(&guest(Op::Request, 1000, 7), &[]);
        let out = drain(&mut m);
        assert_eq!(out[0].op(), Some(Op::Rst));
        let lpath = PathBuf::from(format!("{}_7", path.display()));
        let _ = std::fs::remove_file(&lpath);
        let l = UnixListener::bind(&lpath).unwrap();
        m.from_guest(&guest(Op::Request, 1000, 7), &[]);
        let out = drain(&mut m);
        assert_eq!(out[0].op(), Some(Op::Response));
        let (mut s, _) = l.accept().unwrap();
        let mut rw = guest(Op::Rw, 1000, 7);
        rw.len = 3;
        m.from_guest(&rw, &[Span::of(b"abc")]);
        m.flush_to_host();
        let mut b = [0u8; 3];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"abc");
        let _ = std::fs::remove_file(&lpath);
    }

    #[test]
    fn a_flood_of_bogus_packets_is_bounded() {
        let path = sock_path("flood");
        let mut m = Muxer::bind(3, &path).unwrap();
        for i in 0..10_000u32 {
            let mut h = guest(Op::Rw, i, 5);
            if i % 2 == 0 {
                h.src_cid = 99;
            }
            m.from_guest(&h, &[]);
        }
        assert_eq!(m.orphan_rsts.len(), MAX_ORPHAN_RSTS);
        assert_eq!(m.connections(), 0);
        // Every RST goes to the guest's CID; the spoofed half got none.
        assert!(m
            .orphan_rsts
            .iter()
            .all(|h| h.dst_cid == 3 && h.dst_port % 2 == 1));
    }

    /// More clients than one accept batch connect before the iothread looks: every one of
    /// them gets its REQUEST to the guest (the listener is edge-triggered: no new event comes
    /// for the ones left in the backlog).
    #[test]
    fn a_burst_of_clients_larger_than_a_batch_is_all_accepted() {
        let path = sock_path("burst");
        let mut m = Muxer::bind(3, &path).unwrap();
        let clients: Vec<UnixStream> = (0..MAX_PENDING + 72)
            .map(|_| {
                let mut c = UnixStream::connect(&path).unwrap();
                c.write_all(b"CONNECT 52\n").unwrap();
                c
            })
            .collect();
        let mut requests = 0;
        let mut p = Vec::new();
        for _ in 0..10 {
            m.process_events();
            while let Some(h) = m.next_rx(4096, &mut p) {
                assert_eq!(h.op(), Some(Op::Request));
                requests += 1;
            }
        }
        assert_eq!(requests, clients.len());
        drop(m);
        let _ = std::fs::remove_file(&path);
    }

    /// An accept that failed for want of fds (EMFILE) leaves clients in the backlog with no edge
    /// to come: the muxer tries again after [`ACCEPT_RETRY`] and the client gets through.
    #[test]
    fn a_failed_accept_is_retried_on_a_timer() {
        let path = sock_path("emfile");
        let mut m = Muxer::bind(3, &path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        // The listener's edge is taken by an accept that failed (as EMFILE would make it).
        let mut events = vec![EpollEvent::default(); EVENTS];
        assert_eq!(m.epoll.wait(0, &mut events).unwrap(), 1);
        let now = Instant::now();
        m.accept_failed(&std::io::Error::from_raw_os_error(libc::EMFILE), now);
        assert!(drain(&mut m).is_empty(), "no edge: nothing yet");
        let at = m.next_deadline().expect("a retry is due");
        assert_eq!(at, now + ACCEPT_RETRY);
        m.sweep(at);
        let out = drain(&mut m);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].op(), Some(Op::Request));
        assert!(m.next_deadline().is_some(), "the REQUEST's kill timer");
        drop(m);
        let _ = std::fs::remove_file(&path);
    }

    /// The guest never answers a host client's REQUEST: after Firecracker's 2 s the connection
    /// is reset (RST to the guest, end of file to the client) and dropped; the client does not
    /// wait forever.
    #[test]
    fn an_unanswered_request_is_reset_after_its_timeout() {
        let path = sock_path("noanswer");
        let mut m = Muxer::bind(3, &path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        let out = drain(&mut m);
        assert_eq!(out[0].op(), Some(Op::Request));
        let at = m.next_deadline().expect("a kill timer runs");
        m.sweep(at - Duration::from_millis(1));
        assert!(drain(&mut m).is_empty(), "not before its time");
        m.sweep(at);
        let out = drain(&mut m);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!((out[0].op(), out[0].dst_port), (Some(Op::Rst), 52));
        assert_eq!(m.connections(), 0);
        let mut b = [0u8; 8];
        assert_eq!(
            client.read(&mut b).unwrap(),
            0,
            "the client sees end of file"
        );
        assert_eq!(m.next_deadline(), None);
        let _ = std::fs::remove_file(&path);
    }

    /// The host client closes; the guest gets SHUTDOWN and never answers: the connection (its
    /// fd, its buffers) is reset and dropped after the timeout instead of kept for ever.
    #[test]
    fn an_unacknowledged_host_close_is_reaped_after_its_timeout() {
        let path = sock_path("noack");
        let mut m = Muxer::bind(3, &path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"CONNECT 52\n").unwrap();
        let out = drain(&mut m);
        let local = out[0].src_port;
        m.from_guest(&guest(Op::Response, 52, local), &[]);
        let mut ok = vec![0u8; format!("OK {local}\n").len()];
        client.read_exact(&mut ok).unwrap();
        drop(client);
        let out = drain(&mut m);
        assert_eq!(
            out.last().and_then(Header::op),
            Some(Op::Shutdown),
            "{out:?}"
        );
        assert_eq!(m.connections(), 1);
        assert!(m.next_deadline().is_some(), "a kill timer runs");
        m.sweep(Instant::now() + SHUTDOWN_TIMEOUT - Duration::from_millis(100));
        assert!(drain(&mut m).is_empty(), "not before its time");
        m.sweep(Instant::now() + SHUTDOWN_TIMEOUT);
        let out = drain(&mut m);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].op(), Some(Op::Rst));
        assert_eq!(m.connections(), 0);
        let _ = std::fs::remove_file(&path);
    }

    /// A host program on `<uds_path>_P` that does not accept in time (its backlog full): the
    /// guest's connection is refused at once (RST); the iothread, which serves every device on
    /// it, does not wait for the program.
    #[test]
    fn a_full_listener_backlog_refuses_the_guest_without_blocking() {
        let path = sock_path("fullbacklog");
        let lpath = PathBuf::from(format!("{}_7", path.display()));
        let _ = std::fs::remove_file(&lpath);
        // A listener with the smallest backlog, never accepting, filled with clients.
        let listener = UnixListener::bind(&lpath).unwrap();
        // SAFETY: a listening socket the test owns; listen() takes no pointer.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
        let mut fillers = Vec::new();
        for _ in 0..16 {
            match connect_nonblocking(lpath.as_os_str()) {
                Ok(c) => fillers.push(c),
                Err(_) => break,
            }
        }
        assert!(!fillers.is_empty());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut m = Muxer::bind(3, &path).unwrap();
            m.from_guest(&guest(Op::Request, 1000, 7), &[]);
            let out = drain(&mut m);
            let _ = done_tx.send(out.iter().map(|h| h.op()).collect::<Vec<_>>());
            let _ = std::fs::remove_file(&path);
        });
        let ops = done_rx
            .recv_timeout(std::time::Duration::from_secs(3))
            .expect("the muxer blocked on the host program's full backlog");
        assert_eq!(ops, [Some(Op::Rst)]);
        drop(listener);
        let _ = std::fs::remove_file(&lpath);
    }

    #[test]
    fn garbage_instead_of_connect_closes_the_client() {
        let path = sock_path("garbage");
        let mut m = Muxer::bind(3, &path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(&[b'x'; 40]).unwrap();
        assert!(drain(&mut m).is_empty());
        let mut b = [0u8; 8];
        // Closed: end of file, or a reset (the bytes past the line were never read).
        assert!(matches!(client.read(&mut b), Ok(0) | Err(_)));
        drop(m);
        let _ = std::fs::remove_file(&path);
    }
}
