//! Guest memory restored from a memory file stays the guest's when someone changes that file.
//!
//! A restore maps the memory file `MAP_PRIVATE`: pages the guest has not written yet are the
//! file's page cache, so truncating the file under the VM takes them away (a host access gets
//! SIGBUS, the guest's reads find zeros: it crashes), and writing to it changes them. To keep
//! the VM whole, the restoring process holds a read lease on the file (`F_SETLEASE`): the
//! kernel then holds back any other process's `open` for writing or `truncate` of it (for up to
//! `/proc/sys/fs/lease-break-time`, 45 s by default), and tells the lease holder with a signal
//! (SIGIO, aimed at the control thread with `F_SETOWN_EX`). The control thread then pauses the
//! vCPUs, drains the iothreads (as a snapshot does), copies each RAM region into anonymous
//! memory moved over it with `mremap` (a copy-on-write break is not enough: truncation unmaps a
//! private mapping's copied pages too), resumes the guest, and releases the lease; the other
//! process's call goes ahead against a file the VM no longer maps. Memory then costs what a
//! booted VM's does.
//!
//! Without a lease (the file belongs to another user and the process lacks `CAP_LEASE`, or the
//! file system has no leases) the restore logs a warning: the file must not change while the VM
//! runs (docs/snapshot.md).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};

/// `fcntl`'s `F_SETOWN_EX` and `F_OWNER_TID` (not in the libc crate for glibc targets).
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex`.
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// Set by the signal handler when the kernel asks for the lease back.
static BREAKING: AtomicBool = AtomicBool::new(false);
static HANDLER: Once = Once::new();

/// SIGIO: the lease is being broken. Only an atomic store and a `write` to an eventfd, both
/// async-signal-safe.
extern "C" fn on_lease_break(_: libc::c_int) {
    BREAKING.store(true, Ordering::SeqCst);
    crate::control_loop::wake_from_signal();
}

fn install_handler() -> std::io::Result<()> {
    let mut result = Ok(());
    HANDLER.call_once(|| {
        // SAFETY: a zeroed `sigaction` is a valid value of the C struct; the handler only
        // stores an atomic and writes to an eventfd (async-signal-safe), and `sa_mask` is
        // initialised by `sigemptyset` before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_lease_break as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGIO, &action, std::ptr::null_mut()) != 0 {
                result = Err(std::io::Error::last_os_error());
            }
        }
    });
    result
}

/// `fcntl(fd, cmd, arg)` as a `Result`.
fn fcntl(file: &File, cmd: libc::c_int, arg: libc::c_long) -> std::io::Result<()> {
    // SAFETY: `file` is an open fd owned by the caller; the commands used here take an integer
    // argument, or (F_SETOWN_EX) the address of an `OwnerEx` that outlives the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), cmd, arg) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A read lease on the memory file a VM was restored from, held by its control thread.
#[derive(Debug)]
pub struct MemLease {
    file: File,
    /// Each RAM region's host address and length.
    regions: Vec<(usize, usize)>,
    held: bool,
}

impl MemLease {
    /// Takes a read lease on `file` (opened read-only) for the calling thread, the VM's
    /// control thread to be; `None` (with a warning) when the kernel refuses one.
    pub fn take(file: &File, mem: &GuestMemoryMmap) -> Option<MemLease> {
        let taken = file.try_clone().and_then(|file| {
            install_handler()?;
            let owner = OwnerEx {
                kind: F_OWNER_TID,
                // SAFETY: gettid has no preconditions.
                pid: unsafe { libc::gettid() },
            };
            fcntl(
                &file,
                F_SETOWN_EX,
                std::ptr::addr_of!(owner) as libc::c_long,
            )?;
            fcntl(&file, libc::F_SETLEASE, libc::F_RDLCK.into())?;
            Ok(file)
        });
        match taken {
            Ok(file) => Some(MemLease {
                file,
                regions: mem
                    .iter()
                    .filter_map(|r| {
                        let host = r.get_host_address(MemoryRegionAddress(0)).ok()?;
                        Some((host as usize, r.len() as usize))
                    })
                    .collect(),
                held: true,
            }),
            Err(e) => {
                log::warn!(
                    "memory file: no lease ({e}): writing to or truncating the memory file \
                     while this VM runs would change or take away its memory (docs/snapshot.md)"
                );
                None
            }
        }
    }

    /// Whether the kernel asks for the lease back (another process opens the file to write
    /// or truncates it): the control thread then pauses the vCPUs, drains the iothreads and
    /// calls [`MemLease::move_off_file`].
    pub fn is_breaking(&self) -> bool {
        self.held && BREAKING.load(Ordering::SeqCst)
    }

    /// Copies each RAM region into fresh anonymous memory moved over it (`mremap`: same
    /// address, so KVM's slots and the rings' pointers stay valid), then gives the lease back;
    /// returns the bytes moved. Call with the vCPUs paused and the iothreads drained: a write
    /// to guest memory during the copy would be lost. A region that cannot be moved stays on
    /// the file (the error names it).
    pub fn move_off_file(&mut self) -> std::io::Result<usize> {
        BREAKING.store(false, Ordering::SeqCst);
        let mut moved = 0;
        let mut result = Ok(());
        for &(addr, len) in &self.regions {
            match move_region(addr, len) {
                Ok(()) => moved += len,
                Err(e) => result = Err(e),
            }
        }
        if let Err(e) = fcntl(&self.file, libc::F_SETLEASE, libc::F_UNLCK.into()) {
            log::warn!("memory file: releasing the lease: {e}");
        }
        self.held = false;
        result.map(|()| moved)
    }
}

/// Replaces the mapping at `addr..addr + len` with anonymous memory holding the same bytes.
fn move_region(addr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: a fresh private anonymous mapping of `len` bytes at an address the kernel picks;
    // nothing else refers to it.
    let fresh = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if fresh == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `addr..addr + len` is a live guest memory mapping (the VM owns it for longer than
    // this lease) and `fresh` a distinct one of the same length; the caller has stopped every
    // writer of guest memory (vCPUs paused, iothreads drained), so the copy is whole.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, fresh.cast::<u8>(), len) };
    // SAFETY: moves the `fresh` mapping (ours, `len` bytes) onto `addr..addr + len`, which the
    // kernel unmaps first, in one step: readers of guest memory (a polling iothread) see the
    // old or the new pages, which hold the same bytes. The guest memory object keeps owning
    // (and at drop unmaps) that range.
    let at = unsafe {
        libc::mremap(
            fresh,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            addr as *mut libc::c_void,
        )
    };
    if at == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        // SAFETY: `fresh` is still ours (the move failed) and nothing refers to it.
        unsafe { libc::munmap(fresh, len) };
        return Err(e);
    }
    Ok(())
}
