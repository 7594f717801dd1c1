//! Host fio on the same store: the "native" reference for a point. Maps Osprey's engine to a fio
//! job, runs it, parses fio's JSON, and measures fio's CPU time with `getrusage(RUSAGE_CHILDREN)`.

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
    #[error("Cannot run fio")]
    Spawn(#[source] std::io::Error),
    #[error("fio failed ({status}): {stderr}")]
    Failed {
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("Bad fio JSON")]
    Json(#[from] serde_json::Error),
    #[error("fio reported no usable job (error {0})")]
    NoJob(i64),
}

/// One fio job group (points sharing it share one native run).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FioJob {
    pub rw: Rw,
    pub bs: u64,
    pub iodepth: u32,
    pub numjobs: u32,
    pub ioengine: &'static str,
}

impl FioJob {
    /// The native counterpart of a point: same rw and bs, numjobs = queues; `io_uring` for
    /// IoUring, Null and Auto, `libaio` for LinuxAio (both at iodepth = qd), `psync` for Sync
    /// (iodepth 1: one request in flight per job, like Osprey's Sync engine).
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
        let mut args = vec![
            "--name=native".to_string(),
            format!("--filename={}", store.display()),
            format!("--direct={}", u8::from(direct)),
            format!("--rw={}", self.rw),
            format!("--bs={}", self.bs),
            format!("--iodepth={}", self.iodepth),
            format!("--numjobs={}", self.numjobs),
            format!("--ioengine={}", self.ioengine),
            format!("--size={size}"),
            format!("--runtime={ms}ms"),
        ];
        let fixed =
            "--time_based --group_reporting --randrepeat=0 --norandommap --output-format=json";
        args.extend(fixed.split(' ').map(String::from));
        args
    }
}

/// The native numbers of a job group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FioResult {
    pub iops: f64,
    pub bw_mib_s: f64,
    /// Mean submit-to-complete latency, µs.
    pub lat_mean_us: f64,
    /// 99th percentile completion latency, µs.
    pub lat_p99_us: f64,
    /// fio's user + system CPU per I/O, µs (NaN when unmeasured).
    pub cpu_us: f64,
}

#[derive(Debug, Deserialize)]
struct FioOutput {
    #[serde(default)]
    jobs: Vec<FioJobReport>,
}

#[derive(Debug, Deserialize)]
struct FioJobReport {
    #[serde(default)]
    error: i64,
    read: FioSide,
    write: FioSide,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FioSide {
    iops: f64,
    bw_bytes: f64,
    total_ios: u64,
    lat_ns: FioLat,
    clat_ns: FioLat,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FioLat {
    mean: f64,
    /// By fio's key (`"99.000000"`).
    percentile: HashMap<String, f64>,
}

/// Parses fio's JSON for `rw` (warnings before the first `{` skipped), with fio's CPU ms if known.
pub fn parse_fio_json(text: &str, rw: Rw, cpu_ms: Option<f64>) -> Result<FioResult, FioError> {
    let start = text.find('{').unwrap_or(0);
    let out: FioOutput = serde_json::from_str(&text[start..])?;
    let job = out.jobs.into_iter().next().ok_or(FioError::NoJob(-1))?;
    if job.error != 0 {
        return Err(FioError::NoJob(job.error));
    }
    let side = if matches!(rw, Rw::RandRead | Rw::Read) {
        job.read
    } else {
        job.write
    };
    let p99 = side.clat_ns.percentile.get("99.000000").copied();
    Ok(FioResult {
        iops: side.iops,
        bw_mib_s: side.bw_bytes / f64::from(1u32 << 20),
        lat_mean_us: side.lat_ns.mean / 1e3,
        lat_p99_us: p99.unwrap_or(f64::NAN) / 1e3,
        cpu_us: cpu_ms.map_or(f64::NAN, |ms| us_per_io(ms, side.total_ios)),
    })
}

/// CPU time (user + system) of reaped children so far, ms.
fn children_cpu_ms() -> Option<f64> {
    // SAFETY: rusage is plain old data, so all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage that outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return None;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Some(ms(ru.ru_utime) + ms(ru.ru_stime))
}

/// Runs fio for `job` (no other child of this process may exit meanwhile, for the CPU accounting
/// to be fio's alone).
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

pub fn fio_available() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(engine: Engine, qd: u32, queues: u32) -> FioJob {
        FioJob::for_point(&Point {
            engine,
            qd,
            queues,
            ..Point::base()
        })
    }

    #[test]
    fn maps_engines_to_fio() {
        let j = job(Engine::IoUring, 32, 2);
        assert_eq!((j.ioengine, j.iodepth, j.numjobs), ("io_uring", 32, 2));
        assert_eq!(job(Engine::LinuxAio, 8, 1).label(), "libaio qd8×1");
        let j = job(Engine::Sync, 32, 4);
        assert_eq!((j.ioengine, j.iodepth, j.numjobs), ("psync", 1, 4));
        // IoUring, Null and Auto share one native run; Sync ignores the depth.
        assert_eq!(job(Engine::IoUring, 8, 1), job(Engine::Null, 8, 1));
        assert_eq!(job(Engine::Auto, 8, 1), job(Engine::Null, 8, 1));
        assert_eq!(job(Engine::Sync, 1, 1), job(Engine::Sync, 32, 1));
        let args = j.args(Path::new("/dev/loop0"), true, 1 << 30, 1.5);
        for a in [
            "--runtime=1500ms",
            "--ioengine=psync",
            "--numjobs=4",
            "--direct=1",
        ] {
            assert!(args.contains(&a.to_string()), "{a} in {args:?}");
        }
    }

    #[test]
    fn parses_recorded_fio_json() {
        let text = include_str!("../testdata/fio-randread-4k-qd8-2jobs.json");
        let r = parse_fio_json(text, Rw::RandRead, Some(564.0)).expect("parse");
        assert!((r.iops - 936_727.574751).abs() < 1e-6);
        assert!((r.lat_mean_us - 16.781757678).abs() < 1e-9);
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
