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
    match env.guest {
        Guest::Test { elf, tsc_khz } => {
            let tp = TestPoint {
                env,
                elf,
                tsc_khz: *tsc_khz,
                index,
                p,
            };
            let mut sizing = match tp.size() {
                Ok(s) => s,
                Err(e) => return tp.probe_failed(e),
            };
            for r in 0..env.repeats {
                tp.record(r, &mut sizing);
            }
            sizing.into()
        }
        Guest::Linux(kit) => {
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
            measure_linux(env, kit, index, p)
        }
    }
}

fn drive<'a>(env: &PointEnv<'a>) -> DriveParams<'a> {
    DriveParams {
        store: env.store,
        direct: env.direct,
    }
}

/// A test-guest point between its runs: how many requests the next run asks for, and what the
/// recorded runs gave so far.
struct Sizing {
    floor: u64,
    iops: f64,
    count: u64,
    first_count: u64,
    samples: Vec<RunSample>,
    error: Option<String>,
    /// No more recorded runs (interrupted, or the page cache could not be dropped).
    stopped: bool,
}

struct TestPoint<'a, 'e> {
    env: &'a PointEnv<'e>,
    elf: &'a Path,
    tsc_khz: u64,
    index: usize,
    p: &'a Point,
}

impl TestPoint<'_, '_> {
    fn run(
        &self,
        count: u64,
        seed: u64,
        what: &str,
        deadline: Duration,
    ) -> Result<RunSample, String> {
        let _hogs = crate::hog::Hogs::start(self.p.hog)
            .map_err(|e| format!("cannot start {} CPU hogs: {e}", self.p.hog))?;
        let params = TestRun {
            elf: self.elf,
            range: self.env.range,
            count,
            tsc_khz: self.tsc_khz,
            seed,
        };
        let files = RunFiles::new(self.env.out, &format!("point-{:03}-{what}", self.index));
        run_point(
            self.env.osprey,
            self.p,
            &drive(self.env),
            &params,
            &files,
            deadline,
        )
        .map_err(|e| e.to_string())
    }

    /// The probe (and the optional warm-up) that size the recorded runs; a failed probe is the
    /// point's whole measurement.
    fn size(&self) -> Result<Sizing, String> {
        let floor = probe_count(self.p);
        let probe = self
            .run(floor, 1, "probe", Duration::from_secs(120))
            .map_err(|e| format!("probe: {e}"))?;
        let mut sizing = Sizing {
            floor,
            iops: probe.iops,
            count: floor,
            first_count: floor,
            samples: Vec::new(),
            error: None,
            stopped: false,
        };
        if self.env.warmup > 0.0 && !interrupted() {
            let n = sized_count(sizing.iops, self.env.warmup, floor);
            if let Ok(s) = self.run(n, 1, "warmup", deadline(n, sizing.iops)) {
                sizing.iops = s.iops;
            }
        }
        sizing.count = sized_count(sizing.iops, self.env.seconds, floor);
        sizing.first_count = sizing.count;
        Ok(sizing)
    }

    /// The measurement of a point whose probe failed.
    fn probe_failed(&self, error: String) -> Measured {
        Measured {
            count: probe_count(self.p),
            summary: None,
            error: Some(error),
        }
    }

    /// Recorded run `r` (0-based); later runs are sized from this one, longer than the probe.
    fn record(&self, r: u32, sizing: &mut Sizing) {
        if sizing.stopped {
            return;
        }
        if interrupted() {
            sizing
                .error
                .get_or_insert_with(|| "interrupted".to_string());
            sizing.stopped = true;
            return;
        }
        let name = format!("run{}", r + 1);
        if self.env.cold {
            if let Err(e) = crate::store::drop_cache(self.env.store) {
                sizing.error.get_or_insert_with(|| format!("{name}: {e}"));
                sizing.stopped = true;
                return;
            }
        }
        match self.run(
            sizing.count,
            u64::from(r) + 1,
            &name,
            deadline(sizing.count, sizing.iops),
        ) {
            Ok(s) => {
                sizing.iops = s.iops;
                sizing.count = sized_count(sizing.iops, self.env.seconds, sizing.floor);
                sizing.samples.push(s);
            }
            Err(e) => {
                sizing.error.get_or_insert_with(|| format!("{name}: {e}"));
            }
        }
    }
}

impl From<Sizing> for Measured {
    fn from(s: Sizing) -> Self {
        Measured {
            count: s.first_count,
            summary: (!s.samples.is_empty()).then(|| PointSummary::of(&s.samples)),
            error: s.error,
        }
    }
}

/// Whether two points run the same workload (they differ only in what is compared: engine,
/// polling, `max_batch`, completion mode, CPU hogs).
pub fn same_workload(a: &Point, b: &Point) -> bool {
    (a.rw, a.bs, a.qd, a.queues) == (b.rw, b.bs, b.qd, b.queues)
}

/// Measures the points of one workload side by side (`points`: (index, point), indexes
/// 1-based). Test guest: each point is sized by its own probe, then the recorded runs go round by
/// round, every point's run r before any point's run r + 1, so a host that drifts (another
/// tenant, the page cache, the CPU clock) shifts all of them alike and no variant always runs
/// first. Linux guest: one point after the other.
pub fn measure_group(env: &PointEnv<'_>, points: &[(usize, Point)]) -> Vec<Measured> {
    let Guest::Test { elf, tsc_khz } = env.guest else {
        return points.iter().map(|(i, p)| measure(env, *i, p)).collect();
    };
    let tps: Vec<TestPoint<'_, '_>> = points
        .iter()
        .map(|(index, p)| TestPoint {
            env,
            elf,
            tsc_khz: *tsc_khz,
            index: *index,
            p,
        })
        .collect();
    let mut sizings: Vec<Result<Sizing, String>> = tps.iter().map(TestPoint::size).collect();
    for r in 0..env.repeats {
        for (tp, sizing) in tps.iter().zip(sizings.iter_mut()) {
            if let Ok(sizing) = sizing {
                tp.record(r, sizing);
            }
        }
    }
    tps.iter()
        .zip(sizings)
        .map(|(tp, s)| s.map_or_else(|e| tp.probe_failed(e), Measured::from))
        .collect()
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
