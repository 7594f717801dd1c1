//! The routes that configure a VM before `InstanceStart` (Firecracker's pre-boot API): each
//! body is one section of the config file, in its shape. Ids in a body must equal the path's.
//! Once the VM runs, the control thread refuses them with 400, as Firecracker does.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};

use super::body;
use super::command::ApiCommand;
use super::fault::Fault;
use super::reply::{path_id, send, send_change, ApiState};
use crate::config::{DriveConfig, IoThreadConfig, MetricsConfig};
use crate::logger::LoggerConfig;
use crate::rate_limit::RateLimitGroupConfig;

/// `GET /machine-config`.
pub async fn get_machine(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::GetMachineConfig).await
}

/// `PUT /machine-config`: fields left out take their defaults.
pub async fn put_machine(State(s): State<ApiState>, request: Request) -> Response {
    put_body(&s, request, ApiCommand::PutMachineConfig).await
}

/// `PATCH /machine-config`: the fields given change (checked against the whole section).
pub async fn patch_machine(State(s): State<ApiState>, request: Request) -> Response {
    put_body(&s, request, ApiCommand::PatchMachineConfig).await
}

/// `PUT /boot-source`.
pub async fn put_boot_source(State(s): State<ApiState>, request: Request) -> Response {
    put_body(&s, request, ApiCommand::PutBootSource).await
}

/// `PUT /logger`.
pub async fn put_logger(State(s): State<ApiState>, request: Request) -> Response {
    put_body::<LoggerConfig>(&s, request, ApiCommand::PutLogger).await
}

/// `PUT /metrics`: `{"metrics_path": …}` (and Osprey's `interval_ms`).
pub async fn put_metrics(State(s): State<ApiState>, request: Request) -> Response {
    put_body::<MetricsConfig>(&s, request, ApiCommand::PutMetrics).await
}

/// `PUT /drives/{drive_id}`: Firecracker's `Drive`, with Osprey's fields.
pub async fn put_drive(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    put_with_id::<DriveConfig>(
        &s,
        id,
        request,
        "drive_id",
        |d| &d.drive_id,
        |id, d| ApiCommand::PutDrive(id, Box::new(d)),
    )
    .await
}

/// `PUT /iothreads/{id}`: an `iothreads` entry.
pub async fn put_iothread(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    put_with_id::<IoThreadConfig>(
        &s,
        id,
        request,
        "id",
        |t| &t.id,
        |id, t| ApiCommand::PutIoThread(id, Box::new(t)),
    )
    .await
}

/// `PUT /rate-limit-groups/{id}`: a `rate-limit-groups` entry.
pub async fn put_group(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    put_with_id::<RateLimitGroupConfig>(
        &s,
        id,
        request,
        "id",
        |g| &g.id,
        ApiCommand::PutRateLimitGroup,
    )
    .await
}

async fn put_body<T: serde::de::DeserializeOwned>(
    s: &ApiState,
    request: Request,
    command: fn(T) -> ApiCommand,
) -> Response {
    match body::parse_json::<T>(request, s.max_body).await {
        Ok(value) => send_change(s, command(value)).await,
        Err(f) => f.into_response(),
    }
}

/// A PUT whose body names its id again in `field`: both must agree.
async fn put_with_id<T: serde::de::DeserializeOwned>(
    s: &ApiState,
    id: Result<Path<String>, PathRejection>,
    request: Request,
    field: &str,
    body_id: fn(&T) -> &String,
    command: impl FnOnce(String, T) -> ApiCommand,
) -> Response {
    let id = match path_id(id) {
        Ok(id) => id,
        Err(f) => return f.into_response(),
    };
    let value = match body::parse_json::<T>(request, s.max_body).await {
        Ok(v) => v,
        Err(f) => return f.into_response(),
    };
    if *body_id(&value) != id {
        return Fault::bad_request(format!(
            "{field}: `{}` differs from the path's id `{id}`",
            body_id(&value)
        ))
        .into_response();
    }
    send_change(s, command(id, value)).await
}
