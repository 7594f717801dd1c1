//! Running Osprey: the VM config of one run of a point (the test guest with its `mode=blk`
//! command line, 1 vCPU, 256 MiB, one virtio-blk drive on the store served by iothread `io0`),
//! spawning the binary with a deadline, keeping its console and log, and the start-up probe that
//! reads the vCPU TSC frequency and KVM flavour from Osprey's log.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

use crate::matrix::Point;
use crate::sample::RunSample;

/// Runs `osprey ARGS` to completion or `deadline` (then kills it), its console (stdout) and log
/// (stderr) going to `<files>.console` and `<files>.log`; returns them read back and the exit
/// status (None: killed at the deadline).
pub fn run_osprey(
    osprey: &Path,
    args: &[&OsStr],
    deadline: Duration,
    files: &Path,
) -> anyhow::Result<(String, String, Option<ExitStatus>)> {
    let [console, log] = ["console", "log"].map(|ext| files.with_extension(ext));
    let create = |p: &Path| {
        create_parent(p)?;
        File::create(p).with_context(|| format!("Cannot create {}", p.display()))
    };
    let mut child = Command::new(osprey)
        .args(args)
        .stdin(Stdio::null())
        .stdout(create(&console)?)
        .stderr(create(&log)?)
        .spawn()
        .with_context(|| format!("Cannot run {}", osprey.display()))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() >= deadline {
            // An already-exited child makes kill fail; either way wait reaps it.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ok((read(&console), read(&log), status))
}

/// A console's last ≤ 6 non-empty lines as `a | b | c` (the last 600 characters), or `(empty)`.
pub fn console_tail(console: &str) -> String {
    let lines: Vec<&str> = console
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let text = lines[lines.len().saturating_sub(6)..].join(" | ");
    match text.chars().count() {
        0 => "(empty)".to_string(),
        1..=600 => text,
        n => format!("…{}", text.chars().skip(n - 600).collect::<String>()),
    }
}

fn create_parent(path: &Path) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("Cannot create {}", dir.display()))
}

/// A run's files: `<out>/{configs,logs,metrics}/<name>.{json,*,jsonl}` (`*`: console and log).
pub fn run_files(out: &Path, name: &str) -> [PathBuf; 3] {
    [("configs", "json"), ("logs", "*"), ("metrics", "jsonl")]
        .map(|(dir, ext)| out.join(dir).join(format!("{name}.{ext}")))
}

/// The shared part of every run of a matrix.
#[derive(Debug, Clone, Copy)]
pub struct Vm<'a> {
    /// The Osprey binaries; a point's `build` picks one (1-based).
    pub ospreys: &'a [PathBuf],
    pub elf: &'a Path,
    pub store: &'a Path,
    /// Open the store with O_DIRECT.
    pub direct: bool,
    /// Drop the store's pages from the page cache before every run.
    pub cold: bool,
    /// Bytes of the store the guest uses from sector 0.
    pub range: u64,
    /// The vCPU TSC frequency Osprey logged.
    pub tsc_khz: u64,
    pub out: &'a Path,
    /// Append the metrics every this many ms (a timeline), not only as the VM stops.
    pub metrics_interval_ms: Option<u64>,
}

impl Vm<'_> {
    /// The guest command line of a run of `count` requests with pattern and offset seed `seed`,
    /// plus `OSPREY_BENCH_GUEST_ARGS` when set (e.g. `tsc_stamp=1` for scripts/qd1-stages.sh).
    pub fn cmdline(&self, p: &Point, count: u64, seed: u64) -> String {
        let extra = std::env::var("OSPREY_BENCH_GUEST_ARGS").unwrap_or_default();
        let line = format!(
            "mode=blk rw={} bs={} qd={} queues={} count={count} range={} tsc_khz={} irq={} \
             seed={seed}",
            p.rw,
            p.bs,
            p.qd,
            p.queues,
            self.range,
            self.tsc_khz,
            u8::from(p.irq),
        );
        match extra.trim() {
            "" => line,
            extra => format!("{line} {extra}"),
        }
    }

    /// The VM config JSON (docs/config.md) of one run; Osprey appends its metrics to `metrics`
    /// as the VM stops, and every `metrics_interval_ms` when that is set (otherwise the interval
    /// is longer than any run). Every path is absolute: Osprey takes a config file's relative
    /// paths from the file's folder, and the runner's are relative to its working directory.
    pub fn config(&self, p: &Point, cmdline: &str, metrics: &Path) -> Value {
        let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.into());
        let mut iothread = p.poll.iothread_fields();
        iothread["id"] = "io0".into();
        iothread["max_batch"] = p.max_batch.into();
        json!({
            "machine-config": { "vcpu_count": 1, "mem_size_mib": 256 },
            "boot-source": { "kernel_image_path": absolute(self.elf), "boot_args": cmdline },
            "drives": [{
                "drive_id": "bench0",
                "path_on_host": absolute(self.store),
                "direct": self.direct,
                "io_engine": p.engine.to_string(),
                "num_queues": p.queues,
                "queue_size": 256,
                "iothread": "io0",
            }],
            "iothreads": [iothread],
            "metrics": {
                "path": absolute(metrics),
                "interval_ms": self.metrics_interval_ms.unwrap_or(24 * 3600 * 1000),
            },
        })
    }

    /// Boots the test guest for run `name` of `p` (`count` requests, offsets from `seed`) and
    /// returns its sample.
    pub fn run(
        &self,
        p: &Point,
        count: u64,
        seed: u64,
        name: &str,
        deadline: Duration,
    ) -> anyhow::Result<RunSample> {
        let [config, logs, metrics] = run_files(self.out, name);
        let cmdline = self.cmdline(p, count, seed);
        let vm = self.config(p, &cmdline, &metrics);
        let text = serde_json::to_string_pretty(&vm).unwrap_or_else(|_| vm.to_string());
        create_parent(&config)?;
        std::fs::write(&config, text)
            .with_context(|| format!("Cannot write the VM config {}", config.display()))?;
        // A metrics file left by an earlier run of the same name must not be read as this run's.
        create_parent(&metrics)?;
        let _ = std::fs::remove_file(&metrics);
        let config_arg = [OsStr::new("--config"), config.as_os_str()];
        let osprey = usize::from(p.build)
            .checked_sub(1)
            .and_then(|i| self.ospreys.get(i))
            .ok_or_else(|| anyhow!("point {} names no --osprey binary", p.label()))?;
        let (console, _, status) = run_osprey(osprey, &config_arg, deadline, &logs)?;
        let log = logs.with_extension("log");
        let Some(status) = status else {
            let tail = console_tail(&console);
            bail!(
                "Osprey did not finish within {deadline:?} (killed); console ends: {tail}; see {}",
                log.display()
            );
        };
        // The last line of the metrics file: `GET /metrics` as the VM stopped.
        let last = std::fs::read_to_string(&metrics).ok().and_then(|text| {
            let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
            serde_json::from_str(line).ok()
        });
        RunSample::from_outputs(&console, last.as_ref())
            .map_err(|e| anyhow!("{e} (osprey {status}; see {})", log.display()))
    }
}

/// The `KVM: …` and `vCPU TSC frequency: N kHz` lines of Osprey's start-up log.
pub fn start_up_facts(log: &str) -> (Option<String>, Option<u64>) {
    let (mut kvm, mut tsc_khz) = (None, None);
    for line in log.lines() {
        // The message follows a `[time LEVEL ] ` prefix, if any.
        let m = line
            .trim_end()
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("] "))
            .map_or(line.trim_end(), |(_, m)| m);
        if let Some(rest) = m.strip_prefix("KVM: ") {
            kvm = Some(rest.to_string());
        } else if let Some(rest) = m.strip_prefix("vCPU TSC frequency: ") {
            tsc_khz = rest
                .strip_suffix(" kHz")
                .and_then(|n| n.trim().parse().ok());
        }
    }
    (kvm, tsc_khz)
}

/// Boots the guest in `mode=report` once; returns the vCPU TSC kHz and the KVM flavour.
pub fn probe(osprey: &Path, elf: &Path, out: &Path) -> anyhow::Result<(u64, String)> {
    let args = [
        OsStr::new("--kernel"),
        elf.as_os_str(),
        OsStr::new("--cmdline"),
        OsStr::new("mode=report"),
    ];
    let (failed, files) = ("Osprey's start-up probe failed", out.join("logs/probe.*"));
    let (_, log, status) =
        run_osprey(osprey, &args, Duration::from_secs(60), &files).context(failed)?;
    let Some(status) = status else {
        bail!("{failed}: no exit within 60s");
    };
    let (kvm, tsc_khz) = start_up_facts(&log);
    let tsc_khz = tsc_khz.ok_or_else(|| {
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        anyhow!(
            "{failed}: no `vCPU TSC frequency` line ({status}; last log lines: {})",
            tail.join(" | ")
        )
    })?;
    Ok((
        tsc_khz,
        kvm.unwrap_or_else(|| "unknown (no `KVM:` line)".into()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, PollSetting, Rw};

    #[test]
    fn builds_the_command_line_and_config() {
        let p = Point {
            rw: Rw::RandWrite,
            qd: 32,
            queues: 2,
            engine: Engine::LinuxAio,
            poll: PollSetting::Weighted(3),
            max_batch: 128,
            ..Point::base()
        };
        let vm = Vm {
            ospreys: &[],
            elf: Path::new("/g.elf"),
            store: Path::new("/dev/loop0"),
            direct: true,
            cold: false,
            range: 1 << 30,
            tsc_khz: 2_445_426,
            out: Path::new("/o"),
            metrics_interval_ms: None,
        };
        assert_eq!(
            vm.cmdline(&p, 50_000, 2),
            "mode=blk rw=randwrite bs=4096 qd=32 queues=2 count=50000 range=1073741824 \
             tsc_khz=2445426 irq=0 seed=2"
        );
        let config = vm.config(&p, "mode=blk", Path::new("/m"));
        let drive = json!({ "drive_id": "bench0", "path_on_host": "/dev/loop0", "direct": true,
            "io_engine": "LinuxAio", "num_queues": 2, "queue_size": 256, "iothread": "io0" });
        let iothread = json!({ "id": "io0", "max_batch": 128, "poll_policy": "Weighted",
            "poll_weight": 3 });
        let want = json!({
            "machine-config": { "vcpu_count": 1, "mem_size_mib": 256 },
            "boot-source": { "kernel_image_path": "/g.elf", "boot_args": "mode=blk" },
            "drives": [drive],
            "iothreads": [iothread],
            "metrics": { "path": "/m", "interval_ms": 86_400_000 },
        });
        assert_eq!(config, want);
        let timeline = Vm {
            metrics_interval_ms: Some(100),
            ..vm
        };
        let config = timeline.config(&p, "mode=blk", Path::new("/m"));
        assert_eq!(config["metrics"]["interval_ms"], 100);
        // Osprey reads a config file's relative paths from the file's folder: none is relative.
        let relative = vm.config(&p, "mode=blk", Path::new("target/bench/m.jsonl"));
        let path = relative["metrics"]["path"].as_str().expect("a path");
        assert!(Path::new(path).is_absolute(), "{path}");
    }

    #[test]
    fn reads_the_start_up_log_and_console_tails() {
        let log = include_str!("../testdata/osprey-log.txt");
        let (kvm, tsc) = start_up_facts(log);
        assert!(kvm.is_some_and(|k| k.starts_with("kvm_pvm")));
        assert_eq!(tsc, Some(2_445_426));
        assert_eq!(start_up_facts("[t INFO ] Started 1 vCPU(s)"), (None, None));
        assert_eq!(console_tail("a\n\n  b\r\nc\n"), "a | b | c");
        assert_eq!(console_tail(""), "(empty)");
        let many: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            console_tail(&many),
            "line 5 | line 6 | line 7 | line 8 | line 9 | line 10"
        );
        let long = console_tail(&format!("{}end", "x".repeat(1000)));
        assert!(long.starts_with('…') && long.ends_with("xend"), "{long}");
        assert_eq!(long.chars().count(), 601);
        let [config, log, metrics] = run_files(Path::new("/o"), "point-001-run1");
        assert_eq!(config, Path::new("/o/configs/point-001-run1.json"));
        assert_eq!(
            log.with_extension("log"),
            Path::new("/o/logs/point-001-run1.log")
        );
        assert_eq!(metrics, Path::new("/o/metrics/point-001-run1.jsonl"));
    }
}
