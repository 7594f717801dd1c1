//! Taking a snapshot of a paused VM (`PUT /snapshot/create`), on the control thread: wait until
//! the iothreads have completed every request the guest made available (the drain), read each
//! vCPU's state on its own thread, the VM's in-kernel state, each drive's virtio-pci function
//! and the rate limiters' bucket levels, then write guest memory and the state file. A vsock
//! device is held still from before its state is read until the files are written (host
//! clients' data would otherwise reach guest memory after its rings were read); its
//! connections are not saved (docs/vsock.md). The network interfaces are held the same way (a
//! frame from the tap would otherwise move a used ring after it was read).
//!
//! With the sandbox on, both files must lie in a folder where Osprey may create them
//! ([`crate::snapshot_folder`]: the API socket's, and `snapshot.folder`); the paths are checked
//! before anything else is done, so a path elsewhere creates no file. Neither may name (nor its
//! temporaries) a file the VM uses, by device and inode ([`protected_files`]), nor anything but
//! a regular file; the files are written under temporary names and renamed into place so that a
//! crash leaves the old snapshot or the new one whole (`commit.rs`).
//!
//! Drain, not record: with the vCPUs paused the guest adds no request, and the iothreads keep
//! running, so every request the guest made available completes, its used entry written and
//! its interrupt sent (or left pending in the MSI-X PBA, which is saved). A restored VM then
//! has nothing in flight and resumes each queue at its used index.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvm_ioctls::VmFd;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::commit::{Protected, TargetError, Targets, Which};
use super::file::{self, StateFileError, OSPREY_VERSION};
use super::kvm_state::{xsave_support, KvmStateError, VcpuState, VmState};
use super::legacy::LegacyState;
use super::mem_file;
use super::state::{
    file_size, DriveState, LimiterLevels, LimiterOwner, NicState, SnapshotState, VsockState,
};
use crate::config::VmConfig;
use crate::device_manager::{Devices, NicHandle};
use crate::events::PauseState;
use crate::snapshot_folder::{SnapshotFolderError, SnapshotFolders};

/// How long the drain may take before the snapshot gives up (a throttled drive completes its
/// queued requests at its rate limit, so this is generous).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// How long the parked vCPUs may take to report their state.
const VCPU_LIMIT: Duration = Duration::from_secs(5);

/// Why a snapshot was not taken (the API answers 400 with the message).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotCreateError {
    /// The sandbox is on and a path lies outside the folders where it lets Osprey create files.
    #[error(transparent)]
    Folder(#[from] SnapshotFolderError),
    /// The VM runs.
    #[error("the VM is running; pause it first (PATCH /vm {{\"state\": \"Paused\"}})")]
    NotPaused,
    /// `snapshot_type` other than `Full`.
    #[error("snapshot_type {0:?}: Osprey takes Full snapshots only")]
    Type(String),
    /// The vsock device could not be held still (its iothread did not answer).
    #[error("vsock: holding the device for the snapshot: {0}")]
    VsockHold(#[source] dataplane::IoThreadError),
    /// A network interface could not be held still (its iothread did not answer).
    #[error("network interface {iface}: holding it for the snapshot: {source}")]
    NicHold {
        /// Its `iface_id`.
        iface: String,
        /// Why.
        #[source]
        source: dataplane::IoThreadError,
    },
    /// The vsock device's state cannot be saved.
    #[error("vsock: {0}")]
    VsockDevice(#[source] devices::virtio::pci::state::VirtioPciStateError),
    /// The drain did not finish.
    #[error("drive {drive}: requests still in flight after {}s", DRAIN_LIMIT.as_secs())]
    Drain {
        /// The drive.
        drive: String,
    },
    /// A vCPU did not report.
    #[error("{missing} vCPU(s) did not report their state within {}s", VCPU_LIMIT.as_secs())]
    VcpuTimeout {
        /// How many.
        missing: usize,
    },
    /// KVM refused a state ioctl.
    #[error(transparent)]
    Kvm(#[from] KvmStateError),
    /// A device's state cannot be saved.
    #[error("drive {drive}: {source}")]
    Device {
        /// The drive.
        drive: String,
        /// Why.
        source: devices::virtio::pci::state::VirtioPciStateError,
    },
    /// Reading a drive's size, or writing the memory file, failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing the state file failed.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// A path names a file the VM uses, the other path, or something not a regular file; or
    /// putting the files in place failed.
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// What a snapshot reads from the running VM.
#[derive(Debug)]
pub struct LiveVm<'a> {
    /// The KVM VM.
    pub vm: &'a VmFd,
    /// Guest memory.
    pub mem: &'a GuestMemoryMmap,
    /// The devices.
    pub devices: &'a Devices,
    /// The vCPUs' pause (they run the state job parked).
    pub pause: &'a PauseState,
    /// How many vCPUs there are.
    pub vcpu_count: u8,
    /// The MSRs to save (`kvm_state::saveable_msrs`, found at start-up).
    pub msrs: &'a [u32],
    /// The configuration in force.
    pub config: &'a VmConfig,
    /// Where the files may be created: `Some` with the sandbox on, `None` (any path) with it
    /// off.
    pub folders: Option<&'a SnapshotFolders>,
}

/// How long each step took (logged; the timing benchmark reads it).
#[derive(Debug, Default, Clone, Copy)]
pub struct CreateTimes {
    /// Waiting for the iothreads.
    pub drain: Duration,
    /// vCPU, VM and device state.
    pub state: Duration,
    /// Writing guest memory.
    pub memory: Duration,
    /// The whole snapshot.
    pub total: Duration,
}

/// Takes the snapshot: the state file at `snapshot_path`, guest memory at `mem_file_path`.
pub fn create(
    live: &LiveVm<'_>,
    snapshot_type: &str,
    snapshot_path: &Path,
    mem_file_path: &Path,
) -> Result<CreateTimes, SnapshotCreateError> {
    let started = Instant::now();
    if !live.pause.is_paused() {
        return Err(SnapshotCreateError::NotPaused);
    }
    if snapshot_type != "Full" {
        return Err(SnapshotCreateError::Type(snapshot_type.into()));
    }
    let (snapshot_path, mem_file_path) = match live.folders {
        Some(folders) => (folders.check(snapshot_path)?, folders.check(mem_file_path)?),
        None => (snapshot_path.to_path_buf(), mem_file_path.to_path_buf()),
    };
    let targets = Targets::check(
        &snapshot_path,
        &mem_file_path,
        &protected_files(live.config),
    )?;
    drain(live.devices)?;
    let _held = HeldDevices::hold(live.devices)?;
    let mut times = CreateTimes {
        drain: started.elapsed(),
        ..Default::default()
    };
    let vcpus = vcpu_states(live)?;
    let vm = VmState::save(live.vm)?;
    // The drives' functions, then the network interfaces'.
    let functions = live
        .devices
        .drives
        .iter()
        .map(|d| (&d.id, &d.transport))
        .chain(live.devices.nics.iter().map(|n| (&n.id, &n.transport)));
    let mut transports = Vec::with_capacity(live.devices.drives.len() + live.devices.nics.len());
    for (id, transport) in functions {
        let t = transport.lock().unwrap_or_else(|p| p.into_inner());
        transports.push(
            t.save_state()
                .map_err(|source| SnapshotCreateError::Device {
                    drive: id.clone(),
                    source,
                })?,
        );
    }
    let vsock = match &live.devices.vsock {
        Some(v) => Some(VsockState {
            guest_cid: v.guest_cid,
            transport: v
                .transport
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .save_state()
                .map_err(SnapshotCreateError::VsockDevice)?,
        }),
        None => None,
    };
    let legacy = LegacyState::save(&live.devices.pci_config, &live.devices.serial);
    let mut drives = Vec::with_capacity(live.config.drives.len());
    for d in &live.config.drives {
        let size_bytes = file_size(&d.path_on_host).map_err(|source| SnapshotCreateError::Io {
            path: d.path_on_host.clone(),
            source,
        })?;
        drives.push(DriveState {
            drive_id: d.drive_id.clone(),
            path: d.path_on_host.clone(),
            size_bytes,
        });
    }
    let mut rate_limits: Vec<LimiterLevels> = live
        .devices
        .drives
        .iter()
        .map(|d| LimiterLevels::of(LimiterOwner::Drive(d.id.clone()), &d.rate_limits.drive))
        .collect();
    rate_limits.extend(
        live.devices
            .rate_limit_groups
            .iter()
            .map(|(id, g)| LimiterLevels::of(LimiterOwner::Group(id.clone()), g)),
    );
    times.state = started.elapsed() - times.drain;
    let memory_started = Instant::now();
    let mem_id = mem_file::new_id();
    let mut state = SnapshotState {
        osprey_version: OSPREY_VERSION.into(),
        // VmConfig serialises to JSON (its own serde shape); this cannot fail.
        config_json: serde_json::to_string(live.config).unwrap_or_default(),
        mem_size_bytes: 0,
        mem_id,
        vcpus,
        vm,
        drives,
        transports,
        legacy,
        rate_limits,
        vsock,
        nics: live
            .devices
            .nics
            .iter()
            .map(|n| NicState {
                iface_id: n.id.clone(),
                enabled_pairs: n.pairs.enabled(),
            })
            .collect(),
    };
    targets.recover()?;
    let written = write_files(
        live.mem,
        &targets,
        &mut state,
        [&snapshot_path, &mem_file_path],
    );
    if let Err(e) = written {
        targets.abandon();
        return Err(e);
    }
    times.memory = memory_started.elapsed();
    targets.commit()?;
    times.total = started.elapsed();
    log::info!(
        "Snapshot {} (memory {}) in {:.1} ms: drain {:.1} ms, state {:.1} ms, memory {:.1} ms",
        snapshot_path.display(),
        mem_file_path.display(),
        times.total.as_secs_f64() * 1e3,
        times.drain.as_secs_f64() * 1e3,
        times.state.as_secs_f64() * 1e3,
        times.memory.as_secs_f64() * 1e3,
    );
    Ok(times)
}

/// The devices held still for the snapshot (the vsock device and every network interface,
/// [`devices::virtio::hold`]): host data delivered after a device's used indices were read would
/// leave the saved rings behind the saved memory. Released when dropped, whatever the create's
/// outcome.
struct HeldDevices<'a> {
    vsock: Option<&'a crate::vsock_device::VsockHandle>,
    nics: &'a [NicHandle],
}

impl<'a> HeldDevices<'a> {
    fn hold(devices: &'a Devices) -> Result<Self, SnapshotCreateError> {
        // Dropped (released, all of them) on failure too: a hold may be set before its barrier
        // failed.
        let held = HeldDevices {
            vsock: devices.vsock.as_ref(),
            nics: &devices.nics,
        };
        if let Some(v) = held.vsock {
            v.hold().map_err(SnapshotCreateError::VsockHold)?;
        }
        for n in held.nics {
            n.hold().map_err(|source| SnapshotCreateError::NicHold {
                iface: n.id.clone(),
                source,
            })?;
        }
        Ok(held)
    }
}

impl Drop for HeldDevices<'_> {
    fn drop(&mut self) {
        if let Some(v) = self.vsock {
            v.release();
        }
        for n in self.nics {
            n.release();
        }
    }
}

/// A drive not settled after this long has its queues nudged (`VirtioPciDevice::nudge_queues`),
/// then again every second.
const NUDGE_AFTER: Duration = Duration::from_millis(100);

/// Waits until every drive's rings are settled (each available request used); also before a
/// restored VM's memory moves off its file (`mem_lease.rs`).
pub(crate) fn drain(devices: &Devices) -> Result<(), SnapshotCreateError> {
    let started = Instant::now();
    let deadline = started + DRAIN_LIMIT;
    for d in &devices.drives {
        let mut next_nudge = Instant::now() + NUDGE_AFTER;
        loop {
            let transport = d.transport.lock().unwrap_or_else(|p| p.into_inner());
            let behind =
                transport
                    .unsettled_queues()
                    .map_err(|source| SnapshotCreateError::Device {
                        drive: d.id.clone(),
                        source,
                    })?;
            if behind.is_empty() {
                break;
            }
            if Instant::now() >= next_nudge {
                // Requests in flight take microseconds to milliseconds; a ring still behind
                // after this long may hold a request its handler never saw (the paused driver
                // cannot notify again): signal the queues as a notify would.
                log::warn!(
                    "drain: drive {}: queues (index, avail, used) {:?} not settled after {:.0} ms; \
                     nudging them",
                    d.id,
                    behind,
                    started.elapsed().as_secs_f64() * 1e3
                );
                transport.nudge_queues();
                next_nudge = Instant::now() + Duration::from_secs(1);
            }
            drop(transport);
            if Instant::now() >= deadline {
                return Err(SnapshotCreateError::Drain {
                    drive: d.id.clone(),
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}

/// Each vCPU's state, read by its own (parked) thread, in index order.
fn vcpu_states(live: &LiveVm<'_>) -> Result<Vec<VcpuState>, SnapshotCreateError> {
    let has_xsave = xsave_support(live.vm)?;
    let (tx, rx) = mpsc::channel();
    let msrs = live.msrs.to_vec();
    let tx = std::sync::Mutex::new(tx);
    live.pause.run_on_parked(std::sync::Arc::new(
        move |id, fd: &mut kvm_ioctls::VcpuFd| {
            let state =
                complete_pending_exit(fd).and_then(|()| VcpuState::save(id, fd, &msrs, has_xsave));
            let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(state);
        },
    ));
    let deadline = Instant::now() + VCPU_LIMIT;
    let mut states = Vec::with_capacity(live.vcpu_count.into());
    while states.len() < usize::from(live.vcpu_count) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(state) => states.push(state?),
            Err(_) => {
                return Err(SnapshotCreateError::VcpuTimeout {
                    missing: usize::from(live.vcpu_count) - states.len(),
                })
            }
        }
    }
    states.sort_by_key(|s| s.id);
    Ok(states)
}

/// Lets KVM finish the instruction of the vCPU's last exit (an MMIO or port read completes
/// only when `KVM_RUN` is entered again) without running the guest: `KVM_RUN` with
/// `immediate_exit` set, as KVM's documentation asks before the state is read.
fn complete_pending_exit(fd: &mut kvm_ioctls::VcpuFd) -> Result<(), KvmStateError> {
    fd.set_kvm_immediate_exit(1);
    let outcome = fd.run().map(|_| ());
    fd.set_kvm_immediate_exit(0);
    match outcome {
        Err(e) if e.errno() == libc::EINTR => Ok(()),
        Ok(()) => Ok(()),
        Err(source) => Err(KvmStateError::Ioctl {
            what: "KVM_RUN (immediate exit, to complete the last exit)",
            source,
        }),
    }
}

/// Writes both files to their temporaries: guest memory and its trailer, then the state file
/// (with the memory's size), each synced and staged (`commit.rs`).
fn write_files(
    mem: &GuestMemoryMmap,
    targets: &Targets,
    state: &mut SnapshotState,
    [state_path, mem_path]: [&Path; 2],
) -> Result<(), SnapshotCreateError> {
    let io = |source| SnapshotCreateError::Io {
        path: mem_path.to_path_buf(),
        source,
    };
    let mut f = targets.create(Which::Memory)?;
    state.mem_size_bytes = write_memory(mem, &mut f).map_err(io)?;
    f.write_all(&mem_file::encode(state.mem_size_bytes, &state.mem_id))
        .map_err(io)?;
    targets.stage(Which::Memory, f)?;
    let bytes = file::encode(state)?;
    let mut f = targets.create(Which::State)?;
    f.write_all(&bytes).map_err(|source| StateFileError::Io {
        path: state_path.to_path_buf(),
        source,
    })?;
    targets.stage(Which::State, f)?;
    Ok(())
}

/// Writes every RAM region, in guest-physical order, back to back; returns the bytes written.
fn write_memory(mem: &GuestMemoryMmap, f: &mut std::fs::File) -> std::io::Result<u64> {
    use vm_memory::WriteVolatile;
    let mut total = 0u64;
    for region in mem.iter() {
        // The whole region (its mapping is `len` bytes).
        let slice = region.as_volatile_slice().map_err(std::io::Error::other)?;
        f.write_all_volatile(&slice)
            .map_err(std::io::Error::other)?;
        total += region.len();
    }
    Ok(total)
}

/// The files the VM uses, which no snapshot file may replace: each drive's, the kernel and
/// initrd, the metrics file, the API socket (by path, through symlinks), the log file, and
/// standard input, output and error when they are files.
pub fn protected_files(config: &VmConfig) -> Vec<Protected> {
    let mut named: Vec<(String, &Path)> = config
        .drives
        .iter()
        .map(|d| {
            (
                format!("drive {}'s file", d.drive_id),
                d.path_on_host.as_path(),
            )
        })
        .collect();
    named.push(("the kernel".into(), &config.boot.kernel_image_path));
    if let Some(initrd) = &config.boot.initrd_path {
        named.push(("the initrd".into(), initrd));
    }
    if let Some(m) = &config.metrics {
        named.push(("the metrics file".into(), &m.path));
    }
    if let Some(api) = &config.api {
        named.push(("the API socket".into(), &api.socket));
    }
    let mut files: Vec<Protected> = named
        .into_iter()
        .filter_map(|(what, path)| Protected::of_path(what, path))
        .collect();
    if let Some(m) = crate::logger::file_metadata() {
        files.push(Protected {
            what: "the log file".into(),
            id: (m.dev(), m.ino()),
        });
    }
    files.extend(Protected::of_fd("standard input", std::io::stdin().as_fd()));
    files.extend(Protected::of_fd(
        "standard output",
        std::io::stdout().as_fd(),
    ));
    files.extend(Protected::of_fd(
        "standard error",
        std::io::stderr().as_fd(),
    ));
    files
}
