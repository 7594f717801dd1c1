//! Start-up's preflight: what a config asks of the host, checked and opened before any KVM
//! resource exists. The kernel is a kernel Osprey can boot and fits in guest memory with its
//! initrd, the folders of the files Osprey creates exist (`snapshot.folder` too), the API
//! socket is free, each drive's engine runs on this kernel, and each drive's backing file
//! opens: the opened files are handed to start-up ([`Preflight::drives`]), which opens none of
//! them again. `--check-config` runs the same preflight, so it refuses everything start-up
//! would; what start-up would only warn about comes back as a [`ConfigWarning`].

use std::path::Path;

use crate::config::{invalid, ConfigError, ConfigWarning, DriveConfig, VmConfig};
use crate::drive::OpenedDrive;

/// What the preflight opened and found.
#[derive(Debug)]
pub struct Preflight {
    /// Each drive's backing file, opened and sized, in `drives` order.
    pub drives: Vec<OpenedDrive>,
    /// Each network interface's tap, opened, in `network-interfaces` order.
    pub taps: Vec<devices::net::Tap>,
    /// What start-up would warn about.
    pub warnings: Vec<ConfigWarning>,
}

/// Checks `config`'s values ([`VmConfig::check_values`]), then runs the preflight ([`run`]).
pub fn check(config: &VmConfig, host_mem_mib: u64) -> Result<Preflight, ConfigError> {
    config.check_values(host_mem_mib)?;
    run(config)
}

/// Checks what `config` (its values checked) asks of the host and opens its drives.
pub fn run(config: &VmConfig) -> Result<Preflight, ConfigError> {
    check_boot_files(config)?;
    check_created_paths(config)?;
    let mut warnings = Vec::new();
    check_vcpu_limits(config, &mut warnings)?;
    crate::sandbox::check_strict(&config.sandbox).map_err(ConfigError::SandboxStrict)?;
    let drives = config
        .drives
        .iter()
        .enumerate()
        .map(|(i, d)| open_drive(i, d, &mut warnings))
        .collect::<Result<_, _>>()?;
    let taps = crate::net::open_taps(&config.network_interfaces)?;
    Ok(Preflight {
        drives,
        taps,
        warnings,
    })
}

/// The vCPU count against this host's KVM: above its hard limit refused, above the count it
/// recommends a warning. Only asks KVM's capabilities (no VM is created); where `/dev/kvm` does
/// not open, start-up says so.
fn check_vcpu_limits(
    config: &VmConfig,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(), ConfigError> {
    let Ok(kvm) = kvm_ioctls::Kvm::new() else {
        return Ok(());
    };
    let limits = crate::host::VcpuLimits {
        recommended: kvm.get_nr_vcpus(),
        max: kvm.get_max_vcpus(),
    };
    if let Some(message) = limits.check(config.machine.vcpu_count)? {
        warnings.push(ConfigWarning {
            file: None,
            field: "machine-config.vcpu_count".into(),
            message,
        });
    }
    Ok(())
}

/// The kernel is a kernel and fits in guest memory; the initrd fits above it.
fn check_boot_files(config: &VmConfig) -> Result<(), ConfigError> {
    const KERNEL: &str = "boot-source.kernel_image_path";
    const INITRD: &str = "boot-source.initrd_path";
    let kernel = &config.boot.kernel_image_path;
    check_readable(KERNEL, kernel)?;
    let image = arch::kernel_image::inspect(kernel).map_err(|source| ConfigError::KernelImage {
        field: KERNEL,
        source,
    })?;
    let initrd = match &config.boot.initrd_path {
        Some(path) => {
            let size = check_readable(INITRD, path)?;
            Some((path.as_path(), size))
        }
        None => None,
    };
    let mem_bytes = config.machine.mem_size_mib << 20;
    image
        .check_fit(kernel, mem_bytes, initrd)
        .map_err(|source| ConfigError::KernelImage {
            field: match source {
                arch::kernel_image::KernelImageError::InitrdTooBig { .. } => INITRD,
                _ => KERNEL,
            },
            source,
        })
}

/// The metrics file's, the API socket's and the snapshot folders exist, and nothing serves
/// the socket.
fn check_created_paths(config: &VmConfig) -> Result<(), ConfigError> {
    if let Some(m) = &config.metrics {
        check_parent_dir("metrics.metrics_path", &m.path)?;
    }
    if let Some(s) = &config.snapshot {
        if !s.folder.is_dir() {
            return Err(invalid(
                "snapshot.folder",
                format!("{}: not an existing folder", s.folder.display()),
            ));
        }
    }
    if let Some(a) = &config.api {
        check_parent_dir("api.socket", &a.socket)?;
        check_socket_free("api.socket", &a.socket)?;
    }
    Ok(())
}

/// `drives[i]`: its engine runs here, and its backing file opens (a size that is not a whole
/// number of sectors is a warning).
fn open_drive(
    i: usize,
    d: &DriveConfig,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<OpenedDrive, ConfigError> {
    dataplane::engine::probe(d.io_engine.to_dataplane())
        .map_err(|source| ConfigError::Engine { index: i, source })?;
    let opened = crate::drive::open(&d.path_on_host, d.is_read_only, d.direct)
        .map_err(|source| ConfigError::Drive { index: i, source })?;
    if let Some(message) = opened.tail_warning(&d.path_on_host) {
        warnings.push(ConfigWarning {
            file: None,
            field: format!("drives[{i}].path_on_host"),
            message,
        });
    }
    Ok(opened)
}

/// A file the VMM will create must have an existing folder.
fn check_parent_dir(field: &str, path: &Path) -> Result<(), ConfigError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if parent.is_dir() {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{}: the folder does not exist", path.display()),
        ))
    }
}

/// The file opens and is not a directory; returns its size.
fn check_readable(field: &str, path: &Path) -> Result<u64, ConfigError> {
    if path.as_os_str().is_empty() {
        return Err(invalid(field, "must name a file"));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| invalid(field, format!("{}: {e}", path.display())))?;
    match file.metadata() {
        Ok(md) if md.is_dir() => Err(invalid(
            field,
            format!("{}: is a directory", path.display()),
        )),
        Ok(md) => Ok(md.len()),
        Err(e) => Err(invalid(field, format!("{}: {e}", path.display()))),
    }
}

/// The API socket path must be one start-up can bind (`api::socket::check_free`, which binding
/// asks again): nothing there, or a stale socket file whose process is gone.
fn check_socket_free(field: &str, path: &Path) -> Result<(), ConfigError> {
    use crate::socket::{check_free, ApiServerError};
    let why = match check_free(path) {
        Ok(_) => return Ok(()),
        Err(ApiServerError::InUse { .. }) => format!(
            "{}: another running process serves this socket (another Osprey?); stop it or \
             choose another path",
            path.display()
        ),
        Err(ApiServerError::NotASocket { .. }) => {
            format!("{}: the path exists and is not a socket", path.display())
        }
        Err(e) => e.to_string(),
    };
    Err(invalid(field, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drives_are_opened_once_and_handed_on() {
        let dir = std::env::temp_dir().join(format!("osprey-preflight-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (a, b) = (dir.join("a.img"), dir.join("b.img"));
        std::fs::write(&a, vec![0u8; 4096]).expect("a");
        std::fs::write(&b, vec![0u8; 1024 + 100]).expect("b");
        let kernel = std::env::current_exe().expect("exe");
        let config: VmConfig = serde_json::from_value(serde_json::json!({
            "boot-source": {"kernel_image_path": kernel},
            "drives": [
                {"drive_id": "a", "path_on_host": a},
                {"drive_id": "b", "path_on_host": b, "is_read_only": true},
            ],
        }))
        .expect("config");
        let p = check(&config, 1024).expect("preflight");
        let sizes: Vec<u64> = p.drives.iter().map(|d| d.capacity_sectors).collect();
        assert_eq!(sizes, vec![8, 2], "one opened file per drive, in order");
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert_eq!(p.warnings[0].field, "drives[1].path_on_host");
        // The files stay usable after their paths are gone: start-up opens nothing again.
        std::fs::remove_dir_all(&dir).ok();
        assert!(p.drives.iter().all(|d| d.file.metadata().is_ok()));
        let e = check(&config, 1024).expect_err("gone").to_string();
        assert!(e.starts_with("drives[0].path_on_host: "), "{e}");
    }

    #[test]
    fn a_served_socket_is_refused_and_a_stale_one_is_not() {
        let dir = std::env::temp_dir().join(format!("osprey-cfg-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let sock = dir.join("api.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let e = check_socket_free("api.socket", &sock).expect_err("served");
        assert!(
            e.to_string()
                .contains("another running process serves this socket"),
            "{e}"
        );
        drop(listener);
        assert!(
            check_socket_free("api.socket", &sock).is_ok(),
            "stale: replaced at start"
        );
        std::fs::remove_file(&sock).ok();
        assert!(check_socket_free("api.socket", &sock).is_ok(), "absent");
        std::fs::write(&sock, b"x").expect("file");
        assert!(
            check_socket_free("api.socket", &sock).is_err(),
            "a regular file"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
