//! Test doubles for the VMM-side PCI traits: they record every call.

use std::sync::Mutex;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::{IoEventRegistry, MsiMessage, MsiRouting, MsiVector};

/// Records `set_msi_route` calls.
#[derive(Debug, Default)]
pub(crate) struct RecordingRouting {
    pub(crate) calls: Mutex<Vec<(u32, Option<MsiMessage>)>>,
}

impl RecordingRouting {
    pub(crate) fn take(&self) -> Vec<(u32, Option<MsiMessage>)> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }
}

impl MsiRouting for RecordingRouting {
    fn set_msi_route(&self, gsi: u32, msg: Option<MsiMessage>) -> std::io::Result<()> {
        self.calls.lock().expect("lock").push((gsi, msg));
        Ok(())
    }
}

/// Tracks the live ioeventfd registrations as (address, fd number).
#[derive(Debug, Default)]
pub(crate) struct RecordingIoEvents {
    pub(crate) live: Mutex<Vec<(u64, i32)>>,
}

impl RecordingIoEvents {
    pub(crate) fn addresses(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .live
            .lock()
            .expect("lock")
            .iter()
            .map(|l| l.0)
            .collect();
        v.sort_unstable();
        v
    }
}

impl IoEventRegistry for RecordingIoEvents {
    fn register(&self, fd: &EventFd, addr: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        self.live.lock().expect("lock").push((addr, fd.as_raw_fd()));
        Ok(())
    }

    fn unregister(&self, fd: &EventFd, addr: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut live = self.live.lock().expect("lock");
        let key = (addr, fd.as_raw_fd());
        let pos = live
            .iter()
            .position(|l| *l == key)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not registered"))?;
        live.remove(pos);
        Ok(())
    }
}

/// `n` vectors on GSIs 100.., with nonblocking irqfds; also returns clones of the irqfds.
pub(crate) fn vectors(n: usize) -> (Vec<MsiVector>, Vec<EventFd>) {
    (0..n)
        .map(|i| {
            let irqfd = EventFd::new(EFD_NONBLOCK).expect("eventfd");
            let probe = irqfd.try_clone().expect("clone");
            let gsi = 100 + i as u32;
            (MsiVector { gsi, irqfd }, probe)
        })
        .unzip()
}

/// How many times `fd` was signalled since the last call (0 if never).
pub(crate) fn count(fd: &EventFd) -> u64 {
    fd.read().unwrap_or(0)
}
