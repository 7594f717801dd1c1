//! The i8042 keyboard controller: vm-superio's `I8042Device` (enough for Linux's probe and for
//! `reboot=k`, whose CPU-reset pulse, command 0xFE on port 0x64, ends the VM cleanly) on the
//! port bus, its reset reported to the VM's [`ExitRequester`].

use std::sync::Arc;

use vm_superio::{I8042Device, Trigger};

use crate::bus::BusDevice;
use crate::{ExitRequest, ExitRequester};

/// First port of the controller (data); the device spans 0x60..=0x64.
pub const I8042_BASE: u16 = 0x60;
/// Number of ports the device spans.
pub const I8042_LEN: u64 = 5;
#[cfg(test)]
const COMMAND_OFFSET: u64 = 4;
#[cfg(test)]
const CMD_RESET_CPU: u8 = 0xfe;

/// The controller's reset line: a VM reset request.
struct ResetLine(Arc<dyn ExitRequester>);

impl Trigger for ResetLine {
    type E = std::convert::Infallible;

    fn trigger(&self) -> Result<(), Self::E> {
        self.0.request_exit(ExitRequest::Reset);
        Ok(())
    }
}

/// The i8042 controller.
pub struct I8042 {
    device: I8042Device<ResetLine>,
}

impl std::fmt::Debug for I8042 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("I8042")
    }
}

impl I8042 {
    /// A controller that reports resets to `exit`.
    pub fn new(exit: Arc<dyn ExitRequester>) -> Self {
        Self {
            device: I8042Device::new(ResetLine(exit)),
        }
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        // Status 0: output buffer empty, input buffer empty; data reads as 0.
        let value = u8::try_from(offset).map_or(0, |o| self.device.read(o));
        data.fill(value);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(offset), Some(&value)) = (u8::try_from(offset), data.first()) {
            // Infallible: the reset line cannot fail.
            let _ = self.device.write(offset, value);
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
