//! Adaptive polling: the window policies ([`policy`]) that decide how long an iothread polls its
//! handlers' cheap checks before sleeping in epoll, and the contention guard ([`contention`]) that
//! suspends polling while the host is busy.

pub mod contention;
pub mod policy;

pub use contention::HostSample;
pub use policy::{PolicyKind, PollParamError, PollParams, PollPolicy};
