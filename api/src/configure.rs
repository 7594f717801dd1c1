//! The routes that configure a VM before `InstanceStart` (Firecracker's pre-boot API): each
//! body is one section of the config file, in its shape. Ids in a body must equal the path's.
//! Once the VM runs, the control thread refuses them with 400, as Firecracker does.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};

use super::body;
use super::command::ApiCommand;
use super::fault::Fault;
use super::fault::FaultBody;
use super::openapi::PathId;
use super::respond::{path_id, send, send_change, ApiState};
use crate::config::{BootSourceConfig, DriveConfig, IoThreadConfig, MachineConfig, MetricsConfig};
use crate::logger::LoggerConfig;
use crate::rate_limit::RateLimitGroupConfig;
#[allow(unused_imports)] // `json!` is used by the examples in the `#[utoipa::path]`s.
use serde_json::json;
use vmm_config::vsock::VsockConfig;

/// `GET /machine-config`: Firecracker's defaults (1 vCPU, 128 MiB) until a PUT.
#[utoipa::path(get, path = "/machine-config", tag = "pre-boot",
    responses((status = 200, description = "The machine.", body = MachineConfig)))]
pub async fn get_machine(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::GetMachineConfig).await
}

/// `PUT /machine-config`: fields left out take their defaults.
#[utoipa::path(put, path = "/machine-config", tag = "pre-boot",
    request_body(content = MachineConfig, examples(
        ("small" = (summary = "2 vCPUs, 256 MiB", value = json!({"vcpu_count": 2, "mem_size_mib": 256}))))),
    responses((status = 204, description = "Set."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn put_machine(State(s): State<ApiState>, request: Request) -> Response {
    put_body(&s, request, ApiCommand::PutMachineConfig).await
}

/// `PATCH /machine-config`: the fields given change (checked against the whole section).
#[utoipa::path(patch, path = "/machine-config", tag = "pre-boot",
    request_body(content = MachineConfig, description = "Any of `MachineConfig`'s fields.",
        examples(("memory" = (summary = "512 MiB", value = json!({"mem_size_mib": 512}))))),
    responses((status = 204, description = "Changed."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn patch_machine(State(s): State<ApiState>, request: Request) -> Response {
    put_body(&s, request, ApiCommand::PatchMachineConfig).await
}

/// `PUT /boot-source`: the kernel, its command line and an initrd.
#[utoipa::path(put, path = "/boot-source", tag = "pre-boot",
    request_body(content = BootSourceConfig, examples(
        ("guest" = (summary = "A kernel and its command line",
            value = json!({"kernel_image_path": "/srv/vmlinux", "boot_args": "console=ttyS0 reboot=k panic=1"}))))),
    responses((status = 204, description = "Set."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn put_boot_source(State(s): State<ApiState>, request: Request) -> Response {
    put_body(&s, request, ApiCommand::PutBootSource).await
}

/// `PUT /logger`: Firecracker's logger (level, a file or FIFO).
#[utoipa::path(put, path = "/logger", tag = "pre-boot",
    request_body(content = LoggerConfig, examples(
        ("fifo" = (summary = "Debug to a FIFO",
            value = json!({"level": "Debug", "log_path": "/srv/vm/log.fifo", "show_level": true, "show_log_origin": false}))))),
    responses((status = 204, description = "Set."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn put_logger(State(s): State<ApiState>, request: Request) -> Response {
    put_body::<LoggerConfig>(&s, request, ApiCommand::PutLogger).await
}

/// `PUT /metrics`: `{"metrics_path": …}` (and Osprey's `interval_ms`).
#[utoipa::path(put, path = "/metrics", tag = "pre-boot",
    request_body(content = MetricsConfig, examples(
        ("file" = (summary = "A metrics file", value = json!({"metrics_path": "/srv/vm/metrics.json"}))))),
    responses((status = 204, description = "Set."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn put_metrics(State(s): State<ApiState>, request: Request) -> Response {
    put_body::<MetricsConfig>(&s, request, ApiCommand::PutMetrics).await
}

/// `PUT /vsock`: Firecracker's vsock (`guest_cid`, `uds_path`, optional `vsock_id`); a
/// second PUT before boot replaces the first.
#[utoipa::path(put, path = "/vsock", tag = "pre-boot",
    request_body(content = VsockConfig, examples(
        ("vsock" = (summary = "The guest's agent channel",
            value = json!({"vsock_id": "vsock0", "guest_cid": 3, "uds_path": "/srv/vm/v.sock"}))))),
    responses((status = 204, description = "Set."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn put_vsock(State(s): State<ApiState>, request: Request) -> Response {
    put_body::<VsockConfig>(&s, request, ApiCommand::PutVsock).await
}

/// `PUT /drives/{drive_id}`: Firecracker's `Drive`, with Osprey's fields.
#[utoipa::path(put, path = "/drives/{id}", tag = "pre-boot", params(PathId),
    request_body(content = DriveConfig, examples(
        ("root" = (summary = "The root drive",
            value = json!({"drive_id": "disk0", "path_on_host": "/srv/rootfs.ext4", "is_root_device": true, "is_read_only": false}))))),
    responses((status = 204, description = "Added or replaced."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
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

/// `PUT /network-interfaces/{iface_id}`: Firecracker's `NetworkInterface` (and Osprey's
/// `iothread`).
#[utoipa::path(put, path = "/network-interfaces/{id}", tag = "pre-boot", params(PathId),
    request_body(content = crate::net::NetworkInterfaceConfig, examples(
        ("tap" = (summary = "A tap with a fixed MAC",
            value = json!({"iface_id": "eth0", "host_dev_name": "tap0", "guest_mac": "06:00:ac:10:00:02"}))))),
    responses((status = 204, description = "Added or replaced."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
pub async fn put_network_interface(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    put_with_id::<crate::net::NetworkInterfaceConfig>(
        &s,
        id,
        request,
        "iface_id",
        |n| &n.iface_id,
        |id, n| ApiCommand::PutNetworkInterface(id, Box::new(n)),
    )
    .await
}

/// `PUT /iothreads/{id}`: an `iothreads` entry.
#[utoipa::path(put, path = "/iothreads/{id}", tag = "pre-boot", params(PathId),
    request_body(content = IoThreadConfig, examples(
        ("polling" = (summary = "Weighted polling",
            value = json!({"id": "io0", "poll_policy": "Weighted", "poll_max_ns": 32768}))))),
    responses((status = 204, description = "Added or replaced."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
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
#[utoipa::path(put, path = "/rate-limit-groups/{id}", tag = "pre-boot", params(PathId),
    request_body(content = RateLimitGroupConfig, examples(
        ("tenant" = (summary = "5,000 IOPS shared",
            value = json!({"id": "tenant", "ops": {"size": 5000, "refill_time": 1000}}))))),
    responses((status = 204, description = "Added or replaced."), (status = 400, description = "A bad body or value (nothing changed), or the VM runs already.", body = FaultBody)))]
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
