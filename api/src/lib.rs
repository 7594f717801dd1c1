//! The REST API: HTTP/1.1 with JSON bodies on a Unix socket, served on its own thread, turning
//! each request into a [`command::ApiCommand`] for the control thread, which owns the devices.
//!
//! - [`server`]: the thread, the runtime and the connections ([`server::start`]), at most a cap
//!   of them at once ([`connections`]);
//! - [`socket`]: binding the socket (0600, stale-file replacement);
//! - [`routes`]: the route table and handlers, [`configure`]: the pre-boot PUTs,
//!   [`unsupported`]: Firecracker's routes Osprey lacks; [`body`]: request bodies; [`respond`]: waiting
//!   for the control thread; [`replies`]: the typed answers; [`fault`]: `{"fault_message": …}`
//!   errors; [`malformed`]: the same body for requests hyper cannot parse;
//! - [`openapi`]: the OpenAPI document's frame and rendering (docs/api/openapi.json);
//! - [`prometheus`]: the text-format view of `GET /metrics`;
//! - [`client`]: the small synchronous client behind `osprey api`;
//! - `conformance` (tests only): answers checked against the OpenAPI document.
//!
//! `GET /metrics` JSON, produced by the control thread, is [`replies::MetricsReport`].
//! The endpoints are described in `docs/api/openapi.json`.

pub mod body;
pub mod client;
pub mod command;
pub mod configure;
#[cfg(any(test, feature = "test-utils"))]
pub mod conformance;
pub mod connections;
pub mod fault;
pub mod malformed;
pub mod openapi;
pub mod prometheus;
pub mod replies;
pub mod respond;
pub mod routes;
pub mod server;
pub mod snapshot;
pub mod unsupported;

pub use server::{start, ApiServer};
pub use socket::ApiServerError;
/// The socket file (it lives below, where start-up's preflight checks it too).
pub use vmm_config::socket;

// The types the API's commands and replies carry, from the crate below (paths as in the VMM).
pub(crate) use vmm_config::{
    config, field_update, instance, logger, metrics, net, rate_limit, sandbox,
};

#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;

#[cfg(test)]
mod tests;
