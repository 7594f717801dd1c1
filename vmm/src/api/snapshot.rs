//! Firecracker's snapshot routes that Osprey serves: `PUT /snapshot/create` (a paused VM to a
//! state file and a memory file; docs/snapshot.md). The control thread takes the snapshot.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use super::body;
use super::command::{ApiCommand, SnapshotCreateRequest};
use super::fault::FaultBody;
use super::reply::{send_change, ApiState};
#[allow(unused_imports)] // `json!` is used by the examples in the `#[utoipa::path]`s.
use serde_json::json;

/// `PUT /snapshot/create`: the paused VM's state and memory to files.
#[utoipa::path(put, path = "/snapshot/create", tag = "vm",
    request_body(content = SnapshotCreateRequest, examples(
        ("full" = (summary = "A full snapshot",
            value = json!({"snapshot_type": "Full", "snapshot_path": "/srv/vm/state.snap", "mem_file_path": "/srv/vm/mem.snap"}))))),
    responses((status = 204, description = "Taken."),
        (status = 400, description = "A bad body, the VM is not paused, or a part of its state cannot be saved (named).", body = FaultBody)))]
pub async fn create(State(s): State<ApiState>, request: Request) -> Response {
    match body::parse_json::<SnapshotCreateRequest>(request, s.max_body).await {
        Ok(r) => send_change(&s, ApiCommand::SnapshotCreate(r)).await,
        Err(f) => f.into_response(),
    }
}
