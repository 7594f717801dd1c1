//! Adaptive polling: the window policies ([`policy`]) that decide how long an iothread polls its
//! handlers' cheap checks before sleeping in epoll.

pub mod policy;

pub use policy::{PolicyKind, PollParams, PollPolicy};
