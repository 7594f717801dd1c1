//! The API router (`vmm::api::routes::router`) on arbitrary method, path, headers and body,
//! driven in-process with `tower::ServiceExt::oneshot` on a current-thread tokio runtime. The
//! control thread is a fake `Submit` that answers every command at once with a canned reply.
//!
//! Input: byte 0 = flags (bit 0: the metrics reply is the request body parsed as JSON, so the
//! Prometheus renderer sees arbitrary JSON; bit 1: the fake drops the reply channel instead of
//! answering); byte 1 = method (GET, PUT, PATCH, POST, DELETE, HEAD, OPTIONS, or a custom token);
//! then `path\n`, `name: value\n` header lines up to an empty line, and the body.
//! Checks: no panic; every response finishes; every error response (>= 400) is a JSON
//! `{"fault_message": "..."}` body, the API's documented error shape (HEAD responses: JSON
//! content type and an empty body).
//!
//! The body lives in `fuzz/targets/api_router.rs`, shared with the workspace test that replays every
//! kept input (`tests/fuzz_regressions.rs`).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::api_router::run(data));
