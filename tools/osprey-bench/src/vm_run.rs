//! Runs Osprey once: writes the VM config, spawns the binary with a deadline, keeps its console
//! and log (also on disk, for a post-mortem), and has the guest turn them into a [`RunSample`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::guest::{GuestError, GuestRun};
use crate::matrix::Point;
use crate::sample::RunSample;
use crate::vm_config::{vm_config, DriveParams};

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
    #[error("Osprey did not finish within {0:?} (killed); console ends: {1}; see {2}")]
    Timeout(Duration, String, PathBuf),
    /// The guest's outputs do not make a sample.
    #[error("{source} (osprey {status}; see {log})")]
    Report {
        /// Why.
        #[source]
        source: GuestError,
        /// Osprey's exit status.
        status: ExitStatus,
        /// Saved log.
        log: PathBuf,
    },
}

/// A killed Osprey process's output so far.
#[derive(Debug, Clone)]
pub struct TimedOut {
    /// The deadline it ran past.
    pub after: Duration,
    /// Guest console (stdout) up to the kill.
    pub console: String,
    /// Osprey's log (stderr) up to the kill.
    pub log: String,
}

/// Lines kept by [`excerpt`].
const EXCERPT_LINES: usize = 6;
/// Characters kept by [`excerpt`].
const EXCERPT_CHARS: usize = 600;

/// The last few of `lines` as `a | b | c` (at most 6 lines and 600 characters, the end kept),
/// for error messages; `(empty)` for none.
pub fn excerpt<S: AsRef<str>>(lines: &[S]) -> String {
    let start = lines.len().saturating_sub(EXCERPT_LINES);
    let text = lines[start..]
        .iter()
        .map(|l| l.as_ref().trim())
        .collect::<Vec<_>>()
        .join(" | ");
    let n = text.chars().count();
    if text.is_empty() {
        "(empty)".to_string()
    } else if n <= EXCERPT_CHARS {
        text
    } else {
        let kept: String = text.chars().skip(n - EXCERPT_CHARS).collect();
        format!("…{kept}")
    }
}

/// The last non-empty lines of a console, as [`excerpt`] shows them.
pub fn console_tail(console: &str) -> String {
    let lines: Vec<&str> = console.lines().filter(|l| !l.trim().is_empty()).collect();
    excerpt(&lines)
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
    /// The last line of the run's metrics file: `GET /metrics` as the VM stopped.
    pub metrics: Option<serde_json::Value>,
}

fn reader(mut src: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error ends the capture; whatever arrived is kept.
        let _ = src.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `osprey ARGS` to completion or `deadline` (then kills it and returns what it printed).
pub fn run_osprey(
    osprey: &Path,
    args: &[&std::ffi::OsStr],
    deadline: Duration,
) -> Result<Result<VmOutput, TimedOut>, std::io::Error> {
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
            metrics: None,
        }),
        None => Err(TimedOut {
            after: deadline,
            console,
            log,
        }),
    })
}

/// Where one run keeps its config and outputs.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// `…/configs/<name>.json`.
    pub config: PathBuf,
    /// `…/logs/<name>.log` (console then log).
    pub log: PathBuf,
    /// `…/metrics/<name>.jsonl`: Osprey appends its metrics there once, as the VM stops (the
    /// interval is longer than any run).
    pub metrics: PathBuf,
}

impl RunFiles {
    /// Files named `name` under `out`.
    pub fn new(out: &Path, name: &str) -> Self {
        RunFiles {
            config: out.join("configs").join(format!("{name}.json")),
            log: out.join("logs").join(format!("{name}.log")),
            metrics: out.join("metrics").join(format!("{name}.jsonl")),
        }
    }
}

/// Longer than any run: Osprey writes the metrics line only when the VM stops.
const METRICS_INTERVAL_MS: u64 = 24 * 3600 * 1000;

/// The last JSON line of `path`, if any.
fn last_metrics(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    serde_json::from_str(line).ok()
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

/// Boots `guest` for one run of `point` and returns its sample.
pub fn run_point(
    osprey: &Path,
    point: &Point,
    drive: &DriveParams<'_>,
    guest: &impl GuestRun,
    files: &RunFiles,
    deadline: Duration,
) -> Result<RunSample, VmRunError> {
    let mut config = vm_config(point, drive, &guest.boot(point));
    if let Some(dir) = files.metrics.parent() {
        std::fs::create_dir_all(dir).map_err(|source| VmRunError::Io {
            what: "Cannot create the metrics folder",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    // A file left by an earlier run of the same name must not be read as this run's.
    let _ = std::fs::remove_file(&files.metrics);
    config["metrics"] = serde_json::json!({
        "path": files.metrics,
        "interval_ms": METRICS_INTERVAL_MS,
    });
    let text = serde_json::to_string_pretty(&config).unwrap_or_else(|_| config.to_string());
    write(&files.config, "Cannot write the VM config", text.as_bytes())?;
    let args = [std::ffi::OsStr::new("--config"), files.config.as_os_str()];
    let out = run_osprey(osprey, &args, deadline).map_err(|source| VmRunError::Io {
        what: "Cannot run",
        path: osprey.to_path_buf(),
        source,
    })?;
    let save = |console: &str, log: &str| {
        let saved = format!("== console ==\n{console}\n== log ==\n{log}");
        write(&files.log, "Cannot write the run log", saved.as_bytes())
    };
    let out = match out {
        Ok(out) => out,
        Err(t) => {
            save(&t.console, &t.log)?;
            return Err(VmRunError::Timeout(
                t.after,
                console_tail(&t.console),
                files.log.clone(),
            ));
        }
    };
    save(&out.console, &out.log)?;
    let out = VmOutput {
        metrics: last_metrics(&files.metrics),
        ..out
    };
    guest
        .sample(point, &out)
        .map_err(|source| VmRunError::Report {
            source,
            status: out.status,
            log: files.log.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_keep_the_end() {
        assert_eq!(console_tail("a\n\n  b\r\nc\n"), "a | b | c");
        assert_eq!(console_tail(""), "(empty)");
        let many: Vec<String> = (1..=10).map(|i| format!("line {i}")).collect();
        assert_eq!(
            excerpt(&many),
            "line 5 | line 6 | line 7 | line 8 | line 9 | line 10"
        );
        let long = excerpt(&[format!("{}end", "x".repeat(1000))]);
        assert!(long.starts_with('…') && long.ends_with("xend"), "{long}");
        assert_eq!(long.chars().count(), 601);
    }
}
