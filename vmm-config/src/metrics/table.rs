//! The docs table of every metric (docs/api/metrics.md), generated from the declarations; a
//! test fails when the file is stale (`OSPREY_BLESS=1 cargo test -p vmm-config --lib metrics` rewrites
//! it).

use std::fmt::Write as _;

use osprey_metrics::Kind;

use super::SCOPES;

/// The whole of docs/api/metrics.md.
pub fn table() -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         <!-- Generated from the metric declarations (vmm-config/src/metrics): do not edit. After changing a\n\
         declaration, run `OSPREY_BLESS=1 cargo test -p vmm-config --lib metrics` to rewrite this file. -->\n\n\
         Every metric of `GET /metrics`, by scope. The JSON keeps each field in the unit it is\n\
         counted in (integer nanoseconds, milliseconds, per mille); the Prometheus text format\n\
         (`?format=prometheus`) converts to base units: seconds (a float), bytes, ratios from 0\n\
         to 1, and counters end in `_total`. A JSON-only field (text) has no Prometheus series.\n",
    );
    for scope in SCOPES {
        let labels: Vec<String> = scope
            .labels
            .iter()
            .map(|(label, key)| format!("`{label}` (JSON `{key}`)"))
            .collect();
        let where_ = if scope.array {
            format!("each object of the JSON's `{}` list", scope.json)
        } else {
            format!("the JSON's `{}` object", scope.json)
        };
        let _ = write!(out, "\n## `{}`\n\nFrom {where_}", scope.prefix);
        if !labels.is_empty() {
            let _ = write!(out, "; labels: {}", labels.join(", "));
        }
        out.push_str(
            ".\n\n| Prometheus | type | JSON field | JSON unit | help |\n|---|---|---|---|---|\n",
        );
        for (group, m) in scope.metrics() {
            let prometheus = match m.prometheus_type() {
                Some(_) => format!("`{}`", m.prometheus_name(scope.prefix)),
                None => "—".to_string(),
            };
            let kind = match m.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Flag => "gauge (JSON: boolean)",
                Kind::Histogram => "histogram",
                Kind::Text => "text",
            };
            let field = match group.sub {
                Some(sub) => format!("`{sub}.{}`", m.field),
                None => format!("`{}`", m.field),
            };
            let field = if m.kind == Kind::Histogram {
                format!("{field} (bounds `{}`, sum `{}`)", m.bounds_key, m.sum_key)
            } else {
                field
            };
            let _ = writeln!(
                out,
                "| {prometheus} | {kind} | {field} | {} | {} |",
                m.unit.json_name(),
                m.help().replace('|', "\\|")
            );
        }
    }
    out
}
