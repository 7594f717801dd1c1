//! The outputs of a matrix: `results.csv`, `results.md` and the SVG plots.

pub mod csv_out;
pub mod markdown;
pub mod plots;
pub mod row;

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::matrix::{Point, Skipped};
use crate::series::Varying;
use markdown::ReportHeader;
use row::ResultRow;

/// An output could not be written.
#[derive(Debug, Error)]
pub enum ReportError {
    /// A file could not be written.
    #[error("Cannot write {0}")]
    Io(PathBuf, #[source] std::io::Error),
    /// The CSV writer failed.
    #[error("Cannot write {0}")]
    Csv(PathBuf, #[source] csv::Error),
    /// A plot failed.
    #[error("Cannot draw {0}: {1}")]
    Plot(PathBuf, String),
}

/// The plots written (file names) and the ones that failed (as warnings).
pub fn write_plots(
    out: &Path,
    data: &[(Point, ResultRow)],
    v: &Varying,
) -> (Vec<String>, Vec<ReportError>) {
    type Plot = fn(&Path, &[(Point, ResultRow)], &Varying) -> Result<(), ReportError>;
    let plots: [(&str, Plot); 3] = [
        ("pareto-iops-vs-dataplane-cpu.svg", plots::pareto),
        ("latency-by-qd.svg", plots::latency_by_qd),
        ("max-batch.svg", plots::max_batch),
    ];
    let mut written = Vec::new();
    let mut failed = Vec::new();
    let ok: Vec<(Point, ResultRow)> = data
        .iter()
        .filter(|(_, r)| r.iops.is_some())
        .cloned()
        .collect();
    if ok.is_empty() {
        return (written, failed);
    }
    for (name, f) in plots {
        match f(&out.join(name), &ok, v) {
            Ok(()) => written.push(name.to_string()),
            Err(e) => failed.push(e),
        }
    }
    (written, failed)
}

/// Writes results.csv, the plots and results.md into `out`; returns plot warnings.
pub fn write_all(
    out: &Path,
    header: &mut ReportHeader,
    data: &[(Point, ResultRow)],
    skipped: &[Skipped],
    v: &Varying,
) -> Result<Vec<ReportError>, ReportError> {
    let rows: Vec<ResultRow> = data.iter().map(|(_, r)| r.clone()).collect();
    csv_out::write_csv(&out.join("results.csv"), &rows)?;
    let (plots, warnings) = write_plots(out, data, v);
    header.plots = plots;
    let md = markdown::render(header, &rows, skipped);
    let path = out.join("results.md");
    std::fs::write(&path, md).map_err(|e| ReportError::Io(path, e))?;
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, MatrixSpec, PollSetting, Rw};
    use row::sample_row;

    #[test]
    fn draws_the_three_plots() {
        let spec = MatrixSpec {
            rw: vec![Rw::RandRead],
            bs: vec![4096],
            qd: vec![1, 32],
            queues: vec![1],
            engine: vec![Engine::IoUring, Engine::Null],
            poll: vec![PollSetting::Off, PollSetting::Classic(None)],
            max_batch: vec![1, 32],
            irq: vec![false],
            hog: vec![0],
        };
        let data: Vec<(Point, ResultRow)> = spec
            .expand()
            .points
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let mut r = sample_row(i + 1, p.qd, 1000.0 * (i as f64 + 1.0).powi(3));
                r.cpu_dataplane_us_per_io = Some(40.0 / (i as f64 + 1.0));
                r.lat_p99_us = Some(10.0 * f64::from(p.qd) + i as f64);
                (p, r)
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("osprey-bench-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (written, failed) = write_plots(&dir, &data, &spec.varying());
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(written.len(), 3);
        for f in &written {
            let svg = std::fs::read_to_string(dir.join(f)).expect("svg");
            assert!(svg.starts_with("<svg"), "{f}");
            assert!(svg.contains("</svg>"), "{f}");
        }
        let pareto = std::fs::read_to_string(dir.join(&written[0])).expect("svg");
        assert!(pareto.contains("poll=classic"));
        if std::env::var_os("OSPREY_BENCH_KEEP_PLOTS").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
