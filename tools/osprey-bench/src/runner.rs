//! The matrix run from start to end: the Osprey binary and the test guest (built when missing),
//! the start-up probe, the store, every workload's points with their native reference and a
//! progress line each, then the outputs. Ctrl-C and SIGTERM stop it after the current run; the
//! store is still removed and the report written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

use crate::cli::Settings;
use crate::fio::{fio_available, run_fio, FioJob, FioResult};
use crate::matrix::Point;
use crate::measure::{measure_group, same_workload};
use crate::report::{host_info, ReportHeader, ResultRow, GUEST_NOTE};
use crate::store::{is_root, Store, StoreError, StoreKind};
use crate::units::{format_bytes, human_duration, thousands, utc_now};
use crate::vm::Vm;

/// The most of the store the guest uses (its `range=` cap).
const GUEST_RANGE_MAX: u64 = 1 << 30;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether Ctrl-C or SIGTERM asked for a stop (Osprey, in our process group, stops on it too).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    AllOk,
    /// Some point failed entirely.
    SomeFailed,
    Interrupted,
}

/// The nearest ancestor of the cwd holding `Cargo.toml` and `guest-images/`, else the build tree.
fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    if let Some(dir) = cwd
        .ancestors()
        .find(|d| d.join("Cargo.toml").is_file() && d.join("guest-images").is_dir())
    {
        return dir.to_path_buf();
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    built.canonicalize().unwrap_or(built)
}

/// `given` (which must exist), or `default`, made with `build` when missing.
fn find_or_build(
    given: Option<&Path>,
    default: PathBuf,
    build: &mut Command,
) -> anyhow::Result<PathBuf> {
    let path = given.map_or(default, Path::to_path_buf);
    if !path.is_file() && given.is_none() {
        eprintln!("osprey-bench: running {build:?}");
        ensure!(
            build.status().is_ok_and(|s| s.success()),
            "`{build:?}` failed"
        );
    }
    ensure!(path.is_file(), "{} does not exist", path.display());
    Ok(path)
}

/// The Osprey binaries, as the log and the report name them: the path, or `build N: path`
/// for each when several are compared.
fn builds_description(ospreys: &[PathBuf]) -> String {
    match ospreys {
        [one] => one.display().to_string(),
        many => (1..)
            .zip(many)
            .map(|(n, p)| format!("build {n}: {}", p.display()))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The progress line of a finished point: n/N, the point, its numbers, time elapsed and left.
fn progress(done: usize, total: usize, label: &str, r: &ResultRow, elapsed: Duration) -> String {
    let result = match r.iops {
        Some(iops) => {
            let mut s = format!("{} IOPS", thousands(iops));
            if let (Some(lo), Some(hi), true) = (r.iops_min, r.iops_max, r.runs > 1) {
                s += &format!(" ({}–{})", thousands(lo), thousands(hi));
            }
            if let Some(p99) = r.lat_p99_us {
                s += &format!(", p99 {p99:.1} µs");
            }
            if let Some(c) = r.cpu_dataplane_us_per_io {
                s += &format!(", dataplane {c:.2} µs/IO");
            }
            if let (Some(n), Some(x)) = (r.native_iops, r.native_ratio) {
                s += &format!(", native {} ({x:.2}×)", thousands(n));
            }
            s
        }
        None => format!("FAILED: {}", r.note),
    };
    // The time left: the mean per point so far times the points left.
    let left = elapsed.as_secs_f64() / done.max(1) as f64 * total.saturating_sub(done) as f64;
    format!(
        "[{done}/{total}] {label}: {result} | {} elapsed, ETA {}",
        human_duration(elapsed),
        human_duration(Duration::from_secs_f64(left))
    )
}

pub fn run(settings: &Settings, command: &str) -> anyhow::Result<Outcome> {
    let cli = &settings.cli;
    let matrix = settings.spec.expand();
    eprintln!("osprey-bench: note: {GUEST_NOTE}");
    let warmup = (settings.warmup > 0.0).then(|| format!(", {} s warm-up", settings.warmup));
    eprintln!(
        "osprey-bench: {} point(s), {} run(s) of {} s each (+ probe{}), {} skipped",
        matrix.points.len(),
        settings.repeats,
        settings.seconds,
        warmup.unwrap_or_default(),
        matrix.skipped.len()
    );
    for s in &matrix.skipped {
        eprintln!("  skipped {}: {}", s.point.label(), s.reason);
    }
    if cli.dry_run {
        for (i, p) in matrix.points.iter().enumerate() {
            println!("{:>4} {}", i + 1, p.label());
        }
        return Ok(Outcome::AllOk);
    }
    if matrix.points.is_empty() {
        bail!("no point of the matrix fits the test guest (bs·qd·queues ≤ 8 MiB)");
    }
    if matches!(settings.store, StoreKind::Loop | StoreKind::Zram) && !is_root() {
        return Err(StoreError::NotRoot.into());
    }
    let root = repo_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&root)
        .args(["build", "--release", "--bin", "osprey"]);
    let osprey_default = root.join("target/release/osprey");
    let ospreys = if cli.osprey.is_empty() {
        vec![find_or_build(None, osprey_default, &mut build)?]
    } else {
        let found = cli
            .osprey
            .iter()
            .map(|p| find_or_build(Some(p), PathBuf::new(), &mut build));
        found.collect::<anyhow::Result<Vec<_>>>()?
    };
    let osprey = &ospreys[0];
    let mut build = Command::new("make");
    build
        .arg("-C")
        .arg(root.join("guest-images"))
        .arg("test-guest");
    let elf_default = root.join("guest-images/build/test-guest.elf");
    let elf = find_or_build(cli.test_guest_elf.as_deref(), elf_default, &mut build)?;

    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is async-signal-safe (one atomic store) and lives for the whole
        // program; replacing the default disposition of these two signals affects nothing else.
        unsafe { libc::signal(sig, handler) };
    }
    let (started_at, stamp) = utc_now();
    let started = Instant::now();
    let out = cli
        .out
        .clone()
        .unwrap_or_else(|| root.join("target/bench").join(stamp));
    std::fs::create_dir_all(&out).with_context(|| format!("Cannot create {}", out.display()))?;
    let (tsc_khz, kvm) = crate::vm::probe(osprey, &elf, &out)?;
    let path = builds_description(&ospreys);
    eprintln!("osprey-bench: {path}; KVM: {kvm}; vCPU TSC {tsc_khz} kHz");
    let native_note = if cli.no_native {
        Some("--no-native was given".to_string())
    } else {
        (!fio_available()).then(|| "fio is not installed (apt-get install fio)".to_string())
    };
    if let Some(n) = &native_note {
        eprintln!("osprey-bench: native column empty: {n}");
    }
    if cli.store.is_none() && settings.store == StoreKind::File {
        eprintln!(
            "osprey-bench: not root, so the store is a file in {} (--store loop needs root)",
            cli.store_dir.display()
        );
    }
    let store_dir = root.join(&cli.store_dir);
    let (kind, size) = (settings.store, format_bytes(cli.store_size));
    eprintln!("osprey-bench: creating the {kind} store ({size})…");
    let store = Store::create(settings.store, &store_dir, cli.store_size)?;
    eprintln!("osprey-bench: store: {}", store.describe());
    let range = store.size.min(GUEST_RANGE_MAX);
    let vm = Vm {
        ospreys: &ospreys,
        elf: &elf,
        store: &store.path,
        direct: store.direct,
        cold: store.cold,
        range,
        tsc_khz,
        out: &out,
        metrics_interval_ms: cli.metrics_interval,
    };

    let mut natives: HashMap<FioJob, Result<FioResult, String>> = HashMap::new();
    let mut data: Vec<ResultRow> = Vec::new();
    let total = matrix.points.len();
    let loop_started = Instant::now();
    let indexed: Vec<(usize, Point)> = (1..).zip(matrix.points.iter().copied()).collect();
    // The points of one workload are measured side by side, their runs round by round.
    'groups: for group in indexed.chunk_by(|a, b| same_workload(&a.1, &b.1)) {
        if interrupted() {
            break;
        }
        for (&(i, p), m) in group.iter().zip(measure_group(&vm, settings, group)) {
            if m.runs.is_empty() && interrupted() {
                // Stopped before any recorded run: not a failure of the point.
                break 'groups;
            }
            // One fio run per distinct job in the whole matrix.
            let job = FioJob::for_point(&p);
            let native = match (&native_note, natives.get(&job)) {
                (Some(n), _) => Err(n.clone()),
                (None, Some(r)) => r.clone(),
                (None, None) if interrupted() => Err("interrupted".into()),
                (None, None) => {
                    let r = run_fio(&job, &store.path, store.direct, range, settings.seconds)
                        .map_err(|e| format!("{:#}", anyhow::Error::from(e)));
                    natives.insert(job.clone(), r.clone());
                    r
                }
            };
            let row = ResultRow::new(i, &p, &m, &job, &native);
            eprintln!(
                "{}",
                progress(i, total, &p.label(), &row, loop_started.elapsed())
            );
            data.push(row);
        }
    }
    let was_interrupted = interrupted();
    let store_desc = store.describe();
    drop(store);

    let [kernel, cpu, commit] = host_info(&root);
    let warmup = match settings.warmup {
        w if w > 0.0 => format!("{w} s"),
        _ => "no".to_string(),
    };
    let timing = format!(
        "{} s per recorded run, median of {} (the points of one workload run round by round, \
         interleaved), {warmup} warm-up, request counts sized by a probe run",
        settings.seconds, settings.repeats,
    );
    let vm = "1 vCPU, 256 MiB, one virtio-blk drive (queue size 256) on iothread io0";
    let guest = format!("test-guest (test guest {})", elf.display());
    let header = ReportHeader {
        date: started_at,
        command: command.to_string(),
        elapsed_s: started.elapsed().as_secs_f64(),
        interrupted: was_interrupted,
        info: vec![
            ("kernel", kernel),
            ("CPU", cpu),
            ("KVM", kvm),
            (
                "Osprey",
                format!("{} (commit {commit})", builds_description(&ospreys)),
            ),
            ("store", store_desc),
            ("guest", guest),
            ("vCPU TSC", format!("{} kHz", thousands(tsc_khz as f64))),
            ("runs", timing),
            ("VM", vm.to_string()),
        ],
        native_note,
    };
    for w in crate::report::write_all(&out, &header, &data, &matrix.skipped)? {
        eprintln!("osprey-bench: warning: {w}");
    }
    eprintln!(
        "osprey-bench: {} point(s) in {:.0} s; results in {}",
        data.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    println!("{}", out.join("results.md").display());
    Ok(if was_interrupted {
        Outcome::Interrupted
    } else if data.iter().any(|r| r.iops.is_none()) {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sample_row;

    #[test]
    fn progress_lines() {
        let row = sample_row(3, 32, 201_698.0);
        let line = progress(3, 4, "randread 4k", &row, Duration::from_secs(6));
        assert_eq!(
            line,
            "[3/4] randread 4k: 201,698 IOPS (200,698–202,698), p99 2.0 µs, dataplane 4.00 µs/IO, \
             native 403,396 (0.50×) | 6s elapsed, ETA 2s"
        );
        let failed = ResultRow {
            iops: None,
            note: "probe: boom".into(),
            ..row
        };
        let line = progress(1, 1, "x", &failed, Duration::ZERO);
        assert_eq!(line, "[1/1] x: FAILED: probe: boom | 0s elapsed, ETA 0s");
    }
}
