//! What a restore checks before it builds anything ([`load`]): the state file (`file.rs`'s
//! checks), the memory file (a regular file of the saved size whose trailer carries the state
//! file's id: `mem_file.rs`), the configuration the state holds, its shape against that
//! configuration, and each drive's file (there, same size); then it opens each network
//! interface's tap (the saved name, or the one a network override gives: this is the load's
//! preflight, before the VM's sandbox). Every file is opened without blocking and refused unless
//! regular (a drive may be a block device). Every refusal is a [`RestoreError`] that names the
//! file and the reason; none leaves a VM half built.
//!
//! Rolling forward: a create stopped between renaming its memory file into place and its state
//! file (`commit.rs`) leaves the new memory file beside the old state file, and the new state
//! file complete as `snapshot_path` + `.tmp`. When the state file's id is not the memory file's
//! (or the state file is missing or refused), the load takes that temporary if its id is the
//! memory file's, and says so in the log; it writes nothing (the next create there finishes
//! the rename).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::file::{self, StateFileError};
use super::kvm_state::KvmStateError;
use super::mem_file::{self, TrailerError, TRAILER_LEN};
use super::state::{DriveCheckError, SnapshotState};
use crate::config::VmConfig;
use crate::drive::{DriveOpenError, OpenedDrive};

/// Why a snapshot cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The state file is refused.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// The saved configuration does not parse (a writer's bug: the checksum held).
    #[error("snapshot configuration: {0}")]
    Config(#[source] serde_json::Error),
    /// The saved parts do not fit the saved configuration.
    #[error("snapshot has {saved} {what}; its configuration has {configured}")]
    Shape {
        /// vCPUs, drives or device states.
        what: &'static str,
        /// In the state.
        saved: usize,
        /// In the configuration.
        configured: usize,
    },
    /// A drive's file is missing or changed.
    #[error(transparent)]
    Drive(#[from] DriveCheckError),
    /// A drive override names no drive of the snapshot.
    #[error("drive override {0:?}: the snapshot has no such drive")]
    UnknownDrive(String),
    /// A network override names no interface of the snapshot.
    #[error("network_overrides: iface_id {id:?}: the snapshot has no such network interface (it has {known})")]
    UnknownInterface {
        /// The override's `iface_id`.
        id: String,
        /// The snapshot's interfaces, listed for the message.
        known: String,
    },
    /// A network override's tap name is refused, or a tap cannot be opened.
    #[error(transparent)]
    Tap(crate::config::ConfigError),
    /// A drive's file cannot be opened as the configuration asks.
    #[error(transparent)]
    DriveOpen(#[from] DriveOpenError),
    /// The memory file cannot be opened or sized.
    #[error("memory file {}: {source}", path.display())]
    MemFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The memory file has another size than the snapshot's memory and its trailer.
    #[error("memory file {} is {found} bytes; the snapshot's memory and its trailer are {expected}", path.display())]
    MemSize {
        /// The file.
        path: PathBuf,
        /// The snapshot's memory size.
        expected: u64,
        /// The file's size.
        found: u64,
    },
    /// The memory file's trailer is missing or damaged.
    #[error("memory file {}: {source}", path.display())]
    MemTrailer {
        /// The file.
        path: PathBuf,
        /// Why.
        source: TrailerError,
    },
    /// The memory file belongs to another snapshot than the state file.
    #[error("memory file {} belongs to another snapshot than {} (their ids differ: files of two creates, or a create interrupted; docs/snapshot.md)", mem.display(), state.display())]
    Mismatch {
        /// The state file.
        state: PathBuf,
        /// The memory file.
        mem: PathBuf,
    },
    /// KVM refused a saved state.
    #[error(transparent)]
    Kvm(#[from] KvmStateError),
    /// A device's state does not replay.
    #[error("drive {drive}: {source}")]
    Device {
        /// The drive.
        drive: String,
        /// Why.
        source: devices::virtio::pci::state::VirtioPciStateError,
    },
    /// The vsock device's saved state does not fit the saved configuration's vsock (there in
    /// one and not the other, or another CID).
    #[error("snapshot's vsock state (guest_cid {saved:?}) does not match its configuration's vsock (guest_cid {configured:?})")]
    VsockShape {
        /// The state's CID, `None` without a vsock state.
        saved: Option<u64>,
        /// The configuration's CID, `None` without a vsock.
        configured: Option<u64>,
    },
    /// The vsock device's state does not replay.
    #[error("vsock: {0}")]
    VsockDevice(#[source] devices::virtio::pci::state::VirtioPciStateError),
    /// The legacy devices' saved registers do not replay.
    #[error("legacy devices: {0}")]
    Legacy(#[source] devices::serial::SerialRestoreError),
}

/// The files of a snapshot kept in a folder (what `osprey --restore DIR` reads).
#[derive(Debug, Clone)]
pub struct SnapshotFiles {
    /// `DIR/state.snap`.
    pub state: PathBuf,
    /// `DIR/mem.snap`.
    pub memory: PathBuf,
}

impl SnapshotFiles {
    /// The state and memory files in `dir`.
    pub fn in_folder(dir: &Path) -> Self {
        SnapshotFiles {
            state: dir.join("state.snap"),
            memory: dir.join("mem.snap"),
        }
    }
}

/// A snapshot checked and ready to restore.
#[derive(Debug)]
pub struct CheckedSnapshot {
    /// The state.
    pub state: SnapshotState,
    /// The configuration it holds.
    pub config: VmConfig,
    /// The memory file, opened for a private mapping.
    pub mem_file: File,
    /// Each drive's file, opened as the configuration asks.
    pub drives: Vec<OpenedDrive>,
    /// Each network interface's tap, opened (in the configuration's order).
    pub taps: Vec<devices::net::Tap>,
}

/// Another backing file for a drive of the snapshot (a clone's own copy): `(drive id, path)`.
pub type DriveOverride = (String, PathBuf);

/// Another host tap for a network interface of the snapshot (Firecracker's `network_overrides`):
/// `(iface_id, host_dev_name)`.
pub type NetworkOverride = (String, String);

/// Reads the state file at `snapshot_path` and checks it, the drives (each at its override's
/// path when `overrides` names it; the file must have the saved size) and the memory file at
/// `mem_path`, then opens the interfaces' taps (each on its override's tap when `nics` names
/// it).
pub fn load(
    snapshot_path: &Path,
    mem_path: &Path,
    overrides: &[DriveOverride],
    nics: &[NetworkOverride],
) -> Result<CheckedSnapshot, RestoreError> {
    let (mut state, mem_file) = read_pair(snapshot_path, mem_path)?;
    let mut config: VmConfig =
        serde_json::from_str(&state.config_json).map_err(RestoreError::Config)?;
    for (id, path) in overrides {
        let saved = state.drives.iter_mut().find(|d| &d.drive_id == id);
        let configured = config.drives.iter_mut().find(|d| &d.drive_id == id);
        let (Some(saved), Some(configured)) = (saved, configured) else {
            return Err(RestoreError::UnknownDrive(id.clone()));
        };
        saved.path = path.clone();
        configured.path_on_host = path.clone();
    }
    override_taps(&mut config, nics)?;
    let shape = |what, saved: usize, configured: usize| {
        (saved != configured).then_some(RestoreError::Shape {
            what,
            saved,
            configured,
        })
    };
    if let Some(e) = shape(
        "vCPUs",
        state.vcpus.len(),
        usize::from(config.machine.vcpu_count),
    )
    .or_else(|| shape("drives", state.drives.len(), config.drives.len()))
    .or_else(|| {
        shape(
            "device states",
            state.transports.len(),
            config.drives.len() + config.network_interfaces.len(),
        )
    }) {
        return Err(e);
    }
    check_vsock(&state, &config)?;
    state.check_drives()?;
    let drives = config
        .drives
        .iter()
        .map(|d| crate::drive::open(&d.path_on_host, d.is_read_only, d.direct))
        .collect::<Result<Vec<_>, _>>()?;
    // The interfaces' taps last: nothing else is left to refuse once they are open.
    let taps = crate::net::open_taps(&config.network_interfaces).map_err(RestoreError::Tap)?;
    Ok(CheckedSnapshot {
        state,
        config,
        mem_file,
        drives,
        taps,
    })
}

/// The saved vsock state fits the saved configuration: both have a vsock, of one CID, or
/// neither has.
fn check_vsock(state: &SnapshotState, config: &VmConfig) -> Result<(), RestoreError> {
    let saved = state.vsock.as_ref().map(|v| v.guest_cid);
    let configured = config.vsock.as_ref().map(|v| v.guest_cid);
    if saved != configured {
        return Err(RestoreError::VsockShape { saved, configured });
    }
    Ok(())
}

/// Puts each interface `nics` names on its new tap in `config`: an id the snapshot lacks, or a
/// name that is no interface name, is refused (naming `network_overrides[i]`).
fn override_taps(config: &mut VmConfig, nics: &[NetworkOverride]) -> Result<(), RestoreError> {
    for (i, (id, tap)) in nics.iter().enumerate() {
        let known = || {
            let ids: Vec<&str> = config
                .network_interfaces
                .iter()
                .map(|n| n.iface_id.as_str())
                .collect();
            if ids.is_empty() {
                "none".to_string()
            } else {
                ids.join(", ")
            }
        };
        let Some(nic) = config
            .network_interfaces
            .iter()
            .position(|n| &n.iface_id == id)
        else {
            return Err(RestoreError::UnknownInterface {
                id: id.clone(),
                known: known(),
            });
        };
        let nic = &mut config.network_interfaces[nic];
        nic.host_dev_name = tap.clone();
        nic.check(&format!("network_overrides[{i}]"))
            .map_err(RestoreError::Tap)?;
    }
    Ok(())
}

/// The state file and the memory file, checked to be a pair (the same id); rolls forward to the
/// state file's temporary when that one is the memory file's pair (module doc).
fn read_pair(snapshot_path: &Path, mem_path: &Path) -> Result<(SnapshotState, File), RestoreError> {
    let mem_file =
        super::open::open_for_reading(mem_path, false).map_err(|source| RestoreError::MemFile {
            path: mem_path.to_path_buf(),
            source,
        })?;
    let paired = |state_path: &Path| -> Result<SnapshotState, RestoreError> {
        let state = file::read(state_path)?;
        check_memory(&state, state_path, &mem_file, mem_path)?;
        Ok(state)
    };
    let refused = match paired(snapshot_path) {
        Ok(state) => return Ok((state, mem_file)),
        Err(e) => e,
    };
    let staged = super::commit::staged(snapshot_path);
    match paired(&staged) {
        Ok(state) => {
            log::warn!(
                "snapshot: rolled forward to {} ({}: {refused}): a create was interrupted \
                 between its renames",
                staged.display(),
                snapshot_path.display()
            );
            Ok((state, mem_file))
        }
        Err(_) => Err(refused),
    }
}

/// Checks that `mem_file` holds `state`'s memory: its size, then its trailer's id.
fn check_memory(
    state: &SnapshotState,
    state_path: &Path,
    mem_file: &File,
    mem_path: &Path,
) -> Result<(), RestoreError> {
    let found = mem_file
        .metadata()
        .map_err(|source| RestoreError::MemFile {
            path: mem_path.to_path_buf(),
            source,
        })?
        .len();
    let expected = state.mem_size_bytes.saturating_add(TRAILER_LEN);
    if found != expected {
        return Err(RestoreError::MemSize {
            path: mem_path.to_path_buf(),
            expected,
            found,
        });
    }
    let id = mem_file::read_id(mem_file, state.mem_size_bytes).map_err(|source| {
        RestoreError::MemTrailer {
            path: mem_path.to_path_buf(),
            source,
        }
    })?;
    if id != state.mem_id {
        return Err(RestoreError::Mismatch {
            state: state_path.to_path_buf(),
            mem: mem_path.to_path_buf(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod vsock_tests {
    use super::*;
    use crate::snapshot::state::VsockState;

    fn config(vsock: Option<u64>) -> VmConfig {
        let mut cfg = serde_json::json!({"boot-source": {"kernel_image_path": "k"}});
        if let Some(cid) = vsock {
            cfg["vsock"] = serde_json::json!({"guest_cid": cid, "uds_path": "/tmp/v.sock"});
        }
        serde_json::from_value(cfg).expect("config")
    }

    fn state(vsock: Option<u64>) -> SnapshotState {
        SnapshotState {
            vsock: vsock.map(|guest_cid| VsockState {
                guest_cid,
                transport: devices::virtio::pci::state::VirtioPciState {
                    config_space: vec![0; 64],
                    msix_table: Vec::new(),
                    msix_pending: Vec::new(),
                    driver_features: 0,
                    status: 0,
                    config_generation: 0,
                    config_vector: 0,
                    queues: Vec::new(),
                    selects: Default::default(),
                },
            }),
            ..Default::default()
        }
    }

    /// A state file whose vsock state does not fit its own configuration (a writer's bug, or a
    /// file put together by hand) is refused before anything is built, naming both CIDs.
    #[test]
    fn the_vsock_state_must_fit_the_saved_config() {
        check_vsock(&state(None), &config(None)).expect("neither has one");
        check_vsock(&state(Some(3)), &config(Some(3))).expect("the same CID");
        for (saved, configured) in [(Some(3), None), (None, Some(3)), (Some(3), Some(4))] {
            let e = check_vsock(&state(saved), &config(configured)).expect_err("refused");
            assert!(
                matches!(e, RestoreError::VsockShape { saved: s, configured: c } if s == saved && c == configured),
                "{e}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nics() -> VmConfig {
        VmConfig::from_json(
            r#"{"boot-source":{"kernel_image_path":"/k"},"network-interfaces":[
                {"iface_id":"eth0","host_dev_name":"tap0"},
                {"iface_id":"eth1","host_dev_name":"tap1"}]}"#,
            "vm.json",
        )
        .expect("parses")
    }

    #[test]
    fn a_network_override_moves_only_its_interface() {
        let mut c = two_nics();
        override_taps(&mut c, &[("eth1".into(), "clone7".into())]).expect("taken");
        let taps: Vec<&str> = c
            .network_interfaces
            .iter()
            .map(|n| n.host_dev_name.as_str())
            .collect();
        assert_eq!(taps, ["tap0", "clone7"]);
    }

    #[test]
    fn an_unknown_interface_or_a_bad_tap_name_is_refused_by_name() {
        let mut c = two_nics();
        let e = override_taps(&mut c, &[("eth9".into(), "tapX".into())]).expect_err("no eth9");
        let text = e.to_string();
        assert!(
            text.contains("network_overrides")
                && text.contains("\"eth9\"")
                && text.contains("eth0, eth1"),
            "{text}"
        );
        let e = override_taps(
            &mut c,
            &[("eth0".into(), "ok".into()), ("eth1".into(), "a/b".into())],
        )
        .expect_err("not a name");
        assert!(
            e.to_string().contains("network_overrides[1].host_dev_name"),
            "{e}"
        );
    }
}
