//! The `osprey` binary: parse the command line, validate the config, run the VM, and turn the
//! reason it stopped into the exit status; or, for `osprey api …`, make one API request.

use clap::Parser;
use vmm::cli::{Cli, Command};
use vmm::config::{ConfigError, VmConfig};
use vmm::drive::OpenedDrive;

/// Exit status for configuration and command-line errors.
const EXIT_CONFIG: i32 = 2;
/// Exit status when the VM could not be built or run.
const EXIT_VMM: i32 = 1;

/// The config from the file and flags with the defaults start-up chooses filled in, its values
/// checked and start-up's preflight run (the host checked, the drives opened; warnings logged).
fn effective_config(cli: &Cli) -> Result<(VmConfig, Vec<OpenedDrive>), ConfigError> {
    let (mut config, mut warnings) = cli.vm_config()?;
    let preflight = vmm::preflight::check(&config, vmm::host::host_mem_mib())
        .map_err(|e| e.in_file(cli.config.as_deref()))?;
    warnings.extend(preflight.warnings);
    for w in warnings {
        log::warn!("{w}");
    }
    config.fill_defaults();
    Ok((config, preflight.drives))
}

fn main() {
    vmm::boot_timing::start();
    let cli = Cli::parse();
    env_logger::Builder::new()
        .filter_level(cli.log_level)
        .parse_env("RUST_LOG")
        .format_target(false)
        .format_timestamp_millis()
        .init();
    if let Some(Command::Api(args)) = &cli.command {
        std::process::exit(args.run());
    }
    if let Some(id) = &cli.id {
        log::info!("instance id: {id}");
    }

    let (config, drives) = match effective_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("osprey: error: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    vmm::boot_timing::mark(vmm::boot_timing::Step::ConfigParsed);
    if cli.check_config {
        match serde_json::to_string_pretty(&config) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("osprey: error: {e}");
                std::process::exit(EXIT_VMM);
            }
        }
        return;
    }
    match vmm::vm::run(&config, drives) {
        Ok(stop) => {
            if let vmm::stop::StopReason::Failed { .. } = stop {
                eprintln!("osprey: error: {}", stop.describe());
            }
            std::process::exit(stop.exit_status())
        }
        Err(e) => {
            eprintln!("osprey: error: {e}");
            // A limit of this host is a config error: the same config may run elsewhere.
            let status = match e {
                vmm::vm::VmError::Limit(_) => EXIT_CONFIG,
                _ => EXIT_VMM,
            };
            std::process::exit(status);
        }
    }
}
