//! Osprey's VMM: configuration, KVM set-up, boot, vCPUs and device wiring.
//!
//! The `osprey` binary (`main.rs`) is a thin shell over [`vm::run`]. Module map: `docs/ARCHITECTURE.md`.

pub mod affinity;
pub mod allowed_folders;
pub mod api;
pub mod boot_timing;
pub mod config;
pub mod control_loop;
pub(crate) mod controller;
pub(crate) mod cpu_usage;
pub mod device_manager;
pub mod drive;
pub mod events;
pub mod fault_injection;
pub(crate) mod field_update;
pub mod host;
pub mod instance;
pub(crate) mod interrupts;
pub mod launch;
pub mod live_tuning;
pub mod logger;
pub mod metrics;
pub mod preboot;
pub(crate) mod preflight;
pub mod rate_limit;
pub mod sandbox;
pub mod seccomp;
pub mod snapshot;
pub mod snapshot_folder;
pub mod stop;
pub mod swap_folder;
#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;
pub mod thread_weights;
pub(crate) mod vcpu;
pub mod vm;
