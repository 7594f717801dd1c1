//! The config a VM is given over the API before `InstanceStart`: each PUT checks its section's
//! own values at once (the error names the field) and replaces or adds it; what sections say of
//! each other (an iothread a drive names exists, one root drive) is checked at the start, as a
//! config file's are. With the sandbox on, each path a PUT names (kernel, initrd, drives, log
//! and metrics files) must lie in the allowed folders (the API socket's and the operator's),
//! its symlinks resolved; the 400 names the field and the folders. A drive's file is opened at
//! its PUT, as Firecracker does, so a missing one is a 400 there.

use std::path::Path;

use crate::allowed_folders::AllowedFolders;
use crate::api::command::{ApiCommand, ApiError, ApiReply, Reply};
use crate::api::replies::{ConfigReply, DriveView, GroupView, IoThreadView};
use crate::config::{invalid, validate, ConfigError, VmConfig};
use crate::instance::{InstanceInfo, InstanceState};

/// The VM being configured.
#[derive(Debug)]
pub struct PendingVm {
    config: VmConfig,
    boot_source_set: bool,
    /// Where the API's paths may lie; `None` with the sandbox off.
    folders: Option<AllowedFolders>,
}

/// A 400 carrying the lower layer's error.
fn bad(e: impl std::error::Error + Send + Sync + 'static) -> ApiError {
    ApiError::invalid(e)
}

fn not_started(what: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "{what}: the VM has not started (PUT /actions {{\"action_type\": \"InstanceStart\"}} \
         starts it)"
    ))
}

fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("no {kind} with id `{id}`"))
}

/// Replaces the entry whose id is `id`, or adds `entry` at the end; returns its index.
fn upsert<T>(list: &mut Vec<T>, id: &str, entry: T, id_of: fn(&T) -> &str) -> usize {
    match list.iter().position(|e| id_of(e) == id) {
        Some(i) => {
            list[i] = entry;
            i
        }
        None => {
            list.push(entry);
            list.len() - 1
        }
    }
}

impl PendingVm {
    /// Starts from `base`: the command line's values (vCPUs, memory, sandbox, API socket),
    /// which are the operator's and not checked; the paths of later PUTs must lie in `folders`
    /// (`None`: the sandbox is off, any path).
    pub fn new(base: VmConfig, folders: Option<AllowedFolders>) -> Self {
        let boot_source_set = !base.boot.kernel_image_path.as_os_str().is_empty();
        Self {
            config: base,
            boot_source_set,
            folders,
        }
    }

    /// Checks a path a request names against the allowed folders: a 400 naming `field`.
    fn check_path(&self, field: &str, path: &Path) -> Result<(), ApiError> {
        match &self.folders {
            Some(f) => f
                .check_real(path)
                .map(drop)
                .map_err(|e| ApiError::BadRequest(format!("{field}: {e}"))),
            None => Ok(()),
        }
    }

    /// The config to start: paths made absolute (from Osprey's working directory, as
    /// Firecracker takes them); an error if no boot source was given.
    pub fn config(&self) -> Result<VmConfig, ConfigError> {
        if !self.boot_source_set {
            return Err(invalid(
                "boot-source",
                "no kernel: PUT /boot-source {\"kernel_image_path\": …} first",
            ));
        }
        let mut config = self.config.clone();
        config.resolve_paths(std::path::Path::new(""));
        Ok(config)
    }

    /// Answers one command of the pre-boot phase (`InstanceStart` is the caller's).
    pub fn execute(&mut self, command: ApiCommand) -> ApiReply {
        match command {
            ApiCommand::GetInfo => Ok(Reply::Info(InstanceInfo::new(
                InstanceState::NotStarted,
                None,
            ))),
            ApiCommand::GetConfig => Ok(Reply::Config(Box::new(ConfigReply {
                config: self.config.clone(),
                has_boot_source: self.boot_source_set,
            }))),
            ApiCommand::GetMachineConfig => Ok(Reply::Machine(self.config.machine.clone())),
            ApiCommand::PutMachineConfig(m) => self.set_machine(m),
            ApiCommand::PatchMachineConfig(fields) => {
                let mut merged = serde_json::to_value(&self.config.machine).map_err(bad)?;
                if let Some(obj) = merged.as_object_mut() {
                    obj.extend(fields);
                }
                let m = serde_json::from_value(merged).map_err(|e| {
                    ApiError::BadRequest(crate::config::words::in_json_words(&e.to_string()))
                })?;
                self.set_machine(m)
            }
            ApiCommand::PutBootSource(b) => {
                let mut candidate = self.config.clone();
                candidate.boot = b;
                candidate.check_boot_source().map_err(bad)?;
                self.check_path("kernel_image_path", &candidate.boot.kernel_image_path)?;
                if let Some(initrd) = &candidate.boot.initrd_path {
                    self.check_path("initrd_path", initrd)?;
                }
                self.config = candidate;
                self.boot_source_set = true;
                Ok(Reply::Done)
            }
            ApiCommand::PutDrive(id, d) => {
                let d = *d;
                let at = self
                    .config
                    .drives
                    .iter()
                    .position(|e| e.drive_id == id)
                    .unwrap_or(self.config.drives.len());
                validate::check_drive_values(at, &d).map_err(bad)?;
                self.check_path("path_on_host", &d.path_on_host)?;
                // As Firecracker: the file is opened at the PUT (a missing or unusable file is
                // a 400 now, not a failed InstanceStart); start-up opens it again.
                crate::drive::open(&d.path_on_host, d.is_read_only, d.direct)
                    .map_err(|e| ApiError::BadRequest(format!("path_on_host: {e}")))?;
                if d.is_root_device {
                    if let Some(other) = self
                        .config
                        .drives
                        .iter()
                        .find(|e| e.is_root_device && e.drive_id != id)
                    {
                        return Err(ApiError::BadRequest(format!(
                            "is_root_device: drive `{}` is already the root device",
                            other.drive_id
                        )));
                    }
                }
                upsert(&mut self.config.drives, &id, d, |e| &e.drive_id);
                Ok(Reply::Done)
            }
            ApiCommand::PutIoThread(id, t) => {
                let at = self
                    .config
                    .iothreads
                    .iter()
                    .position(|e| e.id == id)
                    .unwrap_or(self.config.iothreads.len());
                validate::check_iothread(at, &t).map_err(bad)?;
                upsert(&mut self.config.iothreads, &id, *t, |e| &e.id);
                Ok(Reply::Done)
            }
            ApiCommand::PutRateLimitGroup(id, g) => {
                g.limits().check("").map_err(bad)?;
                upsert(&mut self.config.rate_limit_groups, &id, g, |e| &e.id);
                Ok(Reply::Done)
            }
            ApiCommand::PutLogger(l) => {
                if let Some(path) = &l.log_path {
                    self.check_path("log_path", path)?;
                }
                crate::logger::apply(&l).map(|()| Reply::Done).map_err(bad)
            }
            ApiCommand::PutMetrics(m) => {
                self.check_path("metrics_path", &m.path)?;
                let mut candidate = self.config.clone();
                candidate.metrics = Some(m);
                candidate.check_metrics().map_err(bad)?;
                self.config = candidate;
                Ok(Reply::Done)
            }
            ApiCommand::PutVsock(v) => {
                v.check("vsock").map_err(bad)?;
                self.check_path("uds_path", &v.uds_path)?;
                // Bound now, as Firecracker binds it: its clients may look for the socket before
                // `InstanceStart`. The device takes it over when it is built.
                devices::vsock::prebound::hold(&v.uds_path).map_err(|e| {
                    ApiError::BadRequest(format!("vsock.uds_path: {}: {e}", v.uds_path.display()))
                })?;
                self.config.vsock = Some(v);
                Ok(Reply::Done)
            }
            ApiCommand::ListIoThreads => Ok(Reply::IoThreads(
                self.config
                    .iothreads
                    .iter()
                    .cloned()
                    .map(IoThreadView::Configured)
                    .collect(),
            )),
            ApiCommand::GetIoThread(id) => {
                match self.config.iothreads.iter().find(|t| t.id == id) {
                    Some(t) => Ok(Reply::IoThread(Box::new(IoThreadView::Configured(
                        t.clone(),
                    )))),
                    None => Err(not_found("iothread", &id)),
                }
            }
            ApiCommand::ListDrives => Ok(Reply::Drives(
                self.config
                    .drives
                    .iter()
                    .cloned()
                    .map(DriveView::Configured)
                    .collect(),
            )),
            ApiCommand::GetDrive(id) => {
                match self.config.drives.iter().find(|d| d.drive_id == id) {
                    Some(d) => Ok(Reply::Drive(Box::new(DriveView::Configured(d.clone())))),
                    None => Err(not_found("drive", &id)),
                }
            }
            ApiCommand::ListRateLimitGroups => Ok(Reply::Groups(
                self.config
                    .rate_limit_groups
                    .iter()
                    .cloned()
                    .map(GroupView::Configured)
                    .collect(),
            )),
            ApiCommand::GetRateLimitGroup(id) => {
                match self.config.rate_limit_groups.iter().find(|g| g.id == id) {
                    Some(g) => Ok(Reply::Group(Box::new(GroupView::Configured(g.clone())))),
                    None => Err(not_found("rate limit group", &id)),
                }
            }
            ApiCommand::PatchIoThread(..) => Err(not_started("PATCH /iothreads (use PUT)")),
            ApiCommand::PatchDrive(..) => Err(not_started("PATCH /drives (use PUT)")),
            ApiCommand::PatchNetworkInterface(..) => {
                Err(not_started("PATCH /network-interfaces (use PUT)"))
            }
            ApiCommand::PutNetworkInterface(id, n) => {
                let at = self
                    .config
                    .network_interfaces
                    .iter()
                    .position(|e| e.iface_id == id)
                    .unwrap_or(self.config.network_interfaces.len());
                n.check(&format!("network-interfaces[{at}]")).map_err(bad)?;
                if let Some(other) = self
                    .config
                    .network_interfaces
                    .iter()
                    .find(|e| e.host_dev_name == n.host_dev_name && e.iface_id != id)
                {
                    return Err(ApiError::BadRequest(format!(
                        "host_dev_name: tap `{}` is already used by interface `{}`",
                        n.host_dev_name, other.iface_id
                    )));
                }
                upsert(&mut self.config.network_interfaces, &id, *n, |e| {
                    &e.iface_id
                });
                Ok(Reply::Done)
            }
            ApiCommand::PatchRateLimitGroup(..) => {
                Err(not_started("PATCH /rate-limit-groups (use PUT)"))
            }
            ApiCommand::GetMetrics => Err(not_started("GET /metrics")),
            ApiCommand::SetVmState(_) => Err(not_started("PATCH /vm")),
            ApiCommand::Action(a) => Err(not_started(&format!("{a:?}"))),
            ApiCommand::SnapshotCreate(_) => Err(not_started("PUT /snapshot/create")),
            // The pre-boot loop restores (`preboot::serve`); never handed here.
            ApiCommand::SnapshotLoad(_) => Err(ApiError::BadRequest(
                "PUT /snapshot/load: not in this phase".into(),
            )),
        }
    }

    fn set_machine(&mut self, m: crate::config::MachineConfig) -> ApiReply {
        let mut candidate = self.config.clone();
        candidate.machine = m;
        candidate
            .check_machine(crate::host::host_mem_mib())
            .map_err(bad)?;
        self.config = candidate;
        Ok(Reply::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::command::{VmAction, VmStateChange, VmStateRequest};
    use crate::config::{BootSourceConfig, DriveConfig, MachineConfig};

    /// A drive on a 4 KiB file of its own (made here: a PUT opens it).
    fn drive(id: &str, root: bool) -> Box<DriveConfig> {
        let dir =
            std::env::temp_dir().join(format!("osprey-pending-drives-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join(format!("{id}.img"));
        std::fs::write(&path, [0u8; 4096]).expect("drive file");
        let json =
            serde_json::json!({"drive_id": id, "path_on_host": path, "is_root_device": root});
        Box::new(serde_json::from_value(json).expect("drive"))
    }

    #[test]
    fn a_drive_whose_file_is_missing_is_refused_at_its_put() {
        let mut vm = PendingVm::new(VmConfig::default(), None);
        let mut missing = drive("gone", false);
        missing.path_on_host = "/nonexistent/osprey/rootfs.ext4".into();
        let m = fault(vm.execute(ApiCommand::PutDrive("gone".into(), missing)));
        assert!(
            m.starts_with("path_on_host: /nonexistent/osprey/rootfs.ext4: No such file"),
            "{m}"
        );
        assert!(body(vm.execute(ApiCommand::GetConfig))["drives"]
            .as_array()
            .is_none_or(Vec::is_empty));
    }

    /// A reply's JSON body (`null` for 204).
    fn body(reply: ApiReply) -> serde_json::Value {
        reply.expect("a reply").to_json().unwrap_or_default()
    }

    fn fault(reply: ApiReply) -> String {
        match reply {
            Err(e) if e.status() == 400 => e.to_string(),
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn puts_build_the_config_and_bad_sections_change_nothing() {
        let mut vm = PendingVm::new(VmConfig::default(), None);
        let info = body(vm.execute(ApiCommand::GetInfo));
        assert_eq!(info["state"], "Not started");
        let m = body(vm.execute(ApiCommand::GetMachineConfig));
        assert_eq!(
            (m["vcpu_count"].as_u64(), m["mem_size_mib"].as_u64()),
            (Some(1), Some(128))
        );
        assert_eq!(m["smt"], false);

        let put = MachineConfig {
            vcpu_count: 2,
            mem_size_mib: 256,
            ..MachineConfig::default()
        };
        assert_eq!(
            vm.execute(ApiCommand::PutMachineConfig(put)),
            Ok(Reply::Done)
        );
        let smt: MachineConfig =
            serde_json::from_str(r#"{"vcpu_count":2,"mem_size_mib":256,"smt":true}"#).expect("smt");
        assert!(
            fault(vm.execute(ApiCommand::PutMachineConfig(smt))).starts_with("machine-config.smt")
        );
        let mut fields = serde_json::Map::new();
        fields.insert("mem_size_mib".into(), 512.into());
        assert_eq!(
            vm.execute(ApiCommand::PatchMachineConfig(fields)),
            Ok(Reply::Done)
        );
        let m = body(vm.execute(ApiCommand::GetMachineConfig));
        assert_eq!(
            (m["vcpu_count"].as_u64(), m["mem_size_mib"].as_u64()),
            (Some(2), Some(512))
        );
        let mut unknown = serde_json::Map::new();
        unknown.insert("cpus".into(), 4.into());
        assert!(fault(vm.execute(ApiCommand::PatchMachineConfig(unknown))).contains("cpus"));

        // No boot source yet: the start is refused, naming what is missing.
        let e = vm.config().expect_err("no kernel");
        assert!(e.to_string().contains("PUT /boot-source"), "{e}");
        let boot = BootSourceConfig {
            kernel_image_path: "vmlinux".into(),
            boot_args: "console=ttyS0 caf\u{e9}".into(),
            ..BootSourceConfig::default()
        };
        assert!(
            fault(vm.execute(ApiCommand::PutBootSource(boot))).starts_with("boot-source.boot_args")
        );
        let boot = BootSourceConfig {
            kernel_image_path: "vmlinux".into(),
            ..BootSourceConfig::default()
        };
        assert_eq!(vm.execute(ApiCommand::PutBootSource(boot)), Ok(Reply::Done));

        // Drives: added, replaced by id, one root device.
        for (id, root) in [("data", false), ("root", true), ("data", false)] {
            assert_eq!(
                vm.execute(ApiCommand::PutDrive(id.into(), drive(id, root))),
                Ok(Reply::Done)
            );
        }
        let m = fault(vm.execute(ApiCommand::PutDrive("r2".into(), drive("r2", true))));
        assert_eq!(m, "is_root_device: drive `root` is already the root device");
        let config = vm.config().expect("config");
        let ids: Vec<&str> = config.drives.iter().map(|d| d.drive_id.as_str()).collect();
        assert_eq!(ids, ["data", "root"]);
        assert!(
            config.boot.kernel_image_path.is_absolute(),
            "paths from the working directory"
        );
        assert!(config.drives[0].path_on_host.is_absolute());
    }

    #[test]
    fn put_vsock_checks_its_fields_and_a_second_replaces_the_first() {
        let mut vm = PendingVm::new(VmConfig::default(), None);
        let v = |cid: u64, path: &str| vmm_config::vsock::VsockConfig {
            vsock_id: None,
            guest_cid: cid,
            uds_path: path.into(),
        };
        let m = fault(vm.execute(ApiCommand::PutVsock(v(2, "/tmp/v.sock"))));
        assert!(m.starts_with("vsock.guest_cid: "), "{m}");
        let m = fault(vm.execute(ApiCommand::PutVsock(v(3, ""))));
        assert!(m.starts_with("vsock.uds_path: "), "{m}");
        let dir = std::env::temp_dir().join(format!("osprey-put-vsock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
        let put = |vm: &mut PendingVm, cid, p: &std::path::Path| {
            vm.execute(ApiCommand::PutVsock(v(cid, p.to_str().expect("utf-8"))))
        };
        assert_eq!(put(&mut vm, 3, &a), Ok(Reply::Done));
        assert!(
            std::os::unix::net::UnixStream::connect(&a).is_ok(),
            "bound at the PUT, as Firecracker binds it"
        );
        assert_eq!(put(&mut vm, 4, &b), Ok(Reply::Done));
        assert!(!a.exists(), "the first socket is gone");
        assert!(std::os::unix::net::UnixStream::connect(&b).is_ok());
        let shown = body(vm.execute(ApiCommand::GetConfig));
        assert_eq!(shown["vsock"]["guest_cid"], 4, "{shown}");
        assert_eq!(
            shown["vsock"]["uds_path"],
            b.to_str().expect("utf-8"),
            "{shown}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn paths_outside_the_allowed_folders_are_refused_naming_the_field() {
        let dir = std::env::temp_dir().join(format!("osprey-pending-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let folders = AllowedFolders::resolve(&crate::allowed_folders::with_socket_folder(
            Some(&dir.join("api.sock")),
            &[],
        ));
        let mut vm = PendingVm::new(VmConfig::default(), Some(folders));
        let logger = crate::logger::LoggerConfig {
            log_path: Some("/etc/osprey-evil.log".into()),
            ..Default::default()
        };
        let m = fault(vm.execute(ApiCommand::PutLogger(logger)));
        assert!(
            m.starts_with("log_path: /etc/osprey-evil.log: outside") && m.contains("(API socket's"),
            "{m}"
        );
        let metrics: crate::config::MetricsConfig =
            serde_json::from_str(r#"{"metrics_path": "/dev/null"}"#).expect("metrics");
        assert!(fault(vm.execute(ApiCommand::PutMetrics(metrics))).starts_with("metrics_path: "));
        let boot = BootSourceConfig {
            kernel_image_path: "/boot/vmlinuz".into(),
            ..BootSourceConfig::default()
        };
        assert!(
            fault(vm.execute(ApiCommand::PutBootSource(boot))).starts_with("kernel_image_path: ")
        );
        let outside = drive("d", false);
        assert!(fault(vm.execute(ApiCommand::PutDrive("d".into(), outside)))
            .starts_with("path_on_host: "));
        let mut inside = drive("d", false);
        inside.path_on_host = dir.join("d.img");
        std::fs::write(&inside.path_on_host, [0u8; 4096]).expect("drive file");
        assert_eq!(
            vm.execute(ApiCommand::PutDrive("d".into(), inside)),
            Ok(Reply::Done)
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            !std::path::Path::new("/etc/osprey-evil.log").exists(),
            "nothing created"
        );
    }

    #[test]
    fn what_needs_a_running_vm_is_refused_before_the_start() {
        let mut vm = PendingVm::new(VmConfig::default(), None);
        for command in [
            ApiCommand::Action(VmAction::Pause),
            ApiCommand::Action(VmAction::SendCtrlAltDel),
            ApiCommand::SetVmState(VmStateRequest {
                state: VmStateChange::Paused,
            }),
            ApiCommand::GetMetrics,
        ] {
            assert!(fault(vm.execute(command)).contains("the VM has not started"));
        }
        assert_eq!(
            vm.execute(ApiCommand::GetDrive("nope".into())),
            Err(ApiError::NotFound("no drive with id `nope`".into()))
        );
        let config = body(vm.execute(ApiCommand::GetConfig));
        assert!(config.get("boot-source").is_none(), "{config}");
    }
}

#[cfg(test)]
mod net_tests {
    use super::*;
    use crate::net::NetworkInterfaceConfig;

    fn nic(json: &str) -> Box<NetworkInterfaceConfig> {
        Box::new(serde_json::from_str(json).expect("nic"))
    }

    fn fault(reply: ApiReply) -> String {
        match reply {
            Err(e) if e.status() == 400 => e.to_string(),
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    /// `PUT /network-interfaces/{id}` adds or replaces the interface; a bad value is a 400
    /// naming its field and changes nothing; a tap already used by another interface is refused.
    #[test]
    fn put_network_interface_checks_then_upserts() {
        let mut vm = PendingVm::new(VmConfig::default(), None);
        let m = fault(vm.execute(ApiCommand::PutNetworkInterface(
            "eth0".into(),
            nic(r#"{"iface_id":"eth0","host_dev_name":"tap0","guest_mac":"06:00"}"#),
        )));
        assert!(m.contains("network-interfaces[0].guest_mac"), "{m}");
        assert!(vm.config.network_interfaces.is_empty());
        let put = |vm: &mut PendingVm, id: &str, json: &str| {
            vm.execute(ApiCommand::PutNetworkInterface(id.into(), nic(json)))
        };
        assert!(matches!(
            put(
                &mut vm,
                "eth0",
                r#"{"iface_id":"eth0","host_dev_name":"tap0","rx_rate_limiter":{}}"#
            ),
            Ok(Reply::Done)
        ));
        assert!(matches!(
            put(
                &mut vm,
                "eth0",
                r#"{"iface_id":"eth0","host_dev_name":"tap1"}"#
            ),
            Ok(Reply::Done)
        ));
        assert_eq!(vm.config.network_interfaces.len(), 1, "replaced");
        assert_eq!(vm.config.network_interfaces[0].host_dev_name, "tap1");
        let m = fault(put(
            &mut vm,
            "eth1",
            r#"{"iface_id":"eth1","host_dev_name":"tap1"}"#,
        ));
        assert!(m.contains("host_dev_name") && m.contains("eth0"), "{m}");
        let m = fault(vm.execute(ApiCommand::PatchNetworkInterface(
            "eth0".into(),
            Default::default(),
        )));
        assert!(m.contains("PATCH /network-interfaces"), "{m}");
    }
}
