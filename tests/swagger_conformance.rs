//! Conformance with Firecracker v1.16.1's API: one `osprey --api-sock` process is walked through
//! every path and method of Firecracker's swagger (the table in `common::firecracker_spec`) while
//! "Not started", configured by that walk's own pre-boot requests with the test guest (`hang=2`
//! keeps it up), started with `InstanceStart`, and walked again while Running and Paused.
//!
//! Every answer must be one the spec allows: the operation's own success code (204 with no body,
//! or 200 with a body of the spec's shape; Firecracker's clients panic on any other 2xx), or an
//! error whose body is exactly `{"fault_message": string}`. Beyond that, as Firecracker answers:
//! an implemented operation succeeds in its phase and gets 400 in the other; one Osprey does not
//! implement gets 400 with a fault_message naming the feature; a bad body (no body, an unknown
//! field, a field of the wrong type, a path id the body contradicts) gets 400 and changes nothing.
//!
//! Mismatches are collected, not fatal, so one run lists them all.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::firecracker_spec::{
    check_shape, Operation, Osprey, FIRECRACKER_VERSION, INSTANCE_INFO, MACHINE_CONFIGURATION,
    OPERATIONS, ROOT_DRIVE_ID, SWAGGER_OPERATIONS,
};
use common::scratch::Scratch;
use common::{test_guest, Vmm};
use serde_json::{json, Value};

/// The instance id the walk starts `osprey` with (`--id`), as `GET /` must report it.
const INSTANCE_ID: &str = "swagger-walk";

/// The VM's state as the walk drives it, with `GET /`'s name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    NotStarted,
    Running,
    Paused,
}

impl Stage {
    fn booted(self) -> bool {
        self != Stage::NotStarted
    }

    /// Firecracker's `InstanceInfo.state`.
    fn state(self) -> &'static str {
        match self {
            Stage::NotStarted => "Not started",
            Stage::Running => "Running",
            Stage::Paused => "Paused",
        }
    }
}

/// One HTTP answer.
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.body.trim())
    }
}

/// The API under test, the files the table's bodies name, and the mismatches found so far.
struct Walk {
    sock: PathBuf,
    dir: PathBuf,
    kernel: PathBuf,
    disk: PathBuf,
    /// The tap `$TAP` names (created by Osprey at start-up, gone when it exits).
    tap: String,
    findings: Vec<String>,
}

impl Walk {
    /// `$KERNEL`, `$DISK`, `$DIR` and `$TAP` in a table body replaced by this walk's files.
    fn fill(&self, body: &str) -> String {
        body.replace("$KERNEL", &self.kernel.display().to_string())
            .replace("$DISK", &self.disk.display().to_string())
            .replace("$DIR", &self.dir.display().to_string())
            .replace("$TAP", &self.tap)
    }

    /// Sends a request as Firecracker's go-sdk does (JSON content type and accept headers).
    fn send(&self, method: &str, path: &str, body: Option<&str>) -> Answer {
        let mut headers = vec![("Accept", "application/json")];
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        let response =
            vmm::api::client::send(&self.sock, method, path, &headers, body.map(str::as_bytes))
                .unwrap_or_else(|e| panic!("{method} {path}: no HTTP answer: {e}"));
        Answer {
            status: response.status,
            content_type: response.header("content-type").map(str::to_string),
            body: response.body,
        }
    }

    fn find(&mut self, what: String) {
        self.findings.push(what);
    }

    /// Sends `op` (its table body, or `body` instead) and checks the answer is one the spec
    /// allows for it; returns the answer.
    fn call(&mut self, op: &Operation, body: Option<&str>) -> Answer {
        let answer = self.send(op.method, op.at, body);
        if let Err(why) = within_spec(op, &answer) {
            self.find(format!("{}: {why}", op.name()));
        }
        answer
    }

    /// `op` with its table body must succeed: 204, or 200 with the spec's shape.
    fn expect_success(&mut self, op: &Operation) -> Answer {
        let body = op.body.map(|b| self.fill(b));
        let answer = self.call(op, body.as_deref());
        if answer.status != op.success {
            self.find(format!(
                "{}: expected {}, got {answer}",
                op.name(),
                op.success
            ));
        }
        answer
    }

    /// `op` with `body` must be refused with 400 and a fault_message; with `names`, the message
    /// must contain one of them. `why` says what the request tests.
    fn expect_400(&mut self, op: &Operation, body: Option<&str>, why: &str, names: &[&str]) {
        let answer = self.call(op, body);
        if answer.status != 400 {
            self.find(format!("{} ({why}): expected 400, got {answer}", op.name()));
            return;
        }
        let message = fault_message(&answer).unwrap_or_default().to_lowercase();
        if !names.is_empty() && !names.iter().any(|n| message.contains(n)) {
            self.find(format!(
                "{} ({why}): the fault_message names none of {names:?}: {answer}",
                op.name()
            ));
        }
    }

    /// A request that is malformed against `op`'s schema, each answered 400 (sent where the
    /// operation would otherwise succeed, so the 400 is the body's).
    fn expect_bad_bodies_refused(&mut self, op: &Operation) {
        let Some(good) = op.body.map(|b| self.fill(b)) else {
            return;
        };
        let good: Value = serde_json::from_str(&good)
            .unwrap_or_else(|e| panic!("{}: the table's body is not JSON: {e}", op.name()));
        let Some(fields) = good.as_object() else {
            panic!("{}: the table's body is not an object", op.name());
        };
        self.expect_400(op, None, "no body", &[]);
        let mut unknown = fields.clone();
        unknown.insert("osprey_no_such_field".into(), json!(1));
        self.expect_400(
            op,
            Some(&Value::Object(unknown).to_string()),
            "an unknown field",
            &[],
        );
        for (name, value) in fields {
            let mut wrong = fields.clone();
            wrong.insert(name.clone(), of_another_type(value));
            let why = format!("{name} of the wrong type");
            self.expect_400(op, Some(&Value::Object(wrong).to_string()), &why, &[]);
        }
        // An id in the path the body contradicts (`drive_id`, `iface_id`, `id`).
        let path_id = op.at.rsplit('/').next().unwrap_or("");
        if op.path.ends_with('}') {
            for (name, value) in fields {
                if value.as_str() == Some(path_id) {
                    let mut other = fields.clone();
                    other.insert(name.clone(), json!(format!("{path_id}x")));
                    let why = format!("{name} not the path's id");
                    self.expect_400(op, Some(&Value::Object(other).to_string()), &why, &[]);
                }
            }
        }
    }

    /// Walks every operation of the table in `stage`.
    fn walk(&mut self, stage: Stage) {
        for op in OPERATIONS {
            let body = op.body.map(|b| self.fill(b));
            match op.osprey {
                Osprey::Implemented if op.phase.allows(stage.booted(), stage == Stage::Paused) => {
                    self.expect_bad_bodies_refused(op);
                    if !op.transition {
                        let answer = self.expect_success(op);
                        if op.at == "/" && answer.status == 200 {
                            self.check_instance_info(&answer, stage);
                        }
                    }
                }
                Osprey::Implemented => {
                    let why = format!("not served while {}", stage.state());
                    self.expect_400(op, body.as_deref(), &why, &[]);
                }
                Osprey::Refused(names) => {
                    self.expect_400(op, body.as_deref(), "not implemented", names);
                }
                Osprey::Unrouted => {
                    let answer = self.call(op, body.as_deref());
                    if !matches!(answer.status, 400 | 405) {
                        self.find(format!("{}: expected 400 or 405, got {answer}", op.name()));
                    }
                }
            }
        }
    }

    /// `GET /`'s `InstanceInfo` names this instance and `stage`.
    fn check_instance_info(&mut self, answer: &Answer, stage: Stage) {
        let info = answer.json().unwrap_or(Value::Null);
        if info["state"] != stage.state() || info["id"] != INSTANCE_ID {
            self.find(format!(
                "GET / while {}: expected state {:?} and id {INSTANCE_ID:?}, got {info}",
                stage.state(),
                stage.state()
            ));
        }
    }

    /// Sends the transition `PUT /actions` or `PATCH /vm` with this body, which must succeed.
    fn transition(&mut self, method: &str, path: &str, body: &str) -> Answer {
        let op = OPERATIONS
            .iter()
            .find(|o| o.method == method && o.path == path && o.body == Some(body))
            .unwrap_or_else(|| panic!("no {method} {path} {body} in the table"));
        assert!(op.transition, "{} is not a transition", op.name());
        self.expect_success(op)
    }

    /// Panics with everything found so far, `why` first, and the VMM's output.
    fn fail(&self, why: &str, vmm: &Vmm) -> ! {
        panic!(
            "{why}\nmismatches so far:\n{}\nconsole:\n{}\nlog:\n{}\nlog file:\n{}",
            self.findings.join("\n"),
            vmm.console_text(),
            vmm.log_text(),
            std::fs::read_to_string(self.dir.join("osprey.log")).unwrap_or_default()
        );
    }
}

/// Whether `answer` is one the spec allows for `op`: its success code with the right body, or an
/// error (a listed code or `default`) with an `Error` body.
fn within_spec(op: &Operation, answer: &Answer) -> Result<(), String> {
    match answer.status {
        204 if op.success == 204 => {
            if answer.body.is_empty() {
                Ok(())
            } else {
                Err(format!("204 with a body: {answer}"))
            }
        }
        200 if op.success == 200 => {
            if !answer
                .content_type
                .as_deref()
                .is_some_and(|t| t.starts_with("application/json"))
            {
                return Err(format!(
                    "200 with content type {:?}, not application/json",
                    answer.content_type
                ));
            }
            let Some(value) = answer.json() else {
                return Err(format!("200 body is not JSON: {answer}"));
            };
            match &op.reply {
                Some(shape) => check_shape(&value, shape, "body"),
                None => Ok(()),
            }
        }
        200..=299 => Err(format!(
            "a success the spec does not list (only {}; Firecracker's clients panic on any other \
             2xx): {answer}",
            op.success
        )),
        _ => fault_message(answer).map(|_| ()),
    }
}

/// The `fault_message` of an error answer, when its body is exactly Firecracker's `Error`.
fn fault_message(answer: &Answer) -> Result<String, String> {
    let not_error = || {
        Err(format!(
            "error body is not {{\"fault_message\": string}}: {answer}"
        ))
    };
    let Some(Value::Object(map)) = answer.json() else {
        return not_error();
    };
    match map.get("fault_message") {
        Some(Value::String(m)) if map.len() == 1 && !m.trim().is_empty() => Ok(m.clone()),
        _ => not_error(),
    }
}

/// A JSON value of another type than `value`, for a wrong-type body.
fn of_another_type(value: &Value) -> Value {
    match value {
        Value::String(_) => json!(12345),
        _ => json!("not-this-type"),
    }
}

/// Waits for the API socket of a not-started `osprey` to accept connections.
fn wait_for_api(sock: &Path, vmm: &mut Vmm) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        if vmm.has_exited() || Instant::now() > deadline {
            panic!(
                "no API on {} (exited: {})\nlog:\n{}",
                sock.display(),
                vmm.has_exited(),
                vmm.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_table_covers_every_operation_of_the_swagger_once() {
    for (method, path) in SWAGGER_OPERATIONS {
        assert!(
            OPERATIONS
                .iter()
                .any(|o| o.documented && o.method == *method && o.path == *path),
            "{method} {path} is in the swagger but not in the table"
        );
    }
    for op in OPERATIONS.iter().filter(|o| o.documented) {
        assert!(
            SWAGGER_OPERATIONS.contains(&(op.method, op.path)),
            "{} {} is in the table but not in the swagger",
            op.method,
            op.path
        );
    }
    // Each documented (method, path) has one row, except the actions and VM states, one a body.
    for (method, path) in SWAGGER_OPERATIONS {
        let rows = OPERATIONS
            .iter()
            .filter(|o| o.method == *method && o.path == *path)
            .count();
        let expected = match *path {
            "/actions" => 3,
            "/vm" => 2,
            _ => 1,
        };
        assert_eq!(rows, expected, "{method} {path}");
    }
}

#[test]
fn the_shape_check_can_fail() {
    let good = json!({"app_name": "osprey", "id": "x", "state": "Paused", "vmm_version": "1"});
    assert_eq!(check_shape(&good, &INSTANCE_INFO, "body"), Ok(()));
    let bad_state = json!({"app_name": "osprey", "id": "x", "state": "Halted", "vmm_version": "1"});
    assert!(check_shape(&bad_state, &INSTANCE_INFO, "body").is_err());
    let missing = json!({"firecracker_version": null});
    assert!(check_shape(&missing, &FIRECRACKER_VERSION, "body").is_err());
    let wrong_type = json!({"vcpu_count": "1", "mem_size_mib": 128});
    assert!(check_shape(&wrong_type, &MACHINE_CONFIGURATION, "body")
        .is_err_and(|e| e.contains("body.vcpu_count")));
}

#[test]
fn every_firecracker_route_answers_as_the_spec_says() {
    let scratch = Scratch::new("swagger-walk");
    let sock = scratch.0.join("api.sock");
    let disk = scratch.sparse("rootfs.img", 8 << 20);
    // The kernel lies outside the socket's folder: the pre-boot API takes it once allowed.
    let guest = test_guest();
    let kernel_dir = guest.parent().expect("the kernel's folder");
    let mut vmm = Vmm::spawn([
        "--api-sock".as_ref(),
        sock.as_os_str(),
        "--id".as_ref(),
        INSTANCE_ID.as_ref(),
        "--allow-folder".as_ref(),
        kernel_dir.as_os_str(),
    ]);
    wait_for_api(&sock, &mut vmm);
    let mut walk = Walk {
        sock,
        dir: scratch.0.clone(),
        kernel: test_guest(),
        disk,
        tap: format!("ospsw{}", std::process::id() % 100_000),
        findings: Vec::new(),
    };

    // The go-sdk's readiness probe: Firecracker's machine defaults before any PUT.
    let defaults = walk.send("GET", "/machine-config", None);
    let expected =
        json!({"vcpu_count": 1, "mem_size_mib": 128, "smt": false, "track_dirty_pages": false});
    let got = defaults.json().unwrap_or(Value::Null);
    if defaults.status != 200
        || ["vcpu_count", "mem_size_mib", "smt", "track_dirty_pages"]
            .iter()
            .any(|k| got[k] != expected[k])
    {
        walk.find(format!(
            "GET /machine-config before any PUT: expected 200 with {expected}, got {defaults}"
        ));
    }

    walk.walk(Stage::NotStarted);
    let config = walk
        .send("GET", "/vm/config", None)
        .json()
        .unwrap_or(Value::Null);
    let root = &config["drives"][0];
    if root["drive_id"] != ROOT_DRIVE_ID || root["is_root_device"] != true {
        walk.find(format!(
            "GET /vm/config before boot: expected the PUT root drive first, got {config}"
        ));
    }

    let started = walk.transition("PUT", "/actions", r#"{"action_type": "InstanceStart"}"#);
    if started.status != 204 {
        walk.fail(&format!("InstanceStart: {started}"), &vmm);
    }
    if vmm
        .wait_console(Duration::from_secs(60), |l| l == "osprey-test-guest: hang")
        .is_none()
    {
        walk.fail("the guest did not reach its hang", &vmm);
    }
    let blk = common::blk_report(&vmm);
    if blk["found"] != true || blk["serial"] != ROOT_DRIVE_ID || blk["failures"] != 0 {
        walk.find(format!(
            "the guest's I/O on the root drive (its first disk) failed: {blk}"
        ));
    }

    walk.walk(Stage::Running);
    let metrics = std::fs::read_to_string(walk.dir.join("metrics.json")).unwrap_or_default();
    if metrics.trim().is_empty() {
        walk.find("FlushMetrics wrote nothing to the PUT /metrics file".into());
    }

    let paused = walk.transition("PATCH", "/vm", r#"{"state": "Paused"}"#);
    if paused.status != 204 {
        walk.fail(&format!("PATCH /vm Paused: {paused}"), &vmm);
    }
    walk.walk(Stage::Paused);
    let resumed = walk.transition("PATCH", "/vm", r#"{"state": "Resumed"}"#);
    let info = walk.send("GET", "/", None).json().unwrap_or(Value::Null);
    if resumed.status != 204 || info["state"] != "Running" {
        walk.find(format!("PATCH /vm Resumed: {resumed}, then GET /: {info}"));
    }
    // Last: Osprey may answer Ctrl+Alt+Del by shutting the VM down.
    walk.transition("PUT", "/actions", r#"{"action_type": "SendCtrlAltDel"}"#);

    if !walk.findings.is_empty() {
        let n = walk.findings.len();
        walk.fail(
            &format!("answers that differ from Firecracker's spec: {n}"),
            &vmm,
        );
    }
}
