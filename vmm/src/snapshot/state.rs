//! What a snapshot holds ([`SnapshotState`], the state file's body) and the checks of it against
//! the host before a restore builds anything: each drive's file still there with the size it had.

use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::kvm_state::{VcpuState, VmState};

/// The whole saved VM, apart from guest memory (its own file).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SnapshotState {
    /// The Osprey that wrote it (`CARGO_PKG_VERSION`); the first field, so a reader can check it
    /// before anything else (`file::decode`).
    pub osprey_version: String,
    /// The VM's configuration (`VmConfig`, as its JSON file): the restore rebuilds the VM and
    /// its devices from it. JSON because the config's serde shape (optional and renamed
    /// sections) is a self-describing one.
    pub config_json: String,
    /// Guest memory size; the memory file holds this many bytes, then its trailer.
    pub mem_size_bytes: u64,
    /// The snapshot's id, drawn at its create and written into the memory file's trailer too
    /// (`mem_file.rs`): a restore refuses a memory file of another snapshot.
    pub mem_id: super::mem_file::SnapshotId,
    /// Each vCPU, in index order.
    pub vcpus: Vec<VcpuState>,
    /// The in-kernel irqchip, PIT and kvmclock.
    pub vm: VmState,
    /// Each drive's backing file as it was, in config order.
    pub drives: Vec<DriveState>,
    /// Each drive's virtio-pci function, in config order, then each network interface's.
    pub transports: Vec<devices::virtio::pci::state::VirtioPciState>,
    /// The PCI configuration latch and COM1.
    pub legacy: super::legacy::LegacyState,
    /// The rate limiters' bucket levels: each drive's own, then each group's.
    pub rate_limits: Vec<LimiterLevels>,
    /// The vsock device, when the VM has one (format v4).
    pub vsock: Option<VsockState>,
    /// Each network interface's own state, in config order (format v5).
    pub nics: Vec<NicState>,
}

/// A network interface's state beyond its virtio-pci function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicState {
    /// Its `iface_id`.
    pub iface_id: String,
    /// The queue pairs the guest had enabled (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET; 1 without
    /// multi-queue): the restored device serves as many.
    pub enabled_pairs: u16,
}

/// The vsock device at the snapshot: its virtio-pci function and its config space. Its
/// connections are not saved: a restore starts with none, binds `uds_path` again and sends
/// the guest a TRANSPORT_RESET event (docs/vsock.md, "Snapshots").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VsockState {
    /// The config space's `guest_cid` (the restore checks it against the saved config's).
    pub guest_cid: u64,
    /// Its virtio-pci function.
    pub transport: devices::virtio::pci::state::VirtioPciState,
}

/// Whose rate limiter a [`LimiterLevels`] is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LimiterOwner {
    /// A drive's own `rate_limiter`, by drive id.
    Drive(String),
    /// A `rate-limit-groups` entry, by group id.
    Group(String),
}

/// One bucket's fill (`dataplane::rate_limit::BucketLevel`): token·ns budget, burst left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedBucket {
    /// Tokens × refill time in ns (negative while in debt).
    pub budget: i128,
    /// One-time burst tokens left.
    pub burst: u64,
}

impl From<dataplane::rate_limit::BucketLevel> for SavedBucket {
    fn from(l: dataplane::rate_limit::BucketLevel) -> Self {
        SavedBucket {
            budget: l.budget,
            burst: l.burst,
        }
    }
}

impl From<SavedBucket> for dataplane::rate_limit::BucketLevel {
    fn from(s: SavedBucket) -> Self {
        dataplane::rate_limit::BucketLevel {
            budget: s.budget,
            burst: s.burst,
        }
    }
}

/// A rate limiter's bucket levels at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimiterLevels {
    /// Whose limiter.
    pub owner: LimiterOwner,
    /// The ops bucket (`None`: none limits).
    pub ops: Option<SavedBucket>,
    /// The bandwidth bucket.
    pub bandwidth: Option<SavedBucket>,
}

impl LimiterLevels {
    /// `limiter`'s levels now.
    pub fn of(owner: LimiterOwner, limiter: &dataplane::rate_limit::RateLimiter) -> Self {
        let (ops, bandwidth) = limiter.levels();
        LimiterLevels {
            owner,
            ops: ops.map(Into::into),
            bandwidth: bandwidth.map(Into::into),
        }
    }

    /// Sets the levels on `limiter` (of the same limits, rebuilt from the saved config).
    pub fn apply(&self, limiter: &dataplane::rate_limit::RateLimiter) {
        limiter.set_levels(self.ops.map(Into::into), self.bandwidth.map(Into::into));
    }
}

/// A drive's backing file at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveState {
    /// The drive's id.
    pub drive_id: String,
    /// Its backing file.
    pub path: PathBuf,
    /// The file's size in bytes.
    pub size_bytes: u64,
}

/// A drive's file does not match the snapshot.
#[derive(Debug, thiserror::Error)]
pub enum DriveCheckError {
    /// The file cannot be opened (missing, or no permission).
    #[error("drive {drive_id}: {}: {source}", path.display())]
    Unreadable {
        /// The drive.
        drive_id: String,
        /// Its file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's size changed since the snapshot.
    #[error("drive {drive_id}: {} is {now} bytes; the snapshot's was {saved}", path.display())]
    SizeChanged {
        /// The drive.
        drive_id: String,
        /// Its file.
        path: PathBuf,
        /// Its size at the snapshot.
        saved: u64,
        /// Its size now.
        now: u64,
    },
}

/// The size of the regular file or block device at `path` (opened without blocking: anything
/// else, a FIFO above all, is refused at once).
pub fn file_size(path: &Path) -> std::io::Result<u64> {
    // Seeking to the end sizes regular files and block devices alike.
    super::open::open_for_reading(path, true)?.seek(SeekFrom::End(0))
}

impl DriveState {
    /// Checks that the file is there with the saved size.
    pub fn check(&self) -> Result<(), DriveCheckError> {
        let now = file_size(&self.path).map_err(|source| DriveCheckError::Unreadable {
            drive_id: self.drive_id.clone(),
            path: self.path.clone(),
            source,
        })?;
        if now != self.size_bytes {
            return Err(DriveCheckError::SizeChanged {
                drive_id: self.drive_id.clone(),
                path: self.path.clone(),
                saved: self.size_bytes,
                now,
            });
        }
        Ok(())
    }
}

impl SnapshotState {
    /// Checks every drive's file against the snapshot.
    pub fn check_drives(&self) -> Result<(), DriveCheckError> {
        self.drives.iter().try_for_each(DriveState::check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_resized_drive_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("osprey-snap-drive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("disk.img");
        std::fs::write(&path, vec![0u8; 8192]).expect("write");
        let drive = DriveState {
            drive_id: "data".into(),
            path: path.clone(),
            size_bytes: 8192,
        };
        drive.check().expect("unchanged");
        std::fs::write(&path, vec![0u8; 4096]).expect("shrink");
        let e = drive.check().expect_err("resized");
        assert!(
            e.to_string()
                .contains("is 4096 bytes; the snapshot's was 8192"),
            "{e}"
        );
        std::fs::remove_file(&path).expect("remove");
        let e = drive.check().expect_err("missing");
        assert!(e.to_string().starts_with("drive data: "), "{e}");
        assert!(e.to_string().contains("No such file"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
