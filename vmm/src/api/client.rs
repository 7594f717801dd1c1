//! A small synchronous HTTP/1.1 client over a Unix socket: what `osprey api` and the
//! integration tests use to talk to a running VMM. One request per connection.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long to wait for the server; it answers within its own 5 s reply timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request got no HTTP response.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket, or it does not exist.
    #[error("Cannot connect to the API socket {}: {source}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Reading the response failed.
    #[error("API socket {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The bytes that came back are not an HTTP response.
    #[error("Malformed HTTP response: {0}")]
    Response(String),
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
    let raw = format_request(method, path, &headers, body.map(str::as_bytes));
    let response = send_raw(socket, &raw)?;
    Ok((response.status, response.body))
}

/// An HTTP/1.1 request with `Host`, `Connection: close` and `Content-Length` (when there is a
/// body) added to `headers`.
pub fn format_request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body.unwrap_or_default());
    raw
}

/// Writes `raw` bytes to the socket and reads one response. A server that answers before
/// reading the whole request (413) and then closes is handled: its response is still read.
pub fn send_raw(socket: &Path, raw: &[u8]) -> Result<Response, ClientError> {
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.to_path_buf(),
        source,
    })?;
    let io_err = |source| ClientError::Io {
        path: socket.to_path_buf(),
        source,
    };
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(io_err)?;
    let written = stream.write_all(raw);
    let mut received = Vec::new();
    let read = read_response(&mut stream, &mut received);
    match parse(&received, true) {
        Ok(Some(response)) => Ok(response),
        Ok(None) => match (written, read) {
            (Err(e), _) | (_, Err(e)) => Err(io_err(e)),
            _ => Err(ClientError::Response("the response ends early".into())),
        },
        Err(e) => Err(e),
    }
}

/// Reads until EOF, an error, or a complete response.
fn read_response(stream: &mut UnixStream, received: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Ok(Some(_)) = parse(received, false) {
            return Ok(());
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Parses a whole response (everything the server sent); `Ok(None)` when it is cut short.
pub fn parse_response(bytes: &[u8]) -> Result<Option<Response>, ClientError> {
    parse(bytes, true)
}

/// Parses a response; `Ok(None)` while it is incomplete (`eof`: no more bytes will come).
fn parse(bytes: &[u8], eof: bool) -> Result<Option<Response>, ClientError> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..end])
        .map_err(|_| ClientError::Response("the header is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Response(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &bytes[end + 4..];
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let body = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        match dechunk(rest)? {
            Some(body) => body,
            None => return Ok(None),
        }
    } else if let Some(length) = find("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| ClientError::Response(format!("bad Content-Length {length:?}")))?;
        if rest.len() < length {
            return Ok(None);
        }
        rest[..length].to_vec()
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if eof {
        // Delimited by the end of the connection.
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }))
}

/// Decodes a chunked body; `Ok(None)` while it is incomplete.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| ClientError::Response(format!("bad chunk size {size_hex:?}")))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
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
    fn parses_length_chunked_and_partial_responses() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nContent-Type: x\r\n\r\n{}";
        let r = parse_response(r).expect("ok").expect("complete");
        assert_eq!(
            (r.status, r.body.as_str(), r.header("CONTENT-TYPE")),
            (200, "{}", Some("x"))
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n{}").expect("ok"),
            None
        );
        let c =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(c).expect("ok").expect("complete").body,
            "abcd"
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 204 No Content\r\n\r\n")
                .expect("ok")
                .expect("204")
                .body,
            ""
        );
        assert!(parse_response(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn formats_a_request_with_a_body() {
        let raw = format_request(
            "PATCH",
            "/x",
            &[("Content-Type", "application/json")],
            Some(b"{}"),
        );
        assert_eq!(
            String::from_utf8(raw).expect("utf8"),
            "PATCH /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
    }

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
