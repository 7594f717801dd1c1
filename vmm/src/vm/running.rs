//! A running VM: the control thread's loop that waits for the reason to stop (a device, a vCPU,
//! the API or a signal), carries out API commands meanwhile and writes the periodic metrics
//! file; then the stop itself (vCPUs kicked out of `KVM_RUN`, iothreads shut down).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::VmFd;
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

use super::error::VmError;
use crate::api::command::{ApiCommand, ApiError, ApiReply, SnapshotCreateRequest};
use crate::api::replies::Reply;
use crate::config::VmConfig;
use crate::control_loop::ControlLoop;
use crate::controller::{Controller, Effect};
use crate::device_manager::Devices;
use crate::events::{ControlEvent, ControlSender, PauseState};
use crate::sandbox::Sandbox;
use crate::snapshot::create::LiveVm;
use crate::snapshot_folder::SnapshotFolders;
use crate::stop::StopReason;

/// Set by the SIGINT/SIGTERM handler; read by the control loop.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(num: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STOP_SIGNAL.store(num, Ordering::SeqCst);
    crate::control_loop::wake_from_signal();
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// The stop signal received (SIGINT or SIGTERM), or 0.
pub fn stop_signal() -> i32 {
    STOP_SIGNAL.load(Ordering::SeqCst)
}

/// The vCPU kick (a real-time signal that only interrupts `KVM_RUN`) and the stop signals.
pub fn register_signal_handlers() -> Result<(), VmError> {
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
    Ok(())
}

/// A VM whose vCPUs are running.
pub struct RunningVm {
    pub(super) vcpus: Vec<JoinHandle<()>>,
    pub(super) stop: Arc<AtomicBool>,
    /// The control thread's event loop (event-manager).
    pub(super) control: ControlLoop,
    /// Keeps the channel open for the API server's submissions.
    pub(super) events_tx: ControlSender,
    /// The REST API server, if configured (stopped, and its socket removed, when dropped).
    pub(super) api: Option<Arc<crate::api::server::ApiServer>>,
    /// The metrics file, opened before the sandbox closed the file system.
    pub(super) metrics: Option<MetricsFile>,
    /// Kept so that the sandbox (its ruleset fd) is released by the control thread, whose
    /// filter allows what closing it takes, not by whichever thread ran its hook last.
    pub(super) _sandbox: Arc<Sandbox>,
    pub(super) pause: Arc<PauseState>,
    pub(super) config: VmConfig,
    pub(super) started: Instant,
    pub(super) devices: Devices,
    /// The process exits once `wait` returns ([`run`]): the engines' Linux AIO contexts are left
    /// to the exit instead of one `io_destroy` each (32 ms per queue on the dev machine).
    pub(super) process_exits_after: bool,
    /// A VM restored with `resume_vm` on a serving API: its vCPUs are parked until the answer
    /// to `PUT /snapshot/load` has been handed to the API ([`RunningVm::resume_after_answer`]).
    pub(super) resume_on_answer: bool,
    /// The MSRs a snapshot saves (found at start-up, before the sandbox).
    pub(super) snapshot_msrs: Vec<u32>,
    /// Where a snapshot may create its files: `Some` with the sandbox on (resolved at start-up,
    /// before it), `None` with it off (anywhere).
    pub(super) snapshot_folders: Option<SnapshotFolders>,
    /// A restored VM's lease on its memory file (`snapshot::mem_lease`).
    pub(super) mem_lease: Option<crate::snapshot::mem_lease::MemLease>,
    // Kept alive for the VM's lifetime; a snapshot reads them.
    pub(super) vm: Arc<VmFd>,
    pub(super) mem: GuestMemoryMmap,
}

impl std::fmt::Debug for RunningVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningVm")
            .field("vcpus", &self.vcpus.len())
            .finish()
    }
}

impl RunningVm {
    /// The process exits once [`RunningVm::wait`] returns: the engines' Linux AIO contexts are
    /// left to the exit.
    pub fn set_process_exits_after(&mut self) {
        self.process_exits_after = true;
    }

    /// Runs the vCPUs of a VM restored with `resume_vm` on a serving API, once the answer to
    /// `PUT /snapshot/load` has been handed to the API: before, two vCPUs spinning on a 2-core
    /// host delayed that answer by 3-10 ms (issue 53). A no-op for any other VM.
    pub fn resume_after_answer(&mut self) {
        if std::mem::take(&mut self.resume_on_answer) {
            self.pause.set(false);
        }
    }

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
            if self.mem_lease.as_ref().is_some_and(|l| l.is_breaking()) {
                self.move_memory_off_file();
            }
            while let Some(event) = self.control.next_event() {
                match event {
                    ControlEvent::Stop(reason) => break 'run reason,
                    ControlEvent::Api(req) => {
                        if let ApiCommand::SnapshotCreate(body) = &req.command {
                            let reply = self.create_snapshot(body);
                            let _ = req.reply.send(reply);
                            continue;
                        }
                        let (reply, effect) = self.controller().execute(req.command);
                        if effect == Effect::Pause {
                            self.pause_vcpus();
                        }
                        if effect == Effect::FlushMetrics {
                            if let Some(m) = metrics.as_mut() {
                                let line = self.controller().metrics();
                                m.write(&line);
                            }
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
        // The vsock socket goes with the VM (the process may exit without dropping devices).
        if let Some(v) = &self.devices.vsock {
            let _ = std::fs::remove_file(&v.uds_path);
        }
        self.stop_vcpus();
        if self.process_exits_after {
            for t in self.devices.iothreads.values() {
                t.leave_aio_contexts_to_process_exit();
            }
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

    /// `PUT /snapshot/create` (`snapshot::create`): 204, or 400 with the reason.
    fn create_snapshot(&self, body: &SnapshotCreateRequest) -> ApiReply {
        let live = LiveVm {
            vm: &self.vm,
            mem: &self.mem,
            devices: &self.devices,
            pause: &self.pause,
            vcpu_count: self.config.machine.vcpu_count,
            msrs: &self.snapshot_msrs,
            config: &self.config,
            folders: self.snapshot_folders.as_ref(),
        };
        crate::snapshot::create::create(
            &live,
            &body.snapshot_type,
            &body.snapshot_path,
            &body.mem_file_path,
        )
        .map(|_| Reply::Done)
        .map_err(|e| ApiError::BadRequest(format!("PUT /snapshot/create: {e}")))
    }

    /// Another process opens the restored VM's memory file to write or truncate it
    /// (`snapshot::mem_lease`): guest memory moves into this process first, the guest paused
    /// and the iothreads drained meanwhile, then resumes as it was.
    fn move_memory_off_file(&mut self) {
        let started = Instant::now();
        let was_paused = self.pause.is_paused();
        if !was_paused {
            self.pause_vcpus();
        }
        if let Err(e) = crate::snapshot::create::drain(&self.devices) {
            log::warn!("memory file: {e}; moving guest memory anyway");
        }
        let Some(lease) = self.mem_lease.as_mut() else {
            return;
        };
        match lease.move_off_file() {
            Ok(bytes) => log::warn!(
                "memory file: another process opened it to write or truncate it; the VM's {} \
                 MiB moved into this process first ({:.1} ms, the guest paused), lease released",
                bytes >> 20,
                started.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => log::error!(
                "memory file: another process opened it to write or truncate it, and moving \
                 guest memory off it failed ({e}): the guest may lose memory"
            ),
        }
        if !was_paused {
            self.pause.set(false);
            log::info!("VM resumed");
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

/// Periodic metrics: one JSON line per interval (the control loop's timer) appended to a file:
/// Osprey's metrics under their keys, and Firecracker's groups beside them for the tools that
/// decode Firecracker's lines (`metrics::firecracker`).
pub(super) struct MetricsFile {
    file: crate::line_sink::LineSink,
    firecracker: crate::metrics::firecracker::FirecrackerGroups,
}

impl MetricsFile {
    /// Opens (creates) the file for appending; a FIFO without a reader does not block.
    pub(super) fn open(cfg: &crate::config::MetricsConfig) -> Option<MetricsFile> {
        match crate::logger::open_nonblocking(&cfg.path) {
            Ok(file) => Some(MetricsFile {
                file: crate::line_sink::LineSink::new(file),
                firecracker: Default::default(),
            }),
            Err(e) => {
                log::error!(
                    "metrics.metrics_path: {}: {e}; no metrics file",
                    cfg.path.display()
                );
                None
            }
        }
    }

    fn write(&mut self, report: &crate::api::replies::MetricsReport) {
        let metrics = crate::metrics::report::json_of(report);
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut line = serde_json::json!({"utc_timestamp_ms": ts});
        let firecracker = self
            .firecracker
            .next(&metrics, &crate::metrics::firecracker::VCPU_EXITS);
        if let (Some(l), Some(m)) = (line.as_object_mut(), metrics.as_object()) {
            l.extend(m.clone());
            l.extend(firecracker);
        }
        // One write per line (the file is unbuffered: `writeln!` of a JSON value would make a
        // syscall per token). A file opened non-blocking (a FIFO nobody reads) that cannot take
        // the line drops it, counted (Firecracker's `logger.missed_metrics_count`), and the
        // first drop is logged; a line longer than a pipe takes at once is finished before the
        // next (`line_sink`), so a reader never sees two lines glued together.
        let text = format!("{line}\n");
        if let Err(e) = self.file.write_line(text.as_bytes()) {
            let missed = &crate::metrics::firecracker::MISSED_METRICS_LINES;
            if missed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                log::warn!(
                    "metrics line dropped ({e}); later drops are counted in \
                     logger.missed_metrics_count"
                );
            }
        }
    }
}
