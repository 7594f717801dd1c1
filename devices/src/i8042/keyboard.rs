//! The PS/2 keyboard behind the i8042: its answers to the commands a driver writes to port 0x60
//! (ACK, identify, reset, echo, the commands that take a parameter byte), whether it is scanning,
//! and the scan codes of the one key combination Osprey presses, Ctrl+Alt+Del.
//!
//! The keyboard speaks scan code set 2, as a real one does after reset; the controller translates
//! what it sends to set 1 when the guest leaves translation on (see [`translate`]).

/// The keyboard's acknowledgement of a command or parameter byte.
pub(super) const ACK: u8 = 0xfa;
/// "Resend": the keyboard's answer to a byte it does not understand.
pub(super) const RESEND: u8 = 0xfe;
/// The self-test passed (basic assurance test), sent after a reset.
pub(super) const SELF_TEST_PASSED: u8 = 0xaa;
/// The set-2 prefix of a key release (break code).
const BREAK_PREFIX: u8 = 0xf0;
/// The prefix of an extended key's code, the same in sets 1 and 2.
const EXTENDED_PREFIX: u8 = 0xe0;
/// The scan code set the keyboard reports, as the answer to "get scan code set" gives it.
const SCAN_CODE_SET_2: u8 = 0x02;
/// An MF2 keyboard's identity, the answer to "identify" after its ACK.
const MF2_ID: [u8; 2] = [0xab, 0x83];

/// Keyboard commands (bytes the guest writes to port 0x60 while no controller command waits for
/// a parameter).
const CMD_SET_LEDS: u8 = 0xed;
const CMD_ECHO: u8 = 0xee;
const CMD_SCAN_CODE_SET: u8 = 0xf0;
const CMD_IDENTIFY: u8 = 0xf2;
const CMD_SET_TYPEMATIC: u8 = 0xf3;
const CMD_ENABLE_SCANNING: u8 = 0xf4;
const CMD_DISABLE_SCANNING: u8 = 0xf5;
const CMD_SET_DEFAULTS: u8 = 0xf6;
/// 0xf7..=0xfd: set-3 key types; acknowledged, no effect in set 2.
const CMD_SET3_FIRST: u8 = 0xf7;
const CMD_SET3_LAST: u8 = 0xfd;
const CMD_RESEND: u8 = 0xfe;
const CMD_RESET: u8 = 0xff;
/// The lowest command byte: a byte from here up is a new command even while a parameter is due.
const FIRST_COMMAND: u8 = CMD_SET_LEDS;

/// A key Osprey can press: its set-2 make code (after an `0xe0` prefix if extended) and the set-1
/// code the controller's translation turns that into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    extended: bool,
    set2: u8,
    set1: u8,
}

/// The left Ctrl key.
pub(super) const LEFT_CTRL: Key = Key {
    extended: false,
    set2: 0x14,
    set1: 0x1d,
};
/// The left Alt key.
pub(super) const LEFT_ALT: Key = Key {
    extended: false,
    set2: 0x11,
    set1: 0x38,
};
/// The Delete key of the navigation block (extended).
pub(super) const DELETE: Key = Key {
    extended: true,
    set2: 0x71,
    set1: 0x53,
};

/// Ctrl, Alt and Delete pressed in that order, then released in reverse order.
pub(super) const CTRL_ALT_DEL: [Key; 3] = [LEFT_CTRL, LEFT_ALT, DELETE];

/// The most set-2 bytes one key press and release take: `e0 71 e0 f0 71`.
const MAX_PRESS_RELEASE_LEN: usize = 5;
/// The set-2 bytes of Ctrl+Alt+Del pressed and released (11), with room to spare.
pub(super) const MAX_SEQUENCE_LEN: usize = CTRL_ALT_DEL.len() * MAX_PRESS_RELEASE_LEN;

/// Appends the set-2 bytes of pressing every key of `keys` in order and releasing them in reverse
/// order to `out`; returns how many bytes it wrote (at most [`MAX_SEQUENCE_LEN`] for three keys).
pub(super) fn press_and_release(keys: &[Key; 3], out: &mut [u8; MAX_SEQUENCE_LEN]) -> usize {
    let mut len = 0;
    let mut put = |b: u8| {
        out[len] = b;
        len += 1;
    };
    for key in keys {
        if key.extended {
            put(EXTENDED_PREFIX);
        }
        put(key.set2);
    }
    for key in keys.iter().rev() {
        if key.extended {
            put(EXTENDED_PREFIX);
        }
        put(BREAK_PREFIX);
        put(key.set2);
    }
    len
}

/// The controller's set-2 to set-1 translation state: a set-2 release is a `0xf0` prefix, in set
/// 1 it is bit 7 of the key's code.
#[derive(Debug, Default)]
pub(super) struct Translation {
    release_pending: bool,
}

impl Translation {
    /// The set-1 byte for set-2 byte `code` from the keyboard, or `None` for a release prefix
    /// (folded into the next byte). Covers every byte this keyboard sends: the keys above, its
    /// answers (`0xfa`, `0xaa`, `0xee`, `0xfe`, the identity `ab 83` → `ab 41`, scan code set 2 →
    /// `0x41`) and the `0xe0` prefix; other bytes pass unchanged.
    pub(super) fn translate(&mut self, code: u8) -> Option<u8> {
        if code == BREAK_PREFIX {
            self.release_pending = true;
            return None;
        }
        let set1 = CTRL_ALT_DEL
            .iter()
            .find(|k| k.set2 == code)
            .map(|k| k.set1)
            .unwrap_or(match code {
                // The identity's second byte and the set number both become 0x41 (set 1's F7).
                0x83 | SCAN_CODE_SET_2 => 0x41,
                other => other,
            });
        let release = std::mem::take(&mut self.release_pending);
        // The prefix `e0` of an extended release comes before `f0`: it stays as it is.
        Some(if release && code != EXTENDED_PREFIX {
            set1 | 0x80
        } else {
            set1
        })
    }
}

/// A keyboard command that waits for its parameter byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    SetLeds,
    SetTypematic,
    ScanCodeSet,
}

/// The keyboard's state: a command waiting for its parameter, and whether it reports keys.
#[derive(Debug)]
pub(super) struct Keyboard {
    pending: Option<Pending>,
    scanning: bool,
}

impl Default for Keyboard {
    fn default() -> Self {
        Self {
            pending: None,
            scanning: true,
        }
    }
}

impl Keyboard {
    /// Whether the keyboard reports key presses (the guest can stop it with command `0xf5`).
    pub(super) fn scanning(&self) -> bool {
        self.scanning
    }

    /// The set-2 bytes the keyboard answers to `byte` written by the guest.
    pub(super) fn write(&mut self, byte: u8) -> &'static [u8] {
        if let Some(pending) = self.pending.take() {
            if byte < FIRST_COMMAND {
                return Self::parameter(pending, byte);
            }
            // A command byte instead of the parameter: the keyboard drops the old command.
        }
        match byte {
            CMD_SET_LEDS => self.expect(Pending::SetLeds),
            CMD_SET_TYPEMATIC => self.expect(Pending::SetTypematic),
            CMD_SCAN_CODE_SET => self.expect(Pending::ScanCodeSet),
            CMD_ECHO => &[CMD_ECHO],
            CMD_IDENTIFY => &[ACK, MF2_ID[0], MF2_ID[1]],
            CMD_ENABLE_SCANNING => {
                self.scanning = true;
                &[ACK]
            }
            CMD_DISABLE_SCANNING => {
                self.scanning = false;
                &[ACK]
            }
            CMD_SET_DEFAULTS | CMD_SET3_FIRST..=CMD_SET3_LAST | CMD_RESEND => &[ACK],
            CMD_RESET => {
                self.scanning = true;
                &[ACK, SELF_TEST_PASSED]
            }
            _ => &[RESEND],
        }
    }

    fn expect(&mut self, pending: Pending) -> &'static [u8] {
        self.pending = Some(pending);
        &[ACK]
    }

    /// The answer to `pending`'s parameter byte `value`. Only set 2 is offered: a request for
    /// set 1 or 3 is refused, so a driver knows it still gets set 2.
    fn parameter(pending: Pending, value: u8) -> &'static [u8] {
        match (pending, value) {
            (Pending::ScanCodeSet, 0) => &[ACK, SCAN_CODE_SET_2],
            (Pending::ScanCodeSet, SCAN_CODE_SET_2) => &[ACK],
            (Pending::ScanCodeSet, _) => &[RESEND],
            (Pending::SetLeds | Pending::SetTypematic, _) => &[ACK],
        }
    }
}
