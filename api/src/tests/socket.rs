//! The socket's life: its mode, stale files, refusal when in use, idle clients, load, shutdown.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::harness::{body_json, Fake, TempDir};
use crate::command::Submit;
use crate::server::{self, HEADER_READ_TIMEOUT};
use crate::ApiServerError;

fn unused_submit() -> Submit {
    Arc::new(|_request| {})
}

#[test]
fn socket_is_owner_only_and_removed_on_drop() {
    let fake = Fake::start();
    let mode = std::fs::metadata(&fake.socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let socket = fake.socket.clone();
    assert_eq!(fake.server.socket(), socket.as_path());
    drop(fake.server);
    assert!(!socket.exists(), "the socket file outlives the server");
}

#[test]
fn shutdown_stops_serving() {
    let fake = Fake::start();
    assert_eq!(fake.get("/").status, 200);
    fake.server.shutdown();
    fake.server.shutdown();
    let e = UnixStream::connect(&fake.socket).expect_err("nobody listens");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

#[test]
fn a_reply_sent_as_the_server_stops_is_still_delivered() {
    let dir = TempDir::new();
    let path = dir.path("api.sock");
    let (replied, on_reply) = std::sync::mpsc::channel();
    // Like the VM: answer Shutdown, then stop the server at once.
    let submit: Submit = Arc::new(move |request| {
        let _ = request.reply.send(Ok(crate::command::Reply::Done));
        let _ = replied.send(());
    });
    let server = server::start(&path, submit).expect("start");
    let _idle = UnixStream::connect(&path).expect("an idle client does not hold up shutdown");
    let client_path = path.clone();
    let client = std::thread::spawn(move || {
        let body = Some(r#"{"action_type": "Shutdown"}"#);
        crate::client::request(&client_path, "PUT", "/actions", body)
    });
    on_reply
        .recv()
        .expect("the request reached the control side");
    let started = Instant::now();
    server.shutdown();
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    let (status, body) = client.join().expect("thread").expect("response");
    assert_eq!((status, body.as_str()), (204, ""));
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = TempDir::new();
    let path = dir.path("api.sock");
    drop(UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let server = server::start(&path, unused_submit()).expect("replaces the stale socket");
    assert!(UnixStream::connect(&path).is_ok());
    drop(server);
}

#[test]
fn a_socket_in_use_is_refused_and_left_alone() {
    let dir = TempDir::new();
    let path = dir.path("api.sock");
    let other = UnixListener::bind(&path).expect("bind");
    let e = server::start(&path, unused_submit()).expect_err("in use");
    assert!(matches!(e, ApiServerError::InUse { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "API socket {}: socket in use by another process",
            path.display()
        )
    );
    let _client = UnixStream::connect(&path).expect("the other process still listens");
    assert!(other.accept().is_ok());
}

#[test]
fn other_path_problems_name_the_path() {
    let dir = TempDir::new();
    let file = dir.path("not-a-socket");
    std::fs::write(&file, "keep me").expect("write");
    let e = server::start(&file, unused_submit()).expect_err("not a socket");
    assert_eq!(
        e.to_string(),
        format!(
            "API socket {}: the path exists and is not a socket",
            file.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&file).expect("kept"), "keep me");
    let missing = dir.path("no/such/dir/api.sock");
    let e = server::start(&missing, unused_submit()).expect_err("no dir");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("API socket {}: ", missing.display())),
        "{text}"
    );
}

#[test]
fn a_silent_client_is_dropped_after_the_header_timeout() {
    let fake = Fake::start();
    let started = Instant::now();
    let mut silent = UnixStream::connect(&fake.socket).expect("connect");
    let mut half = UnixStream::connect(&fake.socket).expect("connect");
    half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    // Others are served meanwhile.
    for _ in 0..5 {
        assert_eq!(fake.get("/iothreads/io0").status, 200);
    }
    silent
        .set_read_timeout(Some(HEADER_READ_TIMEOUT * 3))
        .expect("timeout");
    let mut buf = [0u8; 64];
    // EOF (or a reset): the server hung up on its own, before our own read timeout.
    let n = silent.read(&mut buf).unwrap_or(0);
    let waited = started.elapsed();
    assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&buf[..n]));
    assert!(
        waited >= HEADER_READ_TIMEOUT - Duration::from_millis(100),
        "{waited:?}"
    );
    assert!(waited < HEADER_READ_TIMEOUT * 2, "{waited:?}");
    half.set_read_timeout(Some(HEADER_READ_TIMEOUT))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = half.read_to_end(&mut rest);
    assert!(
        !String::from_utf8_lossy(&rest).contains("200 OK"),
        "{rest:?}"
    );
    assert_eq!(body_json(&fake.get("/"))["name"], "osprey");
}

#[test]
fn two_hundred_concurrent_requests_are_all_answered() {
    let fake = Arc::new(Fake::start());
    let barrier = Arc::new(Barrier::new(200));
    let threads: Vec<_> = (0..200)
        .map(|i| {
            let (fake, barrier) = (fake.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                if i % 2 == 0 {
                    fake.get("/iothreads/io0")
                } else {
                    fake.json("PATCH", "/iothreads/io0", r#"{"max_batch": 8}"#)
                }
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t.join().expect("thread");
        if i % 2 == 0 {
            assert_eq!(r.status, 200, "request {i}: {r:?}");
            assert_eq!(body_json(&r)["max_batch"], 32, "request {i}");
        } else {
            assert_eq!(r.status, 204, "request {i}: {r:?}");
            assert_eq!(r.body, "", "request {i}");
        }
    }
    assert_eq!(fake.commands().len(), 200);
}

#[test]
fn a_hook_that_fails_on_the_api_thread_hands_back_its_error() {
    use crate::sandbox::SandboxError;
    use crate::server::ApiHookError;
    let fake = Fake::start();
    let r = fake.server.run_on_thread(Box::new(|| Ok(())));
    assert!(r.is_ok(), "{r:?}");
    let r = fake
        .server
        .run_on_thread(Box::new(|| Err(SandboxError::NotStrict("no".into()))));
    assert!(
        matches!(r, Err(ApiHookError::Failed(SandboxError::NotStrict(ref m))) if m == "no"),
        "{r:?}"
    );
    fake.server.shutdown();
    let r = fake.server.run_on_thread(Box::new(|| Ok(())));
    assert!(matches!(r, Err(ApiHookError::Stopped)), "{r:?}");
}
