//! Why a VM could not be built or started ([`VmError`]): one variant per step of start-up.

use crate::device_manager::DeviceError;
use crate::sandbox::SandboxError;
use arch::boot::BootError;
use arch::regs::RegsError;
use arch::{acpi, mptable};

/// Errors building or starting the VM.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A KVM ioctl failed.
    #[error("KVM: {what}: {source}")]
    Kvm {
        /// The operation.
        what: &'static str,
        /// The ioctl's error.
        source: kvm_ioctls::Error,
    },
    /// A snapshot's state could not be restored.
    #[error("restoring the snapshot: {0}")]
    Restore(#[from] crate::snapshot::restore::RestoreError),
    /// Listing the MSRs a snapshot saves failed.
    #[error("snapshot set-up: {0}")]
    SnapshotSetUp(crate::snapshot::kvm_state::KvmStateError),
    /// Allocating guest memory failed.
    #[error("Allocating {mib} MiB of guest memory failed: {source}")]
    Memory {
        /// Requested size.
        mib: u64,
        /// Why: vm-memory's or the kernel's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Loading the kernel or initrd failed.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// Writing the ACPI tables failed.
    #[error(transparent)]
    Acpi(#[from] acpi::AcpiError),
    /// Writing the MP table failed.
    #[error(transparent)]
    Mptable(#[from] mptable::MptableError),
    /// Writing boot registers' memory failed.
    #[error(transparent)]
    Regs(#[from] RegsError),
    /// Building devices failed.
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// The config asks for more than the host allows.
    #[error(transparent)]
    Limit(#[from] crate::host::VcpuLimitError),
    /// Building a seccomp filter failed.
    #[error("Seccomp: {0}")]
    Seccomp(#[source] crate::seccomp::SeccompError),
    /// Entering the sandbox failed.
    #[error("Sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    /// An iothread could not enter the sandbox.
    #[error("entering the sandbox on an iothread: {0}")]
    IoThreadSandbox(#[source] dataplane::IoThreadError),
    /// The API server could not start.
    #[error("starting the API server: {0}")]
    Api(#[source] crate::api::ApiServerError),
    /// The API thread that served before the start could not enter the sandbox.
    #[error("entering the sandbox on the API thread: {0}")]
    ApiSandbox(#[source] crate::api::server::ApiHookError),
    /// The API thread stopped before the VM was started over it.
    #[error("the API thread stopped before InstanceStart")]
    ApiStopped,
    /// The control thread's event loop could not be set up.
    #[error(transparent)]
    ControlLoop(#[from] crate::control_loop::ControlLoopError),
    /// Creating an eventfd or thread failed.
    #[error("{what}: {source}")]
    Os {
        /// The operation.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Wraps a KVM ioctl's error with what was being done.
pub(super) fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { what, source }
}
