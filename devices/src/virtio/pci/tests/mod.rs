//! Tests for the virtio-pci transport, driven like a guest driver through the PCI root's port
//! and MMIO adapters, against a mock device model.

use std::sync::{Arc, Mutex};

use vm_memory::GuestAddress;

use super::*;
use crate::bus::Bus;
use crate::pci::mocks::{count, vectors, RecordingIoEvents, RecordingRouting};
use crate::pci::{PciConfigIo, PciMmioWindow, PciRoot, PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN};

const WINDOW: u64 = 0xd000_0000;
const FEATURE_BIT1: u64 = 1 << 1;
const OFFERED: u64 = VIRTIO_F_VERSION_1 | VIRTIO_RING_F_EVENT_IDX | FEATURE_BIT1;

/// An activated queue as the mock saw it: index, size, desc, avail, used, ready, EVENT_IDX.
type SeenQueue = (u16, u16, u64, u64, u64, bool, bool);

/// What the mock device saw.
#[derive(Default)]
struct MockState {
    acked: Option<u64>,
    activations: Vec<Vec<SeenQueue>>,
    kicks: Vec<EventFd>,
    interrupt: Option<Arc<dyn VirtioInterrupt>>,
    queues: Option<Vec<ActivatedQueue>>,
    resets: usize,
    /// Resets to answer `Pending` before the next `Done`.
    pending_resets: usize,
    fail_activate: bool,
    config_writes: Vec<(u64, Vec<u8>)>,
}

struct MockDevice(Arc<Mutex<MockState>>);

impl VirtioDevice for MockDevice {
    fn device_type(&self) -> u32 {
        crate::virtio::device_type::BLOCK
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &[256, 128]
    }
    fn features(&self) -> u64 {
        OFFERED
    }
    fn ack_features(&mut self, features: u64) {
        self.0.lock().expect("lock").acked = Some(features);
    }
    fn read_config(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = 0xc0 + offset as u8 + i as u8;
        }
    }
    fn write_config(&mut self, offset: u64, data: &[u8]) {
        let mut s = self.0.lock().expect("lock");
        s.config_writes.push((offset, data.to_vec()));
    }
    fn activate(
        &mut self,
        _mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActivatedQueue>,
    ) -> Result<(), ActivateError> {
        let mut s = self.0.lock().expect("lock");
        if s.fail_activate {
            return Err(ActivateError::Os {
                what: "mock",
                source: std::io::Error::other("mock"),
            });
        }
        let seen = queues
            .iter()
            .map(|q| {
                let qu = &q.queue;
                let (size, ready, ev) = (qu.size(), qu.ready(), qu.event_idx_enabled());
                let rings = (qu.desc_table(), qu.avail_ring(), qu.used_ring());
                (q.index, size, rings.0, rings.1, rings.2, ready, ev)
            })
            .collect();
        s.activations.push(seen);
        s.kicks = queues
            .iter()
            .map(|q| q.kick.try_clone().expect("clone"))
            .collect();
        s.interrupt = Some(interrupt);
        s.queues = Some(queues);
        Ok(())
    }
    fn reset(&mut self) -> ResetOutcome {
        let mut s = self.0.lock().expect("lock");
        s.resets += 1;
        if s.pending_resets > 0 {
            s.pending_resets -= 1;
            return ResetOutcome::Pending { in_flight: 1 };
        }
        s.interrupt = None;
        match s.queues.take() {
            Some(q) => ResetOutcome::Done(q),
            None => ResetOutcome::Inactive,
        }
    }
}

struct Driver {
    io: Bus,
    mmio: Bus,
    bar0: u64,
    state: Arc<Mutex<MockState>>,
    routing: Arc<RecordingRouting>,
    ioevents: Arc<RecordingIoEvents>,
    irqfds: Vec<EventFd>,
    dev: Arc<Mutex<VirtioPciDevice>>,
}

fn driver() -> Driver {
    let state = Arc::new(Mutex::new(MockState::default()));
    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), 0x10_0000)]).expect("memory");
    let routing = Arc::new(RecordingRouting::default());
    let ioevents = Arc::new(RecordingIoEvents::default());
    let (vecs, irqfds) = vectors(3);
    let dev = VirtioPciDevice::new(
        Box::new(MockDevice(state.clone())),
        mem,
        vecs,
        routing.clone(),
        ioevents.clone(),
    )
    .expect("device");
    assert!(
        ioevents.addresses().is_empty(),
        "no address before the root assigns one"
    );
    let dev = Arc::new(Mutex::new(dev));
    let mut root = PciRoot::new(WINDOW, 0x10_0000).expect("root");
    assert_eq!(root.add_device(dev.clone()).expect("add"), 1);
    let (start, len) = root.mmio_window();
    let root = Arc::new(Mutex::new(root));
    let mut io = Bus::new();
    let ports = Arc::new(Mutex::new(PciConfigIo::new(root.clone())));
    io.insert(ports, PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN)
        .expect("io");
    let mut mmio = Bus::new();
    let window = Arc::new(Mutex::new(PciMmioWindow::new(root)));
    mmio.insert(window, start, len).expect("mmio");
    let d = Driver {
        io,
        mmio,
        bar0: WINDOW,
        state,
        routing,
        ioevents,
        irqfds,
        dev,
    };
    d.cfg_write(0x04, &0x0006u16.to_le_bytes());
    d
}

impl Driver {
    fn select(&self, reg: usize) {
        let addr = 1u32 << 31 | 1 << 11 | (reg as u32 & 0xfc);
        assert!(self.io.write(0xcf8, &addr.to_le_bytes()));
    }
    fn cfg_read(&self, reg: usize, len: usize) -> u32 {
        self.select(reg);
        let mut b = [0u8; 4];
        self.io.read(0xcfc + (reg as u64 & 3), &mut b[..len]);
        u32::from_le_bytes(b)
    }
    fn cfg_write(&self, reg: usize, data: &[u8]) {
        self.select(reg);
        self.io.write(0xcfc + (reg as u64 & 3), data);
    }
    fn read(&self, off: u64, len: usize) -> u64 {
        let mut b = [0u8; 8];
        assert!(self.mmio.read(self.bar0 + off, &mut b[..len]));
        u64::from_le_bytes(b)
    }
    fn write(&self, off: u64, value: u64, len: usize) {
        assert!(self
            .mmio
            .write(self.bar0 + off, &value.to_le_bytes()[..len]));
    }
    fn status(&self) -> u8 {
        self.read(0x14, 1) as u8
    }
    fn set_status(&self, s: u8) {
        self.write(0x14, u64::from(s), 1);
    }
    fn negotiate(&self, features: u64) -> bool {
        self.set_status(0);
        self.set_status(status::ACKNOWLEDGE);
        self.set_status(status::ACKNOWLEDGE | status::DRIVER);
        for half in 0..2u64 {
            self.write(0x08, half, 4);
            self.write(0x0c, features >> (32 * half) & 0xffff_ffff, 4);
        }
        self.set_status(status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
        self.status() & status::FEATURES_OK != 0
    }
    fn msix_cap(&self) -> usize {
        self.caps()
            .into_iter()
            .find(|c| c.1 == 0x11)
            .expect("msix")
            .0
    }
    /// (offset, id) of every capability, walking the chain.
    fn caps(&self) -> Vec<(usize, u8)> {
        let mut out = Vec::new();
        let mut ptr = self.cfg_read(0x34, 1) as usize;
        while ptr != 0 && out.len() < 16 {
            out.push((ptr, self.cfg_read(ptr, 1) as u8));
            ptr = self.cfg_read(ptr + 1, 1) as usize;
        }
        out
    }
    fn enable_msix(&self, vectors: u64) {
        for v in 0..vectors {
            let entry = 0x4000 + 16 * v;
            self.write(entry, 0xfee0_0000, 8);
            self.write(entry + 8, 0x40 + v, 4);
            self.write(entry + 12, 0, 4);
        }
        self.cfg_write(self.msix_cap() + 2, &0x8000u16.to_le_bytes());
    }
    fn setup_queue(&self, q: u16, size: u16, vector: u16, base: u64) {
        self.write(0x16, u64::from(q), 2);
        self.write(0x18, u64::from(size), 2);
        self.write(0x1a, u64::from(vector), 2);
        for (i, addr) in [base, base + 0x1000, base + 0x2000].into_iter().enumerate() {
            let off = 0x20 + 8 * i as u64;
            self.write(off, addr & 0xffff_ffff, 4);
            self.write(off + 4, addr >> 32, 4);
        }
        self.write(0x1c, 1, 2);
    }
    fn bring_up(&self) {
        assert!(self.negotiate(OFFERED));
        self.enable_msix(3);
        self.write(0x10, 0, 2);
        self.setup_queue(0, 64, 1, 0x1_0000);
        self.setup_queue(1, 128, 2, 0x2_0000);
        self.set_status(0x0f);
    }
}

mod driver;
mod state;
