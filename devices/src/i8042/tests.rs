//! The i8042's protocol as Linux's i8042 and atkbd drivers use it, Ctrl+Alt+Del's bytes, the
//! bounded output buffer, IRQ 1 and the reset line.

use super::*;
use std::sync::Mutex;

#[derive(Default)]
struct Sink(Mutex<Vec<ExitRequest>>);
impl ExitRequester for Sink {
    fn request_exit(&self, why: ExitRequest) {
        self.0.lock().expect("lock").push(why);
    }
}

/// A controller, its exit requests and the other end of its IRQ eventfd.
struct Rig {
    dev: I8042,
    exits: Arc<Sink>,
    irq: EventFd,
}

impl Rig {
    fn new() -> Self {
        let exits = Arc::new(Sink::default());
        let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
        let dev = I8042::new(exits.clone(), irq.try_clone().expect("clone eventfd"));
        Self { dev, exits, irq }
    }

    /// Interrupts raised since the last call.
    fn irqs(&self) -> u64 {
        self.irq.read().unwrap_or(0)
    }

    fn status(&mut self) -> u8 {
        let mut b = [0];
        self.dev.read(COMMAND_OFFSET, &mut b);
        b[0]
    }

    fn command(&mut self, c: u8) {
        self.dev.write(COMMAND_OFFSET, &[c]);
    }

    fn write_data(&mut self, v: u8) {
        self.dev.write(DATA_OFFSET, &[v]);
    }

    fn read_data(&mut self) -> u8 {
        let mut b = [0];
        self.dev.read(DATA_OFFSET, &mut b);
        b[0]
    }

    /// Reads port 0x60 while the status says a byte is there (as Linux's i8042_flush, bounded).
    fn drain(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..=OUTPUT_BUFFER_LEN {
            if self.status() & STATUS_OUTPUT_FULL == 0 {
                break;
            }
            out.push(self.read_data());
        }
        out
    }

    /// A controller command with a one-byte answer, as Linux's `i8042_command`.
    fn ask(&mut self, c: u8) -> u8 {
        self.command(c);
        assert_ne!(self.status() & STATUS_OUTPUT_FULL, 0, "answer to {c:#x}");
        self.read_data()
    }

    fn exits(&self) -> Vec<ExitRequest> {
        self.exits.0.lock().expect("lock").clone()
    }
}

const CAD_SET1: [u8; 8] = [0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d];
const CAD_SET2: [u8; 11] = [
    0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0, 0x71, 0xf0, 0x11, 0xf0, 0x14,
];

#[test]
fn linux_probe_sequence() {
    let mut r = Rig::new();
    // i8042_controller_check: a status other than 0xff, nothing to flush.
    let status = r.status();
    assert_ne!(status, 0xff);
    assert_eq!(status & STATUS_UNLOCKED, STATUS_UNLOCKED, "no key lock");
    assert!(r.drain().is_empty());
    // i8042_controller_selftest.
    assert_eq!(r.ask(CMD_SELF_TEST), 0x55);
    assert_ne!(r.status() & STATUS_LAST_WAS_COMMAND, 0);
    // i8042_controller_init: read the config byte until two reads agree, disable the keyboard
    // and its interrupt, write it, read it back.
    let ctr = r.ask(CMD_READ_CONFIG);
    assert_eq!(r.ask(CMD_READ_CONFIG), ctr);
    assert_eq!(ctr, CONFIG_AT_RESET);
    assert_ne!(
        ctr & CONFIG_TRANSLATE,
        0,
        "translation on: Linux reads set 1"
    );
    assert_ne!(
        r.status() & STATUS_SYSTEM,
        0,
        "the system flag follows the config byte"
    );
    let disabled = (ctr | CONFIG_KEYBOARD_DISABLED) & !CONFIG_KEYBOARD_INTERRUPT;
    r.command(CMD_WRITE_CONFIG);
    r.write_data(disabled);
    assert_eq!(r.status() & STATUS_LAST_WAS_COMMAND, 0);
    assert_eq!(r.ask(CMD_READ_CONFIG), disabled);
    // The keyboard interface test.
    assert_eq!(r.ask(CMD_KEYBOARD_TEST), 0x00);
    // i8042_enable_kbd_port: the keyboard and its interrupt back on.
    r.command(CMD_WRITE_CONFIG);
    r.write_data(ctr);
    r.command(CMD_DISABLE_KEYBOARD);
    assert_ne!(r.ask(CMD_READ_CONFIG) & CONFIG_KEYBOARD_DISABLED, 0);
    r.command(CMD_ENABLE_KEYBOARD);
    assert_eq!(r.ask(CMD_READ_CONFIG), ctr);
    assert!(r.drain().is_empty());
    assert!(r.exits().is_empty(), "no reset during the probe");
}

#[test]
fn keyboard_commands_are_answered_through_irq_1() {
    let mut r = Rig::new();
    r.irqs();
    // atkbd without i8042.dumbkbd: identify, translated (ab 83 becomes ab 41).
    r.write_data(0xf2);
    assert_eq!(r.irqs(), 1, "the ACK interrupts");
    assert_eq!(r.read_data(), keyboard::ACK);
    assert_eq!(r.irqs(), 1, "the next byte interrupts once read is the ACK");
    assert_eq!(r.drain(), [0xab, 0x41]);
    // Set the LEDs: ACK for the command and for its parameter.
    r.write_data(0xed);
    assert_eq!(r.drain(), [keyboard::ACK]);
    r.write_data(0x02);
    assert_eq!(r.drain(), [keyboard::ACK]);
    // Get the scan code set: 2, which translation reports as 0x41.
    r.write_data(0xf0);
    r.write_data(0x00);
    assert_eq!(r.drain(), [keyboard::ACK, 0x41]);
    // Only set 2 is offered.
    r.write_data(0xf0);
    r.write_data(0x01);
    assert_eq!(r.drain(), [keyboard::RESEND]);
    // A command where a parameter was due is a command.
    r.write_data(0xf3);
    r.write_data(0xff);
    assert_eq!(r.drain(), [keyboard::ACK, keyboard::SELF_TEST_PASSED]);
    r.write_data(0xee);
    assert_eq!(r.drain(), [0xee], "echo");
    r.write_data(0x12);
    assert_eq!(r.drain(), [keyboard::RESEND], "not a command");
    // Without translation the identity is set 2's.
    r.command(CMD_WRITE_CONFIG);
    r.write_data(CONFIG_AT_RESET & !CONFIG_TRANSLATE);
    r.write_data(0xf2);
    assert_eq!(r.drain(), [keyboard::ACK, 0xab, 0x83]);
}

#[test]
fn ctrl_alt_del_in_set_1_with_translation() {
    let mut r = Rig::new();
    r.irqs();
    r.dev.trigger_ctrl_alt_del().expect("room");
    assert_eq!(r.irqs(), 1);
    let mut got = Vec::new();
    for i in 0..CAD_SET1.len() {
        assert_ne!(r.status() & STATUS_OUTPUT_FULL, 0);
        got.push(r.read_data());
        // One interrupt per byte that becomes readable, none after the last.
        let more = u64::from(i + 1 < CAD_SET1.len());
        assert_eq!(r.irqs(), more, "after byte {i}");
    }
    assert_eq!(got, CAD_SET1);
    assert_eq!(r.status() & STATUS_OUTPUT_FULL, 0);
    assert_eq!(r.read_data(), 0, "an empty buffer reads as 0");
    assert!(r.exits().is_empty(), "the guest resets, not the keys");
}

#[test]
fn ctrl_alt_del_in_set_2_without_translation() {
    let mut r = Rig::new();
    r.command(CMD_WRITE_CONFIG);
    r.write_data(CONFIG_AT_RESET & !CONFIG_TRANSLATE);
    r.dev.trigger_ctrl_alt_del().expect("room");
    assert_eq!(r.drain(), CAD_SET2);
}

#[test]
fn full_buffer_refuses_the_whole_sequence() {
    let mut r = Rig::new();
    // A guest that never reads: two sequences fit in 16 bytes, the third does not.
    r.dev.trigger_ctrl_alt_del().expect("first");
    r.dev.trigger_ctrl_alt_del().expect("second");
    let err = r.dev.trigger_ctrl_alt_del().expect_err("full");
    assert!(
        matches!(
            err,
            I8042Error::OutputBufferFull {
                queued: 16,
                needed: 8
            }
        ),
        "{err}"
    );
    assert_eq!(r.drain(), [CAD_SET1, CAD_SET1].concat(), "nothing partial");
    // Read, there is room again.
    r.dev.trigger_ctrl_alt_del().expect("room after reading");
    // In set 2 (11 bytes) only one fits.
    let mut r = Rig::new();
    r.command(CMD_WRITE_CONFIG);
    r.write_data(CONFIG_AT_RESET & !CONFIG_TRANSLATE);
    r.dev.trigger_ctrl_alt_del().expect("first");
    assert!(r.dev.trigger_ctrl_alt_del().is_err());
}

#[test]
fn interrupts_wait_for_the_config_byte() {
    let mut r = Rig::new();
    r.command(CMD_WRITE_CONFIG);
    r.write_data(CONFIG_AT_RESET & !CONFIG_KEYBOARD_INTERRUPT);
    r.irqs();
    r.dev
        .trigger_ctrl_alt_del()
        .expect("queued while interrupts are off");
    assert_eq!(r.irqs(), 0);
    assert_ne!(
        r.status() & STATUS_OUTPUT_FULL,
        0,
        "a polling guest sees it"
    );
    r.command(CMD_WRITE_CONFIG);
    r.write_data(CONFIG_AT_RESET);
    assert_eq!(
        r.irqs(),
        1,
        "enabling the interrupt with data waiting raises it"
    );
    assert_eq!(r.drain(), CAD_SET1);
}

#[test]
fn stopped_keyboard_sends_no_keys() {
    let mut r = Rig::new();
    r.write_data(0xf5);
    assert_eq!(r.drain(), [keyboard::ACK]);
    assert!(matches!(
        r.dev.trigger_ctrl_alt_del(),
        Err(I8042Error::ScanningDisabled)
    ));
    assert!(r.drain().is_empty());
    r.write_data(0xf4);
    assert_eq!(r.drain(), [keyboard::ACK]);
    r.dev.trigger_ctrl_alt_del().expect("scanning again");
}

#[test]
fn reset_command_requests_exit_and_others_do_not() {
    let mut r = Rig::new();
    r.write_data(CMD_RESET_CPU); // to the keyboard: "resend"
    r.command(CMD_SELF_TEST);
    r.command(0xff); // pulses no line
    r.command(0xfd); // pulses line 1 only
    r.command(CMD_WRITE_OUTPUT_PORT);
    r.write_data(OUTPUT_PORT_AT_RESET);
    assert!(r.exits().is_empty());
    r.command(CMD_RESET_CPU);
    assert_eq!(r.exits(), [ExitRequest::Reset]);
    // The reset line through the output port, driven low.
    r.command(CMD_WRITE_OUTPUT_PORT);
    r.write_data(OUTPUT_PORT_AT_RESET & !OUTPUT_PORT_RESET_HIGH);
    assert_eq!(r.exits(), [ExitRequest::Reset, ExitRequest::Reset]);
}

#[test]
fn reset_works_with_keys_waiting() {
    let mut r = Rig::new();
    r.dev.trigger_ctrl_alt_del().expect("room");
    r.command(CMD_RESET_CPU);
    assert_eq!(r.exits(), [ExitRequest::Reset]);
}

#[test]
fn hostile_accesses_stay_bounded() {
    let mut r = Rig::new();
    for offset in [0, 1, 2, 3, 4, 5, 0xff, u64::MAX] {
        for value in 0..=u8::MAX {
            for width in [0usize, 1, 2, 4, 8] {
                let bytes = vec![value; width];
                r.dev.write(offset, &bytes);
                let mut out = vec![0u8; width];
                r.dev.read(offset, &mut out);
                assert!(r.dev.output.len() <= OUTPUT_BUFFER_LEN);
            }
            let _ = r.dev.trigger_ctrl_alt_del();
            assert!(r.dev.output.len() <= OUTPUT_BUFFER_LEN);
        }
    }
}
