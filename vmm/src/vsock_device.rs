//! The VM's virtio-vsock device (config `vsock`, `PUT /vsock`): made when the devices are
//! built, so its Unix socket is bound before the VM runs, and removed when the device goes
//! (the VM's exit). It sits on the first iothread, beside the disks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dataplane::IoThread;
use devices::pci::root::{PciRoot, PciRootError};
use devices::virtio::pci::{VirtioPciDevice, VirtioPciError};
use devices::virtio::GuestMemory;
use devices::vsock::{MuxerError, VirtioVsock};
use vmm_config::vsock::VsockConfig;

use crate::interrupts::{GsiRouter, KvmIoEvents};

/// MSI-X vectors: rx, tx, event and the config change.
const VECTORS: usize = 4;

/// Why the vsock device could not be built.
#[derive(Debug, thiserror::Error)]
pub enum VsockDeviceError {
    /// No iothread to serve it.
    #[error("no iothread to serve it")]
    NoIoThread,
    /// Its socket.
    #[error(transparent)]
    Muxer(#[from] MuxerError),
    /// Its MSI-X vectors.
    #[error("MSI-X vectors: {0}")]
    Vectors(#[source] std::io::Error),
    /// Its virtio-pci function.
    #[error("PCI: {0}")]
    VirtioPci(#[from] VirtioPciError),
    /// Its PCI slot.
    #[error("PCI: {0}")]
    Slot(#[from] PciRootError),
}

/// The vsock device as the rest of the VMM sees it.
#[derive(Debug)]
pub struct VsockHandle {
    /// Its PCI slot.
    pub slot: u8,
    /// The guest's CID.
    pub guest_cid: u64,
    /// Its socket.
    pub uds_path: PathBuf,
    /// Its transport (the snapshot's way to it).
    pub transport: Arc<Mutex<VirtioPciDevice>>,
}

/// What a virtio-pci device is wired to (the device manager's).
#[derive(Debug)]
pub struct Wiring<'a> {
    /// The PCI root.
    pub pci: &'a Arc<Mutex<PciRoot>>,
    /// MSI routes.
    pub router: &'a Arc<GsiRouter>,
    /// ioeventfds.
    pub ioevents: &'a Arc<KvmIoEvents>,
    /// Guest memory.
    pub mem: &'a GuestMemory,
}

/// Builds the device of `v` (binding its socket) on the next PCI slot.
pub fn add(
    w: Wiring<'_>,
    v: &VsockConfig,
    iothreads: &BTreeMap<String, Arc<IoThread>>,
) -> Result<VsockHandle, VsockDeviceError> {
    let thread = iothreads
        .values()
        .next()
        .cloned()
        .ok_or(VsockDeviceError::NoIoThread)?;
    let device = VirtioVsock::new(v.guest_cid, &v.uds_path, thread.clone())?;
    let vectors = w
        .router
        .allocate_vectors(VECTORS)
        .map_err(VsockDeviceError::Vectors)?;
    let dev = VirtioPciDevice::new(
        Box::new(device),
        w.mem.clone(),
        vectors,
        w.router.clone(),
        w.ioevents.clone(),
    )?;
    let transport = Arc::new(Mutex::new(dev));
    let slot = w
        .pci
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .add_device(transport.clone())?;
    log::info!(
        "vsock: virtio-vsock at 00:{slot:02x}.0, guest cid {}, socket {}, iothread {}",
        v.guest_cid,
        v.uds_path.display(),
        thread.name()
    );
    Ok(VsockHandle {
        slot,
        guest_cid: v.guest_cid,
        uds_path: v.uds_path.clone(),
        transport,
    })
}
