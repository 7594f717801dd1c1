//! An iothread's pool of spare Linux AIO contexts ([`AioContextPool`]), passed explicitly to
//! whatever opens engines on the thread (`engine::open`, through `ThreadTurn::aio_pool`).
//!
//! A device reset drops each queue's engine on the iothread and the guest's re-initialisation
//! opens them again there. A drained context kept in the pool costs neither `io_setup` nor
//! `io_destroy`, which waits for an RCU grace period with the thread and every queue it serves
//! (docs/performance.md); and a guest that resets its device again and again holds no more
//! contexts than it had. When the process is about to exit, the pool leaves the contexts it gets
//! back (and those it keeps) to the exit, which frees them without waiting.
//!
//! The pool also keeps the one host fact `Auto` asks for every queue it opens, whether io_uring
//! is there ([`AioContextPool::io_uring_available`]): probed once per iothread, not per queue,
//! and with no process-wide state.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::abi::AioContext;

/// Drained contexts one pool keeps at most.
const SPARES_PER_POOL: usize = 16;

/// The spare AIO contexts of one iothread. Clones share the pool: an engine keeps one, to give
/// its context back when it is dropped. Dropped with the last clone (the iothread's loop, at
/// the thread's end): its spares are destroyed then, on that thread. A new pool allocates
/// nothing until it is used (a `ThreadTurn::default()` on a request path stays free).
#[derive(Debug, Default)]
pub struct AioContextPool {
    inner: OnceLock<Arc<Inner>>,
}

impl Clone for AioContextPool {
    fn clone(&self) -> Self {
        Self {
            inner: OnceLock::from(self.inner().clone()),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Drained contexts, for the next engine that wants one of their size.
    spares: Mutex<Vec<AioContext>>,
    /// Contexts given back from now on are left to the process exit.
    left_to_exit: ExitSwitch,
    /// Whether the host offers io_uring, once probed.
    io_uring: OnceLock<bool>,
}

/// Turns a pool's contexts over to the process exit ([`ExitSwitch::leave_to_process_exit`]),
/// without holding the pool (its spares must be destroyed on its own thread).
#[derive(Debug, Clone, Default)]
pub struct ExitSwitch(Arc<AtomicBool>);

impl ExitSwitch {
    /// The process is about to exit: contexts dropped from now on (the engines of a VM shutting
    /// down) are not destroyed one by one, each `io_destroy` waiting for an RCU grace period per
    /// queue, but left to the exit. Engines still wait for their requests in the kernel when
    /// dropped. Not for a device reset: its engines' contexts must go, or a guest resetting its
    /// device again and again would use up the host's AIO events.
    pub fn leave_to_process_exit(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl AioContextPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty pool whose contexts are left to the process exit from the start: for a probe
    /// outside any iothread (the context it creates lives until the process ends, as the
    /// first probe's always did, and its `io_destroy` costs no thread a grace period).
    pub fn left_to_process_exit() -> Self {
        let pool = Self::default();
        pool.inner().left_to_exit.leave_to_process_exit();
        pool
    }

    /// Whether the host offers io_uring: `probe`'s answer the first time this pool (its
    /// iothread) is asked, the same answer after that.
    pub(crate) fn io_uring_available(&self, probe: impl FnOnce() -> bool) -> bool {
        *self.inner().io_uring.get_or_init(probe)
    }

    /// The switch that leaves this pool's contexts to the process exit.
    pub fn exit_switch(&self) -> ExitSwitch {
        self.inner().left_to_exit.clone()
    }

    fn inner(&self) -> &Arc<Inner> {
        self.inner.get_or_init(Arc::default)
    }

    /// A context of `nr_events`: a spare of that size, else a new one (`io_setup`).
    pub(super) fn context(&self, nr_events: u32) -> io::Result<AioContext> {
        let kept = {
            let mut spares = self.lock();
            spares
                .iter()
                .position(|c| c.nr_events() == nr_events)
                .map(|at| spares.swap_remove(at))
        };
        match kept {
            Some(ctx) => Ok(ctx),
            None => AioContext::setup(nr_events),
        }
    }

    /// Takes back a context its engine is done with: kept if it is drained and the pool has
    /// room, left to the exit if the process is ending, else destroyed here.
    pub(super) fn give_back(&self, mut ctx: AioContext) {
        if self.inner().left_to_exit.on() {
            ctx.leave_to_exit();
            return;
        }
        if ctx.take_drained() {
            let mut spares = self.lock();
            if spares.len() < SPARES_PER_POOL {
                spares.push(ctx);
                return;
            }
        }
        // io_destroy, which waits for requests still in the kernel.
        drop(ctx);
    }

    /// Whether the pool holds a spare (a probe that finds one need not create a context).
    pub(super) fn has_spare(&self) -> bool {
        !self.lock().is_empty()
    }

    /// How many contexts the pool keeps now (tests).
    #[cfg(test)]
    pub(super) fn spares(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AioContext>> {
        self.inner()
            .spares
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.left_to_exit.on() {
            let spares = std::mem::take(self.spares.get_mut().unwrap_or_else(|p| p.into_inner()));
            for ctx in spares {
                ctx.leave_to_exit();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::AioContextPool;

    #[test]
    fn io_uring_is_probed_once_per_pool_and_shared_by_its_clones() {
        let probes = Cell::new(0);
        let probe = |answer| {
            probes.set(probes.get() + 1);
            answer
        };
        let pool = AioContextPool::new();
        assert!(pool.io_uring_available(|| probe(true)));
        // The first answer stands: no second probe, whatever it would say.
        assert!(pool.io_uring_available(|| probe(false)));
        assert!(pool.clone().io_uring_available(|| probe(false)));
        assert_eq!(probes.get(), 1);
        // Another thread's pool asks the host itself.
        assert!(!AioContextPool::new().io_uring_available(|| probe(false)));
        assert_eq!(probes.get(), 2);
    }
}
