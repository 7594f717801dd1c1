//! Refused requests: each answers a JSON fault and none reaches the control thread.

use super::harness::{assert_fault, body_json, send_raw, Fake};

const PATCH: &str = "/iothreads/io0";

fn patch_fault(fake: &Fake, body: &str) -> String {
    let r = fake.json("PATCH", PATCH, body);
    assert_eq!(r.status, 400, "{body}: {r:?}");
    let v = super::harness::body_json(&r);
    assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{v}");
    v["fault_message"].as_str().expect("message").to_string()
}

/// What a 404 says after the path: the paths there are.
fn paths_hint() -> String {
    format!("; the paths are {}", crate::routes::path_list())
}

#[test]
fn unknown_paths_and_methods() {
    let fake = Fake::start();
    let hint = paths_hint();
    assert!(
        hint.contains(", /machine-config, /metrics,")
            && hint.ends_with(", /vm, /vm/config, /vsock"),
        "{hint}"
    );
    assert_fault(&fake.get("/foo"), 404, &format!("no such path: /foo{hint}"));
    assert_fault(&fake.get("/vm/"), 404, &format!("no such path: /vm/{hint}"));
    assert_fault(&fake.get("/vm"), 405, "method GET not allowed on /vm");
    assert_fault(
        &fake.get("/iothreads/"),
        404,
        &format!("no such path: /iothreads/{hint}"),
    );
    assert_fault(
        &fake.get("/iothreads/io0/x"),
        404,
        &format!("no such path: /iothreads/io0/x{hint}"),
    );
    let r = fake.send("DELETE", PATCH, &[], None);
    assert_fault(&r, 405, "method DELETE not allowed on /iothreads/io0");
    let allow = r.header("allow").unwrap_or_default();
    assert!(allow.contains("GET") && allow.contains("PATCH"), "{allow}");
    assert_fault(
        &fake.json("POST", "/actions", "{}"),
        405,
        "method POST not allowed on /actions",
    );
    assert_fault(
        &fake.get("/actions"),
        405,
        "method GET not allowed on /actions",
    );
    assert_fault(
        &fake.json("POST", "/metrics", "{}"),
        405,
        "method POST not allowed on /metrics",
    );
    // Firecracker's routes for what Osprey lacks: 400, naming it.
    let r = fake.json("PUT", "/balloon", r#"{"amount_mib": 1}"#);
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("balloon device is not supported"), "{r:?}");
    assert!(fake.commands().is_empty(), "{:?}", fake.commands());
}

#[test]
fn malformed_bodies_name_the_field_and_the_reason() {
    let fake = Fake::start();
    let m = patch_fault(&fake, r#"{"poll_max_ns": "#);
    assert!(
        m.starts_with("malformed JSON: EOF while parsing a value"),
        "{m}"
    );
    let m = patch_fault(&fake, "not json");
    assert!(m.starts_with("malformed JSON: expected ident"), "{m}");
    let m = patch_fault(&fake, r#"{"poll_max": 1}"#);
    assert!(
        m.starts_with("poll_max: unknown field `poll_max`, expected one of `poll_max_ns`"),
        "{m}"
    );
    assert_eq!(
        patch_fault(&fake, r#"{"poll_max_ns": -1}"#),
        "poll_max_ns: invalid value: number -1, expected an integer from 0 to 18446744073709551615"
    );
    assert_eq!(
        patch_fault(&fake, r#"{"max_batch": 4294967296}"#),
        "max_batch: invalid value: number 4294967296, expected an integer from 0 to 4294967295"
    );
    let m = patch_fault(&fake, r#"{"poll_max_ns": 18446744073709551616}"#);
    assert!(
        m.starts_with("poll_max_ns: invalid type: number 1.8446744073709552e+19"),
        "{m}"
    );
    assert!(
        m.ends_with("expected an integer from 0 to 18446744073709551615"),
        "{m}"
    );
    assert_eq!(
        patch_fault(&fake, r#"{"poll_grow": "2"}"#),
        "poll_grow: invalid type: string \"2\", expected an integer from 0 to 18446744073709551615"
    );
    assert_eq!(
        patch_fault(&fake, r#"{"poll_policy": "Fast"}"#),
        "poll_policy: unknown variant `Fast`, expected one of `Classic`, `Weighted`, `Adaptive`"
    );
    assert_eq!(
        patch_fault(&fake, "[1]"),
        "expected a JSON object, not an array"
    );
    assert_eq!(
        patch_fault(&fake, ""),
        "request body is empty: expected a JSON object"
    );
    assert_fault(
        &fake.json("PUT", "/actions", r#"{"action_type": "Reboot"}"#),
        400,
        "action_type: unknown variant `Reboot`, expected one of `InstanceStart`, `SendCtrlAltDel`, `FlushMetrics`, `Pause`, `Resume`, `Shutdown`",
    );
    assert_fault(
        &fake.json(
            "PUT",
            "/actions",
            r#"{"action_type": "Pause", "force": true}"#,
        ),
        400,
        "force: unknown field `force`, expected `action_type`",
    );
    assert!(fake.commands().is_empty(), "{:?}", fake.commands());
}

/// Firecracker ignores Content-Type, and its guides' curl lines send `--data` without `-H`
/// (curl then says `application/x-www-form-urlencoded`): a body is JSON whatever the header
/// says, and refused for not being JSON whatever the header says.
#[test]
fn content_type_is_ignored_the_body_must_be_json() {
    let fake = Fake::start();
    let body = Some(&b"{\"poll_max_ns\": 0}"[..]);
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    for headers in [
        &[][..],
        &form[..],
        &[("Content-Type", "text/plain")][..],
        &[("Content-Type", "application/octet-stream")][..],
        &[("Content-Type", "application/merge-patch+json")][..],
    ] {
        let r = fake.send("PATCH", PATCH, headers, body);
        assert_eq!(r.status, 204, "{headers:?}: {r:?}");
        let r = fake.send(
            "PUT",
            "/actions",
            headers,
            Some(b"{\"action_type\": \"Pause\"}"),
        );
        assert_eq!(r.status, 204, "{headers:?}: {r:?}");
    }
    assert_eq!(fake.commands().len(), 10, "{:?}", fake.commands());
    // Not JSON: refused, whatever the header says (JSON included).
    for headers in [&form[..], &[("Content-Type", "application/json")][..]] {
        let r = fake.send("PATCH", PATCH, headers, Some(b"poll_max_ns=0"));
        assert_eq!(r.status, 400, "{r:?}");
        let message = body_json(&r)["fault_message"]
            .as_str()
            .expect("message")
            .to_string();
        assert!(message.starts_with("malformed JSON: "), "{message}");
    }
    assert_eq!(fake.commands().len(), 10, "{:?}", fake.commands());
}

#[test]
fn bodies_over_64_kib_are_refused() {
    let fake = Fake::start();
    // Valid JSON, 100 KiB of it, declared with Content-Length.
    let big = format!("{{\"poll_max_ns\": 0{}}}", " ".repeat(100 * 1024));
    let r = fake.json("PATCH", PATCH, &big);
    assert_fault(&r, 413, "request body over 65536 bytes");
    // The same sent chunked, with no length declared.
    let mut chunked = Vec::new();
    for piece in big.as_bytes().chunks(8192) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut raw = format!(
        "PATCH {PATCH} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    raw.extend_from_slice(&chunked);
    let r = super::harness::send_raw(&fake.socket, &raw);
    assert_fault(&r, 413, "request body over 65536 bytes");
    // Just under the limit is fine.
    let fits = format!("{{\"poll_max_ns\": 0{}}}", " ".repeat(60 * 1024));
    assert_eq!(fake.json("PATCH", PATCH, &fits).status, 204);
    assert_eq!(fake.commands().len(), 1, "{:?}", fake.commands());
}

/// Requests hyper cannot parse get the same JSON fault body as every other error.
#[test]
fn malformed_requests_get_a_json_fault() {
    let fake = Fake::start();
    let socket = fake.socket.clone();
    let cases: [(&[u8], u16); 4] = [
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
            400,
        ),
        (b"garbage\r\n\r\n", 400),
        (
            b"PATCH /iothreads/io0 HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
            400,
        ),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400),
    ];
    for (raw, status) in cases {
        let r = send_raw(&socket, raw);
        assert_eq!(r.status, status, "{}: {r:?}", String::from_utf8_lossy(raw));
        assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
        let message = body_json(&r)["fault_message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_default();
        assert!(message.starts_with("malformed HTTP request"), "{r:?}");
    }
    assert!(
        fake.commands().is_empty(),
        "nothing reached the control thread"
    );
    // The server still serves well-formed requests.
    assert_eq!(fake.get("/").status, 200);
}
