//! Building the VM's devices from the config: the legacy port devices (COM1, i8042, debug exit),
//! the PCI root on ports 0xCF8-0xCFF and the MMIO window, the iothreads, and one virtio-blk
//! device over virtio-pci per drive, with its MSI-X vectors routed through KVM.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dataplane::engine::EngineOptions;
use dataplane::iothread::IoThreadError;
use dataplane::rate_limit::RateLimiter;
use dataplane::IoThread;
use devices::block::stats::QueueStats;
use devices::block::throttle::DriveRateLimits;
use devices::block::{BlockDeviceConfig, DriveSwap, VirtioBlock};
use devices::bus::{Bus, BusError};
use devices::debug_exit::{DebugExit, DEBUG_EXIT_PORT};
use devices::i8042::{I8042Error, I8042, I8042_BASE, I8042_LEN, KEYBOARD_IRQ};
use devices::pci::config_io::{PciConfigIo, PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN};
use devices::pci::mmio_window::PciMmioWindow;
use devices::pci::root::{PciRoot, PciRootError};
use devices::serial::{SerialConsole, COM1_IRQ, COM1_LEN, COM1_PORT};
use devices::virtio::pci::VirtioPciDevice;
use devices::virtio::GuestMemory;
use devices::ExitRequester;
use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

pub mod nic;
pub mod pci_wiring;

pub use nic::{NicError, NicHandle};
pub use pci_wiring::{AttachError, Attached, PciWiring};

use crate::config::{DriveConfig, IoThreadConfig, IoUringConfig, VmConfig};
use crate::drive::OpenedDrive;
use crate::interrupts::{GsiRouter, KvmIoEvents};
use crate::rate_limit::RateLimitGroupConfig;
use arch::acpi::LegacyPorts;
use arch::layout::{PCI_MMIO_END, PCI_MMIO_START};

/// Where the legacy devices this module places sit, for the ACPI tables that name them.
pub(crate) const LEGACY_PORTS: LegacyPorts = LegacyPorts {
    pci_config_base: PCI_CONFIG_IO_BASE as u16,
    pci_config_len: PCI_CONFIG_IO_LEN as u8,
    i8042_data: I8042_BASE,
    i8042_command: I8042_BASE + I8042_LEN as u16 - 1,
    keyboard_irq: KEYBOARD_IRQ,
};
// The port map fits the descriptors the tables use (16-bit ports, an 8-bit count).
const _: () = assert!(PCI_CONFIG_IO_BASE + PCI_CONFIG_IO_LEN <= u16::MAX as u64);
const _: () = assert!(PCI_CONFIG_IO_LEN <= u8::MAX as u64);
const _: () = assert!(I8042_BASE as u64 + I8042_LEN <= u16::MAX as u64);

/// Errors building devices.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Bus registration failed.
    #[error("Registering a device: {0}")]
    Bus(#[from] BusError),
    /// An OS or KVM call failed.
    #[error("{what}: {source}")]
    Os {
        /// The operation.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The PCI root could not be set up.
    #[error("PCI: {0}")]
    PciRoot(#[source] PciRootError),
    /// A drive's device could not be put on the PCI bus.
    #[error("drives[{index}]: {source}")]
    DriveAttach {
        /// The drive's index in `drives`.
        index: usize,
        /// Why.
        source: AttachError,
    },
    /// An iothread could not be started or pinned.
    #[error(transparent)]
    IoThread(#[from] IoThreadError),
    /// A drive names an iothread that was not started, or none (the config's values were not
    /// checked, or its defaults not filled in).
    #[error("drives[{index}]: iothread `{id}` missing")]
    NoIoThread {
        /// The drive's index in `drives`.
        index: usize,
        /// The iothread id.
        id: String,
    },
    /// A drive names a rate-limit group that is not defined (the values were not checked).
    #[error("drives[{index}]: rate_limit_group {id} missing")]
    NoRateLimitGroup {
        /// The drive's index in `drives`.
        index: usize,
        /// The group id.
        id: String,
    },
    /// The vsock device could not be built (its socket, its PCI function).
    #[error("vsock: {0}")]
    Vsock(#[source] crate::vsock_device::VsockDeviceError),
    /// A network interface could not be built.
    #[error("network-interfaces[{index}]: {source}")]
    Nic {
        /// The interface's index in `network-interfaces`.
        index: usize,
        /// Why.
        source: NicError,
    },
    /// The preflight opened a different number of taps than the config has interfaces.
    #[error("{opened} tap(s) opened for {configured} network interface(s)")]
    Taps {
        /// Taps opened by the preflight.
        opened: usize,
        /// Interfaces in the config.
        configured: usize,
    },
    /// The preflight opened a different number of drives than the config has.
    #[error("{opened} drive file(s) opened for {configured} drive(s)")]
    DriveFiles {
        /// Files opened by the preflight.
        opened: usize,
        /// Drives in the config.
        configured: usize,
    },
}

fn os(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DeviceError {
    let what = what.into();
    move |source| DeviceError::Os { what, source }
}

/// A drive as the rest of the VMM sees it.
#[derive(Debug)]
pub struct DriveHandle {
    /// The drive id.
    pub id: String,
    /// The PCI slot of its virtio-blk device.
    pub slot: u8,
    /// Per-queue counters.
    pub stats: Vec<Arc<QueueStats>>,
    /// The engine configured.
    pub engine: crate::config::IoEngineKind,
    /// The drive's own limiter and its group's (shared with its queues).
    pub rate_limits: DriveRateLimits,
    /// The iothread serving its queues (woken when its limits change).
    pub iothread: Arc<IoThread>,
    /// Swaps its backing file while the guest runs.
    pub swap: DriveSwap,
    /// Where a swapped-in file may come from.
    pub swap_folder: crate::swap_folder::SwapFolder,
    /// Its virtio-pci function (a snapshot saves and restores its state).
    pub transport: Arc<Mutex<VirtioPciDevice>>,
}

impl DriveHandle {
    /// The drive's counters summed over its queues (the fields come from the declarations,
    /// [`crate::metrics`]).
    pub fn counters(&self) -> crate::metrics::report::DriveCounters {
        let queues: Vec<&QueueStats> = self.stats.iter().map(|q| q.as_ref()).collect();
        crate::metrics::report::DriveCounters::new(
            &self.id,
            &queues,
            &self.rate_limits.drive.stats(),
        )
    }

    /// [`DriveHandle::counters`] as one JSON object (for the log and tests).
    pub fn stats_json(&self) -> serde_json::Value {
        crate::metrics::report::json_of(&self.counters())
    }
}

/// Every device of the VM.
pub struct Devices {
    /// Port I/O bus.
    pub pio: Arc<Bus>,
    /// MMIO bus.
    pub mmio: Arc<Bus>,
    /// The console.
    pub serial: Arc<Mutex<SerialConsole>>,
    /// The keyboard controller (its keyboard takes Ctrl+Alt+Del from the API).
    pub i8042: Arc<Mutex<I8042>>,
    /// Iothreads by id.
    pub iothreads: BTreeMap<String, Arc<IoThread>>,
    /// Drives in config order.
    pub drives: Vec<DriveHandle>,
    /// Network interfaces in config order.
    pub nics: Vec<NicHandle>,
    /// `rate_limit_groups`, by id.
    pub rate_limit_groups: BTreeMap<String, Arc<RateLimiter>>,
    /// The PCI root.
    pub pci: Arc<Mutex<PciRoot>>,
    /// The PCI configuration ports (0xCF8..=0xCFF), whose latch a snapshot keeps.
    pub pci_config: Arc<Mutex<PciConfigIo>>,
    /// The vsock device, when configured.
    pub vsock: Option<crate::vsock_device::VsockHandle>,
}

impl Devices {
    /// Presses Ctrl+Alt+Del on the guest's keyboard (Firecracker's `SendCtrlAltDel`): a Linux
    /// guest booted with `reboot=k` then resets, which ends the VM. Fails if the guest has not
    /// read the keys already queued or stopped its keyboard.
    pub fn send_ctrl_alt_del(&self) -> Result<(), I8042Error> {
        self.i8042
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .trigger_ctrl_alt_del()
    }
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices")
            .field("drives", &self.drives)
            .finish()
    }
}

/// Builds every device for `config`, its drives on the files the preflight opened
/// ([`crate::preflight`], in `drives` order); with `dynamic_weights`, iothreads are light while
/// they poll ([`crate::thread_weights`]).
pub fn build(
    config: &VmConfig,
    drive_files: Vec<OpenedDrive>,
    taps: Vec<devices::net::Tap>,
    vm: &Arc<VmFd>,
    mem: &GuestMemory,
    exit: Arc<dyn ExitRequester>,
    dynamic_weights: bool,
) -> Result<Devices, DeviceError> {
    if drive_files.len() != config.drives.len() {
        return Err(DeviceError::DriveFiles {
            opened: drive_files.len(),
            configured: config.drives.len(),
        });
    }
    if taps.len() != config.network_interfaces.len() {
        return Err(DeviceError::Taps {
            opened: taps.len(),
            configured: config.network_interfaces.len(),
        });
    }
    let legacy = LegacyDevices::build(vm, exit)?;
    let iothreads = spawn_iothreads(&config.iothreads, dynamic_weights)?;
    let rate_limit_groups = group_limiters(&config.rate_limit_groups);
    let mut pci_wiring = PciWiring {
        pci: legacy.pci.clone(),
        router: Arc::new(GsiRouter::new(vm.clone())),
        ioevents: Arc::new(KvmIoEvents(vm.clone())),
        mem,
    };
    let drives = config
        .drives
        .iter()
        .zip(drive_files)
        .enumerate()
        .map(|(i, (d, file))| {
            let thread = drive_iothread(i, d, &iothreads)?;
            let rate_limits = drive_rate_limits(i, d, &rate_limit_groups)?;
            pci_wiring.add_drive(config, i, d, file, thread, rate_limits)
        })
        .collect::<Result<_, _>>()?;
    let vsock = match &config.vsock {
        Some(v) => Some(pci_wiring.add_vsock(v, &iothreads)?),
        None => None,
    };
    let nics = config
        .network_interfaces
        .iter()
        .zip(taps)
        .enumerate()
        .map(|(i, (n, tap))| pci_wiring.add_nic(i, n, tap, &iothreads))
        .collect::<Result<_, _>>()?;
    Ok(Devices {
        pio: Arc::new(legacy.pio),
        mmio: Arc::new(legacy.mmio),
        serial: legacy.serial,
        i8042: legacy.i8042,
        iothreads,
        drives,
        nics,
        rate_limit_groups,
        pci: legacy.pci,
        pci_config: legacy.pci_config,
        vsock,
    })
}

/// The devices every VM has: COM1, the i8042, the debug exit port, and the PCI root behind
/// its configuration ports and MMIO window.
struct LegacyDevices {
    pio: Bus,
    mmio: Bus,
    serial: Arc<Mutex<SerialConsole>>,
    i8042: Arc<Mutex<I8042>>,
    pci: Arc<Mutex<PciRoot>>,
    pci_config: Arc<Mutex<PciConfigIo>>,
}

impl LegacyDevices {
    fn build(vm: &VmFd, exit: Arc<dyn ExitRequester>) -> Result<Self, DeviceError> {
        let serial_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(os("serial eventfd"))?;
        vm.register_irqfd(&serial_irq, COM1_IRQ)
            .map_err(|e| os("serial irqfd")(e.into()))?;
        let serial = Arc::new(Mutex::new(SerialConsole::new(
            serial_irq,
            Box::new(std::io::stdout()),
        )));
        let keyboard_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(os("i8042 eventfd"))?;
        vm.register_irqfd(&keyboard_irq, KEYBOARD_IRQ)
            .map_err(|e| os("i8042 irqfd")(e.into()))?;
        let i8042 = Arc::new(Mutex::new(I8042::new(exit.clone(), keyboard_irq)));
        let pci = Arc::new(Mutex::new(
            PciRoot::new(PCI_MMIO_START, PCI_MMIO_END - PCI_MMIO_START)
                .map_err(DeviceError::PciRoot)?,
        ));
        let mut pio = Bus::new();
        pio.insert(serial.clone(), u64::from(COM1_PORT), COM1_LEN)?;
        pio.insert(i8042.clone(), u64::from(I8042_BASE), I8042_LEN)?;
        pio.insert(
            Arc::new(Mutex::new(DebugExit::new(exit))),
            u64::from(DEBUG_EXIT_PORT),
            1,
        )?;
        let pci_config = Arc::new(Mutex::new(PciConfigIo::new(pci.clone())));
        pio.insert(pci_config.clone(), PCI_CONFIG_IO_BASE, PCI_CONFIG_IO_LEN)?;
        let mut mmio = Bus::new();
        mmio.insert(
            Arc::new(Mutex::new(PciMmioWindow::new(pci.clone()))),
            PCI_MMIO_START,
            PCI_MMIO_END - PCI_MMIO_START,
        )?;
        Ok(Self {
            pio,
            mmio,
            serial,
            i8042,
            pci,
            pci_config,
        })
    }
}

/// Starts every iothread of `configs` (the effective config's: `VmConfig::fill_defaults` lists
/// the implicit `io0`), each pinned to its CPUs. The vhost-user backend starts its own here too.
pub fn spawn_iothreads(
    configs: &[IoThreadConfig],
    dynamic_weights: bool,
) -> Result<BTreeMap<String, Arc<IoThread>>, IoThreadError> {
    let mut iothreads = BTreeMap::new();
    for c in configs {
        let name = &c.id;
        let t =
            IoThread::spawn_weighted(name, c.max_batch as usize, c.poll_params(), dynamic_weights)?;
        if !c.cpu_affinity.is_empty() {
            let cpus = c.cpu_affinity.clone();
            let shown = crate::affinity::describe(&cpus);
            // Before the seccomp filter, which does not allow sched_setaffinity.
            let pin = move || crate::affinity::pin_current_thread(&cpus).map_err(Into::into);
            t.run_on_thread(Box::new(pin))?;
            log::info!("iothread {name}: pinned to CPUs {shown}");
        }
        iothreads.insert(name.clone(), t);
    }
    Ok(iothreads)
}

/// Each rate-limit group's shared limiter, by group id.
pub fn group_limiters(groups: &[RateLimitGroupConfig]) -> BTreeMap<String, Arc<RateLimiter>> {
    groups
        .iter()
        .map(|g| {
            (
                g.id.clone(),
                Arc::new(RateLimiter::new(g.limits().to_dataplane())),
            )
        })
        .collect()
}

/// The iothread serving drive `i`, as the effective config names it (`VmConfig::fill_defaults`
/// gives every drive one).
fn drive_iothread(
    i: usize,
    d: &DriveConfig,
    iothreads: &BTreeMap<String, Arc<IoThread>>,
) -> Result<Arc<IoThread>, DeviceError> {
    let id = d.iothread.clone().unwrap_or_default();
    iothreads
        .get(&id)
        .cloned()
        .ok_or(DeviceError::NoIoThread { index: i, id })
}

/// Drive `i`'s own limiter and its group's.
fn drive_rate_limits(
    i: usize,
    d: &DriveConfig,
    groups: &BTreeMap<String, Arc<RateLimiter>>,
) -> Result<DriveRateLimits, DeviceError> {
    let group = match &d.rate_limit_group {
        Some(g) => Some(
            groups
                .get(g)
                .cloned()
                .ok_or_else(|| DeviceError::NoRateLimitGroup {
                    index: i,
                    id: g.clone(),
                })?,
        ),
        None => None,
    };
    Ok(DriveRateLimits {
        drive: Arc::new(RateLimiter::new(
            d.rate_limiter.unwrap_or_default().to_dataplane(),
        )),
        group,
    })
}

impl PciWiring<'_> {
    /// The vsock device of `v` on the next PCI slot, served by the first iothread.
    fn add_vsock(
        &mut self,
        v: &vmm_config::vsock::VsockConfig,
        iothreads: &BTreeMap<String, Arc<IoThread>>,
    ) -> Result<crate::vsock_device::VsockHandle, DeviceError> {
        crate::vsock_device::add(self, v, iothreads).map_err(DeviceError::Vsock)
    }

    /// Drive `i` as a virtio-blk device on `file`, served by `thread`, on the next PCI slot.
    fn add_drive(
        &mut self,
        config: &VmConfig,
        i: usize,
        d: &DriveConfig,
        file: OpenedDrive,
        thread: Arc<IoThread>,
        rate_limits: DriveRateLimits,
    ) -> Result<DriveHandle, DeviceError> {
        let thread_id = thread.name().to_string();
        let io_uring = config
            .iothreads
            .iter()
            .find(|t| t.id == thread_id)
            .map(|t| t.io_uring)
            .unwrap_or_default();
        let engine = EngineOptions {
            kind: d.io_engine.to_dataplane(),
            depth: u32::from(d.queue_size),
            io_uring: IoUringConfig::to_dataplane(io_uring),
            direct: d.direct,
            fault: d.fault_injection.as_ref().map(|fi| fi.to_plan()),
        };
        // The preflight warned if the size is not a multiple of 512 bytes.
        let capacity_sectors = file.capacity_sectors;
        let block = VirtioBlock::new(
            BlockDeviceConfig {
                drive_id: d.drive_id.clone(),
                file: file.file,
                read_only: d.is_read_only,
                capacity_sectors,
                num_queues: d.num_queues,
                queue_size: d.queue_size,
                engine,
                rate_limits: rate_limits.clone(),
            },
            thread.clone(),
        );
        let stats = block.stats();
        let swap = block.swap_handle();
        let Attached { slot, transport } = self
            .attach(Box::new(block))
            .map_err(|source| DeviceError::DriveAttach { index: i, source })?;
        log::info!(
            "drives[{i}] {}: virtio-blk at 00:{slot:02x}.0, {} sectors, {} queue(s) of {}, engine {:?}, iothread {thread_id}{}",
            d.drive_id,
            capacity_sectors,
            d.num_queues,
            d.queue_size,
            d.io_engine,
            if d.is_read_only { ", read-only" } else { "" }
        );
        Ok(DriveHandle {
            id: d.drive_id.clone(),
            slot,
            stats,
            engine: d.io_engine,
            rate_limits,
            iothread: thread,
            swap,
            swap_folder: crate::swap_folder::SwapFolder::resolve(
                &d.path_on_host,
                config.swap_allowed_folders(),
            ),
            transport,
        })
    }
}

/// An iothread's parameters and counters as one JSON object (for the log and tests).
pub fn iothread_json(id: &str, t: &IoThread) -> serde_json::Value {
    crate::metrics::report::json_of(&iothread_report(id, t))
}

/// An iothread's parameters in force and its counters.
pub fn iothread_report(id: &str, t: &IoThread) -> crate::metrics::report::IoThreadReport {
    let p = t.poll_params();
    let params = crate::metrics::IoThreadParams {
        max_batch: t.max_batch() as u64,
        poll_max_ns: p.max_ns,
        poll_grow: p.grow,
        poll_shrink: p.shrink,
        poll_policy: format!("{:?}", p.policy),
        poll_weight: u64::from(p.weight),
    };
    crate::metrics::report::IoThreadReport::new(id, &params, t.stats())
}
