//! Measuring one point. Test guest: a short probe run sizes the request count so a run lasts
//! about `--seconds`, an optional unrecorded warm-up refines it, then `--repeats` recorded runs.
//! Linux guest: fio is time-based, so just `--repeats` recorded runs (one boot each) of
//! `--seconds`, each after `--warmup` seconds of fio's `ramp_time`.

use std::path::Path;
use std::time::Duration;

use crate::guest::Guest;
use crate::guest_linux::{LinuxKit, LinuxRun};
use crate::guest_test::TestRun;
use crate::interrupt::interrupted;
use crate::matrix::Point;
use crate::sample::RunSample;
use crate::summary::PointSummary;
use crate::vm_config::DriveParams;
use crate::vm_run::{run_point, RunFiles};

/// What every run of every point shares.
#[derive(Debug, Clone)]
pub struct PointEnv<'a> {
    /// Osprey binary.
    pub osprey: &'a Path,
    /// The guest.
    pub guest: &'a Guest,
    /// Store path.
    pub store: &'a Path,
    /// Store opened with O_DIRECT.
    pub direct: bool,
    /// Drop the store's pages from the page cache before every recorded run.
    pub cold: bool,
    /// Bytes of the store in use.
    pub range: u64,
    /// Output directory.
    pub out: &'a Path,
    /// Seconds per recorded run.
    pub seconds: f64,
    /// Seconds of warm-up (0: none).
    pub warmup: f64,
    /// Recorded runs.
    pub repeats: u32,
}

/// A measured point.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Requests in the first recorded run (test guest: asked for, later ones are re-sized from
    /// the one before; Linux: what fio completed, 0 if it failed).
    pub count: u64,
    /// Summary of the recorded runs that worked.
    pub summary: Option<PointSummary>,
    /// The first failure, if any.
    pub error: Option<String>,
}

/// Requests for the sizing probe: about 16 MiB of I/O (at most 4,000 requests), and at least
/// four rounds of the whole queue depth.
pub fn probe_count(p: &Point) -> u64 {
    let by_bytes = ((16u64 << 20) / p.bs).clamp(64, 4000);
    by_bytes.max(4 * u64::from(p.qd) * u64::from(p.queues))
}

/// Requests for a run of `seconds` at `iops`, never fewer than the probe's.
pub fn sized_count(iops: f64, seconds: f64, floor: u64) -> u64 {
    let n = iops * seconds;
    if n.is_finite() && n > 0.0 {
        (n.round() as u64).clamp(floor, u64::from(u32::MAX))
    } else {
        floor
    }
}

fn deadline(count: u64, iops: f64) -> Duration {
    let expected = if iops > 0.0 {
        count as f64 / iops
    } else {
        10.0
    };
    Duration::from_secs_f64((expected * 10.0 + 30.0).min(3600.0))
}

/// Measures `p` (the `index`-th point).
pub fn measure(env: &PointEnv<'_>, index: usize, p: &Point) -> Measured {
    let _hogs = match crate::hog::Hogs::start(p.hog) {
        Ok(h) => h,
        Err(e) => {
            return Measured {
                count: 0,
                summary: None,
                error: Some(format!("cannot start {} CPU hogs: {e}", p.hog)),
            };
        }
    };
    match env.guest {
        Guest::Test { elf, tsc_khz } => measure_test_guest(env, elf, *tsc_khz, index, p),
        Guest::Linux(kit) => measure_linux(env, kit, index, p),
    }
}

fn drive<'a>(env: &PointEnv<'a>) -> DriveParams<'a> {
    DriveParams {
        store: env.store,
        direct: env.direct,
    }
}

fn measure_test_guest(
    env: &PointEnv<'_>,
    elf: &Path,
    tsc_khz: u64,
    index: usize,
    p: &Point,
) -> Measured {
    let drive = drive(env);
    let params = |count: u64, seed: u64| TestRun {
        elf,
        range: env.range,
        count,
        tsc_khz,
        seed,
    };
    let files = |what: &str| RunFiles::new(env.out, &format!("point-{index:03}-{what}"));
    let floor = probe_count(p);
    let probe = run_point(
        env.osprey,
        p,
        &drive,
        &params(floor, 1),
        &files("probe"),
        Duration::from_secs(120),
    );
    let mut iops = match probe {
        Ok(s) => s.iops,
        Err(e) => {
            return Measured {
                count: floor,
                summary: None,
                error: Some(format!("probe: {e}")),
            }
        }
    };
    if env.warmup > 0.0 && !interrupted() {
        let n = sized_count(iops, env.warmup, floor);
        if let Ok(s) = run_point(
            env.osprey,
            p,
            &drive,
            &params(n, 1),
            &files("warmup"),
            deadline(n, iops),
        ) {
            iops = s.iops;
        }
    }
    let mut count = sized_count(iops, env.seconds, floor);
    let first_count = count;
    let mut samples: Vec<RunSample> = Vec::new();
    let mut error = None;
    for r in 0..env.repeats {
        if interrupted() {
            error.get_or_insert_with(|| "interrupted".to_string());
            break;
        }
        let name = format!("run{}", r + 1);
        if env.cold {
            if let Err(e) = crate::store::drop_cache(env.store) {
                error.get_or_insert_with(|| format!("{name}: {e}"));
                break;
            }
        }
        match run_point(
            env.osprey,
            p,
            &drive,
            &params(count, u64::from(r) + 1),
            &files(&name),
            deadline(count, iops),
        ) {
            Ok(s) => {
                // Later repeats are sized from this run, which is longer than the probe.
                iops = s.iops;
                count = sized_count(iops, env.seconds, floor);
                samples.push(s);
            }
            Err(e) => {
                error.get_or_insert_with(|| format!("{name}: {e}"));
            }
        }
    }
    Measured {
        count: first_count,
        summary: (!samples.is_empty()).then(|| PointSummary::of(&samples)),
        error,
    }
}

fn measure_linux(env: &PointEnv<'_>, kit: &LinuxKit, index: usize, p: &Point) -> Measured {
    let drive = drive(env);
    let mut samples: Vec<RunSample> = Vec::new();
    let mut error = None;
    for r in 0..env.repeats {
        if interrupted() {
            error.get_or_insert_with(|| "interrupted".to_string());
            break;
        }
        let name = format!("run{}", r + 1);
        let stem = format!("point-{index:03}-{name}");
        let run = LinuxRun {
            kit,
            name: stem.clone(),
            range: env.range,
            seconds: env.seconds,
            ramp: env.warmup,
        };
        match run_point(
            env.osprey,
            p,
            &drive,
            &run,
            &RunFiles::new(env.out, &stem),
            run.deadline(),
        ) {
            Ok(s) => samples.push(s),
            Err(e) => {
                error.get_or_insert_with(|| format!("{name}: {e}"));
            }
        }
    }
    Measured {
        count: samples.first().map_or(0, |s| s.requests),
        summary: (!samples.is_empty()).then(|| PointSummary::of(&samples)),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, PollSetting, Rw};

    #[test]
    fn probe_and_run_sizes() {
        let mut p = Point {
            rw: Rw::RandRead,
            bs: 4096,
            qd: 1,
            queues: 1,
            engine: Engine::IoUring,
            poll: PollSetting::Off,
            max_batch: 32,
            irq: false,
            hog: 0,
        };
        assert_eq!(probe_count(&p), 4000);
        p.bs = 131072;
        assert_eq!(probe_count(&p), 128);
        p.bs = 1 << 20;
        assert_eq!(probe_count(&p), 64);
        p.qd = 8;
        p.queues = 4;
        p.bs = 4096;
        assert_eq!(probe_count(&p), 4000);
        p.qd = 256;
        assert_eq!(probe_count(&p), 4096);
        // 150k IOPS for 2 s; a tiny estimate falls back to the floor.
        assert_eq!(sized_count(150_000.0, 2.0, 4000), 300_000);
        assert_eq!(sized_count(100.0, 1.0, 4000), 4000);
        assert_eq!(sized_count(f64::NAN, 1.0, 64), 64);
        assert_eq!(sized_count(1e12, 1e3, 64), u64::from(u32::MAX));
    }
}
