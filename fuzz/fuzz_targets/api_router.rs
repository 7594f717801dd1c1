//! The API router (`vmm::api::routes::router`) on arbitrary method, path, headers and body,
//! driven in-process with `tower::ServiceExt::oneshot` on a current-thread tokio runtime. The
//! control thread is the fake API controller (`vmm::test_utils::fake_control::inline`), which
//! answers every command at once with a canned reply.
//!
//! Input: byte 0 = flags (bit 0: the request body, parsed as JSON, is also rendered as a
//! `GET /metrics` snapshot, so the Prometheus renderer sees arbitrary JSON; bit 1: the fake drops the reply channel instead of
//! answering); byte 1 = method (GET, PUT, PATCH, POST, DELETE, HEAD, OPTIONS, or a custom token);
//! then `path\n`, `name: value\n` header lines up to an empty line, and the body.
//! Checks: no panic; every response finishes; every error response (>= 400) is a JSON
//! `{"fault_message": "..."}` body, the API's documented error shape (HEAD responses: JSON
//! content type and an empty body).
//!
//! The body is `vmm::test_utils::fuzz::api_router::run` (the `test-utils` feature),
//! shared with the workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vmm::test_utils::fuzz::api_router::run(data));
