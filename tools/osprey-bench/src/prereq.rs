//! What must exist before the first point: the repository root, the Osprey binary and the test
//! guest (built when missing), fio (installed with apt-get when missing and possible), and the
//! vCPU TSC frequency and KVM flavour that Osprey logs at start-up.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use thiserror::Error;

use crate::vm_run::run_osprey;
use crate::vmm_log::VmmLog;

/// A prerequisite is missing and could not be made.
#[derive(Debug, Error)]
pub enum PrereqError {
    /// A path given on the command line does not exist.
    #[error("{0} does not exist")]
    Missing(PathBuf),
    /// A build command failed.
    #[error("`{0}` failed")]
    Build(String),
    /// The start-up probe failed.
    #[error("Osprey's start-up probe failed: {0}")]
    Probe(String),
}

/// The repository root: the nearest ancestor of the working directory holding `Cargo.toml` and
/// `guest-images/`, else the one this binary was built from.
pub fn repo_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join("Cargo.toml").is_file() && dir.join("guest-images").is_dir() {
                return dir.to_path_buf();
            }
        }
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    built.canonicalize().unwrap_or(built)
}

fn run_build(cmd: &mut Command) -> Result<(), PrereqError> {
    let shown = format!("{cmd:?}");
    eprintln!("osprey-bench: running {shown}");
    let ok = cmd
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(PrereqError::Build(shown))
    }
}

/// The Osprey binary: `given` (which must exist), or `target/release/osprey`, built with
/// `cargo build --release --bin osprey` when missing.
pub fn osprey_binary(root: &Path, given: Option<&Path>) -> Result<PathBuf, PrereqError> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(PrereqError::Missing(p.to_path_buf()))
        };
    }
    let p = root.join("target/release/osprey");
    if !p.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        run_build(Command::new(cargo).current_dir(root).args([
            "build",
            "--release",
            "--bin",
            "osprey",
        ]))?;
    }
    if p.is_file() {
        Ok(p)
    } else {
        Err(PrereqError::Missing(p))
    }
}

/// The test guest: `given` (which must exist), or `guest-images/build/test-guest.elf`, built
/// with `make -C guest-images test-guest` when missing.
pub fn guest_image(root: &Path, given: Option<&Path>) -> Result<PathBuf, PrereqError> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(PrereqError::Missing(p.to_path_buf()))
        };
    }
    let p = root.join("guest-images/build/test-guest.elf");
    if !p.is_file() {
        run_build(
            Command::new("make")
                .arg("-C")
                .arg(root.join("guest-images"))
                .arg("test-guest"),
        )?;
    }
    if p.is_file() {
        Ok(p)
    } else {
        Err(PrereqError::Missing(p))
    }
}

/// Makes fio available, or says why the native columns will be empty.
pub fn ensure_fio() -> Result<(), String> {
    if crate::fio::fio_available() {
        return Ok(());
    }
    if !crate::store::is_root() {
        return Err(
            "fio is not installed and installing it needs root (apt-get install fio)".into(),
        );
    }
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .is_ok_and(|s| s.success())
    };
    eprintln!("osprey-bench: fio is missing; installing it with apt-get");
    let installed =
        apt(&["install", "-y", "fio"]) || (apt(&["update"]) && apt(&["install", "-y", "fio"]));
    if !installed {
        return Err("fio is not installed and `apt-get install -y fio` failed".into());
    }
    if crate::fio::fio_available() {
        Ok(())
    } else {
        Err("fio still does not run after apt-get install".into())
    }
}

/// What Osprey's start-up log says about the host.
#[derive(Debug, Clone)]
pub struct VmmProbe {
    /// vCPU TSC frequency, passed to the guest as `tsc_khz=`.
    pub tsc_khz: u64,
    /// The `KVM: …` line.
    pub kvm: String,
}

/// Boots the guest in `mode=report` once and reads the TSC frequency and KVM flavour.
pub fn probe_vmm(osprey: &Path, guest: &Path) -> Result<VmmProbe, PrereqError> {
    let args = [
        OsStr::new("--kernel"),
        guest.as_os_str(),
        OsStr::new("--cmdline"),
        OsStr::new("mode=report"),
    ];
    let out = run_osprey(osprey, &args, Duration::from_secs(60))
        .map_err(|e| PrereqError::Probe(e.to_string()))?
        .map_err(|t| PrereqError::Probe(format!("no exit within {:?}", t.after)))?;
    let log = VmmLog::parse(&out.log);
    let tail = || {
        out.log
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let tsc_khz = log.tsc_khz.ok_or_else(|| {
        PrereqError::Probe(format!(
            "no `vCPU TSC frequency` line ({}; last log lines: {})",
            out.status,
            tail()
        ))
    })?;
    Ok(VmmProbe {
        tsc_khz,
        kvm: log.kvm.unwrap_or_else(|| "unknown (no `KVM:` line)".into()),
    })
}
