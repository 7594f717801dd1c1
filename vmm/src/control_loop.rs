//! The control thread's event loop, on rust-vmm's event-manager: one subscriber watches the fds
//! that mean "the control thread has something to do" — the eventfd rung with every
//! [`ControlEvent`] sent (VM stop requests from devices and vCPUs, API commands), the eventfd the
//! SIGINT/SIGTERM handler rings, and the metrics timer — and the loop sleeps in `epoll_wait`
//! until one fires, instead of waking every 50 ms to look. The iothreads keep their own loop:
//! event-manager has no place for a polling phase between two waits (docs/ARCHITECTURE.md).
//!
//! The epoll set and every fd are created before the control thread enters its sandbox; the
//! loop itself only waits and reads.

use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use event_manager::{
    EventManager, EventOps, Events, MutEventSubscriber, SubscriberId, SubscriberOps,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

use crate::events::{ControlEvent, ControlSender};

/// The eventfd the stop-signal handler rings (-1 before the first loop exists).
static SIGNAL_WAKE: AtomicI32 = AtomicI32::new(-1);
/// That eventfd, created with the first loop and open for the process's life: each loop
/// watches a duplicate of it, which closes with the loop. (A loop is built again after a failed
/// `InstanceStart` or `PUT /snapshot/load`; one fd per loop would leak, and closing the one the
/// handler rings would race with it.)
static SIGNAL_EVENT: OnceLock<EventFd> = OnceLock::new();

/// A duplicate of the process's signal eventfd (created on the first call).
fn signal_eventfd() -> std::io::Result<EventFd> {
    let event = match SIGNAL_EVENT.get() {
        Some(e) => e,
        None => {
            let fresh = EventFd::new(libc::EFD_NONBLOCK)?;
            let e = SIGNAL_EVENT.get_or_init(|| fresh);
            SIGNAL_WAKE.store(e.as_raw_fd(), Ordering::SeqCst);
            e
        }
    };
    event.try_clone()
}

/// Rings the loop from a signal handler: only `write(2)`, which is async-signal-safe.
pub fn wake_from_signal() {
    let fd = SIGNAL_WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local to an eventfd this module owns (kept open
        // for the process's life once created); a failed write only loses a wake-up that the
        // counter already holds.
        unsafe { libc::write(fd, std::ptr::addr_of!(one).cast(), 8) };
    }
}

/// What woke the loop.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Woken {
    /// Control events may be waiting on the channel.
    pub events: bool,
    /// A stop signal arrived.
    pub signal: bool,
    /// The metrics interval elapsed.
    pub metrics: bool,
}

/// The fds the control thread waits on.
struct ControlFds {
    events: Arc<EventFd>,
    signal: EventFd,
    metrics: Option<TimerFd>,
    woken: Woken,
}

impl MutEventSubscriber for ControlFds {
    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        let fd = events.fd();
        if fd == self.events.as_raw_fd() {
            let _ = self.events.read();
            self.woken.events = true;
        } else if fd == self.signal.as_raw_fd() {
            let _ = self.signal.read();
            self.woken.signal = true;
        } else if let Some(t) = self.metrics.as_mut().filter(|t| t.as_raw_fd() == fd) {
            let _ = t.wait();
            self.woken.metrics = true;
        }
    }

    fn init(&mut self, ops: &mut EventOps) {
        let mut fds: Vec<RawFd> = vec![self.events.as_raw_fd(), self.signal.as_raw_fd()];
        fds.extend(self.metrics.as_ref().map(AsRawFd::as_raw_fd));
        for fd in fds {
            if let Err(e) = ops.add(Events::new_raw(fd, EventSet::IN)) {
                log::error!("control loop: cannot watch fd {fd}: {e}");
            }
        }
    }
}

/// The control thread's loop: waits for events and hands back what woke it.
pub struct ControlLoop {
    manager: EventManager<ControlFds>,
    id: SubscriberId,
    events: Receiver<ControlEvent>,
}

impl std::fmt::Debug for ControlLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlLoop")
    }
}

/// Errors setting the loop up.
#[derive(Debug, thiserror::Error)]
pub enum ControlLoopError {
    /// An eventfd or the timer could not be created or armed.
    #[error("control loop: {what}: {source}")]
    Os {
        /// The step.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// event-manager refused.
    #[error("control loop: event manager: {0:?}")]
    Manager(event_manager::Error),
}

impl ControlLoop {
    /// The loop and its sender; with `metrics_every`, a timer fires at that interval.
    pub fn new(
        metrics_every: Option<Duration>,
    ) -> Result<(ControlLoop, ControlSender), ControlLoopError> {
        let os = |what| move |source| ControlLoopError::Os { what, source };
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK).map_err(os("event eventfd"))?);
        // The handler may ring it from now on.
        let signal = signal_eventfd().map_err(os("signal eventfd"))?;
        let metrics = match metrics_every {
            Some(every) => {
                let timer = |what| {
                    move |e: vmm_sys_util::errno::Error| ControlLoopError::Os {
                        what,
                        source: std::io::Error::from_raw_os_error(e.errno()),
                    }
                };
                let mut t = TimerFd::new().map_err(timer("metrics timer"))?;
                t.reset(every, Some(every))
                    .map_err(timer("arming the metrics timer"))?;
                Some(t)
            }
            None => None,
        };
        let (tx, events) = mpsc::channel();
        let mut manager = EventManager::new().map_err(ControlLoopError::Manager)?;
        let id = manager.add_subscriber(ControlFds {
            events: wake.clone(),
            signal,
            metrics,
            woken: Woken::default(),
        });
        Ok((
            ControlLoop {
                manager,
                id,
                events,
            },
            ControlSender::new(tx, wake),
        ))
    }

    /// Sleeps until something happens; returns what did (nothing after a signal interrupted
    /// the wait).
    pub fn wait(&mut self) -> Woken {
        if let Err(e) = self.manager.run() {
            log::warn!("control loop: {e}");
        }
        match self.manager.subscriber_mut(self.id) {
            Ok(fds) => std::mem::take(&mut fds.woken),
            Err(_) => Woken::default(),
        }
    }

    /// The next control event, if any.
    pub fn next_event(&mut self) -> Option<ControlEvent> {
        self.events.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::StopReason;

    #[test]
    fn events_signals_and_the_timer_each_wake_the_loop() {
        let (mut lp, tx) = ControlLoop::new(Some(Duration::from_millis(30))).expect("loop");
        tx.send(ControlEvent::Stop(StopReason::ApiShutdown));
        let woken = lp.wait();
        assert!(woken.events, "{woken:?}");
        assert!(matches!(
            lp.next_event(),
            Some(ControlEvent::Stop(StopReason::ApiShutdown))
        ));
        assert!(lp.next_event().is_none());
        wake_from_signal();
        assert!(lp.wait().signal);
        // Nothing else pending: the next wake-up is the timer's.
        let t0 = std::time::Instant::now();
        let woken = lp.wait();
        assert!(woken.metrics && !woken.events && !woken.signal, "{woken:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
