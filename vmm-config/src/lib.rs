//! The VM's configuration and what is decided from it before any KVM resource exists: the config
//! file's sections (also the API's bodies) and their checks, start-up's preflight against the
//! host, rate limits, the metric declarations and reports, the logger, the sandbox and its
//! seccomp filters, the folders a VM may reach, and the API's socket file. Below `api` and `vmm`;
//! module map: `docs/ARCHITECTURE.md`.

pub mod affinity;
pub mod allowed_folders;
pub mod boot_timing;
pub mod config;
pub mod drive;
pub mod fault_injection;
pub mod field_update;
pub mod host;
pub mod identity;
pub mod instance;
pub mod line_sink;
pub mod logger;
pub mod metrics;
pub mod net;
pub mod preflight;
pub mod rate_limit;
pub mod sandbox;
pub mod seccomp;
pub mod snapshot_folder;
pub mod socket;
pub mod swap_folder;
#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;
pub mod thread_placement;
pub mod thread_weights;
pub mod vsock;
