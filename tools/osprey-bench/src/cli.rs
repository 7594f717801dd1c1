//! The command line: the matrix as comma lists, the store, timing, outputs and the `--quick`
//! preset, resolved into [`Settings`] with the defaults filled in.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::Parser;

use crate::matrix::{parse_bs, Engine, MatrixSpec, PollSetting, Rw};
use crate::store::{is_root, StoreKind};
use crate::units::parse_size;

/// The most Osprey binaries one run compares (`--osprey A,B,…`).
pub const MAX_BUILDS: usize = 8;

/// Osprey's workload matrix runner: boots Osprey's test guest once per run of every point of the
/// matrix, runs host fio on the same store for reference, and writes results.csv, results.md and
/// SVG plots (docs/benchmarks.md).
#[derive(Debug, Clone, Parser)]
#[command(name = "osprey-bench", version)]
pub struct Cli {
    /// Access patterns: randread, randwrite, read, write.
    #[arg(long, value_delimiter = ',', ignore_case = true)]
    pub rw: Vec<Rw>,
    /// Block sizes (512 B–1 MiB, multiples of 512): 4k,128k.
    #[arg(long, value_delimiter = ',', value_parser = parse_bs)]
    pub bs: Vec<u64>,
    /// Queue depths per queue (1–256).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=256))]
    pub qd: Vec<u32>,
    /// Virtqueues the guest drives (1–8); also fio's numjobs.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=8))]
    pub queues: Vec<u32>,
    /// Osprey I/O engines: Auto (Osprey's default), IoUring, LinuxAio, Sync, Null.
    #[arg(long, value_delimiter = ',', ignore_case = true)]
    pub engine: Vec<Engine>,
    /// Polling configs: off, classic, classic:<window> (e.g. classic:200us), weighted:<W>, adaptive.
    #[arg(long, value_delimiter = ',')]
    pub poll: Vec<PollSetting>,
    /// The iothread's max_batch values (0–1024; 0 = Osprey's default 32).
    #[arg(long = "max-batch", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub max_batch: Vec<u32>,
    /// Guest completion mode: 0 polls the used rings, 1 takes MSI-X interrupts.
    #[arg(long, value_delimiter = ',',
          value_parser = clap::builder::PossibleValuesParser::new(["0", "1"]).map(|s| s == "1"))]
    pub irq: Vec<bool>,
    /// A busy host: CPU-bound processes (0–64, busy loops stopped when the run ends) beside the VM
    /// during each run of the point, e.g. `--hog 0,1` for idle and busy side by side.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(0..=64))]
    pub hog: Vec<u32>,
    /// Where the `--hog` busy loops run: `own`, each in a session of its own, so another
    /// scheduling group (autogroup), as another tenant's process is; `shared`, in the runner's
    /// session, the group Osprey runs in, so the loop competes with Osprey's threads task
    /// against task.
    #[arg(long, value_enum, default_value_t = HogSession::Own)]
    pub hog_session: HogSession,
    /// Backing store [default: loop as root, else file].
    #[arg(long, value_enum)]
    pub store: Option<StoreKind>,
    /// Directory for `--store file|buffered|buffered-cold` (relative to the repository root).
    #[arg(long, default_value = "target")]
    pub store_dir: PathBuf,
    /// Store size (the guest uses at most 1 GiB of it).
    #[arg(long, default_value = "1g", value_parser = parse_size)]
    pub store_size: u64,
    /// Seconds per recorded run (and per fio run) [default: 2; --quick 1].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Recorded runs per point; the report shows the median and the min–max spread
    /// [default: 3; --quick 1].
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Seconds of an unrecorded warm-up run per point, after the sizing probe; 0 for none
    /// [default: 0.5; --quick 0].
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Output directory [default: target/bench/<UTC timestamp>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Osprey binary [default: target/release/osprey, built with cargo if missing]. Several,
    /// comma-separated, compare builds side by side: each is a dimension of the matrix (`build`
    /// 1, 2, … in this order, a column of results.csv), and its runs are interleaved round by
    /// round with the other points of the same workload, so that host drift falls on all builds
    /// alike (`scripts/build-ab.py` prints their ratios).
    #[arg(long, value_delimiter = ',', value_name = "PATH")]
    pub osprey: Vec<PathBuf>,
    /// Also append the VM's metrics every MS milliseconds of each run, for a timeline of it
    /// (`scripts/run-timeline.py DIR/metrics/point-NNN-runK.jsonl`) [default: once, as the VM
    /// stops]. At least 100 ms (Osprey's own floor); costs the VMM a JSON line per interval.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub metrics_interval: Option<u64>,
    /// Test guest ELF [default: guest-images/build/test-guest.elf, built with make if missing].
    #[arg(long, value_name = "PATH")]
    pub test_guest_elf: Option<PathBuf>,
    /// A small preset (4k randread QD1/QD32, 1 queue, Auto, polling off/adaptive, 1 s per
    /// point, no repeats); explicit options override it.
    #[arg(long)]
    pub quick: bool,
    /// Skip host fio (the native columns stay empty).
    #[arg(long)]
    pub no_native: bool,
    /// Print the matrix and exit.
    #[arg(long)]
    pub dry_run: bool,
}

/// Which scheduling group the `--hog` busy loops join (see [`Cli::hog_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HogSession {
    /// A session of their own (`setsid`): with autogroup scheduling, a group of their own.
    Own,
    /// The runner's session, shared with Osprey.
    Shared,
}

/// The command line with every default resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub spec: MatrixSpec,
    pub store: StoreKind,
    pub seconds: f64,
    pub repeats: u32,
    pub warmup: f64,
    /// The command line as given (paths, flags).
    pub cli: Cli,
}

fn or<T: Clone>(given: &[T], default: &[T]) -> Vec<T> {
    if given.is_empty() { default } else { given }.to_vec()
}

impl Cli {
    /// Fills in the defaults (the `--quick` preset's when asked for).
    pub fn settings(self) -> Result<Settings, String> {
        let q = self.quick;
        // Osprey's defaults (Auto, Adaptive) are always measured, beside polling off and
        // QEMU's two policies (the quick preset: polling off and Adaptive only).
        let polls: &[PollSetting] = if q {
            &[PollSetting::Off, PollSetting::Adaptive]
        } else {
            &[
                PollSetting::Off,
                PollSetting::Classic(None),
                PollSetting::Weighted(3),
                PollSetting::Adaptive,
            ]
        };
        let spec = MatrixSpec {
            rw: or(
                &self.rw,
                &[Rw::RandRead, Rw::RandWrite][..if q { 1 } else { 2 }],
            ),
            bs: or(&self.bs, &[4096]),
            qd: or(&self.qd, if q { &[1, 32] } else { &[1, 8, 32] }),
            queues: or(&self.queues, &[1]),
            engine: or(&self.engine, &[Engine::Auto]),
            poll: or(&self.poll, polls),
            max_batch: or(&self.max_batch, &[32]),
            irq: or(&self.irq, &[false]),
            hog: or(&self.hog, &[0]),
            build: (1..=self.osprey.len().max(1))
                .map(|b| u8::try_from(b).unwrap_or(u8::MAX))
                .collect(),
        };
        if self.osprey.len() > MAX_BUILDS {
            return Err(format!(
                "--osprey names {} binaries; at most {MAX_BUILDS} can be compared",
                self.osprey.len()
            ));
        }
        let seconds = self.seconds.unwrap_or(if q { 1.0 } else { 2.0 });
        if !(seconds > 0.0 && seconds <= 3600.0) {
            return Err(format!("--seconds {seconds} must be in (0, 3600]"));
        }
        let warmup = self.warmup.unwrap_or(if q { 0.0 } else { 0.5 });
        if !(0.0..=3600.0).contains(&warmup) {
            return Err(format!("--warmup {warmup} must be in [0, 3600]"));
        }
        let repeats = self.repeats.unwrap_or(if q { 1 } else { 3 });
        if repeats == 0 {
            return Err("--repeats must be at least 1".into());
        }
        if self.store_size < 1 << 20 {
            return Err("--store-size must be at least 1m".into());
        }
        let default = if is_root() {
            StoreKind::Loop
        } else {
            StoreKind::File
        };
        let store = self.store.unwrap_or(default);
        Ok(Settings {
            spec,
            store,
            seconds,
            repeats,
            warmup,
            cli: self,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Result<Settings, String> {
        let argv = std::iter::once("osprey-bench").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .settings()
    }

    #[test]
    fn comma_lists_expand_into_the_matrix() {
        let s = settings(&[
            "--rw=randread,RandWrite",
            "--bs=4k,128k",
            "--qd=1,8,32",
            "--queues=1,4",
            "--engine=IoUring,libaio",
            "--poll=off,classic,weighted:3",
            "--max-batch=32,1,128",
            "--irq=0,1",
        ])
        .expect("settings");
        assert_eq!(s.spec.bs, vec![4096, 131072]);
        assert_eq!(s.spec.engine, vec![Engine::IoUring, Engine::LinuxAio]);
        assert_eq!(s.spec.irq, vec![false, true]);
        let m = s.spec.expand();
        // 128k·32·4 = 16 MiB is the only combination over the pool.
        assert_eq!(m.skipped.len(), 2 * 2 * 3 * 3 * 2);
        assert_eq!(
            m.points.len() + m.skipped.len(),
            2 * 2 * 3 * 2 * 2 * 3 * 3 * 2
        );
        assert!(m
            .skipped
            .iter()
            .all(|s| s.point.bs == 131072 && s.point.qd == 32 && s.point.queues == 4));
    }

    #[test]
    fn quick_is_small_and_overridable() {
        let s = settings(&["--quick"]).expect("settings");
        assert_eq!(s.spec.expand().points.len(), 4);
        assert_eq!((s.seconds, s.repeats, s.warmup), (1.0, 1, 0.0));
        let s = settings(&["--quick", "--engine", "Null", "--seconds", "0.5"]).expect("settings");
        assert_eq!(s.spec.engine, vec![Engine::Null]);
        assert_eq!(s.seconds, 0.5);
        let full = settings(&[]).expect("settings");
        assert_eq!(full.spec.expand().points.len(), 2 * 3 * 4);
        assert_eq!((full.repeats, full.warmup), (3, 0.5));
    }

    #[test]
    fn the_defaults_measure_what_a_user_who_names_nothing_gets() {
        for args in [&[][..], &["--quick"]] {
            let s = settings(args).expect("settings");
            assert_eq!(s.spec.engine, vec![Engine::Auto], "{args:?}");
            assert!(s.spec.poll.contains(&PollSetting::Adaptive), "{args:?}");
            assert!(s.spec.poll.contains(&PollSetting::Off), "{args:?}");
        }
    }

    #[test]
    fn help_begins_with_what_the_runner_does() {
        use clap::CommandFactory;
        let about = Cli::command().get_about().map(ToString::to_string);
        let about = about.unwrap_or_default();
        assert!(
            about.starts_with("Osprey's workload matrix runner"),
            "{about}"
        );
    }

    #[test]
    fn several_binaries_are_a_dimension_whose_runs_interleave_with_the_workload() {
        let one = settings(&["--qd=1,32", "--rw=randread", "--poll=off"]).expect("settings");
        assert_eq!(one.spec.build, vec![1]);
        let args = [
            "--qd=1,32",
            "--rw=randread",
            "--poll=off",
            "--osprey=/a/o,/b/o",
        ];
        let two = settings(&args).expect("settings");
        assert_eq!(two.spec.build, vec![1, 2]);
        let points = two.spec.expand().points;
        assert_eq!(points.len(), 4);
        // Both builds of a workload are next to each other, so they run round by round.
        assert_eq!(
            points.iter().map(|p| (p.qd, p.build)).collect::<Vec<_>>(),
            vec![(1, 1), (1, 2), (32, 1), (32, 2)]
        );
        assert_eq!(
            points[1].label(),
            "randread 4k qd1 q1 Auto poll=off mb=32 build=2"
        );
        assert_eq!(points[0].label(), "randread 4k qd1 q1 Auto poll=off mb=32");
        let nine = ["/o"; MAX_BUILDS + 1].join(",");
        let Err(err) = settings(&["--osprey", &nine]) else {
            panic!("nine binaries must be refused");
        };
        assert!(err.contains("--osprey names 9 binaries"), "{err}");
    }

    #[test]
    fn bad_values_are_refused() {
        for args in [
            &["--qd", "0"][..],
            &["--qd", "257"],
            &["--bs", "1000"],
            &["--engine", "spdk"],
            &["--poll", "sometimes"],
            &["--queues", "9"],
            &["--max-batch", "1025"],
            &["--irq", "2"],
            &["--hog", "65"],
            &["--metrics-interval", "50"],
            &["--repeats", "0"],
            &["--seconds", "0"],
            &["--store-size", "4k"],
            &["--guest", "linux"],
        ] {
            assert!(settings(args).is_err(), "{args:?}");
        }
    }
}
