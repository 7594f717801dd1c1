//! Hands a command to the control thread and turns its [`ApiReply`] into an HTTP response:
//! `Ok(null)` → 204, `Ok(value)` → 200 with the JSON, `Err(e)` → `e.status()` with a fault.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use tokio::sync::oneshot;

use super::command::{ApiCommand, ApiReply, ApiRequest, Submit};
use super::fault::Fault;

/// Sends `command` through `submit` and waits up to `timeout` for the reply.
pub async fn call(submit: &Submit, command: ApiCommand, timeout: Duration) -> Result<Value, Fault> {
    let (reply, answer) = oneshot::channel::<ApiReply>();
    submit(ApiRequest { command, reply });
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(reply)) => reply.map_err(Fault::from),
        Ok(Err(_dropped)) => Err(Fault::internal("VMM not responding")),
        Err(_elapsed) => Err(Fault::internal(format!(
            "VMM not responding: no reply within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// The response for a reply value: 204 for `null`, else 200 with the JSON.
pub fn respond(value: Value) -> Response {
    if value.is_null() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (StatusCode::OK, Json(value)).into_response()
    }
}

/// [`call`] then [`respond`], or the fault.
pub async fn call_and_respond(submit: &Submit, command: ApiCommand, timeout: Duration) -> Response {
    match call(submit, command, timeout).await {
        Ok(value) => respond(value),
        Err(fault) => fault.into_response(),
    }
}
