//! Building and running a VM. [`start`] reads as its steps: the KVM objects and guest memory
//! (`kvm.rs`), the control loop, the sandbox, the devices on the drive files the preflight
//! opened, the guest's tables and kernel, the vCPU, stdin and API threads, and last the control
//! thread's own sandbox. The running VM's loop and its stop are `running.rs` ([`RunningVm`]);
//! the errors, `error.rs` ([`VmError`]).

mod error;
mod kvm;
mod running;
mod steps;

use std::io::Read;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::iothread::IoThread;
use devices::serial::SerialConsole;
use devices::{ExitRequest, ExitRequester};
use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
use kvm_ioctls::VmFd;
use vm_memory::GuestMemoryMmap;

use crate::api::server::{ApiServer, SubmitSwitch};
use crate::config::VmConfig;
use crate::control_loop::ControlLoop;
use crate::device_manager::{self, Devices};
use crate::drive::OpenedDrive;
use crate::events::{ControlEvent, ControlSender, PauseState};
use crate::sandbox::{Sandbox, ThreadHook};
use crate::seccomp::ThreadKind;
use crate::snapshot::restore::{CheckedSnapshot, RestoreError};
use crate::snapshot::state::{LimiterOwner, SnapshotState};
use crate::snapshot_folder::SnapshotFolders;
use crate::stop::StopReason;
use crate::vcpu::VcpuRunner;
use arch::boot::{self, BootEntry, BootSpec};
use arch::{acpi, mptable};
use error::kvm_err;
pub use error::VmError;
use running::MetricsFile;
pub use running::{register_signal_handlers, stop_signal, RunningVm};

/// Forwards device exit requests to the control loop.
struct ChannelExit(ControlSender);

impl ExitRequester for ChannelExit {
    fn request_exit(&self, why: ExitRequest) {
        self.0.send(ControlEvent::Stop(StopReason::Guest(why)));
    }
}

/// An API server that was serving before the VM was built (a VM configured over the API): the
/// VM takes it over instead of starting its own.
#[derive(Debug, Clone)]
pub struct ServingApi {
    /// The server.
    pub server: Arc<ApiServer>,
    /// Where its commands go; the VM points it at its control thread.
    pub switch: SubmitSwitch,
    /// Its thread entered the sandbox before the VM existed
    /// ([`crate::sandbox::preboot::api_hook`]): the VM leaves it as it is.
    pub confined: bool,
}

/// Where a VM's state comes from: a boot, or a snapshot (docs/snapshot.md).
#[derive(Debug, Clone, Copy)]
enum Origin<'a> {
    /// Boot the kernel.
    Boot,
    /// Restore a checked snapshot: guest memory mapped privately from `mem_file`, the KVM and
    /// device state written back; the vCPUs start paused unless `resume`.
    Snapshot {
        state: &'a SnapshotState,
        mem_file: &'a std::fs::File,
        resume: bool,
    },
}

/// Builds the VM described by `config` (its values checked, its defaults filled in by
/// `VmConfig::fill_defaults`) on the drive files start-up's preflight opened (in `drives`
/// order), and starts its vCPUs. With `serving`, the API is that server, and the caller has
/// already run [`Sandbox::enter_early`] (before that server's thread started).
pub fn start(
    config: &VmConfig,
    drive_files: Vec<OpenedDrive>,
    taps: Vec<devices::net::Tap>,
    serving: Option<ServingApi>,
) -> Result<RunningVm, VmError> {
    start_from(config, (drive_files, taps), serving, Origin::Boot)
}

/// Restores the snapshot `checked` (`snapshot::restore::load` checked it and opened its files):
/// the VM rebuilt from its configuration, memory mapped from its memory file, the saved state
/// written back before any vCPU runs; the vCPUs run at once with `resume`, else it stays
/// paused. `serving` as for [`start`]; without it, the API is served on `api_socket`, if any.
pub fn restore(
    checked: CheckedSnapshot,
    resume: bool,
    serving: Option<ServingApi>,
    api_socket: Option<&std::path::Path>,
) -> Result<RunningVm, VmError> {
    let CheckedSnapshot {
        state,
        mut config,
        mem_file,
        drives,
        taps,
    } = checked;
    // The saved API socket was the snapshotted process's: the restoring process serves the
    // API on its own socket (the serving one, or `api_socket`), or none.
    let socket = match &serving {
        Some(s) => Some(s.server.socket().to_path_buf()),
        None => api_socket.map(std::path::Path::to_path_buf),
    };
    config.api = socket.map(|socket| crate::config::ApiConfig { socket });
    let origin = Origin::Snapshot {
        state: &state,
        mem_file: &mem_file,
        resume,
    };
    // The snapshot's interfaces on the taps `load` opened (the saved names or the overrides'):
    // before the sandbox when Osprey serves no API yet, after its early part (no new network
    // namespace then) when it does.
    start_from(&config, (drives, taps), serving, origin)
}

fn start_from(
    config: &VmConfig,
    (drive_files, taps): (Vec<OpenedDrive>, Vec<devices::net::Tap>),
    serving: Option<ServingApi>,
    origin: Origin<'_>,
) -> Result<RunningVm, VmError> {
    let started = Instant::now();
    let mut steps = steps::StepClock::new(started);
    if serving.is_none() {
        // Alone on the main thread still: namespaces (when asked) and no_new_privs for every
        // thread.
        Sandbox::enter_early(&config.sandbox)?;
    }
    let mem_file = match origin {
        Origin::Snapshot { mem_file, .. } => Some(mem_file),
        Origin::Boot => None,
    };
    let (kvm, vm, mem) = kvm::create_vm(config, mem_file)?;
    steps.mark("vm and memory");
    // Taken on this thread, the control thread to be: the kernel signals it when another
    // process opens the file to write or truncate it.
    let mem_lease = mem_file.and_then(|f| crate::snapshot::mem_lease::MemLease::take(f, &mem));
    if let Origin::Snapshot { state, .. } = origin {
        state.vm.restore(&vm).map_err(RestoreError::from)?;
    }
    steps.mark("memory lease and vm state");
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
    steps.mark("control loop and metrics");
    let (sandbox, light_vcpus) = prepare_sandbox(config)?;
    steps.mark("sandbox prepared");
    let devices = device_manager::build(config, drive_files, taps, &vm, &mem, exit, light_vcpus)?;
    confine_iothreads(&devices, &sandbox)?;
    steps.mark("devices");
    let boot = match origin {
        Origin::Boot => VcpuBoot::Entry(load_guest(config, &mem)?),
        Origin::Snapshot { state, .. } => {
            restore_devices(&devices, state)?;
            VcpuBoot::Restore(&state.vcpus)
        }
    };
    steps.mark(match origin {
        Origin::Boot => "guest loaded",
        Origin::Snapshot { .. } => "device state",
    });
    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    register_signal_handlers()?;
    steps.mark("cpuid and signals");
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(PauseState::default());
    // A restored VM's vCPUs park before their first KVM_RUN: `PATCH /vm` resumes them, or
    // `resume` below (without a serving API) or [`RunningVm::resume_after_answer`] (with one),
    // so that two vCPUs spinning on two cores do not hold back the API's answer (issue 53).
    let resume_on_answer = match origin {
        Origin::Snapshot { resume, .. } => {
            pause.set(true);
            resume && serving.is_some()
        }
        Origin::Boot => false,
    };
    let allowed_cpus = crate::affinity::allowed_cpus();
    let apart = iothreads_apart(config, &devices, allowed_cpus.len());
    // Light vCPUs let an iothread on their CPU take it at once; with every iothread apart,
    // their weight would only draw the host's other threads onto the vCPUs' CPUs.
    let all_apart = !apart.is_empty() && apart.len() == devices.iothreads.len();
    let SpawnedVcpus {
        handles: vcpus,
        snapshot_msrs,
        tids: vcpu_tids,
    } = spawn_vcpus(
        &kvm,
        &vm,
        &mem,
        &supported,
        boot,
        config.machine.vcpu_count,
        &VcpuShared {
            devices: &devices,
            events: &tx,
            stop: &stop,
            pause: &pause,
            light: light_vcpus && !all_apart,
            sandbox: &sandbox,
            affinity: &config.machine.vcpu_affinity,
        },
    )?;
    keep_apart(&apart, &vcpu_tids, &allowed_cpus);
    steps.mark("vcpus");
    if let Origin::Snapshot { state, .. } = origin {
        release_restored_vsock(&devices, state);
    }
    spawn_stdin_reader(devices.serial.clone(), sandbox.hook(ThreadKind::Stdin));
    let api = match serving {
        Some(serving) => Some(take_over_api(serving, &tx, &sandbox)?),
        None => start_api(config, &tx, &sandbox)?,
    };
    // Resolved before the control thread's sandbox (which allows neither symlink resolution nor
    // reading the working directory).
    let snapshot_folders = sandbox
        .is_on()
        .then(|| SnapshotFolders::resolve(&config.sandbox_paths().snapshot_folders));
    enter_control_sandbox(&sandbox)?;
    steps.mark("api and control sandbox");
    match origin {
        Origin::Boot => log::info!(
            "Started {} vCPU(s), {} MiB in {:.1} ms ({steps}); boot timings {}",
            config.machine.vcpu_count,
            config.machine.mem_size_mib,
            started.elapsed().as_secs_f64() * 1e3,
            crate::boot_timing::json()
        ),
        Origin::Snapshot { resume, .. } => log::info!(
            "Restored {} vCPU(s), {} MiB in {:.1} ms ({}; {steps})",
            config.machine.vcpu_count,
            config.machine.mem_size_mib,
            started.elapsed().as_secs_f64() * 1e3,
            if resume { "running" } else { "paused" }
        ),
    }
    if let Origin::Snapshot { resume: true, .. } = origin {
        if !resume_on_answer {
            pause.set(false);
        }
    }
    Ok(RunningVm {
        process_exits_after: false,
        resume_on_answer,
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
        snapshot_msrs,
        snapshot_folders,
        mem_lease,
        vm,
        mem,
    })
}

/// The sandbox every thread will enter, and whether thread weights are dynamic (vCPUs then run
/// light). Before any VM thread starts, and before this thread drops its privileges.
fn prepare_sandbox(config: &VmConfig) -> Result<(Arc<Sandbox>, bool), VmError> {
    let weights = crate::thread_weights::prepare(config.machine.thread_weights, &config.sandbox);
    let sandbox = Sandbox::prepare(
        &config.sandbox,
        &config.sandbox_paths(),
        seccomp_filters(config)?,
        weights.iothread_capabilities(),
    )?;
    Ok((sandbox, weights.dynamic()))
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
            let f = crate::seccomp::Filters::build().map_err(VmError::Seccomp)?;
            log::info!("seccomp: on: {}", f.describe());
            Ok(Some(f))
        }
    }
}

/// Each iothread enters the sandbox (set up, and pinned, by now).
fn confine_iothreads(devices: &Devices, sandbox: &Arc<Sandbox>) -> Result<(), VmError> {
    for t in devices.iothreads.values() {
        let hook = sandbox.hook(ThreadKind::IoThread);
        t.run_on_thread(Box::new(move || hook().map_err(Into::into)))
            .map_err(VmError::IoThreadSandbox)?;
    }
    Ok(())
}

/// Writes the MP and ACPI tables and loads the kernel (and initrd); returns its entry.
fn load_guest(config: &VmConfig, mem: &GuestMemoryMmap) -> Result<BootEntry, VmError> {
    mptable::write(mem, config.machine.vcpu_count)?;
    let rsdp = acpi::write(
        mem,
        config.machine.vcpu_count,
        &crate::device_manager::LEGACY_PORTS,
    )?;
    let spec = BootSpec {
        kernel: &config.boot.kernel_image_path,
        initrd: config.boot.initrd_path.as_deref(),
        cmdline: &config.boot.boot_args,
        mem_bytes: config.machine.mem_size_mib << 20,
        rsdp,
        unpack: config.boot.unpack,
    };
    let entry = boot::load(mem, &spec)?;
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
    Ok(entry)
}

/// Replays each drive's saved virtio-pci state on its freshly built function: the config
/// writes through the PCI root (which moves its MMIO routes), then the function's registers
/// (`DRIVER_OK` activates it on its iothread); then the legacy devices' registers and the rate
/// limiters' bucket levels.
fn restore_devices(devices: &Devices, state: &SnapshotState) -> Result<(), VmError> {
    // The pairs each NIC's guest had enabled, before its function's state activates it.
    for n in &devices.nics {
        let saved = state.nics.iter().find(|s| s.iface_id == n.id);
        n.pairs
            .set(saved.map_or(1, |s| s.enabled_pairs.clamp(1, n.max_pairs)));
    }
    let functions = devices
        .drives
        .iter()
        .map(|d| (&d.id, d.slot, &d.transport))
        .chain(devices.nics.iter().map(|n| (&n.id, n.slot, &n.transport)));
    for ((id, slot, transport), saved) in functions.zip(&state.transports) {
        {
            let mut root = devices.pci.lock().unwrap_or_else(|p| p.into_inner());
            for (offset, value) in saved.config_writes() {
                root.config_write(0, slot, 0, offset, &value.to_le_bytes());
            }
        }
        transport
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .restore_state(saved)
            .map_err(|source| RestoreError::Device {
                drive: id.clone(),
                source,
            })?;
    }
    if let (Some(v), Some(saved)) = (&devices.vsock, &state.vsock) {
        let mut root = devices.pci.lock().unwrap_or_else(|p| p.into_inner());
        for (offset, value) in saved.transport.config_writes() {
            root.config_write(0, v.slot, 0, offset, &value.to_le_bytes());
        }
        drop(root);
        // A fresh muxer: the snapshot's connections were another process's (docs/vsock.md).
        // Held until the vCPUs exist ([`release_restored_vsock`]): an interrupt it sent now
        // would reach no local APIC, or one about to be overwritten by its saved state.
        v.control.hold().set(devices::virtio::hold::HoldState::Held);
        if saved.transport.status & devices::virtio::status::DRIVER_OK != 0 {
            v.control.request_transport_reset();
        }
        v.transport
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .restore_state(&saved.transport)
            .map_err(RestoreError::VsockDevice)?;
    }
    state
        .legacy
        .apply(&devices.pci_config, &devices.serial)
        .map_err(RestoreError::Legacy)?;
    // The buckets as they were: a restore does not hand the guest a fresh burst.
    for levels in &state.rate_limits {
        let limiter = match &levels.owner {
            LimiterOwner::Drive(id) => devices
                .drives
                .iter()
                .find(|d| &d.id == id)
                .map(|d| &d.rate_limits.drive),
            LimiterOwner::Group(id) => devices.rate_limit_groups.get(id),
        };
        if let Some(limiter) = limiter {
            levels.apply(limiter);
        }
    }
    Ok(())
}

/// A restored vsock device, held since its state was replayed, is released once the vCPUs exist
/// with their restored local APICs: its first turn drops every connection and sends the
/// TRANSPORT_RESET event (asked in [`restore_devices`] when the guest's driver had the device
/// running) with its interrupt, which the guest takes when it runs.
fn release_restored_vsock(devices: &Devices, state: &SnapshotState) {
    let (Some(v), Some(_)) = (&devices.vsock, &state.vsock) else {
        return;
    };
    v.release();
    log::info!("vsock: restored without connections; the guest is sent a TRANSPORT_RESET");
}

/// How a vCPU gets its first state.
#[derive(Debug, Clone, Copy)]
enum VcpuBoot<'a> {
    /// The boot state for the kernel's entry.
    Entry(BootEntry),
    /// A snapshot's state, one per vCPU in index order.
    Restore(&'a [crate::snapshot::kvm_state::VcpuState]),
}

/// What every vCPU thread shares.
struct VcpuShared<'a> {
    devices: &'a Devices,
    events: &'a ControlSender,
    stop: &'a Arc<AtomicBool>,
    pause: &'a Arc<PauseState>,
    /// Dynamic thread weights: vCPUs run one nice step light.
    light: bool,
    sandbox: &'a Arc<Sandbox>,
    /// `machine-config.vcpu_affinity`: entry `i`, vCPU `i`'s host CPUs.
    affinity: &'a [Vec<usize>],
}

/// The iothreads that keep off the CPUs where the vCPUs run (`machine-config.thread_placement`
/// `Apart`, when Osprey may use `cpus` CPUs, more than the VM has vCPUs): those with no
/// `cpu_affinity` of their own that serve neither a drive nor the vsock device, a NIC's. A
/// NIC's hand-offs are what a shared CPU slows. A drive's iothread, apart, shares the other
/// core's CPU with the block layer's own work it starts (a busy host's QD32 reads measured 0.69×
/// apart); the vsock device's needs much CPU for a bulk transfer and gets only its share of a
/// CPU another process keeps busy (a busy host's one-connection bulk measured 0.56× apart, and
/// with two CPU-bound processes there its round trip 5.8× longer).
fn iothreads_apart<'a>(
    config: &VmConfig,
    devices: &'a Devices,
    cpus: usize,
) -> Vec<(&'a String, &'a Arc<IoThread>)> {
    let placement = config.machine.thread_placement;
    if !placement.keeps_apart(config.machine.vcpu_count.into(), cpus) {
        return Vec::new();
    }
    devices
        .iothreads
        .iter()
        .filter(|(id, thread)| {
            let pinned = config
                .iothreads
                .iter()
                .any(|t| &t.id == *id && !t.cpu_affinity.is_empty());
            let serves_a_drive = devices
                .drives
                .iter()
                .any(|d| Arc::ptr_eq(&d.iothread, thread));
            let serves_the_vsock = devices
                .vsock
                .as_ref()
                .is_some_and(|v| Arc::ptr_eq(&v.iothread, thread));
            !pinned && !serves_a_drive && !serves_the_vsock
        })
        .collect()
}

/// Each iothread of `apart` keeps off the CPUs where the vCPUs (their thread ids `vcpu_tids`)
/// run, within `allowed`.
fn keep_apart(apart: &[(&String, &Arc<IoThread>)], vcpu_tids: &[i32], allowed: &[usize]) {
    for (id, thread) in apart {
        let stats: Result<Vec<std::fs::File>, _> = vcpu_tids
            .iter()
            .map(|tid| std::fs::File::open(format!("/proc/self/task/{tid}/stat")))
            .collect();
        let placed = stats.map_err(|e| e.to_string()).and_then(|files| {
            thread
                .keep_apart(dataplane::iothread::placement::KeepApart::new(
                    files,
                    allowed.to_vec(),
                ))
                .map_err(|e| e.to_string())
        });
        match placed {
            Ok(()) => log::info!("iothread {id}: keeps off the CPUs its vCPUs run on"),
            Err(e) => log::warn!("iothread {id}: placed by the scheduler ({e})"),
        }
    }
}

/// The vCPU threads [`spawn_vcpus`] started.
struct SpawnedVcpus {
    handles: Vec<JoinHandle<()>>,
    /// The MSRs a snapshot saves (`snapshot::kvm_state::saveable_msrs`, probed on vCPU 0).
    snapshot_msrs: Vec<u32>,
    /// The threads' ids, in vCPU order.
    tids: Vec<i32>,
}

/// Creates and configures `count` vCPUs and starts a thread for each.
fn spawn_vcpus(
    kvm: &kvm_ioctls::Kvm,
    vm: &VmFd,
    mem: &GuestMemoryMmap,
    supported: &kvm_bindings::CpuId,
    boot: VcpuBoot<'_>,
    count: u8,
    shared: &VcpuShared<'_>,
) -> Result<SpawnedVcpus, VmError> {
    let mut vcpus = Vec::with_capacity(count.into());
    let mut tids = Vec::with_capacity(count.into());
    let mut snapshot_msrs = Vec::new();
    for id in 0..count {
        let fd = vm
            .create_vcpu(u64::from(id))
            .map_err(kvm_err("creating a vCPU"))?;
        match boot {
            VcpuBoot::Entry(entry) => kvm::configure_vcpu(&fd, mem, supported, id, count, entry)?,
            VcpuBoot::Restore(states) => {
                let saved = states.get(usize::from(id)).ok_or(RestoreError::Shape {
                    what: "vCPUs",
                    saved: states.len(),
                    configured: usize::from(count),
                })?;
                saved.restore(&fd).map_err(RestoreError::from)?;
            }
        }
        if id == 0 {
            snapshot_msrs = crate::snapshot::kvm_state::saveable_msrs(kvm, &fd)
                .map_err(VmError::SnapshotSetUp)?;
            match fd.get_tsc_khz() {
                Ok(khz) => log::info!("vCPU TSC frequency: {khz} kHz"),
                Err(e) => log::warn!("KVM_GET_TSC_KHZ failed: {e}"),
            }
        }
        let runner = VcpuRunner {
            id,
            fd,
            pio: shared.devices.pio.clone(),
            mmio: shared.devices.mmio.clone(),
            mem: mem.clone(),
            events: shared.events.clone(),
            stop: shared.stop.clone(),
            pause: shared.pause.clone(),
            on_start: Some(vcpu_start_hook(
                id,
                shared.light,
                shared
                    .affinity
                    .get(usize::from(id))
                    .cloned()
                    .unwrap_or_default(),
                shared.sandbox.hook(ThreadKind::Vcpu),
            )),
        };
        // The thread names itself as it starts (std does it before the closure): wait for that,
        // so every vCPU thread bears its name by the time the VM is reported running (Kata
        // looks the `fc_vcpu` threads up then, to put them in its cgroups; Firecracker waits
        // for its vCPU threads too).
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<i32>(1);
        let handle = std::thread::Builder::new()
            .name(crate::identity::get().vcpu_thread_name(id))
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                let _ = started_tx.send(unsafe { libc::gettid() });
                runner.run()
            })
            .map_err(|source| VmError::Os {
                what: "spawning a vCPU thread",
                source,
            })?;
        // An error means the thread ended before it could say so: nothing to wait for.
        if let Ok(tid) = started_rx.recv() {
            tids.push(tid);
        }
        vcpus.push(handle);
    }
    Ok(SpawnedVcpus {
        handles: vcpus,
        snapshot_msrs,
        tids,
    })
}

/// A vCPU's start hook: pinned to `cpus` (unless empty) and one nice step light (with dynamic
/// thread weights) first, then the sandbox's hook (its seccomp filter allows neither).
fn vcpu_start_hook(id: u8, light: bool, cpus: Vec<usize>, sandbox: ThreadHook) -> ThreadHook {
    Box::new(move || {
        if !cpus.is_empty() {
            let shown = crate::affinity::describe(&cpus);
            match crate::affinity::pin_current_thread(&cpus) {
                Ok(()) => log::info!("vCPU {id}: pinned to CPUs {shown}"),
                Err(e) => log::warn!("vCPU {id}: not pinned ({e}); the scheduler places it"),
            }
        }
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

/// The submit that hands API commands to the control thread.
fn control_submit(tx: &ControlSender) -> crate::api::command::Submit {
    let sender = tx.clone();
    Arc::new(move |req| {
        sender.send(ControlEvent::Api(req));
    })
}

/// The REST API server on `api.socket`, if configured, its thread in the sandbox.
fn start_api(
    config: &VmConfig,
    tx: &ControlSender,
    sandbox: &Arc<Sandbox>,
) -> Result<Option<Arc<ApiServer>>, VmError> {
    let Some(a) = &config.api else {
        return Ok(None);
    };
    let server = crate::api::server::start_hooked(
        &a.socket,
        control_submit(tx),
        crate::api::server::ServerLimits::default(),
        Some(sandbox.hook(ThreadKind::Api)),
    )
    .map_err(VmError::Api)?;
    hand_over_socket(sandbox, &a.socket);
    log::info!("API listening on {}", a.socket.display());
    Ok(Some(Arc::new(server)))
}

/// The server that served the pre-boot API: its thread enters the sandbox (unless it did
/// before the VM existed), then its commands go to the control thread.
fn take_over_api(
    serving: ServingApi,
    tx: &ControlSender,
    sandbox: &Arc<Sandbox>,
) -> Result<Arc<ApiServer>, VmError> {
    if !serving.confined {
        serving
            .server
            .run_on_thread(sandbox.hook(ThreadKind::Api))
            .map_err(VmError::ApiSandbox)?;
    }
    hand_over_socket(sandbox, serving.server.socket());
    serving.switch.set(control_submit(tx));
    Ok(serving.server)
}

fn hand_over_socket(sandbox: &Sandbox, socket: &std::path::Path) {
    if let Err(e) = sandbox.hand_over(socket) {
        log::warn!(
            "API socket {}: cannot give it to the sandbox's user ({e}); it will be left \
             behind at exit",
            socket.display()
        );
    }
}

/// The control thread (this one) enters the sandbox last, and says what is in force.
fn enter_control_sandbox(sandbox: &Sandbox) -> Result<(), VmError> {
    let entered = sandbox.enter(ThreadKind::Control)?;
    if sandbox.is_on() {
        log::info!("sandbox: {}", sandbox.describe(&entered));
    } else {
        log::warn!("sandbox: {}", sandbox.describe(&entered));
    }
    Ok(())
}

/// Builds, runs and waits for the VM on the drive files the preflight opened; the process is to
/// exit when this returns (the engines' Linux AIO contexts are left to the exit to free).
pub fn run(
    config: &VmConfig,
    drive_files: Vec<OpenedDrive>,
    taps: Vec<devices::net::Tap>,
) -> Result<StopReason, VmError> {
    let mut vm = start(config, drive_files, taps, None)?;
    vm.process_exits_after = true;
    Ok(vm.wait())
}
