//! Measuring the points of one workload: each point's short probe run sizes its request count so a
//! run lasts about `--seconds`, an optional unrecorded warm-up refines it, then the `--repeats`
//! recorded runs go round by round over the points. CPU hogs (`--hog N`) run beside every run.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cli::{HogSession, Settings};
use crate::matrix::Point;
use crate::runner::interrupted;
use crate::sample::RunSample;
use crate::store::drop_cache;
use crate::vm::Vm;

#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Requests asked of the first recorded run.
    pub count: u64,
    /// The recorded runs that worked.
    pub runs: Vec<RunSample>,
    /// The first failure, if any.
    pub error: Option<String>,
}

/// Requests for the sizing probe: ~16 MiB of I/O (64 to 4,000), at least 4 rounds of the depth.
pub fn probe_count(p: &Point) -> u64 {
    let by_bytes = ((16u64 << 20) / p.bs).clamp(64, 4000);
    by_bytes.max(4 * u64::from(p.qd) * u64::from(p.queues))
}

/// Requests for a run of `seconds` at `iops`, never fewer than `floor`.
pub fn sized_count(iops: f64, seconds: f64, floor: u64) -> u64 {
    let n = iops * seconds;
    if !(n.is_finite() && n > 0.0) {
        return floor;
    }
    (n.round() as u64).clamp(floor, u64::from(u32::MAX))
}

/// Ten times the expected length plus 30 s, at most an hour.
fn deadline(count: u64, iops: f64) -> Duration {
    let expected = if iops > 0.0 {
        count as f64 / iops
    } else {
        10.0
    };
    Duration::from_secs_f64((expected * 10.0 + 30.0).min(3600.0))
}

/// CPU-bound processes (shell busy loops under `timeout`) beside the VM; dropping it stops them.
#[derive(Debug)]
pub struct Hogs(Vec<Child>);

impl Hogs {
    /// Starts `n` busy loops (none for 0), each bounded to an hour whatever happens to the
    /// runner, in a session of its own or in the runner's.
    pub fn start(n: u32, session: HogSession) -> std::io::Result<Hogs> {
        let mut hogs = Hogs(Vec::new());
        for _ in 0..n {
            let mut cmd = Command::new("timeout");
            cmd.args(["3600s", "sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if session == HogSession::Shared {
                // A process group of its own (same session), signalled whole on drop.
                cmd.process_group(0);
            } else {
                // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent;
                // the closure runs in the forked child before exec and allocates nothing.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::setsid() < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            hogs.0.push(cmd.spawn()?);
        }
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // Each hog leads a process group (`setsid` or `process_group(0)`): the whole group
            // is signalled, the loop with `timeout`, so a hog dropped before `timeout` set up
            // its handler (which passes SIGTERM on) does not outlive the run.
            let group = -(c.id() as libc::pid_t);
            // SAFETY: kill(2) on the process group our own child leads has no memory-safety
            // preconditions.
            unsafe { libc::kill(group, libc::SIGTERM) };
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// A point between its runs: the size of the next run and what the recorded runs gave so far.
struct PointRun<'a> {
    vm: &'a Vm<'a>,
    settings: &'a Settings,
    /// 1-based position in the matrix.
    index: usize,
    p: Point,
    floor: u64,
    iops: f64,
    count: u64,
    m: Measured,
    /// No more recorded runs (the probe failed, or interrupted).
    stopped: bool,
}

impl<'a> PointRun<'a> {
    fn run(
        &self,
        count: u64,
        seed: u64,
        what: &str,
        deadline: Duration,
    ) -> Result<RunSample, String> {
        if self.vm.cold {
            // Every run of a cold store starts cold, the probe too: a probe on cached pages
            // sizes the first recorded run for page-cache speed (10x too long), and that run
            // warms the cache for the next.
            drop_cache(self.vm.store).map_err(|e| e.to_string())?;
        }
        let hog = self.p.hog;
        let _hogs = Hogs::start(hog, self.settings.cli.hog_session)
            .map_err(|e| format!("cannot start {hog} CPU hogs: {e}"))?;
        let name = format!("point-{:03}-{what}", self.index);
        self.vm
            .run(&self.p, count, seed, &name, deadline)
            .map_err(|e| format!("{e:#}"))
    }

    /// Sizes the recorded runs of `p` by a probe run (and the optional warm-up).
    fn new(vm: &'a Vm<'a>, settings: &'a Settings, index: usize, p: Point) -> Self {
        let floor = probe_count(&p);
        let mut pr = PointRun {
            vm,
            settings,
            index,
            p,
            floor,
            iops: 0.0,
            count: floor,
            m: Measured {
                count: floor,
                ..Measured::default()
            },
            stopped: false,
        };
        match pr.run(floor, 1, "probe", Duration::from_secs(120)) {
            Ok(probe) => pr.iops = probe.iops,
            Err(e) => {
                pr.m.error = Some(format!("probe: {e}"));
                pr.stopped = true;
                return pr;
            }
        }
        if settings.warmup > 0.0 && !interrupted() {
            let n = sized_count(pr.iops, settings.warmup, floor);
            if let Ok(s) = pr.run(n, 1, "warmup", deadline(n, pr.iops)) {
                pr.iops = s.iops;
            }
        }
        pr.count = sized_count(pr.iops, settings.seconds, floor);
        pr.m.count = pr.count;
        pr
    }

    /// Recorded run `r` (0-based); the next run is sized from this one.
    fn record(&mut self, r: u32) {
        if self.stopped {
            return;
        }
        let name = format!("run{}", r + 1);
        if interrupted() {
            self.m.error.get_or_insert("interrupted".into());
            self.stopped = true;
            return;
        }
        let limit = deadline(self.count, self.iops);
        match self.run(self.count, u64::from(r) + 1, &name, limit) {
            Ok(sample) => {
                self.iops = sample.iops;
                self.count = sized_count(self.iops, self.settings.seconds, self.floor);
                self.m.runs.push(sample);
            }
            Err(e) => {
                self.m.error.get_or_insert_with(|| format!("{name}: {e}"));
            }
        }
    }
}

/// Whether two points differ only in what is compared (engine, polling, max_batch, irq, hogs).
pub fn same_workload(a: &Point, b: &Point) -> bool {
    (a.rw, a.bs, a.qd, a.queues) == (b.rw, b.bs, b.qd, b.queues)
}

/// Round `r`'s order over `n` points, a Williams design (0, 1, n-1, 2, n-2, … shifted by `r`, odd
/// `n` reversed every other n rounds): each point first in turn and after every other equally
/// often (a plain rotation kept predecessors: `Auto` always ran right after `Sync`).
fn round_order(n: usize, r: u32) -> Vec<usize> {
    let Some(shift) = (r as usize).checked_rem(n) else {
        return Vec::new();
    };
    let base = (0..n).map(|i| match i {
        0 => 0,
        i if i % 2 == 1 => i.div_ceil(2),
        i => n - i / 2,
    });
    let mut order: Vec<usize> = base.map(|b| (b + shift) % n).collect();
    if n % 2 == 1 && (r as usize / n) % 2 == 1 {
        order.reverse();
    }
    order
}

/// Measures the points of one workload (`points`: 1-based index and point), each sized by its own
/// probe, round by round: every run r before any run r + 1, so a drifting host shifts all alike.
pub fn measure_group(vm: &Vm<'_>, s: &Settings, points: &[(usize, Point)]) -> Vec<Measured> {
    let mut runs: Vec<PointRun<'_>> = points
        .iter()
        .map(|&(index, p)| PointRun::new(vm, s, index, p))
        .collect();
    for r in 0..s.repeats {
        for i in round_order(runs.len(), r) {
            runs[i].record(r);
        }
    }
    runs.into_iter().map(|pr| pr.m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_and_run_sizes() {
        let mut p = Point::base();
        assert_eq!(probe_count(&p), 4000);
        p.bs = 131072;
        assert_eq!(probe_count(&p), 128);
        p.bs = 1 << 20;
        assert_eq!(probe_count(&p), 64);
        (p.bs, p.qd, p.queues) = (4096, 256, 4);
        assert_eq!(probe_count(&p), 4096);
        // 150k IOPS for 2 s; a tiny or unknown estimate falls back to the floor.
        assert_eq!(sized_count(150_000.0, 2.0, 4000), 300_000);
        assert_eq!(sized_count(100.0, 1.0, 4000), 4000);
        assert_eq!(sized_count(f64::NAN, 1.0, 64), 64);
        assert_eq!(sized_count(1e12, 1e3, 64), u64::from(u32::MAX));
        assert_eq!(deadline(100_000, 100_000.0), Duration::from_secs(40));
        let (base, mut other) = (Point::base(), Point::base());
        (other.hog, other.max_batch, other.engine) = (2, 1, crate::matrix::Engine::Sync);
        assert!(same_workload(&base, &other));
        other.qd = 8;
        assert!(!same_workload(&base, &other));
    }

    #[test]
    fn rounds_balance_first_places_and_predecessors() {
        assert_eq!(round_order(4, 5), [1, 2, 0, 3]);
        for n in 0..=7usize {
            // Over 2n rounds, each a permutation: [a * n + b] counts b right after a (the
            // diagonal stays 0), [n * n + a] a first; every count should be 2.
            let mut counts = vec![0; n * n + n];
            for mut o in (0..2 * n as u32).map(|r| round_order(n, r)) {
                counts[n * n + o[0]] += 1;
                o.windows(2).for_each(|w| counts[w[0] * n + w[1]] += 1);
                o.sort_unstable();
                assert!(o.iter().copied().eq(0..n), "n={n}: {o:?}");
            }
            let want = |i: usize| 2 * u32::from(i >= n * n || i / n != i % n);
            let ok = counts.iter().enumerate().all(|(i, &c)| c == want(i));
            assert!(ok, "n={n}: {counts:?}");
        }
    }

    fn proc_stat(pid: u32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
    }

    /// Field `n` (0-based) of `pid`'s stat (the command names here have no spaces).
    fn stat_field<T: std::str::FromStr>(pid: u32, n: usize) -> Option<T> {
        proc_stat(pid)?.split_whitespace().nth(n)?.parse().ok()
    }

    /// The session id of `pid`.
    fn session(pid: u32) -> Option<u32> {
        stat_field(pid, 5)
    }

    #[test]
    fn own_session_hogs_lead_a_session_of_their_own() {
        let own = Hogs::start(1, HogSession::Own).expect("start");
        let shared = Hogs::start(1, HogSession::Shared).expect("start");
        let (own_pid, shared_pid) = (own.0[0].id(), shared.0[0].id());
        let runner = session(std::process::id()).expect("runner's session");
        assert_eq!(
            session(own_pid),
            Some(own_pid),
            "setsid made it a session leader"
        );
        assert_eq!(
            session(shared_pid),
            Some(runner),
            "it stays in the runner's session"
        );
        // Dropped at once (before `timeout` may have set up the handler that passes SIGTERM
        // on), the loops still end: nothing is left running in either hog's process group.
        drop(own);
        drop(shared);
        std::thread::sleep(Duration::from_millis(200));
        let left: Vec<String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                matches!(stat_field::<u32>(pid, 4), Some(g) if g == own_pid || g == shared_pid)
            })
            .filter_map(proc_stat)
            .filter(|s| !s.contains(") Z "))
            .collect();
        assert!(left.is_empty(), "still running in a hog's group: {left:?}");
    }

    #[test]
    fn hogs_burn_cpu_and_stop_when_dropped() {
        let hogs = Hogs::start(1, HogSession::Shared).expect("start");
        let pid = hogs.0[0].id();
        std::thread::sleep(Duration::from_millis(300));
        // The busy loop is the `sh` that `timeout` runs.
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).expect("children");
        let sh: u32 = children
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("sh");
        // utime is field 14.
        let utime = |pid| stat_field::<u64>(pid, 13);
        assert!(utime(sh).is_some_and(|t| t > 5), "the loop burns CPU");
        drop(hogs);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            proc_stat(sh).is_none_or(|s| s.contains(") Z ")),
            "the loop is gone"
        );
    }
}
