//! An engine's own signal on its completion eventfd.
//!
//! The iothread watches every completion fd edge-triggered and never reads it on the hot path
//! (`Handler::wake_fds`). An engine that also writes the fd itself, to announce completions no
//! kernel event will (Linux AIO's synchronous batches, io_uring's invalid ranges), clears that
//! signal in the `reap` that hands those completions out: left set, it would end the thread's next
//! sleep at once, for nothing. The kernel's own signals are never read here, so a completion after
//! the clear still wakes the thread.

use vmm_sys_util::eventfd::EventFd;

/// Whether the engine wrote its completion fd since the last [`OwnSignal::clear`].
#[derive(Debug, Default)]
pub(crate) struct OwnSignal(bool);

impl OwnSignal {
    /// Signals `fd` for completions the engine made itself; remembered even when the write
    /// fails (the clear is then a harmless non-blocking read).
    pub(crate) fn raise(&mut self, fd: &EventFd) -> std::io::Result<()> {
        self.0 = true;
        fd.write(1)
    }

    /// Clears the engine's own signal, if any, from `fd` (non-blocking): called by the `reap`
    /// that hands out the completions it announced, before it collects the kernel's (a kernel
    /// signal cleared with it announces completions that same reap collects).
    pub(crate) fn clear(&mut self, fd: &EventFd) {
        if std::mem::take(&mut self.0) {
            let _ = fd.read();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::EFD_NONBLOCK;

    #[test]
    fn only_a_raised_signal_is_cleared() {
        let fd = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        let mut own = OwnSignal::default();
        own.raise(&fd).expect("raise");
        own.clear(&fd);
        assert!(fd.read().is_err(), "the engine's own signal is gone");
        // A signal the engine did not raise (the kernel's) stays for the thread to see.
        fd.write(1).expect("write");
        own.clear(&fd);
        assert_eq!(fd.read().expect("still signalled"), 1);
    }
}
