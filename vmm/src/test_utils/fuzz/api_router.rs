//! The API router (`vmm::api::routes::router`) on arbitrary method, path, headers and body,
//! driven in-process with `tower::ServiceExt::oneshot` on a current-thread tokio runtime. The
//! control thread is the fake controller ([`fake_control::inline`]): it answers every command at
//! once, on the caller's thread, with its canned reply.
//!
//! Input: byte 0 = flags (bit 0: the request body, parsed as JSON, is also rendered as a
//! `GET /metrics` snapshot, so the Prometheus renderer sees arbitrary JSON; bit 1: the fake drops the reply channel instead of
//! answering); byte 1 = method (GET, PUT, PATCH, POST, DELETE, HEAD, OPTIONS, or a custom token);
//! then `path\n`, `name: value\n` header lines up to an empty line, and the body.
//! Checks: no panic; every response finishes; every error response (>= 400) is a JSON
//! `{"fault_message": "..."}` body, the API's documented error shape (HEAD responses: JSON
//! content type and an empty body).

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Method, Request};
use serde_json::Value;
use tower::ServiceExt;

use crate::api::routes::{router, ApiState};
use crate::test_utils::fake_control;

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
}

fn split_line<'a>(rest: &mut &'a [u8]) -> &'a [u8] {
    match rest.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let line = &rest[..i];
            *rest = &rest[i + 1..];
            line
        }
        None => std::mem::take(rest),
    }
}

/// One input.
pub fn run(data: &[u8]) {
    let [flags, method, ref rest @ ..] = *data else {
        return;
    };
    let mut rest: &[u8] = rest;
    let method = match method % 8 {
        0 => Method::GET,
        1 => Method::PUT,
        2 => Method::PATCH,
        3 => Method::POST,
        4 => Method::DELETE,
        5 => Method::HEAD,
        6 => Method::OPTIONS,
        _ => match Method::from_bytes(split_line(&mut rest)) {
            Ok(m) => m,
            Err(_) => return,
        },
    };
    let path = split_line(&mut rest);
    let is_head = method == Method::HEAD;
    let mut builder = Request::builder().method(method);
    match axum::http::Uri::try_from(path) {
        Ok(uri) => builder = builder.uri(uri),
        Err(_) => return,
    }
    for _ in 0..32 {
        let line = split_line(&mut rest);
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        builder = builder.header(name, value);
    }
    let body = rest.to_vec();
    let metrics_reply: Option<Value> = if flags & 1 != 0 {
        serde_json::from_slice(&body).ok()
    } else {
        None
    };
    let drop_reply = flags & 2 != 0;
    let Ok(request) = builder.body(Body::from(body)) else {
        return;
    };
    if let Some(metrics) = &metrics_reply {
        // Typed replies cannot carry arbitrary JSON: the renderer gets it directly.
        let _ = crate::api::prometheus::render(metrics);
    }
    let submit = fake_control::inline(drop_reply);
    let app = router(ApiState {
        submit,
        reply_timeout: Duration::from_secs(1),
        max_body: 4096,
    });
    RUNTIME.with(|rt| {
        rt.block_on(async move {
            let response = app.oneshot(request).await.expect("infallible");
            let status = response.status();
            let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
            let body = axum::body::to_bytes(response.into_body(), 1 << 24)
                .await
                .expect("body");
            if is_head {
                // axum drops the body of a HEAD response (RFC 9110); only the headers remain.
                assert!(body.is_empty(), "HEAD response with a body");
            }
            if status.as_u16() >= 400 {
                assert_eq!(
                    content_type.as_ref().and_then(|v| v.to_str().ok()),
                    Some("application/json"),
                    "error {status} without a JSON content type: {body:?}"
                );
                if is_head {
                    return;
                }
                let v: Value = serde_json::from_slice(&body)
                    .unwrap_or_else(|e| panic!("error {status} body is not JSON ({e}): {body:?}"));
                assert!(
                    v.get("fault_message").is_some_and(Value::is_string),
                    "error {status}: {v}"
                );
            }
        })
    });
}
