//! The one fault a frontend can cause after its memory table was checked: it shrinks a region's
//! file (`ftruncate`) while rings run on it, and the next touch of a page past the new end
//! raises `SIGBUS`. Nothing checked beforehand can prevent that, so the backend's `SIGBUS`
//! handler asks [`cover`] whether the faulting address lies in a frontend's mapping (the
//! ranges live here, registered by [`super::memory`] while a table is mapped, in lock-free
//! slots a signal handler may read); if so, the page is replaced by a private zero page and the
//! access goes on: that frontend's device reads zeros where its memory vanished (its requests
//! fail or its rings look empty), every other frontend and the backend go on. The replacement
//! pages go with the mapping when the connection ends.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Most ranges registered at once (8 regions for each of 8 connections); a table mapped while
/// every slot is taken runs unprotected (a fault in it is fatal and reported as such).
const SLOTS: usize = 64;

/// `(start, len)` of each registered range; `start == 0` marks a free slot.
static STARTS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LENS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

/// A range registered for [`cover`] until this is dropped (before the range is unmapped).
#[derive(Debug)]
pub struct Registration {
    slot: usize,
}

/// Registers `[start, start + len)`, a frontend's shared mapping; `None` when every slot is
/// taken (or the range is empty).
pub fn register(start: usize, len: usize) -> Option<Registration> {
    if start == 0 || len == 0 {
        return None;
    }
    for slot in 0..SLOTS {
        // The length first: a handler that sees the start sees its length.
        if STARTS[slot]
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            LENS[slot].store(len, Ordering::Release);
            STARTS[slot].store(start, Ordering::Release);
            return Some(Registration { slot });
        }
    }
    None
}

impl Drop for Registration {
    fn drop(&mut self) {
        STARTS[self.slot].store(0, Ordering::Release);
    }
}

/// Whether `addr` lies in a registered range.
fn registered(addr: usize) -> bool {
    (0..SLOTS).any(|slot| {
        let start = STARTS[slot].load(Ordering::Acquire);
        // usize::MAX: a slot being filled, not yet a range.
        start != 0
            && start != usize::MAX
            && addr >= start
            && addr - start < LENS[slot].load(Ordering::Acquire)
    })
}

/// For a `SIGBUS` handler: if `addr` (the fault's address) lies in a frontend's mapping, maps a
/// private zero page over its page and returns true (the faulting access may be retried);
/// false otherwise, or if the page cannot be replaced (a huge-page mapping). Only atomics and
/// `mmap`, both async-signal-safe.
pub fn cover(addr: usize) -> bool {
    if !registered(addr) {
        return false;
    }
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => return false,
    };
    let at = addr & !(page - 1);
    // SAFETY: the page lies inside a frontend's shared mapping (registered above), which this
    // process owns and only reaches through bounds-checked guest-memory accessors; replacing
    // one of its pages by a private zero page changes what those accessors see, never Rust
    // objects. The mapping's own munmap covers the replacement too.
    let mapped = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    mapped == at as *mut libc::c_void
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_registered_ranges_are_covered() {
        assert!(!registered(0x1234));
        let r = register(0x1000, 0x2000).expect("slot");
        assert!(registered(0x1000) && registered(0x2fff));
        assert!(!registered(0xfff) && !registered(0x3000));
        drop(r);
        assert!(!registered(0x1000));
        assert!(register(0, 0x1000).is_none());
    }
}
