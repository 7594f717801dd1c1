//! The 16550 UART at 0x3f8 (COM1): the guest's console.
//!
//! A thin bus adapter around vm-superio's `Serial`. Output goes to any `Write` (the VMM passes
//! stdout); input bytes are queued with [`SerialConsole::enqueue_input`]; the interrupt line is an
//! `EventFd` the VMM binds to an irqfd on GSI 4.

use std::io::Write;

use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::bus::BusDevice;

/// Port of COM1.
pub const COM1_PORT: u16 = 0x3f8;
/// Number of ports the UART spans.
pub const COM1_LEN: u64 = 8;
/// The ISA IRQ line (and KVM GSI) of COM1.
pub const COM1_IRQ: u32 = 4;

/// Raises the UART's interrupt by writing to an eventfd bound to an irqfd.
#[derive(Debug)]
pub struct EventFdTrigger(EventFd);

impl EventFdTrigger {
    /// Wraps `fd`.
    pub fn new(fd: EventFd) -> Self {
        Self(fd)
    }
}

impl Trigger for EventFdTrigger {
    type E = std::io::Error;
    fn trigger(&self) -> std::io::Result<()> {
        self.0.write(1)
    }
}

/// The serial console device.
pub struct SerialConsole {
    uart: Serial<EventFdTrigger, vm_superio::serial::NoEvents, Box<dyn Write + Send>>,
}

impl std::fmt::Debug for SerialConsole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SerialConsole")
    }
}

impl SerialConsole {
    /// A UART that raises `irq` and writes what the guest sends to `out`.
    pub fn new(irq: EventFd, out: Box<dyn Write + Send>) -> Self {
        Self {
            uart: Serial::new(EventFdTrigger::new(irq), out),
        }
    }

    /// Queues input bytes for the guest; returns how many fit in the receive FIFO.
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        match self.uart.enqueue_raw_bytes(bytes) {
            Ok(n) => n,
            Err(e) => {
                log::debug!("Serial input dropped: {e:?}");
                0
            }
        }
    }
}

impl BusDevice for SerialConsole {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let (Some(first), Ok(off)) = (data.first_mut(), u8::try_from(offset)) {
            *first = self.uart.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Some(&value), Ok(off)) = (data.first(), u8::try_from(offset)) {
            if let Err(e) = self.uart.write(off, value) {
                log::debug!("Serial write failed: {e:?}");
            }
            if off == 0 {
                // Keep the console live: a guest that dies right after printing must not lose
                // its last line in a buffer.
                let _ = self.uart.writer_mut().flush();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn guest_bytes_reach_the_writer_and_input_raises_irq() {
        let out = Shared::default();
        let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let mut uart = SerialConsole::new(irq.try_clone().expect("clone"), Box::new(out.clone()));
        for b in b"hi\n" {
            uart.write(0, &[*b]);
        }
        assert_eq!(out.0.lock().expect("lock").as_slice(), b"hi\n");
        // Enable the "received data available" interrupt (IER bit 0), then queue input.
        uart.write(1, &[1]);
        assert_eq!(uart.enqueue_input(b"x"), 1);
        assert!(irq.read().expect("irq raised") >= 1);
        let mut byte = [0u8];
        uart.read(0, &mut byte);
        assert_eq!(&byte, b"x");
    }
}
