//! `osprey vhost-user-blk`: Osprey's dataplane as a vhost-user-blk backend for another VMM's
//! guest (QEMU, Cloud Hypervisor). The command line ([`args`]) or a JSON file with the VMM's
//! own sections ([`config`]) names the drives and their sockets; each drive is opened as the VMM
//! opens its drives ([`vmm::drive`]), served by its iothread with its engine and rate limits,
//! and handed to frontends through `devices::vhost_user`, one thread per socket
//! (docs/vhost-user.md). A fatal signal or a stop request ends it through [`fatal`], which
//! reports the real cause and removes the sockets.

pub(crate) mod args;
pub(crate) mod config;
pub(crate) mod controller;
pub(crate) mod fatal;
pub(crate) mod sandbox;

use std::sync::{Arc, Mutex};

use dataplane::engine::EngineOptions;
use dataplane::rate_limit::RateLimiter;
use devices::block::throttle::DriveRateLimits;
use devices::block::{BlockDeviceConfig, VirtioBlock};
use devices::vhost_user::{VhostUserDevice, VhostUserServer};

pub use args::VhostUserBlkArgs;
pub use config::{VhostUserConfig, VhostUserDriveConfig};
pub use controller::{BackendController, BackendDrive};

/// Exit status for a bad command line, config or drive.
const EXIT_CONFIG: i32 = 2;
/// Exit status when the backend cannot start (socket, iothread).
const EXIT_BACKEND: i32 = 1;

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum VhostUserBlkError {
    /// The command line or config file.
    #[error("{0}")]
    Config(#[from] vmm::config::ConfigError),
    /// A backing file.
    #[error("drives[{index}]: {source}")]
    Drive {
        /// The drive's place in the config.
        index: usize,
        /// What went wrong.
        source: vmm::drive::DriveOpenError,
    },
    /// An iothread.
    #[error("iothread: {0}")]
    IoThread(#[from] dataplane::IoThreadError),
    /// A socket.
    #[error("{0}")]
    Socket(#[from] devices::vhost_user::VhostUserError),
    /// The sandbox.
    #[error("sandbox: {0}")]
    Sandbox(#[from] vmm::sandbox::SandboxError),
    /// The API socket.
    #[error("--api-sock: {0}")]
    Api(#[from] vmm::api::server::ApiServerError),
    /// The fatal-signal handlers.
    #[error("signal handlers: {0}")]
    Signals(std::io::Error),
    /// A serving thread.
    #[error("spawning the thread of {socket}: {source}")]
    Thread {
        /// The socket it would serve.
        socket: String,
        /// The error.
        source: std::io::Error,
    },
}

impl VhostUserBlkError {
    /// The exit status for this error.
    pub fn exit_status(&self) -> i32 {
        match self {
            Self::Config(_) | Self::Drive { .. } => EXIT_CONFIG,
            _ => EXIT_BACKEND,
        }
    }
}

/// The running backend: every drive on its socket.
#[derive(Debug)]
pub struct Backend {
    /// The iothreads, drives and groups, as the API sees them.
    pub controller: BackendController,
    /// Each drive's socket server.
    pub servers: Vec<Arc<VhostUserServer>>,
}

/// Starts the iothreads, opens every drive and binds every socket (nothing is served yet).
pub fn start(config: &VhostUserConfig) -> Result<Backend, VhostUserBlkError> {
    let iothreads = vmm::device_manager::spawn_iothreads(&config.iothreads, false)?;
    let groups = vmm::device_manager::group_limiters(&config.rate_limit_groups);
    let mut servers = Vec::new();
    let mut drives = Vec::new();
    for (index, d) in config.drives.iter().enumerate() {
        let drive = &d.drive;
        let opened = vmm::drive::open(&drive.path_on_host, drive.is_read_only, drive.direct)
            .map_err(|source| VhostUserBlkError::Drive { index, source })?;
        // The config check made sure the names resolve; fill_defaults named every iothread.
        let thread_id = drive.iothread.clone().unwrap_or_default();
        let (Some(thread), Some(thread_config)) = (
            iothreads.get(&thread_id).cloned(),
            config.iothreads.iter().find(|t| t.id == thread_id),
        ) else {
            return Err(vmm::config::invalid(
                format!("drives[{index}].iothread"),
                format!("no iothread `{thread_id}`"),
            )
            .into());
        };
        let rate_limits = DriveRateLimits {
            drive: Arc::new(RateLimiter::new(
                drive.rate_limiter.unwrap_or_default().to_dataplane(),
            )),
            group: drive
                .rate_limit_group
                .as_ref()
                .and_then(|g| groups.get(g).cloned()),
        };
        let block = VirtioBlock::new(
            BlockDeviceConfig {
                drive_id: drive.drive_id.clone(),
                file: opened.file,
                read_only: drive.is_read_only,
                capacity_sectors: opened.capacity_sectors,
                num_queues: drive.num_queues,
                queue_size: drive.queue_size,
                engine: EngineOptions {
                    kind: drive.io_engine.to_dataplane(),
                    depth: u32::from(drive.queue_size),
                    io_uring: vmm::config::IoUringConfig::to_dataplane(thread_config.io_uring),
                    direct: drive.direct,
                    fault: drive.fault_injection.as_ref().map(|f| f.to_plan()),
                },
                rate_limits: rate_limits.clone(),
            },
            thread.clone(),
        );
        drives.push(BackendDrive {
            id: drive.drive_id.clone(),
            stats: block.stats(),
            rate_limits,
            iothread: thread.clone(),
        });
        let device = Arc::new(Mutex::new(VhostUserDevice::new(
            &drive.drive_id,
            Box::new(block),
        )));
        let server = VhostUserServer::bind(&d.socket, device)?;
        log::info!(
            "vhost-user-blk {}: {} ({} sectors{}) on {}, up to {} queue(s) of {}, engine {:?}, iothread {}",
            drive.drive_id,
            drive.path_on_host.display(),
            opened.capacity_sectors,
            if drive.is_read_only { ", read-only" } else { "" },
            d.socket.display(),
            drive.num_queues,
            drive.queue_size,
            drive.io_engine,
            thread_id
        );
        servers.push(Arc::new(server));
    }
    Ok(Backend {
        controller: BackendController {
            config: config.clone(),
            iothreads,
            drives,
            groups,
            started: std::time::Instant::now(),
        },
        servers,
    })
}

/// `sandbox`'s hook for `kind`, which first records the thread's name for a fatal signal's
/// report.
fn named_hook(
    sandbox: &Arc<vmm::sandbox::Sandbox>,
    kind: vmm::seccomp::ThreadKind,
) -> vmm::sandbox::ThreadHook {
    let hook = sandbox.hook(kind);
    Box::new(move || {
        fatal::name_this_thread();
        hook()
    })
}

/// Serves every drive, each socket on a thread of its own (`vhost-user-<n>`), and the REST API
/// on `api_sock` if given, until a signal or a serving thread's panic ends it (`watch`); every
/// thread enters `sandbox` first. The sockets are removed at any of these endings.
fn serve(
    backend: Backend,
    api_sock: Option<&std::path::Path>,
    sandbox: &Arc<vmm::sandbox::Sandbox>,
    mut watch: fatal::Watch,
) -> Result<fatal::Ending, VhostUserBlkError> {
    use vmm::seccomp::ThreadKind;
    let Backend {
        controller,
        servers,
    } = backend;
    let mut sockets: Vec<std::path::PathBuf> =
        servers.iter().map(|s| s.path().to_path_buf()).collect();
    sockets.extend(api_sock.map(std::path::Path::to_path_buf));
    fatal::remove_at_exit(&sockets);
    for t in controller.iothreads.values() {
        let hook = named_hook(sandbox, ThreadKind::IoThread);
        t.run_on_thread(Box::new(move || hook().map_err(Into::into)))?;
    }
    let controller = Arc::new(Mutex::new(controller));
    let _api = match api_sock {
        Some(sock) => {
            let submit: vmm::api::command::Submit =
                Arc::new(move |request: vmm::api::command::ApiRequest| {
                    let reply = controller
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .execute(request.command);
                    // The client may have gone; nothing to do then.
                    let _ = request.reply.send(reply);
                });
            let server = vmm::api::server::start_hooked(
                sock,
                submit,
                vmm::api::server::ServerLimits::default(),
                Some(named_hook(sandbox, ThreadKind::Api)),
            )?;
            hand_over(sandbox, sock);
            log::info!("vhost-user-blk: API on {}", sock.display());
            Some(server)
        }
        None => None,
    };
    for (i, server) in servers.iter().enumerate() {
        hand_over(sandbox, server.path());
        let server = server.clone();
        // A socket server's calls: the API thread's list.
        let enter = named_hook(sandbox, ThreadKind::Api);
        std::thread::Builder::new()
            .name(format!("vhost-user-{i}"))
            .spawn(move || {
                if let Err(e) = enter() {
                    eprintln!("osprey vhost-user-blk: error: sandbox: {e}");
                    fatal::report_panic();
                    return;
                }
                // `run` never returns; a panic wakes the main thread, which ends the process.
                let run = std::panic::AssertUnwindSafe(|| server.run());
                if std::panic::catch_unwind(run).is_err() {
                    fatal::report_panic();
                }
            })
            .map_err(|source| VhostUserBlkError::Thread {
                socket: servers[i].path().display().to_string(),
                source,
            })?;
    }
    let entered = sandbox.enter(ThreadKind::Control)?;
    log::info!("sandbox: {}", sandbox.describe(&entered));
    Ok(watch.wait())
}

/// Gives a socket to the sandbox's user (`--uid`), so that it may still remove it.
fn hand_over(sandbox: &vmm::sandbox::Sandbox, path: &std::path::Path) {
    if let Err(e) = sandbox.hand_over(path) {
        log::warn!("sandbox: chown {}: {e}", path.display());
    }
}

/// Runs the backend of the command line until a signal ends it; returns the exit status (0
/// after `SIGTERM`, `SIGINT` or `SIGHUP`).
pub fn run(args: &VhostUserBlkArgs) -> i32 {
    let status = match run_backend(args) {
        Ok(ending) => {
            match ending {
                fatal::Ending::Stop(sig) => {
                    log::info!("vhost-user-blk: signal {sig}: stopping")
                }
                fatal::Ending::Panic => log::error!("vhost-user-blk: a serving thread failed"),
                // Reported on stderr by the thread that took it.
                fatal::Ending::Fatal(_) => {}
            }
            ending.exit_status()
        }
        Err(e) => {
            eprintln!("osprey vhost-user-blk: error: {e}");
            e.exit_status()
        }
    };
    fatal::remove_sockets();
    status
}

fn run_backend(args: &VhostUserBlkArgs) -> Result<fatal::Ending, VhostUserBlkError> {
    let config = match &args.config {
        Some(path) => VhostUserConfig::from_file(path).map_err(|e| e.in_file(Some(path)))?,
        None => VhostUserConfig::from_args(args)?,
    }
    .with_sandbox_flags(args)?;
    // Alone on the main thread still: namespaces (when asked) and no_new_privs for every
    // thread to come.
    vmm::sandbox::Sandbox::enter_early(&config.sandbox)?;
    // Before any other thread: each inherits the handlers and names itself as it starts.
    let watch = fatal::install().map_err(VhostUserBlkError::Signals)?;
    let sandbox = sandbox::prepare(&config.sandbox, &config, args.api_sock.as_deref())?;
    let backend = start(&config)?;
    serve(backend, args.api_sock.as_deref(), &sandbox, watch)
}
