//! `docs/api/openapi.json` matches the router, and its request examples are accepted.

use std::collections::BTreeSet;

use serde_json::Value;

use super::harness::Fake;
use crate::api::body::parse_bytes;
use crate::api::command::{
    ActionRequest, DriveUpdate, GroupUpdate, IoThreadUpdate, VmStateRequest,
};
use crate::api::routes::ROUTES;
use crate::config::{BootSourceConfig, DriveConfig, IoThreadConfig, MachineConfig, MetricsConfig};
use crate::logger::LoggerConfig;
use crate::rate_limit::RateLimitGroupConfig;

const METHODS: [&str; 5] = ["GET", "PUT", "PATCH", "POST", "DELETE"];

fn spec() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api/openapi.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `(METHOD, path)` for every operation in the spec.
fn operations(spec: &Value) -> BTreeSet<(String, String)> {
    let paths = spec["paths"].as_object().expect("paths");
    let mut ops = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().expect("path item").keys() {
            if method != "parameters" {
                ops.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    ops
}

/// A concrete path for a template (`{id}` → an id the fake knows).
fn concrete(path: &str) -> String {
    if path.starts_with("/drives/") {
        path.replace("{id}", "disk0")
    } else if path.starts_with("/rate-limit-groups/") {
        path.replace("{id}", "tenant")
    } else {
        path.replace("{id}", "io0")
    }
}

#[test]
fn the_spec_and_the_router_have_the_same_operations() {
    let spec = spec();
    assert!(spec["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.0")));
    let documented = operations(&spec);
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, routed);

    // The router serves exactly the table: each pair answers (not 404/405), other methods 405.
    let fake = Fake::start();
    let paths: BTreeSet<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    for path in paths {
        for method in METHODS {
            let served = routed.contains(&(method.to_string(), path.to_string()))
                || crate::api::unsupported::UNSUPPORTED
                    .iter()
                    .any(|(m, p, _)| *m == method && *p == path);
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
fn every_request_example_parses_and_is_accepted() {
    let spec = spec();
    let fake = Fake::start();
    let mut count = 0;
    for (method, path) in operations(&spec) {
        let op = &spec["paths"][&path][method.to_ascii_lowercase()];
        let Some(examples) =
            op["requestBody"]["content"]["application/json"]["examples"].as_object()
        else {
            assert!(
                op.get("requestBody").is_none(),
                "{method} {path}: body without examples"
            );
            continue;
        };
        assert!(!examples.is_empty(), "{method} {path}");
        for (name, example) in examples {
            let body = example["value"].to_string();
            let parsed = match (method.as_str(), path.as_str()) {
                ("PATCH", "/iothreads/{id}") => {
                    parse_bytes::<IoThreadUpdate>(body.as_bytes()).map(drop)
                }
                ("PUT", "/actions") => parse_bytes::<ActionRequest>(body.as_bytes()).map(drop),
                ("PATCH", "/drives/{id}") => parse_bytes::<DriveUpdate>(body.as_bytes()).map(drop),
                ("PATCH", "/rate-limit-groups/{id}") => {
                    parse_bytes::<GroupUpdate>(body.as_bytes()).map(drop)
                }
                ("PATCH", "/vm") => parse_bytes::<VmStateRequest>(body.as_bytes()).map(drop),
                ("PUT" | "PATCH", "/machine-config") => {
                    parse_bytes::<MachineConfig>(body.as_bytes()).map(drop)
                }
                ("PUT", "/boot-source") => {
                    parse_bytes::<BootSourceConfig>(body.as_bytes()).map(drop)
                }
                ("PUT", "/logger") => parse_bytes::<LoggerConfig>(body.as_bytes()).map(drop),
                ("PUT", "/metrics") => parse_bytes::<MetricsConfig>(body.as_bytes()).map(drop),
                ("PUT", "/drives/{id}") => parse_bytes::<DriveConfig>(body.as_bytes()).map(drop),
                ("PUT", "/iothreads/{id}") => {
                    parse_bytes::<IoThreadConfig>(body.as_bytes()).map(drop)
                }
                ("PUT", "/rate-limit-groups/{id}") => {
                    parse_bytes::<RateLimitGroupConfig>(body.as_bytes()).map(drop)
                }
                other => panic!("no Rust type known for the body of {other:?}"),
            };
            parsed.unwrap_or_else(|f| panic!("{method} {path} {name}: {}", f.message));
            // Accepted by the HTTP layer: it reaches the control thread (the fake, a running
            // VM, answers Resume with 409 and the pre-boot PUTs and InstanceStart with 400).
            let before = fake.commands().len();
            let r = fake.json(&method, &concrete(&path), &body);
            assert!(
                [200, 204, 400, 409].contains(&r.status),
                "{method} {path} {name}: {r:?}"
            );
            assert_eq!(fake.commands().len(), before + 1, "{method} {path} {name}");
            count += 1;
        }
    }
    // PATCH iothread: polling off, classic, weighted W=3, max_batch 8; PUT /actions: four
    // actions; PATCH drive: four rate limiters and a file swap; PATCH group: two; PATCH /vm: two; one each
    // for the seven pre-boot PUTs and PATCH /machine-config.
    assert_eq!(count, 25);
}

#[test]
fn every_fault_example_is_a_fault_and_schemas_exist() {
    let spec = spec();
    let schemas = spec["components"]["schemas"].as_object().expect("schemas");
    for name in [
        "IoThreadUpdate",
        "ActionRequest",
        "Fault",
        "Info",
        "IoThread",
        "Drive",
        "Metrics",
    ] {
        assert!(schemas.contains_key(name), "schema {name} missing");
    }
    let text = spec.to_string();
    for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = r.split('"').next().unwrap_or_default();
        assert!(schemas.contains_key(name), "dangling $ref {name}");
    }
    for (method, path) in operations(&spec) {
        let responses = &spec["paths"][&path][method.to_ascii_lowercase()]["responses"];
        for (status, response) in responses.as_object().expect("responses") {
            let code: u16 = status.parse().expect("numeric status");
            let Some(examples) = response["content"]["application/json"]["examples"].as_object()
            else {
                continue;
            };
            for (name, example) in examples {
                let v = &example["value"];
                if code >= 400 {
                    assert!(
                        v["fault_message"].is_string(),
                        "{method} {path} {status} {name}"
                    );
                    assert_eq!(v.as_object().map(|o| o.len()), Some(1));
                }
            }
        }
    }
}

/// The Prometheus example of `GET /metrics` is what Osprey renders from the JSON example.
#[test]
fn the_prometheus_example_is_the_json_example_rendered() {
    let spec = spec();
    let content = &spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
    let json = &content["application/json"]["examples"]["metrics"]["value"];
    let text = content["text/plain"]["examples"]["prometheus"]["value"]
        .as_str()
        .unwrap_or_default();
    let rendered = crate::api::prometheus::render(json).expect("render");
    assert!(
        text == rendered,
        "docs/api/openapi.json: the text/plain example should be:\n{rendered}"
    );
}
