//! The VM's virtio-vsock device (config `vsock`, `PUT /vsock`): made when the devices are
//! built, so its Unix socket is bound before the VM runs, and removed when the device goes
//! (the VM's exit). It sits on the first iothread, beside the disks. A snapshot holds it
//! still ([`VsockHandle::hold`]) while it reads its state and guest memory; a restore holds it
//! from its replay until the vCPUs exist, its guest then getting a TRANSPORT_RESET
//! (`vm::restore_devices`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dataplane::IoThread;
use dataplane::IoThreadError;
use devices::virtio::pci::VirtioPciDevice;
use devices::vsock::{MuxerError, VirtioVsock, VsockControl};
use vmm_config::vsock::VsockConfig;

use crate::device_manager::{AttachError, Attached, PciWiring};

/// Why the vsock device could not be built.
#[derive(Debug, thiserror::Error)]
pub enum VsockDeviceError {
    /// No iothread to serve it.
    #[error("no iothread to serve it")]
    NoIoThread,
    /// Its socket.
    #[error(transparent)]
    Muxer(#[from] MuxerError),
    /// Its place on the PCI bus.
    #[error(transparent)]
    Attach(#[from] AttachError),
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
    /// Its control block (hold, transport reset).
    pub control: Arc<VsockControl>,
    /// The iothread serving it.
    pub iothread: Arc<IoThread>,
}

impl VsockHandle {
    /// Holds the device still: once this returns, its handler delivers nothing to the guest
    /// and reads no host socket until [`VsockHandle::release`] (a turn in progress when the
    /// gate closed has ended: the iothread ran a no-op between two turns).
    pub fn hold(&self) -> Result<(), IoThreadError> {
        self.control.hold().hold_on(&self.iothread)
    }

    /// Ends a hold (a snapshot's, a restore's); the queues are nudged so the handler looks at
    /// what waited (and sends an asked TRANSPORT_RESET).
    pub fn release(&self) {
        self.control.hold().release(&self.transport);
    }
}

/// Builds the device of `v` (binding its socket) on the next PCI slot.
pub fn add(
    w: &PciWiring<'_>,
    v: &VsockConfig,
    iothreads: &BTreeMap<String, Arc<IoThread>>,
) -> Result<VsockHandle, VsockDeviceError> {
    let thread = iothreads
        .values()
        .next()
        .cloned()
        .ok_or(VsockDeviceError::NoIoThread)?;
    let device = VirtioVsock::new(v.guest_cid, &v.uds_path, thread.clone())?;
    let control = device.control();
    let Attached { slot, transport } = w.attach(Box::new(device))?;
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
        control,
        iothread: thread,
    })
}
