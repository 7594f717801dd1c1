//! virtio-vsock with Firecracker's host-side Unix sockets ("hybrid vsock"): packet parsing
//! against hostile guest memory ([`packet`]), one connection's state and credit flow
//! ([`conn`]), the Unix-socket side (`CONNECT <port>` on `uds_path`, `<uds_path>_<port>` for
//! the guest's connections: [`muxer`]), the iothread handler over the three queues
//! ([`handler`]), the device model ([`device`]), what snapshots ask of it ([`control`]) and
//! the socket `PUT /vsock` binds before the device exists ([`prebound`]), what a guest's
//! packets that lead nowhere may cost the host ([`flood`]), and a tx payload written to its
//! host socket from guest memory ([`span`]).
//! docs/vsock.md describes the protocol.

pub mod conn;
pub mod control;
pub mod device;
pub mod flood;
pub mod handler;
pub mod muxer;
pub mod packet;
pub mod prebound;
pub mod span;

pub use control::VsockControl;
pub use device::VirtioVsock;
pub use muxer::MuxerError;
