//! The matrix run from start to end: prerequisites, the store, every point with its native
//! reference and a progress line, then the outputs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::cli::Settings;
use crate::fio::{run_fio, FioCache, FioJob, FioResult};
use crate::guest::{Guest, GuestKind};
use crate::guest_linux::{check_host, fio_spec, LinuxKit};
use crate::interrupt::{self, interrupted};
use crate::machine::HostKvm;
use crate::machine::{Machine, UtcTime};
use crate::matrix::Point;
use crate::point_run::{measure_group, same_workload, PointEnv};
use crate::prereq::{ensure_fio, guest_image, osprey_binary, probe_vmm, repo_root};
use crate::report::markdown::ReportHeader;
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
    let extra = match (settings.guest, settings.warmup > 0.0) {
        (GuestKind::TestGuest, true) => format!("+ probe, {} s warm-up", settings.warmup),
        (GuestKind::TestGuest, false) => "+ probe".to_string(),
        (GuestKind::Linux, true) => {
            format!(
                "one Linux boot each, after {} s of ramp_time",
                settings.warmup
            )
        }
        (GuestKind::Linux, false) => "one Linux boot each".to_string(),
    };
    eprintln!(
        "osprey-bench: {} point(s), {} run(s) of {} s each ({extra}), {} skipped",
        points.len(),
        settings.repeats,
        settings.seconds,
        skipped.len()
    );
    for s in skipped {
        eprintln!("  skipped {}: {}", s.point.label(), s.reason);
    }
}

/// Runs the matrix.
pub fn run(settings: &Settings, command: &str) -> anyhow::Result<Outcome> {
    let matrix = settings.matrix();
    let linux = settings.guest == GuestKind::Linux;
    let flavor = HostKvm::detect();
    // A host that cannot run the Linux guest is the one error to show (no plan before it).
    let host_warning = if linux && !settings.dry_run {
        check_host(flavor, settings.force_linux_guest)?
    } else {
        None
    };
    eprintln!("osprey-bench: note: {}", settings.guest.note());
    print_plan(settings, &matrix.points, &matrix.skipped);
    if settings.dry_run {
        if linux {
            if let Err(e) = check_host(flavor, settings.force_linux_guest) {
                eprintln!("osprey-bench: note: a real run would stop here: {e}");
            }
        }
        let range = settings.store_size.min(GUEST_RANGE_MAX);
        for (i, p) in matrix.points.iter().enumerate() {
            println!("{:>4} {}", i + 1, p.label());
            if linux {
                let name = format!("point-{:03}-run1", i + 1);
                let spec = fio_spec(p, &name, range, settings.seconds, settings.warmup);
                println!("     osprey.fio={spec}");
            }
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
    // The Linux guest's checks come first: they need no build.
    let kit = if linux {
        if let Some(w) = host_warning {
            eprintln!("osprey-bench: warning: {w}");
        }
        Some(LinuxKit::find(&root, settings.linux_kit.as_deref())?)
    } else {
        None
    };
    let osprey = osprey_binary(&root, settings.osprey.as_deref())?;
    let (guest, kvm, tsc_khz, guest_desc) = match kit {
        Some(kit) => {
            let desc = kit.describe();
            eprintln!(
                "osprey-bench: {}; KVM: {}; guest: {desc}",
                osprey.display(),
                flavor.describe()
            );
            (Guest::Linux(kit), flavor.describe().to_string(), None, desc)
        }
        None => {
            let elf = guest_image(&root, settings.test_guest_elf.as_deref())?;
            let probe = probe_vmm(&osprey, &elf)?;
            eprintln!(
                "osprey-bench: {}; KVM: {}; vCPU TSC {} kHz",
                osprey.display(),
                probe.kvm,
                probe.tsc_khz
            );
            let desc = format!("test guest {}", elf.display());
            let guest = Guest::Test {
                elf,
                tsc_khz: probe.tsc_khz,
            };
            (guest, probe.kvm, Some(probe.tsc_khz), desc)
        }
    };
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
            StoreKind::Buffered => "buffered",
            StoreKind::BufferedCold => "buffered-cold",
            StoreKind::Zram => "zram",
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
        cold: store.cold,
        range,
        out: &out,
        seconds: settings.seconds,
        warmup: settings.warmup,
        repeats: settings.repeats,
    };

    let mut cache = FioCache::default();
    let mut data: Vec<(Point, ResultRow)> = Vec::new();
    let total = matrix.points.len();
    let loop_started = Instant::now();
    let indexed: Vec<(usize, Point)> = matrix
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| (i, *p))
        .collect();
    // The points of one workload are measured side by side, their runs round-robin.
    'groups: for group in indexed.chunk_by(|a, b| same_workload(&a.1, &b.1)) {
        if interrupted() {
            break;
        }
        let one_based: Vec<(usize, Point)> = group.iter().map(|(i, p)| (i + 1, *p)).collect();
        let results = measure_group(&env, &one_based);
        for ((i, p), m) in group.iter().zip(results) {
            if m.summary.is_none() && interrupted() {
                // Stopped before any recorded run: not a failure of the point.
                break 'groups;
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
    }
    let was_interrupted = interrupted();
    let store_desc = store.describe();
    drop(store);

    let machine = Machine::describe(&root, &kvm, started_at);
    let timing = match settings.guest {
        GuestKind::TestGuest => format!(
            "{} s per recorded run, median of {} (the points of one workload run round by round, interleaved), {} warm-up, request counts sized by a probe run",
            settings.seconds,
            settings.repeats,
            if settings.warmup > 0.0 {
                format!("{} s", settings.warmup)
            } else {
                "no".to_string()
            }
        ),
        GuestKind::Linux => format!(
            "{} s of fio per recorded run ({}), median of {}, one Linux boot per run",
            settings.seconds,
            if settings.warmup > 0.0 {
                format!("after {} s of ramp_time", settings.warmup)
            } else {
                "no ramp_time".to_string()
            },
            settings.repeats
        ),
    };
    let mut header = ReportHeader {
        machine,
        command: command.to_string(),
        osprey: osprey.display().to_string(),
        store: store_desc,
        guest: settings.guest,
        guest_desc,
        tsc_khz,
        timing,
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
