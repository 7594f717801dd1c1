//! A JSON body for the errors hyper answers by itself. When a request cannot be parsed (a bad
//! request line, `Content-Length: -1`, headers too large) hyper writes a bodiless `400`/`431`
//! and closes, before any route runs. [`FaultBodyStream`] wraps the connection and replaces such
//! a bodiless error head with the same status and a `{"fault_message": …}` body, so every error
//! the API gives carries one, as docs/api promises. Every other write passes through untouched.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose bodiless error responses get a JSON fault body.
#[derive(Debug)]
pub struct FaultBodyStream<S> {
    inner: S,
    /// A replacement response still to be written, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> FaultBodyStream<S> {
    /// Wraps a connection.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

/// If `buf` is a whole response head with an error status and `content-length: 0`, the response
/// to send instead: the same status line, a JSON fault body, and `connection: close`.
fn replacement(buf: &[u8]) -> Option<Vec<u8>> {
    let head = std::str::from_utf8(buf).ok()?;
    if !head.ends_with("\r\n\r\n") {
        return None;
    }
    let status_line = head.lines().next()?;
    let mut words = status_line.splitn(3, ' ');
    if words.next()? != "HTTP/1.1" {
        return None;
    }
    let code: u16 = words.next()?.parse().ok()?;
    if code < 400 {
        return None;
    }
    let bodiless = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("content-length: 0"));
    if !bodiless {
        return None;
    }
    let message = match code {
        400 => "malformed HTTP request: the request line or a header (e.g. Content-Length) \
                cannot be parsed; send HTTP/1.1 with a JSON body"
            .to_string(),
        431 => "request headers too large".to_string(),
        414 => "request path too long".to_string(),
        505 => "HTTP version not supported: send HTTP/1.1".to_string(),
        _ => format!(
            "the request cannot be served: {}",
            words.next().unwrap_or("error")
        ),
    };
    let body = serde_json::json!({ "fault_message": message }).to_string();
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> FaultBodyStream<S> {
    /// Writes what is left of a replacement; ready once nothing is pending.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FaultBodyStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FaultBodyStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(bytes) = replacement(buf) {
            this.pending = Some((bytes, 0));
            // hyper's bytes are taken; the replacement goes out now or at the next flush.
            if let Poll::Ready(Err(e)) = this.poll_pending(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodiless_error_heads_are_replaced() {
        let canned = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let r = String::from_utf8(replacement(canned).expect("replaced")).expect("utf8");
        assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{r}");
        let (head, body) = r.split_once("\r\n\r\n").expect("head and body");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).expect("json body");
        assert!(v["fault_message"]
            .as_str()
            .expect("message")
            .starts_with("malformed HTTP request"));
        for kept in [
            b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n".as_slice(),
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert!(
                replacement(kept).is_none(),
                "{}",
                String::from_utf8_lossy(kept)
            );
        }
    }

    #[tokio::test]
    async fn a_replaced_head_reaches_the_peer_whole() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(16);
        let mut s = FaultBodyStream::new(a);
        let canned = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.expect("read");
            got
        });
        s.write_all(canned).await.expect("write");
        s.shutdown().await.expect("shutdown");
        drop(s);
        let got = String::from_utf8(reader.await.expect("join")).expect("utf8");
        assert!(
            got.ends_with(r#"{"fault_message":"request headers too large"}"#),
            "{got}"
        );
    }
}
