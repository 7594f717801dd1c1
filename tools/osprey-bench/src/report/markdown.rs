//! `results.md`: the machine, the settings, one table per (rw, bs) with the native ratio and CPU
//! per I/O, the plots, and the skipped and failed points.

use std::fmt::Write as _;

use super::row::ResultRow;
use crate::guest::GuestKind;
use crate::machine::Machine;
use crate::matrix::Skipped;
use crate::units::thousands;

/// Everything the markdown report shows besides the rows.
#[derive(Debug, Clone, Default)]
pub struct ReportHeader {
    /// The host.
    pub machine: Machine,
    /// The command line as run.
    pub command: String,
    /// The Osprey binary.
    pub osprey: String,
    /// The store's description.
    pub store: String,
    /// The guest kind.
    pub guest: GuestKind,
    /// The guest's files (ELF, or kit directory and kernel).
    pub guest_desc: String,
    /// vCPU TSC kHz (the test guest's clock), if read.
    pub tsc_khz: Option<u64>,
    /// Seconds per run, repeats, warm-up.
    pub timing: String,
    /// Why the native columns are empty, if they are.
    pub native_note: Option<String>,
    /// Wall time of the whole matrix, s.
    pub elapsed_s: f64,
    /// SVG files written (relative names).
    pub plots: Vec<String>,
    /// The run was interrupted.
    pub interrupted: bool,
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".into(), |v| format!("{v:.digits$}"))
}

fn int(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), thousands)
}

fn spread(r: &ResultRow) -> String {
    match (r.iops_min, r.iops_max, r.runs) {
        (Some(lo), Some(hi), n) if n > 1 => format!("{}–{}", thousands(lo), thousands(hi)),
        _ => "–".into(),
    }
}

/// Renders the report.
pub fn render(h: &ReportHeader, rows: &[ResultRow], skipped: &[Skipped]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Osprey workload matrix, {}\n", h.machine.date);
    if h.interrupted {
        let _ = writeln!(s, "**Interrupted: the tables hold the points that ran.**\n");
    }
    let _ = writeln!(s, "Produced by `{}` in {:.0} s.\n", h.command, h.elapsed_s);
    let _ = writeln!(s, "| | |\n|---|---|");
    let m = &h.machine;
    let _ = writeln!(s, "| kernel | {} |", m.kernel);
    let _ = writeln!(s, "| CPU | {}, {} cores |", m.cpu_model, m.cores);
    let _ = writeln!(s, "| KVM | {} |", m.kvm);
    let _ = writeln!(s, "| Osprey | {} (commit {}) |", h.osprey, m.commit);
    let _ = writeln!(s, "| store | {} |", h.store);
    let _ = writeln!(s, "| guest | {} ({}) |", h.guest, h.guest_desc);
    if let Some(khz) = h.tsc_khz {
        let _ = writeln!(s, "| vCPU TSC | {} kHz |", thousands(khz as f64));
    }
    let _ = writeln!(s, "| runs | {} |", h.timing);
    let _ = writeln!(s, "| VM | {} |\n", h.guest.vm_line());
    let _ = writeln!(s, "{}\n", h.guest.note());
    if let Some(n) = &h.native_note {
        let _ = writeln!(s, "Native (host fio) columns are empty: {n}.\n");
    }
    let _ = writeln!(s, "{}\n", h.guest.numbers_note());

    let mut groups: Vec<(String, String)> = Vec::new();
    for r in rows {
        let key = (r.rw.clone(), r.bs.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (rw, bs) in &groups {
        let _ = writeln!(s, "## {bs} {rw}\n");
        let _ = writeln!(
            s,
            "| qd | queues | engine | polling | max_batch | irq | hog | IOPS | spread | MiB/s | mean µs | \
             p50 µs | p99 µs | CPU/IO µs all | vCPU | dataplane | kicks/IO guest | drive | \
             irqs/IO guest | drive | batch | native IOPS | native p99 µs | guest/native | errors |"
        );
        let _ = writeln!(s, "|{}", "---|".repeat(25));
        for r in rows.iter().filter(|r| &r.rw == rw && &r.bs == bs) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | \
                 {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.qd,
                r.queues,
                r.engine,
                r.poll,
                r.max_batch,
                r.irq,
                r.hog,
                int(r.iops),
                spread(r),
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
            );
        }
        s.push('\n');
    }

    let mut natives: Vec<(&str, &ResultRow)> = Vec::new();
    for r in rows.iter().filter(|r| r.native_iops.is_some()) {
        let key = r.native_fio.as_str();
        if !natives
            .iter()
            .any(|(k, n)| *k == key && n.rw == r.rw && n.bs == r.bs)
        {
            natives.push((key, r));
        }
    }
    if !natives.is_empty() {
        let _ = writeln!(s, "## Host fio (native)\n");
        let _ = writeln!(
            s,
            "| rw | bs | fio job | IOPS | MiB/s | mean µs | p99 µs | fio CPU/IO µs |\n|---|---|---|---|---|---|---|---|"
        );
        for (k, r) in &natives {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.rw,
                r.bs,
                k,
                int(r.native_iops),
                num(r.native_bw_mib_s, 1),
                num(r.native_lat_mean_us, 1),
                num(r.native_lat_p99_us, 1),
                num(r.native_cpu_us_per_io, 2)
            );
        }
        s.push('\n');
    }

    if !h.plots.is_empty() {
        let _ = writeln!(s, "## Plots\n");
        for p in &h.plots {
            let _ = writeln!(s, "![{p}]({p})\n");
        }
    }
    if !skipped.is_empty() {
        let _ = writeln!(s, "## Skipped points\n");
        for k in skipped {
            let _ = writeln!(s, "- {}: {}", k.point.label(), k.reason);
        }
        s.push('\n');
    }
    let notes: Vec<&ResultRow> = rows.iter().filter(|r| !r.note.is_empty()).collect();
    if !notes.is_empty() {
        let _ = writeln!(s, "## Notes\n");
        for r in notes {
            let _ = writeln!(
                s,
                "- point {} ({} {} qd{} q{} {} poll={} mb={}): {}",
                r.point, r.rw, r.bs, r.qd, r.queues, r.engine, r.poll, r.max_batch, r.note
            );
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::row::sample_row as row;

    #[test]
    fn renders_groups_spread_and_native() {
        let md = render(
            &ReportHeader::default(),
            &[row(1, 1, 20_000.0), row(2, 32, 150_000.0)],
            &[],
        );
        assert!(md.contains("## 4k randread"));
        assert!(md.contains("| 150,000 | 149,000–151,000 |"));
        assert!(md.contains("| 0.50 |"));
        assert!(md.contains("## Host fio (native)"));
        assert!(md.contains("| randread | 4k | io_uring qd32×1 | 300,000 |"));
        assert!(md.contains("kvm_pvm"));
        assert!(md.contains("| VM | 1 vCPU, 256 MiB"));
        let linux = render(
            &ReportHeader {
                guest: GuestKind::Linux,
                ..ReportHeader::default()
            },
            &[row(1, 1, 20_000.0)],
            &[],
        );
        assert!(linux.contains("| guest | linux ("));
        assert!(linux.contains("fio inside a Linux guest"));
        assert!(linux.contains("not measured"));
        assert!(!linux.contains("vCPU TSC"));
    }
}
