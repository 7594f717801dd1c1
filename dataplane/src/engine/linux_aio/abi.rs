//! The Linux native AIO ABI (`linux/aio_abi.h`, x86-64) and its four system calls, wrapped in an
//! owned kernel context ([`AioContext`]) that also reads the completion ring `io_setup` maps into
//! the process (`struct aio_ring`), so completions can be reaped without `io_getevents`.

use std::cell::RefCell;
use std::io;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::engine::last_errno;

/// `IOCB_CMD_FDSYNC`.
pub(super) const IOCB_CMD_FDSYNC: u16 = 3;
/// `IOCB_CMD_PREADV`.
pub(super) const IOCB_CMD_PREADV: u16 = 7;
/// `IOCB_CMD_PWRITEV`.
pub(super) const IOCB_CMD_PWRITEV: u16 = 8;
/// `IOCB_FLAG_RESFD`: signal `aio_resfd` (an eventfd) on completion.
pub(super) const IOCB_FLAG_RESFD: u32 = 1;
/// `AIO_RING_MAGIC`: the kernel's completion ring layout.
pub(super) const AIO_RING_MAGIC: u32 = 0xa10a_10a1;
/// `AIO_RING_INCOMPAT_FEATURES`: the layout we understand.
const AIO_RING_INCOMPAT_FEATURES: u32 = 0;

/// `struct iocb` (little-endian: `aio_key` before `aio_rw_flags`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Iocb {
    pub aio_data: u64,
    pub aio_key: u32,
    pub aio_rw_flags: i32,
    pub aio_lio_opcode: u16,
    pub aio_reqprio: i16,
    pub aio_fildes: u32,
    pub aio_buf: u64,
    pub aio_nbytes: u64,
    pub aio_offset: i64,
    pub aio_reserved2: u64,
    pub aio_flags: u32,
    pub aio_resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct IoEvent {
    /// The iocb's `aio_data`.
    pub data: u64,
    /// The iocb's user address.
    pub obj: u64,
    /// Bytes transferred or a negative errno.
    pub res: i64,
    /// Secondary result (unused by reads, writes and fsync).
    pub res2: i64,
}

/// The header of `struct aio_ring` (fs/aio.c); `io_events[nr]` follow at `header_length`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AioRingHeader {
    pub id: u32,
    pub nr: u32,
    pub head: u32,
    pub tail: u32,
    pub magic: u32,
    pub compat_features: u32,
    pub incompat_features: u32,
    pub header_length: u32,
}

const _: () = {
    assert!(size_of::<Iocb>() == 64);
    assert!(offset_of!(Iocb, aio_data) == 0);
    assert!(offset_of!(Iocb, aio_key) == 8);
    assert!(offset_of!(Iocb, aio_rw_flags) == 12);
    assert!(offset_of!(Iocb, aio_lio_opcode) == 16);
    assert!(offset_of!(Iocb, aio_reqprio) == 18);
    assert!(offset_of!(Iocb, aio_fildes) == 20);
    assert!(offset_of!(Iocb, aio_buf) == 24);
    assert!(offset_of!(Iocb, aio_nbytes) == 32);
    assert!(offset_of!(Iocb, aio_offset) == 40);
    assert!(offset_of!(Iocb, aio_reserved2) == 48);
    assert!(offset_of!(Iocb, aio_flags) == 56);
    assert!(offset_of!(Iocb, aio_resfd) == 60);
    assert!(size_of::<IoEvent>() == 32);
    assert!(offset_of!(IoEvent, res) == 16);
    assert!(size_of::<AioRingHeader>() == 32);
    assert!(offset_of!(AioRingHeader, head) == 8);
    assert!(offset_of!(AioRingHeader, tail) == 12);
    assert!(offset_of!(AioRingHeader, magic) == 16);
};

/// A kernel AIO context (`aio_context_t`, the address of its completion ring); destroyed on drop,
/// or kept for reuse on its thread once its owner said it is drained ([`AioContext::drained`]).
#[derive(Debug)]
pub(super) struct AioContext {
    id: u64,
    /// The ring at `id` has the layout we know (magic and incompatible features checked).
    ring_ok: bool,
    /// The `nr_events` it was set up with.
    nr_events: u32,
    /// Nothing of it is in the kernel and its ring is empty: `drop` may keep it for reuse.
    drained: bool,
}

/// Drained contexts a thread keeps for its next engines: a device reset drops each queue's
/// engine on the iothread and the guest's re-initialisation opens them again there. A kept
/// context costs neither `io_setup` nor `io_destroy`, which waits for an RCU grace period
/// (32-79 ms on the kvm_pvm dev machine) with the thread and every queue it serves; and a guest
/// that resets its device again and again holds no more contexts than it had.
const SPARES_PER_THREAD: usize = 16;

thread_local! {
    /// This thread's kept contexts (see [`SPARES_PER_THREAD`]); destroyed with the thread.
    static SPARES: RefCell<Vec<AioContext>> = const { RefCell::new(Vec::new()) };
}

impl AioContext {
    /// A context of `nr_events`: one this thread kept, else `io_setup(nr_events)`.
    pub(super) fn setup(nr_events: u32) -> io::Result<AioContext> {
        let kept = SPARES
            .try_with(|spares| {
                let mut spares = spares.borrow_mut();
                let at = spares.iter().position(|c| c.nr_events == nr_events)?;
                Some(spares.swap_remove(at))
            })
            .ok()
            .flatten();
        if let Some(ctx) = kept {
            return Ok(ctx);
        }
        let mut id: u64 = 0;
        // SAFETY: io_setup writes one aio_context_t (an unsigned long, 8 bytes here) to `&mut id`,
        // which is live and zeroed as the kernel requires.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_setup,
                libc::c_uint::from(nr_events),
                &mut id as *mut u64,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut ctx = AioContext {
            id,
            ring_ok: false,
            nr_events,
            drained: false,
        };
        let h = ctx.header();
        ctx.ring_ok = h.magic == AIO_RING_MAGIC
            && h.incompat_features == AIO_RING_INCOMPAT_FEATURES
            && h.nr > 0
            && h.header_length as usize == size_of::<AioRingHeader>();
        Ok(ctx)
    }

    /// The ring's header as it is now.
    pub(super) fn header(&self) -> AioRingHeader {
        // SAFETY: io_setup succeeded, so `id` is the address of the kernel-mapped ring, which
        // starts with this header and stays mapped until io_destroy in `drop`. A volatile read
        // because the kernel updates it concurrently.
        unsafe { std::ptr::read_volatile(self.id as *const AioRingHeader) }
    }

    /// Its owner reaped every request it submitted: if the ring is empty too, `drop` may keep the
    /// context for the thread's next engine instead of destroying it.
    pub(super) fn drained(&mut self) {
        self.drained = self.ring_ok && !self.ring_pending();
    }

    /// The kernel's address of the context (tests check that a kept context is reused).
    #[cfg(test)]
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// Completions can be read from the mapped ring.
    pub(super) fn ring_ok(&self) -> bool {
        self.ring_ok
    }

    fn head(&self) -> &AtomicU32 {
        // SAFETY: the ring header is mapped, 4-byte aligned (page-aligned base) and lives as long
        // as `self` (io_destroy in drop); the kernel and we access `head` only atomically.
        unsafe { AtomicU32::from_ptr((self.id as *mut u32).add(2)) }
    }

    fn tail(&self) -> &AtomicU32 {
        // SAFETY: as for `head`, at offset 12.
        unsafe { AtomicU32::from_ptr((self.id as *mut u32).add(3)) }
    }

    /// Completions wait in the ring (no syscall). Only meaningful when `ring_ok`.
    pub(super) fn ring_pending(&self) -> bool {
        self.ring_ok && self.head().load(Ordering::Relaxed) != self.tail().load(Ordering::Relaxed)
    }

    /// Moves up to `out.len()` events out of the mapped ring; returns how many.
    pub(super) fn ring_take(&self, out: &mut [IoEvent]) -> usize {
        if !self.ring_ok {
            return 0;
        }
        // SAFETY: `nr` is written once by io_setup and never changes.
        let nr = unsafe { std::ptr::read_volatile((self.id as *const u32).add(1)) };
        let mut n = 0;
        while n < out.len() {
            let head = self.head().load(Ordering::Relaxed);
            let tail = self.tail().load(Ordering::Acquire);
            if head == tail || head >= nr || tail >= nr {
                break;
            }
            let avail = if tail >= head { tail - head } else { nr - head };
            let take = (avail as usize).min(out.len() - n);
            // SAFETY: `head + take <= nr`, and the ring maps `nr` events after the header; the
            // acquire load of `tail` orders these reads after the kernel's writes of the events
            // (it publishes `tail` after an smp_wmb). `out[n..]` has room for `take` events.
            unsafe {
                let events = (self.id as *const u8)
                    .add(size_of::<AioRingHeader>())
                    .cast::<IoEvent>()
                    .add(head as usize);
                std::ptr::copy_nonoverlapping(events, out[n..].as_mut_ptr(), take);
            }
            n += take;
            // `take <= nr - head`, so this cannot overflow.
            let new_head = (head + take as u32) % nr;
            self.head().store(new_head, Ordering::Release);
        }
        n
    }

    /// `io_submit`: returns how many iocbs the kernel took, or the errno of the first one.
    ///
    /// # Safety
    /// Every pointer in `iocbs` points to a valid, writable `Iocb` whose buffers (the iovec array
    /// and the memory it describes) stay valid until its completion is reaped.
    pub(super) unsafe fn submit(&self, iocbs: &mut [*mut Iocb]) -> Result<usize, i32> {
        if iocbs.is_empty() {
            return Ok(0);
        }
        loop {
            // SAFETY: the caller guarantees the iocbs and their buffers (function contract);
            // `iocbs` is a live array of `len` pointers.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.id,
                    iocbs.len() as libc::c_long,
                    iocbs.as_mut_ptr(),
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = last_errno();
            if e != libc::EINTR {
                return Err(e);
            }
        }
    }

    /// `io_getevents(min_nr, out.len(), timeout)`; returns how many events were written.
    pub(super) fn getevents(
        &self,
        min_nr: usize,
        out: &mut [IoEvent],
        timeout: Duration,
    ) -> Result<usize, i32> {
        if out.is_empty() {
            return Ok(0);
        }
        let mut ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the kernel writes at most `out.len()` events into `out`, a live buffer, and
        // reads the live `ts`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.id,
                min_nr.min(out.len()) as libc::c_long,
                out.len() as libc::c_long,
                out.as_mut_ptr(),
                &mut ts as *mut libc::timespec,
            )
        };
        if r < 0 {
            Err(last_errno())
        } else {
            Ok(r as usize)
        }
    }
}

/// How many contexts this thread keeps now (tests).
#[cfg(test)]
pub(super) fn spares() -> usize {
    SPARES.with(|spares| spares.borrow().len())
}

/// Set once the process is about to exit: contexts dropped after that are left to the exit's
/// teardown (which does not wait), instead of `io_destroy`, which waits for an RCU grace period
/// (32 ms on the kvm_pvm dev machine) per context.
static LEFT_TO_EXIT: AtomicBool = AtomicBool::new(false);

/// Contexts dropped from now on are not destroyed: the process exits soon and that frees them.
pub(super) fn leave_to_exit() {
    LEFT_TO_EXIT.store(true, Ordering::Relaxed);
}

impl Drop for AioContext {
    fn drop(&mut self) {
        if LEFT_TO_EXIT.load(Ordering::Relaxed) {
            // The engine waited for its requests before this; the ring stays mapped until exit.
            return;
        }
        if self.drained {
            // A copy goes to the thread's list, and this one is not destroyed. During the
            // thread's exit the list is gone, and a full list takes no more: destroyed then.
            let kept = SPARES
                .try_with(|spares| {
                    let mut spares = spares.borrow_mut();
                    if spares.len() >= SPARES_PER_THREAD {
                        return false;
                    }
                    spares.push(AioContext {
                        id: self.id,
                        ring_ok: self.ring_ok,
                        nr_events: self.nr_events,
                        drained: false,
                    });
                    true
                })
                .unwrap_or(false);
            if kept {
                return;
            }
        }
        // SAFETY: `id` is our context; io_destroy unmaps the ring, which nothing uses after this.
        // It waits for requests still in the kernel, so none writes into freed iocbs later.
        let r = unsafe { libc::syscall(libc::SYS_io_destroy, self.id) };
        if r < 0 {
            log::warn!("LinuxAio: io_destroy: {}", io::Error::last_os_error());
        }
    }
}
