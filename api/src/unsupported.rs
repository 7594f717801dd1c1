//! Firecracker's routes for devices and features Osprey does not have: each answers 400 with a
//! `fault_message` naming what is missing, so a client that needs it fails at once and says why,
//! instead of booting a VM without it. The words are the config file's for the same features
//! (`vmm_config::config::absent`, the one list of what Osprey lacks).

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter};
use axum::Router;

use super::fault::Fault;
use crate::config::AbsentFeature;

/// `(method, path, what is missing)` for every such route of Firecracker v1.16.1.
pub const UNSUPPORTED: &[(&str, &str, &str)] = &[
    ("DELETE", "/network-interfaces/{id}", NET),
    ("GET", "/balloon", BALLOON),
    ("PUT", "/balloon", BALLOON),
    ("PATCH", "/balloon", BALLOON),
    ("GET", "/balloon/statistics", BALLOON),
    ("PATCH", "/balloon/statistics", BALLOON),
    ("PATCH", "/balloon/hinting/start", BALLOON),
    ("GET", "/balloon/hinting/status", BALLOON),
    ("PATCH", "/balloon/hinting/stop", BALLOON),
    ("GET", "/mmds", MMDS),
    ("PUT", "/mmds", MMDS),
    ("PATCH", "/mmds", MMDS),
    ("PUT", "/mmds/config", MMDS),
    ("PUT", "/entropy", ENTROPY),
    ("PUT", "/serial", SERIAL),
    ("PUT", "/pmem/{id}", PMEM),
    ("PATCH", "/pmem/{id}", PMEM),
    ("DELETE", "/pmem/{id}", PMEM),
    ("GET", "/hotplug/memory", HOTPLUG),
    ("PUT", "/hotplug/memory", HOTPLUG),
    ("PATCH", "/hotplug/memory", HOTPLUG),
    ("PUT", "/cpu-config", CPU_CONFIG),
    ("DELETE", "/drives/{id}", DRIVE_UNPLUG),
];

const NET: &str = AbsentFeature::NetworkInterfaces.what();
const BALLOON: &str = AbsentFeature::Balloon.what();
const MMDS: &str = AbsentFeature::Mmds.what();
const ENTROPY: &str = AbsentFeature::Entropy.what();
const SERIAL: &str = AbsentFeature::Serial.what();
const PMEM: &str = AbsentFeature::Pmem.what();
const HOTPLUG: &str = AbsentFeature::MemoryHotplug.what();
const CPU_CONFIG: &str = AbsentFeature::CpuConfig.what();
const DRIVE_UNPLUG: &str = AbsentFeature::DriveUnplug.what();

/// `router` with every [`UNSUPPORTED`] route added (paths Osprey also serves keep their other
/// methods).
pub fn add_routes<S: Clone + Send + Sync + 'static>(mut router: Router<S>) -> Router<S> {
    for (method, path, what) in UNSUPPORTED {
        let filter = match *method {
            "GET" => MethodFilter::GET,
            "PUT" => MethodFilter::PUT,
            "PATCH" => MethodFilter::PATCH,
            _ => MethodFilter::DELETE,
        };
        let what: &'static str = what;
        router = router.route(
            path,
            on(filter, move |request: Request| async move {
                refuse(&request, what)
            }),
        );
    }
    router
}

fn refuse(request: &Request, what: &str) -> Response {
    Fault::bad_request(format!(
        "{} {}: {what} (docs/orchestration.md lists what Osprey implements)",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

/// Adds every [`UNSUPPORTED`] route to the OpenAPI `document`: one operation answering 400, which
/// says what is missing (with its `{id}` declared, as every path parameter must be).
pub fn document(document: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::{HttpMethod, OperationBuilder};
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    for (method, path, what) in UNSUPPORTED {
        let method = match *method {
            "GET" => HttpMethod::Get,
            "PUT" => HttpMethod::Put,
            "PATCH" => HttpMethod::Patch,
            _ => HttpMethod::Delete,
        };
        let refused = ResponseBuilder::new()
            .description(format!("Refused: {what}."))
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Fault")))
                    .build(),
            );
        let mut operation = OperationBuilder::new()
            .tag("unsupported")
            .summary(Some(format!("Firecracker's route; {what}.")))
            .response("400", refused);
        if path.contains("{id}") {
            operation = operation.parameter(id_parameter());
        }
        document
            .paths
            .add_path_operation(path, vec![method], operation);
    }
}

/// The `{id}` of an unsupported route's path (Firecracker's `iface_id`, `drive_id`, `id`).
fn id_parameter() -> utoipa::openapi::path::Parameter {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::Required;
    ParameterBuilder::new()
        .name("id")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(
            "The device's id, as Firecracker names it (refused all the same).",
        ))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}
