//! Linux native AIO for the engine: the kernel context comes from `vmm_sys_util::aio`
//! (`io_setup`, `io_submit`, `io_getevents`, `io_destroy`, the `iocb` and `io_event` layouts),
//! wrapped in [`AioContext`], which adds what the crate does not have:
//!
//! - reaping from the completion ring `io_setup` maps into the process (`struct aio_ring`,
//!   read by hand here). `vmm_sys_util` reads completions only through `io_getevents`, a
//!   syscall per reap; the mapped ring lets the iothread see and take completions while it
//!   polls without entering the kernel (the engine falls back to `io_getevents` when the ring
//!   has a layout we do not know);
//! - knowing when a context is drained, so that its iothread's pool ([`super::pool`]) may keep
//!   it for the thread's next engine instead of destroying it: `io_destroy` waits for an RCU
//!   grace period, during which the thread serves none of its queues.

use std::io;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use vmm_sys_util::aio::{self, IoContext};
pub(super) use vmm_sys_util::aio::{IoControlBlock as Iocb, IoEvent};

/// `IOCB_CMD_FDSYNC`, as the iocb's opcode field holds it.
pub(super) const IOCB_CMD_FDSYNC: u16 = aio::IOCB_CMD_FDSYNC as u16;
/// `IOCB_CMD_PREADV`.
pub(super) const IOCB_CMD_PREADV: u16 = aio::IOCB_CMD_PREADV as u16;
/// `IOCB_CMD_PWRITEV`.
pub(super) const IOCB_CMD_PWRITEV: u16 = aio::IOCB_CMD_PWRITEV as u16;
/// `IOCB_FLAG_RESFD`: signal `aio_resfd` (an eventfd) on completion.
pub(super) const IOCB_FLAG_RESFD: u32 = aio::IOCB_FLAG_RESFD;
/// `AIO_RING_MAGIC`: the kernel's completion ring layout.
pub(super) const AIO_RING_MAGIC: u32 = 0xa10a_10a1;
/// `AIO_RING_INCOMPAT_FEATURES`: the layout we understand.
const AIO_RING_INCOMPAT_FEATURES: u32 = 0;

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

// The kernel's layouts (linux/aio_abi.h, x86-64) of the fields this engine fills in and reads,
// and of the ring header.
const _: () = {
    assert!(size_of::<Iocb>() == 64);
    assert!(offset_of!(Iocb, aio_data) == 0);
    assert!(offset_of!(Iocb, aio_lio_opcode) == 16);
    assert!(offset_of!(Iocb, aio_fildes) == 20);
    assert!(offset_of!(Iocb, aio_buf) == 24);
    assert!(offset_of!(Iocb, aio_nbytes) == 32);
    assert!(offset_of!(Iocb, aio_offset) == 40);
    assert!(offset_of!(Iocb, aio_flags) == 56);
    assert!(offset_of!(Iocb, aio_resfd) == 60);
    assert!(size_of::<IoEvent>() == 32);
    assert!(offset_of!(IoEvent, data) == 0);
    assert!(offset_of!(IoEvent, res) == 16);
    assert!(size_of::<AioRingHeader>() == 32);
    assert!(offset_of!(AioRingHeader, head) == 8);
    assert!(offset_of!(AioRingHeader, tail) == 12);
    assert!(offset_of!(AioRingHeader, magic) == 16);
    // `ring_address` reads the context's one field.
    assert!(size_of::<IoContext>() == size_of::<libc::c_ulong>());
};

/// The address of `ctx`'s completion ring: its `aio_context_t`, which `vmm_sys_util` keeps in a
/// private field.
fn ring_address(ctx: &IoContext) -> u64 {
    // vmm-sys-util 0.15's `IoContext::new` hands `&mut ctx as *mut Self` to io_setup as the
    // `c_ulong` it fills in, which is why the type is `#[repr(transparent)]` over it.
    let ptr = (ctx as *const IoContext).cast::<libc::c_ulong>();
    // SAFETY: `IoContext` is a transparent `c_ulong` (above; the assertion checks it has no
    // other data) and `ctx` a live reference: an initialised, aligned `c_ulong`.
    let id: libc::c_ulong = unsafe { *ptr };
    id as u64
}

/// A kernel AIO context and its mapped completion ring; destroyed on drop (`io_destroy`, which
/// waits for requests still in the kernel), or handed back to its pool once its owner said it
/// is drained ([`AioContext::drained`]).
#[derive(Debug)]
pub(super) struct AioContext {
    /// The kernel context: `io_submit` and `io_getevents` go through it, and dropping it is
    /// `io_destroy`.
    io: IoContext,
    /// The address of the completion ring (the context's id).
    ring: u64,
    /// The ring at `ring` has the layout we know (magic and incompatible features checked).
    ring_ok: bool,
    /// The `nr_events` it was set up with.
    nr_events: u32,
    /// Nothing of it is in the kernel and its ring is empty: its pool may keep it for reuse.
    drained: bool,
}

impl AioContext {
    /// A new context of `nr_events` (`io_setup`).
    pub(super) fn setup(nr_events: u32) -> io::Result<AioContext> {
        let io = IoContext::new(nr_events)?;
        let mut ctx = AioContext {
            ring: ring_address(&io),
            io,
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
        // SAFETY: io_setup succeeded, so `ring` is the address of the kernel-mapped ring, which
        // starts with this header and stays mapped until io_destroy (the drop of `io`). A
        // volatile read because the kernel updates it concurrently.
        unsafe { std::ptr::read_volatile(self.ring as *const AioRingHeader) }
    }

    /// Its owner reaped every request it submitted: if the ring is empty too, its pool may keep
    /// the context for the thread's next engine instead of destroying it.
    pub(super) fn drained(&mut self) {
        self.drained = self.ring_ok && !self.ring_pending();
    }

    /// Whether [`AioContext::drained`] found it reusable; taking it for a new owner clears it.
    pub(super) fn take_drained(&mut self) -> bool {
        std::mem::take(&mut self.drained)
    }

    /// The `nr_events` it was set up with.
    pub(super) fn nr_events(&self) -> u32 {
        self.nr_events
    }

    /// Leaves the context to the process exit: no `io_destroy` (its ring stays mapped until
    /// then). For a process about to exit, which frees contexts without waiting.
    pub(super) fn leave_to_exit(self) {
        std::mem::forget(self);
    }

    /// The kernel's address of the context (tests check that a kept context is reused).
    #[cfg(test)]
    pub(super) fn id(&self) -> u64 {
        self.ring
    }

    /// Completions can be read from the mapped ring.
    pub(super) fn ring_ok(&self) -> bool {
        self.ring_ok
    }

    fn head(&self) -> &AtomicU32 {
        // SAFETY: the ring header is mapped, 4-byte aligned (page-aligned base) and lives as long
        // as `self` (io_destroy when `io` drops); the kernel and we access `head` only
        // atomically.
        unsafe { AtomicU32::from_ptr((self.ring as *mut u32).add(2)) }
    }

    fn tail(&self) -> &AtomicU32 {
        // SAFETY: as for `head`, at offset 12.
        unsafe { AtomicU32::from_ptr((self.ring as *mut u32).add(3)) }
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
        let nr = unsafe { std::ptr::read_volatile((self.ring as *const u32).add(1)) };
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
                let events = (self.ring as *const u8)
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

    /// `io_submit` (again after EINTR): returns how many iocbs the kernel took, or the errno of
    /// the first one.
    ///
    /// # Safety
    /// Every pointer in `iocbs` points to a valid, writable `Iocb`, none twice, that nothing
    /// else accesses during the call, and whose buffers (the iovec array and the memory it
    /// describes) stay valid until its completion is reaped.
    pub(super) unsafe fn submit(&self, iocbs: &[*mut Iocb]) -> Result<usize, i32> {
        if iocbs.is_empty() {
            return Ok(0);
        }
        // `vmm_sys_util` takes `&mut` references; they live only while `iocbs` is borrowed here.
        let refs = iocbs.as_ptr().cast::<&mut Iocb>();
        // SAFETY: `*mut Iocb` and `&mut Iocb` have one layout; the caller guarantees each pointer
        // valid, distinct and unaliased for the call (function contract), as `&mut` requires.
        let iocbs: &[&mut Iocb] = unsafe { std::slice::from_raw_parts(refs, iocbs.len()) };
        loop {
            match self.io.submit(iocbs) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(errno(&e)),
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
        let min_nr = min_nr.min(out.len()) as libc::c_long;
        self.io
            .get_events(min_nr, out, Some(&mut ts))
            .map_err(|e| errno(&e))
    }
}

/// The errno of a failed AIO call (EIO if it somehow has none).
fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}
