//! `docs/api/openapi.json` is the generated document ([`crate::routes::document`]), kept
//! current by `OSPREY_BLESS=1 cargo test -p api --lib openapi`; the router serves exactly its
//! operations, its request examples are accepted, every `{id}` is declared, and the answers
//! conform to it ([`crate::conformance`]; tests/api.rs and tests/preboot.rs check a live
//! VMM's).

use std::collections::BTreeSet;

use serde_json::Value;

use super::harness::Fake;
use crate::conformance;
use crate::openapi::{operations, render};
use crate::routes::{document, routes};

const METHODS: [&str; 5] = ["GET", "PUT", "PATCH", "POST", "DELETE"];
const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api/openapi.json");

fn spec() -> Value {
    serde_json::to_value(document()).expect("the document as JSON")
}

/// A concrete path for a template (`{id}` → an id the fake knows).
fn concrete(path: &str) -> String {
    if path.starts_with("/drives/") {
        path.replace("{id}", "disk0")
    } else if path.starts_with("/network-interfaces/") {
        path.replace("{id}", "eth0")
    } else if path.starts_with("/rate-limit-groups/") {
        path.replace("{id}", "tenant")
    } else {
        path.replace("{id}", "io0")
    }
}

#[test]
fn the_openapi_file_is_the_generated_document() {
    let generated = render(&document());
    if std::env::var_os("OSPREY_BLESS").is_some() {
        std::fs::write(FILE, &generated).unwrap_or_else(|e| panic!("{FILE}: {e}"));
        return;
    }
    let on_disk = std::fs::read_to_string(FILE).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/api/openapi.json is stale: run `OSPREY_BLESS=1 cargo test -p api --lib openapi`"
    );
}

#[test]
fn the_router_serves_exactly_the_documented_operations() {
    let spec = spec();
    assert!(spec["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.")));
    let documented: BTreeSet<(String, String)> = routes().iter().cloned().collect();
    assert_eq!(
        documented,
        operations(&document()).into_iter().collect::<BTreeSet<_>>()
    );
    for (method, path) in [("GET", "/"), ("PUT", "/actions"), ("PUT", "/vsock")] {
        assert!(
            documented.contains(&(method.to_string(), path.to_string())),
            "{method} {path}"
        );
    }

    // Each pair answers (not 404/405), other methods 405.
    let fake = Fake::start();
    let paths: BTreeSet<&str> = documented.iter().map(|(_, p)| p.as_str()).collect();
    for path in paths {
        for method in METHODS {
            let served = documented.contains(&(method.to_string(), path.to_string()));
            let r = fake.json(method, &concrete(path), "{}");
            if served {
                assert!(![404, 405].contains(&r.status), "{method} {path}: {r:?}");
            } else {
                assert_eq!(r.status, 405, "{method} {path}: {r:?}");
            }
        }
    }
}

#[test]
fn every_request_example_is_accepted() {
    let spec = spec();
    let fake = Fake::start();
    let mut count = 0;
    for (method, path) in operations(&document()) {
        let op = &spec["paths"][&path][method.to_ascii_lowercase()];
        let Some(examples) =
            op["requestBody"]["content"]["application/json"]["examples"].as_object()
        else {
            continue;
        };
        for (name, example) in examples {
            let body = example["value"].to_string();
            // Accepted by the HTTP layer: it reaches the control thread (the fake answers
            // Resume with 409 as a running VM does, and refuses the pre-boot PUTs with 400).
            let before = fake.commands().len();
            let r = fake.json(&method, &concrete(&path), &body);
            assert!(
                [204, 400, 409].contains(&r.status),
                "{method} {path} {name}: {r:?}"
            );
            assert_eq!(
                fake.commands().len(),
                before + 1,
                "{method} {path} {name}: refused before the control thread: {r:?}"
            );
            count += 1;
        }
    }
    // PATCH iothread 4, PUT iothread 1, PATCH drive 5 (a file swap), PUT drive 1, PATCH group 2,
    // PUT group 1, PUT /actions 4, PATCH /vm 2, machine-config 2, boot-source 1, logger 1,
    // metrics 1, vsock 1, snapshot/create 1, snapshot/load 1, PUT and PATCH network-interfaces 1 each.
    assert_eq!(count, 30);
}

#[test]
fn every_schema_reference_resolves_and_errors_are_faults() {
    let spec = spec();
    let schemas = spec["components"]["schemas"].as_object().expect("schemas");
    for name in [
        "Fault",
        "InstanceInfo",
        "IoThread",
        "Drive",
        "Metrics",
        "VmConfig",
    ] {
        assert!(schemas.contains_key(name), "schema {name} missing");
    }
    let text = spec.to_string();
    for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = r.split('"').next().unwrap_or_default();
        assert!(schemas.contains_key(name), "dangling $ref {name}");
    }
    for (method, path) in operations(&document()) {
        let responses = &spec["paths"][&path][method.to_ascii_lowercase()]["responses"];
        for (status, response) in responses.as_object().expect("responses") {
            let code: u16 = status.parse().expect("numeric status");
            if code >= 400 {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/Fault",
                    "{method} {path} {status}"
                );
            }
        }
    }
}

#[test]
fn every_path_parameter_is_declared() {
    let missing = conformance::undeclared_path_parameters(&conformance::document_json());
    assert!(
        missing.is_empty(),
        "undeclared path parameters: {missing:#?}"
    );
}

/// Every GET the fake controller answers, and a PUT, a PATCH and a refusal of each kind, conform
/// to the document (the fake's drive has a limiter with no buckets: its tokens are `null`).
#[test]
fn the_answers_conform_to_the_document() {
    let doc = conformance::document_json();
    let fake = Fake::start();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (method, path) in operations(&document()) {
        if method != "GET" {
            continue;
        }
        let path = concrete(&path);
        let r = fake.get(&path);
        failures.extend(conformance::check_answer(
            &doc, "GET", &path, r.status, &r.body,
        ));
        checked += 1;
    }
    for (method, path, body) in [
        ("PATCH", "/iothreads/io0", r#"{"max_batch": 8}"#),
        ("PATCH", "/iothreads/io0", r#"{"max_batch": -8}"#),
        ("PATCH", "/iothreads/io9", r#"{"max_batch": 8}"#),
        ("PUT", "/actions", r#"{"action_type": "Pause"}"#),
        ("PUT", "/vsock", r#"{"guest_cid": 3}"#),
        ("DELETE", "/drives/disk0", ""),
    ] {
        let r = fake.json(method, path, body);
        failures.extend(conformance::check_answer(
            &doc, method, path, r.status, &r.body,
        ));
        checked += 1;
    }
    assert!(checked > 15, "{checked}");
    assert!(failures.is_empty(), "{failures:#?}");
}
