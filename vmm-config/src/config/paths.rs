//! The host paths a config names, gathered for the sandbox ([`VmPaths`]): what must stay
//! reachable once every thread is set up, where a snapshot may create files, and the folders
//! the operator allows beyond the VM's own ([`crate::allowed_folders`]).

use crate::sandbox::{DrivePath, VmPaths};

use super::VmConfig;

impl VmConfig {
    /// The drives', kernel's, initrd's, metrics file's and API socket's paths, and the folders
    /// where a snapshot may create its files.
    pub fn sandbox_paths(&self) -> VmPaths {
        VmPaths {
            drives: self
                .drives
                .iter()
                .map(|d| DrivePath {
                    id: d.drive_id.clone(),
                    path: d.path_on_host.clone(),
                    read_only: d.is_read_only,
                })
                .collect(),
            kernel: self.boot.kernel_image_path.clone(),
            initrd: self.boot.initrd_path.clone(),
            metrics: self.metrics.as_ref().map(|m| m.path.clone()),
            api_socket: self.api.as_ref().map(|a| a.socket.clone()),
            snapshot_folders: crate::snapshot_folder::rule_folders(
                self.api.as_ref().map(|a| a.socket.as_path()),
                self.snapshot.as_ref().map(|s| s.folder.as_path()),
            ),
            allowed_folders: self.sandbox.allowed_folders.clone(),
            vsock_socket: self.vsock.as_ref().map(|v| v.uds_path.clone()),
        }
    }

    /// The folders a live swap may take a file from besides the drive's own (the operator's,
    /// resolved now: call before the sandbox); `None` with the sandbox off (any path).
    pub fn swap_allowed_folders(&self) -> Option<crate::allowed_folders::AllowedFolders> {
        (self.sandbox.mode != crate::sandbox::SandboxMode::Off).then(|| {
            crate::allowed_folders::AllowedFolders::resolve(
                &crate::allowed_folders::with_socket_folder(None, &self.sandbox.allowed_folders),
            )
        })
    }

    /// The folders the pre-boot API's paths must lie in (the API socket's folder and the
    /// operator's, resolved now); `None` with the sandbox off (any path).
    pub fn preboot_allowed_folders(&self) -> Option<crate::allowed_folders::AllowedFolders> {
        (self.sandbox.mode != crate::sandbox::SandboxMode::Off).then(|| {
            crate::allowed_folders::AllowedFolders::resolve(
                &crate::allowed_folders::with_socket_folder(
                    self.api.as_ref().map(|a| a.socket.as_path()),
                    &self.sandbox.allowed_folders,
                ),
            )
        })
    }
}
