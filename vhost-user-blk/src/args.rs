//! The `osprey vhost-user-blk` command line.

use std::path::PathBuf;

use vmm::config::IoEngineKind;

/// Most queues a frontend may use by default.
pub const DEFAULT_MAX_QUEUES: u16 = 8;
/// Largest ring a frontend may set up by default (QEMU's vhost-user-blk allows 1024).
pub const DEFAULT_MAX_QUEUE_SIZE: u16 = 1024;

/// `osprey vhost-user-blk --socket SOCK --path FILE`: see `docs/vhost-user.md`.
#[derive(Debug, Clone, clap::Args)]
pub struct VhostUserBlkArgs {
    /// The Unix socket frontends connect to (created; a stale socket there is replaced).
    #[arg(
        long,
        value_name = "SOCK",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub socket: Option<PathBuf>,

    /// The drive's backing file (a regular file or a block device).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub path: Option<PathBuf>,

    /// A JSON config with the VMM's sections: `drives` (each with its `socket`), `iothreads`,
    /// `rate-limit-groups` (docs/vhost-user.md). Instead of --socket/--path.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Serve the drive read-only (VIRTIO_BLK_F_RO).
    #[arg(long)]
    pub readonly: bool,

    /// Open the file with O_DIRECT (bypass the host page cache).
    #[arg(long)]
    pub direct: bool,

    /// The I/O engine: Auto (default), IoUring, LinuxAio, Sync or Null.
    #[arg(long, value_name = "ENGINE", default_value = "Auto", value_parser = parse_engine)]
    pub io_engine: IoEngineKind,

    /// Most queues a frontend may use (VIRTIO_BLK_F_MQ, GET_QUEUE_NUM).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_QUEUES,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub num_queues: u16,

    /// Largest ring size a frontend may set (a power of two).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_QUEUE_SIZE, value_parser = parse_queue_size)]
    pub queue_size: u16,

    /// Serve the REST API (iothreads, drives, rate-limit groups, metrics) on this Unix socket.
    #[arg(long, value_name = "SOCKET")]
    pub api_sock: Option<PathBuf>,

    /// The sandbox: `on` (default: Landlock, privileges dropped, seccomp per thread), `off` or
    /// `strict` (docs/security.md). Overrides the config's `sandbox.mode`.
    #[arg(long, value_name = "MODE", value_enum)]
    pub sandbox: Option<vmm::sandbox::SandboxMode>,

    /// Run as this user once set up (with --gid). Overrides `sandbox.uid`.
    #[arg(long, value_name = "UID", requires = "gid")]
    pub uid: Option<u32>,

    /// Run as this group once set up (with --uid). Overrides `sandbox.gid`.
    #[arg(long, value_name = "GID", requires = "uid")]
    pub gid: Option<u32>,

    /// The drive's id (its GET_ID serial and its name in the log).
    #[arg(long, value_name = "ID", default_value = "vhost0")]
    pub drive_id: String,
}

fn parse_engine(s: &str) -> Result<IoEngineKind, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown engine {s:?} (Auto, IoUring, LinuxAio, Sync, Null)"))
}

fn parse_queue_size(s: &str) -> Result<u16, String> {
    let n: u16 = s.parse().map_err(|e| format!("{e}"))?;
    if n == 0 || !n.is_power_of_two() || n > 32768 {
        return Err(format!("{n} is not a power of two up to 32768"));
    }
    Ok(n)
}

/// The `osprey vhost-user-blk` subcommand alone, for the tests (the `osprey` binary's `Cli`
/// lives above this crate).
#[cfg(test)]
pub(crate) mod test_cli {
    /// `osprey` with this subcommand only.
    #[derive(Debug, clap::Parser)]
    #[command(name = "osprey")]
    pub struct Cli {
        /// The subcommand.
        #[command(subcommand)]
        pub command: Option<Command>,
    }

    /// The subcommands this crate owns.
    #[derive(Debug, clap::Subcommand)]
    pub enum Command {
        /// `osprey vhost-user-blk`.
        VhostUserBlk(super::VhostUserBlkArgs),
    }
}

#[cfg(test)]
mod tests {
    use super::test_cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn the_smallest_invocation_takes_every_default() {
        let cli = Cli::try_parse_from([
            "osprey",
            "vhost-user-blk",
            "--socket",
            "/tmp/s",
            "--path",
            "/tmp/f",
        ])
        .expect("parse");
        let Some(Command::VhostUserBlk(a)) = cli.command else {
            panic!("no vhost-user-blk subcommand");
        };
        assert_eq!(a.io_engine, vmm::config::IoEngineKind::Auto);
        assert_eq!((a.num_queues, a.queue_size), (8, 1024));
        assert!(!a.readonly && !a.direct);
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            &["--io-engine", "Fast"][..],
            &["--queue-size", "100"],
            &["--num-queues", "0"],
        ] {
            let mut argv = vec!["osprey", "vhost-user-blk", "--socket", "s", "--path", "f"];
            argv.extend_from_slice(bad);
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?} accepted");
        }
        assert!(
            Cli::try_parse_from(["osprey", "vhost-user-blk", "--path", "f"]).is_err(),
            "--socket is required"
        );
        assert!(
            Cli::try_parse_from(["osprey", "vhost-user-blk", "--config", "c", "--path", "f"])
                .is_err(),
            "--config or --socket/--path"
        );
        assert!(Cli::try_parse_from(["osprey", "vhost-user-blk", "--config", "c"]).is_ok());
    }
}
