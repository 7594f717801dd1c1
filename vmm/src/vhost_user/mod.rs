//! `osprey vhost-user-blk`: Osprey's dataplane as a vhost-user-blk backend for another VMM's
//! guest (QEMU, Cloud Hypervisor). The command line ([`args`]) names a socket and a backing
//! file; the drive is opened as the VMM opens its drives ([`crate::drive`]), served by one
//! iothread with the VMM's defaults (Auto engine, Adaptive polling), and handed to frontends
//! through `devices::vhost_user` (docs/vhost-user.md).

pub mod args;

use std::sync::{Arc, Mutex};

use dataplane::engine::EngineOptions;
use dataplane::IoThread;
use devices::block::{BlockDeviceConfig, VirtioBlock};
use devices::vhost_user::{VhostUserDevice, VhostUserServer};

pub use args::VhostUserBlkArgs;

/// Exit status for a bad command line or a drive that cannot be opened.
const EXIT_CONFIG: i32 = 2;
/// Exit status when the backend cannot start (socket, iothread).
const EXIT_BACKEND: i32 = 1;

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum VhostUserBlkError {
    /// The backing file.
    #[error("--path {0}")]
    Drive(#[from] crate::drive::DriveOpenError),
    /// The iothread.
    #[error("iothread: {0}")]
    IoThread(#[from] dataplane::IoThreadError),
    /// The socket.
    #[error("{0}")]
    Socket(#[from] devices::vhost_user::VhostUserError),
}

impl VhostUserBlkError {
    /// The exit status for this error.
    pub fn exit_status(&self) -> i32 {
        match self {
            Self::Drive(_) => EXIT_CONFIG,
            _ => EXIT_BACKEND,
        }
    }
}

/// A drive served on a socket, ready to accept frontends.
#[derive(Debug)]
pub struct Backend {
    /// The listening socket and the device behind it.
    pub server: VhostUserServer,
    /// The iothread serving the drive's queues.
    pub iothread: Arc<IoThread>,
}

/// Opens the drive, starts its iothread and binds the socket.
pub fn start(args: &VhostUserBlkArgs) -> Result<Backend, VhostUserBlkError> {
    let drive = crate::drive::open(&args.path, args.readonly, args.direct)?;
    if drive.ignored_tail > 0 {
        log::warn!(
            "{}: the last {} bytes are past the last whole sector and not served",
            args.path.display(),
            drive.ignored_tail
        );
    }
    let iothread = IoThread::spawn(&args.iothread_name(), 0)?;
    let block = VirtioBlock::new(
        BlockDeviceConfig {
            drive_id: args.drive_id.clone(),
            file: drive.file,
            read_only: args.readonly,
            capacity_sectors: drive.capacity_sectors,
            num_queues: args.num_queues,
            queue_size: args.queue_size,
            engine: EngineOptions {
                kind: args.io_engine.to_dataplane(),
                depth: u32::from(args.queue_size),
                io_uring: Default::default(),
                direct: args.direct,
                fault: None,
            },
            rate_limits: Default::default(),
        },
        iothread.clone(),
    );
    let device = Arc::new(Mutex::new(VhostUserDevice::new(
        &args.drive_id,
        Box::new(block),
    )));
    let server = VhostUserServer::bind(&args.socket, device)?;
    log::info!(
        "vhost-user-blk {}: {} ({} sectors{}) on {}, up to {} queue(s) of {}, engine {:?}, iothread {}",
        args.drive_id,
        args.path.display(),
        drive.capacity_sectors,
        if args.readonly { ", read-only" } else { "" },
        args.socket.display(),
        args.num_queues,
        args.queue_size,
        args.io_engine,
        iothread.name()
    );
    Ok(Backend { server, iothread })
}

/// Runs the backend until the process is killed; returns an exit status only when it could
/// not start.
pub fn run(args: &VhostUserBlkArgs) -> i32 {
    match start(args) {
        Ok(backend) => backend.server.run(),
        Err(e) => {
            eprintln!("osprey vhost-user-blk: error: {e}");
            e.exit_status()
        }
    }
}
