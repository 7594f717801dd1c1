//! The matrix run from start to end: prerequisites, the store, every point with its native
//! reference and a progress line, then the outputs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::cli::Settings;
use crate::fio::{run_fio, FioCache, FioJob, FioResult};
use crate::interrupt::{self, interrupted};
use crate::machine::{Machine, UtcTime};
use crate::matrix::Point;
use crate::point_run::{measure, PointEnv};
use crate::prereq::{ensure_fio, guest_image, osprey_binary, probe_vmm, repo_root};
use crate::report::markdown::{ReportHeader, GUEST_NOTE};
use crate::report::row::{PointOutcome, ResultRow};
use crate::store::{Store, StoreKind};
use crate::units::format_bytes;

/// The most of the store the guest uses (its `range=` cap).
const GUEST_RANGE_MAX: u64 = 1 << 30;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every point produced numbers.
    AllOk,
    /// Some point failed entirely.
    SomeFailed,
    /// Stopped by a signal.
    Interrupted,
}

fn print_plan(settings: &Settings, points: &[Point], skipped: &[crate::matrix::Skipped]) {
    eprintln!(
        "osprey-bench: {} point(s), {} run(s) of {} s each (+ probe{}), {} skipped",
        points.len(),
        settings.repeats,
        settings.seconds,
        if settings.warmup > 0.0 {
            format!(", {} s warm-up", settings.warmup)
        } else {
            String::new()
        },
        skipped.len()
    );
    for s in skipped {
        eprintln!("  skipped {}: {}", s.point.label(), s.reason);
    }
}

/// Runs the matrix.
pub fn run(settings: &Settings, command: &str) -> anyhow::Result<Outcome> {
    let matrix = settings.spec.expand();
    eprintln!("osprey-bench: note: {GUEST_NOTE}");
    print_plan(settings, &matrix.points, &matrix.skipped);
    if settings.dry_run {
        for (i, p) in matrix.points.iter().enumerate() {
            println!("{:>4} {}", i + 1, p.label());
        }
        return Ok(Outcome::AllOk);
    }
    if matrix.points.is_empty() {
        bail!("no point of the matrix fits the test guest (bs·qd·queues ≤ 8 MiB)");
    }
    if settings.store == StoreKind::Loop && !crate::store::is_root() {
        return Err(crate::store::StoreError::NotRoot.into());
    }
    let root = repo_root();
    let osprey = osprey_binary(&root, settings.osprey.as_deref())?;
    let guest = guest_image(&root, settings.guest.as_deref())?;
    let probe = probe_vmm(&osprey, &guest)?;
    eprintln!(
        "osprey-bench: {}; KVM: {}; vCPU TSC {} kHz",
        osprey.display(),
        probe.kvm,
        probe.tsc_khz
    );
    interrupt::install();
    let started_at = UtcTime::now();
    let started = Instant::now();
    let out: PathBuf = settings
        .out
        .clone()
        .unwrap_or_else(|| root.join("target/bench").join(started_at.stamp()));
    std::fs::create_dir_all(&out).with_context(|| format!("Cannot create {}", out.display()))?;
    let native_note = if settings.native {
        ensure_fio().err()
    } else {
        Some("--no-native was given".to_string())
    };
    if let Some(n) = &native_note {
        eprintln!("osprey-bench: native column empty: {n}");
    }
    if settings.store_defaulted_to_file {
        eprintln!(
            "osprey-bench: not root, so the store is a file in {} (--store loop needs root)",
            settings.store_dir.display()
        );
    }
    let store_dir = if settings.store_dir.is_absolute() {
        settings.store_dir.clone()
    } else {
        root.join(&settings.store_dir)
    };
    eprintln!(
        "osprey-bench: creating the {} store ({})…",
        match settings.store {
            StoreKind::Loop => "loop",
            StoreKind::File => "file",
        },
        format_bytes(settings.store_size)
    );
    let store = Store::create(settings.store, &store_dir, settings.store_size)?;
    eprintln!("osprey-bench: store: {}", store.describe());
    let range = store.size.min(GUEST_RANGE_MAX);
    let env = PointEnv {
        osprey: &osprey,
        guest: &guest,
        store: &store.path,
        direct: store.direct,
        range,
        tsc_khz: probe.tsc_khz,
        out: &out,
        seconds: settings.seconds,
        warmup: settings.warmup,
        repeats: settings.repeats,
    };

    let mut cache = FioCache::default();
    let mut data: Vec<(Point, ResultRow)> = Vec::new();
    let total = matrix.points.len();
    let loop_started = Instant::now();
    for (i, p) in matrix.points.iter().enumerate() {
        if interrupted() {
            break;
        }
        let m = measure(&env, i + 1, p);
        if m.summary.is_none() && interrupted() {
            // Stopped before any recorded run: not a failure of the point.
            break;
        }
        let job = FioJob::for_point(p);
        let native: Result<FioResult, String> = match &native_note {
            Some(n) => Err(n.clone()),
            None => match cache.get(&job) {
                Some(r) => r.clone(),
                None if interrupted() => Err("interrupted".into()),
                None => {
                    let r = run_fio(&job, &store.path, store.direct, range, settings.seconds)
                        .map_err(|e| format!("{e:#}"));
                    cache.insert(job.clone(), r.clone());
                    r
                }
            },
        };
        let outcome = PointOutcome {
            index: i + 1,
            point: *p,
            count: m.count,
            summary: m.summary,
            error: m.error,
            native_job: job,
            native,
        };
        let row = ResultRow::from_outcome(&outcome);
        eprintln!(
            "{}",
            crate::progress::line(i + 1, total, &p.label(), &row, loop_started.elapsed())
        );
        data.push((*p, row));
    }
    let was_interrupted = interrupted();
    let store_desc = store.describe();
    drop(store);

    let machine = Machine::describe(&root, &probe.kvm, started_at);
    let mut header = ReportHeader {
        machine,
        command: command.to_string(),
        osprey: osprey.display().to_string(),
        store: store_desc,
        tsc_khz: probe.tsc_khz,
        timing: format!(
            "{} s per recorded run, median of {}, {} warm-up, request counts sized by a probe run",
            settings.seconds,
            settings.repeats,
            if settings.warmup > 0.0 {
                format!("{} s", settings.warmup)
            } else {
                "no".to_string()
            }
        ),
        native_note,
        elapsed_s: started.elapsed().as_secs_f64(),
        plots: Vec::new(),
        interrupted: was_interrupted,
    };
    let warnings = crate::report::write_all(
        &out,
        &mut header,
        &data,
        &matrix.skipped,
        &settings.spec.varying(),
    )?;
    for w in warnings {
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
    } else if data.iter().any(|(_, r)| r.iops.is_none()) {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}
