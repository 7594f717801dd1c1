//! Rate-limit configuration: a drive's `rate_limiter`, the VM's `rate-limit-groups` and the
//! `PATCH` bodies that change them, with Firecracker's field names and meaning (`size` tokens
//! per `refill_time` ms, a `one_time_burst` spent once), their validation and their conversion
//! to the dataplane's limiter.

use serde::{Deserialize, Serialize};

use crate::field_update::{not_null, present};

use dataplane::rate_limit::{BucketConfig, LimitConfig, LimiterStats};

/// Longest `refill_time` accepted (ms): one day.
pub const MAX_REFILL_TIME_MS: u64 = 86_400_000;

/// One token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketConfig {
    /// Tokens (bytes or operations) the bucket holds when full, and refills per `refill_time`.
    /// 0 turns the bucket off.
    pub size: u64,
    /// Extra tokens spent before the bucket's own, once (default 0; `null`, as Firecracker
    /// writes an unset one, is 0).
    #[serde(default, deserialize_with = "null_as_zero")]
    pub one_time_burst: u64,
    /// Milliseconds to refill the bucket from empty (1 to 86,400,000).
    pub refill_time: u64,
}

/// A number, or `null` for 0 (Firecracker's `Option` fields written out unset).
fn null_as_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.unwrap_or(0))
}

/// `rate_limiter`: a bandwidth bucket (bytes) and an operations bucket, both optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimiterConfig {
    /// Bytes read or written per `refill_time` (discard, write-zeroes and flush count none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<TokenBucketConfig>,
    /// Requests per `refill_time` (every request counts one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<TokenBucketConfig>,
}

/// One entry of `rate-limit-groups`: limits shared by every drive that names the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitGroupConfig {
    /// Unique id drives refer to (`drives[].rate_limit_group`).
    pub id: String,
    /// Bytes per `refill_time`, summed over the group's drives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<TokenBucketConfig>,
    /// Requests per `refill_time`, summed over the group's drives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<TokenBucketConfig>,
}

impl RateLimitGroupConfig {
    /// The group's limits as a drive's `rate_limiter` states them.
    pub fn limits(&self) -> RateLimiterConfig {
        RateLimiterConfig {
            bandwidth: self.bandwidth,
            ops: self.ops,
        }
    }
}

/// `PATCH /drives/{id}` body: `rate_limiter` set, changed, or `null` to remove it; a new
/// `path_on_host` swaps the backing file while the guest runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveUpdate {
    /// Firecracker's `PartialDrive` names the drive again: when given, it must equal the path's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive_id: Option<String>,
    /// Absent: unchanged; a path: the drive's new backing file (`null` is refused: a drive must
    /// have a file).
    #[serde(
        default,
        deserialize_with = "not_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub path_on_host: Option<std::path::PathBuf>,
    /// Absent: unchanged; `null`: removed; an object: the new limits (full buckets).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rate_limiter: Option<Option<RateLimiterConfig>>,
}

/// `PATCH /rate-limit-groups/{id}` body: each bucket set, changed, or `null` to remove it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupUpdate {
    /// Absent: unchanged; `null`: removed; an object: the new bucket.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub bandwidth: Option<Option<TokenBucketConfig>>,
    /// Absent: unchanged; `null`: removed; an object: the new bucket.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub ops: Option<Option<TokenBucketConfig>>,
}

/// A bucket out of range, named by its JSON path (`drives[0].rate_limiter.ops.refill_time`; in a
/// group's PATCH body, `ops.refill_time`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: must be from 1 to {MAX_REFILL_TIME_MS} ms when size is set, got {refill_time}")]
pub struct RateLimitConfigError {
    /// JSON path of the bad `refill_time`.
    pub field: String,
    /// The value given.
    pub refill_time: u64,
}

impl TokenBucketConfig {
    /// Checks the bucket; `field` is its `refill_time`'s JSON path, for the error.
    fn check(&self, field: impl FnOnce() -> String) -> Result<(), RateLimitConfigError> {
        if self.size == 0 {
            // Firecracker's meaning: a bucket of size 0 limits nothing.
            return Ok(());
        }
        if self.refill_time == 0 || self.refill_time > MAX_REFILL_TIME_MS {
            return Err(RateLimitConfigError {
                field: field(),
                refill_time: self.refill_time,
            });
        }
        Ok(())
    }

    fn to_dataplane(self) -> BucketConfig {
        BucketConfig {
            size: self.size,
            one_time_burst: self.one_time_burst,
            refill_time_ms: self.refill_time,
        }
    }
}

impl RateLimiterConfig {
    /// Checks both buckets; the error names the field under `at` (e.g. `drives[0].rate_limiter`;
    /// empty: the bucket's name is the top of the path, as in a group's PATCH body).
    pub fn check(&self, at: &str) -> Result<(), RateLimitConfigError> {
        for (name, bucket) in [("bandwidth", &self.bandwidth), ("ops", &self.ops)] {
            if let Some(b) = bucket {
                b.check(|| match at {
                    "" => format!("{name}.refill_time"),
                    at => format!("{at}.{name}.refill_time"),
                })?;
            }
        }
        Ok(())
    }

    /// The dataplane's form.
    pub fn to_dataplane(self) -> LimitConfig {
        LimitConfig {
            bandwidth: self.bandwidth.map(TokenBucketConfig::to_dataplane),
            ops: self.ops.map(TokenBucketConfig::to_dataplane),
        }
    }
}

/// A rate-limit group as the API shows it: its buckets in force, its drives and its counters.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = RateLimitGroup)]
pub struct GroupReport {
    /// The group's id.
    pub id: String,
    /// Bytes per `refill_time` ms, shared by the group's drives (`null`: none).
    pub bandwidth: Option<TokenBucketConfig>,
    /// Requests per `refill_time` ms, shared by the group's drives (`null`: none).
    pub ops: Option<TokenBucketConfig>,
    /// The drives in the group.
    pub drives: Vec<String>,
    /// The group's limiter.
    #[serde(flatten)]
    #[schema(schema_with = crate::metrics::report::limiter_fields)]
    pub stats: crate::metrics::report::MetricFields<LimiterStats>,
}

/// Group `id`'s report: `limiter`'s buckets and counters, `drives` its members.
pub fn group_report(
    id: &str,
    limiter: &dataplane::rate_limit::RateLimiter,
    drives: &[&str],
) -> GroupReport {
    let c = limiter.config();
    let bucket = |b: Option<BucketConfig>| {
        b.map(|b| TokenBucketConfig {
            size: b.size,
            one_time_burst: b.one_time_burst,
            refill_time: b.refill_time_ms,
        })
    };
    GroupReport {
        id: id.to_string(),
        bandwidth: bucket(c.bandwidth),
        ops: bucket(c.ops),
        drives: drives.iter().map(|d| d.to_string()).collect(),
        stats: crate::metrics::report::MetricFields::of(&limiter.stats()),
    }
}

/// [`group_report`] as JSON.
pub fn group_json(
    id: &str,
    limiter: &dataplane::rate_limit::RateLimiter,
    drives: &[&str],
) -> serde_json::Value {
    crate::metrics::report::json_of(&group_report(id, limiter, drives))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_bodies_tell_absent_from_null() {
        let absent: DriveUpdate = serde_json::from_str("{}").expect("empty");
        assert_eq!(absent.rate_limiter, None);
        let removed: DriveUpdate = serde_json::from_str(r#"{"rate_limiter": null}"#).expect("null");
        assert_eq!(removed.rate_limiter, Some(None));
        let set: DriveUpdate = serde_json::from_str(
            r#"{"rate_limiter": {"ops": {"size": 100, "refill_time": 1000}}}"#,
        )
        .expect("set");
        let ops = set.rate_limiter.flatten().and_then(|r| r.ops).expect("ops");
        assert_eq!(
            (ops.size, ops.one_time_burst, ops.refill_time),
            (100, 0, 1000)
        );
        assert!(serde_json::from_str::<DriveUpdate>(r#"{"rate_limit": null}"#).is_err());
        let swap: DriveUpdate =
            serde_json::from_str(r#"{"path_on_host": "/d/b.img"}"#).expect("path");
        assert_eq!(
            swap.path_on_host.as_deref(),
            Some(std::path::Path::new("/d/b.img"))
        );
        assert_eq!(absent.path_on_host, None);
        let e = serde_json::from_str::<DriveUpdate>(r#"{"path_on_host": null}"#)
            .expect_err("a drive must have a file");
        assert!(e.to_string().contains("null is not accepted"), "{e}");
        assert!(serde_json::from_str::<DriveUpdate>(r#"{"path_on_host": 5}"#).is_err());
        let g: GroupUpdate = serde_json::from_str(r#"{"ops": null}"#).expect("group");
        assert_eq!((g.ops, g.bandwidth), (Some(None), None));
    }

    #[test]
    fn checks_name_the_field() {
        let r = RateLimiterConfig {
            bandwidth: None,
            ops: Some(TokenBucketConfig {
                size: 10,
                one_time_burst: 0,
                refill_time: 0,
            }),
        };
        let e = r.check("drives[1].rate_limiter").expect_err("refill 0");
        assert_eq!(e.field, "drives[1].rate_limiter.ops.refill_time");
        assert_eq!(
            e.to_string(),
            "drives[1].rate_limiter.ops.refill_time: must be from 1 to 86400000 ms when size is \
             set, got 0"
        );
        let e = r.check("").expect_err("refill 0");
        assert_eq!(
            e.field, "ops.refill_time",
            "a group's PATCH body names the bucket first"
        );
        let off = RateLimiterConfig {
            bandwidth: Some(TokenBucketConfig {
                size: 0,
                one_time_burst: 0,
                refill_time: 0,
            }),
            ops: None,
        };
        assert!(off.check("x").is_ok(), "size 0 turns the bucket off");
        assert!(!dataplane::rate_limit::RateLimiter::new(off.to_dataplane()).is_active());
    }
}
