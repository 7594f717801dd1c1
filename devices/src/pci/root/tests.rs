//! Tests for the root bus, configuration mechanism #1 and the MMIO window.

use super::*;
use crate::bus::{Bus, BusDevice};
use crate::pci::bar::PciBar;
use crate::pci::config_io::{PciConfigIo, PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN};
use crate::pci::config_space::COMMAND_MEMORY_SPACE;
use crate::pci::mmio_window::PciMmioWindow;

const WINDOW: u64 = 0xc000_0000;

#[derive(Debug)]
struct TestDevice {
    cfg: PciConfigSpace,
    writes: Vec<(usize, u64, Vec<u8>)>,
    moves: Vec<(usize, u64, u64)>,
}

impl TestDevice {
    fn new() -> Self {
        let mut cfg = PciConfigSpace::new(PciIds {
            vendor: 0x1234,
            device: 0x5678,
            revision: 2,
            class: 0xff_00_00,
            subsystem_vendor: 0,
            subsystem: 0,
        });
        cfg.add_bar(0, PciBar::memory32(0x1000)).expect("bar0");
        cfg.add_bar(2, PciBar::memory64(0x4000)).expect("bar2");
        Self {
            cfg,
            writes: Vec::new(),
            moves: Vec::new(),
        }
    }
}

impl PciDevice for TestDevice {
    fn config_space(&self) -> &PciConfigSpace {
        &self.cfg
    }
    fn config_write(&mut self, offset: usize, data: &[u8]) {
        self.cfg.write(offset, data);
    }
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = (bar as u8) << 4 | (offset as u8 + i as u8) & 0xf;
        }
    }
    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        self.writes.push((bar, offset, data.to_vec()));
    }
    fn bar_moved(&mut self, bar: usize, old: u64, new: u64) {
        self.moves.push((bar, old, new));
    }
}

struct Fixture {
    io: Bus,
    mmio: Bus,
    dev: Arc<Mutex<TestDevice>>,
}

fn fixture() -> Fixture {
    let root = Arc::new(Mutex::new(PciRoot::new(WINDOW, 0x10_0000).expect("root")));
    let dev = Arc::new(Mutex::new(TestDevice::new()));
    let slot = root
        .lock()
        .expect("lock")
        .add_device(dev.clone())
        .expect("add");
    assert_eq!(slot, 1);
    let mut io = Bus::new();
    let ports = Arc::new(Mutex::new(PciConfigIo::new(root.clone())));
    io.insert(ports, PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN)
        .expect("io");
    let mut mmio = Bus::new();
    let (start, len) = root.lock().expect("lock").mmio_window();
    let window = Arc::new(Mutex::new(PciMmioWindow::new(root)));
    mmio.insert(window, start, len).expect("mmio");
    Fixture { io, mmio, dev }
}

fn address(dev: u32, reg: u32) -> u32 {
    1 << 31 | dev << 11 | reg
}

impl Fixture {
    fn cfg_read(&self, dev: u32, reg: u32, len: usize) -> u32 {
        assert!(self.io.write(0xcf8, &address(dev, reg & !3).to_le_bytes()));
        let mut b = [0u8; 4];
        assert!(self.io.read(0xcfc + u64::from(reg & 3), &mut b[..len]));
        u32::from_le_bytes(b)
    }
    fn cfg_write(&self, dev: u32, reg: u32, data: &[u8]) {
        assert!(self.io.write(0xcf8, &address(dev, reg & !3).to_le_bytes()));
        assert!(self.io.write(0xcfc + u64::from(reg & 3), data));
    }
    fn moves(&self) -> Vec<(usize, u64, u64)> {
        std::mem::take(&mut self.dev.lock().expect("lock").moves)
    }
}

#[test]
fn window_validation() {
    assert_eq!(
        PciRoot::new(0x1000, 0).err(),
        Some(PciRootError::BadWindow {
            start: 0x1000,
            len: 0
        })
    );
    assert!(PciRoot::new(u64::MAX - 0xfff, 0x2000).is_err());
    assert!(PciRoot::new(0, 0x2000).is_err());
    assert!(PciRoot::new(0x1800, 0x2000).is_err());
    let mut small = PciRoot::new(WINDOW, 0x2000).expect("root");
    let err = small.add_device(Arc::new(Mutex::new(TestDevice::new())));
    assert_eq!(err, Err(PciRootError::WindowFull(0x4000)));
}

#[test]
fn mechanism1_host_bridge_device_and_absent_functions() {
    let f = fixture();
    assert_eq!(f.cfg_read(0, 0, 4), 0x0d57_8086, "host bridge");
    assert_eq!(f.cfg_read(0, 0x0a, 2), 0x0600, "host bridge class");
    assert_eq!(f.cfg_read(1, 0, 4), 0x5678_1234);
    assert_eq!(f.cfg_read(1, 2, 2), 0x5678, "word at sub-offset 2");
    assert_eq!(f.cfg_read(1, 3, 1), 0x56, "byte at sub-offset 3");
    assert_eq!(f.cfg_read(2, 0, 4), 0xffff_ffff, "empty slot");
    // Function 1 of a present device, and bus 1, are absent.
    assert!(f.io.write(0xcf8, &(address(1, 0) | 1 << 8).to_le_bytes()));
    let mut b = [0u8; 4];
    f.io.read(0xcfc, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0xffff_ffff);
    assert!(f.io.write(0xcf8, &(address(1, 0) | 1 << 16).to_le_bytes()));
    f.io.read(0xcfc, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0xffff_ffff);
    // Without the enable bit, CONFIG_DATA reads as all ones; CONFIG_ADDRESS reads back.
    assert!(f.io.write(0xcf8, &(1u32 << 11).to_le_bytes()));
    f.io.read(0xcfc, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0xffff_ffff);
    f.io.read(0xcf8, &mut b);
    assert_eq!(u32::from_le_bytes(b), 1 << 11);
    // Byte writes to 0xcf8..0xcfb do not touch the address latch.
    f.io.write(0xcf9, &[0x06]);
    f.io.read(0xcf8, &mut b);
    assert_eq!(u32::from_le_bytes(b), 1 << 11);
    // A word access straddling the data dword is dropped.
    assert!(f.io.write(0xcf8, &address(1, 0).to_le_bytes()));
    let mut w = [0u8; 2];
    f.io.read(0xcfd, &mut w);
    assert_eq!(w, [0xff, 0xff]);
}

#[test]
fn bars_are_assigned_naturally_aligned() {
    let f = fixture();
    assert_eq!(f.cfg_read(1, 0x10, 4), WINDOW as u32);
    assert_eq!(f.cfg_read(1, 0x18, 4), (WINDOW + 0x4000) as u32 | 0b100);
    assert_eq!(f.cfg_read(1, 0x1c, 4), 0);
    assert_eq!(
        f.moves(),
        vec![(0, 0, WINDOW), (2, 0, WINDOW + 0x4000)],
        "the device learns its initial addresses"
    );
}

#[test]
fn mmio_needs_memory_enable_and_follows_bar_moves() {
    let f = fixture();
    let mut b = [0u8; 2];
    assert!(f.mmio.read(WINDOW + 0x4002, &mut b));
    assert_eq!(b, [0xff, 0xff], "memory decoding is off");
    f.cfg_write(1, 4, &COMMAND_MEMORY_SPACE.to_le_bytes());
    f.mmio.read(WINDOW + 0x4002, &mut b);
    assert_eq!(b, [0x22, 0x23], "BAR 2, offset 2");
    f.mmio.read(WINDOW + 0x0ffe, &mut b);
    assert_eq!(b, [0x0e, 0x0f], "BAR 0, offset 0xffe");
    f.mmio.read(WINDOW + 0x0fff, &mut b);
    assert_eq!(b, [0xff, 0xff], "straddles the end of BAR 0");
    assert!(f.mmio.write(WINDOW + 0x4010, &[9]));
    f.moves();

    // The guest sizes BAR 2 and moves it higher in the window.
    f.cfg_write(1, 0x18, &u32::MAX.to_le_bytes());
    assert_eq!(f.cfg_read(1, 0x18, 4), 0xffff_c004);
    let new = WINDOW + 0x8_0000;
    f.cfg_write(1, 0x18, &(new as u32).to_le_bytes());
    assert_eq!(f.moves().last(), Some(&(2, 0xffff_c000, new)));
    f.mmio.read(WINDOW + 0x4002, &mut b);
    assert_eq!(b, [0xff, 0xff], "old address no longer decodes");
    f.mmio.read(new + 3, &mut b);
    assert_eq!(b, [0x23, 0x24]);
    f.mmio.write(new + 0x20, &[1, 2]);
    let writes = f.dev.lock().expect("lock").writes.clone();
    assert_eq!(writes, vec![(2, 0x10, vec![9]), (2, 0x20, vec![1, 2])]);

    // Clearing memory enable stops decoding again.
    f.cfg_write(1, 4, &[0, 0]);
    f.mmio.read(new, &mut b);
    assert_eq!(b, [0xff, 0xff]);
}

#[test]
fn slots_fill_up() {
    let mut root = PciRoot::new(WINDOW, 0x1000_0000).expect("root");
    for expected in 1..32u8 {
        let dev = Arc::new(Mutex::new(TestDevice::new()));
        assert_eq!(root.add_device(dev), Ok(expected));
    }
    let dev = Arc::new(Mutex::new(TestDevice::new()));
    assert_eq!(root.add_device(dev), Err(PciRootError::NoFreeSlot));
    let mut port = PciConfigIo::new(Arc::new(Mutex::new(root)));
    port.write(0, &address(31, 0).to_le_bytes());
    let mut b = [0u8; 4];
    port.read(4, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0x5678_1234);
}

#[test]
fn a_restored_config_address_latch_reaches_the_register_it_named() {
    let root = Arc::new(Mutex::new(PciRoot::new(WINDOW, 0x10_0000).expect("root")));
    root.lock()
        .expect("lock")
        .add_device(Arc::new(Mutex::new(TestDevice::new())))
        .expect("add");
    // The guest latches device 1's ID register, then is paused before it reads CONFIG_DATA.
    let mut before = PciConfigIo::new(root.clone());
    before.write(0, &address(1, 0).to_le_bytes());
    let saved = before.address();
    // Restored: a new port pair, the latch put back, then the guest's read.
    let mut after = PciConfigIo::new(root);
    after.set_address(saved);
    let mut b = [0u8; 4];
    after.read(4, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0x5678_1234);
    // Only the latch's state bits are taken.
    after.set_address(u32::MAX);
    after.read(0, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0x80ff_fffc);
}
