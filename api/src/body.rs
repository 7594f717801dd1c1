//! Request bodies: the size limit and JSON parsing whose errors name the offending field, all
//! before a command is built (a refused body changes nothing). The Content-Type header is not
//! looked at, as Firecracker does not: its guides' `curl --data` lines send
//! `application/x-www-form-urlencoded`. A body is JSON or it is refused for not being JSON.

use std::pin::Pin;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;

use super::fault::Fault;

/// Largest request body accepted (64 KiB); bigger ones get 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How much of a refused body is read and thrown away before the 413, so a client that writes
/// all of it still reads the answer (a close with its bytes unread would reset the connection).
/// A body declared bigger than this is answered at once, with `Connection: close`.
pub const MAX_DRAINED_BYTES: u64 = 1024 * 1024;

/// The request with its whole body read (at most `limit` bytes, within `timeout` of the headers),
/// before any route runs: so every answer, an early one too (a 404, a 405, a route Osprey does not
/// implement), comes after the body and reaches a client that writes it late; and a body that
/// stops coming costs a slot for `timeout` only. The refusals (413, 408, 400 for a broken
/// chunked body) say `Connection: close`.
pub async fn buffered<B>(
    request: axum::http::Request<B>,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Request, axum::response::Response>
where
    B: HttpBody<Data = axum::body::Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let (parts, mut body) = request.into_parts();
    let declared = declared_length(&parts.headers);
    let read = async {
        if declared.is_some_and(|n| n > MAX_DRAINED_BYTES) {
            return Err(Fault::too_large(limit));
        }
        let mut bytes = Vec::new();
        let mut over = false;
        let mut drained = 0u64;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame
                .map_err(|e| Fault::bad_request(format!("cannot read the request body: {e}")))?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            if !over && bytes.len() + data.len() > limit {
                over = true;
                bytes = Vec::new();
            }
            if over {
                drained += data.len() as u64;
                if drained > MAX_DRAINED_BYTES {
                    break;
                }
            } else {
                bytes.extend_from_slice(data);
            }
        }
        if over {
            return Err(Fault::too_large(limit));
        }
        Ok(bytes)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Ok(Err(fault)) => Err(closing(fault)),
        Err(_elapsed) => Err(closing(Fault::timeout(format!(
            "the request body did not arrive within {} ms of the headers",
            timeout.as_millis()
        )))),
    }
}

/// A response body that holds something (the connection's [`super::connections::Busy`] mark)
/// until hyper has written it and drops it.
#[derive(Debug)]
pub struct Guarded<T> {
    inner: Body,
    _held: T,
}

impl<T> Guarded<T> {
    /// `inner`, holding `held` as long as it lives.
    pub fn new(inner: Body, held: T) -> Self {
        Self { inner, _held: held }
    }
}

impl<T: Unpin> HttpBody for Guarded<T> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// `fault` as a response that closes the connection.
fn closing(fault: Fault) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut response = fault.into_response();
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// Reads the request's body (at most `limit` bytes) and parses it as `T`, whatever its
/// Content-Type says; every refusal is a [`Fault`] (400 or 413).
pub async fn parse_json<T: DeserializeOwned>(request: Request, limit: usize) -> Result<T, Fault> {
    check_declared_length(request.headers(), limit)?;
    let bytes = read_limited(request.into_body(), limit).await?;
    parse_bytes(&bytes)
}

/// Parses a JSON object body, naming the field that is wrong
/// in the JSON's words (`poll_max_ns: invalid value: number -1, expected an integer from 0 to
/// 18446744073709551615`).
pub fn parse_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Fault> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Fault::bad_request(
            "request body is empty: expected a JSON object",
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Fault::bad_request(format!("malformed JSON: {e}")))?;
    if !value.is_object() {
        // serde would read a struct from an array too; the API takes objects only.
        return Err(Fault::bad_request(format!(
            "expected a JSON object, not {}",
            kind(&value)
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let reason = crate::config::words::in_json_words(&e.into_inner().to_string());
        if path == "." {
            Fault::bad_request(reason.to_string())
        } else {
            Fault::bad_request(format!("{path}: {reason}"))
        }
    })
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The body's declared length, if any.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Refuses a body whose declared length is already over the limit, without reading it.
fn check_declared_length(headers: &HeaderMap, limit: usize) -> Result<(), Fault> {
    match declared_length(headers) {
        Some(n) if n > limit as u64 => Err(Fault::too_large(limit)),
        _ => Ok(()),
    }
}

/// Collects the body, stopping with 413 as soon as it passes `limit` bytes (chunked bodies
/// declare no length).
async fn read_limited(mut body: Body, limit: usize) -> Result<Vec<u8>, Fault> {
    let mut bytes = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(bytes),
            Some(Err(e)) => {
                return Err(Fault::bad_request(format!(
                    "cannot read the request body: {e}"
                )))
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if bytes.len() + data.len() > limit {
                        return Err(Fault::too_large(limit));
                    }
                    bytes.extend_from_slice(data);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{ActionRequest, IoThreadUpdate};

    fn message<T: DeserializeOwned + std::fmt::Debug>(body: &str) -> String {
        parse_bytes::<T>(body.as_bytes())
            .expect_err("must be refused")
            .message
    }

    #[test]
    fn errors_name_the_field_without_a_position() {
        assert_eq!(
            message::<IoThreadUpdate>(r#"{"poll_max_ns": -1}"#),
            "poll_max_ns: invalid value: number -1, expected an integer from 0 to 18446744073709551615"
        );
        assert_eq!(
            message::<IoThreadUpdate>(r#"{"poll_weight": 4294967296}"#),
            "poll_weight: invalid value: number 4294967296, expected an integer from 0 to 4294967295"
        );
        assert_eq!(
            message::<IoThreadUpdate>(r#"{"poll_policy": "Fast"}"#),
            "poll_policy: unknown variant `Fast`, expected one of `Classic`, `Weighted`, `Adaptive`"
        );
        assert_eq!(
            message::<ActionRequest>(r#"{"action_type": 3}"#),
            "action_type: invalid type: number 3, expected a string"
        );
    }

    #[test]
    fn unknown_fields_and_syntax_errors_are_named() {
        let m = message::<IoThreadUpdate>(r#"{"poll_max": 1}"#);
        assert!(
            m.starts_with("poll_max: unknown field `poll_max`, expected one of"),
            "{m}"
        );
        let m = message::<IoThreadUpdate>(r#"{"poll_max_ns": 1"#);
        assert!(m.starts_with("malformed JSON: EOF while parsing"), "{m}");
        let m = message::<IoThreadUpdate>("{poll}");
        assert!(m.starts_with("malformed JSON: key must be a string"), "{m}");
        assert_eq!(
            message::<IoThreadUpdate>("  "),
            "request body is empty: expected a JSON object"
        );
        assert_eq!(
            message::<IoThreadUpdate>("[1]"),
            "expected a JSON object, not an array"
        );
        let m = message::<ActionRequest>("{}");
        assert_eq!(m, "missing field `action_type`");
    }
}
