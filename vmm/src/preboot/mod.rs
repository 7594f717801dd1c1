//! The "Not started" phase (Firecracker's pre-boot API): `osprey --api-sock S` without a config
//! serves the API at once, builds the VM's config from the PUTs it receives ([`PendingVm`]),
//! and on `InstanceStart` prepares it as a config file would be ([`crate::launch::prepare`])
//! and starts the VM on the same server. A failed start is answered with 400 and leaves the
//! phase as it was, so the client can correct the config and try again. With the sandbox on,
//! the phase is confined from its first request (`crate::sandbox::preboot`) and every path a
//! request names must lie in the API socket's folder or one the operator allows
//! ([`crate::allowed_folders`]).

mod pending;

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

pub use pending::PendingVm;

use crate::allowed_folders::AllowedFolders;

use crate::api::command::{ApiCommand, ApiError, ApiRequest, Submit, VmAction};
use crate::api::server::{ServerLimits, SubmitSwitch};
use crate::config::VmConfig;
use crate::events::ControlEvent;
use crate::sandbox::Sandbox;
use crate::stop::StopReason;
use crate::vm::{RunningVm, ServingApi, VmError};

/// How often the loop looks for a stop signal while it waits for requests.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Serves the pre-boot API on `socket` with `base` (the command line's values) as the starting
/// config, until a stop signal or until `InstanceStart` starts a VM; then runs that VM until it
/// stops.
pub fn serve(socket: &Path, mut base: VmConfig) -> Result<StopReason, VmError> {
    base.api = Some(crate::config::ApiConfig {
        socket: socket.to_path_buf(),
    });
    // Before the API thread exists: namespaces and no_new_privs need a single thread.
    Sandbox::enter_early(&base.sandbox)?;
    crate::vm::register_signal_handlers()?;
    // Resolved before anything is confined (symlinks, the working directory).
    let folders = base.preboot_allowed_folders();
    let api_hook = crate::sandbox::preboot::api_hook(&base.sandbox)?;
    let (tx, rx) = mpsc::channel::<ApiRequest>();
    let to_preboot: Submit = Arc::new(move |request| {
        // The receiver lives as long as this loop; after it, the switch points elsewhere.
        let _ = tx.send(request);
    });
    let switch = SubmitSwitch::new(to_preboot.clone());
    let server =
        crate::api::server::start_hooked(socket, switch.submit(), ServerLimits::default(), None)
            .map_err(VmError::Api)?;
    let server = Arc::new(server);
    let confined = api_hook.is_some();
    if let Some(hook) = api_hook {
        server.run_on_thread(hook).map_err(VmError::ApiSandbox)?;
    }
    // The socket is bound: the main thread's deny-list has no `socket`.
    crate::sandbox::preboot::confine_main(&base.sandbox)?;
    match &folders {
        Some(f) => log::info!(
            "pre-boot: sandbox on (API thread confined, main thread under its deny-list); \
             the API's paths must lie in {}",
            f.describe()
        ),
        None => log::warn!("pre-boot: sandbox off (--sandbox off): any path, no confinement"),
    }
    log::info!(
        "API listening on {}; the VM starts on PUT /actions {{\"action_type\": \"InstanceStart\"}}",
        socket.display()
    );
    let mut pending = PendingVm::new(base, folders.clone());
    loop {
        let signal = crate::vm::stop_signal();
        if signal != 0 {
            log::info!("received signal {signal} before InstanceStart; stopping");
            return Ok(StopReason::Signal(signal));
        }
        let request = match rx.recv_timeout(SIGNAL_CHECK) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Err(VmError::ApiStopped),
        };
        let taken = std::time::Instant::now();
        let serving = ServingApi {
            server: server.clone(),
            switch: switch.clone(),
            confined,
        };
        let started = match &request.command {
            ApiCommand::Action(VmAction::InstanceStart) => start(&pending, serving),
            ApiCommand::SnapshotLoad(load) => match restore(load, serving, folders.as_ref()) {
                Ok(vm) => Ok(vm),
                Err(e) => {
                    switch.set(to_preboot.clone());
                    log::error!("{e}");
                    let _ = request.reply.send(Err(e));
                    continue;
                }
            },
            _ => {
                let reply = pending.execute(request.command);
                let _ = request.reply.send(reply);
                continue;
            }
        };
        match started {
            Ok(mut vm) => {
                let _ = request.reply.send(Ok(crate::api::command::Reply::Done));
                // A restored VM with `resume_vm` runs from here: its answer goes out first.
                vm.resume_after_answer();
                if matches!(request.command, ApiCommand::SnapshotLoad(_)) {
                    log::info!(
                        "PUT /snapshot/load: answer handed to the API and vCPUs released {:.2} ms \
                         after the pre-boot loop took the request",
                        taken.elapsed().as_secs_f64() * 1e3
                    );
                }
                // Requests that reached the pre-boot loop while the VM was starting.
                let control = vm.control_sender();
                while let Ok(r) = rx.try_recv() {
                    control.send(ControlEvent::Api(r));
                }
                drop(server);
                return Ok(vm.wait());
            }
            Err(e) => {
                switch.set(to_preboot.clone());
                log::error!("InstanceStart: {e}");
                let _ = request
                    .reply
                    .send(Err(ApiError::BadRequest(format!("InstanceStart: {e}"))));
            }
        }
    }
}

/// `PUT /snapshot/load`: checks the snapshot's files, then restores the VM on the serving API.
fn restore(
    load: &crate::api::command::SnapshotLoadRequest,
    serving: ServingApi,
    folders: Option<&AllowedFolders>,
) -> Result<RunningVm, ApiError> {
    let started = std::time::Instant::now();
    let fail = |e: &dyn std::fmt::Display| ApiError::BadRequest(format!("PUT /snapshot/load: {e}"));
    let mem_path = load.mem_path()?;
    if let Some(folders) = folders {
        let check = |field: &str, path: &Path| {
            folders
                .check_real(path)
                .map_err(|e| fail(&format!("{field}: {e}")))
        };
        check("snapshot_path", &load.snapshot_path)?;
        check("mem_file_path", mem_path)?;
        for o in &load.drive_overrides {
            check("drive_overrides.path_on_host", &o.path_on_host)?;
        }
    }
    let overrides: Vec<_> = load
        .drive_overrides
        .iter()
        .map(|o| (o.drive_id.clone(), o.path_on_host.clone()))
        .collect();
    let nics: Vec<_> = load
        .network_overrides
        .iter()
        .map(|o| (o.iface_id.clone(), o.host_dev_name.clone()))
        .collect();
    let mut checked =
        crate::snapshot::restore::load(&load.snapshot_path, mem_path, &overrides, &nics)
            .map_err(|e| fail(&e))?;
    checked
        .state
        .vm
        .set_clock_realtime(load.clock_realtime)
        .map_err(|e| fail(&e))?;
    let mut vm =
        crate::vm::restore(checked, load.resume_vm, Some(serving), None).map_err(|e| fail(&e))?;
    vm.set_process_exits_after();
    log::info!(
        "PUT /snapshot/load: restored in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(vm)
}

/// Why `InstanceStart` failed: the config, or building the VM.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Vm(#[from] VmError),
}

/// Prepares the pending config and starts the VM on the serving API.
fn start(pending: &PendingVm, serving: ServingApi) -> Result<RunningVm, StartError> {
    let mut config = pending.config()?;
    // The socket is ours and served: the preflight must not find it busy.
    let api = config.api.take();
    let mut prepared = crate::launch::prepare(config)?;
    for w in &prepared.warnings {
        log::warn!("{w}");
    }
    prepared.config.api = api;
    crate::boot_timing::mark(crate::boot_timing::Step::ConfigParsed);
    let mut vm = crate::vm::start(
        &prepared.config,
        prepared.drives,
        prepared.taps,
        Some(serving),
    )?;
    vm.set_process_exits_after();
    Ok(vm)
}
