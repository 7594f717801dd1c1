//! The Prometheus text format (0.0.4) view of `GET /metrics`, encoded by the `prometheus-client`
//! crate through a collector over the JSON snapshot the control thread produces. What is
//! exported, and how it is named, typed, described and labelled, comes from the metric
//! declarations ([`crate::metrics::SCOPES`]); the conversion to base units (ns and ms →
//! seconds, per mille → ratio) happens here. A JSON field no declaration names is not exported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use serde_json::{Map, Value};

use crate::metrics::{Group, Scope, SCOPES};
use osprey_metrics::{Kind, Metric};

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Renders the metrics JSON in the Prometheus text format.
pub fn render(metrics: &Value) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(metrics.clone())));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
    Ok(out)
}

/// A `GET /metrics` JSON snapshot, collected on each encode.
#[derive(Debug)]
struct Snapshot(Value);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for scope in SCOPES {
            let objects: Vec<&Map<String, Value>> = match self.0.get(scope.json) {
                Some(Value::Array(items)) if scope.array => {
                    items.iter().filter_map(Value::as_object).collect()
                }
                Some(Value::Object(o)) if !scope.array => vec![o],
                _ => continue,
            };
            for (group, metric) in scope.metrics() {
                family(&mut encoder, scope, group, metric, &objects)?;
            }
        }
        Ok(())
    }
}

/// One sample's value, in base units.
enum Sample {
    Int(u64),
    Float(f64),
    Hist {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
}

/// Encodes one family: its `# HELP` and `# TYPE` and a sample per object that has the field.
fn family(
    encoder: &mut DescriptorEncoder,
    scope: &Scope,
    group: &Group,
    metric: &Metric,
    objects: &[&Map<String, Value>],
) -> Result<(), std::fmt::Error> {
    let metric_type = match metric.kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge | Kind::Flag => MetricType::Gauge,
        Kind::Histogram => MetricType::Histogram,
        Kind::Text => return Ok(()),
    };
    let samples: Vec<(Vec<(&str, String)>, Sample)> = objects
        .iter()
        .filter_map(|o| {
            let fields = match group.sub {
                Some(sub) => o.get(sub)?.as_object()?,
                None => o,
            };
            Some((labels(scope, o), sample(metric, fields)?))
        })
        .collect();
    if samples.is_empty() {
        return Ok(());
    }
    let name = format!("{}_{}", scope.prefix, metric.prometheus_stem());
    let unit = metric.unit.base().map(|u| match u {
        "seconds" => Unit::Seconds,
        "bytes" => Unit::Bytes,
        other => Unit::Other(other.to_string()),
    });
    let help = metric.help();
    let mut family = encoder.encode_descriptor(&name, &help, unit.as_ref(), metric_type)?;
    for (labels, sample) in samples {
        let mut e = family.encode_family(&labels)?;
        match (metric_type, sample) {
            (MetricType::Counter, Sample::Int(v)) => {
                e.encode_counter::<NoLabelSet, _, f64>(&v, None)?
            }
            (MetricType::Counter, Sample::Float(v)) => {
                e.encode_counter::<NoLabelSet, _, f64>(&v, None)?
            }
            (_, Sample::Int(v)) => e.encode_gauge(&v)?,
            (_, Sample::Float(v)) => e.encode_gauge(&v)?,
            (
                _,
                Sample::Hist {
                    sum,
                    count,
                    buckets,
                },
            ) => e.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?,
        }
    }
    Ok(())
}

/// The scope's labels from the object's keys (absent: empty).
fn labels<'a>(scope: &'a Scope, object: &Map<String, Value>) -> Vec<(&'a str, String)> {
    scope
        .labels
        .iter()
        .map(|(label, key)| {
            let value = match object.get(*key) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (*label, value)
        })
        .collect()
}

/// The field's value in base units; `None` when absent, null or of the wrong shape.
fn sample(metric: &Metric, fields: &Map<String, Value>) -> Option<Sample> {
    let value = fields.get(metric.field)?;
    if metric.kind == Kind::Histogram {
        let counts: Vec<u64> = value
            .as_array()?
            .iter()
            .map(Value::as_u64)
            .collect::<Option<_>>()?;
        if counts.len() != metric.bounds.len() + 1 {
            return None;
        }
        let sum = fields.get(metric.sum_key).and_then(Value::as_u64)?;
        let bounds = metric
            .bounds
            .iter()
            .map(|&b| b as f64)
            .chain([f64::INFINITY]);
        return Some(Sample::Hist {
            sum: sum as f64 / metric.unit.per_base(),
            count: counts.iter().fold(0u64, |a, c| a.saturating_add(*c)),
            buckets: bounds.zip(counts).collect(),
        });
    }
    let n = match value {
        Value::Bool(b) => u64::from(*b),
        v => v.as_u64()?,
    };
    Some(match metric.unit.per_base() {
        1.0 => Sample::Int(n),
        per_base => Sample::Float(n as f64 / per_base),
    })
}

#[cfg(test)]
mod tests;
