//! A server over a real socket with the fake controller (`crate::test_utils::fake_control`) as
//! its control thread, a temp dir, and request helpers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::client::{self, Response};
use crate::command::ApiCommand;
use crate::server::{self, ApiServer, ServerLimits};
use crate::test_utils::fake_control;
pub use crate::test_utils::fake_control::metrics;

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("osprey-api-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server on a temp socket whose control thread is the fake controller
/// ([`fake_control::spawn`]).
pub struct Fake {
    pub server: ApiServer,
    pub socket: PathBuf,
    seen: Arc<Mutex<Vec<ApiCommand>>>,
    _dir: TempDir,
}

impl Fake {
    pub fn start() -> Self {
        Self::start_with(ServerLimits::default())
    }

    pub fn start_with(limits: ServerLimits) -> Self {
        let dir = TempDir::new();
        let socket = dir.path("api.sock");
        let (submit, seen) = fake_control::spawn();
        let server = server::start_with(&socket, submit, limits).expect("start");
        Self {
            server,
            socket,
            seen,
            _dir: dir,
        }
    }

    /// The commands that reached the control thread.
    pub fn commands(&self) -> Vec<ApiCommand> {
        self.seen.lock().expect("seen").clone()
    }

    pub fn get(&self, path: &str) -> Response {
        self.send("GET", path, &[], None)
    }

    /// A JSON body with the right Content-Type.
    pub fn json(&self, method: &str, path: &str, body: &str) -> Response {
        self.send(
            method,
            path,
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
    }

    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        send(&self.socket, method, path, headers, body)
    }
}

pub fn send(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Response {
    client::send(socket, method, path, headers, body).expect("response")
}

/// Writes `raw` bytes (a request the HTTP client would not send, e.g. hand-made chunks) and
/// reads the server's answer until it closes the connection: status, headers and the body
/// `Content-Length` announces. A server that answers before reading everything (413) is fine.
pub fn send_raw(socket: &Path, raw: &[u8]) -> Response {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let _ = stream.write_all(raw);
    let mut received = Vec::new();
    let _ = stream.read_to_end(&mut received);
    let end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&received[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &received[end + 4..];
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(rest.len())
        .min(rest.len());
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&rest[..length]).into_owned(),
    }
}

/// The body as JSON.
pub fn body_json(r: &Response) -> Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", r.body))
}

/// Asserts a fault: the status, a JSON content type and exactly `{"fault_message": message}`.
pub fn assert_fault(r: &Response, status: u16, message: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
    assert_eq!(body_json(r), json!({ "fault_message": message }), "{r:?}");
}

/// Short timeouts for tests that wait on them.
pub fn short_limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(300),
        reply_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    }
}
