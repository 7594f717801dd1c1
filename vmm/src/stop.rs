//! Why the VM stopped, and the exit status the `osprey` process returns for it.
//!
//! Status 0 for a clean stop (reset, triple fault, halt, SIGINT/SIGTERM), the guest's own byte for
//! the debug-exit port, 1 for a vCPU failure. (Status 2 is reserved for configuration errors,
//! which happen before a VM exists.)

use devices::ExitRequest;

/// The reason the VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A device asked to end the VM (i8042 reset, debug-exit port).
    Guest(ExitRequest),
    /// A vCPU saw a shutdown: triple fault, halt, or a system event.
    Shutdown {
        /// Which vCPU.
        vcpu: u8,
        /// What KVM reported.
        reason: String,
    },
    /// A vCPU exit that means the VM cannot go on.
    Failed {
        /// Which vCPU.
        vcpu: u8,
        /// The exit, suberror and guest RIP.
        message: String,
    },
    /// The VMM received SIGINT or SIGTERM.
    Signal(i32),
    /// `PUT /actions {"action_type": "Shutdown"}`.
    ApiShutdown,
}

impl StopReason {
    /// The process exit status for this stop.
    pub fn exit_status(&self) -> i32 {
        match self {
            Self::Guest(ExitRequest::Reset)
            | Self::Shutdown { .. }
            | Self::Signal(_)
            | Self::ApiShutdown => 0,
            Self::Guest(ExitRequest::DebugExit(code)) => i32::from(*code),
            Self::Failed { .. } => 1,
        }
    }

    /// A one-line description for the log.
    pub fn describe(&self) -> String {
        match self {
            Self::Guest(ExitRequest::Reset) => "the guest reset the machine (i8042)".into(),
            Self::Guest(ExitRequest::DebugExit(code)) => {
                format!("the guest wrote {code} to the debug-exit port")
            }
            Self::Shutdown { vcpu, reason } => format!("vCPU {vcpu}: {reason}"),
            Self::Failed { vcpu, message } => format!("vCPU {vcpu} failed: {message}"),
            Self::Signal(sig) => format!("received signal {sig}; stopped the VM"),
            Self::ApiShutdown => "shut down through the API".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(StopReason::Guest(ExitRequest::Reset).exit_status(), 0);
        assert_eq!(
            StopReason::Guest(ExitRequest::DebugExit(7)).exit_status(),
            7
        );
        assert_eq!(
            StopReason::Shutdown {
                vcpu: 0,
                reason: String::new()
            }
            .exit_status(),
            0
        );
        assert_eq!(
            StopReason::Failed {
                vcpu: 1,
                message: String::new()
            }
            .exit_status(),
            1
        );
        assert_eq!(StopReason::Signal(libc::SIGTERM).exit_status(), 0);
    }
}
