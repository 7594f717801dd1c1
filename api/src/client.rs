//! A synchronous HTTP/1.1 client over a Unix socket, on hyper's client (the HTTP library the
//! server uses): what `osprey api` and the integration tests use to talk to a running VMM. One
//! request per connection, on a small current-thread tokio runtime.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// How long to wait for the server; it answers within its own 5 s reply timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request got no HTTP response.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket, or it does not exist.
    #[error(
        "Cannot connect to the API socket {}: {source} (is a VM running with --api-sock or \
         api.socket at that path?)",
        path.display()
    )]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The exchange failed (the connection broke, or the response is not HTTP).
    #[error("API socket {}: {source}", path.display())]
    Http {
        /// The socket path.
        path: PathBuf,
        /// hyper's error.
        source: hyper::Error,
    },
    /// No complete response within the timeout.
    #[error("API socket {}: no response within {IO_TIMEOUT:?}", path.display())]
    Timeout {
        /// The socket path.
        path: PathBuf,
    },
    /// The request could not be built (a method or header the HTTP library refuses).
    #[error("HTTP request: {0}")]
    Build(#[source] hyper::http::Error),
    /// The client's runtime could not start.
    #[error("HTTP request: starting the client runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// An HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` (with a JSON `body`, if any) to the API on `socket`; returns the status
/// and the body.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), ClientError> {
    let mut headers = Vec::new();
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    let response = send(socket, method, path, &headers, body.map(str::as_bytes))?;
    Ok((response.status, response.body))
}

/// Sends one request with `headers` (hyper adds `Host`-less HTTP/1.1 framing and
/// `Content-Length`) and reads the whole response.
pub fn send(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Response, ClientError> {
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "localhost");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
        .map_err(ClientError::Build)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(ClientError::Runtime)?;
    let exchange = exchange(socket, request);
    runtime.block_on(async {
        tokio::time::timeout(IO_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Timeout {
                    path: socket.to_path_buf(),
                })
            })
    })
}

async fn exchange(
    socket: &Path,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Response, ClientError> {
    let http = |source| ClientError::Http {
        path: socket.to_path_buf(),
        source,
    };
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| ClientError::Connect {
            path: socket.to_path_buf(),
            source,
        })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    // The connection is driven alongside the request; its own error shows in the response's.
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(http)?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(http)?
        .to_bytes();
    driver.abort();
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// What `osprey api` prints for a response, and its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// For stdout: the body, pretty-printed when it is JSON.
    pub stdout: String,
    /// For stderr: `osprey: error: HTTP <status>: <fault_message>` when not 2xx.
    pub stderr: Option<String>,
    /// 0 for 2xx, 1 otherwise.
    pub exit: i32,
}

/// The [`Outcome`] of a response.
pub fn outcome(status: u16, body: &str) -> Outcome {
    let json = serde_json::from_str::<serde_json::Value>(body).ok();
    let stdout = match &json {
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_else(|_| body.to_string()),
        None => body.trim_end().to_string(),
    };
    if (200..300).contains(&status) {
        return Outcome {
            stdout,
            stderr: None,
            exit: 0,
        };
    }
    let message = json
        .as_ref()
        .and_then(|v| v.get("fault_message"))
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| body.trim().to_string());
    Outcome {
        stdout,
        stderr: Some(format!("osprey: error: HTTP {status}: {message}")),
        exit: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_pretty_prints_and_reports_faults() {
        let ok = outcome(200, r#"{"a":1}"#);
        assert_eq!(
            (ok.stdout.as_str(), ok.stderr, ok.exit),
            ("{\n  \"a\": 1\n}", None, 0)
        );
        assert_eq!(outcome(204, "").exit, 0);
        let text = outcome(200, "osprey_vm_vcpus 2\n");
        assert_eq!(text.stdout, "osprey_vm_vcpus 2");
        let bad = outcome(404, r#"{"fault_message":"no iothread io9"}"#);
        assert_eq!(
            bad.stderr.as_deref(),
            Some("osprey: error: HTTP 404: no iothread io9")
        );
        assert_eq!(bad.exit, 1);
    }
}
