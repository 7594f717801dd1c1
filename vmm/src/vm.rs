//! Building and running a VM: KVM objects, guest memory, legacy devices, boot state and vCPU
//! threads, then the control loop that waits for the reason to stop.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::serial::SerialConsole;
use devices::{ExitRequest, ExitRequester};
use kvm_bindings::{
    kvm_pit_config, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

use crate::boot::{self, BootEntry, BootError, BootSpec};
use crate::config::VmConfig;
use crate::control::{ControlEvent, Controller, Effect};
use crate::control_loop::{ControlLoop, ControlSender};
use crate::device_manager::{self, DeviceError, Devices};
use crate::host::KvmFlavor;
use crate::layout::ram_regions;
use crate::regs::{self, RegsError};
use crate::sandbox::{Sandbox, SandboxError, ThreadHook};
use crate::seccomp::ThreadKind;
use crate::stop::StopReason;
use crate::vcpu::PauseState;
use crate::vcpu::VcpuRunner;
use crate::{acpi, cpuid, mptable, msr};

/// Errors building or starting the VM.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A KVM ioctl failed.
    #[error("KVM: {what}: {source}")]
    Kvm {
        /// The operation.
        what: &'static str,
        /// The ioctl's error.
        source: kvm_ioctls::Error,
    },
    /// Allocating guest memory failed.
    #[error("Allocating {mib} MiB of guest memory failed: {reason}")]
    Memory {
        /// Requested size.
        mib: u64,
        /// Why.
        reason: String,
    },
    /// Loading the kernel or initrd failed.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// Writing the ACPI tables failed.
    #[error(transparent)]
    Acpi(#[from] acpi::AcpiError),
    /// Writing the MP table failed.
    #[error(transparent)]
    Mptable(#[from] mptable::MptableError),
    /// Writing boot registers' memory failed.
    #[error(transparent)]
    Regs(#[from] RegsError),
    /// Building devices failed.
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// The config asks for more than the host allows.
    #[error("{0}")]
    Limit(String),
    /// Building or installing a seccomp filter failed.
    #[error("Seccomp: {0}")]
    Seccomp(String),
    /// Entering the sandbox failed.
    #[error("Sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    /// The control thread's event loop could not be set up.
    #[error(transparent)]
    ControlLoop(#[from] crate::control_loop::ControlLoopError),
    /// Creating an eventfd or thread failed.
    #[error("{what}: {source}")]
    Os {
        /// The operation.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { what, source }
}

/// Set by the SIGINT/SIGTERM handler; read by the control loop.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(num: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STOP_SIGNAL.store(num, Ordering::SeqCst);
    crate::control_loop::wake_from_signal();
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// Forwards device exit requests to the control loop.
struct ChannelExit(ControlSender);

impl ExitRequester for ChannelExit {
    fn request_exit(&self, why: ExitRequest) {
        self.0.send(ControlEvent::Stop(StopReason::Guest(why)));
    }
}

/// A VM whose vCPUs are running.
pub struct RunningVm {
    vcpus: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// The control thread's event loop (event-manager).
    control: ControlLoop,
    /// Keeps the channel open for the API server's submissions.
    events_tx: ControlSender,
    /// The REST API server, if configured (stopped, and its socket removed, when dropped).
    api: Option<crate::api::server::ApiServer>,
    /// The metrics file, opened before the sandbox closed the file system.
    metrics: Option<MetricsFile>,
    /// Kept so that the sandbox (its ruleset fd) is released by the control thread, whose
    /// filter allows what closing it takes, not by whichever thread ran its hook last.
    _sandbox: Arc<Sandbox>,
    pause: Arc<PauseState>,
    config: VmConfig,
    started: Instant,
    devices: Devices,
    /// The process exits once `wait` returns ([`run`]): the engines' Linux AIO contexts are left
    /// to the exit instead of one `io_destroy` each (32 ms per queue on the dev machine).
    process_exits_after: bool,
    // Kept alive for the VM's lifetime.
    _vm: Arc<VmFd>,
    _mem: GuestMemoryMmap,
}

impl std::fmt::Debug for RunningVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningVm")
            .field("vcpus", &self.vcpus.len())
            .finish()
    }
}

/// Builds the VM described by `config` (already validated) and starts its vCPUs.
pub fn start(config: &VmConfig) -> Result<RunningVm, VmError> {
    let started = Instant::now();
    // Alone on the main thread still: namespaces (when asked) and no_new_privs for every thread.
    Sandbox::enter_early(&config.sandbox)?;
    let flavor = KvmFlavor::detect();
    log::info!("KVM: {}", flavor.describe());

    let kvm = Kvm::new().map_err(kvm_err("opening /dev/kvm"))?;
    let limits = crate::host::VcpuLimits {
        recommended: kvm.get_nr_vcpus(),
        max: kvm.get_max_vcpus(),
    };
    match limits.check(config.machine.vcpu_count) {
        Ok(None) => {}
        Ok(Some(warning)) => log::warn!("{warning}"),
        Err(e) => return Err(VmError::Limit(e)),
    }
    let vm = kvm.create_vm().map_err(kvm_err("creating the VM"))?;
    vm.set_tss_address(0xfffb_d000)
        .map_err(kvm_err("KVM_SET_TSS_ADDR"))?;
    let mem_bytes = config.machine.mem_size_mib << 20;
    let mem = create_memory(&vm, mem_bytes, config.machine.mem_size_mib)?;
    crate::boot_timing::mark(crate::boot_timing::Step::MemorySetUp);
    vm.create_irq_chip()
        .map_err(kvm_err("creating the in-kernel irqchip"))?;
    let pit = kvm_pit_config {
        flags: KVM_PIT_SPEAKER_DUMMY,
        ..Default::default()
    };
    vm.create_pit2(pit).map_err(kvm_err("creating the PIT"))?;

    let metrics_every = config
        .metrics
        .as_ref()
        .map(|m| Duration::from_millis(m.interval_ms));
    let (control, tx) = ControlLoop::new(metrics_every)?;
    let exit: Arc<dyn ExitRequester> = Arc::new(ChannelExit(tx.clone()));
    let vm = Arc::new(vm);
    // Opened before the sandbox is built: the Landlock rule needs the file to exist, and the
    // control thread never opens it again.
    let metrics = config.metrics.as_ref().and_then(MetricsFile::open);
    // Before any VM thread starts, and before this thread drops its privileges.
    let weights = crate::thread_weights::prepare(config.machine.thread_weights, &config.sandbox);
    let sandbox = Sandbox::prepare(
        config,
        seccomp_filters(config)?,
        weights.iothread_capabilities(),
    )?;
    let light_vcpus = weights.dynamic();
    let devices = device_manager::build(config, &vm, &mem, exit, light_vcpus)?;
    for t in devices.iothreads.values() {
        let enter = sandbox.hook(ThreadKind::IoThread);
        t.run_on_thread(Box::new(move || enter().map_err(Into::into)))
            .map_err(|e| VmError::Os {
                what: "entering the sandbox on an iothread",
                source: std::io::Error::other(e.to_string()),
            })?;
    }

    mptable::write(&mem, config.machine.vcpu_count)?;
    let rsdp = acpi::write(&mem, config.machine.vcpu_count)?;
    let spec = BootSpec {
        kernel: &config.boot.kernel_image_path,
        initrd: config.boot.initrd_path.as_deref(),
        cmdline: &config.boot.boot_args,
        mem_bytes,
        rsdp,
        unpack: config.boot.unpack,
    };
    let entry = boot::load(&mem, &spec)?;
    crate::boot_timing::mark(crate::boot_timing::Step::KernelLoaded);
    if let Some((_, took)) = entry.unpacked {
        crate::boot_timing::set_unpack(took);
    }
    log::info!(
        "Loaded {} ({:?}, {:?} entry at {:#x})",
        spec.kernel.display(),
        entry.format,
        entry.mode,
        entry.entry
    );

    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    register_signal_handler(SIGRTMIN(), on_kick).map_err(|e| VmError::Os {
        what: "vCPU kick signal",
        source: e.into(),
    })?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        register_signal_handler(sig, on_stop_signal).map_err(|e| VmError::Os {
            what: "SIGINT/SIGTERM handler",
            source: e.into(),
        })?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(PauseState::default());
    let count = config.machine.vcpu_count;
    let mut vcpus = Vec::with_capacity(count.into());
    for id in 0..count {
        let fd = vm
            .create_vcpu(u64::from(id))
            .map_err(kvm_err("creating a vCPU"))?;
        configure_vcpu(&fd, &mem, &supported, id, count, entry)?;
        if id == 0 {
            match fd.get_tsc_khz() {
                Ok(khz) => log::info!("vCPU TSC frequency: {khz} kHz"),
                Err(e) => log::warn!("KVM_GET_TSC_KHZ failed: {e}"),
            }
        }
        let runner = VcpuRunner {
            id,
            fd,
            pio: devices.pio.clone(),
            mmio: devices.mmio.clone(),
            events: tx.clone(),
            stop: stop.clone(),
            pause: pause.clone(),
            on_start: Some(vcpu_start_hook(light_vcpus, sandbox.hook(ThreadKind::Vcpu))),
        };
        let handle = std::thread::Builder::new()
            .name(format!("vcpu{id}"))
            .spawn(move || runner.run())
            .map_err(|source| VmError::Os {
                what: "spawning a vCPU thread",
                source,
            })?;
        vcpus.push(handle);
    }
    spawn_stdin_reader(devices.serial.clone(), sandbox.hook(ThreadKind::Stdin));
    let api = match &config.api {
        Some(a) => {
            let sender = tx.clone();
            let submit: crate::api::command::Submit = Arc::new(move |req| {
                sender.send(ControlEvent::Api(req));
            });
            let server = crate::api::server::start_hooked(
                &a.socket,
                submit,
                crate::api::server::ServerLimits::default(),
                Some(sandbox.hook(ThreadKind::Api)),
            )
            .map_err(|e| VmError::Os {
                what: "starting the API server",
                source: std::io::Error::other(e.to_string()),
            })?;
            if let Err(e) = sandbox.hand_over(&a.socket) {
                log::warn!(
                    "API socket {}: cannot give it to the sandbox's user ({e}); it will be left \
                     behind at exit",
                    a.socket.display()
                );
            }
            log::info!("API listening on {}", a.socket.display());
            Some(server)
        }
        None => None,
    };
    let entered = sandbox.enter(ThreadKind::Control)?;
    if sandbox.is_on() {
        log::info!("sandbox: {}", sandbox.describe(&entered));
    } else {
        log::warn!("sandbox: {}", sandbox.describe(&entered));
    }
    log::info!(
        "Started {count} vCPU(s), {} MiB in {:.1} ms; boot timings {}",
        config.machine.mem_size_mib,
        started.elapsed().as_secs_f64() * 1e3,
        crate::boot_timing::json()
    );
    Ok(RunningVm {
        process_exits_after: false,
        vcpus,
        stop,
        control,
        events_tx: tx,
        api,
        metrics,
        _sandbox: sandbox,
        pause,
        config: config.clone(),
        started,
        devices,
        _vm: vm,
        _mem: mem,
    })
}

/// The filters to install, or `None` with `--seccomp off` or `--sandbox off`; logs the choice.
fn seccomp_filters(config: &VmConfig) -> Result<Option<crate::seccomp::Filters>, VmError> {
    if config.sandbox.mode == crate::sandbox::SandboxMode::Off {
        return Ok(None);
    }
    match crate::seccomp::mode() {
        crate::seccomp::SeccompMode::Off => {
            log::warn!("seccomp: off (--seccomp off): every thread runs unfiltered");
            Ok(None)
        }
        crate::seccomp::SeccompMode::On => {
            let f =
                crate::seccomp::Filters::build().map_err(|e| VmError::Seccomp(e.to_string()))?;
            log::info!("seccomp: on: {}", f.describe());
            Ok(Some(f))
        }
    }
}

fn create_memory(vm: &VmFd, mem_bytes: u64, mib: u64) -> Result<GuestMemoryMmap, VmError> {
    let mem =
        GuestMemoryMmap::from_ranges(&ram_regions(mem_bytes)).map_err(|e| VmError::Memory {
            mib,
            reason: e.to_string(),
        })?;
    for (slot, region) in mem.iter().enumerate() {
        let host = region
            .get_host_address(MemoryRegionAddress(0))
            .map_err(|e| VmError::Memory {
                mib,
                reason: e.to_string(),
            })?;
        let desc = kvm_userspace_memory_region {
            slot: slot as u32,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
            flags: 0,
        };
        // SAFETY: `host` is the start of a live mapping of `region.len()` bytes owned by `mem`,
        // which the returned `RunningVm` keeps alive for as long as the VM (and its vCPUs) run.
        unsafe { vm.set_user_memory_region(desc) }.map_err(kvm_err("registering guest memory"))?;
    }
    Ok(mem)
}

fn configure_vcpu(
    fd: &VcpuFd,
    mem: &GuestMemoryMmap,
    supported: &kvm_bindings::CpuId,
    id: u8,
    count: u8,
    entry: BootEntry,
) -> Result<(), VmError> {
    fd.set_cpuid2(&cpuid::for_vcpu(supported, id, count))
        .map_err(kvm_err("KVM_SET_CPUID2"))?;
    let pairs = msr::boot_msrs();
    let msrs = msr::to_kvm(&pairs).map_err(|_| VmError::Kvm {
        what: "packing MSRs",
        source: kvm_ioctls::Error::new(libc::EINVAL),
    })?;
    let set = fd.set_msrs(&msrs).map_err(kvm_err("KVM_SET_MSRS"))?;
    if set != pairs.len() {
        log::warn!(
            "KVM accepted {set} of {} boot MSRs; first refused: {:#x}",
            pairs.len(),
            pairs[set].0
        );
    }
    let mut lapic = fd.get_lapic().map_err(kvm_err("KVM_GET_LAPIC"))?;
    set_lint(&mut lapic);
    fd.set_lapic(&lapic).map_err(kvm_err("KVM_SET_LAPIC"))?;
    let sregs = fd.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    fd.set_sregs(&regs::boot_sregs(mem, entry.mode, sregs)?)
        .map_err(kvm_err("KVM_SET_SREGS"))?;
    fd.set_regs(&regs::boot_regs(entry.mode, entry.entry))
        .map_err(kvm_err("KVM_SET_REGS"))?;
    fd.set_fpu(&regs::boot_fpu())
        .map_err(kvm_err("KVM_SET_FPU"))?;
    Ok(())
}

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

/// LINT0 delivers the PIC's interrupts (ExtINT), LINT1 delivers NMI, as firmware would set them.
fn set_lint(lapic: &mut kvm_bindings::kvm_lapic_state) {
    let mut update = |offset: usize, mode: u32| {
        let mut raw = [0u8; 4];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = lapic.regs[offset + i] as u8;
        }
        let v = u32::from_le_bytes(raw);
        let v = (v & !0x700) | (mode << 8);
        for (i, b) in v.to_le_bytes().iter().enumerate() {
            lapic.regs[offset + i] = *b as _;
        }
    };
    update(APIC_LVT0, APIC_MODE_EXTINT);
    update(APIC_LVT1, APIC_MODE_NMI);
}

/// A vCPU's start hook: one nice step light first (with dynamic thread weights), then the
/// sandbox's hook.
fn vcpu_start_hook(light: bool, sandbox: ThreadHook) -> ThreadHook {
    Box::new(move || {
        if light {
            if let Err(e) = dataplane::thread_weight::lighten_this_thread() {
                log::warn!("vCPU: cannot lower its weight ({e}); it keeps the process's");
            }
        }
        sandbox()
    })
}

fn spawn_stdin_reader(serial: Arc<Mutex<SerialConsole>>, sandbox: ThreadHook) {
    let spawned = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            if let Err(e) = sandbox() {
                log::error!("stdin thread: {e}; no console input");
                return;
            }
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut uart = serial.lock().unwrap_or_else(|p| p.into_inner());
                uart.enqueue_input(&buf[..n]);
            }
        });
    if let Err(e) = spawned {
        log::warn!("No console input: {e}");
    }
}

impl RunningVm {
    /// Waits for the reason the VM stops, then stops every vCPU.
    pub fn wait(mut self) -> StopReason {
        let mut metrics = self.metrics.take();
        let reason = 'run: loop {
            // A signal that arrived before the first wait rang the loop too, but look first.
            let sig = STOP_SIGNAL.load(Ordering::SeqCst);
            if sig != 0 {
                break StopReason::Signal(sig);
            }
            let woken = self.control.wait();
            while let Some(event) = self.control.next_event() {
                match event {
                    ControlEvent::Stop(reason) => break 'run reason,
                    ControlEvent::Api(req) => {
                        let (reply, effect) = self.controller().execute(req.command);
                        if effect == Effect::Pause {
                            self.pause_vcpus();
                        }
                        let _ = req.reply.send(reply);
                        if effect == Effect::Shutdown {
                            break 'run StopReason::ApiShutdown;
                        }
                    }
                }
            }
            if woken.metrics {
                if let Some(m) = metrics.as_mut() {
                    let line = self.controller().metrics();
                    m.write(&line);
                }
            }
        };
        if let Some(m) = metrics.as_mut() {
            let line = self.controller().metrics();
            m.write(&line);
        }
        for d in &self.devices.drives {
            log::info!("drive stats {}", d.stats_json());
        }
        for (id, t) in &self.devices.iothreads {
            log::info!(
                "iothread stats {}",
                crate::device_manager::iothread_json(id, t)
            );
        }
        // Read before the vCPU threads exit: a finished thread leaves /proc/self/task.
        log::info!(
            "CPU time by thread: {}",
            crate::cpu_usage::summary(&crate::cpu_usage::by_thread())
        );
        if let Some(api) = self.api.take() {
            api.shutdown();
        }
        self.stop_vcpus();
        if self.process_exits_after {
            dataplane::engine::linux_aio::leave_contexts_to_process_exit();
        }
        for t in self.devices.iothreads.values() {
            t.shutdown();
        }
        log::info!(
            "VM stopped after {:.3} s: {}",
            self.started.elapsed().as_secs_f64(),
            reason.describe()
        );
        reason
    }

    fn controller(&mut self) -> Controller<'_> {
        Controller {
            config: &mut self.config,
            devices: &self.devices,
            pause: &self.pause,
            started: self.started,
        }
    }

    /// A sender for API requests (the API server's `submit`).
    pub fn control_sender(&self) -> ControlSender {
        self.events_tx.clone()
    }

    /// Pauses the vCPUs: sets the flag and kicks them out of KVM_RUN until all are parked.
    fn pause_vcpus(&self) {
        self.pause.set(true);
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.pause.parked() < self.vcpus.iter().filter(|h| !h.is_finished()).count() {
            if Instant::now() >= deadline {
                log::warn!("not every vCPU parked within 2 s");
                return;
            }
            for h in self.vcpus.iter().filter(|h| !h.is_finished()) {
                let _ = h.kill(SIGRTMIN());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        log::info!("VM paused");
    }

    fn stop_vcpus(&self) {
        self.stop.store(true, Ordering::Release);
        self.pause.release_all();
        let deadline = Instant::now() + Duration::from_secs(2);
        // A vCPU blocked in KVM_RUN (halted, or waiting for SIPI) leaves it on a signal; repeat the
        // kick until it has noticed `stop`, since a kick that lands just before KVM_RUN is lost.
        while Instant::now() < deadline {
            let running: Vec<_> = self.vcpus.iter().filter(|h| !h.is_finished()).collect();
            if running.is_empty() {
                return;
            }
            for h in running {
                let _ = h.kill(SIGRTMIN());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        log::warn!("Some vCPU threads did not stop within 2 s");
    }
}

/// Periodic metrics: one JSON line per interval (the control loop's timer) appended to a file.
struct MetricsFile {
    file: std::fs::File,
}

impl MetricsFile {
    fn open(cfg: &crate::config::MetricsConfig) -> Option<MetricsFile> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&cfg.path);
        match file {
            Ok(file) => Some(MetricsFile { file }),
            Err(e) => {
                log::error!("metrics.path: {}: {e}; no metrics file", cfg.path.display());
                None
            }
        }
    }

    fn write(&mut self, metrics: &serde_json::Value) {
        use std::io::Write;
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut line = serde_json::json!({"utc_timestamp_ms": ts});
        if let (Some(l), Some(m)) = (line.as_object_mut(), metrics.as_object()) {
            l.extend(m.clone());
        }
        // One write per line (the file is unbuffered: `writeln!` of a JSON value would make a
        // syscall per token).
        if let Err(e) = self.file.write_all(format!("{line}\n").as_bytes()) {
            log::warn!("writing metrics: {e}");
        }
    }
}

/// Builds, runs and waits for the VM; the process is to exit when this returns (the engines'
/// Linux AIO contexts are left to the exit to free).
pub fn run(config: &VmConfig) -> Result<StopReason, VmError> {
    let mut vm = start(config)?;
    vm.process_exits_after = true;
    Ok(vm.wait())
}
