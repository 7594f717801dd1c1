//! A fake control thread answering canned replies, a temp dir, and request helpers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::api::client::{self, Response};
use crate::api::command::{
    ApiCommand, ApiError, ApiReply, ApiRequest, IoThreadUpdate, Submit, VmAction,
};
use crate::api::server::{self, ApiServer, ServerLimits};

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

/// A server on a temp socket whose control thread is [`answer`].
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
        let (submit, seen) = fake_control();
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

/// A `Submit` whose requests a thread answers with [`answer`]; also records every command.
fn fake_control() -> (Submit, Arc<Mutex<Vec<ApiCommand>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<ApiRequest>();
    let thread_seen = seen.clone();
    std::thread::spawn(move || {
        let mut unanswered = Vec::new();
        for request in rx {
            thread_seen
                .lock()
                .expect("seen")
                .push(request.command.clone());
            match &request.command {
                ApiCommand::GetIoThread(id) if id == "drop" => drop(request.reply),
                ApiCommand::GetIoThread(id) if id == "hang" => unanswered.push(request.reply),
                command => {
                    let _ = request.reply.send(answer(command));
                }
            }
        }
    });
    let submit: Submit = Arc::new(move |request| {
        let _ = tx.send(request);
    });
    (submit, seen)
}

pub fn iothread(update: &IoThreadUpdate) -> Value {
    json!({
        "id": "io0",
        "poll_max_ns": update.poll_max_ns.flatten().unwrap_or(32768),
        "poll_grow": update.poll_grow.flatten().unwrap_or(0),
        "poll_shrink": update.poll_shrink.flatten().unwrap_or(0),
        "poll_policy": update.poll_policy.flatten().map_or(json!("Classic"), |p| json!(p)),
        "poll_weight": update.poll_weight.flatten().unwrap_or(3),
        "max_batch": update.max_batch.flatten().unwrap_or(32),
        "cpu_affinity": null,
    })
}

pub fn drive() -> Value {
    json!({"drive_id": "disk0", "path_on_host": "/tmp/disk0.img", "is_read_only": false,
           "io_engine": "IoUring", "iothread": "io0"})
}

pub fn metrics() -> Value {
    json!({
        "vm": {"state": "Running", "uptime_ms": 1234, "vcpus": 2, "running": true},
        "iothreads": [{"id": "io0", "max_batch": 32, "poll_max_ns": 32768, "poll_grow": 0,
            "poll_shrink": 0, "poll_policy": "Classic", "poll_weight": 3,
            "stats": {"poll_hits": 1, "sleeps": 2}}],
        "drives": [{"drive_id": "disk0", "engine": "io_uring (4 queues)", "requests": 10,
            "batch_bounds": [1, 2, 4, 8, 16, 32, 64, 128, 256],
            "batch_hist": [1, 0, 0, 0, 0, 0, 0, 0, 0, 2], "batch_sum": 601}]
    })
}

/// The canned control thread.
fn answer(command: &ApiCommand) -> ApiReply {
    let not_found = |kind: &str, id: &str| Err(ApiError::NotFound(format!("no {kind} `{id}`")));
    match command {
        ApiCommand::GetInfo => {
            Ok(json!({"name": "osprey", "version": "0.1.0", "state": "Running"}))
        }
        ApiCommand::GetConfig => {
            Ok(json!({"machine-config": {"vcpu_count": 2, "mem_size_mib": 256}}))
        }
        ApiCommand::ListIoThreads => Ok(json!([iothread(&IoThreadUpdate::default())])),
        ApiCommand::GetIoThread(id) if id == "io0" => Ok(iothread(&IoThreadUpdate::default())),
        ApiCommand::GetIoThread(id) => not_found("iothread", id),
        ApiCommand::PatchIoThread(id, u) if id == "io0" => match u.poll_weight.flatten() {
            Some(w) if !(1..=16).contains(&w) => Err(ApiError::BadRequest(format!(
                "poll_weight: {w} is out of range 1-16"
            ))),
            _ => Ok(iothread(u)),
        },
        ApiCommand::PatchIoThread(id, _) => not_found("iothread", id),
        ApiCommand::ListDrives => Ok(json!([drive()])),
        ApiCommand::GetDrive(id) if id == "disk0" => Ok(drive()),
        ApiCommand::GetDrive(id) if id == "broken" => {
            Err(ApiError::Internal("engine failed".into()))
        }
        ApiCommand::GetDrive(id) => not_found("drive", id),
        ApiCommand::PatchDrive(id, _) if id == "disk0" => Ok(drive()),
        ApiCommand::PatchDrive(id, _) => not_found("drive", id),
        ApiCommand::ListRateLimitGroups => Ok(json!([{"id": "tenant"}])),
        ApiCommand::GetRateLimitGroup(id) | ApiCommand::PatchRateLimitGroup(id, _)
            if id == "tenant" =>
        {
            Ok(json!({"id": "tenant"}))
        }
        ApiCommand::GetRateLimitGroup(id) | ApiCommand::PatchRateLimitGroup(id, _) => {
            not_found("rate limit group", id)
        }
        ApiCommand::GetMetrics => Ok(metrics()),
        ApiCommand::Action(VmAction::Resume) => Err(ApiError::Conflict("VM is running".into())),
        ApiCommand::Action(_) => Ok(Value::Null),
    }
}

/// Short timeouts for tests that wait on them.
pub fn short_limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(300),
        reply_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    }
}
