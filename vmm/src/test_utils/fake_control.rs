//! The fake API controller: a stand-in for the control thread that answers every
//! [`ApiCommand`] with a canned reply ([`answer`]), for tests of the HTTP layer (the server over
//! a real socket, `api/tests/`) and the `api_router` fuzz target.
//!
//! The canned world: iothread `io0`, drive `disk0` (and `broken`, whose GET fails inside the
//! VMM), rate-limit group `tenant`, a running VM. Anything else is "not found".

use std::sync::{mpsc, Arc, Mutex};

use serde_json::{json, Value};

use crate::api::command::{
    ApiCommand, ApiError, ApiReply, ApiRequest, IoThreadUpdate, Submit, VmAction,
};

/// Iothread `io0` after `update` (the default update: as configured).
pub fn iothread(update: &IoThreadUpdate) -> Value {
    json!({
        "id": "io0",
        "poll_max_ns": update.poll_max_ns.flatten().unwrap_or(32768),
        "poll_grow": update.poll_grow.flatten().unwrap_or(0),
        "poll_shrink": update.poll_shrink.flatten().unwrap_or(0),
        "poll_policy": update.poll_policy.flatten().map_or(json!("Classic"), |p| json!(p)),
        "poll_weight": update.poll_weight.flatten().unwrap_or(3),
        "max_batch": update.max_batch.flatten().unwrap_or(32),
        "cpu_affinity": null,
    })
}

/// Drive `disk0`.
pub fn drive() -> Value {
    json!({"drive_id": "disk0", "path_on_host": "/tmp/disk0.img", "is_read_only": false,
           "io_engine": "IoUring", "iothread": "io0"})
}

/// The `GET /metrics` JSON.
pub fn metrics() -> Value {
    json!({
        "vm": {"state": "Running", "uptime_ms": 1234, "vcpus": 2, "running": true},
        "iothreads": [{"id": "io0", "max_batch": 32, "poll_max_ns": 32768, "poll_grow": 0,
            "poll_shrink": 0, "poll_policy": "Classic", "poll_weight": 3,
            "stats": {"poll_hits": 1, "sleeps": 2}}],
        "drives": [{"drive_id": "disk0", "engine": "io_uring (4 queues)", "requests": 10,
            "batch_bounds": [1, 2, 4, 8, 16, 32, 64, 128, 256],
            "batch_hist": [1, 0, 0, 0, 0, 0, 0, 0, 0, 2], "batch_sum": 601}]
    })
}

/// The canned control thread's reply to `command`.
pub fn answer(command: &ApiCommand) -> ApiReply {
    let not_found = |kind: &str, id: &str| Err(ApiError::NotFound(format!("no {kind} `{id}`")));
    match command {
        ApiCommand::GetInfo => Ok(json!({"app_name": "Osprey", "id": "anonymous-instance",
            "state": "Running", "vmm_version": "0.1.0", "name": "osprey", "version": "0.1.0"})),
        ApiCommand::GetMachineConfig => Ok(json!({"vcpu_count": 2, "mem_size_mib": 256,
            "smt": false, "track_dirty_pages": false})),
        ApiCommand::SetVmState(_) => Ok(Value::Null),
        // The canned VM runs: the pre-boot PUTs are refused as the control thread refuses them.
        c @ (ApiCommand::PutMachineConfig(_)
        | ApiCommand::PatchMachineConfig(_)
        | ApiCommand::PutBootSource(_)
        | ApiCommand::PutDrive(..)
        | ApiCommand::PutIoThread(..)
        | ApiCommand::PutRateLimitGroup(..)
        | ApiCommand::PutLogger(_)
        | ApiCommand::PutMetrics(_)) => Err(ApiError::BadRequest(format!(
            "{} is only allowed before InstanceStart; the VM is running",
            c.preboot_only().unwrap_or("this route")
        ))),
        ApiCommand::Action(VmAction::InstanceStart) => {
            Err(ApiError::BadRequest("the VM is already running".into()))
        }
        ApiCommand::GetConfig => {
            Ok(json!({"machine-config": {"vcpu_count": 2, "mem_size_mib": 256}}))
        }
        ApiCommand::ListIoThreads => Ok(json!([iothread(&IoThreadUpdate::default())])),
        ApiCommand::GetIoThread(id) if id == "io0" => Ok(iothread(&IoThreadUpdate::default())),
        ApiCommand::GetIoThread(id) => not_found("iothread", id),
        ApiCommand::PatchIoThread(id, u) if id == "io0" => match u.poll_weight.flatten() {
            Some(w) if !(1..=16).contains(&w) => Err(ApiError::BadRequest(format!(
                "poll_weight: {w} is out of range 1-16"
            ))),
            _ => Ok(iothread(u)),
        },
        ApiCommand::PatchIoThread(id, _) => not_found("iothread", id),
        ApiCommand::ListDrives => Ok(json!([drive()])),
        ApiCommand::GetDrive(id) if id == "disk0" => Ok(drive()),
        ApiCommand::GetDrive(id) if id == "broken" => {
            Err(ApiError::Internal("engine failed".into()))
        }
        ApiCommand::GetDrive(id) => not_found("drive", id),
        ApiCommand::PatchDrive(id, _) if id == "disk0" => Ok(drive()),
        ApiCommand::PatchDrive(id, _) => not_found("drive", id),
        ApiCommand::ListRateLimitGroups => Ok(json!([{"id": "tenant"}])),
        ApiCommand::GetRateLimitGroup(id) | ApiCommand::PatchRateLimitGroup(id, _)
            if id == "tenant" =>
        {
            Ok(json!({"id": "tenant"}))
        }
        ApiCommand::GetRateLimitGroup(id) | ApiCommand::PatchRateLimitGroup(id, _) => {
            not_found("rate limit group", id)
        }
        ApiCommand::GetMetrics => Ok(metrics()),
        ApiCommand::Action(VmAction::Resume) => Err(ApiError::Conflict("VM is running".into())),
        ApiCommand::Action(_) => Ok(Value::Null),
    }
}

/// A `Submit` whose requests a thread of its own answers with [`answer`], as the control thread
/// would; also records every command that reached it. Two iothread ids misbehave on purpose:
/// `GET /iothreads/drop` drops the reply channel and `GET /iothreads/hang` never answers.
pub fn spawn() -> (Submit, Arc<Mutex<Vec<ApiCommand>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<ApiRequest>();
    let thread_seen = seen.clone();
    std::thread::spawn(move || {
        let mut unanswered = Vec::new();
        for request in rx {
            thread_seen
                .lock()
                .expect("seen")
                .push(request.command.clone());
            match &request.command {
                ApiCommand::GetIoThread(id) if id == "drop" => drop(request.reply),
                ApiCommand::GetIoThread(id) if id == "hang" => unanswered.push(request.reply),
                command => {
                    let _ = request.reply.send(answer(command));
                }
            }
        }
    });
    let submit: Submit = Arc::new(move |request| {
        let _ = tx.send(request);
    });
    (submit, seen)
}

/// A `Submit` that answers on the caller's thread, at once (no thread per use, for the fuzz
/// target): [`answer`], except that `metrics`, when given, replaces the `GET /metrics` JSON, and
/// with `drop_replies` every reply channel is dropped unanswered.
pub fn inline(metrics: Option<Value>, drop_replies: bool) -> Submit {
    Arc::new(move |request: ApiRequest| {
        if drop_replies {
            return;
        }
        let reply = match (&request.command, &metrics) {
            (ApiCommand::GetMetrics, Some(m)) => Ok(m.clone()),
            (command, _) => answer(command),
        };
        let _ = request.reply.send(reply);
    })
}
