//! The typed JSON of `GET /metrics` and of the API's views that carry counters: each object is a
//! struct (Serialize + utoipa's ToSchema), and the counters inside come from the metric
//! declarations as [`MetricFields`], whose OpenAPI schema is built from those same declarations
//! (one property per field, typed by its kind, described by its doc comment).

use std::marker::PhantomData;

use osprey_metrics::{Kind, Metric, MetricSet};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use super::{combined_json, to_json, IoThreadParams, ThreadCpu, VmMetrics};

/// The fields of a metric set `S` at one moment, as their declarations put them in JSON
/// ([`super::to_json`]); serialized as an object, flattened into the object that holds it.
pub struct MetricFields<S> {
    fields: Map<String, Value>,
    set: PhantomData<fn() -> S>,
}

impl<S> std::fmt::Debug for MetricFields<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fields.fmt(f)
    }
}

impl<S> Clone for MetricFields<S> {
    fn clone(&self) -> Self {
        Self::from_map(self.fields.clone())
    }
}

impl<S> PartialEq for MetricFields<S> {
    fn eq(&self, other: &Self) -> bool {
        self.fields == other.fields
    }
}

impl<S> MetricFields<S> {
    fn from_map(fields: Map<String, Value>) -> Self {
        Self {
            fields,
            set: PhantomData,
        }
    }
}

impl<S: MetricSet> MetricFields<S> {
    /// `set`'s fields.
    pub fn of(set: &S) -> Self {
        Self::from_map(to_json(set))
    }

    /// Several parts' fields combined (a drive's queues).
    pub fn combined(parts: &[&S]) -> Self {
        Self::from_map(combined_json(parts))
    }

    /// These fields without those `other` already has (two sets flattened into one object
    /// must not name a field twice).
    pub fn without_fields_of<T>(mut self, other: &MetricFields<T>) -> Self {
        self.fields.retain(|k, _| !other.fields.contains_key(k));
        self
    }
}

impl<S> Serialize for MetricFields<S> {
    fn serialize<Ser: serde::Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        self.fields.serialize(serializer)
    }
}

/// The schema of [`MetricFields<S>`]: one property per declared field of `S`.
pub fn fields_schema<S: MetricSet>() -> RefOr<Schema> {
    let mut object = ObjectBuilder::new().description(Some(format!(
        "The fields of `{}` (docs/api/metrics.md).",
        short_type_name::<S>()
    )));
    for m in S::METRICS {
        object = object.property(m.field, metric_schema(m));
        if m.kind == Kind::Histogram {
            if !m.bounds_key.is_empty() {
                let bounds = ArrayBuilder::new()
                    .items(ObjectBuilder::new().schema_type(Type::Integer))
                    .description(Some(format!("Upper bounds of `{}`'s buckets.", m.field)));
                object = object.property(m.bounds_key, bounds);
            }
            if !m.sum_key.is_empty() {
                let sum = ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .description(Some(format!("Sum of the values `{}` counts.", m.field)));
                object = object.property(m.sum_key, sum);
            }
        }
        object = object.required(m.field);
    }
    RefOr::T(Schema::Object(object.build()))
}

// The field schemas the derives name (`schema_with` takes a plain function).
fn vm_fields() -> RefOr<Schema> {
    fields_schema::<VmMetrics>()
}
fn iothread_param_fields() -> RefOr<Schema> {
    fields_schema::<IoThreadParams>()
}
fn iothread_stat_fields() -> RefOr<Schema> {
    fields_schema::<dataplane::stats::IoThreadStats>()
}
fn queue_fields() -> RefOr<Schema> {
    fields_schema::<devices::block::stats::QueueStats>()
}
/// The schema of a limiter's fields (a drive's, a group's).
pub fn limiter_fields() -> RefOr<Schema> {
    fields_schema::<dataplane::rate_limit::LimiterStats>()
}
fn thread_fields() -> RefOr<Schema> {
    fields_schema::<ThreadCpu>()
}

/// `S`'s name without its module path.
fn short_type_name<S>() -> &'static str {
    let full = std::any::type_name::<S>();
    full.rsplit("::").next().unwrap_or(full)
}

/// One declared field's schema: its JSON type, its doc comment as the description.
fn metric_schema(m: &Metric) -> RefOr<Schema> {
    let doc = Some(m.doc.trim().to_string());
    let schema = match m.kind {
        // An `Option` field is `null` when absent (a limiter without that bucket).
        Kind::Counter | Kind::Gauge if m.nullable => ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
            .description(doc)
            .build(),
        Kind::Counter | Kind::Gauge => ObjectBuilder::new()
            .schema_type(Type::Integer)
            .description(doc)
            .build(),
        Kind::Flag => ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .description(doc)
            .build(),
        Kind::Text => ObjectBuilder::new()
            .schema_type(Type::String)
            .description(doc)
            .build(),
        Kind::Histogram => {
            return RefOr::T(Schema::Array(
                ArrayBuilder::new()
                    .items(ObjectBuilder::new().schema_type(Type::Integer))
                    .description(doc)
                    .build(),
            ))
        }
    };
    RefOr::T(Schema::Object(schema))
}

/// `GET /metrics`' `vm` object.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct VmReport {
    /// `Running` or `Paused`.
    pub state: String,
    /// The VM's own metrics.
    #[serde(flatten)]
    #[schema(schema_with = vm_fields)]
    pub metrics: MetricFields<VmMetrics>,
}

/// An iothread: its id, its polling and batching parameters in force, and its counters.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = IoThread)]
pub struct IoThreadReport {
    /// The iothread's id.
    pub id: String,
    /// Its parameters in force.
    #[serde(flatten)]
    #[schema(schema_with = iothread_param_fields)]
    pub params: MetricFields<IoThreadParams>,
    /// Its counters.
    #[schema(schema_with = iothread_stat_fields)]
    pub stats: MetricFields<dataplane::stats::IoThreadStats>,
}

impl IoThreadReport {
    /// The report of iothread `id`.
    pub fn new(id: &str, params: &IoThreadParams, stats: &dataplane::stats::IoThreadStats) -> Self {
        Self {
            id: id.to_string(),
            params: MetricFields::of(params),
            stats: MetricFields::of(stats),
        }
    }
}

/// A drive's counters: its queues combined, requests per queue, and its own limiter's fields
/// the queues do not count themselves (the tokens left).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = DriveStats)]
pub struct DriveCounters {
    /// The drive's id.
    pub drive_id: String,
    /// Requests completed, per queue.
    pub queue_requests: Vec<u64>,
    /// The queues' counters, combined.
    #[serde(flatten)]
    #[schema(schema_with = queue_fields)]
    pub queues: MetricFields<devices::block::stats::QueueStats>,
    /// The drive's own limiter.
    #[serde(flatten)]
    #[schema(schema_with = limiter_fields)]
    pub limiter: MetricFields<dataplane::rate_limit::LimiterStats>,
}

impl DriveCounters {
    /// The counters of drive `id`.
    pub fn new(
        id: &str,
        queues: &[&devices::block::stats::QueueStats],
        limiter: &dataplane::rate_limit::LimiterStats,
    ) -> Self {
        let combined = MetricFields::combined(queues);
        let limiter = MetricFields::of(limiter).without_fields_of(&combined);
        Self {
            drive_id: id.to_string(),
            queue_requests: queues
                .iter()
                .map(|q| q.requests.load(std::sync::atomic::Ordering::Relaxed))
                .collect(),
            queues: combined,
            limiter,
        }
    }
}

/// One thread name's CPU time.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Thread)]
pub struct ThreadReport {
    /// The thread's name (`comm`).
    pub name: String,
    /// Its CPU time and who runs it.
    #[serde(flatten)]
    #[schema(schema_with = thread_fields)]
    pub cpu: MetricFields<ThreadCpu>,
}

impl ThreadReport {
    /// The report of the threads named `name`.
    pub fn new(name: &str, cpu: &ThreadCpu) -> Self {
        Self {
            name: name.to_string(),
            cpu: MetricFields::of(cpu),
        }
    }
}

/// The `vm` object: the declared metrics and `state` ([`VmReport`]).
pub fn vm_json(state: &str, vm: &VmMetrics) -> Value {
    json_of(&VmReport {
        state: state.to_string(),
        metrics: MetricFields::of(vm),
    })
}

/// An iothread's object: `id`, its parameters and its `stats` ([`IoThreadReport`]).
pub fn iothread_json(
    id: &str,
    params: &IoThreadParams,
    stats: &dataplane::stats::IoThreadStats,
) -> Value {
    json_of(&IoThreadReport::new(id, params, stats))
}

/// A drive's counters ([`DriveCounters`]).
pub fn drive_json(
    id: &str,
    queues: &[&devices::block::stats::QueueStats],
    limiter: &dataplane::rate_limit::LimiterStats,
) -> Value {
    json_of(&DriveCounters::new(id, queues, limiter))
}

/// The `threads` list: one object per thread name with its `name` ([`ThreadReport`]).
pub fn threads_json<'a>(threads: impl IntoIterator<Item = (&'a str, ThreadCpu)>) -> Value {
    threads
        .into_iter()
        .map(|(name, cpu)| json_of(&ThreadReport::new(name, &cpu)))
        .collect()
}

/// A report as a JSON value (maps and numbers only: serializing cannot fail).
pub fn json_of<T: serde::Serialize>(report: &T) -> Value {
    serde_json::to_value(report).unwrap_or_default()
}
