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
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::body;
use super::command::{
    ActionRequest, ApiCommand, DriveUpdate, GroupUpdate, IoThreadUpdate, VmStateRequest,
};
use super::configure;
use super::fault::{self, Fault};
use super::prometheus;
use super::replies::{Reply, VersionReply};
pub use super::reply::ApiState;
use super::reply::{call, path_id, respond, send, send_change};

/// Every `(method, path)` the router serves; the OpenAPI test checks `docs/api/openapi.json`
/// against it, and the router test checks the router against it.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/version"),
    ("GET", "/vm/config"),
    ("PATCH", "/vm"),
    ("GET", "/machine-config"),
    ("PUT", "/machine-config"),
    ("PATCH", "/machine-config"),
    ("PUT", "/boot-source"),
    ("PUT", "/logger"),
    ("GET", "/iothreads"),
    ("GET", "/iothreads/{id}"),
    ("PUT", "/iothreads/{id}"),
    ("PATCH", "/iothreads/{id}"),
    ("GET", "/drives"),
    ("GET", "/drives/{id}"),
    ("PUT", "/drives/{id}"),
    ("PATCH", "/drives/{id}"),
    ("GET", "/rate-limit-groups"),
    ("GET", "/rate-limit-groups/{id}"),
    ("PUT", "/rate-limit-groups/{id}"),
    ("PATCH", "/rate-limit-groups/{id}"),
    ("GET", "/metrics"),
    ("PUT", "/metrics"),
    ("PUT", "/actions"),
];

/// The Firecracker API version whose routes and shapes Osprey follows (`GET /version`).
pub const FIRECRACKER_API_VERSION: &str = "1.16.1";

/// The router: [`ROUTES`], Firecracker's unsupported routes (400), a JSON 404 for other paths
/// and a JSON 405 for other methods.
pub fn router(state: ApiState) -> Router {
    let router = Router::new()
        .route("/", get(info))
        .route("/version", get(version))
        .route("/vm/config", get(vm_config))
        .route("/vm", axum::routing::patch(patch_vm))
        .route(
            "/machine-config",
            get(configure::get_machine)
                .put(configure::put_machine)
                .patch(configure::patch_machine),
        )
        .route(
            "/boot-source",
            axum::routing::put(configure::put_boot_source),
        )
        .route("/logger", axum::routing::put(configure::put_logger))
        .route("/iothreads", get(list_iothreads))
        .route(
            "/iothreads/{id}",
            get(get_iothread)
                .put(configure::put_iothread)
                .patch(patch_iothread),
        )
        .route("/drives", get(list_drives))
        .route(
            "/drives/{id}",
            get(get_drive).put(configure::put_drive).patch(patch_drive),
        )
        .route("/rate-limit-groups", get(list_groups))
        .route(
            "/rate-limit-groups/{id}",
            get(get_group).put(configure::put_group).patch(patch_group),
        )
        .route("/metrics", get(metrics).put(configure::put_metrics))
        .route("/actions", axum::routing::put(action));
    super::unsupported::add_routes(router)
        .fallback(no_such_path)
        .method_not_allowed_fallback(fault::method_not_allowed)
        .with_state(state)
}

/// The router's fallback: no route matches the path. The message lists the paths there are.
pub async fn no_such_path(request: Request) -> Fault {
    let mut paths: Vec<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    paths.dedup();
    Fault::not_found(format!(
        "no such path: {}; the paths are {}",
        request.uri().path(),
        paths.join(", ")
    ))
}

/// `GET /version`: the Firecracker API version followed, and Osprey's own.
async fn version() -> Response {
    respond(Reply::Version(VersionReply {
        firecracker_version: FIRECRACKER_API_VERSION,
        osprey_version: env!("CARGO_PKG_VERSION"),
    }))
}

async fn patch_vm(State(s): State<ApiState>, request: Request) -> Response {
    match body::parse_json::<VmStateRequest>(request, s.max_body).await {
        Ok(r) => send_change(&s, ApiCommand::SetVmState(r)).await,
        Err(f) => f.into_response(),
    }
}

async fn info(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::GetInfo).await
}

async fn vm_config(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::GetConfig).await
}

async fn list_iothreads(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::ListIoThreads).await
}

async fn get_iothread(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    get_by_id(&s, id, ApiCommand::GetIoThread).await
}

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

async fn list_drives(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::ListDrives).await
}

async fn get_drive(State(s): State<ApiState>, id: Result<Path<String>, PathRejection>) -> Response {
    get_by_id(&s, id, ApiCommand::GetDrive).await
}

async fn patch_drive(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    patch::<DriveUpdate>(&s, id, request, ApiCommand::PatchDrive).await
}

async fn list_groups(State(s): State<ApiState>) -> Response {
    send(&s, ApiCommand::ListRateLimitGroups).await
}

async fn get_group(State(s): State<ApiState>, id: Result<Path<String>, PathRejection>) -> Response {
    get_by_id(&s, id, ApiCommand::GetRateLimitGroup).await
}

async fn patch_group(
    State(s): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    patch::<GroupUpdate>(&s, id, request, ApiCommand::PatchRateLimitGroup).await
}

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
