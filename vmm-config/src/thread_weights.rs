//! `machine.thread_weights`: how the scheduler weighs the VM's own threads against each other
//! (see [`dataplane::thread_weight`] for the mechanism). `Dynamic`, the default, runs the vCPUs
//! one nice step light and lets each iothread be as light while it polls and at the process's
//! weight while it sleeps between events; `Equal` leaves every thread at the process's nice.
//! Threads only ever get lighter than the process, so a VM takes no CPU from its neighbours.

use dataplane::thread_weight::{
    allow_return, current_nice, has_cap_sys_nice, CAP_SYS_NICE, LIGHT_STEP,
};
use serde::{Deserialize, Serialize};

use crate::sandbox::{SandboxConfig, SandboxMode};

/// `machine.thread_weights`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub enum ThreadWeights {
    /// vCPUs one nice step (+5) light; an iothread as light while it polls, at the process's
    /// nice while it sleeps between events (a kick then gets the core before the vCPU).
    #[default]
    Dynamic,
    /// Every thread at the process's nice.
    Equal,
}

/// Whether dynamic weights are in force, and what lets an iothread come back to its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InForce {
    /// Every thread at the process's nice.
    Equal,
    /// Dynamic: `RLIMIT_NICE` lets threads come back (no privilege kept).
    ByLimit,
    /// Dynamic: the iothreads keep `CAP_SYS_NICE` through the sandbox (the limit cannot be
    /// raised without `CAP_SYS_RESOURCE`); their seccomp filter allows `setpriority` only on
    /// themselves, to nice 0-19.
    ByCapability,
}

impl InForce {
    /// Whether the weights switch.
    pub fn dynamic(self) -> bool {
        self != InForce::Equal
    }

    /// The capabilities (a bit mask) the iothreads keep in the sandbox.
    pub fn iothread_capabilities(self) -> u64 {
        match self {
            InForce::ByCapability => 1 << CAP_SYS_NICE,
            _ => 0,
        }
    }
}

/// Prepares the process for `weights` before any VM thread starts, while it still may raise
/// `RLIMIT_NICE` (the sandbox drops that right): an iothread that went light must be allowed
/// back to the process's nice. Where the limit cannot be raised but the process holds
/// `CAP_SYS_NICE`, the iothreads keep that capability, but only where their seccomp filter
/// bounds it and they stay this user (`sandbox`: no `uid`; seccomp on; base nice 0).
/// Otherwise logs why and leaves the weights equal.
pub fn prepare(weights: ThreadWeights, sandbox: &SandboxConfig) -> InForce {
    if weights == ThreadWeights::Equal {
        return InForce::Equal;
    }
    let base = match current_nice() {
        Ok(n) => n,
        Err(e) => {
            log::info!("thread weights: cannot read the nice value ({e}); weights stay equal");
            return InForce::Equal;
        }
    };
    // Negative bases are left alone: the iothreads' seccomp filter allows nice 0-19 only.
    if !(0..=19 - LIGHT_STEP).contains(&base) {
        log::info!(
            "thread weights: Osprey runs at nice {base}, outside 0-{}; weights stay equal",
            19 - LIGHT_STEP
        );
        return InForce::Equal;
    }
    let in_force = if allow_return(base).unwrap_or(false) {
        InForce::ByLimit
    } else if has_cap_sys_nice()
        && capability_may_stay(
            base,
            sandbox,
            crate::seccomp::mode() == crate::seccomp::SeccompMode::On,
        )
    {
        InForce::ByCapability
    } else {
        log::info!(
            "thread weights: RLIMIT_NICE does not let a thread come back to nice {base} and \
             cannot be raised (needs CAP_SYS_RESOURCE, or `ulimit -e 20` before the start; or \
             CAP_SYS_NICE with seccomp on, no sandbox.uid and nice 0); weights stay equal"
        );
        return InForce::Equal;
    };
    log::info!(
        "thread weights: Dynamic (vCPUs at nice {light}, iothreads at {light} while polling and \
         {base} while sleeping; {how})",
        light = base + LIGHT_STEP,
        how = match in_force {
            InForce::ByLimit => "RLIMIT_NICE lets them back",
            _ if sandbox.mode == SandboxMode::Off => "CAP_SYS_NICE: --sandbox off keeps it",
            _ => "the iothreads keep CAP_SYS_NICE, for their own nice only",
        }
    );
    in_force
}

/// Whether iothreads may keep `CAP_SYS_NICE` for dynamic weights (when the process holds it):
/// with the sandbox off nothing is dropped anyway; with it on, only where their seccomp filter
/// bounds the capability to their own nice 0-19 (`seccomp_on`), they stay this user (a uid
/// change clears capabilities) and the base is 0 (so 0-19 is exactly base to light).
fn capability_may_stay(base: i32, sandbox: &SandboxConfig, seccomp_on: bool) -> bool {
    sandbox.mode == SandboxMode::Off || (seccomp_on && sandbox.ids().is_none() && base == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_are_never_in_force() {
        let sandbox = SandboxConfig::default();
        assert_eq!(prepare(ThreadWeights::Equal, &sandbox), InForce::Equal);
        assert_eq!(InForce::Equal.iothread_capabilities(), 0);
        assert!(!InForce::Equal.dynamic());
    }

    #[test]
    fn the_capability_stays_only_where_seccomp_bounds_it() {
        let on = SandboxConfig::default();
        assert!(capability_may_stay(0, &on, true));
        assert!(!capability_may_stay(0, &on, false), "--seccomp off");
        assert!(
            !capability_may_stay(3, &on, true),
            "nice 0-19 would reach below base 3"
        );
        let other_user = SandboxConfig {
            uid: Some(65534),
            gid: Some(65534),
            ..SandboxConfig::default()
        };
        assert!(!capability_may_stay(0, &other_user, true));
        let off = SandboxConfig {
            mode: SandboxMode::Off,
            ..SandboxConfig::default()
        };
        assert!(
            capability_may_stay(7, &off, false),
            "the sandbox off keeps everything"
        );
    }

    #[test]
    fn only_the_capability_route_keeps_a_capability() {
        assert_eq!(InForce::ByLimit.iothread_capabilities(), 0);
        assert_eq!(InForce::ByCapability.iothread_capabilities(), 1 << 23);
        assert!(InForce::ByLimit.dynamic() && InForce::ByCapability.dynamic());
    }

    #[test]
    fn dynamic_is_the_default_and_parses_by_name() {
        assert_eq!(ThreadWeights::default(), ThreadWeights::Dynamic);
        let w: ThreadWeights = serde_json::from_str("\"Equal\"").expect("parse");
        assert_eq!(w, ThreadWeights::Equal);
        assert!(serde_json::from_str::<ThreadWeights>("\"Heavy\"").is_err());
    }
}
