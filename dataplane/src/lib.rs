//! Osprey's dataplane: the iothread event loop and the I/O engines.
//!
//! This crate knows nothing of KVM, PCI or virtio. Devices hand an [`IoThread`] boxed
//! [`Handler`]s (e.g. a virtio-blk queue with its I/O engine); the thread sleeps in epoll on the
//! handlers' wake fds and runs each handler when one fires. I/O goes through the [`IoEngine`]
//! completion-source trait ([`engine`]), whose engines complete every request through the same
//! submit → commit → reap path.

pub mod cpu_set;
pub mod engine;
pub mod handler;
pub mod iothread;
pub mod poll;
pub mod rate_limit;
pub mod stats;
pub mod thread_weight;

pub use engine::{Completion, EngineKind, IoEngine, IoOp, IoRequest};
pub use handler::{CompletionState, FileBacked, Handler, Poll, TurnEnd, Watch};
pub use iothread::{Detach, IoThread, IoThreadError, SwapOutcome, ThreadTurn};
