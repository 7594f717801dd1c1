//! The tap: opens `/dev/net/tun` as a tap named by the host (IFF_TAP | IFF_NO_PI |
//! IFF_VNET_HDR, IFF_MULTI_QUEUE when a NIC has several queue pairs), sets the virtio-net header
//! size to 12 (TUNSETVNETHDRSZ) and the offloads the guest accepted (TUNSETOFFLOAD), and moves
//! whole frames with `read`/`writev` on a non-blocking fd: a full tap queue answers EAGAIN
//! (the device back-pressures), an empty one EAGAIN too (nothing to receive).
//!
//! Opened by the VMM before the sandbox: the device only reads, writes and sets offloads.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};

use super::features;
use super::VNET_HDR_LEN;

/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `_IOW('T', 216, int)`.
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
/// `_IOW('T', 217, int)`: attaches or detaches one queue of a multi-queue tap.
pub const TUNSETQUEUE: libc::c_ulong = 0x4004_54d9;
const IFF_ATTACH_QUEUE: libc::c_short = 0x0200;
const IFF_DETACH_QUEUE: libc::c_short = 0x0400;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_UFO: libc::c_uint = 0x10;
/// `IFNAMSIZ`.
const IFNAMSIZ: usize = 16;

/// Why a tap could not be opened or configured.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// The name is empty, too long for an interface (15 bytes) or holds a NUL.
    #[error("tap name {0:?} is not a valid interface name (1 to 15 bytes, no NUL)")]
    Name(String),
    /// `/dev/net/tun` could not be opened.
    #[error("opening /dev/net/tun: {0}")]
    Open(#[source] std::io::Error),
    /// An ioctl on the tap failed.
    #[error("{what} on tap {name}: {source}")]
    Ioctl {
        /// The ioctl.
        what: &'static str,
        /// The tap.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// An open tap queue; for a multi-queue tap, the first queue, holding the others (one per
/// queue pair of the NIC).
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
    more: Vec<Tap>,
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags (a short) in the union.
#[repr(C)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tap {
    /// Opens (or creates, with CAP_NET_ADMIN) the tap `name`, non-blocking, with a 12-byte
    /// virtio-net header and no offloads yet. `multi_queue` opens one queue of a
    /// multi-queue tap (each call opens the next one).
    pub fn open(name: &str, multi_queue: bool) -> Result<Self, TapError> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= IFNAMSIZ || bytes.contains(&0) {
            return Err(TapError::Name(name.to_string()));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(TapError::Open)?;
        let mut req = IfReq {
            name: [0; IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
            _pad: [0; 22],
        };
        if multi_queue {
            req.flags |= IFF_MULTI_QUEUE;
        }
        req.name[..bytes.len()].copy_from_slice(bytes);
        let tap = Self {
            file,
            name: name.to_string(),
            more: Vec::new(),
        };
        // SAFETY: TUNSETIFF reads (and writes back) a `struct ifreq` of 40 bytes; `req` is one,
        // alive for the call.
        tap.ioctl("TUNSETIFF", |fd| unsafe {
            libc::ioctl(fd, TUNSETIFF as _, &mut req as *mut IfReq)
        })?;
        let size = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer; `size` outlives the call.
        tap.ioctl("TUNSETVNETHDRSZ", |fd| unsafe {
            libc::ioctl(fd, TUNSETVNETHDRSZ as _, &size as *const libc::c_int)
        })?;
        tap.set_offloads(0)?;
        Ok(tap)
    }

    /// Opens the tap `name` for `pairs` queue pairs: one queue as [`Tap::open`] for 1 (or 0),
    /// else `pairs` queues of a multi-queue tap (IFF_MULTI_QUEUE), the first holding the others.
    pub fn open_queues(name: &str, pairs: u16) -> Result<Self, TapError> {
        if pairs <= 1 {
            return Self::open(name, false);
        }
        let mut first = Self::open(name, true)?;
        for _ in 1..pairs {
            let q = Self::open(name, true)?;
            first.more.push(q);
        }
        Ok(first)
    }

    /// A tap over an fd that already moves whole frames (a tap the caller opened, or a
    /// `SOCK_SEQPACKET` socket in tests), non-blocking.
    pub fn from_file(file: File, name: &str) -> Self {
        Self {
            file,
            name: name.to_string(),
            more: Vec::new(),
        }
    }

    /// This tap with `more` as its queues after the first (tests build multi-queue taps from
    /// socket pairs this way).
    pub fn with_queues(mut self, more: Vec<Tap>) -> Self {
        self.more = more;
        self
    }

    /// Its queues: 1, or one per queue pair of a multi-queue tap.
    pub fn queue_count(&self) -> usize {
        1 + self.more.len()
    }

    /// Queue `k` (0: this one).
    pub fn queue(&self, k: usize) -> Option<&Tap> {
        match k {
            0 => Some(self),
            _ => self.more.get(k - 1),
        }
    }

    /// Attaches (`on`) or detaches this queue of a multi-queue tap (TUNSETQUEUE): the kernel
    /// steers no frame to a detached queue.
    pub fn set_attached(&self, on: bool) -> Result<(), TapError> {
        let mut req = IfReq {
            name: [0; IFNAMSIZ],
            flags: if on {
                IFF_ATTACH_QUEUE
            } else {
                IFF_DETACH_QUEUE
            },
            _pad: [0; 22],
        };
        // SAFETY: TUNSETQUEUE reads a `struct ifreq` of 40 bytes; `req` is one, alive for the
        // call.
        self.ioctl("TUNSETQUEUE", |fd| unsafe {
            libc::ioctl(fd, TUNSETQUEUE as _, &mut req as *mut IfReq)
        })
    }

    fn ioctl(
        &self,
        what: &'static str,
        call: impl FnOnce(RawFd) -> libc::c_int,
    ) -> Result<(), TapError> {
        if call(self.file.as_raw_fd()) < 0 {
            return Err(TapError::Ioctl {
                what,
                name: self.name.clone(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Sets the tap's offloads for the virtio-net features the driver accepted: the tap may hand
    /// the guest partial checksums and large segments only if the guest takes them.
    pub fn set_offloads(&self, acked: u64) -> Result<(), TapError> {
        let flags = tun_offloads(acked);
        // SAFETY: TUNSETOFFLOAD takes the flags by value; no memory is passed.
        self.ioctl("TUNSETOFFLOAD", |fd| unsafe {
            libc::ioctl(fd, TUNSETOFFLOAD as _, flags as libc::c_ulong)
        })
    }

    /// The tap's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A second handle on the same tap queue (for the iothread's handler); without the other
    /// queues of a multi-queue tap.
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            file: self.file.try_clone()?,
            name: self.name.clone(),
            more: Vec::new(),
        })
    }

    /// Reads one frame into `buf` (`read`, which every thread's seccomp filter allows); its
    /// length, or EAGAIN when none waits. A frame longer than `buf` is cut short by the kernel.
    pub fn read_frame(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        // SAFETY: `buf` is writable memory of `buf.len()` bytes the caller owns for the call.
        let r = unsafe { libc::read(self.file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(r).map_err(|_| std::io::Error::last_os_error())
    }

    /// Writes one frame gathered from the buffers; EAGAIN when the tap's queue is full.
    pub fn write_frame(&self, iov: &[libc::iovec]) -> std::io::Result<usize> {
        let n = iov.len().min(libc::UIO_MAXIOV as usize) as libc::c_int;
        // SAFETY: every iovec names readable memory (guest memory resolved by
        // `HostMemory::range`, kept mapped by the caller) for the call; `n` entries are read.
        let r = unsafe { libc::writev(self.file.as_raw_fd(), iov.as_ptr(), n) };
        usize::try_from(r).map_err(|_| std::io::Error::last_os_error())
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// The TUN_F_* offloads for the features the driver accepted (the guest's receive side).
pub fn tun_offloads(acked: u64) -> libc::c_uint {
    let mut flags = 0;
    if acked & features::GUEST_CSUM != 0 {
        flags |= TUN_F_CSUM;
        if acked & features::GUEST_TSO4 != 0 {
            flags |= TUN_F_TSO4;
        }
        if acked & features::GUEST_TSO6 != 0 {
            flags |= TUN_F_TSO6;
        }
        if acked & features::GUEST_UFO != 0 {
            flags |= TUN_F_UFO;
        }
    }
    flags
}

/// A connected pair of non-blocking `SOCK_SEQPACKET` sockets: each message one frame, as on a
/// tap, and a full buffer answers EAGAIN. The first is the device's "tap", the second the host's
/// end. For tests.
pub fn frame_pair() -> std::io::Result<(File, File)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two fds into `fds`, which has room for them.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_any_syscall() {
        for name in ["", "0123456789abcdef", "a\0b"] {
            assert!(matches!(Tap::open(name, false), Err(TapError::Name(_))));
        }
    }

    #[test]
    fn offloads_follow_the_guest_checksum_feature() {
        assert_eq!(tun_offloads(features::GUEST_TSO4), 0, "TSO needs CSUM");
        assert_eq!(
            tun_offloads(features::GUEST_CSUM | features::GUEST_TSO4 | features::GUEST_UFO),
            TUN_F_CSUM | TUN_F_TSO4 | TUN_F_UFO
        );
    }

    /// A real tap when the host allows it (root, /dev/net/tun): opened, configured, deleted
    /// with the fd (not persistent).
    #[test]
    fn a_tap_opens_with_a_vnet_header_when_the_host_allows() {
        let name = format!("osp{}", std::process::id() % 1_000_000);
        match Tap::open(&name, false) {
            Ok(tap) => {
                tap.set_offloads(features::GUEST_CSUM | features::GUEST_TSO4)
                    .expect("offloads");
                let mut buf = [0u8; 64];
                let e = tap.read_frame(&mut buf).expect_err("nothing yet");
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
            }
            Err(e) => eprintln!("no tap on this host: {e}"),
        }
    }

    /// A multi-queue tap when the host allows it: one queue per pair, each detachable and
    /// attachable again.
    #[test]
    fn a_multi_queue_tap_opens_one_queue_per_pair_when_the_host_allows() {
        let name = format!("ospq{}", std::process::id() % 1_000_000);
        match Tap::open_queues(&name, 3) {
            Ok(tap) => {
                assert_eq!(tap.queue_count(), 3);
                let q2 = tap.queue(2).expect("queue 2");
                q2.set_attached(false).expect("detach");
                q2.set_attached(true).expect("attach");
                assert!(tap.queue(3).is_none());
            }
            Err(e) => eprintln!("no tap on this host: {e}"),
        }
        assert_eq!(
            Tap::open_queues("", 1).map(|t| t.queue_count()).ok(),
            None,
            "a bad name is refused for one pair too"
        );
    }
}
