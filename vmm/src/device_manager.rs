//! Building the VM's devices from the config: the legacy port devices (COM1, i8042, debug exit),
//! the PCI root on ports 0xCF8-0xCFF and the MMIO window, the iothreads, and one virtio-blk
//! device over virtio-pci per drive, with its MSI-X vectors routed through KVM.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dataplane::engine::EngineOptions;
use dataplane::rate_limit::RateLimiter;
use dataplane::IoThread;
use devices::block::stats::QueueStats;
use devices::block::throttle::DriveRateLimits;
use devices::block::{BlockDeviceConfig, VirtioBlock};
use devices::bus::{Bus, BusError};
use devices::debug_exit::{DebugExit, DEBUG_EXIT_PORT};
use devices::i8042::{I8042, I8042_BASE, I8042_LEN};
use devices::pci::config_io::PciConfigIo;
use devices::pci::mmio_window::PciMmioWindow;
use devices::pci::root::PciRoot;
use devices::serial::{SerialConsole, COM1_IRQ, COM1_LEN, COM1_PORT};
use devices::virtio::pci::VirtioPciDevice;
use devices::virtio::GuestMemory;
use devices::ExitRequester;
use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use crate::config::{IoUringConfig, VmConfig, DEFAULT_IOTHREAD};
use crate::interrupts::{GsiRouter, KvmIoEvents};
use crate::layout::{PCI_MMIO_END, PCI_MMIO_START};

/// PCI configuration mechanism #1 ports.
const PCI_CONFIG_PORT: u64 = 0xcf8;
const PCI_CONFIG_LEN: u64 = 8;

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
    /// PCI set-up failed.
    #[error("PCI: {0}")]
    Pci(String),
    /// A drive could not be opened (validated before, so the file changed meanwhile).
    #[error(transparent)]
    Drive(#[from] crate::config::ConfigError),
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
}

impl DriveHandle {
    /// The drive's counters summed over its queues, as one JSON object (for the log and tests;
    /// the fields come from the declarations, [`crate::metrics`]).
    pub fn stats_json(&self) -> serde_json::Value {
        let queues: Vec<&QueueStats> = self.stats.iter().map(|q| q.as_ref()).collect();
        crate::metrics::drive_json(&self.id, &queues, &self.rate_limits.drive.stats())
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
    /// Iothreads by id.
    pub iothreads: BTreeMap<String, Arc<IoThread>>,
    /// Drives in config order.
    pub drives: Vec<DriveHandle>,
    /// `rate_limit_groups`, by id.
    pub rate_limit_groups: BTreeMap<String, Arc<RateLimiter>>,
    /// The PCI root.
    pub pci: Arc<Mutex<PciRoot>>,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices")
            .field("drives", &self.drives)
            .finish()
    }
}

/// Builds every device for `config`; with `dynamic_weights`, iothreads are light while they
/// poll ([`crate::thread_weights`]).
pub fn build(
    config: &VmConfig,
    vm: &Arc<VmFd>,
    mem: &GuestMemory,
    exit: Arc<dyn ExitRequester>,
    dynamic_weights: bool,
) -> Result<Devices, DeviceError> {
    let serial_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(os("serial eventfd"))?;
    vm.register_irqfd(&serial_irq, COM1_IRQ)
        .map_err(|e| os("serial irqfd")(e.into()))?;
    let serial = Arc::new(Mutex::new(SerialConsole::new(
        serial_irq,
        Box::new(std::io::stdout()),
    )));

    let pci = Arc::new(Mutex::new(
        PciRoot::new(PCI_MMIO_START, PCI_MMIO_END - PCI_MMIO_START)
            .map_err(|e| DeviceError::Pci(e.to_string()))?,
    ));
    let mut pio = Bus::new();
    pio.insert(serial.clone(), u64::from(COM1_PORT), COM1_LEN)?;
    pio.insert(
        Arc::new(Mutex::new(I8042::new(exit.clone()))),
        u64::from(I8042_BASE),
        I8042_LEN,
    )?;
    pio.insert(
        Arc::new(Mutex::new(DebugExit::new(exit))),
        u64::from(DEBUG_EXIT_PORT),
        1,
    )?;
    pio.insert(
        Arc::new(Mutex::new(PciConfigIo::new(pci.clone()))),
        PCI_CONFIG_PORT,
        PCI_CONFIG_LEN,
    )?;
    let mut mmio = Bus::new();
    mmio.insert(
        Arc::new(Mutex::new(PciMmioWindow::new(pci.clone()))),
        PCI_MMIO_START,
        PCI_MMIO_END - PCI_MMIO_START,
    )?;

    let mut iothreads = BTreeMap::new();
    type ThreadSpec = (String, u32, dataplane::poll::PollParams, Vec<usize>);
    let mut threads: Vec<ThreadSpec> = config
        .iothreads
        .iter()
        .map(|t| {
            (
                t.id.clone(),
                t.max_batch,
                t.poll_params(),
                t.cpu_affinity.clone(),
            )
        })
        .collect();
    if threads.is_empty() && !config.drives.is_empty() {
        threads.push((
            DEFAULT_IOTHREAD.to_string(),
            0,
            Default::default(),
            Vec::new(),
        ));
    }
    for (name, max_batch, poll, cpus) in threads {
        let t = IoThread::spawn_weighted(&name, max_batch as usize, poll, dynamic_weights)
            .map_err(|e| os(format!("iothread {name}"))(std::io::Error::other(e)))?;
        if !cpus.is_empty() {
            let shown = crate::affinity::describe(&cpus);
            // Before the seccomp filter, which does not allow sched_setaffinity.
            let pin = move || crate::affinity::pin_current_thread(&cpus).map_err(Into::into);
            t.run_on_thread(Box::new(pin))
                .map_err(|e| os(format!("iothread {name}"))(std::io::Error::other(e)))?;
            log::info!("iothread {name}: pinned to CPUs {shown}");
        }
        iothreads.insert(name, t);
    }

    let rate_limit_groups: BTreeMap<String, Arc<RateLimiter>> = config
        .rate_limit_groups
        .iter()
        .map(|g| {
            (
                g.id.clone(),
                Arc::new(RateLimiter::new(g.limits().to_dataplane())),
            )
        })
        .collect();
    let router = Arc::new(GsiRouter::new(vm.clone()));
    let ioevents = Arc::new(KvmIoEvents(vm.clone()));
    let mut drives = Vec::with_capacity(config.drives.len());
    for (i, d) in config.drives.iter().enumerate() {
        // Validation warned if the size is not a multiple of 512 bytes.
        let opened = crate::drive::open(d, i)?;
        let thread_id = d.iothread.clone().unwrap_or_else(|| {
            config
                .iothreads
                .first()
                .map(|t| t.id.clone())
                .unwrap_or_else(|| DEFAULT_IOTHREAD.to_string())
        });
        let Some(thread) = iothreads.get(&thread_id).cloned() else {
            return Err(DeviceError::Pci(format!(
                "drives[{i}]: iothread {thread_id} missing"
            )));
        };
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
        let rate_limits = DriveRateLimits {
            drive: Arc::new(RateLimiter::new(
                d.rate_limiter.unwrap_or_default().to_dataplane(),
            )),
            group: match &d.rate_limit_group {
                Some(g) => Some(rate_limit_groups.get(g).cloned().ok_or_else(|| {
                    DeviceError::Pci(format!("drives[{i}]: rate_limit_group {g} missing"))
                })?),
                None => None,
            },
        };
        let block = VirtioBlock::new(
            BlockDeviceConfig {
                drive_id: d.drive_id.clone(),
                file: opened.file,
                read_only: d.is_read_only,
                capacity_sectors: opened.capacity_sectors,
                num_queues: d.num_queues,
                queue_size: d.queue_size,
                engine,
                rate_limits: rate_limits.clone(),
            },
            thread.clone(),
        );
        let stats = block.stats();
        let vectors = router
            .allocate_vectors(usize::from(d.num_queues) + 1)
            .map_err(os(format!("drives[{i}]: MSI-X vectors")))?;
        let dev = VirtioPciDevice::new(
            Box::new(block),
            mem.clone(),
            vectors,
            router.clone(),
            ioevents.clone(),
        )
        .map_err(|e| DeviceError::Pci(format!("drives[{i}]: {e}")))?;
        let slot = pci
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add_device(Arc::new(Mutex::new(dev)))
            .map_err(|e| DeviceError::Pci(format!("drives[{i}]: {e}")))?;
        log::info!(
            "drives[{i}] {}: virtio-blk at 00:{slot:02x}.0, {} sectors, {} queue(s) of {}, engine {:?}, iothread {thread_id}{}",
            d.drive_id,
            opened.capacity_sectors,
            d.num_queues,
            d.queue_size,
            d.io_engine,
            if d.is_read_only { ", read-only" } else { "" }
        );
        drives.push(DriveHandle {
            id: d.drive_id.clone(),
            slot,
            stats,
            engine: d.io_engine,
            rate_limits,
            iothread: thread,
        });
    }
    Ok(Devices {
        pio: Arc::new(pio),
        mmio: Arc::new(mmio),
        serial,
        iothreads,
        drives,
        rate_limit_groups,
        pci,
    })
}

/// An iothread's parameters and counters as one JSON object (for the log and tests).
pub fn iothread_json(id: &str, t: &IoThread) -> serde_json::Value {
    let p = t.poll_params();
    let params = crate::metrics::IoThreadParams {
        max_batch: t.max_batch() as u64,
        poll_max_ns: p.max_ns,
        poll_grow: p.grow,
        poll_shrink: p.shrink,
        poll_policy: format!("{:?}", p.policy),
        poll_weight: u64::from(p.weight),
    };
    crate::metrics::iothread_json(id, &params, t.stats())
}
