//! What the threads of a VM tell the control thread, and how: the [`ControlEvent`]s (a reason
//! to stop, an API request), the [`ControlSender`] that sends one and rings the control loop's
//! eventfd, and the [`PauseState`] the control thread and the vCPU threads share. The vCPUs, the
//! control loop and the controller all use it; it uses only the stop reasons and the API's
//! command types.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};

use vmm_sys_util::eventfd::EventFd;

use crate::api::command::ApiRequest;
use crate::stop::StopReason;

/// What wakes the control loop.
#[derive(Debug)]
pub enum ControlEvent {
    /// The VM must stop.
    Stop(StopReason),
    /// An API request to carry out.
    Api(ApiRequest),
}

/// The sending side of the control loop: sends, then rings the loop.
#[derive(Debug, Clone)]
pub struct ControlSender {
    tx: Sender<ControlEvent>,
    wake: Arc<EventFd>,
}

impl ControlSender {
    /// A sender on `tx` that rings `wake` after each event (the control loop watches it).
    pub fn new(tx: Sender<ControlEvent>, wake: Arc<EventFd>) -> Self {
        Self { tx, wake }
    }

    /// Hands `event` to the control loop (dropped if the loop is gone).
    pub fn send(&self, event: ControlEvent) {
        if self.tx.send(event).is_ok() {
            let _ = self.wake.write(1);
        }
    }
}

/// Work the control thread hands to every parked vCPU thread, which runs it with its vCPU's
/// index and fd (a snapshot reads each vCPU's state on the thread that owns the fd).
pub type ParkedJob = Arc<dyn Fn(u8, &mut kvm_ioctls::VcpuFd) + Send + Sync>;

/// Pausing the vCPUs: the control thread sets `paused` and kicks the vCPU threads out of
/// `KVM_RUN`; each parks on the condvar until resumed or stopped, running the
/// [`ParkedJob`]s posted meanwhile.
#[derive(Default)]
pub struct PauseState {
    paused: Mutex<bool>,
    wake: Condvar,
    parked: AtomicUsize,
    /// The latest job and its number (0: none yet).
    job: Mutex<Option<ParkedJob>>,
    job_number: AtomicU64,
}

impl std::fmt::Debug for PauseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseState")
            .field("paused", &self.is_paused())
            .field("parked", &self.parked())
            .finish()
    }
}

impl PauseState {
    /// Requests a pause (the caller then kicks the vCPUs) or a resume.
    pub fn set(&self, paused: bool) {
        *self.paused.lock().unwrap_or_else(|p| p.into_inner()) = paused;
        if !paused {
            self.wake.notify_all();
        }
    }

    /// Whether a pause is requested.
    pub fn is_paused(&self) -> bool {
        *self.paused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// vCPU threads currently parked.
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::Acquire)
    }

    /// Wakes parked vCPUs so they notice a stop.
    pub fn release_all(&self) {
        self.wake.notify_all();
    }

    /// Posts `job` for every vCPU thread parked now (the caller waited for them to park); each
    /// runs it once. The job reports back on its own (a channel it holds).
    pub fn run_on_parked(&self, job: ParkedJob) {
        // Under the pause lock, so a vCPU between its check and its wait cannot miss it.
        let _paused = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(job);
        self.job_number.fetch_add(1, Ordering::AcqRel);
        self.wake.notify_all();
    }

    /// Parks the calling vCPU thread while a pause is requested and `stop` is not set, running
    /// each job posted while it is parked with `id` and `fd`.
    pub fn park_while_paused(&self, stop: &AtomicBool, id: u8, fd: &mut kvm_ioctls::VcpuFd) {
        let mut paused = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        if !*paused {
            return;
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
        let mut done = self.job_number.load(Ordering::Acquire);
        while *paused && !stop.load(Ordering::Acquire) {
            let posted = self.job_number.load(Ordering::Acquire);
            if posted != done {
                done = posted;
                let job = self.job.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(job) = job {
                    job(id, fd);
                }
                continue;
            }
            paused = self.wake.wait(paused).unwrap_or_else(|p| p.into_inner());
        }
        self.parked.fetch_sub(1, Ordering::AcqRel);
    }
}
