//! The SVG plots: (1) IOPS against dataplane CPU per I/O, one series per polling config (the
//! Pareto picture); (2) mean and p99 latency by queue depth, per engine; (3) IOPS and p99 by
//! max_batch.

use std::path::Path;

use plotters::prelude::*;

use super::row::ResultRow;
use super::ReportError;
use crate::matrix::Point;
use crate::series::{Dim, Varying};

/// One line or scatter on a chart.
#[derive(Debug, Clone)]
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    /// Per-point annotations (empty: none).
    notes: Vec<String>,
}

/// Groups points by a series label, in first-seen order.
fn group(
    data: &[(Point, ResultRow)],
    label: impl Fn(&Point) -> String,
    xy: impl Fn(&Point, &ResultRow) -> Option<(f64, f64)>,
) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for (p, r) in data {
        let Some(pt) = xy(p, r) else { continue };
        let l = label(p);
        match out.iter_mut().find(|s| s.label == l) {
            Some(s) => s.points.push(pt),
            None => out.push(Series {
                label: l,
                points: vec![pt],
                notes: Vec::new(),
            }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn bounds(series: &[Series], f: impl Fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let vals = series.iter().flat_map(|s| s.points.iter().map(&f));
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

/// Points annotated on the Pareto plot at most (beyond this the labels overlap).
const MAX_ANNOTATED: usize = 24;

/// A value axis: linear from 0, or log10 when the data spans more than 30×.
#[derive(Debug, Clone, Copy)]
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Axis {
    fn auto(lo: f64, hi: f64) -> Self {
        Axis {
            log: lo > 0.0 && hi / lo > 30.0,
            lo,
            hi,
        }
    }

    /// Data value to drawing coordinate.
    fn t(self, v: f64) -> f64 {
        if self.log {
            v.max(1e-3).log10()
        } else {
            v
        }
    }

    fn range(self) -> std::ops::Range<f64> {
        if self.log {
            self.t(self.lo * 0.8)..self.t(self.hi * 1.25)
        } else {
            0.0..self.hi * 1.1 + 1e-9
        }
    }

    /// Label for a drawing coordinate.
    fn label(self, c: f64) -> String {
        let v = if self.log { 10f64.powf(c) } else { c };
        if v >= 1e6 {
            format!("{:.1}M", v / 1e6)
        } else if v >= 1e3 {
            format!("{:.0}k", v / 1e3)
        } else if v >= 10.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    }

    fn desc(self, what: &str) -> String {
        if self.log {
            format!("{what} (log scale)")
        } else {
            what.to_string()
        }
    }
}

fn color(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

fn err(path: &Path) -> impl Fn(String) -> ReportError + '_ {
    move |e| ReportError::Plot(path.to_path_buf(), e)
}

/// Plot 1: IOPS (y) against dataplane CPU µs per I/O (x), one series per polling config.
pub fn pareto(path: &Path, data: &[(Point, ResultRow)], v: &Varying) -> Result<(), ReportError> {
    let e = err(path);
    let mut series: Vec<Series> = Vec::new();
    for (p, r) in data {
        let (Some(x), Some(y)) = (r.cpu_dataplane_us_per_io, r.iops) else {
            continue;
        };
        let label = format!("poll={}", p.poll);
        let note = v.series_label(p, &[], &[Dim::Poll]);
        let note = if note == "all" { String::new() } else { note };
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => {
                s.points.push((x, y));
                s.notes.push(note);
            }
            None => series.push(Series {
                label,
                points: vec![(x, y)],
                notes: vec![note],
            }),
        }
    }
    let (xlo, xhi) = bounds(&series, |p| p.0);
    let (ylo, yhi) = bounds(&series, |p| p.1);
    let (ax, ay) = (Axis::auto(xlo, xhi), Axis::auto(ylo, yhi));
    let annotate = series.iter().map(|s| s.points.len()).sum::<usize>() <= MAX_ANNOTATED;
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "IOPS vs dataplane CPU per I/O, by polling config",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(ax.range(), ay.range())
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(ax.desc("dataplane CPU per I/O (µs)"))
        .y_desc(ay.desc("guest IOPS"))
        .x_label_formatter(&|x| ax.label(*x))
        .y_label_formatter(&|y| ay.label(*y))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(move |&(x, y)| Circle::new((ax.t(x), ay.t(y)), 5, c.filled())),
            )
            .map_err(|x| e(x.to_string()))?
            .label(s.label.clone())
            .legend(move |(x, y)| Circle::new((x, y), 5, c.filled()));
        if !annotate {
            continue;
        }
        chart
            .draw_series(s.points.iter().zip(&s.notes).map(move |(&(x, y), n)| {
                EmptyElement::at((ax.t(x), ay.t(y)))
                    + Text::new(n.clone(), (8, -6), ("sans-serif", 11).into_font().color(&c))
            }))
            .map_err(|x| e(x.to_string()))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present().map_err(|x| e(x.to_string()))
}

/// A line on a categorical chart.
#[derive(Debug, Clone)]
struct Line {
    series: Series,
    /// Thin with triangles (p99) rather than thick with circles (mean).
    dashed: bool,
    color: usize,
}

/// Draws categorical-x line series (x = index into `xs`) on `area`.
fn category_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    x_desc: &str,
    xs: &[String],
    y_desc: &str,
    lines: &[Line],
) -> Result<(), String> {
    let (lo, hi) = bounds(
        &lines.iter().map(|l| l.series.clone()).collect::<Vec<_>>(),
        |p| p.1,
    );
    // A log axis is drawn as a linear one over log10(y), labelled with 10^y.
    let ay = Axis::auto(lo, hi);
    let n = xs.len() as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-1i32..n, ay.range())
        .map_err(|x| x.to_string())?;
    chart
        .configure_mesh()
        .y_labels(8)
        .x_desc(x_desc)
        .y_desc(ay.desc(y_desc))
        .x_labels(xs.len() + 2)
        .x_label_formatter(&|i| {
            usize::try_from(*i)
                .ok()
                .and_then(|i| xs.get(i).cloned())
                .unwrap_or_default()
        })
        .y_label_formatter(&|y| ay.label(*y))
        .draw()
        .map_err(|x| x.to_string())?;
    for line in lines {
        let (s, dashed, c) = (&line.series, &line.dashed, color(line.color));
        let pts: Vec<(i32, f64)> = s.points.iter().map(|&(x, y)| (x as i32, ay.t(y))).collect();
        let style = if *dashed {
            c.stroke_width(1)
        } else {
            c.stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(|x| x.to_string())?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        if *dashed {
            chart
                .draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 5, c.filled())))
                .map_err(|x| x.to_string())?;
        } else {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(|x| x.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| x.to_string())
}

fn categories<T: PartialOrd + Copy + ToString>(vals: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = Vec::new();
    for x in vals {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v
}

/// Plot 2: mean (circles) and p99 (triangles) latency by queue depth, a pair of lines per engine
/// (and per other varying dimension).
pub fn latency_by_qd(
    path: &Path,
    data: &[(Point, ResultRow)],
    v: &Varying,
) -> Result<(), ReportError> {
    let e = err(path);
    let qds = categories(data.iter().map(|(p, _)| p.qd));
    let idx = |p: &Point| qds.iter().position(|q| *q == p.qd).unwrap_or(0) as f64;
    let label = |p: &Point| v.series_label(p, &[Dim::Engine], &[Dim::Qd]);
    let mean = group(data, label, |p, r| Some((idx(p), r.lat_mean_us?)));
    let p99 = group(data, label, |p, r| Some((idx(p), r.lat_p99_us?)));
    let mut lines = Vec::new();
    for (i, (m, q)) in mean.into_iter().zip(p99).enumerate() {
        lines.push(Line {
            series: Series {
                label: format!("{} mean", m.label),
                ..m
            },
            dashed: false,
            color: i,
        });
        lines.push(Line {
            series: Series {
                label: format!("{} p99", q.label),
                ..q
            },
            dashed: true,
            color: i,
        });
    }
    let xs: Vec<String> = qds.iter().map(|q| q.to_string()).collect();
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    category_lines(
        &root,
        "Guest latency by queue depth (mean ●, p99 ▲)",
        "queue depth per queue",
        &xs,
        "latency (µs)",
        &lines,
    )
    .map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// Plot 3: IOPS (top) and p99 latency (bottom) by max_batch.
pub fn max_batch(path: &Path, data: &[(Point, ResultRow)], v: &Varying) -> Result<(), ReportError> {
    let e = err(path);
    let mbs = categories(data.iter().map(|(p, _)| p.max_batch));
    let idx = |p: &Point| mbs.iter().position(|m| *m == p.max_batch).unwrap_or(0) as f64;
    let label = |p: &Point| v.series_label(p, &[], &[Dim::MaxBatch]);
    let lines = |dashed: bool, y: fn(&ResultRow) -> Option<f64>| -> Vec<Line> {
        group(data, label, |p, r| Some((idx(p), y(r)?)))
            .into_iter()
            .enumerate()
            .map(|(i, series)| Line {
                series,
                dashed,
                color: i,
            })
            .collect()
    };
    let iops = lines(false, |r| r.iops);
    let p99 = lines(true, |r| r.lat_p99_us);
    let xs: Vec<String> = mbs.iter().map(|m| m.to_string()).collect();
    let root = SVGBackend::new(path, (960, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let (top, bottom) = root.split_vertically(450);
    category_lines(
        &top,
        "IOPS by max_batch",
        "max_batch",
        &xs,
        "guest IOPS",
        &iops,
    )
    .map_err(&e)?;
    category_lines(
        &bottom,
        "p99 latency by max_batch",
        "max_batch",
        &xs,
        "p99 latency (µs)",
        &p99,
    )
    .map_err(&e)?;
    root.present().map_err(|x| e(x.to_string()))
}
