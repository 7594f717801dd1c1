//! The SVG plots: (1) IOPS against dataplane CPU per I/O, one series per polling config (the
//! Pareto picture); (2) mean and p99 latency by queue depth, per engine; (3) IOPS and p99 by
//! max_batch. Series are named after the dimensions that vary in the matrix.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::matrix::{series_label, varying, Dim, Point};
use crate::report::ResultRow;
use crate::sample::spread;

type Data = [ResultRow];
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Points annotated on the Pareto plot at most (beyond this the labels overlap).
const MAX_ANNOTATED: usize = 24;

/// One line or scatter: its label and its (x, y, annotation) points, by x.
#[derive(Debug, Clone)]
struct Series {
    label: String,
    points: Vec<(f64, f64, String)>,
}

/// Groups the points with an (x, y) by series label, in first-seen order.
fn group(
    data: &Data,
    label: impl Fn(&Point) -> String,
    xy: impl Fn(&ResultRow) -> Option<(f64, f64)>,
    note: impl Fn(&Point) -> String,
) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in data {
        let Some((x, y)) = xy(r) else { continue };
        let l = label(&r.spec);
        let pt = (x, y, note(&r.spec));
        match out.iter_mut().find(|s| s.label == l) {
            Some(s) => s.points.push(pt),
            None => out.push(Series {
                label: l,
                points: vec![pt],
            }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// A value axis: linear from 0, or over log10(v) (labelled v) when the data spans more than 30×.
#[derive(Debug, Clone, Copy)]
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Axis {
    /// The axis for `values`: (0, 1) for none.
    fn auto(values: impl Iterator<Item = f64>) -> Self {
        let (lo, hi) = match spread(&values.collect::<Vec<_>>()) {
            (lo, hi) if lo.is_finite() && hi.is_finite() => (lo, hi),
            _ => (0.0, 1.0),
        };
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
        match v {
            1e6.. => format!("{:.1}M", v / 1e6),
            1e3.. => format!("{:.0}k", v / 1e3),
            10.0.. => format!("{v:.0}"),
            _ => format!("{v:.1}"),
        }
    }

    fn desc(self, what: &str) -> String {
        format!("{what}{}", if self.log { " (log scale)" } else { "" })
    }
}

fn color(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// Plot 1: IOPS by dataplane CPU µs/IO, a series per polling config, annotated by other dims.
fn pareto(root: &Area<'_>, data: &Data, v: &[Dim]) -> Drawn {
    let series = group(
        data,
        |p| format!("poll={}", p.poll),
        |r| Some((r.cpu_dataplane_us_per_io?, r.iops?)),
        |p| {
            Some(series_label(v, p, &[], &[Dim::Poll]))
                .filter(|n| n != "all")
                .unwrap_or_default()
        },
    );
    let all = || series.iter().flat_map(|s| &s.points);
    let (ax, ay) = (
        Axis::auto(all().map(|p| p.0)),
        Axis::auto(all().map(|p| p.1)),
    );
    let annotate = series.iter().map(|s| s.points.len()).sum::<usize>() <= MAX_ANNOTATED;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "IOPS vs dataplane CPU per I/O, by polling config",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(ax.range(), ay.range())?;
    chart
        .configure_mesh()
        .x_desc(ax.desc("dataplane CPU per I/O (µs)"))
        .y_desc(ay.desc("guest IOPS"))
        .x_label_formatter(&|x| ax.label(*x))
        .y_label_formatter(&|y| ay.label(*y))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let at = |&(x, y, _): &(f64, f64, String)| (ax.t(x), ay.t(y));
        chart
            .draw_series(s.points.iter().map(|p| Circle::new(at(p), 5, c.filled())))?
            .label(s.label.clone())
            .legend(move |(x, y)| Circle::new((x, y), 5, c.filled()));
        if annotate {
            let font = ("sans-serif", 11).into_font().color(&c);
            chart.draw_series(s.points.iter().map(|p| {
                EmptyElement::at(at(p)) + Text::new(p.2.clone(), (8, -6), font.clone())
            }))?;
        }
    }
    Ok(chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?)
}

/// A line on a categorical chart: thick with circles (mean, IOPS) or thin with triangles (p99).
#[derive(Debug, Clone)]
struct Line {
    series: Series,
    thin: bool,
    color: usize,
}

/// Draws lines over categorical x (x = index into `xs`) on `area`.
fn category_lines(
    area: &Area<'_>,
    caption: &str,
    x_desc: &str,
    xs: &[String],
    y_desc: &str,
    lines: &[Line],
) -> Drawn {
    let ay = Axis::auto(lines.iter().flat_map(|l| &l.series.points).map(|p| p.1));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-1i32..xs.len() as i32, ay.range())?;
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
        .draw()?;
    for line in lines {
        let c = color(line.color);
        let style = c.stroke_width(if line.thin { 1 } else { 2 });
        let pts: Vec<(i32, f64)> = line
            .series
            .points
            .iter()
            .map(|&(x, y, _)| (x as i32, ay.t(y)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), style))?
            .label(line.series.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        if line.thin {
            chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 5, c.filled())))
        } else {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
        }?;
    }
    Ok(chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?)
}

/// The distinct values of a dimension, sorted, and each point's index among them.
fn categories(data: &Data, key: fn(&Point) -> u32) -> (Vec<String>, impl Fn(&Point) -> f64) {
    let mut v: Vec<u32> = data.iter().map(|r| key(&r.spec)).collect();
    v.sort_unstable();
    v.dedup();
    let names = v.iter().map(u32::to_string).collect();
    (names, move |p: &Point| {
        v.iter().position(|x| *x == key(p)).unwrap_or(0) as f64
    })
}

/// One line per series of `label`, with y from `y` at each point's category `x`.
fn lines(
    data: &Data,
    label: impl Fn(&Point) -> String,
    x: impl Fn(&Point) -> f64,
    y: fn(&ResultRow) -> Option<f64>,
    thin: bool,
    suffix: &str,
) -> Vec<Line> {
    let xy = |r: &ResultRow| Some((x(&r.spec), y(r)?));
    group(data, label, xy, |_| String::new())
        .into_iter()
        .enumerate()
        .map(|(color, mut series)| {
            series.label.push_str(suffix);
            Line {
                series,
                thin,
                color,
            }
        })
        .collect()
}

/// Plot 2: mean (thick, ●) and p99 (thin, ▲) latency by queue depth, per engine and other dims.
fn latency_by_qd(root: &Area<'_>, data: &Data, v: &[Dim]) -> Drawn {
    let (xs, x) = categories(data, |p| p.qd);
    let label = |p: &Point| series_label(v, p, &[Dim::Engine], &[Dim::Qd]);
    let mean = lines(data, label, &x, |r| r.lat_mean_us, false, " mean");
    let p99 = lines(data, label, &x, |r| r.lat_p99_us, true, " p99");
    let pairs: Vec<Line> = mean
        .into_iter()
        .zip(p99)
        .flat_map(|(m, q)| [m, q])
        .collect();
    let caption = "Guest latency by queue depth (mean ●, p99 ▲)";
    let x_desc = "queue depth per queue";
    category_lines(root, caption, x_desc, &xs, "latency (µs)", &pairs)
}

/// Plot 3: IOPS (top) and p99 latency (bottom) by max_batch.
fn max_batch(root: &Area<'_>, data: &Data, v: &[Dim]) -> Drawn {
    let (xs, x) = categories(data, |p| p.max_batch);
    let label = |p: &Point| series_label(v, p, &[], &[Dim::MaxBatch]);
    let iops = lines(data, label, &x, |r| r.iops, false, "");
    let p99 = lines(data, label, &x, |r| r.lat_p99_us, true, "");
    let (top, bottom) = root.split_vertically(450);
    category_lines(
        &top,
        "IOPS by max_batch",
        "max_batch",
        &xs,
        "guest IOPS",
        &iops,
    )?;
    let caption = "p99 latency by max_batch";
    category_lines(&bottom, caption, "max_batch", &xs, "p99 latency (µs)", &p99)
}

/// Draws the plots of the rows with numbers into `out`; returns the files written and failures.
pub fn write_plots(out: &Path, data: &Data) -> (Vec<String>, Vec<String>) {
    type Plot = fn(&Area<'_>, &Data, &[Dim]) -> Drawn;
    let plots: [(&str, u32, Plot); 3] = [
        ("pareto-iops-vs-dataplane-cpu.svg", 640, pareto),
        ("latency-by-qd.svg", 640, latency_by_qd),
        ("max-batch.svg", 900, max_batch),
    ];
    let ok: Vec<ResultRow> = data.iter().filter(|r| r.iops.is_some()).cloned().collect();
    let (mut written, mut failed) = (Vec::new(), Vec::new());
    if ok.is_empty() {
        return (written, failed);
    }
    let points: Vec<Point> = data.iter().map(|r| r.spec).collect();
    let v = varying(&points);
    for (name, height, plot) in plots {
        let path = out.join(name);
        let root = SVGBackend::new(&path, (960, height)).into_drawing_area();
        let draw = || -> Drawn {
            root.fill(&WHITE)?;
            plot(&root, &ok, &v)?;
            Ok(root.present()?)
        };
        match draw() {
            Ok(()) => written.push(name.to_string()),
            Err(e) => failed.push(format!("Cannot draw {}: {e}", path.display())),
        }
    }
    (written, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, MatrixSpec, PollSetting};
    use crate::report::sample_row;

    #[test]
    fn draws_the_three_plots() {
        let spec = MatrixSpec {
            qd: vec![1, 32],
            engine: vec![Engine::IoUring, Engine::Null],
            poll: vec![PollSetting::Off, PollSetting::Classic(None)],
            max_batch: vec![1, 32],
            ..MatrixSpec::default()
        };
        let data: Vec<ResultRow> = spec
            .expand()
            .points
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let mut r = sample_row(i + 1, p.qd, 1000.0 * (i as f64 + 1.0).powi(3));
                r.cpu_dataplane_us_per_io = Some(40.0 / (i as f64 + 1.0));
                r.lat_p99_us = Some(10.0 * f64::from(p.qd) + i as f64);
                ResultRow { spec: p, ..r }
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("osprey-bench-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (written, failed) = write_plots(&dir, &data);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(written.len(), 3);
        let svg = |f: &str| std::fs::read_to_string(dir.join(f)).expect("svg");
        for f in &written {
            assert!(
                svg(f).starts_with("<svg") && svg(f).contains("</svg>"),
                "{f}"
            );
        }
        // Series and annotations name the varying dimensions.
        let pareto = svg("pareto-iops-vs-dataplane-cpu.svg");
        assert!(pareto.contains("poll=classic") && pareto.contains("Null qd32 mb=1"));
        assert!(svg("latency-by-qd.svg").contains("IoUring poll=off mb=32 p99"));
        assert!(svg("max-batch.svg").contains("Null poll=classic qd1"));
        // Nothing to draw without numbers.
        let mut none = data.clone();
        none.iter_mut().for_each(|r| r.iops = None);
        assert_eq!(write_plots(&dir, &none).0.len(), 0);
        if std::env::var_os("OSPREY_BENCH_KEEP_PLOTS").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
