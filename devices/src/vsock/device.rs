//! The virtio-vsock device model (virtio 1.2, 5.10): device id 19, queues rx, tx and event,
//! config space `guest_cid` (le64). It binds its Unix socket when made ([`Muxer::bind`]; the
//! VMM removes it when the VM stops), and
//! on activation moves its queues and the muxer onto an iothread as one [`VsockHandler`]; a
//! reset takes them back and closes every connection. Its [`VsockControl`] is how a snapshot
//! holds it still and how a restore asks for the guest's TRANSPORT_RESET.

use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

use dataplane::{Detach, IoThread};

use super::control::VsockControl;
use super::handler::{Returned, VsockHandler, VsockQueues, EVENT, RX, TX};
use super::muxer::{Muxer, MuxerError};
use crate::block::queue::next_owner_id;
use crate::virtio::{
    ActivateError, ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice, VirtioInterrupt,
    VIRTIO_F_VERSION_1, VIRTIO_RING_F_EVENT_IDX,
};

/// virtio-vsock's device type.
pub const DEVICE_TYPE: u32 = virtio_bindings::virtio_ids::VIRTIO_ID_VSOCK;
/// Queue size, each queue.
const QUEUE_SIZE: u16 = 256;
/// How long a reset waits for the iothread.
const RESET_WAIT: Duration = Duration::from_millis(100);

/// The virtio-vsock device.
pub struct VirtioVsock {
    guest_cid: u64,
    muxer: Option<Muxer>,
    iothread: Arc<IoThread>,
    owner: u64,
    acked: u64,
    queue_sizes: [u16; 3],
    returned: Option<Receiver<Returned>>,
    control: Arc<VsockControl>,
}

impl std::fmt::Debug for VirtioVsock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioVsock")
            .field("guest_cid", &self.guest_cid)
            .field("active", &self.returned.is_some())
            .finish_non_exhaustive()
    }
}

impl VirtioVsock {
    /// A device for guest `guest_cid`, its host side on `uds_path` (bound now), served by
    /// `iothread`.
    pub fn new(
        guest_cid: u64,
        uds_path: &Path,
        iothread: Arc<IoThread>,
    ) -> Result<Self, MuxerError> {
        Ok(Self {
            guest_cid,
            muxer: Some(Muxer::bind(guest_cid, uds_path)?),
            iothread,
            owner: next_owner_id(),
            acked: 0,
            queue_sizes: [QUEUE_SIZE; 3],
            returned: None,
            control: Arc::default(),
        })
    }

    /// The guest's CID.
    pub fn guest_cid(&self) -> u64 {
        self.guest_cid
    }

    /// Its control block (the VMM keeps a clone: snapshots hold the device, restores ask for
    /// the guest's TRANSPORT_RESET).
    pub fn control(&self) -> Arc<VsockControl> {
        self.control.clone()
    }
}

impl VirtioDevice for VirtioVsock {
    fn device_type(&self) -> u32 {
        DEVICE_TYPE
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | VIRTIO_RING_F_EVENT_IDX
    }

    fn ack_features(&mut self, features: u64) {
        self.acked = features & self.features();
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        let cfg = self.guest_cid.to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|at| cfg.get(at))
                .copied()
                .unwrap_or(0);
        }
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        log::warn!(
            "virtio-vsock: the guest wrote {} bytes of read-only config at {offset}",
            data.len()
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActivatedQueue>,
    ) -> Result<(), ActivateError> {
        if self.returned.is_some() {
            return Err(ActivateError::AlreadyActive);
        }
        let mut rx = None;
        let mut tx = None;
        let mut event = None;
        for q in queues {
            match q.index {
                RX => rx = Some(q),
                TX => tx = Some(q),
                EVENT => event = Some(q),
                i => {
                    return Err(ActivateError::BadConfig(format!(
                        "queue {i} does not exist"
                    )))
                }
            }
        }
        let (Some(rx), Some(tx)) = (rx, tx) else {
            return Err(ActivateError::BadConfig(
                "rx and tx queues must be ready".into(),
            ));
        };
        let Some(muxer) = self.muxer.take() else {
            return Err(ActivateError::AlreadyActive);
        };
        let (back, returned) = mpsc::channel();
        let h = VsockHandler::new(
            self.owner,
            mem,
            interrupt,
            VsockQueues { rx, tx, event },
            muxer,
            back,
        )
        .with_control(self.control.clone());
        if let Err(e) = self.iothread.attach(vec![Box::new(h)]) {
            // A handler the thread refused is dropped with its muxer: take it back if it came.
            if let Ok(r) = returned.try_recv() {
                self.muxer = Some(r.muxer);
            }
            return Err(e.into());
        }
        self.returned = Some(returned);
        log::info!(
            "virtio-vsock cid {}: active on iothread {}",
            self.guest_cid,
            self.iothread.name()
        );
        Ok(())
    }

    fn reset(&mut self) -> ResetOutcome {
        let Some(returned) = self.returned.as_ref() else {
            return ResetOutcome::Inactive;
        };
        match self.iothread.detach(self.owner, RESET_WAIT) {
            Ok(Detach::Done(_)) => {}
            Ok(Detach::Draining { in_flight }) => return ResetOutcome::Pending { in_flight },
            Err(e) => {
                log::error!("virtio-vsock: reset: {e}");
                return ResetOutcome::Pending { in_flight: 0 };
            }
        }
        let got = returned.try_recv();
        self.returned = None;
        // A new driver instance starts without connections: it is owed no reset event.
        self.control.cancel_transport_reset();
        match got {
            Ok(mut r) => {
                r.muxer.reset();
                self.muxer = Some(r.muxer);
                ResetOutcome::Done(r.queues)
            }
            Err(_) => {
                log::error!("virtio-vsock: its handler left the iothread without its queues");
                ResetOutcome::Done(Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_space_is_the_guest_cid_and_bounds_are_safe() {
        let path = std::env::temp_dir().join(format!("osprey-vsock-d-{}", std::process::id()));
        let it = IoThread::spawn("vsock-test", 32).unwrap();
        let d = VirtioVsock::new(0x1_0000_0003, &path, it).unwrap();
        assert_eq!(d.device_type(), 19);
        let mut b = [0xffu8; 8];
        d.read_config(0, &mut b);
        assert_eq!(u64::from_le_bytes(b), 0x1_0000_0003);
        let mut b = [0xffu8; 4];
        d.read_config(4, &mut b);
        assert_eq!(b, [1, 0, 0, 0]);
        d.read_config(u64::MAX, &mut b);
        assert_eq!(b, [0; 4]);
        assert!(path.exists());
        drop(d);
        let _ = std::fs::remove_file(&path);
    }
}
