//! The fake API controller: a stand-in for the control thread that answers every
//! [`ApiCommand`] with a canned reply ([`answer`]), for tests of the HTTP layer (the server over
//! a real socket, `api/tests/`) and the `api_router` fuzz target.
//!
//! The canned world: iothread `io0`, drive `disk0` (and `broken`, whose GET fails inside the
//! VMM), rate-limit group `tenant`, a running VM. Anything else is "not found".

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};

use serde_json::{json, Value};

use crate::command::{
    ApiCommand, ApiError, ApiReply, ApiRequest, IoThreadUpdate, Reply, Submit, VmAction,
};
use crate::metrics::report::{DriveCounters, IoThreadReport, MetricFields, ThreadReport, VmReport};
use crate::rate_limit::GroupReport;
use crate::replies::{ConfigReply, DriveReport, DriveView, GroupView, IoThreadView, MetricsReport};

/// Iothread `io0` after `update` (the default update: as configured).
pub fn iothread(update: &IoThreadUpdate) -> IoThreadReport {
    let params = crate::metrics::IoThreadParams {
        max_batch: update.max_batch.flatten().unwrap_or(32).into(),
        poll_max_ns: update.poll_max_ns.flatten().unwrap_or(32768),
        poll_grow: update.poll_grow.flatten().unwrap_or(0),
        poll_shrink: update.poll_shrink.flatten().unwrap_or(0),
        poll_policy: update
            .poll_policy
            .flatten()
            .map_or("Classic".into(), |p| format!("{p:?}")),
        poll_weight: update.poll_weight.flatten().unwrap_or(3).into(),
    };
    let stats = dataplane::stats::IoThreadStats::default();
    stats.poll_hits.store(1, Ordering::Relaxed);
    stats.sleeps.store(2, Ordering::Relaxed);
    IoThreadReport::new("io0", &params, &stats)
}

/// Drive `disk0`'s counters: 10 requests, batches of 1, 300 and 300.
fn drive_counters() -> DriveCounters {
    let queue = devices::block::stats::QueueStats::default();
    queue.requests.store(10, Ordering::Relaxed);
    for n in [1, 300, 300] {
        queue.record_batch(n);
    }
    queue.engine.set(dataplane::engine::EngineInfo::Sync);
    DriveCounters::new(
        "disk0",
        &[&queue],
        &dataplane::rate_limit::LimiterStats::default(),
    )
}

/// Drive `disk0`.
pub fn drive() -> DriveReport {
    let cfg = serde_json::from_value(json!({"drive_id": "disk0",
        "path_on_host": "/tmp/disk0.img", "io_engine": "IoUring", "iothread": "io0"}))
    .expect("the canned drive's config");
    DriveReport::new(drive_counters(), &cfg, 1)
}

/// Rate-limit group `tenant`: no limits, no drives.
fn group() -> GroupReport {
    GroupReport {
        id: "tenant".into(),
        bandwidth: None,
        ops: None,
        drives: Vec::new(),
        stats: MetricFields::of(&dataplane::rate_limit::LimiterStats::default()),
    }
}

/// The `GET /metrics` report.
pub fn metrics_report() -> MetricsReport {
    let vm = crate::metrics::VmMetrics {
        uptime_ms: 1234,
        vcpus: 2,
        running: true,
    };
    let vcpu = crate::metrics::ThreadCpu {
        cpu_ns: 2_000_000,
        kind: "vmm".into(),
    };
    MetricsReport {
        vm: VmReport {
            state: "Running".into(),
            metrics: MetricFields::of(&vm),
        },
        iothreads: vec![iothread(&IoThreadUpdate::default())],
        drives: vec![drive_counters()],
        network_interfaces: vec![crate::metrics::nic::NicCounters::new(
            "eth0",
            &devices::net::stats::NetStats::default(),
        )],
        rate_limit_groups: vec![group()],
        threads: vec![ThreadReport::new("vcpu0", &vcpu)],
    }
}

/// The `GET /metrics` JSON.
pub fn metrics() -> Value {
    crate::metrics::report::json_of(&metrics_report())
}

/// The canned control thread's reply to `command`.
pub fn answer(command: &ApiCommand) -> ApiReply {
    let not_found = |kind: &str, id: &str| Err(ApiError::NotFound(format!("no {kind} `{id}`")));
    match command {
        ApiCommand::GetInfo => Ok(Reply::Info(crate::instance::InstanceInfo::new(
            crate::instance::InstanceState::Running,
            None,
        ))),
        ApiCommand::GetMachineConfig => Ok(Reply::Machine(
            serde_json::from_value(json!({"vcpu_count": 2, "mem_size_mib": 256}))
                .expect("the canned machine config"),
        )),
        ApiCommand::SetVmState(_) => Ok(Reply::Done),
        // The canned VM runs: the pre-boot PUTs are refused as the control thread refuses them.
        c @ (ApiCommand::PutMachineConfig(_)
        | ApiCommand::PatchMachineConfig(_)
        | ApiCommand::PutBootSource(_)
        | ApiCommand::PutDrive(..)
        | ApiCommand::PutNetworkInterface(..)
        | ApiCommand::PutIoThread(..)
        | ApiCommand::PutRateLimitGroup(..)
        | ApiCommand::PutLogger(_)
        | ApiCommand::PutMetrics(_)
        | ApiCommand::PutVsock(_)) => Err(ApiError::BadRequest(format!(
            "{} is only allowed before InstanceStart; the VM is running",
            c.preboot_only().unwrap_or("this route")
        ))),
        ApiCommand::Action(VmAction::InstanceStart) => {
            Err(ApiError::BadRequest("the VM is already running".into()))
        }
        ApiCommand::GetConfig => Ok(Reply::Config(Box::new(ConfigReply {
            config: serde_json::from_value(json!({
                "machine-config": {"vcpu_count": 2, "mem_size_mib": 256},
                "boot-source": {"kernel_image_path": "/tmp/vmlinux"},
            }))
            .expect("the canned config"),
            has_boot_source: true,
        }))),
        ApiCommand::ListIoThreads => Ok(Reply::IoThreads(vec![IoThreadView::Running(iothread(
            &IoThreadUpdate::default(),
        ))])),
        ApiCommand::GetIoThread(id) if id == "io0" => Ok(Reply::IoThread(Box::new(
            IoThreadView::Running(iothread(&IoThreadUpdate::default())),
        ))),
        ApiCommand::GetIoThread(id) => not_found("iothread", id),
        ApiCommand::PatchIoThread(id, u) if id == "io0" => match u.poll_weight.flatten() {
            Some(w) if !(1..=16).contains(&w) => Err(ApiError::BadRequest(format!(
                "poll_weight: {w} is out of range 1-16"
            ))),
            _ => Ok(Reply::Done),
        },
        ApiCommand::PatchIoThread(id, _) => not_found("iothread", id),
        ApiCommand::ListDrives => Ok(Reply::Drives(vec![DriveView::Running(drive())])),
        ApiCommand::GetDrive(id) if id == "disk0" => {
            Ok(Reply::Drive(Box::new(DriveView::Running(drive()))))
        }
        ApiCommand::GetDrive(id) if id == "broken" => {
            Err(ApiError::Internal("engine failed".into()))
        }
        ApiCommand::GetDrive(id) => not_found("drive", id),
        ApiCommand::PatchDrive(id, _) if id == "disk0" => Ok(Reply::Done),
        ApiCommand::PatchDrive(id, _) => not_found("drive", id),
        ApiCommand::PatchNetworkInterface(id, _) if id == "eth0" => Ok(Reply::Done),
        ApiCommand::PatchNetworkInterface(id, _) => not_found("network interface", id),
        ApiCommand::ListRateLimitGroups => Ok(Reply::Groups(vec![GroupView::Running(group())])),
        ApiCommand::GetRateLimitGroup(id) if id == "tenant" => {
            Ok(Reply::Group(Box::new(GroupView::Running(group()))))
        }
        ApiCommand::PatchRateLimitGroup(id, _) if id == "tenant" => Ok(Reply::Done),
        ApiCommand::GetRateLimitGroup(id) | ApiCommand::PatchRateLimitGroup(id, _) => {
            not_found("rate limit group", id)
        }
        ApiCommand::GetMetrics => Ok(Reply::Metrics(Box::new(metrics_report()))),
        ApiCommand::Action(VmAction::Resume) => Err(ApiError::Conflict("VM is running".into())),
        ApiCommand::Action(_) => Ok(Reply::Done),
        ApiCommand::SnapshotLoad(_) => Err(ApiError::BadRequest(
            "PUT /snapshot/load: only allowed before InstanceStart; the VM is running".into(),
        )),
        ApiCommand::SnapshotCreate(_) => Err(ApiError::BadRequest(
            "PUT /snapshot/create: the VM is running; pause it first".into(),
        )),
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
/// target): [`answer`], or with `drop_replies` every reply channel dropped unanswered.
pub fn inline(drop_replies: bool) -> Submit {
    Arc::new(move |request: ApiRequest| {
        if drop_replies {
            return;
        }
        let _ = request.reply.send(answer(&request.command));
    })
}
