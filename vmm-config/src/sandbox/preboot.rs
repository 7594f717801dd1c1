//! The sandbox before `InstanceStart` (`osprey --api-sock S` with no config), so the pre-boot
//! process is not the unconfined root it was: the API thread, which reads every client byte,
//! enters its run-time sandbox as soon as its socket is bound (Landlock with no rule: it opens
//! nothing; every capability dropped and the uid/gid taken; its run-time seccomp list) and is
//! not touched again at the start ([`api_hook`]); the main thread, which must still build the
//! VM, takes a seccomp deny-list of what no start needs ([`confine_main`],
//! `crate::seccomp::preboot`). The paths the pre-boot API takes are checked against the API
//! socket's folder and the operator's ([`crate::allowed_folders`], in `crate::preboot`).
//! `--sandbox off` does none of it; `--seccomp off` leaves the filters out. docs/security.md.

use super::fs_rules::FsSandbox;
use super::{credentials, SandboxConfig, SandboxError, SandboxMode, ThreadHook};
use crate::seccomp::{SeccompMode, ThreadFilter, ThreadKind};

/// The hook the pre-boot API thread runs once its socket is bound, or `None` with the sandbox
/// off. Built on the main thread (the ruleset and the filter), run on the API thread.
pub fn api_hook(config: &SandboxConfig) -> Result<Option<ThreadHook>, SandboxError> {
    if config.mode == SandboxMode::Off {
        return Ok(None);
    }
    let strict = config.mode == SandboxMode::Strict;
    let seccomp = match crate::seccomp::mode() {
        SeccompMode::On => Some(ThreadFilter::build(ThreadKind::Api)?),
        SeccompMode::Off if strict => {
            return Err(SandboxError::NotStrict(
                "seccomp is off (--seccomp off); strict needs every part".into(),
            ))
        }
        SeccompMode::Off => None,
    };
    let landlock = FsSandbox::build(Vec::new(), strict)?;
    let ids = config.ids();
    Ok(Some(Box::new(move || {
        let status = landlock.restrict_thread()?;
        if strict && status.ruleset != landlock::RulesetStatus::FullyEnforced {
            return Err(SandboxError::NotStrict(super::fs_rules::describe_status(
                &status,
            )));
        }
        credentials::drop_privileges(ids, 0)?;
        if let Some(f) = &seccomp {
            f.install()?;
        }
        #[cfg(any(debug_assertions, feature = "test-hooks"))]
        super::probe::run(ThreadKind::Api);
        Ok(())
    })))
}

/// Puts the main thread under its pre-boot deny-list (nothing with the sandbox or seccomp
/// off). Call once the API socket is bound: the list has no `socket`.
pub fn confine_main(config: &SandboxConfig) -> Result<(), SandboxError> {
    if config.mode == SandboxMode::Off || crate::seccomp::mode() == SeccompMode::Off {
        return Ok(());
    }
    crate::seccomp::preboot::MainFilter::build()?.install()?;
    #[cfg(any(debug_assertions, feature = "test-hooks"))]
    super::probe::run_preboot_main();
    Ok(())
}
