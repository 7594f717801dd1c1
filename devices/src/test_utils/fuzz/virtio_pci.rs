//! virtio-pci: PCI config-space and BAR0 (common config, ISR, device config, notify, MSI-X
//! table/PBA) accesses in any order, through the `PciConfigIo` (ports 0xcf8-0xcff) and
//! `PciMmioWindow` bus adapters of a `PciRoot` holding one `VirtioPciDevice` (mock device model,
//! two queues, three MSI-X vectors).
//!
//! Input: byte 0 = mock flags (bit 0: activation fails); then 8-byte operations:
//!   b0 bit 0: space (0 = PCI config through 0xcf8/0xcfc, 1 = MMIO window / BAR0)
//!   b0 bit 1: write (else read)
//!   b0 bits 2-3: width 1, 2, 4 or 8 (8 only on MMIO; config uses 4 instead)
//!   b0 bits 4-5: config target: 0/1 = device 1 (the virtio device), 2 = device 0 (host bridge),
//!                3 = raw access to CONFIG_ADDRESS/CONFIG_DATA ports at 0xcf8 + (offset & 7)
//!   b1-b2: offset (config: register 0-255; MMIO: byte offset into the window)
//!   b3: unused
//!   b4-b7: value (little endian; an 8-byte write repeats it)
//! Checks: no panic; never more live ioeventfd registrations than queues, never two on one
//! address; after the whole machine is dropped no ioeventfd registration is left.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use crate::bus::Bus;
use crate::pci::{
    IoEventRegistry, MsiMessage, MsiRouting, MsiVector, PciConfigIo, PciMmioWindow, PciRoot,
    PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN,
};
use crate::virtio::pci::VirtioPciDevice;
use crate::virtio::{
    ActivateError, ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice, VirtioInterrupt,
    VIRTIO_F_VERSION_1, VIRTIO_RING_F_EVENT_IDX,
};
use vm_memory::GuestAddress;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

const WINDOW: u64 = 0xd000_0000;
const WINDOW_LEN: u64 = 0x10_0000;
const QUEUES: usize = 2;

struct MockDevice {
    fail_activate: bool,
    queues: Option<Vec<ActivatedQueue>>,
    interrupt: Option<Arc<dyn VirtioInterrupt>>,
}

impl VirtioDevice for MockDevice {
    fn device_type(&self) -> u32 {
        crate::virtio::device_type::BLOCK
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &[256, 128]
    }
    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | VIRTIO_RING_F_EVENT_IDX | 1 << 1
    }
    fn ack_features(&mut self, features: u64) {
        assert_eq!(
            features & !self.features(),
            0,
            "acked a feature that was not offered"
        );
    }
    fn read_config(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = (offset as u8).wrapping_add(i as u8);
        }
    }
    fn write_config(&mut self, _offset: u64, _data: &[u8]) {}
    fn activate(
        &mut self,
        _mem: GuestMemory,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActivatedQueue>,
    ) -> Result<(), ActivateError> {
        if self.fail_activate {
            return Err(ActivateError::Os {
                what: "mock",
                source: std::io::Error::other("mock"),
            });
        }
        // Finding (see README): the transport activates again when the driver clears DRIVER_OK
        // without a reset and sets it again. OSPREY_FUZZ_ALLOW_REACTIVATE=1 tolerates it so a
        // long run can look for other bugs.
        if self.queues.is_some() && !allow_reactivate() {
            panic!("activated twice without a reset");
        }
        // Signal every queue and the config, as a device would.
        for q in &queues {
            let _ = interrupt.notify_queue(q.index);
        }
        let _ = interrupt.notify_config();
        self.interrupt = Some(interrupt);
        self.queues = Some(queues);
        Ok(())
    }
    fn reset(&mut self) -> ResetOutcome {
        self.interrupt = None;
        match self.queues.take() {
            Some(q) => ResetOutcome::Done(q),
            None => ResetOutcome::Inactive,
        }
    }
}

fn allow_reactivate() -> bool {
    static ALLOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOW
        .get_or_init(|| std::env::var_os("OSPREY_FUZZ_ALLOW_REACTIVATE").is_some_and(|v| v == "1"))
}

struct Routing;

impl MsiRouting for Routing {
    fn set_msi_route(&self, _gsi: u32, _msg: Option<MsiMessage>) -> std::io::Result<()> {
        Ok(())
    }
}

/// Behaves like KVM_IOEVENTFD: registering a live (address, fd) pair fails with EEXIST,
/// unregistering an unknown one with ENOENT.
#[derive(Default)]
struct IoEvents {
    live: Mutex<Vec<(u64, i32)>>,
}

impl IoEventRegistry for IoEvents {
    fn register(&self, fd: &EventFd, addr: u64) -> std::io::Result<()> {
        let mut live = self.live.lock().expect("lock");
        if live.iter().any(|l| l.0 == addr) {
            return Err(std::io::Error::from_raw_os_error(libc::EEXIST));
        }
        live.push((addr, fd.as_raw_fd()));
        Ok(())
    }
    fn unregister(&self, fd: &EventFd, addr: u64) -> std::io::Result<()> {
        let mut live = self.live.lock().expect("lock");
        let pos = live
            .iter()
            .position(|l| *l == (addr, fd.as_raw_fd()))
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
        live.remove(pos);
        Ok(())
    }
}

/// One input.
pub fn run(data: &[u8]) {
    let (flags, ops) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), 0x10_0000)]).expect("memory");
    let ioevents = Arc::new(IoEvents::default());
    let vectors = (0..QUEUES as u32 + 1)
        .map(|i| MsiVector {
            gsi: 100 + i,
            irqfd: EventFd::new(EFD_NONBLOCK).expect("eventfd"),
        })
        .collect();
    let device = MockDevice {
        fail_activate: flags & 1 != 0,
        queues: None,
        interrupt: None,
    };
    let dev = VirtioPciDevice::new(
        Box::new(device),
        mem,
        vectors,
        Arc::new(Routing),
        ioevents.clone(),
    )
    .expect("virtio-pci device");
    let dev = Arc::new(Mutex::new(dev));
    let mut root = PciRoot::new(WINDOW, WINDOW_LEN).expect("root");
    root.add_device(dev.clone()).expect("add device");
    let (start, len) = root.mmio_window();
    let root = Arc::new(Mutex::new(root));
    let mut io = Bus::new();
    io.insert(
        Arc::new(Mutex::new(PciConfigIo::new(root.clone()))),
        PCI_CONFIG_IO_BASE,
        PCI_CONFIG_IO_LEN,
    )
    .expect("io");
    let mut mmio = Bus::new();
    mmio.insert(Arc::new(Mutex::new(PciMmioWindow::new(root))), start, len)
        .expect("mmio");
    // Firmware enables memory decoding, as a guest would find it.
    io.write(0xcf8, &(1u32 << 31 | 1 << 11 | 0x04).to_le_bytes());
    io.write(0xcfc, &0x0006u16.to_le_bytes());

    for op in ops.chunks_exact(8).take(4096) {
        let is_mmio = op[0] & 1 != 0;
        let write = op[0] & 2 != 0;
        let mut width = [1usize, 2, 4, 8][usize::from(op[0] >> 2 & 3)];
        let target = op[0] >> 4 & 3;
        let offset = u64::from(u16::from_le_bytes([op[1], op[2]]));
        let value = u32::from_le_bytes([op[4], op[5], op[6], op[7]]);
        let bytes = (u64::from(value) | u64::from(value) << 32).to_le_bytes();
        let (bus, addr) = if is_mmio {
            (&mmio, WINDOW + offset)
        } else {
            width = width.min(4);
            match target {
                3 => (&io, PCI_CONFIG_IO_BASE + (offset & 7)),
                t => {
                    let dev_no: u32 = if t == 2 { 0 } else { 1 };
                    let reg = offset as u32 & 0xff;
                    io.write(
                        0xcf8,
                        &(1u32 << 31 | dev_no << 11 | (reg & 0xfc)).to_le_bytes(),
                    );
                    (&io, 0xcfc + u64::from(reg & 3))
                }
            }
        };
        if write {
            bus.write(addr, &bytes[..width]);
        } else {
            let mut buf = [0u8; 8];
            bus.read(addr, &mut buf[..width]);
        }
        let live = ioevents.live.lock().expect("lock");
        assert!(
            live.len() <= QUEUES,
            "{} live ioeventfds for {QUEUES} queues: {live:?}",
            live.len()
        );
    }
    drop((io, mmio, dev));
    let live = ioevents.live.lock().expect("lock");
    assert!(
        live.is_empty(),
        "ioeventfds left registered after the device is gone: {live:?}"
    );
}
