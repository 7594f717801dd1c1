//! The route table and its handlers: each request becomes one [`ApiCommand`] once its path,
//! query and body are valid; anything refused here never reaches the control thread. Every
//! successful PUT and PATCH answers 204 with no body (Firecracker's rule, which its clients
//! depend on), every GET 200 with JSON. The PUT routes that configure a VM before it starts are
//! [`super::configure`]; Firecracker's routes Osprey does not implement, [`super::unsupported`].

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body;
use super::command::{
    ActionRequest, ApiCommand, DriveUpdate, GroupUpdate, IoThreadUpdate, VmStateRequest,
};
use super::configure;
use super::fault::FaultBody;
use super::fault::{self, Fault};
use super::openapi::PathId;
use super::prometheus;
use super::replies::{ConfigReply, Reply, VersionReply};
use super::replies::{DriveView, GroupView, IoThreadView, MetricsReport};
pub use super::respond::ApiState;
use super::respond::{call, path_id, respond, send, send_change};
use crate::instance::InstanceInfo;
#[allow(unused_imports)] // `json!` is used by the examples in the `#[utoipa::path]`s.
use serde_json::json;

/// Every `(method, path)` the router serves, Firecracker's unsupported routes included, from
/// the OpenAPI document (which [`documented`] declares together with the router).
pub fn routes() -> &'static [(String, String)] {
    static ROUTES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| super::openapi::operations(&document()))
}

/// Every path of [`routes`] once, sorted, comma-separated (for the 404's hint).
pub fn path_list() -> &'static str {
    static LIST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        let paths: std::collections::BTreeSet<&str> =
            routes().iter().map(|(_, p)| p.as_str()).collect();
        paths.into_iter().collect::<Vec<_>>().join(", ")
    })
}

/// The OpenAPI document: the [`documented`] routes and Firecracker's unsupported ones;
/// `docs/api/openapi.json` is its rendering ([`super::openapi::render`]).
pub fn document() -> utoipa::openapi::OpenApi {
    let (_router, mut document) = documented().split_for_parts();
    super::unsupported::document(&mut document);
    document
}

/// The Firecracker API version whose routes and shapes Osprey follows (`GET /version`).
pub const FIRECRACKER_API_VERSION: &str = vmm_config::identity::FIRECRACKER_API_VERSION;

/// The documented routes and their OpenAPI paths, declared once: each handler's
/// `#[utoipa::path]` gives its method, path, body and answers (utoipa-axum).
pub fn documented() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(super::openapi::base())
        .routes(routes!(info))
        .routes(routes!(version))
        .routes(routes!(vm_config))
        .routes(routes!(patch_vm))
        .routes(routes!(
            configure::get_machine,
            configure::put_machine,
            configure::patch_machine
        ))
        .routes(routes!(configure::put_boot_source))
        .routes(routes!(configure::put_logger))
        .routes(routes!(list_iothreads))
        .routes(routes!(
            get_iothread,
            configure::put_iothread,
            patch_iothread
        ))
        .routes(routes!(list_drives))
        .routes(routes!(get_drive, configure::put_drive, patch_drive))
        .routes(routes!(
            configure::put_network_interface,
            patch_network_interface
        ))
        .routes(routes!(list_groups))
        .routes(routes!(get_group, configure::put_group, patch_group))
        .routes(routes!(metrics, configure::put_metrics))
        .routes(routes!(configure::put_vsock))
        .routes(routes!(action))
        .routes(routes!(super::snapshot::create))
        .routes(routes!(super::snapshot::load))
}

/// The router: the [`documented`] routes, Firecracker's unsupported routes (400), a JSON 404
/// for other paths and a JSON 405 for other methods.
pub fn router(state: ApiState) -> Router {
    // Built once per process (building also generates the document): a server starts one, the
    // api_router fuzz target one per input.
    static ROUTES_ONLY: std::sync::OnceLock<Router<ApiState>> = std::sync::OnceLock::new();
    let router = ROUTES_ONLY
        .get_or_init(|| documented().split_for_parts().0)
        .clone();
    super::unsupported::add_routes(router)
        .fallback(no_such_path)
        .method_not_allowed_fallback(fault::method_not_allowed)
        .with_state(state)
}

/// The router's fallback: no route matches the path. The message lists the paths there are.
pub async fn no_such_path(request: Request) -> Fault {
    Fault::not_found(format!(
        "no such path: {}; the paths are {}",
        request.uri().path(),
        path_list()
    ))
}

/// `GET /version`: the Firecracker API version followed, and Osprey's own.
/// The Firecracker API version Osprey follows, and Osprey's own.
#[utoipa::path(get, path = "/version", tag = "vm",
    responses((status = 200, description = "The versions.", body = VersionReply)))]
async fn version() -> Response {
    respond(Reply::Version(VersionReply {
        firecracker_version: FIRECRACKER_API_VERSION,
        osprey_version: env!("CARGO_PKG_VERSION"),
    }))
}

/// Pause or resume the VM (Firecracker's `PATCH /vm`); done when it already is.
#[utoipa::path(patch, path = "/vm", tag = "vm",
    request_body(content = VmStateRequest, examples(
        ("pause" = (summary = "Pause", value = json!({"state": "Paused"}))),
        ("resume" = (summary = "Resume", value = json!({"state": "Resumed"}))))),
    responses((status = 204, description = "Done."),
        (status = 400, description = "A bad body, or the VM has not started.", body = FaultBody)))]
async fn patch_vm(State(s): State<ApiState>, request: Request) -> Response {
    match body::parse_json::<VmStateRequest>(request, s.max_body).await {
        Ok(r) => send_change(&s, ApiCommand::SetVmState(r)).await,
        Err(f) => f.into_response(),
    }
}

/// The instance: Firecracker's `InstanceInfo` (id, state, version) and Osprey's fields.
#[utoipa::path(get, path = "/", tag = "vm",
    responses((status = 200, description = "The instance.", body = InstanceInfo),
        (status = 500, description = "The VMM did not answer within 5 s.", body = FaultBody)))]
async fn info(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::GetInfo).await
}

/// The configuration in the config file's shape, with effective values (before the start: the
/// sections given so far).
#[utoipa::path(get, path = "/vm/config", tag = "vm",
    responses((status = 200, description = "The configuration.", body = ConfigReply)))]
async fn vm_config(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::GetConfig).await
}

/// Every iothread: its parameters and counters once the VM runs, its entry before.
#[utoipa::path(get, path = "/iothreads", tag = "iothreads",
    responses((status = 200, description = "The iothreads.", body = Vec<IoThreadView>)))]
async fn list_iothreads(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::ListIoThreads).await
}

/// One iothread.
#[utoipa::path(get, path = "/iothreads/{id}", tag = "iothreads", params(PathId),
    responses((status = 200, description = "The iothread.", body = IoThreadView),
        (status = 404, description = "No iothread with this id.", body = FaultBody)))]
async fn get_iothread(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    get_by_id(&s, id, ApiCommand::GetIoThread).await
}

/// Change polling and batching of a running iothread, atomically: every field takes effect or
/// none does (absent: kept; `null`: the default).
#[utoipa::path(patch, path = "/iothreads/{id}", tag = "iothreads", params(PathId),
    request_body(content = IoThreadUpdate, examples(
        ("polling_off" = (summary = "Turn polling off (QMP poll-max-ns=0)",
            value = json!({"poll_max_ns": 0}))),
        ("classic_on" = (summary = "Back on, classic policy, 32 µs window",
            value = json!({"poll_max_ns": 32768, "poll_policy": "Classic", "poll_grow": 0, "poll_shrink": 0}))),
        ("weighted_w3" = (summary = "Weighted policy, W=3",
            value = json!({"poll_policy": "Weighted", "poll_weight": 3, "poll_max_ns": 32768}))),
        ("max_batch_8" = (summary = "At most 8 requests per submission (QMP aio-max-batch=8)",
            value = json!({"max_batch": 8}))))),
    responses((status = 204, description = "Changed."),
        (status = 400, description = "A bad body or value; nothing changed.", body = FaultBody),
        (status = 404, description = "No iothread with this id.", body = FaultBody)))]
async fn patch_iothread(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    patch::<IoThreadUpdate>(&s, id, request, ApiCommand::PatchIoThread).await
}

/// A GET on `/{kind}/{id}`: the id, then the command.
async fn get_by_id(
    s: &ApiState,
    id: Result<Path<String>, PathRejection>,
    command: fn(String) -> ApiCommand,
) -> Response {
    match path_id(id) {
        Ok(id) => send(s, command(id)).await,
        Err(f) => f.into_response(),
    }
}

/// A PUT or PATCH on `/{kind}/{id}`: the id, then a JSON body of type `T`, then the command;
/// 204 when done.
pub(super) async fn patch<T: serde::de::DeserializeOwned>(
    s: &ApiState,
    id: Result<Path<String>, PathRejection>,
    request: Request,
    command: fn(String, T) -> ApiCommand,
) -> Response {
    let id = match path_id(id) {
        Ok(id) => id,
        Err(f) => return f.into_response(),
    };
    match body::parse_json::<T>(request, s.max_body).await {
        Ok(update) => send_change(s, command(id, update)).await,
        Err(f) => f.into_response(),
    }
}

/// Every drive: its counters and configuration once the VM runs, its entry before.
#[utoipa::path(get, path = "/drives", tag = "drives",
    responses((status = 200, description = "The drives.", body = Vec<DriveView>)))]
async fn list_drives(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::ListDrives).await
}

/// One drive.
#[utoipa::path(get, path = "/drives/{id}", tag = "drives", params(PathId),
    responses((status = 200, description = "The drive.", body = DriveView),
        (status = 404, description = "No drive with this id.", body = FaultBody)))]
async fn get_drive(State(s): State<ApiState>, id: Result<Path<String>, PathRejection>) -> Response {
    get_by_id(&s, id, ApiCommand::GetDrive).await
}

/// Change a running drive, as Firecracker's `PATCH /drives/{drive_id}` (`drive_id`, when
/// given, must equal the path's): swap its backing file while the guest runs (`path_on_host`:
/// the requests in flight complete on the old file, the capacity is re-read and the guest gets
/// a config-change interrupt) and/or set, change or remove its `rate_limiter` (new buckets start
/// full).
#[utoipa::path(patch, path = "/drives/{id}", tag = "drives", params(PathId),
    request_body(content = DriveUpdate, examples(
        ("ops_5000" = (summary = "5,000 IOPS (50 every 10 ms)",
            value = json!({"rate_limiter": {"ops": {"size": 50, "refill_time": 10}}}))),
        ("bw_50mib" = (summary = "50 MiB/s with a one-time burst of 100 MiB",
            value = json!({"rate_limiter": {"bandwidth": {"size": 52428800, "one_time_burst": 104857600, "refill_time": 1000}}}))),
        ("remove" = (summary = "No limit", value = json!({"rate_limiter": null}))),
        ("firecracker" = (summary = "Firecracker's PartialDrive",
            value = json!({"drive_id": "disk0", "rate_limiter": {"ops": {"size": 1000, "refill_time": 1000}}}))),
        ("swap" = (summary = "Swap the backing file",
            value = json!({"path_on_host": "/srv/vm1/image-b.ext4"}))))),
    responses((status = 204, description = "Changed."),
        (status = 400, description = "A bad body or value, or the VM has not started.", body = FaultBody),
        (status = 404, description = "No drive with this id.", body = FaultBody)))]
async fn patch_drive(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    patch::<DriveUpdate>(&s, id, request, ApiCommand::PatchDrive).await
}

/// Change a running interface's limiters (absent: kept; `{}` or `null`: removed), as
/// Firecracker's `PATCH /network-interfaces/{iface_id}`.
#[utoipa::path(patch, path = "/network-interfaces/{id}", tag = "network-interfaces", params(PathId),
    request_body(content = crate::net::NetworkInterfaceUpdate, examples(
        ("rx_1mb" = (summary = "1 MB/s received",
            value = json!({"iface_id": "eth0", "rx_rate_limiter": {"bandwidth": {"size": 100000, "refill_time": 100}}}))))),
    responses((status = 204, description = "Changed."),
        (status = 400, description = "A bad body or value, or the VM has not started.", body = FaultBody),
        (status = 404, description = "No interface with this id.", body = FaultBody)))]
async fn patch_network_interface(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    patch::<crate::net::NetworkInterfaceUpdate>(&s, id, request, ApiCommand::PatchNetworkInterface)
        .await
}

/// Every rate-limit group.
#[utoipa::path(get, path = "/rate-limit-groups", tag = "rate-limit-groups",
    responses((status = 200, description = "The groups.", body = Vec<GroupView>)))]
async fn list_groups(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::ListRateLimitGroups).await
}

/// One rate-limit group.
#[utoipa::path(get, path = "/rate-limit-groups/{id}", tag = "rate-limit-groups", params(PathId),
    responses((status = 200, description = "The group.", body = GroupView),
        (status = 404, description = "No group with this id.", body = FaultBody)))]
async fn get_group(State(s): State<ApiState>, id: Result<Path<String>, PathRejection>) -> Response {
    get_by_id(&s, id, ApiCommand::GetRateLimitGroup).await
}

/// Change a running group's buckets (absent: kept; `null`: removed).
#[utoipa::path(patch, path = "/rate-limit-groups/{id}", tag = "rate-limit-groups", params(PathId),
    request_body(content = GroupUpdate, examples(
        ("ops_12000" = (summary = "12,000 IOPS for the group",
            value = json!({"ops": {"size": 120, "refill_time": 10}}))),
        ("no_bandwidth" = (summary = "Remove the bandwidth bucket, keep ops",
            value = json!({"bandwidth": null}))))),
    responses((status = 204, description = "Changed."),
        (status = 400, description = "A bad body or value, or the VM has not started.", body = FaultBody),
        (status = 404, description = "No group with this id.", body = FaultBody)))]
async fn patch_group(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    patch::<GroupUpdate>(&s, id, request, ApiCommand::PatchRateLimitGroup).await
}

/// An action: Firecracker's `InstanceStart` (boots a VM configured over the API),
/// `SendCtrlAltDel` (Ctrl+Alt+Del on the i8042 keyboard), `FlushMetrics`; Osprey's `Pause`,
/// `Resume` (409 when already so) and `Shutdown` (the VM stops and osprey exits 0).
#[utoipa::path(put, path = "/actions", tag = "vm",
    request_body(content = ActionRequest, examples(
        ("pause" = (summary = "Pause the vCPUs", value = json!({"action_type": "Pause"}))),
        ("resume" = (summary = "Resume the vCPUs", value = json!({"action_type": "Resume"}))),
        ("shutdown" = (summary = "Stop the VM; osprey exits 0", value = json!({"action_type": "Shutdown"}))),
        ("start" = (summary = "Boot the VM configured over the API", value = json!({"action_type": "InstanceStart"}))))),
    responses((status = 204, description = "Done."),
        (status = 400, description = "A bad body, or an action the phase does not allow.", body = FaultBody),
        (status = 409, description = "Pause when paused, Resume when running.", body = FaultBody)))]
async fn action(State(s): State<ApiState>, request: Request) -> Response {
    match body::parse_json::<ActionRequest>(request, s.max_body).await {
        Ok(a) => send_change(&s, ApiCommand::Action(a.action_type)).await,
        Err(f) => f.into_response(),
    }
}

/// `GET /metrics?format=json|prometheus`.
#[derive(Debug, Deserialize)]
struct MetricsQuery {
    format: Option<MetricsFormat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum MetricsFormat {
    Json,
    Prometheus,
}

/// Everything countable, as JSON or in Prometheus' text format (`?format=prometheus`, or an
/// `Accept` that names `text/plain` and not JSON); fields in docs/api/metrics.md.
#[utoipa::path(get, path = "/metrics", tag = "metrics",
    params(("format" = Option<String>, Query, description = "`json` (default) or `prometheus`")),
    responses((status = 200, description = "The metrics.", content(
            (MetricsReport = "application/json"),
            (String = "text/plain"))),
        (status = 400, description = "An unknown format, or the VM has not started.", body = FaultBody)))]
async fn metrics(State(s): State<ApiState>, request: Request) -> Response {
    let format = match metrics_format(&request) {
        Ok(f) => f,
        Err(f) => return f.into_response(),
    };
    match call(&s.submit, ApiCommand::GetMetrics, s.reply_timeout).await {
        Ok(reply) if format == MetricsFormat::Prometheus => {
            match prometheus::render(&reply.to_json().unwrap_or_default()) {
                Ok(text) => (
                    StatusCode::OK,
                    [(CONTENT_TYPE, prometheus::CONTENT_TYPE)],
                    text,
                )
                    .into_response(),
                Err(_) => Fault::internal("encoding the Prometheus text failed").into_response(),
            }
        }
        Ok(reply) => respond(reply),
        Err(f) => f.into_response(),
    }
}

/// `?format=` wins; otherwise the text format when `Accept` names `text/plain` and not JSON.
fn metrics_format(request: &Request) -> Result<MetricsFormat, Fault> {
    let query = Query::<MetricsQuery>::try_from_uri(request.uri())
        .map_err(|_| Fault::bad_request("format: expected `json` or `prometheus`"))?;
    if let Some(format) = query.0.format {
        return Ok(format);
    }
    let accept = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    if accept.contains("text/plain") && !accept.contains("application/json") {
        Ok(MetricsFormat::Prometheus)
    } else {
        Ok(MetricsFormat::Json)
    }
}
