//! Host fio on the same store: the "native" reference for a point. Maps Osprey's engine to a fio
//! ioengine, runs one job group per distinct (rw, bs, iodepth, numjobs, ioengine), parses fio's
//! JSON, and measures fio's CPU time with `getrusage(RUSAGE_CHILDREN)`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;
use thiserror::Error;

use crate::matrix::{Engine, Point, Rw};
use crate::sample::us_per_io;

/// fio could not give a result.
#[derive(Debug, Error)]
pub enum FioError {
    /// Spawning fio failed.
    #[error("Cannot run fio")]
    Spawn(#[source] std::io::Error),
    /// fio exited with an error.
    #[error("fio failed ({status}): {stderr}")]
    Failed {
        /// Exit status.
        status: std::process::ExitStatus,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// The output is not fio JSON.
    #[error("Bad fio JSON")]
    Json(#[from] serde_json::Error),
    /// The JSON has no job or the job reported an error.
    #[error("fio reported no usable job (error {0})")]
    NoJob(i64),
}

/// One fio job group (the cache key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FioJob {
    /// Access pattern.
    pub rw: Rw,
    /// Block size.
    pub bs: u64,
    /// `--iodepth`.
    pub iodepth: u32,
    /// `--numjobs`.
    pub numjobs: u32,
    /// `--ioengine`.
    pub ioengine: &'static str,
}

impl FioJob {
    /// The native counterpart of a point: same rw, bs, numjobs = queues; `io_uring` for IoUring
    /// and Null, `libaio` for LinuxAio (both at iodepth = qd), `psync` for Sync (iodepth 1: a
    /// synchronous engine has one request in flight per job, like Osprey's Sync engine).
    pub fn for_point(p: &Point) -> Self {
        let (ioengine, iodepth) = match p.engine {
            Engine::IoUring | Engine::Null | Engine::Auto => ("io_uring", p.qd),
            Engine::LinuxAio => ("libaio", p.qd),
            Engine::Sync => ("psync", 1),
        };
        FioJob {
            rw: p.rw,
            bs: p.bs,
            iodepth,
            numjobs: p.queues,
            ioengine,
        }
    }

    /// `io_uring qd32×1`.
    pub fn label(&self) -> String {
        format!("{} qd{}×{}", self.ioengine, self.iodepth, self.numjobs)
    }

    /// fio's arguments for a `seconds`-long run on `store` over its first `size` bytes.
    pub fn args(&self, store: &Path, direct: bool, size: u64, seconds: f64) -> Vec<String> {
        let ms = (seconds * 1000.0).round().max(100.0) as u64;
        vec![
            "--name=native".into(),
            format!("--filename={}", store.display()),
            format!("--direct={}", u8::from(direct)),
            format!("--rw={}", self.rw),
            format!("--bs={}", self.bs),
            format!("--iodepth={}", self.iodepth),
            format!("--numjobs={}", self.numjobs),
            format!("--ioengine={}", self.ioengine),
            format!("--size={size}"),
            format!("--runtime={ms}ms"),
            "--time_based".into(),
            "--group_reporting".into(),
            "--randrepeat=0".into(),
            "--norandommap".into(),
            "--output-format=json".into(),
        ]
    }
}

/// The native numbers of a job group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FioResult {
    /// Requests per second, all jobs.
    pub iops: f64,
    /// MiB/s, all jobs.
    pub bw_mib_s: f64,
    /// Mean submit-to-complete latency, µs.
    pub lat_mean_us: f64,
    /// Median completion latency, µs.
    pub lat_p50_us: f64,
    /// 99th percentile completion latency, µs.
    pub lat_p99_us: f64,
    /// fio's user + system CPU per I/O, µs (NaN when unmeasured).
    pub cpu_us: f64,
    /// I/Os completed.
    pub ios: u64,
}

#[derive(Debug, Deserialize)]
struct FioOutput {
    #[serde(default)]
    jobs: Vec<FioJobReport>,
}

/// The first job of fio's JSON (with `group_reporting`, the whole group), as far as the runner
/// reads it. Shared by the native runs and the Linux guest's fio.
#[derive(Debug, Clone, Deserialize)]
pub struct FioJobReport {
    /// fio's error code for the job (an errno; 0 when every I/O worked).
    #[serde(default)]
    pub error: i64,
    /// I/O errors counted (fio reports it only with `continue_on_error`).
    #[serde(default)]
    pub total_err: Option<u64>,
    /// The job's options as fio echoes them (values are strings).
    #[serde(default, rename = "job options")]
    pub options: HashMap<String, serde_json::Value>,
    /// Reads.
    pub read: FioSide,
    /// Writes.
    pub write: FioSide,
}

impl FioJobReport {
    /// The side `rw` moves data on.
    pub fn side(&self, rw: Rw) -> &FioSide {
        if rw.is_read() {
            &self.read
        } else {
            &self.write
        }
    }

    /// A job option as a number (fio writes them as strings).
    pub fn option_u64(&self, key: &str) -> Option<u64> {
        match self.options.get(key)? {
            serde_json::Value::String(s) => s.trim().parse().ok(),
            v => v.as_u64(),
        }
    }
}

/// One direction (`read` or `write`) of a fio job.
#[derive(Debug, Clone, Deserialize)]
pub struct FioSide {
    /// I/Os per second.
    #[serde(default)]
    pub iops: f64,
    /// Bytes per second.
    #[serde(default)]
    pub bw_bytes: f64,
    /// I/Os completed.
    #[serde(default)]
    pub total_ios: u64,
    /// Time the I/O ran, ms (ramp time excluded).
    #[serde(default)]
    pub runtime: u64,
    /// Total latency (submission + completion).
    #[serde(default)]
    pub lat_ns: FioLat,
    /// Completion latency (from submission to completion).
    #[serde(default)]
    pub clat_ns: FioLat,
}

/// A latency summary of fio's, ns.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FioLat {
    /// Mean.
    #[serde(default)]
    pub mean: f64,
    /// Percentiles by fio's key (`"99.000000"`); only where fio computed them.
    #[serde(default)]
    pub percentile: HashMap<String, f64>,
}

impl FioLat {
    /// The percentile `p` (e.g. 99.0), if fio reported it.
    pub fn pct(&self, p: f64) -> Option<f64> {
        self.percentile.get(&format!("{p:.6}")).copied()
    }
}

/// Parses the first job of fio's `--output-format=json` (text before the first `{`, such as
/// warnings, is skipped).
pub fn parse_fio_job(text: &str) -> Result<FioJobReport, FioError> {
    let start = text.find('{').unwrap_or(0);
    let out: FioOutput = serde_json::from_str(&text[start..])?;
    out.jobs.into_iter().next().ok_or(FioError::NoJob(-1))
}

/// Parses fio's JSON for `rw` into the native numbers; `cpu_ms` is fio's measured CPU time if
/// known.
pub fn parse_fio_json(text: &str, rw: Rw, cpu_ms: Option<f64>) -> Result<FioResult, FioError> {
    let job = parse_fio_job(text)?;
    if job.error != 0 {
        return Err(FioError::NoJob(job.error));
    }
    let side = job.side(rw);
    let pct = |p: f64| side.clat_ns.pct(p).unwrap_or(f64::NAN) / 1e3;
    Ok(FioResult {
        iops: side.iops,
        bw_mib_s: side.bw_bytes / f64::from(1u32 << 20),
        lat_mean_us: side.lat_ns.mean / 1e3,
        lat_p50_us: pct(50.0),
        lat_p99_us: pct(99.0),
        cpu_us: cpu_ms.map_or(f64::NAN, |ms| us_per_io(ms, side.total_ios)),
        ios: side.total_ios,
    })
}

/// CPU time (user + system) of reaped children so far, ms.
fn children_cpu_ms() -> Option<f64> {
    // SAFETY: rusage is plain old data, so all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage that outlives the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    if rc != 0 {
        return None;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Some(ms(ru.ru_utime) + ms(ru.ru_stime))
}

/// Runs fio for `job` (this process must have no other child exiting meanwhile, for the CPU
/// accounting to be fio's alone).
pub fn run_fio(
    job: &FioJob,
    store: &Path,
    direct: bool,
    size: u64,
    seconds: f64,
) -> Result<FioResult, FioError> {
    let before = children_cpu_ms();
    let out = Command::new("fio")
        .args(job.args(store, direct, size, seconds))
        .output()
        .map_err(FioError::Spawn)?;
    let after = children_cpu_ms();
    if !out.status.success() {
        return Err(FioError::Failed {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let cpu_ms = before.zip(after).map(|(b, a)| a - b);
    parse_fio_json(&String::from_utf8_lossy(&out.stdout), job.rw, cpu_ms)
}

/// Native results, one fio run per distinct job group.
#[derive(Debug, Default)]
pub struct FioCache {
    results: HashMap<FioJob, Result<FioResult, String>>,
}

impl FioCache {
    /// The cached result for `job`, if it ran.
    pub fn get(&self, job: &FioJob) -> Option<&Result<FioResult, String>> {
        self.results.get(job)
    }

    /// Stores a result.
    pub fn insert(&mut self, job: FioJob, r: Result<FioResult, String>) {
        self.results.insert(job, r);
    }
}

/// Whether `fio` runs here.
pub fn fio_available() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::PollSetting;

    fn point(engine: Engine, qd: u32, queues: u32) -> Point {
        Point {
            rw: Rw::RandRead,
            bs: 4096,
            qd,
            queues,
            engine,
            poll: PollSetting::Off,
            max_batch: 32,
            irq: false,
            hog: 0,
        }
    }

    #[test]
    fn maps_engines_to_fio() {
        let j = FioJob::for_point(&point(Engine::IoUring, 32, 2));
        assert_eq!((j.ioengine, j.iodepth, j.numjobs), ("io_uring", 32, 2));
        let j = FioJob::for_point(&point(Engine::Null, 8, 1));
        assert_eq!((j.ioengine, j.iodepth), ("io_uring", 8));
        let j = FioJob::for_point(&point(Engine::LinuxAio, 8, 1));
        assert_eq!((j.ioengine, j.iodepth), ("libaio", 8));
        let j = FioJob::for_point(&point(Engine::Sync, 32, 4));
        assert_eq!((j.ioengine, j.iodepth, j.numjobs), ("psync", 1, 4));
        // IoUring and Null share one native run; Sync ignores the depth.
        assert_eq!(
            FioJob::for_point(&point(Engine::IoUring, 8, 1)),
            FioJob::for_point(&point(Engine::Null, 8, 1))
        );
        assert_eq!(
            FioJob::for_point(&point(Engine::Sync, 1, 1)),
            FioJob::for_point(&point(Engine::Sync, 32, 1))
        );
        let args = j.args(Path::new("/dev/loop0"), true, 1 << 30, 1.5);
        assert!(args.contains(&"--runtime=1500ms".to_string()));
        assert!(args.contains(&"--ioengine=psync".to_string()));
        assert!(args.contains(&"--numjobs=4".to_string()));
        assert!(args.contains(&"--direct=1".to_string()));
    }

    #[test]
    fn parses_recorded_fio_json() {
        let text = include_str!("../tests/data/fio-randread-4k-qd8-2jobs.json");
        let r = parse_fio_json(text, Rw::RandRead, Some(564.0)).expect("parse");
        assert!((r.iops - 936_727.574751).abs() < 1e-6);
        assert_eq!(r.ios, 281_955);
        assert!((r.lat_mean_us - 16.781757678).abs() < 1e-9);
        assert!((r.lat_p50_us - 14.272).abs() < 1e-9);
        assert!((r.lat_p99_us - 25.984).abs() < 1e-9);
        assert!((r.bw_mib_s - 3_836_836_146.0 / 1_048_576.0).abs() < 1e-6);
        // 564 ms over 281,955 I/Os.
        assert!((r.cpu_us - 564_000.0 / 281_955.0).abs() < 1e-9);
        // A leading warning line is skipped; the write side of a read job is zero.
        let warned = format!("fio: note: something\n{text}");
        let w = parse_fio_json(&warned, Rw::RandWrite, None).expect("parse");
        assert_eq!(w.iops, 0.0);
        assert!(w.cpu_us.is_nan());
        assert!(parse_fio_json("{\"jobs\":[]}", Rw::Read, None).is_err());
        assert!(parse_fio_json("not json", Rw::Read, None).is_err());
    }
}
