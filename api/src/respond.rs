//! What every handler shares ([`ApiState`], the path's id) and how it hands a command to the
//! control thread and turns its [`ApiReply`] into an HTTP response: `Ok(Reply::Done)` → 204,
//! another `Ok(reply)` → 200 with its JSON, `Err(e)` → `e.status()` with a fault; a command that
//! changes something is 204 whatever it returns ([`send_change`]).

use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::sync::oneshot;

use super::command::{ApiCommand, ApiReply, ApiRequest, Reply, Submit};
use super::fault::Fault;

/// Sends `command` through `submit` and waits up to `timeout` for the reply.
pub async fn call(submit: &Submit, command: ApiCommand, timeout: Duration) -> Result<Reply, Fault> {
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

/// The response for a reply: 204 for [`Reply::Done`], else 200 with its JSON.
pub fn respond(reply: Reply) -> Response {
    match reply.to_json() {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(body) => (StatusCode::OK, Json(body)).into_response(),
    }
}

/// [`call`] then [`respond`], or the fault.
pub async fn call_and_respond(submit: &Submit, command: ApiCommand, timeout: Duration) -> Response {
    match call(submit, command, timeout).await {
        Ok(value) => respond(value),
        Err(fault) => fault.into_response(),
    }
}

/// What every handler needs.
#[derive(Clone)]
pub struct ApiState {
    /// The way to the control thread.
    pub submit: Submit,
    /// How long to wait for its reply.
    pub reply_timeout: Duration,
    /// Largest accepted request body.
    pub max_body: usize,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("reply_timeout", &self.reply_timeout)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

pub async fn send(state: &ApiState, command: ApiCommand) -> Response {
    call_and_respond(&state.submit, command, state.reply_timeout).await
}

/// [`send`] for a command that changes something: 204 once it is done, whatever the control
/// thread tells about the new state (a GET shows it).
pub async fn send_change(state: &ApiState, command: ApiCommand) -> Response {
    match call(&state.submit, command, state.reply_timeout).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(f) => f.into_response(),
    }
}

/// The `{id}` of the path, or a 400.
pub fn path_id(id: Result<Path<String>, PathRejection>) -> Result<String, Fault> {
    id.map(|Path(id)| id)
        .map_err(|e| Fault::bad_request(format!("path: {}", e.body_text())))
}
