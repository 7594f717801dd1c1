//! What the threads of a VM tell the control thread, and how: the [`ControlEvent`]s (a reason
//! to stop, an API request), the [`ControlSender`] that sends one and rings the control loop's
//! eventfd, and the [`PauseState`] the control thread and the vCPU threads share. The vCPUs, the
//! control loop and the controller all use it; it uses only the stop reasons and the API's
//! command types.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Pausing the vCPUs: the control thread sets `paused` and kicks the vCPU threads out of
/// `KVM_RUN`; each parks on the condvar until resumed or stopped.
#[derive(Debug, Default)]
pub struct PauseState {
    paused: Mutex<bool>,
    wake: Condvar,
    parked: AtomicUsize,
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

    /// Parks the calling vCPU thread while a pause is requested and `stop` is not set.
    pub fn park_while_paused(&self, stop: &AtomicBool) {
        let mut paused = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        if !*paused {
            return;
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
        while *paused && !stop.load(Ordering::Acquire) {
            paused = self.wake.wait(paused).unwrap_or_else(|p| p.into_inner());
        }
        self.parked.fetch_sub(1, Ordering::AcqRel);
    }
}
