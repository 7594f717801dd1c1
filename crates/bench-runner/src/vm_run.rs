//! Runs Osprey once: writes the VM config, spawns the binary with a deadline, keeps its console
//! and log (also on disk, for a post-mortem), and turns them into a [`RunSample`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::blk_report::{BlkReport, BlkReportError};
use crate::matrix::Point;
use crate::sample::{RunSample, SampleError};
use crate::vm_config::{vm_config, RunParams};
use crate::vmm_log::{VmmLog, VmmLogError};

/// A run that produced no sample.
#[derive(Debug, Error)]
pub enum VmRunError {
    /// Writing the config or a log, or spawning Osprey, failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Osprey ran past its deadline and was killed.
    #[error("Osprey did not finish within {0:?} (killed); see {1}")]
    Timeout(Duration, PathBuf),
    /// The guest's report is missing or bad.
    #[error("{source} (osprey {status}; see {log})")]
    Report {
        /// Why.
        #[source]
        source: BlkReportError,
        /// Osprey's exit status.
        status: ExitStatus,
        /// Saved log.
        log: PathBuf,
    },
    /// A report from the BLK line's runs.
    #[error(transparent)]
    Blk(#[from] BlkReportError),
    /// Osprey's log is missing a line.
    #[error(transparent)]
    Log(#[from] VmmLogError),
    /// The numbers do not make a sample.
    #[error(transparent)]
    Sample(#[from] SampleError),
}

/// A finished Osprey process's output.
#[derive(Debug, Clone)]
pub struct VmOutput {
    /// Guest console (stdout).
    pub console: String,
    /// Osprey's log (stderr).
    pub log: String,
    /// Exit status.
    pub status: ExitStatus,
}

fn reader(mut src: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error ends the capture; whatever arrived is kept.
        let _ = src.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `osprey ARGS` to completion or `deadline` (then kills it).
pub fn run_osprey(
    osprey: &Path,
    args: &[&std::ffi::OsStr],
    deadline: Duration,
) -> Result<Result<VmOutput, Duration>, std::io::Error> {
    let mut child = Command::new(osprey)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().map(reader);
    let err = child.stderr.take().map(reader);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() >= deadline {
            // Already-exited children make kill fail; either way wait reaps it.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let console = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let log = err.and_then(|h| h.join().ok()).unwrap_or_default();
    Ok(match status {
        Some(status) => Ok(VmOutput {
            console,
            log,
            status,
        }),
        None => Err(deadline),
    })
}

/// Where one run keeps its config and outputs.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// `…/configs/<name>.json`.
    pub config: PathBuf,
    /// `…/logs/<name>.log` (console then log).
    pub log: PathBuf,
}

impl RunFiles {
    /// Files named `name` under `out`.
    pub fn new(out: &Path, name: &str) -> Self {
        RunFiles {
            config: out.join("configs").join(format!("{name}.json")),
            log: out.join("logs").join(format!("{name}.log")),
        }
    }
}

fn write(path: &Path, what: &'static str, data: &[u8]) -> Result<(), VmRunError> {
    let io = |source| VmRunError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    std::fs::write(path, data).map_err(io)
}

/// Boots the guest for one run of `point` and returns its sample.
pub fn run_point(
    osprey: &Path,
    point: &Point,
    params: &RunParams<'_>,
    files: &RunFiles,
    deadline: Duration,
) -> Result<RunSample, VmRunError> {
    let config = vm_config(point, params);
    let text = serde_json::to_string_pretty(&config).unwrap_or_else(|_| config.to_string());
    write(&files.config, "Cannot write the VM config", text.as_bytes())?;
    let args = [std::ffi::OsStr::new("--config"), files.config.as_os_str()];
    let out = run_osprey(osprey, &args, deadline).map_err(|source| VmRunError::Io {
        what: "Cannot run",
        path: osprey.to_path_buf(),
        source,
    })?;
    let out = match out {
        Ok(out) => out,
        Err(d) => return Err(VmRunError::Timeout(d, files.log.clone())),
    };
    let saved = format!("== console ==\n{}\n== log ==\n{}", out.console, out.log);
    write(&files.log, "Cannot write the run log", saved.as_bytes())?;
    let report = BlkReport::from_console(&out.console).map_err(|source| VmRunError::Report {
        source,
        status: out.status,
        log: files.log.clone(),
    })?;
    let log = VmmLog::parse(&out.log)?;
    RunSample::from_outputs(&report, &log)
}
