//! Clients that send slowly or answer early: a body sent in a second write still gets the
//! early answers (400, 404, 405); a body that stops coming is cut after the body timeout; past
//! the connection cap the oldest unfinished connection makes room, so a normal client is served.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::harness::{body_json, Fake};
use crate::server::ServerLimits;

/// Writes the head of a request with a `Content-Length: body.len()` body, waits, writes the
/// body, and reads the whole answer (an error reading it, a reset, is an error here).
fn body_in_a_second_write(socket: &Path, method: &str, path: &str, body: &[u8]) -> String {
    let mut s = UnixStream::connect(socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("head");
    std::thread::sleep(Duration::from_millis(30));
    if let Err(e) = s.write_all(body) {
        return format!("writing the body: {e}");
    }
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => String::from_utf8_lossy(&answer).into_owned(),
        Err(e) => format!(
            "reading the answer: {e} (after {:?})",
            String::from_utf8_lossy(&answer)
        ),
    }
}

#[test]
fn early_answers_reach_a_client_that_sends_its_body_late() {
    let fake = Fake::start();
    let body = br#"{"guest_cid": 3, "uds_path": "/tmp/v.sock"}"#;
    let mut wrong = Vec::new();
    for i in 0..10 {
        for (method, path, status) in [
            ("PUT", "/vsock", "400"),
            ("PUT", "/no-such-path", "404"),
            ("DELETE", "/iothreads/io0", "405"),
        ] {
            let answer = body_in_a_second_write(&fake.socket, method, path, body);
            if !answer.starts_with(&format!("HTTP/1.1 {status} "))
                || !answer.contains("fault_message")
            {
                wrong.push(format!("round {i}: {method} {path}: {answer}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{} of 30 lost: {wrong:#?}", wrong.len());
}

fn limits(max_connections: usize) -> ServerLimits {
    ServerLimits {
        body_read_timeout: Duration::from_millis(300),
        max_connections,
        ..ServerLimits::default()
    }
}

/// A request whose head says 1000 bytes of body and which sends one.
fn slow_body(socket: &Path) -> UnixStream {
    let mut s = UnixStream::connect(socket).expect("connect");
    s.write_all(
        b"PUT /actions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{",
    )
    .expect("write");
    s
}

#[test]
fn a_body_that_stops_coming_is_cut_after_the_body_timeout() {
    let fake = Fake::start_with(limits(64));
    let started = Instant::now();
    let mut s = slow_body(&fake.socket);
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let waited = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408 "),
        "{answer:?} after {waited:?}"
    );
    assert!(answer.contains("request body"), "{answer}");
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert!(fake.commands().is_empty(), "{:?}", fake.commands());
}

#[test]
fn past_the_cap_the_oldest_unfinished_connection_makes_room() {
    let cap = 8;
    let fake = Fake::start_with(ServerLimits {
        body_read_timeout: Duration::from_secs(30),
        header_read_timeout: Duration::from_secs(30),
        ..limits(cap)
    });
    let mut slow: Vec<UnixStream> = (0..3 * cap).map(|_| slow_body(&fake.socket)).collect();
    // A normal client is served at once, however many slow ones came first.
    for _ in 0..5 {
        let started = Instant::now();
        let r = fake.get("/iothreads/io0");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(body_json(&r)["max_batch"], 32);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    // The server closed all but `cap` of the slow ones, the oldest first.
    let mut closed = Vec::new();
    for (i, s) in slow.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => closed.push(i),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed.push(i),
            Ok(n) => panic!("slow {i} got {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(_) => {} // still open: our read timed out
        }
    }
    assert!(closed.len() >= 2 * cap, "closed: {closed:?}");
    assert_eq!(closed[..2 * cap], (0..2 * cap).collect::<Vec<_>>()[..]);
    assert!(fake
        .commands()
        .iter()
        .all(|c| !matches!(c, crate::command::ApiCommand::Action(_))));
}
