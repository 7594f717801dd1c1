//! The process's log: env_logger writing to standard error until `logger.log_path` (the config's
//! `logger` section or `PUT /logger`, Firecracker's shape) names a file or FIFO; the level can
//! change at any time. `RUST_LOG`, when set, decides the filter instead.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::line_sink::LineSink;

/// `logger`: Firecracker's `PUT /logger` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoggerConfig {
    /// The level (default `Info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<LogLevel>,
    /// A file or FIFO the log goes to instead of standard error (opened non-blocking, appended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub log_path: Option<PathBuf>,
    /// Print each line's level.
    #[serde(default)]
    pub show_level: bool,
    /// Print each line's source file and line.
    #[serde(default)]
    pub show_log_origin: bool,
    /// Firecracker's module filter: only lines from modules whose path starts with it (such as
    /// `vmm::vm` or `dataplane`) are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
}

/// Firecracker's level names (`Warn` also read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Errors.
    Error,
    /// Warnings and errors.
    #[serde(alias = "Warn")]
    Warning,
    /// The default.
    Info,
    /// More.
    Debug,
    /// Everything.
    Trace,
}

impl From<log::LevelFilter> for LogLevel {
    fn from(l: log::LevelFilter) -> Self {
        match l {
            log::LevelFilter::Off => Self::Off,
            log::LevelFilter::Error => Self::Error,
            log::LevelFilter::Warn => Self::Warning,
            log::LevelFilter::Info => Self::Info,
            log::LevelFilter::Debug => Self::Debug,
            log::LevelFilter::Trace => Self::Trace,
        }
    }
}

impl From<LogLevel> for log::LevelFilter {
    fn from(l: LogLevel) -> Self {
        match l {
            LogLevel::Off => Self::Off,
            LogLevel::Error => Self::Error,
            LogLevel::Warning => Self::Warn,
            LogLevel::Info => Self::Info,
            LogLevel::Debug => Self::Debug,
            LogLevel::Trace => Self::Trace,
        }
    }
}

/// Errors applying a logger config.
#[derive(Debug, thiserror::Error)]
pub enum LoggerError {
    /// The log file could not be opened.
    #[error("log_path: {path}: {source}")]
    Open {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Where lines go: `None` is standard error.
static SINK: Mutex<Option<LineSink>> = Mutex::new(None);
/// Lines carry their level (Osprey's default; Firecracker's `show_level`).
static SHOW_LEVEL: AtomicBool = AtomicBool::new(true);
static SHOW_ORIGIN: AtomicBool = AtomicBool::new(false);
/// `RUST_LOG` decides the filter: `level` is then not applied.
static ENV_FILTER: AtomicBool = AtomicBool::new(false);
/// Firecracker's `module`: only lines from modules whose path starts with it.
static MODULE: Mutex<Option<String>> = Mutex::new(None);

/// Whether a line from `module_path` passes the `module` filter (Firecracker's rule: a prefix of
/// the module's path; a line without a module path passes only when no filter is set).
fn module_passes(filter: Option<&str>, module_path: Option<&str>) -> bool {
    match (filter, module_path) {
        (None, _) => true,
        (Some(f), Some(m)) => m.starts_with(f),
        (Some(_), None) => false,
    }
}

/// Lines the log file did not take whole (a FIFO nobody reads is full: EAGAIN), dropped:
/// Firecracker's `logger.missed_log_count`.
static MISSED_LINES: AtomicU64 = AtomicU64::new(0);

/// How many log lines were dropped because the log file did not take them.
pub fn missed_lines() -> u64 {
    MISSED_LINES.load(Ordering::Relaxed)
}

/// The writer env_logger is given.
struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut file = SINK.lock().unwrap_or_else(|p| p.into_inner());
        match file.as_mut() {
            // One write per line (env_logger formats the line first). A log file opened
            // non-blocking (a FIFO) that cannot take it drops it, counted, and never blocks; a
            // line it took in part is finished before the next ([`LineSink`]).
            Some(f) => {
                if f.write_line(buf).is_err() {
                    MISSED_LINES.fetch_add(1, Ordering::Relaxed);
                }
                Ok(buf.len())
            }
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the logger at `level` (or `RUST_LOG`'s filter when set). Call once.
pub fn init(level: log::LevelFilter) {
    let mut builder = env_logger::Builder::new();
    builder
        .target(env_logger::Target::Pipe(Box::new(Sink)))
        .format(|buf, record| {
            let filter = MODULE.lock().unwrap_or_else(|p| p.into_inner());
            if !module_passes(filter.as_deref(), record.module_path()) {
                return Ok(());
            }
            drop(filter);
            let ts = buf.timestamp_millis();
            let level = if SHOW_LEVEL.load(Ordering::Relaxed) {
                format!(" {:<5}", record.level())
            } else {
                String::new()
            };
            let origin = match (SHOW_ORIGIN.load(Ordering::Relaxed), record.file()) {
                (true, Some(file)) => format!(" {file}:{}", record.line().unwrap_or(0)),
                _ => String::new(),
            };
            writeln!(buf, "[{ts}{level}{origin}] {}", record.args())
        });
    if std::env::var_os("RUST_LOG").is_some() {
        ENV_FILTER.store(true, Ordering::Relaxed);
        builder.parse_env("RUST_LOG");
    } else {
        builder.filter_level(log::LevelFilter::Trace);
    }
    if builder.try_init().is_ok() && !ENV_FILTER.load(Ordering::Relaxed) {
        log::set_max_level(level);
    }
}

/// Applies `config`: the level at once, the file opened (non-blocking, so a FIFO without a
/// reader does not block, as Firecracker opens it) and used from the next line on.
pub fn apply(config: &LoggerConfig) -> Result<(), LoggerError> {
    if let Some(path) = &config.log_path {
        let file = open_nonblocking(path).map_err(|source| LoggerError::Open {
            path: path.clone(),
            source,
        })?;
        *SINK.lock().unwrap_or_else(|p| p.into_inner()) = Some(LineSink::new(file));
    }
    if let Some(m) = &config.module {
        *MODULE.lock().unwrap_or_else(|p| p.into_inner()) = Some(m.clone());
    }
    SHOW_LEVEL.store(config.show_level, Ordering::Relaxed);
    SHOW_ORIGIN.store(config.show_log_origin, Ordering::Relaxed);
    if !ENV_FILTER.load(Ordering::Relaxed) {
        log::set_max_level(config.level.unwrap_or(LogLevel::Info).into());
    }
    Ok(())
}

/// The log file's metadata (`logger.log_path`'s file once applied), or `None` while lines go to
/// standard error: a snapshot must never replace it (`snapshot::commit`).
pub fn file_metadata() -> Option<std::fs::Metadata> {
    let file = SINK.lock().unwrap_or_else(|p| p.into_inner());
    file.as_ref().and_then(|f| f.file().metadata().ok())
}

/// Opens `path` for appending, created if missing, without blocking on a FIFO.
pub fn open_nonblocking(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firecrackers_body_is_read() {
        let c: LoggerConfig = serde_json::from_str(
            r#"{"level":"Debug","log_path":"/tmp/x","show_level":true,"show_log_origin":false}"#,
        )
        .expect("firecracker's body");
        assert_eq!(c.level, Some(LogLevel::Debug));
        assert!(serde_json::from_str::<LoggerConfig>(r#"{"level":"Loud"}"#).is_err());
        assert!(serde_json::from_str::<LoggerConfig>(r#"{"colour":true}"#).is_err());
    }

    #[test]
    fn the_module_filter_keeps_lines_of_modules_under_it() {
        assert!(module_passes(None, Some("dataplane::iothread")));
        assert!(module_passes(None, None));
        assert!(module_passes(Some("vmm::vm"), Some("vmm::vm::running")));
        assert!(!module_passes(Some("vmm::vm"), Some("dataplane::iothread")));
        assert!(!module_passes(Some("vmm"), None));
    }

    #[test]
    fn a_fifo_without_a_reader_opens() {
        let fifo = std::env::temp_dir().join(format!("osprey-log-{}.fifo", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: `c` is a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let opened = open_nonblocking(&fifo);
        let _ = std::fs::remove_file(&fifo);
        opened.expect("opens without a reader");
    }
}
