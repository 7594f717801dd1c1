//! The i8042 keyboard controller on ports 0x60 (data) and 0x64 (status and command), with a PS/2
//! keyboard behind it ([`keyboard`]): enough for Linux's i8042 and atkbd drivers to probe it, for
//! the VMM to press Ctrl+Alt+Del ([`I8042::trigger_ctrl_alt_del`], Firecracker's
//! `SendCtrlAltDel`), and for `reboot=k`, whose CPU-reset pulse (command 0xFE) ends the VM
//! through the [`ExitRequester`].
//!
//! What the guest reads from port 0x60 waits in a bounded output buffer; IRQ 1 (an `EventFd` the
//! VMM binds to an irqfd) is raised each time a byte becomes readable while the configuration
//! byte enables keyboard interrupts. There is no auxiliary (mouse) port: its commands are
//! ignored, as Firecracker's boot arguments (`i8042.noaux`) expect. Every guest write is taken
//! as hostile: any port, width or value leaves the device consistent, and nothing grows.

mod keyboard;

use std::collections::VecDeque;
use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use crate::bus::BusDevice;
use crate::{ExitRequest, ExitRequester};
use keyboard::{Keyboard, Translation, CTRL_ALT_DEL, MAX_SEQUENCE_LEN};

/// First port of the controller (data); the device spans 0x60..=0x64.
pub const I8042_BASE: u16 = 0x60;
/// Number of ports the device spans.
pub const I8042_LEN: u64 = 5;
/// The ISA IRQ line (and KVM GSI) of the keyboard.
pub const KEYBOARD_IRQ: u32 = 1;
/// How many bytes wait for the guest at most (a real controller holds one; the keyboard behind
/// it buffers a few more).
pub const OUTPUT_BUFFER_LEN: usize = 16;

const DATA_OFFSET: u64 = 0;
const COMMAND_OFFSET: u64 = 4;

/// Status register bits (read from port 0x64).
const STATUS_OUTPUT_FULL: u8 = 1 << 0;
const STATUS_SYSTEM: u8 = 1 << 2;
/// The last write went to port 0x64 (a command), not 0x60 (data).
const STATUS_LAST_WAS_COMMAND: u8 = 1 << 3;
/// The keyboard is not locked (no key lock switch).
const STATUS_UNLOCKED: u8 = 1 << 4;

/// Configuration byte bits (controller commands 0x20 and 0x60).
const CONFIG_KEYBOARD_INTERRUPT: u8 = 1 << 0;
const CONFIG_SYSTEM: u8 = 1 << 2;
const CONFIG_KEYBOARD_DISABLED: u8 = 1 << 4;
const CONFIG_AUX_DISABLED: u8 = 1 << 5;
const CONFIG_TRANSLATE: u8 = 1 << 6;
/// At power-on, as firmware leaves it: keyboard interrupts on, self-test passed, no auxiliary
/// port, translation to set 1 on (Linux then expects set 1 codes from the controller).
const CONFIG_AT_RESET: u8 =
    CONFIG_KEYBOARD_INTERRUPT | CONFIG_SYSTEM | CONFIG_AUX_DISABLED | CONFIG_TRANSLATE;

/// Controller commands (written to port 0x64).
const CMD_READ_CONFIG: u8 = 0x20;
const CMD_WRITE_CONFIG: u8 = 0x60;
const CMD_SELF_TEST: u8 = 0xaa;
const CMD_KEYBOARD_TEST: u8 = 0xab;
const CMD_DISABLE_KEYBOARD: u8 = 0xad;
const CMD_ENABLE_KEYBOARD: u8 = 0xae;
const CMD_READ_OUTPUT_PORT: u8 = 0xd0;
const CMD_WRITE_OUTPUT_PORT: u8 = 0xd1;
/// 0xf0..=0xff pulse output port lines 0-3 low for each clear bit of the low nibble; line 0 is
/// the CPU reset (0xfe pulses it alone, as Linux's `reboot=k` does).
const CMD_PULSE_FIRST: u8 = 0xf0;
#[cfg(test)]
const CMD_RESET_CPU: u8 = 0xfe;

const SELF_TEST_PASSED: u8 = 0x55;
const KEYBOARD_TEST_PASSED: u8 = 0x00;
/// Output port bit 0: the CPU reset line, active low.
const OUTPUT_PORT_RESET_HIGH: u8 = 1 << 0;
/// The output port at power-on: reset line high, A20 enabled.
const OUTPUT_PORT_AT_RESET: u8 = 0x03;

/// Why the VMM could not press keys on the guest's keyboard.
#[derive(Debug, thiserror::Error)]
pub enum I8042Error {
    /// The guest has not read what is queued (it has no i8042 driver, or has not run it yet).
    #[error(
        "the i8042 output buffer is full: {queued} of {OUTPUT_BUFFER_LEN} bytes unread by the \
         guest, {needed} more needed"
    )]
    OutputBufferFull {
        /// Bytes waiting for the guest.
        queued: usize,
        /// Bytes the key sequence takes.
        needed: usize,
    },
    /// The guest told the keyboard to stop scanning (keyboard command 0xf5).
    #[error("the guest disabled the keyboard's scanning")]
    ScanningDisabled,
    /// The interrupt could not be raised.
    #[error("raising IRQ {KEYBOARD_IRQ}: {0}")]
    Interrupt(#[source] std::io::Error),
}

/// A controller command that waits for its data byte on port 0x60.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingWrite {
    Config,
    OutputPort,
}

/// The i8042 controller and its keyboard.
pub struct I8042 {
    exit: Arc<dyn ExitRequester>,
    irq: EventFd,
    config: u8,
    output_port: u8,
    last_was_command: bool,
    pending: Option<PendingWrite>,
    /// Bytes for the guest, oldest first; never longer than [`OUTPUT_BUFFER_LEN`].
    output: VecDeque<u8>,
    keyboard: Keyboard,
}

impl std::fmt::Debug for I8042 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("I8042")
            .field("config", &self.config)
            .field("queued", &self.output.len())
            .finish()
    }
}

impl I8042 {
    /// A controller that reports resets to `exit` and raises IRQ 1 by writing `irq`.
    pub fn new(exit: Arc<dyn ExitRequester>, irq: EventFd) -> Self {
        Self {
            exit,
            irq,
            config: CONFIG_AT_RESET,
            output_port: OUTPUT_PORT_AT_RESET,
            last_was_command: false,
            pending: None,
            output: VecDeque::with_capacity(OUTPUT_BUFFER_LEN),
            keyboard: Keyboard::default(),
        }
    }

    /// Presses Ctrl, Alt and Delete and releases them: the sequence queued whole for the guest
    /// (in set 1 while the guest keeps translation on, else set 2), IRQ 1 raised if the guest
    /// enabled it. A Linux guest then runs `ctrl_alt_del()`. Fails, queuing nothing, if the
    /// sequence does not fit in the output buffer or the guest stopped the keyboard.
    pub fn trigger_ctrl_alt_del(&mut self) -> Result<(), I8042Error> {
        if !self.keyboard.scanning() {
            return Err(I8042Error::ScanningDisabled);
        }
        let mut set2 = [0u8; MAX_SEQUENCE_LEN];
        let len = keyboard::press_and_release(&CTRL_ALT_DEL, &mut set2);
        let mut bytes = [0u8; MAX_SEQUENCE_LEN];
        let mut needed = 0;
        let mut translation = Translation::default();
        for &code in &set2[..len] {
            if let Some(b) = self.as_guest_reads(&mut translation, code) {
                bytes[needed] = b;
                needed += 1;
            }
        }
        let queued = self.output.len();
        if queued + needed > OUTPUT_BUFFER_LEN {
            return Err(I8042Error::OutputBufferFull { queued, needed });
        }
        self.output.extend(&bytes[..needed]);
        if queued == 0 {
            self.raise_irq().map_err(I8042Error::Interrupt)?;
        }
        Ok(())
    }

    /// What the guest reads for keyboard byte `code`: translated to set 1 if the configuration
    /// byte says so (`None` for a release prefix, folded into the next byte). `translation`
    /// lives for one self-contained sequence (a release prefix is always followed by its key).
    fn as_guest_reads(&self, translation: &mut Translation, code: u8) -> Option<u8> {
        if self.config & CONFIG_TRANSLATE != 0 {
            translation.translate(code)
        } else {
            Some(code)
        }
    }

    /// The status register.
    fn status(&self) -> u8 {
        let mut status = STATUS_UNLOCKED;
        if !self.output.is_empty() {
            status |= STATUS_OUTPUT_FULL;
        }
        if self.config & CONFIG_SYSTEM != 0 {
            status |= STATUS_SYSTEM;
        }
        if self.last_was_command {
            status |= STATUS_LAST_WAS_COMMAND;
        }
        status
    }

    /// Raises IRQ 1 if the guest enabled keyboard interrupts and a byte is readable.
    fn raise_irq(&self) -> std::io::Result<()> {
        if self.config & CONFIG_KEYBOARD_INTERRUPT != 0 && !self.output.is_empty() {
            self.irq.write(1)?;
        }
        Ok(())
    }

    /// [`Self::raise_irq`] where a failure can only be logged (a guest access).
    fn raise_irq_or_log(&self) {
        if let Err(e) = self.raise_irq() {
            log::warn!("i8042: raising IRQ {KEYBOARD_IRQ}: {e}");
        }
    }

    /// Replaces whatever waits for the guest with a controller's answer (the guest reads it next,
    /// as from a real controller's one-byte buffer).
    fn answer(&mut self, byte: u8) {
        self.output.clear();
        self.output.push_back(byte);
        self.raise_irq_or_log();
    }

    fn read_data(&mut self) -> u8 {
        // An empty buffer reads as 0.
        let byte = self.output.pop_front().unwrap_or(0);
        // The next byte moves into the output register: a new interrupt for it.
        self.raise_irq_or_log();
        byte
    }

    fn write_command(&mut self, command: u8) {
        self.last_was_command = true;
        self.pending = None;
        match command {
            CMD_READ_CONFIG => self.answer(self.config),
            CMD_WRITE_CONFIG => self.pending = Some(PendingWrite::Config),
            CMD_SELF_TEST => self.answer(SELF_TEST_PASSED),
            CMD_KEYBOARD_TEST => self.answer(KEYBOARD_TEST_PASSED),
            CMD_DISABLE_KEYBOARD => self.config |= CONFIG_KEYBOARD_DISABLED,
            CMD_ENABLE_KEYBOARD => self.config &= !CONFIG_KEYBOARD_DISABLED,
            CMD_READ_OUTPUT_PORT => self.answer(self.output_port),
            CMD_WRITE_OUTPUT_PORT => self.pending = Some(PendingWrite::OutputPort),
            CMD_PULSE_FIRST..=u8::MAX if command & OUTPUT_PORT_RESET_HIGH == 0 => {
                self.exit.request_exit(ExitRequest::Reset)
            }
            // The auxiliary port's commands, the other pulses, and commands Osprey does not
            // model: no effect.
            _ => {}
        }
    }

    fn write_data(&mut self, value: u8) {
        self.last_was_command = false;
        match self.pending.take() {
            Some(PendingWrite::Config) => {
                let was_enabled = self.config & CONFIG_KEYBOARD_INTERRUPT != 0;
                self.config = value;
                if !was_enabled {
                    // Bytes waiting while interrupts were off now interrupt.
                    self.raise_irq_or_log();
                }
            }
            Some(PendingWrite::OutputPort) => {
                self.output_port = value;
                if value & OUTPUT_PORT_RESET_HIGH == 0 {
                    self.exit.request_exit(ExitRequest::Reset);
                }
            }
            None => self.write_keyboard(value),
        }
    }

    /// A byte for the keyboard: its answer replaces what waited for the guest.
    fn write_keyboard(&mut self, value: u8) {
        self.output.clear();
        let answer = self.keyboard.write(value);
        let mut translation = Translation::default();
        for &code in answer {
            if let Some(b) = self.as_guest_reads(&mut translation, code) {
                // At most 3 bytes into the emptied buffer: always room.
                if self.output.len() < OUTPUT_BUFFER_LEN {
                    self.output.push_back(b);
                }
            }
        }
        self.raise_irq_or_log();
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        // The ports are a byte wide: a wider read gets the byte in every lane.
        let value = match offset {
            DATA_OFFSET => self.read_data(),
            COMMAND_OFFSET => self.status(),
            // 0x61-0x63 (system control port B and friends): not modelled.
            _ => 0,
        };
        data.fill(value);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(&value) = data.first() else {
            return;
        };
        match offset {
            DATA_OFFSET => self.write_data(value),
            COMMAND_OFFSET => self.write_command(value),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
