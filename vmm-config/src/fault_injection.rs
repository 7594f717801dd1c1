//! A drive's `fault_injection` section: make chosen requests fail with EIO or ENOSPC, hang, or
//! have their submission refused with EAGAIN, as if the backing store or the kernel had failed
//! (QEMU's `blkdebug` idea). For tests and for rehearsing how a guest copes with disk errors; it is
//! off unless the config names it.
//!
//! ```json
//! "fault_injection": {"error": "EIO", "operations": ["write"], "sector": 16384, "sectors": 16384}
//! ```

use dataplane::engine::fault::{FaultAction, FaultOps, FaultPlan};
use serde::{Deserialize, Serialize};

/// What happens to the injected requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum InjectedError {
    /// Input/output error: the guest sees VIRTIO_BLK_S_IOERR.
    EIO,
    /// No space left on device: the guest sees VIRTIO_BLK_S_IOERR.
    ENOSPC,
    /// The submission is refused as if the kernel returned EAGAIN (once per submission round,
    /// `max_errors` rounds per queue, default 100), then the requests go through: the guest
    /// sees them complete late, not fail.
    EAGAIN,
    /// The requests never complete, as on a hung network file system: a reset of the device
    /// then waits for them (and is not acknowledged to the guest) for as long as they hang.
    HANG,
}

/// Refused submission rounds per queue when `EAGAIN` names no `max_errors`.
const DEFAULT_EAGAIN_ROUNDS: u64 = 100;

/// An operation class that can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InjectedOp {
    /// Reads.
    Read,
    /// Writes.
    Write,
    /// Flushes (every flush matches; they have no range).
    Flush,
    /// Discards.
    Discard,
    /// Write-zeroes.
    WriteZeroes,
}

/// Which requests of a drive fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultInjectionConfig {
    /// The error (default `EIO`).
    #[serde(default = "default_error")]
    pub error: InjectedError,
    /// The operations that fail (default: read and write).
    #[serde(default = "default_ops")]
    pub operations: Vec<InjectedOp>,
    /// First 512-byte sector of the failing region (default 0).
    #[serde(default)]
    pub sector: u64,
    /// Sectors in the region (default: to the end of the disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sectors: Option<u64>,
    /// At most this many errors per queue, then the region works again (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_errors: Option<u64>,
}

fn default_error() -> InjectedError {
    InjectedError::EIO
}

fn default_ops() -> Vec<InjectedOp> {
    vec![InjectedOp::Read, InjectedOp::Write]
}

/// A `fault_injection` section that cannot be carried out, named by the field's JSON path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultInjectionError {
    /// `operations` is empty.
    #[error(
        "{at}.operations: must name at least one of read, write, flush, discard, write_zeroes"
    )]
    NoOperations {
        /// The section's JSON path (`drives[0].fault_injection`).
        at: String,
    },
    /// `sectors` is 0.
    #[error("{at}.sectors: must be at least 1 (or left out)")]
    NoSectors {
        /// The section's JSON path.
        at: String,
    },
    /// `sector` is past any byte offset.
    #[error("{at}.sector: {sector} is beyond any disk")]
    SectorTooFar {
        /// The section's JSON path.
        at: String,
        /// The value given.
        sector: u64,
    },
}

impl FaultInjectionError {
    /// The field's name within the section (`operations`, `sectors`, `sector`).
    pub fn field(&self) -> &'static str {
        match self {
            Self::NoOperations { .. } => "operations",
            Self::NoSectors { .. } => "sectors",
            Self::SectorTooFar { .. } => "sector",
        }
    }
}

impl FaultInjectionConfig {
    /// Checks the section found at JSON path `at` (`drives[0].fault_injection`).
    pub fn check(&self, at: &str) -> Result<(), FaultInjectionError> {
        let at = at.to_string();
        if self.operations.is_empty() {
            return Err(FaultInjectionError::NoOperations { at });
        }
        if self.sectors == Some(0) {
            return Err(FaultInjectionError::NoSectors { at });
        }
        if self.sector.checked_mul(512).is_none() {
            return Err(FaultInjectionError::SectorTooFar {
                at,
                sector: self.sector,
            });
        }
        Ok(())
    }

    /// The dataplane's plan.
    pub fn to_plan(&self) -> FaultPlan {
        let ops = self.operations.iter().fold(FaultOps::default(), |acc, op| {
            acc.union(match op {
                InjectedOp::Read => FaultOps::READ,
                InjectedOp::Write => FaultOps::WRITE,
                InjectedOp::Flush => FaultOps::FLUSH,
                InjectedOp::Discard => FaultOps::DISCARD,
                InjectedOp::WriteZeroes => FaultOps::WRITE_ZEROES,
            })
        });
        let start = self.sector.saturating_mul(512);
        let end = self
            .sectors
            .map_or(u64::MAX, |n| start.saturating_add(n.saturating_mul(512)));
        FaultPlan {
            action: match self.error {
                InjectedError::EIO => FaultAction::Fail(libc::EIO),
                InjectedError::ENOSPC => FaultAction::Fail(libc::ENOSPC),
                InjectedError::EAGAIN => FaultAction::Refuse,
                InjectedError::HANG => FaultAction::Hang,
            },
            ops,
            start,
            end,
            max_errors: match self.error {
                InjectedError::EAGAIN => Some(self.max_errors.unwrap_or(DEFAULT_EAGAIN_ROUNDS)),
                _ => self.max_errors,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> FaultInjectionConfig {
        serde_json::from_str(s).expect("valid section")
    }

    #[test]
    fn defaults_fail_reads_and_writes_everywhere_with_eio() {
        let c = parse("{}");
        assert_eq!(c.check("f"), Ok(()));
        let p = c.to_plan();
        assert_eq!(p.action, FaultAction::Fail(libc::EIO));
        assert!(p.ops.contains(FaultOps::READ) && p.ops.contains(FaultOps::WRITE));
        assert!(!p.ops.contains(FaultOps::FLUSH));
        assert_eq!((p.start, p.end, p.max_errors), (0, u64::MAX, None));
    }

    #[test]
    fn region_and_error_map_to_bytes() {
        let c = parse(
            r#"{"error":"ENOSPC","operations":["write","write_zeroes"],"sector":8,"sectors":4,"max_errors":3}"#,
        );
        let p = c.to_plan();
        assert_eq!(p.action, FaultAction::Fail(libc::ENOSPC));
        assert!(p.ops.contains(FaultOps::WRITE_ZEROES) && !p.ops.contains(FaultOps::READ));
        assert_eq!((p.start, p.end, p.max_errors), (4096, 6144, Some(3)));
    }

    #[test]
    fn bad_sections_name_the_field() {
        assert_eq!(
            parse(r#"{"operations":[]}"#)
                .check("f")
                .map_err(|e| e.field()),
            Err("operations")
        );
        assert_eq!(
            parse(r#"{"sectors":0}"#).check("f").map_err(|e| e.field()),
            Err("sectors")
        );
        assert_eq!(
            parse(&format!(r#"{{"sector":{}}}"#, u64::MAX))
                .check("f")
                .map_err(|e| e.field()),
            Err("sector")
        );
        let unknown = serde_json::from_str::<FaultInjectionConfig>(r#"{"errno":"EIO"}"#);
        assert!(unknown.is_err_and(|e| e.to_string().contains("unknown field `errno`")));
        let bad_op = serde_json::from_str::<FaultInjectionConfig>(r#"{"operations":["trim"]}"#);
        assert!(bad_op.is_err_and(|e| e.to_string().contains("unknown variant `trim`")));
    }
}
