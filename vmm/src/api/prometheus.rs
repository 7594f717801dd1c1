//! The Prometheus text format (0.0.4) view of `GET /metrics`, built by flattening the JSON
//! the control thread produces (shape in [`crate::api`]). Pure: JSON in, text out.
//!
//! - `osprey_vm_uptime_ms`, `osprey_vm_vcpus`, `osprey_vm_running` (1 when `state` is Running);
//! - per iothread, each numeric field and each `stats` entry as
//!   `osprey_iothread_<name>{iothread="<id>"}`;
//! - per drive, each numeric field as `osprey_drive_<name>{drive="<drive_id>"}` and
//!   `batch_bounds`/`batch_hist` as the histogram `osprey_drive_batch_size`;
//! - per rate-limit group, each numeric field as `osprey_rate_limit_group_<name>{group="<id>"}`.
//!
//! Strings other than the label sources, and other arrays or objects, are skipped.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One sample: `{labels} value`.
#[derive(Debug)]
struct Sample {
    suffix: &'static str,
    labels: String,
    value: String,
}

/// A metric family: its samples must be contiguous after a single `# TYPE` line.
#[derive(Debug)]
struct Family {
    name: String,
    kind: &'static str,
    samples: Vec<Sample>,
}

/// Families in first-seen order.
#[derive(Debug, Default)]
struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &'static str) -> &mut Family {
        let index = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[index]
    }

    fn push(&mut self, name: &str, kind: &'static str, sample: Sample) {
        self.family(name, kind).samples.push(sample);
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for family in &self.families {
            let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
            for s in &family.samples {
                let _ = writeln!(out, "{}{}{} {}", family.name, s.suffix, s.labels, s.value);
            }
        }
        out
    }
}

/// Renders the metrics JSON in the Prometheus text format.
pub fn render(metrics: &Value) -> String {
    let mut exp = Exposition::default();
    if let Some(vm) = metrics.get("vm").and_then(Value::as_object) {
        vm_metrics(&mut exp, vm);
    }
    for thread in array(metrics, "iothreads") {
        let labels = label_set("iothread", thread.get("id"));
        numeric_fields(&mut exp, "osprey_iothread_", thread, &labels);
        if let Some(stats) = thread.get("stats").and_then(Value::as_object) {
            numeric_fields(&mut exp, "osprey_iothread_", stats, &labels);
        }
    }
    for drive in array(metrics, "drives") {
        let labels = label_set("drive", drive.get("drive_id"));
        numeric_fields(&mut exp, "osprey_drive_", drive, &labels);
        batch_histogram(&mut exp, drive);
    }
    for group in array(metrics, "rate_limit_groups") {
        let labels = label_set("group", group.get("id"));
        numeric_fields(&mut exp, "osprey_rate_limit_group_", group, &labels);
    }
    exp.render()
}

fn array<'a>(metrics: &'a Value, key: &str) -> impl Iterator<Item = &'a Map<String, Value>> {
    metrics
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

fn vm_metrics(exp: &mut Exposition, vm: &Map<String, Value>) {
    for (key, name) in [
        ("uptime_ms", "osprey_vm_uptime_ms"),
        ("vcpus", "osprey_vm_vcpus"),
    ] {
        if let Some(value) = vm.get(key).and_then(number) {
            exp.push(name, "gauge", plain(String::new(), value));
        }
    }
    if let Some(state) = vm.get("state").and_then(Value::as_str) {
        let running = if state == "Running" { "1" } else { "0" };
        exp.push(
            "osprey_vm_running",
            "gauge",
            plain(String::new(), running.into()),
        );
    }
}

/// Every numeric field of `object` as `<prefix><field>{labels} value`.
fn numeric_fields(exp: &mut Exposition, prefix: &str, object: &Map<String, Value>, labels: &str) {
    for (key, value) in object {
        if let Some(value) = number(value) {
            let name = format!("{prefix}{}", metric_name(key));
            exp.push(&name, "untyped", plain(labels.to_string(), value));
        }
    }
}

/// `batch_bounds` `[b0, b1, …]` with `batch_hist` `[n0, n1, …, n_over]` as a cumulative
/// histogram; skipped when the arrays do not fit together.
fn batch_histogram(exp: &mut Exposition, drive: &Map<String, Value>) {
    let bounds: Option<Vec<&Value>> = drive
        .get("batch_bounds")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect());
    let hist: Option<Vec<u64>> = drive
        .get("batch_hist")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect());
    let (Some(bounds), Some(hist)) = (bounds, hist) else {
        return;
    };
    if hist.len() != bounds.len() && hist.len() != bounds.len() + 1 {
        return;
    }
    let drive_label = escape(&label_text(drive.get("drive_id")));
    let name = "osprey_drive_batch_size";
    let mut cumulative: u64 = 0;
    for (bound, count) in bounds.iter().zip(&hist) {
        let Some(le) = number(bound) else { return };
        cumulative = cumulative.saturating_add(*count);
        let labels = format!("{{drive=\"{drive_label}\",le=\"{le}\"}}");
        exp.push(name, "histogram", bucket("_bucket", labels, cumulative));
    }
    let total = hist.iter().fold(0u64, |a, n| a.saturating_add(*n));
    let inf = format!("{{drive=\"{drive_label}\",le=\"+Inf\"}}");
    exp.push(name, "histogram", bucket("_bucket", inf, total));
    let labels = format!("{{drive=\"{drive_label}\"}}");
    exp.push(name, "histogram", bucket("_count", labels, total));
}

fn plain(labels: String, value: String) -> Sample {
    Sample {
        suffix: "",
        labels,
        value,
    }
}

fn bucket(suffix: &'static str, labels: String, value: u64) -> Sample {
    Sample {
        suffix,
        labels,
        value: value.to_string(),
    }
}

/// A JSON number as Prometheus prints it; anything else is not a sample.
fn number(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn label_set(name: &str, value: Option<&Value>) -> String {
    format!("{{{name}=\"{}\"}}", escape(&label_text(value)))
}

fn label_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Escapes a label value: backslash, double quote and newline.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A metric name made of `[a-zA-Z0-9_]` only.
fn metric_name(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        serde_json::json!({
            "vm": {"state": "Running", "uptime_ms": 1234, "vcpus": 2},
            "iothreads": [
                {"id": "io0", "max_batch": 32, "poll_max_ns": 32768, "poll_grow": 0,
                 "poll_shrink": 0, "poll_policy": "Classic", "poll_weight": 3,
                 "stats": {"poll_hits": 1, "sleeps": 2}},
                {"id": "io\"1\\", "max_batch": 8, "poll_max_ns": 0, "poll_grow": 2,
                 "poll_shrink": 4, "poll_policy": "Weighted", "poll_weight": 3,
                 "stats": {"poll_hits": 0, "sleeps": 9}}
            ],
            "drives": [{
                "drive_id": "disk0", "engine": "io_uring (sqpoll off)", "requests": 10,
                "bytes_read": 4096, "avg_ns": 1.5,
                "batch_bounds": [1, 2, 4, 8, 16, 32, 64, 128, 256],
                "batch_hist": [3, 2, 1, 0, 0, 0, 0, 0, 1, 4]
            }],
            "rate_limit_groups": [{"id": "tenant", "ops": {"size": 60}, "drives": ["disk0"],
                "throttled_events": 7, "ops_tokens": null}]
        })
    }

    #[test]
    fn flattens_the_metrics_json() {
        // Fields come in serde_json's map order (sorted by name).
        let text = render(&sample());
        let expected = r#"# TYPE osprey_vm_uptime_ms gauge
osprey_vm_uptime_ms 1234
# TYPE osprey_vm_vcpus gauge
osprey_vm_vcpus 2
# TYPE osprey_vm_running gauge
osprey_vm_running 1
# TYPE osprey_iothread_max_batch untyped
osprey_iothread_max_batch{iothread="io0"} 32
osprey_iothread_max_batch{iothread="io\"1\\"} 8
# TYPE osprey_iothread_poll_grow untyped
osprey_iothread_poll_grow{iothread="io0"} 0
osprey_iothread_poll_grow{iothread="io\"1\\"} 2
# TYPE osprey_iothread_poll_max_ns untyped
osprey_iothread_poll_max_ns{iothread="io0"} 32768
osprey_iothread_poll_max_ns{iothread="io\"1\\"} 0
# TYPE osprey_iothread_poll_shrink untyped
osprey_iothread_poll_shrink{iothread="io0"} 0
osprey_iothread_poll_shrink{iothread="io\"1\\"} 4
# TYPE osprey_iothread_poll_weight untyped
osprey_iothread_poll_weight{iothread="io0"} 3
osprey_iothread_poll_weight{iothread="io\"1\\"} 3
# TYPE osprey_iothread_poll_hits untyped
osprey_iothread_poll_hits{iothread="io0"} 1
osprey_iothread_poll_hits{iothread="io\"1\\"} 0
# TYPE osprey_iothread_sleeps untyped
osprey_iothread_sleeps{iothread="io0"} 2
osprey_iothread_sleeps{iothread="io\"1\\"} 9
# TYPE osprey_drive_avg_ns untyped
osprey_drive_avg_ns{drive="disk0"} 1.5
# TYPE osprey_drive_bytes_read untyped
osprey_drive_bytes_read{drive="disk0"} 4096
# TYPE osprey_drive_requests untyped
osprey_drive_requests{drive="disk0"} 10
# TYPE osprey_drive_batch_size histogram
osprey_drive_batch_size_bucket{drive="disk0",le="1"} 3
osprey_drive_batch_size_bucket{drive="disk0",le="2"} 5
osprey_drive_batch_size_bucket{drive="disk0",le="4"} 6
osprey_drive_batch_size_bucket{drive="disk0",le="8"} 6
osprey_drive_batch_size_bucket{drive="disk0",le="16"} 6
osprey_drive_batch_size_bucket{drive="disk0",le="32"} 6
osprey_drive_batch_size_bucket{drive="disk0",le="64"} 6
osprey_drive_batch_size_bucket{drive="disk0",le="128"} 6
osprey_drive_batch_size_bucket{drive="disk0",le="256"} 7
osprey_drive_batch_size_bucket{drive="disk0",le="+Inf"} 11
osprey_drive_batch_size_count{drive="disk0"} 11
# TYPE osprey_rate_limit_group_throttled_events untyped
osprey_rate_limit_group_throttled_events{group="tenant"} 7
"#;
        assert_eq!(text, expected, "got:\n{text}");
    }

    #[test]
    fn a_paused_vm_and_odd_shapes_do_not_panic() {
        let m = serde_json::json!({"vm": {"state": "Paused"}, "iothreads": 3,
            "drives": [{"drive_id": "d\nx", "batch_bounds": [1, 2], "batch_hist": [1]}]});
        assert_eq!(
            render(&m),
            "# TYPE osprey_vm_running gauge\nosprey_vm_running 0\n"
        );
        assert_eq!(render(&Value::Null), "");
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(metric_name("p99.9-ns"), "p99_9_ns");
    }
}
