//! The API thread: a current-thread tokio runtime serving the router over HTTP/1.1 on the Unix
//! socket, one task per connection, at most [`MAX_CONNECTIONS`] at once (the oldest unfinished
//! one makes room: [`super::connections`]), with header and body read timeouts so a slow or idle
//! client costs a slot for a few seconds at most, and the heap trimmed after a flood.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinSet;

use super::body::{self, MAX_BODY_BYTES};
use super::command::Submit;
use super::connections::{Connections, Slot};
use super::malformed::FaultBodyStream;
use super::routes::{router, ApiState};
use super::socket;
pub use super::socket::ApiServerError;

/// Time a client has to send a request's headers, including the first one.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client has to send a request's body once its headers are in.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time the control thread has to answer a command.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; past it the oldest one not being answered is closed
/// ([`super::connections`] says why 256).
pub const MAX_CONNECTIONS: usize = 256;

/// Timeouts and limits of a server; [`start`] uses the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`BODY_READ_TIMEOUT`].
    pub body_read_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`REPLY_TIMEOUT`].
    pub reply_timeout: Duration,
    /// See [`MAX_BODY_BYTES`].
    pub max_body: usize,
}

/// The process's largest request body (`--http-api-max-payload-size`; else [`MAX_BODY_BYTES`]).
static DEFAULT_MAX_BODY: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(MAX_BODY_BYTES);

/// Sets the largest request body of every server started from now on (Firecracker's
/// `--http-api-max-payload-size`; at least 1 byte).
pub fn set_default_max_body(bytes: usize) {
    DEFAULT_MAX_BODY.store(bytes.max(1), std::sync::atomic::Ordering::Relaxed);
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            reply_timeout: REPLY_TIMEOUT,
            max_body: DEFAULT_MAX_BODY.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// A running API server. [`ApiServer::shutdown`] stops its thread; dropping it also removes
/// the socket file.
#[derive(Debug)]
pub struct ApiServer {
    socket: PathBuf,
    stop: Arc<Notify>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Hooks for the API thread to run between requests ([`ApiServer::run_on_thread`]).
    hooks: tokio::sync::mpsc::UnboundedSender<LateHook>,
}

/// A hook and where its result goes.
type LateHook = (
    OnStart,
    std::sync::mpsc::Sender<Result<(), crate::sandbox::SandboxError>>,
);

/// Why a hook did not run on the API thread ([`ApiServer::run_on_thread`]).
#[derive(Debug, thiserror::Error)]
pub enum ApiHookError {
    /// The thread is gone: the server stopped.
    #[error("the API thread has stopped")]
    Stopped,
    /// The thread did not answer within the reply timeout.
    #[error("the API thread did not run the hook")]
    NoAnswer,
    /// The hook ran and failed.
    #[error(transparent)]
    Failed(crate::sandbox::SandboxError),
}

/// Where the API thread's commands go, changeable while it serves: a VM configured over the API
/// hands its commands first to the pre-boot loop, then to the running VM's control thread.
#[derive(Clone)]
pub struct SubmitSwitch(Arc<std::sync::RwLock<Submit>>);

impl SubmitSwitch {
    /// Sends to `to` until [`SubmitSwitch::set`].
    pub fn new(to: Submit) -> Self {
        Self(Arc::new(std::sync::RwLock::new(to)))
    }

    /// Sends to `to` from now on.
    pub fn set(&self, to: Submit) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = to;
    }

    /// The `submit` to give the server.
    pub fn submit(&self) -> Submit {
        let inner = self.0.clone();
        Arc::new(move |request| {
            let to = inner.read().unwrap_or_else(|p| p.into_inner()).clone();
            to(request);
        })
    }
}

impl std::fmt::Debug for SubmitSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubmitSwitch")
    }
}

/// Binds `socket` and serves the API on a thread named `api`, handing commands to `submit`.
pub fn start(socket: &Path, submit: Submit) -> Result<ApiServer, ApiServerError> {
    start_with(socket, submit, ServerLimits::default())
}

/// Code run on the API thread after the socket is bound, before serving (the VMM installs the
/// API thread's seccomp filter with it). An error stops the thread before it serves.
pub type OnStart = crate::sandbox::ThreadHook;

/// [`start`] with other timeouts and limits (tests use short ones).
pub fn start_with(
    socket: &Path,
    submit: Submit,
    limits: ServerLimits,
) -> Result<ApiServer, ApiServerError> {
    start_hooked(socket, submit, limits, None)
}

/// [`start_with`], running `on_start` on the API thread before it serves.
pub fn start_hooked(
    socket: &Path,
    submit: Submit,
    limits: ServerLimits,
    on_start: Option<OnStart>,
) -> Result<ApiServer, ApiServerError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(ApiServerError::Thread)?;
    let std_listener = socket::bind(socket)?;
    let listener = {
        let _context = runtime.enter();
        UnixListener::from_std(std_listener).map_err(|source| ApiServerError::Socket {
            path: socket.to_path_buf(),
            source,
        })
    };
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_file(socket);
            return Err(e);
        }
    };
    let app = router(ApiState {
        submit,
        reply_timeout: limits.reply_timeout,
        max_body: limits.max_body,
    });
    let stop = Arc::new(Notify::new());
    let thread_stop = stop.clone();
    let (hooks, hooks_rx) = tokio::sync::mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("api".into())
        .spawn(move || {
            if let Some(hook) = on_start {
                if let Err(e) = hook() {
                    log::error!("API thread: {e}; not serving");
                    return;
                }
            }
            runtime.block_on(serve(listener, app, limits, thread_stop, hooks_rx));
        });
    match spawned {
        Ok(thread) => Ok(ApiServer {
            socket: socket.to_path_buf(),
            stop,
            thread: Mutex::new(Some(thread)),
            hooks,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(socket);
            Err(ApiServerError::Thread(e))
        }
    }
}

impl ApiServer {
    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Runs `hook` on the API thread between requests and waits for it (a VM started over the
    /// API puts the thread in its sandbox so). An error if the hook fails or the thread is gone.
    pub fn run_on_thread(&self, hook: OnStart) -> Result<(), ApiHookError> {
        let (done, result) = std::sync::mpsc::channel();
        self.hooks
            .send((hook, done))
            .map_err(|_| ApiHookError::Stopped)?;
        result
            .recv_timeout(REPLY_TIMEOUT)
            .map_err(|_| ApiHookError::NoAnswer)?
            .map_err(ApiHookError::Failed)
    }

    /// Stops accepting, drops open connections and joins the thread. Idempotent.
    pub fn shutdown(&self) {
        self.stop.notify_one();
        let thread = match self.thread.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(thread) = thread {
            if thread.join().is_err() {
                log::error!("The API thread panicked");
            }
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown();
        if let Err(e) = std::fs::remove_file(&self.socket) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("Cannot remove API socket {}: {e}", self.socket.display());
            }
        }
    }
}

/// How long in-flight requests may take to finish once the server is told to stop (a reply to
/// `PUT /actions` Shutdown is written while the VM stops).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Connections accepted in a row before the new ones run (at most half the cap, so none of them
/// is closed to make room before it read its request).
const ACCEPT_BATCH: usize = 16;

/// After this many connections were open at once, the memory they used is handed back to the
/// system once they are all closed ([`trim_heap`]).
const TRIM_AFTER_PEAK: usize = 16;

/// Accepts until told to stop, at most `limits.max_connections` at once ([`Connections`]), then
/// lets open connections finish their current response (idle ones close at once) for up to
/// [`SHUTDOWN_GRACE`]; returning drops the runtime and with it whatever is left.
async fn serve(
    listener: UnixListener,
    app: Router,
    limits: ServerLimits,
    stop: Arc<Notify>,
    mut hooks: tokio::sync::mpsc::UnboundedReceiver<LateHook>,
) {
    let (closing_tx, closing) = watch::channel(false);
    let mut connections = JoinSet::new();
    let open = Connections::new(limits.max_connections);
    let mut accept_errors = AcceptErrors::default();
    let mut in_a_row = 0;
    loop {
        let can_admit = open.can_admit(Instant::now());
        // At the cap with nothing closable yet: look again when the first idle one will be.
        let retry_at = if can_admit { None } else { open.closable_at() };
        tokio::select! {
            () = stop.notified() => break,
            Some((hook, done)) = hooks.recv() => {
                let _ = done.send(hook());
            }
            () = open.changed() => {}
            () = sleep_until(retry_at), if retry_at.is_some() => {}
            accepted = listener.accept(), if can_admit => match accepted {
                Ok((stream, _)) => {
                    if let Some((slot, evicted)) = open.admit(Instant::now()) {
                        let task = connection(stream, app.clone(), limits, slot, evicted, closing.clone());
                        connections.spawn(task);
                    }
                    // Let the new connections read their requests before more are accepted: a
                    // flood of new ones cannot push one out (a cap's worth of newer ones must
                    // come first) before it had a chance.
                    in_a_row += 1;
                    if in_a_row >= ACCEPT_BATCH.min(limits.max_connections / 2).max(1) {
                        in_a_row = 0;
                        tokio::task::yield_now().await;
                    }
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    accept_errors.note(&e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
        while connections.try_join_next().is_some() {}
        if open.open() == 0 && open.take_peak() >= TRIM_AFTER_PEAK {
            trim_heap();
        }
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        log::debug!("API connections still open at shutdown are dropped");
    }
}

/// Sleeps until `at` (forever for `None`; the select does not poll it then).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Failed accepts, logged once a second at most with how many there were.
#[derive(Debug, Default)]
struct AcceptErrors {
    last_log: Option<std::time::Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    fn note(&mut self, e: &std::io::Error) {
        self.unlogged += 1;
        let now = std::time::Instant::now();
        if self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            log::warn!(
                "API socket accept failed: {e} ({} time(s) since the last report)",
                self.unlogged
            );
            self.last_log = Some(now);
            self.unlogged = 0;
        }
    }
}

/// Hands the heap memory freed by closed connections back to the system: glibc keeps freed
/// memory of a thread's arena for reuse, so after a flood of connections the process would
/// otherwise stay at its peak.
fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and shrinks the allocator's own arenas under their locks;
    // it takes no pointer and leaves every live allocation in place.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Serves one connection until the client closes it, it is evicted ([`Connections`]) or the
/// server closes. Each request's body is read whole first ([`body::buffered`]), within the body
/// timeout, then the router answers it.
async fn connection(
    stream: UnixStream,
    app: Router,
    limits: ServerLimits,
    slot: Slot,
    evicted: oneshot::Receiver<()>,
    mut closing: watch::Receiver<bool>,
) {
    let slot = Arc::new(slot);
    let router = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let (router, slot) = (router.clone(), slot.clone());
        async move {
            let request =
                match body::buffered(request, limits.max_body, limits.body_read_timeout).await {
                    Ok(request) => request,
                    Err(refusal) => return Ok::<_, std::convert::Infallible>(refusal),
                };
            // Busy until the answer's body is written (hyper drops it then).
            let busy = slot.busy();
            let response = router.call(request).await?;
            Ok(response.map(|b| axum::body::Body::new(body::Guarded::new(b, busy))))
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BUFFER)
        .serve_connection(TokioIo::new(FaultBodyStream::new(stream)), service);
    tokio::pin!(conn);
    let served = tokio::select! {
        served = conn.as_mut() => served,
        _ = evicted => {
            log::debug!("API connection closed to make room for a new one");
            return;
        }
        () = closed(&mut closing) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = served {
        log::debug!("API connection closed: {e}");
    }
}

/// hyper's read buffer per connection, which bounds a request's head (hyper's default is about
/// 400 KB; Osprey's requests have a few short headers): a bigger head gets 431.
const MAX_HEAD_BUFFER: usize = 64 * 1024;

/// Resolves once the server is closing (or gone).
async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}
