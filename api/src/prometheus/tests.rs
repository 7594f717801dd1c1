//! The exposition of a full snapshot: names, types, base units, and a real parser's verdict
//! (`promtool check metrics`, or Python's `prometheus_client` with the same lint rules).

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::*;
use crate::metrics::tests_support::full_snapshot;

fn family_types(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect()
}

#[test]
fn names_types_and_base_units() {
    let text = render(&full_snapshot()).expect("render");
    let types = family_types(&text);
    let kind = |name: &str| {
        types
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, k)| k.as_str())
    };
    assert_eq!(kind("osprey_vm_uptime_seconds"), Some("gauge"));
    assert_eq!(kind("osprey_iothread_poll_seconds_total"), Some("counter"));
    assert_eq!(kind("osprey_iothread_poll_window_seconds"), Some("gauge"));
    assert_eq!(kind("osprey_iothread_cpu_wait_ratio"), Some("gauge"));
    assert_eq!(kind("osprey_iothread_payoff_rate_ratio"), Some("gauge"));
    assert_eq!(kind("osprey_drive_read_bytes_total"), Some("counter"));
    assert_eq!(kind("osprey_drive_batch_size"), Some("histogram"));
    assert_eq!(kind("osprey_thread_cpu_seconds_total"), Some("counter"));
    for line in [
        "osprey_vm_uptime_seconds 83.412",
        "osprey_vm_running 1",
        "osprey_iothread_poll_seconds_total{iothread=\"io0\"} 1.5",
        "osprey_iothread_cpu_wait_ratio{iothread=\"io0\"} 0.25",
        "osprey_iothread_poll_hits_total{iothread=\"io0\"} 40",
        "osprey_drive_requests_total{drive=\"disk0\"} 15",
        "osprey_drive_reset_pending{drive=\"disk0\"} 1",
        "osprey_drive_batch_size_bucket{drive=\"disk0\",le=\"1\"} 1",
        "osprey_drive_batch_size_bucket{drive=\"disk0\",le=\"+Inf\"} 3",
        "osprey_drive_batch_size_sum{drive=\"disk0\"} 304.0",
        "osprey_drive_batch_size_count{drive=\"disk0\"} 3",
        "osprey_drive_ops_tokens{drive=\"disk0\"} 60",
        "osprey_thread_cpu_seconds_total{thread=\"kvm-nx-lpage-re\",kind=\"kernel\"} 0.000005",
    ] {
        assert!(text.lines().any(|l| l == line), "`{line}` in:\n{text}");
    }
    assert!(
        !text.contains("bandwidth_tokens_bytes{drive"),
        "null: no sample\n{text}"
    );
    for (name, _) in &types {
        for abbreviation in ["_ns", "_ms", "permille"] {
            assert!(!name.contains(abbreviation), "{name}");
        }
    }
    assert!(
        !text.contains("untyped") && !text.contains("drive_engine{"),
        "{text}"
    );
}

#[test]
fn a_paused_vm_and_odd_shapes_do_not_panic() {
    let m = json!({"vm": {"state": "Paused", "running": false}, "iothreads": 3,
        "drives": [{"drive_id": "d\nx", "batch_bounds": [1, 2], "batch_hist": [1]}]});
    assert_eq!(
        render(&m).expect("render"),
        "# HELP osprey_vm_running 1 while the VM runs, 0 while it is paused.\n\
         # TYPE osprey_vm_running gauge\nosprey_vm_running 0\n"
    );
    assert_eq!(render(&Value::Null).expect("render"), "");
}

/// Lint rules promtool applies, for the Python parser (which parses but does not lint).
const PYTHON_LINT: &str = r#"
import re, sys
from prometheus_client.parser import text_string_to_metric_families
text = sys.stdin.read()
problems = []
types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
abbrev = {"ns", "us", "ms", "s", "m", "h", "d", "kb", "mb", "gb", "b", "permille", "pct"}
bad_units = {"nanoseconds", "microseconds", "milliseconds", "minutes", "hours", "days",
             "kilobytes", "megabytes", "gigabytes", "bits", "percent"}
for family in text_string_to_metric_families(text):
    pass  # raises on anything the parser refuses
for name, kind in types.items():
    if name not in helps:
        problems.append(f"{name}: no help text")
    if kind == "counter" and not name.endswith("_total"):
        problems.append(f"{name}: counter metrics should have _total suffix")
    if kind != "counter" and name.endswith("_total"):
        problems.append(f"{name}: non-counter metrics should not have _total suffix")
    for part in name.split("_"):
        if part in abbrev:
            problems.append(f"{name}: metric names should not contain abbreviated units")
        if part in bad_units:
            problems.append(f"{name}: use base unit instead of {part}")
    if kind != "histogram" and re.search(r"_(bucket|count|sum)$", name):
        problems.append(f"{name}: reserved histogram suffix")
print("\n".join(problems))
sys.exit(3 if problems else 0)
"#;

/// Runs `cmd` with `input` on stdin; `None` when it cannot be started.
fn run(cmd: &mut Command, input: &str) -> Option<(bool, String)> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(input.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

/// The exposition of every declared metric passes `promtool check metrics` (Prometheus' own
/// parser and linter), else Python's `prometheus_client` parser with promtool's lint rules.
/// `OSPREY_METRICS_LINT=python` skips promtool (to exercise the fallback).
#[test]
fn a_real_parser_finds_nothing_to_lint() {
    let text = render(&full_snapshot()).expect("render");
    let python_only = std::env::var("OSPREY_METRICS_LINT").is_ok_and(|v| v == "python");
    if !python_only {
        if let Some((ok, out)) = run(Command::new("promtool").args(["check", "metrics"]), &text) {
            assert!(
                ok && out.trim().is_empty(),
                "promtool check metrics:\n{out}\n{text}"
            );
            println!("promtool check metrics: clean");
            return;
        }
    }
    for python in ["python3", "/usr/bin/python3"] {
        let has_parser = run(
            Command::new(python).args(["-c", "import prometheus_client"]),
            "",
        );
        if !has_parser.is_some_and(|(ok, _)| ok) {
            continue;
        }
        let (ok, out) = run(Command::new(python).args(["-c", PYTHON_LINT]), &text)
            .expect("python3 ran a moment ago");
        assert!(
            ok && out.trim().is_empty(),
            "prometheus_client lint:\n{out}\n{text}"
        );
        println!("prometheus_client parser and lint ({python}): clean");
        return;
    }
    println!("NOT RUN: neither promtool nor python3's prometheus_client is installed");
}
