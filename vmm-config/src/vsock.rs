//! `vsock`: Firecracker's virtio-vsock section and `PUT /vsock` body (`guest_cid`, `uds_path`,
//! optional `vsock_id`), and its checks, each error naming the field.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

/// The lowest CID a guest may have (0-2 are the hypervisor's, the loopback's and the host's).
pub const MIN_GUEST_CID: u64 = 3;
/// The CID firecracker-containerd sends: the go-sdk's `VsockDevice.CID` left at its zero value
/// (`PUT /vsock {"guest_cid": 0, ...}`). Firecracker takes it as it is, and so does Osprey: the
/// guest reads 0 from the device's config, and host-initiated connections (`CONNECT <port>`)
/// work the same, since the host side never names the guest's CID.
pub const UNSET_GUEST_CID: u64 = 0;
/// The longest `uds_path` (a Unix socket path is at most 107 bytes, and guest-initiated
/// connections append `_<port>`, up to 11 bytes).
pub const MAX_UDS_PATH: usize = 107 - 11;

/// A virtio-vsock device whose host side is Unix sockets (Firecracker's hybrid vsock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VsockConfig {
    /// An id (Firecracker's, optional and unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsock_id: Option<String>,
    /// The guest's context id: 3 to 2^32 - 1, or 0 (firecracker-containerd's unset value, taken
    /// as Firecracker takes it: the guest reads 0).
    pub guest_cid: u64,
    /// The Unix socket host programs connect to (`CONNECT <port>\n`); the guest's connections
    /// to host port P go to `<uds_path>_P`.
    #[schema(value_type = String)]
    pub uds_path: PathBuf,
}

impl VsockConfig {
    /// Checks the values; `at` is the JSON path of the section (`vsock`).
    pub fn check(&self, at: &str) -> Result<(), ConfigError> {
        let cid = self.guest_cid;
        if cid != UNSET_GUEST_CID && !(MIN_GUEST_CID..=u64::from(u32::MAX)).contains(&cid) {
            return Err(invalid(
                format!("{at}.guest_cid"),
                format!(
                    "must be from {MIN_GUEST_CID} to {}, or {UNSET_GUEST_CID}, got {cid}",
                    u32::MAX
                ),
            ));
        }
        let len = self.uds_path.as_os_str().len();
        if len == 0 || len > MAX_UDS_PATH {
            return Err(invalid(
                format!("{at}.uds_path"),
                format!("must be a path of 1 to {MAX_UDS_PATH} bytes, got {len}"),
            ));
        }
        if self.uds_path.file_name().is_none() {
            return Err(invalid(
                format!("{at}.uds_path"),
                format!("{}: must name a file", self.uds_path.display()),
            ));
        }
        Ok(())
    }

    /// The folder of `uds_path` (the sandbox lets Osprey create and connect to sockets there).
    pub fn folder(&self) -> PathBuf {
        match self.uds_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cid: u64, path: &str) -> VsockConfig {
        VsockConfig {
            vsock_id: None,
            guest_cid: cid,
            uds_path: path.into(),
        }
    }

    #[test]
    fn checks_name_the_field() {
        assert!(cfg(3, "/tmp/v.sock").check("vsock").is_ok());
        // firecracker-containerd's `guest_cid: 0` (the go-sdk's zero value), as Firecracker.
        assert!(cfg(0, "firecracker.vsock").check("vsock").is_ok());
        let e = cfg(1, "/tmp/v.sock").check("vsock").unwrap_err();
        assert!(e.to_string().starts_with("vsock.guest_cid: "), "{e}");
        let e = cfg(2, "/tmp/v.sock").check("vsock").unwrap_err();
        assert!(e.to_string().starts_with("vsock.guest_cid: "), "{e}");
        let e = cfg(1 << 32, "/tmp/v.sock").check("vsock").unwrap_err();
        assert!(e.to_string().starts_with("vsock.guest_cid: "), "{e}");
        let e = cfg(3, "").check("vsock").unwrap_err();
        assert!(e.to_string().starts_with("vsock.uds_path: "), "{e}");
        let long = format!("/{}", "a".repeat(120));
        assert!(cfg(3, &long).check("vsock").is_err());
        assert!(cfg(3, "/").check("vsock").is_err());
        assert_eq!(cfg(3, "v.sock").folder(), PathBuf::from("."));
    }

    #[test]
    fn firecrackers_shape_parses() {
        let v: VsockConfig =
            serde_json::from_str(r#"{"vsock_id":"vsock0","guest_cid":3,"uds_path":"/v.sock"}"#)
                .unwrap();
        assert_eq!(v.vsock_id.as_deref(), Some("vsock0"));
        assert!(serde_json::from_str::<VsockConfig>(r#"{"guest_cid":3}"#).is_err());
        assert!(
            serde_json::from_str::<VsockConfig>(r#"{"guest_cid":3,"uds_path":"/v","x":1}"#)
                .is_err()
        );
    }
}
