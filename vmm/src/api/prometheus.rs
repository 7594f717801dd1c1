//! The Prometheus text format (0.0.4) view of `GET /metrics`, built by flattening the JSON
//! the control thread produces (shape in [`crate::api`]). Pure: JSON in, text out.
//!
//! - `osprey_vm_uptime_ms`, `osprey_vm_vcpus`, `osprey_vm_running` (1 when `state` is Running);
//! - per iothread, each numeric field and each `stats` entry as
//!   `osprey_iothread_<name>{iothread="<id>"}`;
//! - per drive, each numeric field as `osprey_drive_<name>{drive="<drive_id>"}` and
//!   `batch_bounds`/`batch_hist` as the histogram `osprey_drive_batch_size`;
//! - per rate-limit group, each numeric field as `osprey_rate_limit_group_<name>{group="<id>"}`;
//! - per thread name, `osprey_thread_cpu_ns_total{thread="<name>"}`.
//!
//! Every family has a `# HELP` and a `# TYPE` line, as scrapers expect: the fields that only
//! grow are `counter`s named `…_total`, the others `gauge`s ([`CATALOGUE`]); a numeric field the
//! catalogue does not know yet is exported `untyped`. Strings other than the label sources, and
//! other arrays or objects, are skipped.

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

/// A metric family: its samples must be contiguous after a single `# HELP` and `# TYPE` line.
#[derive(Debug)]
struct Family {
    name: String,
    kind: &'static str,
    help: String,
    samples: Vec<Sample>,
}

/// What a field is: a counter (only grows) or a gauge, and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// Known fields by JSON prefix (`iothread`, `drive`, `group`) and key: kind and help text.
const CATALOGUE: &[(&str, &str, Kind, &str)] = &[
    (
        "iothread",
        "max_batch",
        Kind::Gauge,
        "Requests one queue may take per turn",
    ),
    (
        "iothread",
        "poll_max_ns",
        Kind::Gauge,
        "Longest polling window in ns (0: polling off)",
    ),
    (
        "iothread",
        "poll_grow",
        Kind::Gauge,
        "Factor the classic policy grows the window by",
    ),
    (
        "iothread",
        "poll_shrink",
        Kind::Gauge,
        "Divisor the classic policy shrinks the window by (0: reset)",
    ),
    (
        "iothread",
        "poll_weight",
        Kind::Gauge,
        "Weight of the newest interval in the weighted policy",
    ),
    (
        "iothread",
        "wakeups",
        Kind::Counter,
        "Times the thread woke from epoll_wait",
    ),
    (
        "iothread",
        "handler_runs",
        Kind::Counter,
        "Handler turns run",
    ),
    (
        "iothread",
        "commands",
        Kind::Counter,
        "Commands received (attach, detach, parameters)",
    ),
    ("iothread", "handlers", Kind::Gauge, "Handlers attached"),
    (
        "iothread",
        "watched_fds",
        Kind::Gauge,
        "File descriptors in the thread's epoll set",
    ),
    (
        "iothread",
        "poll_disabled_handlers",
        Kind::Gauge,
        "Handlers whose polling is turned off",
    ),
    (
        "iothread",
        "poll_window_ns",
        Kind::Gauge,
        "Current polling window in ns",
    ),
    (
        "iothread",
        "poll_hits",
        Kind::Counter,
        "Polling windows that found work",
    ),
    (
        "iothread",
        "poll_misses",
        Kind::Counter,
        "Polling windows that ended without work",
    ),
    (
        "iothread",
        "poll_yields",
        Kind::Counter,
        "Times polling yielded the CPU",
    ),
    (
        "iothread",
        "completion_spins",
        Kind::Counter,
        "Spins on in-flight completions before sleeping, polling suspended (Adaptive)",
    ),
    (
        "iothread",
        "completion_spin_hits",
        Kind::Counter,
        "Completion spins that found work (a completion or a new request) and did not sleep (Adaptive)",
    ),
    (
        "iothread",
        "completion_spin_ns",
        Kind::Counter,
        "Time spent spinning on in-flight completions, in ns (Adaptive)",
    ),
    (
        "iothread",
        "poll_yield_stops",
        Kind::Counter,
        "Times the poll loop's yields were stopped on a busy host (Adaptive)",
    ),
    (
        "iothread",
        "poll_yields_off",
        Kind::Gauge,
        "1 while the poll loop does not yield its CPU (Adaptive)",
    ),
    (
        "iothread",
        "run_delay_ns",
        Kind::Counter,
        "Time the thread waited for a CPU while runnable, in ns",
    ),
    (
        "iothread",
        "cpu_wait_permille",
        Kind::Gauge,
        "Share of the last sample the thread waited for a CPU, per mille",
    ),
    (
        "iothread",
        "poll_suspensions",
        Kind::Counter,
        "Times polling was suspended because the host was busy",
    ),
    (
        "iothread",
        "poll_suspended",
        Kind::Gauge,
        "1 while polling is suspended",
    ),
    (
        "iothread",
        "poll_backoff_ns",
        Kind::Gauge,
        "How long the current suspension lasts, in ns",
    ),
    (
        "iothread",
        "payoff_trials",
        Kind::Counter,
        "Conclusive trials of the other mode, polling or sleeping (Adaptive)",
    ),
    (
        "iothread",
        "payoff_wins",
        Kind::Counter,
        "Trials the other mode won (Adaptive)",
    ),
    (
        "iothread",
        "payoff_switches",
        Kind::Counter,
        "Switches between polling and sleeping: two won trials in a row (Adaptive)",
    ),
    (
        "iothread",
        "payoff_ratio_permille",
        Kind::Gauge,
        "Last trial: the other mode's request rate against the current mode's, per mille",
    ),
    (
        "iothread",
        "payoff_interval_ns",
        Kind::Gauge,
        "Current interval between payoff trials, in ns",
    ),
    (
        "iothread",
        "payoff_sleeping",
        Kind::Gauge,
        "1 while sleeping between events completes more requests than polling (Adaptive)",
    ),
    (
        "iothread",
        "thread_light",
        Kind::Gauge,
        "1 while the thread runs one nice step lighter because its policy polls",
    ),
    (
        "iothread",
        "weight_switches",
        Kind::Counter,
        "Switches between the light and the base weight",
    ),
    (
        "iothread",
        "sleeps",
        Kind::Counter,
        "Times the thread slept in epoll_wait",
    ),
    (
        "iothread",
        "fd_events",
        Kind::Counter,
        "File descriptor events handled",
    ),
    (
        "iothread",
        "poll_ns",
        Kind::Counter,
        "Time spent polling, in ns",
    ),
    (
        "iothread",
        "work_ns",
        Kind::Counter,
        "Time spent running handlers, in ns",
    ),
    (
        "iothread",
        "sleep_ns",
        Kind::Counter,
        "Time spent asleep, in ns",
    ),
    (
        "iothread",
        "cpu_ns",
        Kind::Counter,
        "CPU time of the thread, in ns",
    ),
    (
        "drive",
        "kicks",
        Kind::Counter,
        "Guest notifications (queue kicks) seen; kicks between two looks count once",
    ),
    ("drive", "requests", Kind::Counter, "Requests completed"),
    ("drive", "read_bytes", Kind::Counter, "Bytes read"),
    ("drive", "write_bytes", Kind::Counter, "Bytes written"),
    (
        "drive",
        "flushes",
        Kind::Counter,
        "Flush requests completed",
    ),
    (
        "drive",
        "io_errors",
        Kind::Counter,
        "Requests completed with VIRTIO_BLK_S_IOERR",
    ),
    (
        "drive",
        "unsupported",
        Kind::Counter,
        "Requests completed with VIRTIO_BLK_S_UNSUPP",
    ),
    (
        "drive",
        "malformed",
        Kind::Counter,
        "Malformed descriptor chains",
    ),
    (
        "drive",
        "notifications",
        Kind::Counter,
        "Interrupts sent to the guest",
    ),
    (
        "drive",
        "engine_full",
        Kind::Counter,
        "Turns that stopped because the I/O engine was full",
    ),
    (
        "drive",
        "submissions",
        Kind::Counter,
        "Submission calls to the I/O engine",
    ),
    (
        "drive",
        "inflight_max",
        Kind::Gauge,
        "Most requests in flight at once so far",
    ),
    ("drive", "in_flight", Kind::Gauge, "Requests in flight now"),
    (
        "drive",
        "inline_requests",
        Kind::Counter,
        "Requests the Auto engine served inline",
    ),
    (
        "drive",
        "deferred_requests",
        Kind::Counter,
        "Requests the Auto engine passed to the asynchronous engine",
    ),
    (
        "drive",
        "batched_writes",
        Kind::Counter,
        "Buffered writes the Auto engine ran in one io_submit per turn",
    ),
    (
        "drive",
        "shallow_requests",
        Kind::Counter,
        "O_DIRECT requests the Auto engine gave Linux AIO while fewer than 4 were in flight",
    ),
    (
        "drive",
        "throttled_events",
        Kind::Counter,
        "Times a queue stopped on a dry rate-limit bucket",
    ),
    (
        "drive",
        "throttled_ns",
        Kind::Counter,
        "Time queues spent throttled, in ns",
    ),
    (
        "drive",
        "ops_tokens",
        Kind::Gauge,
        "Operations left in the drive's ops bucket",
    ),
    (
        "drive",
        "bandwidth_tokens",
        Kind::Gauge,
        "Bytes left in the drive's bandwidth bucket",
    ),
    (
        "group",
        "throttled_events",
        Kind::Counter,
        "Times a queue of the group stopped on a dry bucket",
    ),
    (
        "group",
        "throttled_ns",
        Kind::Counter,
        "Time the group's queues spent throttled, in ns",
    ),
    (
        "group",
        "ops_tokens",
        Kind::Gauge,
        "Operations left in the group's ops bucket",
    ),
    (
        "group",
        "bandwidth_tokens",
        Kind::Gauge,
        "Bytes left in the group's bandwidth bucket",
    ),
    (
        "thread",
        "cpu_ns",
        Kind::Counter,
        "CPU time of Osprey's threads of this name, in ns",
    ),
];

/// The family name, type and help of field `key` of a `scope` object.
fn describe(prefix: &str, scope: &str, key: &str) -> (String, &'static str, String) {
    let name = format!("{prefix}{}", metric_name(key));
    match CATALOGUE
        .iter()
        .find(|(s, k, _, _)| *s == scope && *k == key)
    {
        Some((_, _, Kind::Counter, help)) => (format!("{name}_total"), "counter", (*help).into()),
        Some((_, _, Kind::Gauge, help)) => (name, "gauge", (*help).into()),
        None => (
            name,
            "untyped",
            format!("The `{key}` field of GET /metrics"),
        ),
    }
}

/// Families in first-seen order.
#[derive(Debug, Default)]
struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &'static str, help: &str) -> &mut Family {
        let index = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    kind,
                    help: help.to_string(),
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[index]
    }

    fn push(&mut self, name: &str, kind: &'static str, help: &str, sample: Sample) {
        self.family(name, kind, help).samples.push(sample);
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for family in &self.families {
            let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(&family.help));
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
        numeric_fields(&mut exp, "iothread", thread, &labels);
        if let Some(stats) = thread.get("stats").and_then(Value::as_object) {
            numeric_fields(&mut exp, "iothread", stats, &labels);
        }
    }
    for drive in array(metrics, "drives") {
        let labels = label_set("drive", drive.get("drive_id"));
        numeric_fields(&mut exp, "drive", drive, &labels);
        batch_histogram(&mut exp, drive);
    }
    for group in array(metrics, "rate_limit_groups") {
        let labels = label_set("group", group.get("id"));
        numeric_fields(&mut exp, "group", group, &labels);
    }
    for thread in array(metrics, "threads") {
        let labels = label_set("thread", thread.get("name"));
        numeric_fields(&mut exp, "thread", thread, &labels);
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
    for (key, name, help) in [
        (
            "uptime_ms",
            "osprey_vm_uptime_ms",
            "Time since the VM started, in ms",
        ),
        ("vcpus", "osprey_vm_vcpus", "vCPUs of the VM"),
    ] {
        if let Some(value) = vm.get(key).and_then(number) {
            exp.push(name, "gauge", help, plain(String::new(), value));
        }
    }
    if let Some(state) = vm.get("state").and_then(Value::as_str) {
        let running = if state == "Running" { "1" } else { "0" };
        exp.push(
            "osprey_vm_running",
            "gauge",
            "1 while the VM runs, 0 while it is paused",
            plain(String::new(), running.into()),
        );
    }
}

/// Every numeric field of a `scope` object (`iothread`, `drive`, `group`) as
/// `osprey_<scope>_<field>[_total]{labels} value`.
fn numeric_fields(exp: &mut Exposition, scope: &str, object: &Map<String, Value>, labels: &str) {
    let prefix = match scope {
        "group" => "osprey_rate_limit_group_".to_string(),
        s => format!("osprey_{s}_"),
    };
    for (key, value) in object {
        if let Some(value) = number(value) {
            let (name, kind, help) = describe(&prefix, scope, key);
            exp.push(&name, kind, &help, plain(labels.to_string(), value));
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
    let help = "Requests per engine submission (no _sum: batch sizes are only counted per bucket)";
    let mut cumulative: u64 = 0;
    for (bound, count) in bounds.iter().zip(&hist) {
        let Some(le) = number(bound) else { return };
        cumulative = cumulative.saturating_add(*count);
        let labels = format!("{{drive=\"{drive_label}\",le=\"{le}\"}}");
        exp.push(
            name,
            "histogram",
            help,
            bucket("_bucket", labels, cumulative),
        );
    }
    let total = hist.iter().fold(0u64, |a, n| a.saturating_add(*n));
    let inf = format!("{{drive=\"{drive_label}\",le=\"+Inf\"}}");
    exp.push(name, "histogram", help, bucket("_bucket", inf, total));
    let labels = format!("{{drive=\"{drive_label}\"}}");
    exp.push(name, "histogram", help, bucket("_count", labels, total));
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

/// Escapes a help text: backslash and newline.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
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

    /// Checks `text` as a scraper would: every sample belongs to the family announced by the
    /// `# HELP` and `# TYPE` lines before it (each family once, contiguous), names and types are
    /// valid, counters end in `_total`, values parse. Returns (family, type) pairs.
    fn check_exposition(text: &str) -> Vec<(String, String)> {
        let mut families: Vec<(String, String)> = Vec::new();
        let mut help: Option<String> = None;
        let valid_name = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, _) = rest.split_once(' ').expect("HELP name and text");
                assert!(valid_name(name), "{line}");
                assert!(
                    families.iter().all(|(f, _)| f != name),
                    "family twice: {line}"
                );
                help = Some(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name and kind");
                assert_eq!(
                    help.as_deref(),
                    Some(name),
                    "HELP right before TYPE: {line}"
                );
                assert!(
                    ["counter", "gauge", "histogram", "untyped"].contains(&kind),
                    "{line}"
                );
                if kind == "counter" {
                    assert!(
                        name.ends_with("_total"),
                        "counter names end in _total: {line}"
                    );
                }
                families.push((name.to_string(), kind.to_string()));
            } else {
                let (family, kind) = families.last().expect("a sample after its TYPE");
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                let ok = name == family
                    || (kind == "histogram"
                        && ["_bucket", "_count", "_sum"]
                            .iter()
                            .any(|s| name == format!("{family}{s}")));
                assert!(ok, "sample `{line}` outside its family {family}");
                let value = line.rsplit(' ').next().unwrap_or_default();
                assert!(value.parse::<f64>().is_ok(), "value of `{line}`");
            }
        }
        families
    }

    #[test]
    fn every_family_is_described_typed_and_named_as_scrapers_expect() {
        let text = render(&sample());
        let families = check_exposition(&text);
        let kind = |name: &str| {
            families
                .iter()
                .find(|(f, _)| f == name)
                .map(|(_, k)| k.as_str())
        };
        assert_eq!(kind("osprey_vm_uptime_ms"), Some("gauge"));
        assert_eq!(kind("osprey_iothread_max_batch"), Some("gauge"));
        assert_eq!(kind("osprey_iothread_poll_hits_total"), Some("counter"));
        assert_eq!(kind("osprey_iothread_sleeps_total"), Some("counter"));
        assert_eq!(kind("osprey_drive_requests_total"), Some("counter"));
        assert_eq!(
            kind("osprey_drive_avg_ns"),
            Some("untyped"),
            "unknown: untyped"
        );
        assert_eq!(kind("osprey_drive_batch_size"), Some("histogram"));
        assert_eq!(
            kind("osprey_rate_limit_group_throttled_events_total"),
            Some("counter")
        );
        for line in [
            "# HELP osprey_drive_requests_total Requests completed",
            "osprey_drive_requests_total{drive=\"disk0\"} 10",
            "osprey_iothread_poll_hits_total{iothread=\"io\\\"1\\\\\"} 0",
            "osprey_drive_batch_size_bucket{drive=\"disk0\",le=\"2\"} 5",
            "osprey_drive_batch_size_bucket{drive=\"disk0\",le=\"+Inf\"} 11",
            "osprey_drive_batch_size_count{drive=\"disk0\"} 11",
            "osprey_vm_running 1",
        ] {
            assert!(text.lines().any(|l| l == line), "`{line}` in:\n{text}");
        }
        // The sample's drive field `bytes_read` is not a counter Osprey has: exported untyped.
        assert!(
            text.contains("# TYPE osprey_drive_bytes_read untyped"),
            "{text}"
        );
    }

    #[test]
    fn every_iothread_counter_is_catalogued() {
        // The live drive fields are checked against a running VM in tests/api.rs.
        for (key, _) in dataplane::stats::IoThreadStats::default().snapshot() {
            let (_, kind, _) = describe("osprey_iothread_", "iothread", key);
            assert_ne!(kind, "untyped", "iothread.{key} is not in the catalogue");
        }
    }

    #[test]
    fn a_paused_vm_and_odd_shapes_do_not_panic() {
        let m = serde_json::json!({"vm": {"state": "Paused"}, "iothreads": 3,
            "drives": [{"drive_id": "d\nx", "batch_bounds": [1, 2], "batch_hist": [1]}]});
        assert_eq!(
            render(&m),
            "# HELP osprey_vm_running 1 while the VM runs, 0 while it is paused\n\
             # TYPE osprey_vm_running gauge\nosprey_vm_running 0\n"
        );
        assert_eq!(render(&Value::Null), "");
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(metric_name("p99.9-ns"), "p99_9_ns");
    }
}
