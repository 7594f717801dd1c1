//! From a config to what [`crate::vm::start`] takes, the same for a config given at launch and
//! one built over the API before `InstanceStart`: Firecracker's boot rules applied, the values
//! checked, the host checked and the drives opened (the preflight), the defaults filled in.

use crate::config::{ConfigError, ConfigWarning, VmConfig};
use crate::drive::OpenedDrive;

/// A config ready to start.
#[derive(Debug)]
pub struct Prepared {
    /// The effective config (defaults filled in, root drive first).
    pub config: VmConfig,
    /// Each drive's backing file, opened, in `config.drives` order.
    pub drives: Vec<OpenedDrive>,
    /// Each network interface's tap, opened, in `config.network_interfaces` order.
    pub taps: Vec<devices::net::Tap>,
    /// What the user should be told (not errors).
    pub warnings: Vec<ConfigWarning>,
}

/// Applies the boot rules, checks `config` and runs the preflight.
pub fn prepare(mut config: VmConfig) -> Result<Prepared, ConfigError> {
    let mut warnings = config.apply_boot_rules();
    let preflight = crate::preflight::check(&config, crate::host::host_mem_mib())?;
    warnings.extend(preflight.warnings);
    config.fill_defaults();
    Ok(Prepared {
        config,
        drives: preflight.drives,
        taps: preflight.taps,
        warnings,
    })
}
