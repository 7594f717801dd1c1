//! What an engine may know of its iothread's current turn, kept in thread-locals (an engine
//! lives on one iothread): how many handlers the thread serves, how many have work this round,
//! and how many requests the thread's `Auto` engines have in flight on their asynchronous
//! engines. The `Auto` engine sends an `O_DIRECT` request inline only when it is alone on the
//! whole thread: an inline call waits for the device, and the thread's other queues would wait
//! with it.

use std::cell::Cell;

thread_local! {
    static HANDLERS: Cell<usize> = const { Cell::new(0) };
    static READY_HANDLERS: Cell<usize> = const { Cell::new(0) };
    static ASYNC_IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
}

/// The loop: the thread serves `n` handlers now.
pub(crate) fn set_handlers(n: usize) {
    HANDLERS.with(|c| c.set(n));
}

/// Handlers the thread serves (0 outside a loop, e.g. in unit tests).
pub(crate) fn handlers() -> usize {
    HANDLERS.with(Cell::get)
}

/// The loop: `n` handlers take turns in this round.
pub(crate) fn set_ready_handlers(n: usize) {
    READY_HANDLERS.with(|c| c.set(n));
}

/// Handlers taking turns in the current round (0 outside a loop, e.g. in unit tests).
pub(crate) fn ready_handlers() -> usize {
    READY_HANDLERS.with(Cell::get)
}

/// An `Auto` engine's asynchronous in-flight count went from `before` to `after`.
pub(crate) fn note_async_in_flight(before: usize, after: usize) {
    ASYNC_IN_FLIGHT.with(|c| c.set((c.get() + after).saturating_sub(before)));
}

/// Requests the thread's `Auto` engines have in flight asynchronously.
pub(crate) fn async_in_flight() -> usize {
    ASYNC_IN_FLIGHT.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_thread_and_never_wrap() {
        note_async_in_flight(0, 3);
        note_async_in_flight(3, 1);
        assert_eq!(async_in_flight(), 1);
        std::thread::spawn(|| assert_eq!(async_in_flight(), 0))
            .join()
            .expect("thread");
        note_async_in_flight(5, 0);
        assert_eq!(async_in_flight(), 0, "saturates instead of wrapping");
        set_ready_handlers(4);
        assert_eq!(ready_handlers(), 4);
        set_handlers(2);
        assert_eq!(handlers(), 2);
        set_handlers(0);
    }
}
