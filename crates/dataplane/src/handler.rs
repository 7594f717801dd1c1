//! What an iothread runs: a [`Handler`] owns some work (e.g. one virtio-blk queue with its I/O
//! engine), names the fds that signal new work, and does the work when asked.

use std::any::Any;
use std::os::unix::io::RawFd;

/// A unit of work owned by an iothread.
pub trait Handler: Send {
    /// The device that owns this handler; `IoThread::detach` returns all handlers of an owner.
    fn owner(&self) -> u64;
    /// The fds whose readability means work: the queue's kick eventfd, the engine's completion
    /// fd. The handler must drain them in [`Handler::run`] (they are level-triggered).
    fn wake_fds(&self) -> Vec<RawFd>;
    /// Does every piece of available work without sleeping.
    fn run(&mut self);
    /// Finishes in-flight I/O before the handler leaves its thread (bounded wait).
    fn quiesce(&mut self);
    /// Gives the handler back to its owner as its concrete type.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}
