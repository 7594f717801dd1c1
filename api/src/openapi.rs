//! The OpenAPI document's frame: its title, description and shared parts ([`base`]), the `{id}`
//! parameter ([`PathId`]), and its rendering ([`render`]). The paths come from the route table's
//! `#[utoipa::path]` annotations ([`super::routes::document`]) and the schemas from the typed
//! bodies; `docs/api/openapi.json` is the rendering, rewritten by
//! `OSPREY_BLESS=1 cargo test -p api --lib openapi` and checked by the same test.

use utoipa::openapi::OpenApi;
use utoipa::OpenApi as _;

/// The document before the routes are added.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Osprey REST API",
        description = "HTTP/1.1 with JSON bodies on a Unix socket (--api-sock PATH or the config's \
            api.socket; mode 0600, no TCP), following Firecracker v1.16.1's API: a successful PUT \
            or PATCH answers 204 with no body, a GET 200 with JSON. Every error is \
            {\"fault_message\": \"...\"}: 400 for a body that is not JSON (whatever its \
            Content-Type says: the header is not looked at, as Firecracker does not), an unknown \
            field, a wrong type, an out-of-range value, a route the VM's phase does not allow (before or after InstanceStart) or a Firecracker route Osprey \
            does not implement; 404 for an unknown path or id; 405 for a method the path does not \
            take; 408 for a body that does not arrive within 5 s of its headers; 409 for a \
            Pause or Resume the VM's state does not allow; 413 for a body over 65536 bytes; 500 when the VMM fails or does not answer within 5 s. QMP names: \
            poll-max-ns → poll_max_ns, poll-grow → poll_grow, poll-shrink → poll_shrink, \
            poll-weight → poll_weight, aio-max-batch → max_batch.",
    ),
    servers((url = "http://localhost",
        description = "Through the Unix socket, e.g. curl --unix-socket /tmp/osprey.sock http://localhost/")),
    components(schemas(super::fault::FaultBody)),
)]
struct Frame;

/// The document's frame: info, server, the error schema.
pub fn base() -> OpenApi {
    let mut document = Frame::openapi();
    // Osprey's version, not utoipa's default (the crate's, which is the same today).
    document.info.version = env!("CARGO_PKG_VERSION").to_string();
    document
}

/// The `{id}` path parameter of the routes that name an iothread, a drive or a group.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PathId {
    /// The id from the config or the PUT that made it (`io0`, `disk0`, `tenant`).
    #[allow(dead_code)] // Read by the document, not by code.
    id: String,
}

/// `(METHOD, path)` for every operation of `document`, sorted.
pub fn operations(document: &OpenApi) -> Vec<(String, String)> {
    let json = serde_json::to_value(document).unwrap_or_default();
    let mut out = Vec::new();
    if let Some(paths) = json["paths"].as_object() {
        for (path, item) in paths {
            for method in item.as_object().into_iter().flat_map(|i| i.keys()) {
                if method != "parameters" && method != "summary" && method != "description" {
                    out.push((method.to_ascii_uppercase(), path.clone()));
                }
            }
        }
    }
    out.sort();
    out
}

/// `document` as `docs/api/openapi.json` holds it: pretty JSON and a final newline.
pub fn render(document: &OpenApi) -> String {
    let mut text = document.to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}
