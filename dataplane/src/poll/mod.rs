//! Adaptive polling: the window policies ([`policy`]) that decide how long an iothread polls its
//! handlers' cheap checks before sleeping in epoll; for the `Adaptive` policy, the contention guard
//! ([`contention`]) that stops the poll loop's yields, or polling, while the thread waits for a
//! CPU, and the payoff check ([`payoff`]) that keeps polling only while it completes more requests
//! than sleeping.

pub mod contention;
mod params;
pub mod payoff;
pub mod policy;

pub use contention::HostSample;
pub use policy::{PolicyKind, PollParamError, PollParams, PollPolicy};
