//! The API's Unix socket: bound with mode 0600, replacing a stale socket file only when
//! nothing listens on it.

use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Why the API server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// Another process accepts connections on the socket.
    #[error("API socket {}: socket in use by another process", path.display())]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something other than a socket is at the path; it is left alone.
    #[error("API socket {}: the path exists and is not a socket", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Binding, inspecting or removing the socket failed.
    #[error("API socket {}: {source}", path.display())]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The runtime or the thread could not be created.
    #[error("Cannot start the API thread: {0}")]
    Thread(#[source] io::Error),
}

/// What is at a socket path that can be bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketPath {
    /// Nothing.
    Free,
    /// A socket file whose process is gone: binding replaces it.
    Stale,
}

/// Whether `path` can be bound: nothing there, or a stale socket file. A socket another process
/// accepts on, or something that is not a socket, is an error. Start-up's preflight asks this
/// before any VM resource exists; [`bind`] asks again as it binds.
pub fn check_free(path: &Path) -> Result<SocketPath, ApiServerError> {
    let io_err = |source| ApiServerError::Socket {
        path: path.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => Err(ApiServerError::NotASocket {
            path: path.to_path_buf(),
        }),
        Ok(_) => match UnixStream::connect(path) {
            Ok(_) => Err(ApiServerError::InUse {
                path: path.to_path_buf(),
            }),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(SocketPath::Stale),
            Err(e) => Err(io_err(e)),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(SocketPath::Free),
        Err(e) => Err(io_err(e)),
    }
}

/// Connections the kernel queues for the API before it accepts them. std binds with the system's
/// maximum (4,096 here): a flood of connects keeps the queue full, and a normal client waits for
/// all those ahead of it to be accepted (0.6 s in a debug build). 1,024 is a quarter of that wait
/// and still holds a burst of hundreds of clients while every connection the server serves is
/// being answered ([`super::connections`]: it stops accepting then); a client connecting without
/// blocking gets EAGAIN while the queue is full.
pub const BACKLOG: i32 = 1024;

fn shorten_backlog(listener: &UnixListener) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: listen on a socket this function borrows, already listening: it only changes the
    // queue's length.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds `path` (non-blocking, mode 0600, a backlog of [`BACKLOG`], listening before the path
/// appears: [`devices::uds`]), first removing a stale socket file left by a process that is gone.
pub fn bind(path: &Path) -> Result<UnixListener, ApiServerError> {
    let io_err = |source| ApiServerError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if check_free(path)? == SocketPath::Stale {
        log::info!("Replacing stale API socket {}", path.display());
        fs::remove_file(path).map_err(io_err)?;
    }
    // Listening, and closed to others (the usual umask leaves write permission to the owner
    // only, and this narrows it before anyone can see the path), before the path appears.
    let listener = devices::uds::bind_listening(path, Some(0o600)).map_err(io_err)?;
    let ready = listener
        .set_nonblocking(true)
        .and_then(|()| shorten_backlog(&listener));
    if let Err(e) = ready {
        let _ = fs::remove_file(path);
        return Err(io_err(e));
    }
    Ok(listener)
}
