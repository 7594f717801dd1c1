//! The 16550 UART at 0x3f8 (COM1): the guest's console.
//!
//! A thin bus adapter around vm-superio's `Serial`. Output goes to any `Write` (the VMM passes
//! stdout); input bytes are queued with [`SerialConsole::enqueue_input`]; the interrupt line is an
//! `EventFd` the VMM binds to an irqfd on GSI 4. A snapshot keeps its registers and receive FIFO
//! ([`SerialRegisters`]): a guest whose driver enabled the transmit interrupt (Linux's 8250 does)
//! waits for that interrupt after a restore as before it.

use std::io::Write;

use serde::{Deserialize, Serialize};
use vm_superio::serial::{NoEvents, SerialState};
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
    uart: Serial<EventFdTrigger, NoEvents, Box<dyn Write + Send>>,
}

/// The UART's registers and the bytes in its receive FIFO, as a snapshot keeps them (the
/// fields of vm-superio's `SerialState`, in a shape serde writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialRegisters {
    /// Divisor latch, low byte.
    pub baud_divisor_low: u8,
    /// Divisor latch, high byte.
    pub baud_divisor_high: u8,
    /// IER.
    pub interrupt_enable: u8,
    /// IIR.
    pub interrupt_identification: u8,
    /// LCR (its DLAB bit selects the divisor latch).
    pub line_control: u8,
    /// LSR.
    pub line_status: u8,
    /// MCR.
    pub modem_control: u8,
    /// MSR.
    pub modem_status: u8,
    /// SCR.
    pub scratch: u8,
    /// Received bytes the guest has not read, oldest first.
    pub in_buffer: Vec<u8>,
}

impl Default for SerialRegisters {
    /// A UART as it is at power-on.
    fn default() -> Self {
        Self::from(&SerialState::default())
    }
}

impl From<&SerialState> for SerialRegisters {
    fn from(s: &SerialState) -> Self {
        Self {
            baud_divisor_low: s.baud_divisor_low,
            baud_divisor_high: s.baud_divisor_high,
            interrupt_enable: s.interrupt_enable,
            interrupt_identification: s.interrupt_identification,
            line_control: s.line_control,
            line_status: s.line_status,
            modem_control: s.modem_control,
            modem_status: s.modem_status,
            scratch: s.scratch,
            in_buffer: s.in_buffer.clone(),
        }
    }
}

impl From<&SerialRegisters> for SerialState {
    fn from(r: &SerialRegisters) -> Self {
        Self {
            baud_divisor_low: r.baud_divisor_low,
            baud_divisor_high: r.baud_divisor_high,
            interrupt_enable: r.interrupt_enable,
            interrupt_identification: r.interrupt_identification,
            line_control: r.line_control,
            line_status: r.line_status,
            modem_control: r.modem_control,
            modem_status: r.modem_status,
            scratch: r.scratch,
            in_buffer: r.in_buffer.clone(),
        }
    }
}

/// Saved UART registers that cannot be put back.
#[derive(Debug, thiserror::Error)]
pub enum SerialRestoreError {
    /// More saved input than the UART's receive FIFO holds.
    #[error("serial: {len} saved input bytes; the receive FIFO holds {capacity}")]
    FifoTooLong {
        /// Saved bytes.
        len: usize,
        /// The FIFO's size.
        capacity: usize,
    },
    /// The interrupt eventfd could not be duplicated, or the pending interrupt not raised.
    #[error("serial: its interrupt eventfd: {0}")]
    Irq(#[source] std::io::Error),
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

    /// The registers and receive FIFO, for a snapshot.
    pub fn registers(&self) -> SerialRegisters {
        SerialRegisters::from(&self.uart.state())
    }

    /// Puts saved registers and FIFO back, keeping this UART's interrupt line and output.
    pub fn restore(&mut self, saved: &SerialRegisters) -> Result<(), SerialRestoreError> {
        let capacity = self.uart.fifo_capacity() + self.uart.state().in_buffer.len();
        if saved.in_buffer.len() > capacity {
            return Err(SerialRestoreError::FifoTooLong {
                len: saved.in_buffer.len(),
                capacity,
            });
        }
        let irq = self
            .uart
            .interrupt_evt()
            .0
            .try_clone()
            .map_err(SerialRestoreError::Irq)?;
        let out = std::mem::replace(self.uart.writer_mut(), Box::new(std::io::sink()));
        let state = SerialState::from(saved);
        // The FIFO fits (checked above), so only raising a pending interrupt can fail; the UART
        // then stays without output, as the VM it belongs to fails its restore.
        self.uart = Serial::from_state(&state, EventFdTrigger::new(irq), NoEvents, out).map_err(
            |e| match e {
                vm_superio::serial::Error::Trigger(e) | vm_superio::serial::Error::IOError(e) => {
                    SerialRestoreError::Irq(e)
                }
                vm_superio::serial::Error::FullFifo => SerialRestoreError::FifoTooLong {
                    len: saved.in_buffer.len(),
                    capacity,
                },
            },
        )?;
        Ok(())
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

    #[test]
    fn saved_registers_and_input_come_back_on_a_new_uart_with_its_output() {
        let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let mut first =
            SerialConsole::new(irq.try_clone().expect("clone"), Box::new(std::io::sink()));
        // A driver's set-up: divisor 3 through DLAB, 8N1, the transmit and receive interrupts,
        // a scratch byte; then two input bytes it has not read.
        first.write(3, &[0x80]);
        first.write(0, &[3]);
        first.write(3, &[0x03]);
        first.write(1, &[0x03]);
        first.write(7, &[0x5a]);
        assert_eq!(first.enqueue_input(b"ok"), 2);
        let saved = first.registers();
        assert_eq!(saved.interrupt_enable, 0x03);
        assert_ne!(saved, SerialRegisters::default());

        let out = Shared::default();
        let irq2 = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let mut second =
            SerialConsole::new(irq2.try_clone().expect("clone"), Box::new(out.clone()));
        second.restore(&saved).expect("restore");
        assert_eq!(second.registers(), saved);
        // The pending input interrupt is raised again, the input reads back, and the output
        // still goes to the new UART's writer.
        assert!(irq2.read().expect("irq raised") >= 1);
        let mut b = [0u8];
        second.read(1, &mut b);
        assert_eq!(b[0], 0x03, "IER");
        second.read(7, &mut b);
        assert_eq!(b[0], 0x5a, "scratch");
        second.read(0, &mut b);
        assert_eq!(&b, b"o");
        second.write(0, b"!");
        assert_eq!(out.0.lock().expect("lock").as_slice(), b"!");
    }

    #[test]
    fn a_saved_fifo_longer_than_the_uart_is_refused_and_the_output_kept() {
        let out = Shared::default();
        let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let mut uart = SerialConsole::new(irq, Box::new(out.clone()));
        let saved = SerialRegisters {
            in_buffer: vec![b'x'; 4096],
            ..SerialRegisters::default()
        };
        let e = uart.restore(&saved).expect_err("too long");
        assert!(e.to_string().contains("4096 saved input bytes"), "{e}");
        uart.write(0, b"y");
        assert_eq!(out.0.lock().expect("lock").as_slice(), b"y");
    }
}
