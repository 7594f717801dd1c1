//! Used-buffer notifications to the frontend: each ring's call eventfd (`SET_VRING_CALL`), the
//! frontend's irqfd. The iothread writes it once per round per queue; the frontend may swap it
//! at any time (QEMU does when the guest masks an MSI-X vector), so each slot sits behind a lock
//! that only a swap ever contends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use vmm_sys_util::eventfd::EventFd;

use crate::virtio::VirtioInterrupt;

/// The call eventfds of a connection's rings, and whether the device asked for a reset.
#[derive(Debug)]
pub struct CallFds {
    calls: Vec<RwLock<Option<EventFd>>>,
    needs_reset: AtomicBool,
}

impl CallFds {
    /// Slots for `rings` rings, all without an eventfd.
    pub fn new(rings: usize) -> Self {
        Self {
            calls: (0..rings).map(|_| RwLock::new(None)).collect(),
            needs_reset: AtomicBool::new(false),
        }
    }

    /// Sets (or, with `None`, clears) ring `index`'s call eventfd. False if there is no such ring.
    pub fn set(&self, index: usize, fd: Option<EventFd>) -> bool {
        let Some(slot) = self.calls.get(index) else {
            return false;
        };
        *slot.write().unwrap_or_else(|p| p.into_inner()) = fd;
        true
    }

    /// Clears every call eventfd and the reset request (a new connection or a device reset).
    pub fn clear(&self) {
        for i in 0..self.calls.len() {
            self.set(i, None);
        }
        self.needs_reset.store(false, Ordering::Relaxed);
    }

    /// Whether ring `index` has a call eventfd.
    pub fn has(&self, index: usize) -> bool {
        self.calls
            .get(index)
            .is_some_and(|s| s.read().unwrap_or_else(|p| p.into_inner()).is_some())
    }

    /// Whether a queue broke since the last [`CallFds::clear`] (the device needs a reset).
    pub fn needs_reset(&self) -> bool {
        self.needs_reset.load(Ordering::Relaxed)
    }
}

impl VirtioInterrupt for CallFds {
    fn notify_queue(&self, queue: u16) -> std::io::Result<()> {
        let Some(slot) = self.calls.get(usize::from(queue)) else {
            return Ok(());
        };
        match slot.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(fd) => fd.write(1),
            // No call fd (the frontend polls the used ring, or is swapping it): nothing to ring.
            None => Ok(()),
        }
    }

    fn notify_config(&self) -> std::io::Result<()> {
        // A config interrupt needs the backend-request channel (`BACKEND_REQ`), not offered.
        Ok(())
    }

    fn set_needs_reset(&self) {
        // vhost-user has no DEVICE_NEEDS_RESET status without the backend channel: the broken
        // queue stops (its fds leave the iothread) until the frontend stops or resets the ring.
        if !self.needs_reset.swap(true, Ordering::Relaxed) {
            log::warn!("vhost-user: a queue is broken; it stays stopped until the ring is reset");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_rings_the_current_call_fd() {
        let calls = CallFds::new(2);
        calls.notify_queue(1).expect("no fd: nothing to ring");
        let first = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
        assert!(calls.set(1, Some(first.try_clone().expect("dup"))));
        calls.notify_queue(1).expect("notify");
        assert_eq!(first.read().expect("rung"), 1);
        let second = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
        calls.set(1, Some(second.try_clone().expect("dup")));
        calls.notify_queue(1).expect("notify");
        assert_eq!(second.read().expect("rung"), 1);
        assert!(first.read().is_err(), "the old fd is not rung");
        assert!(!calls.set(2, None), "no ring 2");
        calls.notify_queue(7).expect("an unknown queue is ignored");
        assert!(calls.has(1) && !calls.has(0));
        calls.set_needs_reset();
        assert!(calls.needs_reset());
        calls.clear();
        assert!(!calls.has(1) && !calls.needs_reset());
    }
}
