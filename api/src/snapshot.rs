//! Firecracker's snapshot routes: `PUT /snapshot/create` (a paused VM to a state file and a
//! memory file; the control thread takes it) and `PUT /snapshot/load` (before `InstanceStart`:
//! the pre-boot loop restores a VM from them). docs/snapshot.md.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use super::body;
use super::command::{ApiCommand, SnapshotCreateRequest, SnapshotLoadRequest};
use super::fault::FaultBody;
use super::respond::{call, ApiState};
use axum::http::StatusCode;
use std::time::Duration;

/// How long a snapshot request may take: writing guest memory runs at the disk's speed (about
/// 1 s per GiB here), far past the other commands' 5 s for large guests.
const SNAPSHOT_REPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Sends `command` and answers 204 once done, waiting up to [`SNAPSHOT_REPLY_TIMEOUT`] (or the
/// server's own timeout when longer).
async fn send_snapshot(s: &ApiState, command: ApiCommand) -> Response {
    let timeout = s.reply_timeout.max(SNAPSHOT_REPLY_TIMEOUT);
    match call(&s.submit, command, timeout).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(f) => f.into_response(),
    }
}
#[allow(unused_imports)] // `json!` is used by the examples in the `#[utoipa::path]`s.
use serde_json::json;

/// `PUT /snapshot/create`: the paused VM's state and memory to files.
#[utoipa::path(put, path = "/snapshot/create", tag = "vm",
    request_body(content = SnapshotCreateRequest, examples(
        ("full" = (summary = "A full snapshot",
            value = json!({"snapshot_type": "Full", "snapshot_path": "/srv/vm/state.snap", "mem_file_path": "/srv/vm/mem.snap"}))))),
    responses((status = 204, description = "Taken."),
        (status = 400, description = "A bad body, the VM is not paused, a path outside the folders the sandbox lets Osprey create files in (the API socket's and snapshot.folder), a path (or its temporary) that names a file the VM uses (a drive, the kernel, the initrd, the log or metrics file, the API socket) or the other path, or holds anything but a regular file (named with its field, before any file is written), or a part of its state cannot be saved (named). The files are written under temporary names and renamed into place, so a failure or a crash leaves the older snapshot whole.", body = FaultBody)))]
pub async fn create(State(s): State<ApiState>, request: Request) -> Response {
    match body::parse_json::<SnapshotCreateRequest>(request, s.max_body).await {
        Ok(r) => send_snapshot(&s, ApiCommand::SnapshotCreate(r)).await,
        Err(f) => f.into_response(),
    }
}

/// `PUT /snapshot/load`: a VM restored from a snapshot's files, before `InstanceStart`.
#[utoipa::path(put, path = "/snapshot/load", tag = "pre-boot",
    request_body(content = SnapshotLoadRequest, examples(
        ("file" = (summary = "Restore and run",
            value = json!({"snapshot_path": "/srv/vm/state.snap", "mem_backend": {"backend_type": "File", "backend_path": "/srv/vm/mem.snap"}, "resume_vm": true}))))),
    responses((status = 204, description = "Restored (running with resume_vm, else paused)."),
        (status = 400, description = "A bad body; a state file that is truncated, corrupted, of another version, or whose drive or memory file is missing, changed, not a regular file, or of another snapshot (named); or the VM runs already.", body = FaultBody)))]
pub async fn load(State(s): State<ApiState>, request: Request) -> Response {
    match body::parse_json::<SnapshotLoadRequest>(request, s.max_body).await {
        Ok(r) => send_snapshot(&s, ApiCommand::SnapshotLoad(r)).await,
        Err(f) => f.into_response(),
    }
}
