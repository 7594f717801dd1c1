//! The outputs of a matrix: each point's outcome flattened into a row, `results.csv` (one row per
//! point, every field), `results.md` (the machine, the settings, one table per (bs, rw), the host
//! fio runs, the plots, skipped points and notes), and the plots of `plots.rs`.

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use serde::Serialize;

use crate::fio::{FioJob, FioResult};
use crate::matrix::{Point, Skipped};
use crate::measure::Measured;
use crate::sample::{median, ratio, spread, RunSample};
use crate::units::{format_size, thousands};

/// A finite value, rounded to `digits` decimals; None for NaN and infinities.
fn fin(x: f64, digits: i32) -> Option<f64> {
    let m = 10f64.powi(digits);
    x.is_finite().then(|| (x * m).round() / m)
}

/// The CSV row (column names are the field names; see docs/benchmarks.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ResultRow {
    /// The point measured (not a column; `point` is its 1-based index).
    #[serde(skip)]
    pub spec: Point,
    pub point: usize,
    pub rw: String,
    pub bs: String,
    pub bs_bytes: u64,
    pub qd: u32,
    pub queues: u32,
    pub engine: String,
    pub poll: String,
    pub max_batch: u32,
    pub irq: u8,
    pub hog: u32,
    /// Which `--osprey` binary served the point (1 unless several were given).
    pub build: u8,
    pub status: String,
    pub runs: usize,
    pub requests_first_run: u64,
    pub guest_qd: Option<u32>,
    pub iops: Option<f64>,
    pub iops_min: Option<f64>,
    pub iops_max: Option<f64>,
    pub bw_mib_s: Option<f64>,
    pub lat_mean_us: Option<f64>,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_p99_min_us: Option<f64>,
    pub lat_p99_max_us: Option<f64>,
    pub cpu_total_us_per_io: Option<f64>,
    pub cpu_vcpu_us_per_io: Option<f64>,
    pub cpu_dataplane_us_per_io: Option<f64>,
    pub guest_kicks_per_io: Option<f64>,
    pub guest_irqs_per_io: Option<f64>,
    pub drive_kicks_per_io: Option<f64>,
    pub drive_irqs_per_io: Option<f64>,
    pub batch_mean: Option<f64>,
    pub sleeps_per_io: Option<f64>,
    pub errors: Option<u64>,
    pub native_fio: String,
    pub native_iops: Option<f64>,
    pub native_bw_mib_s: Option<f64>,
    pub native_lat_mean_us: Option<f64>,
    pub native_lat_p99_us: Option<f64>,
    pub native_cpu_us_per_io: Option<f64>,
    pub native_ratio: Option<f64>,
    pub note: String,
}

impl ResultRow {
    /// Flattens point `index` (1-based): its measurement and its native fio job and result.
    pub fn new(
        index: usize,
        p: &Point,
        m: &Measured,
        job: &FioJob,
        native: &Result<FioResult, String>,
    ) -> Self {
        let runs = &m.runs;
        let all = |f: fn(&RunSample) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        let f = |g: fn(&RunSample) -> f64, d: i32| fin(median(&all(g)), d);
        let (iops_min, iops_max) = spread(&all(|r| r.iops));
        let (p99_min, p99_max) = spread(&all(|r| r.lat_p99_us));
        let guest_qd = runs.iter().map(|r| r.guest_qd).min();
        let nat = native.as_ref().ok();
        let nf = |g: fn(&FioResult) -> f64, d: i32| nat.and_then(|n| fin(g(n), d));
        let mut notes: Vec<String> = m.error.iter().cloned().collect();
        if let Err(e) = native {
            notes.push(format!("native: {e}"));
        }
        if let Some(q) = guest_qd.filter(|q| *q != 0 && *q != p.qd) {
            notes.push(format!("guest lowered qd to {q}"));
        }
        ResultRow {
            spec: *p,
            point: index,
            rw: p.rw.to_string(),
            bs: format_size(p.bs),
            bs_bytes: p.bs,
            qd: p.qd,
            queues: p.queues,
            engine: p.engine.to_string(),
            poll: p.poll.to_string(),
            max_batch: p.max_batch,
            irq: u8::from(p.irq),
            hog: p.hog,
            build: p.build,
            status: match (runs.is_empty(), &m.error) {
                (false, None) => "ok",
                (false, Some(_)) => "partial",
                (true, _) => "failed",
            }
            .into(),
            runs: runs.len(),
            requests_first_run: m.count,
            guest_qd,
            iops: f(|r| r.iops, 1),
            iops_min: fin(iops_min, 1),
            iops_max: fin(iops_max, 1),
            bw_mib_s: f(|r| r.bw_mib_s, 2),
            lat_mean_us: f(|r| r.lat_mean_us, 3),
            lat_p50_us: f(|r| r.lat_p50_us, 3),
            lat_p99_us: f(|r| r.lat_p99_us, 3),
            lat_p99_min_us: fin(p99_min, 3),
            lat_p99_max_us: fin(p99_max, 3),
            cpu_total_us_per_io: f(|r| r.cpu_total_us, 3),
            cpu_vcpu_us_per_io: f(|r| r.cpu_vcpu_us, 3),
            cpu_dataplane_us_per_io: f(|r| r.cpu_dataplane_us, 3),
            guest_kicks_per_io: f(|r| r.guest_kicks, 4),
            guest_irqs_per_io: f(|r| r.guest_irqs, 4),
            drive_kicks_per_io: f(|r| r.drive_kicks, 4),
            drive_irqs_per_io: f(|r| r.drive_irqs, 4),
            batch_mean: f(|r| r.batch_mean, 2),
            sleeps_per_io: f(|r| r.sleeps, 4),
            errors: (!runs.is_empty()).then(|| runs.iter().map(|r| r.errors).sum()),
            native_fio: job.label(),
            native_iops: nf(|n| n.iops, 1),
            native_bw_mib_s: nf(|n| n.bw_mib_s, 2),
            native_lat_mean_us: nf(|n| n.lat_mean_us, 3),
            native_lat_p99_us: nf(|n| n.lat_p99_us, 3),
            native_cpu_us_per_io: nf(|n| n.cpu_us, 3),
            native_ratio: ratio(median(&all(|r| r.iops)), nat.map(|n| n.iops))
                .and_then(|r| fin(r, 3)),
            note: notes.join("; "),
        }
    }
}

/// What `results.md` shows above the tables.
#[derive(Debug, Clone, Default)]
pub struct ReportHeader {
    /// When the run started (`2026-11-21 09:47:30 UTC`).
    pub date: String,
    /// The command line as run.
    pub command: String,
    /// Wall time of the whole matrix, s.
    pub elapsed_s: f64,
    pub interrupted: bool,
    /// The table of the host and the settings: (what, value).
    pub info: Vec<(&'static str, String)>,
    /// Why the native columns are empty, if they are.
    pub native_note: Option<String>,
}

/// Why the runner drives Osprey's test guest: printed at start and shown in `results.md`.
pub const GUEST_NOTE: &str = "This runner drives Osprey's test guest \
(guest-images/test-guest, `mode=blk`): a minimal virtio-blk driver and load generator that runs \
its hot loop in ring 3. On kvm_pvm hosts (software nested KVM, no VMX/SVM) guest ring 0 runs in \
KVM's instruction emulator, so a Linux guest cannot get as far as user space and fio cannot run \
inside it.";

const NUMBERS_NOTE: &str = "IOPS and latency are the guest's own measurements; CPU/IO is \
Osprey's CPU time (all threads, vCPU threads, dataplane threads) per completed request, boot \
included; native is host fio on the same store (see docs/benchmarks.md for every column and the \
fio mapping). Values are medians over the repeats; spread is the min–max IOPS.";

const TABLE_HEAD: &str =
    "| qd | queues | engine | polling | max_batch | irq | hog | build | IOPS | \
spread | MiB/s | mean µs | p50 µs | p99 µs | CPU/IO µs all | vCPU | dataplane | kicks/IO guest | \
drive | irqs/IO guest | drive | batch | native IOPS | native p99 µs | guest/native | errors |";

/// The host for the report: the kernel, `<CPU model>, <N> cores`, and the tree's commit.
pub fn host_info(root: &Path) -> [String; 3] {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo.lines().find(|l| l.starts_with("model name"));
    let model = model.and_then(|l| l.split_once(':')).map(|(_, v)| v.trim());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut git = Command::new("git");
    let git = git
        .arg("-C")
        .arg(root)
        .args(["describe", "--always", "--dirty"]);
    let commit = git.output().ok().filter(|o| o.status.success());
    let commit = commit.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let known = |s: String| if s.is_empty() { "unknown".into() } else { s };
    [
        known(kernel),
        format!("{}, {cores} cores", model.unwrap_or("unknown")),
        known(commit.unwrap_or_default()),
    ]
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".into(), |v| format!("{v:.digits$}"))
}

fn int(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), thousands)
}

/// Renders `results.md`.
pub fn render(
    h: &ReportHeader,
    rows: &[ResultRow],
    skipped: &[Skipped],
    plots: &[String],
) -> String {
    let mut s = format!("# Osprey workload matrix, {}\n\n", h.date);
    if h.interrupted {
        s += "**Interrupted: the tables hold the points that ran.**\n\n";
    }
    s += &format!(
        "Produced by `{}` in {:.0} s.\n\n| | |\n|---|---|\n",
        h.command, h.elapsed_s
    );
    for (what, value) in &h.info {
        s += &format!("| {what} | {value} |\n");
    }
    s += &format!("\n{GUEST_NOTE}\n\n");
    if let Some(n) = &h.native_note {
        s += &format!("Native (host fio) columns are empty: {n}.\n\n");
    }
    s += &format!("{NUMBERS_NOTE}\n\n");
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        if !groups.contains(&(&r.rw, &r.bs)) {
            groups.push((&r.rw, &r.bs));
        }
    }
    for (rw, bs) in groups {
        s += &format!("## {bs} {rw}\n\n{TABLE_HEAD}\n|{}\n", "---|".repeat(26));
        for r in rows.iter().filter(|r| r.rw == rw && r.bs == bs) {
            let spread = match (r.iops_min, r.iops_max) {
                (Some(lo), Some(hi)) if r.runs > 1 => {
                    format!("{}–{}", thousands(lo), thousands(hi))
                }
                _ => "–".into(),
            };
            let point = [r.qd, r.queues].map(|v| v.to_string());
            let knobs =
                [r.max_batch, u32::from(r.irq), r.hog, u32::from(r.build)].map(|v| v.to_string());
            let cells = [
                num(r.bw_mib_s, 1),
                num(r.lat_mean_us, 1),
                num(r.lat_p50_us, 1),
                num(r.lat_p99_us, 1),
                num(r.cpu_total_us_per_io, 2),
                num(r.cpu_vcpu_us_per_io, 2),
                num(r.cpu_dataplane_us_per_io, 2),
                num(r.guest_kicks_per_io, 3),
                num(r.drive_kicks_per_io, 3),
                num(r.guest_irqs_per_io, 3),
                num(r.drive_irqs_per_io, 3),
                num(r.batch_mean, 1),
                int(r.native_iops),
                num(r.native_lat_p99_us, 1),
                num(r.native_ratio, 2),
                r.errors.map_or_else(|| "–".into(), |e| e.to_string()),
            ];
            s += &format!(
                "| {} | {} | {} | {} | {} | {spread} | {} |\n",
                point.join(" | "),
                r.engine,
                r.poll,
                knobs.join(" | "),
                int(r.iops),
                cells.join(" | ")
            );
        }
        s.push('\n');
    }
    let mut natives: Vec<&ResultRow> = Vec::new();
    for r in rows.iter().filter(|r| r.native_iops.is_some()) {
        let same = |n: &&ResultRow| (&n.native_fio, &n.rw, &n.bs) == (&r.native_fio, &r.rw, &r.bs);
        if !natives.iter().any(same) {
            natives.push(r);
        }
    }
    if !natives.is_empty() {
        s += "## Host fio (native)\n\n| rw | bs | fio job | IOPS | MiB/s | mean µs | p99 µs | \
              fio CPU/IO µs |\n|---|---|---|---|---|---|---|---|\n";
        for r in natives {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.rw,
                r.bs,
                r.native_fio,
                int(r.native_iops),
                num(r.native_bw_mib_s, 1),
                num(r.native_lat_mean_us, 1),
                num(r.native_lat_p99_us, 1),
                num(r.native_cpu_us_per_io, 2)
            );
        }
        s.push('\n');
    }
    if !plots.is_empty() {
        s += "## Plots\n\n";
        for p in plots {
            s += &format!("![{p}]({p})\n\n");
        }
    }
    if !skipped.is_empty() {
        s += "## Skipped points\n\n";
        for k in skipped {
            s += &format!("- {}: {}\n", k.point.label(), k.reason);
        }
        s.push('\n');
    }
    let notes: Vec<&ResultRow> = rows.iter().filter(|r| !r.note.is_empty()).collect();
    if !notes.is_empty() {
        s += "## Notes\n\n";
        for r in notes {
            s += &format!(
                "- point {} ({} {} qd{} q{} {} poll={} mb={}): {}\n",
                r.point, r.rw, r.bs, r.qd, r.queues, r.engine, r.poll, r.max_batch, r.note
            );
        }
        s.push('\n');
    }
    s
}

/// Writes results.csv, the plots and results.md into `out`; returns the plots that failed.
pub fn write_all(
    out: &Path,
    header: &ReportHeader,
    rows: &[ResultRow],
    skipped: &[Skipped],
) -> anyhow::Result<Vec<String>> {
    let path = out.join("results.csv");
    let cannot = || format!("Cannot write {}", path.display());
    let mut w = csv::Writer::from_path(&path).with_context(cannot)?;
    for r in rows {
        w.serialize(r).with_context(cannot)?;
    }
    w.flush().with_context(cannot)?;
    let (plots, failed) = crate::plots::write_plots(out, rows);
    let md = render(header, rows, skipped, &plots);
    let path = out.join("results.md");
    std::fs::write(&path, md).with_context(|| format!("Cannot write {}", path.display()))?;
    Ok(failed)
}

/// A test row: `iops` ±1,000 over 3 runs (p99 2 µs, dataplane 4 µs/IO), native at twice that.
#[cfg(test)]
pub fn sample_row(index: usize, qd: u32, iops: f64) -> ResultRow {
    let run = |iops| RunSample {
        iops,
        lat_p99_us: 2.0,
        cpu_dataplane_us: 4.0,
        guest_qd: qd,
        ..RunSample::default()
    };
    let m = Measured {
        count: 1000,
        runs: vec![run(iops - 1000.0), run(iops), run(iops + 1000.0)],
        error: None,
    };
    let p = Point {
        qd,
        ..Point::base()
    };
    let native = FioResult {
        iops: iops * 2.0,
        bw_mib_s: 2.0,
        lat_mean_us: 1.0,
        lat_p99_us: 1.0,
        cpu_us: f64::NAN,
    };
    ResultRow::new(index, &p, &m, &FioJob::for_point(&p), &Ok(native))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::PollSetting;

    #[test]
    fn flattens_a_point_with_medians_spreads_ratio_and_notes() {
        let point = Point {
            qd: 32,
            poll: PollSetting::Classic(None),
            ..Point::base()
        };
        // (IOPS, p99 µs, dataplane µs/IO) of three runs, each with an error.
        let runs = [(1e5, 50.0, 3.0), (3e5, 30.0, 1.0), (1.5e5, 10.0, 2.8004)];
        let run = |(iops, lat_p99_us, cpu_dataplane_us)| RunSample {
            iops,
            lat_p99_us,
            cpu_dataplane_us,
            errors: 1,
            guest_qd: 16,
            ..RunSample::default()
        };
        let mut m = Measured {
            runs: runs.map(run).to_vec(),
            ..Measured::default()
        };
        let job = FioJob::for_point(&point);
        let native = Ok(FioResult {
            iops: 200_000.0,
            bw_mib_s: 781.25,
            lat_mean_us: 150.0,
            lat_p99_us: 400.0,
            cpu_us: f64::NAN,
        });
        let r = ResultRow::new(3, &point, &m, &job, &native);
        assert_eq!((r.point, r.status.as_str(), r.bs.as_str()), (3, "ok", "4k"));
        assert_eq!(r.poll, "classic");
        assert_eq!((r.iops, r.lat_p99_us), (Some(1.5e5), Some(30.0)));
        assert_eq!((r.iops_min, r.iops_max), (Some(1e5), Some(3e5)));
        let p99_spread = (r.lat_p99_min_us, r.lat_p99_max_us);
        assert_eq!(p99_spread, (Some(10.0), Some(50.0)));
        assert_eq!((r.runs, r.errors), (3, Some(3)));
        assert_eq!(r.native_ratio, Some(0.75));
        assert_eq!(r.cpu_dataplane_us_per_io, Some(2.8));
        assert_eq!(r.native_cpu_us_per_io, None);
        assert_eq!(r.native_fio, "io_uring qd32×1");
        assert_eq!(r.note, "guest lowered qd to 16");
        m.runs.clear();
        m.error = Some("boom".into());
        let r = ResultRow::new(3, &point, &m, &job, &Err("fio missing".into()));
        assert_eq!(
            (r.status.as_str(), r.iops, r.native_ratio),
            ("failed", None, None)
        );
        assert_eq!(r.note, "boom; native: fio missing");
    }

    #[test]
    fn renders_groups_spread_native_and_notes() {
        let mut failed = sample_row(3, 8, 1.0);
        (failed.rw, failed.note) = ("randwrite".into(), "run1: boom".into());
        let h = ReportHeader {
            interrupted: true,
            info: vec![
                ("CPU", "EPYC, 2 cores".into()),
                ("vCPU TSC", "2,445,426 kHz".into()),
            ],
            native_note: Some("--no-native was given".into()),
            ..ReportHeader::default()
        };
        let rows = [
            sample_row(1, 1, 20_000.0),
            sample_row(2, 32, 150_000.0),
            failed,
        ];
        let md = render(&h, &rows, &[], &["a.svg".into()]);
        for want in [
            "**Interrupted",
            "|---|---|\n| CPU | EPYC, 2 cores |\n| vCPU TSC | 2,445,426 kHz |\n\nThis runner",
            "kvm_pvm",
            "columns are empty: --no-native was given.",
            "## 4k randread",
            "## 4k randwrite",
            "| 32 | 1 | IoUring | off | 32 | 0 | 0 | 1 | 150,000 | 149,000–151,000 | 0.0 | 0.0 | 0.0 | 2.0 |",
            "| 0.50 | 0 |",
            "## Host fio (native)",
            "| randread | 4k | io_uring qd32×1 | 300,000 |",
            "![a.svg](a.svg)",
            "- point 3 (randwrite 4k qd8 q1 IoUring poll=off mb=32): run1: boom",
        ] {
            assert!(md.contains(want), "{want} missing in\n{md}");
        }
        // One table per (bs, rw), 26 columns each.
        let rule = format!("|{}\n", "---|".repeat(26));
        assert_eq!(md.matches(&rule).count(), 2);
    }
}
