//! The debug-exit port: a guest writes one byte to port 0xf4 and the VMM exits with that byte as
//! its status. Test guests use it to report success or failure without a shutdown protocol.

use std::sync::Arc;

use crate::bus::BusDevice;
use crate::{ExitRequest, ExitRequester};

/// The I/O port the debug-exit device listens on.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Ends the VM with the status the guest writes.
pub struct DebugExit {
    exit: Arc<dyn ExitRequester>,
}

impl std::fmt::Debug for DebugExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DebugExit")
    }
}

impl DebugExit {
    /// A debug-exit device that reports to `exit`.
    pub fn new(exit: Arc<dyn ExitRequester>) -> Self {
        Self { exit }
    }
}

impl BusDevice for DebugExit {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&mut self, _offset: u64, data: &[u8]) {
        if let Some(&status) = data.first() {
            self.exit.request_exit(ExitRequest::DebugExit(status));
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
    fn debug_exit_reports_status() {
        let sink = Arc::new(Sink::default());
        let mut dev = DebugExit::new(sink.clone());
        dev.write(0, &[42]);
        dev.write(0, &[]);
        assert_eq!(
            *sink.0.lock().expect("lock"),
            vec![ExitRequest::DebugExit(42)]
        );
    }
}
