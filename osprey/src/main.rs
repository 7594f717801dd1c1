//! The `osprey` binary: parse the command line, validate the config, run the VM, and turn the
//! reason it stopped into the exit status; or, for `osprey api …`, make one API request.

mod cli;

use clap::Parser;
use cli::{Cli, Command};
use vmm::config::{ConfigError, VmConfig};
use vmm::drive::OpenedDrive;

/// Exit status for configuration and command-line errors.
const EXIT_CONFIG: i32 = 2;
/// Exit status when the VM could not be built or run.
const EXIT_VMM: i32 = 1;

/// The config from the file and flags, prepared as start-up needs it
/// ([`vmm::launch::prepare`]: the values checked, the host checked, the drives opened, the
/// defaults filled in; warnings logged).
/// The effective config, its drives' files and its taps, opened.
type Effective = (VmConfig, Vec<OpenedDrive>, Vec<vmm::net::Tap>);

fn effective_config(cli: &Cli) -> Result<Effective, ConfigError> {
    let (config, mut warnings) = cli.vm_config()?;
    let file = cli.config_path().map(|(path, _)| path);
    if !cli.check_config {
        apply_file_logger(cli, &config).map_err(|e| e.in_file(file))?;
    }
    let prepared = vmm::launch::prepare(config).map_err(|e| e.in_file(file))?;
    warnings.extend(prepared.warnings);
    for w in warnings {
        log::warn!("{w}");
    }
    Ok((prepared.config, prepared.drives, prepared.taps))
}

/// The config file's `logger` section, applied as `PUT /logger` is, after the flags' logger: a
/// field it leaves out keeps the flags' value (its level, `--level`).
fn apply_file_logger(cli: &Cli, config: &VmConfig) -> Result<(), ConfigError> {
    let Some(logger) = &config.logger else {
        return Ok(());
    };
    let mut logger = logger.clone();
    logger.level = logger.level.or(Some(cli.log_level.into()));
    logger.show_level |= cli.show_level;
    logger.show_log_origin |= cli.show_log_origin;
    vmm::logger::apply(&logger).map_err(|e| vmm::config::invalid("logger", e.to_string()))
}

/// The flags that print something and exit before anything else (`--version`,
/// `--snapshot-version`, `--describe-snapshot`), as Firecracker's do.
fn print_and_exit(cli: &Cli) {
    if cli.version {
        let identity = vmm::identity::get();
        print!("{}", identity.version_text(env!("CARGO_PKG_VERSION")));
        std::process::exit(0);
    }
    if cli.snapshot_version {
        println!("{}", vmm::snapshot::file::supported_version());
        std::process::exit(0);
    }
    if let Some(path) = &cli.describe_snapshot {
        match vmm::snapshot::file::describe(path) {
            Ok(d) => {
                println!("{d}");
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("osprey: error: --describe-snapshot: {e}");
                std::process::exit(EXIT_VMM);
            }
        }
    }
}

/// `--api-sock` alone: serve the pre-boot API until `InstanceStart`, then run the VM.
fn serve_preboot(cli: &Cli) -> ! {
    let (config, _) = match cli.vm_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("osprey: error: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    let Some(socket) = config.api.as_ref().map(|a| a.socket.clone()) else {
        eprintln!("osprey: error: --api-sock: no socket");
        std::process::exit(EXIT_CONFIG);
    };
    exit_with(vmm::preboot::serve(&socket, config))
}

/// `--restore DIR` (and `--restore-drive`s, `--api-sock`): checks the snapshot in DIR (exit 2
/// when refused), restores and runs it, serving the API on `api_socket` when given.
fn restore(
    dir: &std::path::Path,
    overrides: &[vmm::snapshot::restore::DriveOverride],
    api_socket: Option<&std::path::Path>,
) -> ! {
    let files = vmm::snapshot::restore::SnapshotFiles::in_folder(dir);
    let checked = match vmm::snapshot::restore::load(&files.state, &files.memory, overrides, &[]) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("osprey: error: --restore {}: {e}", dir.display());
            std::process::exit(EXIT_CONFIG);
        }
    };
    let result = vmm::vm::restore(checked, true, None, api_socket).map(|mut vm| {
        vm.set_process_exits_after();
        vm.wait()
    });
    exit_with(result)
}

/// Exits with the status for how the VM stopped, or for why it could not run.
fn exit_with(result: Result<vmm::stop::StopReason, vmm::vm::VmError>) -> ! {
    match result {
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

fn main() {
    vmm::boot_timing::start();
    if let Some(argv0) = std::env::args_os().next() {
        vmm::identity::set(vmm::identity::Identity::of_program(&argv0));
    }
    let cli = Cli::parse();
    print_and_exit(&cli);
    vmm::logger::init(cli.log_level);
    if let Some(Command::Api(args)) = &cli.command {
        std::process::exit(args.run());
    }
    if let Some(Command::VhostUserBlk(args)) = &cli.command {
        std::process::exit(vhost_user_blk::run(args));
    }
    if let Some(logger) = cli.logger() {
        if let Err(e) = vmm::logger::apply(&logger) {
            eprintln!("osprey: error: --{e}");
            std::process::exit(EXIT_CONFIG);
        }
    }
    if let Some(id) = &cli.id {
        vmm::instance::set_id(id);
        log::info!("instance id: {id}");
    }
    if cli.boot_timer {
        vmm::boot_timing::enable_boot_timer();
    }
    if let Some(bytes) = cli.http_api_max_payload_size {
        vmm::api::server::set_default_max_body(bytes);
    }
    if let Some(limit) = cli.mmds_size_limit {
        log::info!("--mmds-size-limit {limit}: accepted; Osprey has no MMDS");
    }
    if let Some(us) = cli.start_time_us {
        log::debug!(
            "jailer start times (µs): wall {us}, CPU {:?}, parent CPU {:?}",
            cli.start_time_cpu_us,
            cli.parent_cpu_time_us
        );
    }
    if cli.waits_for_api() {
        serve_preboot(&cli);
    }
    if let Some(dir) = &cli.restore {
        restore(dir, &cli.restore_drive, cli.api_sock.as_deref());
    }

    let (config, drives, taps) = match effective_config(&cli) {
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
    exit_with(vmm::vm::run(&config, drives, taps))
}
