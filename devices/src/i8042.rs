//! A minimal i8042 keyboard controller: enough for Linux's probe and for `reboot=k`, whose
//! CPU-reset pulse (command 0xFE on port 0x64) ends the VM cleanly.

use std::sync::Arc;

use crate::bus::BusDevice;
use crate::{ExitRequest, ExitRequester};

/// First port of the controller (data); the device spans 0x60..=0x64.
pub const I8042_BASE: u16 = 0x60;
/// Number of ports the device spans.
pub const I8042_LEN: u64 = 5;
const COMMAND_OFFSET: u64 = 4;
const CMD_RESET_CPU: u8 = 0xfe;

/// The i8042 controller.
pub struct I8042 {
    exit: Arc<dyn ExitRequester>,
}

impl std::fmt::Debug for I8042 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("I8042")
    }
}

impl I8042 {
    /// A controller that reports resets to `exit`.
    pub fn new(exit: Arc<dyn ExitRequester>) -> Self {
        Self { exit }
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        // Status 0: output buffer empty, input buffer empty; data reads as 0.
        data.fill(0);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset == COMMAND_OFFSET && data.first() == Some(&CMD_RESET_CPU) {
            self.exit.request_exit(ExitRequest::Reset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Sink(Mutex<Vec<ExitRequest>>);
    impl ExitRequester for Sink {
        fn request_exit(&self, why: ExitRequest) {
            self.0.lock().expect("lock").push(why);
        }
    }

    #[test]
    fn reset_command_requests_exit_and_others_do_not() {
        let sink = Arc::new(Sink::default());
        let mut dev = I8042::new(sink.clone());
        dev.write(0, &[CMD_RESET_CPU]);
        dev.write(COMMAND_OFFSET, &[0xaa]);
        assert!(sink.0.lock().expect("lock").is_empty());
        dev.write(COMMAND_OFFSET, &[CMD_RESET_CPU]);
        assert_eq!(*sink.0.lock().expect("lock"), vec![ExitRequest::Reset]);
    }

    #[test]
    fn debug_exit_reports_status() {
        let sink = Arc::new(Sink::default());
        let mut dev = crate::debug_exit::DebugExit::new(sink.clone());
        dev.write(0, &[42]);
        dev.write(0, &[]);
        assert_eq!(
            *sink.0.lock().expect("lock"),
            vec![ExitRequest::DebugExit(42)]
        );
    }
}
