//! The `osprey` command line: a config file, or a kernel given directly, plus overrides.

use std::path::PathBuf;

use clap::Parser;

use crate::config::{BootSourceConfig, ConfigError, VmConfig};

/// Osprey: a small KVM virtual machine monitor with an adaptive-polling block dataplane.
///
/// Boot what a JSON file describes:      osprey --config vm.json
/// Or boot a kernel without a file:      osprey --kernel vmlinux --cmdline "console=ttyS0" --cpus 2 --memory 256
///
/// The guest's serial console (COM1) is on stdin/stdout; Osprey's own log goes to stderr.
/// Exit status: 0 when the guest resets, powers off or triple-faults, or on SIGINT/SIGTERM;
/// the byte the guest writes to I/O port 0xf4 (the debug-exit port); 1 when a vCPU fails (the
/// message names the exit, the suberror and the guest RIP); 2 for a bad command line or config.
#[derive(Debug, Parser)]
#[command(name = "osprey", version, verbatim_doc_comment)]
pub struct Cli {
    /// VM config file (JSON): sections machine-config, boot-source, drives, iothreads, api.
    /// See docs/config.md and examples/.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Kernel to boot: an ELF with a PVH note (entered in 32-bit PVH mode), an ELF vmlinux
    /// (64-bit entry) or a bzImage. Overrides boot-source.kernel_image_path.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,

    /// Initramfs to load. Overrides boot-source.initrd_path.
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,

    /// Guest command line. Overrides boot-source.boot_args.
    #[arg(long, value_name = "STRING", allow_hyphen_values = true)]
    pub cmdline: Option<String>,

    /// Number of vCPUs (1-64). Overrides machine-config.vcpu_count.
    #[arg(long, value_name = "N")]
    pub cpus: Option<u8>,

    /// Guest memory in MiB (at least 16). Overrides machine-config.mem_size_mib.
    #[arg(long, value_name = "MIB")]
    pub memory: Option<u64>,

    /// Check the config (fields and files) and print it with defaults filled in, without booting.
    #[arg(long)]
    pub check_config: bool,

    /// Log level for Osprey's own messages on stderr: error, warn, info, debug, trace.
    /// RUST_LOG, when set, takes precedence.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log_level: log::LevelFilter,
}

impl Cli {
    /// The VM config: the file (if any) with command-line overrides applied. Not yet validated.
    pub fn vm_config(&self) -> Result<VmConfig, ConfigError> {
        let mut config = match &self.config {
            Some(path) => VmConfig::from_file(path)?,
            None => {
                let kernel = self.kernel.clone().ok_or_else(|| ConfigError::Invalid {
                    field: "--config".into(),
                    reason: "give a config file with --config FILE, or a kernel with --kernel PATH"
                        .into(),
                })?;
                VmConfig {
                    boot: BootSourceConfig {
                        kernel_image_path: kernel,
                        ..Default::default()
                    },
                    ..Default::default()
                }
            }
        };
        if let Some(k) = &self.kernel {
            config.boot.kernel_image_path = k.clone();
        }
        if let Some(i) = &self.initrd {
            config.boot.initrd_path = Some(i.clone());
        }
        if let Some(c) = &self.cmdline {
            config.boot.boot_args = c.clone();
        }
        if let Some(n) = self.cpus {
            config.machine.vcpu_count = n;
        }
        if let Some(m) = self.memory {
            config.machine.mem_size_mib = m;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_and_build_a_config_without_a_file() {
        let cli = Cli::parse_from([
            "osprey",
            "--kernel",
            "/k",
            "--cmdline",
            "-x y",
            "--cpus",
            "2",
            "--memory",
            "64",
        ]);
        let c = cli.vm_config().expect("config");
        assert_eq!(c.boot.kernel_image_path, PathBuf::from("/k"));
        assert_eq!(c.boot.boot_args, "-x y");
        assert_eq!((c.machine.vcpu_count, c.machine.mem_size_mib), (2, 64));
    }

    #[test]
    fn neither_config_nor_kernel_is_an_error() {
        let cli = Cli::parse_from(["osprey"]);
        let e = cli.vm_config().expect_err("must fail");
        assert!(
            e.to_string().starts_with("--config: give a config file"),
            "{e}"
        );
    }
}
