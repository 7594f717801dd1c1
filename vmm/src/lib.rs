//! Osprey's VMM: KVM set-up, boot, vCPUs, device wiring, the control loop, snapshots.
//!
//! The `osprey` binary (the `osprey` crate) is a thin shell over [`vm::run`]. Module map: `docs/ARCHITECTURE.md`.

pub mod control_loop;
pub(crate) mod controller;
pub(crate) mod cpu_usage;
pub mod device_manager;
pub mod events;
pub(crate) mod interrupts;
pub mod launch;
pub mod live_tuning;
pub mod preboot;
pub mod snapshot;
pub(crate) mod soft_exception;
pub mod stop;
#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;

pub(crate) mod vcpu;
pub mod vm;
pub mod vsock_device;

// The layers below, at the paths the VMM's modules and its users name them by.
pub use api;
pub use vmm_config::{
    affinity, allowed_folders, boot_timing, config, drive, fault_injection, host, identity,
    instance, logger, metrics, net, rate_limit, sandbox, seccomp, snapshot_folder, swap_folder,
    thread_placement, thread_weights,
};
pub(crate) use vmm_config::{field_update, line_sink, preflight};
