//! The socket side: a listening Unix socket per device, one frontend connection at a time,
//! each message handled on the serving thread (`vhost`'s `BackendReqHandler`); when the frontend
//! goes away (closes, dies, or breaks the protocol) the device is stopped and forgotten, and the
//! next connection is accepted.

use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use vhost::vhost_user::{BackendReqHandler, Error as ProtocolError};

use super::{VhostUserDevice, VhostUserError};

/// A device's listening socket.
#[derive(Debug)]
pub struct VhostUserServer {
    path: PathBuf,
    listener: UnixListener,
    device: Arc<Mutex<VhostUserDevice>>,
}

impl VhostUserServer {
    /// Listens on `path` (a stale socket file there is replaced; any other file is an error).
    pub fn bind(path: &Path, device: Arc<Mutex<VhostUserDevice>>) -> Result<Self, VhostUserError> {
        let err = |source| VhostUserError::Socket {
            path: path.display().to_string(),
            source,
        };
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                std::fs::remove_file(path).map_err(err)?;
            }
        }
        let listener = crate::uds::bind_listening(path, None).map_err(err)?;
        Ok(Self {
            path: path.to_owned(),
            listener,
            device,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The device served.
    pub fn device(&self) -> &Arc<Mutex<VhostUserDevice>> {
        &self.device
    }

    /// Accepts one frontend and serves it until it goes away.
    pub fn serve_one(&self) -> Result<(), VhostUserError> {
        let (stream, _) = self
            .listener
            .accept()
            .map_err(|source| VhostUserError::Socket {
                path: self.path.display().to_string(),
                source,
            })?;
        serve_connection(stream, &self.device);
        Ok(())
    }

    /// Serves frontends one after another, forever (an accept error is logged and retried).
    pub fn run(&self) -> ! {
        loop {
            if let Err(e) = self.serve_one() {
                log::error!("vhost-user: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Serves the frontend on `stream` until it disconnects or breaks the protocol, then stops the
/// device (every request reaped) and forgets the connection's state.
pub fn serve_connection(stream: UnixStream, device: &Arc<Mutex<VhostUserDevice>>) {
    log::info!("vhost-user: frontend connected");
    let mut handler = BackendReqHandler::from_stream(stream, device.clone());
    loop {
        match handler.handle_request() {
            Ok(()) => {}
            Err(ProtocolError::Disconnected) | Err(ProtocolError::PartialMessage) => {
                log::info!("vhost-user: frontend disconnected");
                break;
            }
            // The backend refused one message (and said so, with REPLY_ACK): the
            // connection goes on.
            Err(
                e @ (ProtocolError::InvalidParam
                | ProtocolError::InvalidOperation(_)
                | ProtocolError::InactiveFeature(_)
                | ProtocolError::InactiveOperation(_)
                | ProtocolError::ReqHandlerError(_)),
            ) => log::warn!("vhost-user: message refused: {e}"),
            Err(e) => {
                // The reply may be missing: the frontend cannot go on, nor can we.
                log::warn!("vhost-user: {e}; closing the connection");
                break;
            }
        }
    }
    drop(handler);
    device
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .disconnect();
    log::info!("vhost-user: device stopped, memory unmapped; waiting for a frontend");
}
