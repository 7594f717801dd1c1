//! What an engine may know of its iothread's current round ([`ThreadTurn`]): how many handlers
//! the thread serves, how many have work this round, and how many requests the thread's `Auto`
//! engines have in flight on their asynchronous engines. The loop owns one and passes it to
//! every handler call that may reach an engine (`Handler::run`, `Handler::drain`), which passes
//! it on to `IoEngine::commit` and `IoEngine::reap`. The `Auto` engine sends an `O_DIRECT`
//! request inline only when it is alone on the whole thread: an inline call waits for the
//! device, and the thread's other queues would wait with it. It also carries the thread's spare
//! Linux AIO contexts ([`ThreadTurn::aio_pool`]), for the engines handlers open on the thread
//! (`Handler::attach`, `FileBacked::replace_file`).

use std::cell::Cell;

use crate::engine::AioContextPool;

/// The iothread's round as its engines see it. [`ThreadTurn::default`] is a thread with no
/// other handler and nothing in flight (an engine driven outside a loop: tests, benches).
#[derive(Debug, Default)]
pub struct ThreadTurn {
    /// Handlers the thread serves.
    handlers: usize,
    /// Handlers taking turns in the current round.
    ready_handlers: usize,
    /// Requests the thread's `Auto` engines have in flight on their asynchronous engines, as
    /// each last reported it ([`ThreadTurn::note_async_in_flight`]).
    async_in_flight: Cell<usize>,
    /// The thread's spare Linux AIO contexts.
    aio_pool: AioContextPool,
}

impl ThreadTurn {
    /// A thread serving `handlers`, `ready_handlers` of which take turns this round, with
    /// nothing in flight.
    pub fn new(handlers: usize, ready_handlers: usize) -> Self {
        Self {
            handlers,
            ready_handlers,
            async_in_flight: Cell::new(0),
            aio_pool: AioContextPool::new(),
        }
    }

    /// The loop: the thread serves `n` handlers now.
    pub(crate) fn set_handlers(&mut self, n: usize) {
        self.handlers = n;
    }

    /// Handlers the thread serves.
    pub fn handlers(&self) -> usize {
        self.handlers
    }

    /// The loop: `n` handlers take turns in this round.
    pub(crate) fn set_ready_handlers(&mut self, n: usize) {
        self.ready_handlers = n;
    }

    /// Handlers taking turns in the current round.
    pub fn ready_handlers(&self) -> usize {
        self.ready_handlers
    }

    /// An `Auto` engine's asynchronous in-flight count went from `before` to `after`.
    pub fn note_async_in_flight(&self, before: usize, after: usize) {
        let c = &self.async_in_flight;
        c.set((c.get() + after).saturating_sub(before));
    }

    /// Requests the thread's `Auto` engines have in flight asynchronously.
    pub fn async_in_flight(&self) -> usize {
        self.async_in_flight.get()
    }

    /// The thread's spare Linux AIO contexts, for the engines opened on it
    /// (`engine::open`).
    pub fn aio_pool(&self) -> &AioContextPool {
        &self.aio_pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_thread_and_never_wrap() {
        let mut turn = ThreadTurn::default();
        turn.note_async_in_flight(0, 3);
        turn.note_async_in_flight(3, 1);
        assert_eq!(turn.async_in_flight(), 1);
        assert_eq!(
            ThreadTurn::default().async_in_flight(),
            0,
            "another thread's"
        );
        turn.note_async_in_flight(5, 0);
        assert_eq!(turn.async_in_flight(), 0, "saturates instead of wrapping");
        turn.set_ready_handlers(4);
        assert_eq!(turn.ready_handlers(), 4);
        turn.set_handlers(2);
        assert_eq!(turn.handlers(), 2);
        assert_eq!(ThreadTurn::new(3, 2).handlers(), 3);
    }
}
