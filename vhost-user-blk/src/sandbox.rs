//! The backend's sandbox: the VMM's ([`vmm::sandbox`]), entered by each thread once set up.
//! Landlock leaves the drives (already open) and the API socket's folder reachable; privileges
//! are dropped (to `--uid/--gid` when given); each thread installs a seccomp list: iothreads the
//! VMM's iothread list, the API thread the API list, each socket's serving thread the API
//! list too (a socket server's calls: `accept4`, `recvmsg` with the frontend's fds, `sendmsg`,
//! `mmap` of the shared memory, `close`), and the main thread, which then only waits, the
//! control list. `--sandbox off` turns it off.

use std::path::Path;
use std::sync::Arc;

use vmm::sandbox::{DrivePath, Sandbox, SandboxConfig, SandboxError, SandboxMode, VmPaths};
use vmm::seccomp::{Filters, SeccompMode};

use super::config::VhostUserConfig;

/// What the sandbox keeps reachable: the drives and the API socket's folder. (The VMM's
/// ruleset also names a kernel, which a backend has none of: its own binary stands in, read
/// only.)
fn paths(config: &VhostUserConfig, api_sock: Option<&Path>) -> VmPaths {
    VmPaths {
        drives: config
            .drives
            .iter()
            .map(|d| DrivePath {
                id: d.drive.drive_id.clone(),
                path: d.drive.path_on_host.clone(),
                read_only: d.drive.is_read_only,
            })
            .collect(),
        kernel: std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into()),
        initrd: None,
        metrics: None,
        api_socket: api_sock.map(Path::to_path_buf),
        // A backend takes no snapshots, and swaps no file.
        snapshot_folders: Vec::new(),
        allowed_folders: Vec::new(),
        vsock_socket: None,
    }
}

/// Compiles the sandbox every thread will enter (seccomp unless `--sandbox off`).
pub fn prepare(
    sandbox: &SandboxConfig,
    config: &VhostUserConfig,
    api_sock: Option<&Path>,
) -> Result<Arc<Sandbox>, SandboxError> {
    let filters = match (sandbox.mode, vmm::seccomp::mode()) {
        (SandboxMode::Off, _) | (_, SeccompMode::Off) => None,
        (_, SeccompMode::On) => Some(Filters::build()?),
    };
    Sandbox::prepare(sandbox, &paths(config, api_sock), filters, 0)
}
