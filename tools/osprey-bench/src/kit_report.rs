//! The Linux kit's console (the contract of `guest-images/linux/init`): `OSPREY-KIT-READY
//! kernel=… cpus=… mem_kib=… disks=vda:<sectors>:<hw queues>`, then per fio run N
//! `OSPREY-FIO-BEGIN N`, fio's JSON, `OSPREY-FIO-END N rc=<fio exit code>` and fio's stderr as
//! `OSPREY-FIO-LOG N …` lines, finally `OSPREY-KIT-DONE runs=… failed=…`; failures as
//! `OSPREY-KIT-ERROR <what>`. Parsed here, and fio's JSON turned with Osprey's log into the same
//! [`RunSample`] the test guest gives, with what fio cannot tell left as NaN (not measured).

use thiserror::Error;

use crate::fio::{parse_fio_job, FioError, FioJobReport};
use crate::guest::GuestError;
use crate::matrix::Point;
use crate::sample::{per_io, us_per_io, RunSample, SampleError};
use crate::vm_run::excerpt;
use crate::vmm_log::VmmLog;

/// The kit's console does not hold a usable fio run.
#[derive(Debug, Error)]
pub enum KitError {
    /// The init reported a failure.
    #[error("the Linux kit reported an error: {0}")]
    Kit(String),
    /// No READY line: the kernel or the init did not get that far.
    #[error("no OSPREY-KIT-READY line on the console (the kernel or the kit's init stopped early); console ends: {0}")]
    NoReady(String),
    /// The guest's disk has another number of hardware queues than the point.
    #[error("the guest's {disk} has {found} hardware queue(s), the point wants {want} (READY line: {line})")]
    Queues {
        /// Disk name.
        disk: String,
        /// blk-mq hardware queues the guest reported (None: no such disk).
        found: String,
        /// The point's queues.
        want: u32,
        /// The READY line.
        line: String,
    },
    /// No complete BEGIN…END block for the run.
    #[error("no complete OSPREY-FIO-BEGIN/END {0} block on the console; console ends: {1}")]
    NoRun(u32, String),
    /// fio failed.
    #[error("fio exited with rc={rc}: {excerpt}")]
    FioFailed {
        /// fio's exit code.
        rc: i32,
        /// fio's stderr (the `OSPREY-FIO-LOG` lines), or the console's end.
        excerpt: String,
    },
    /// fio's output between the markers is not what the runner reads.
    #[error("fio's output for run {0}: {1}")]
    Fio(u32, #[source] FioError),
    /// Osprey did not exit 0 after the guest's reboot.
    #[error(
        "Osprey exited with {0} although the kit finished (it exits 0 when the guest reboots)"
    )]
    Exit(String),
}

/// A disk of the READY line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KitDisk {
    /// `vda`.
    pub name: String,
    /// Size in 512-byte sectors.
    pub sectors: u64,
    /// blk-mq hardware queues.
    pub queues: u32,
}

/// The `OSPREY-KIT-READY` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KitReady {
    /// The line as printed (after the marker).
    pub line: String,
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: u32,
    /// MemTotal, KiB.
    pub mem_kib: u64,
    /// The virtio disks.
    pub disks: Vec<KitDisk>,
}

impl KitReady {
    /// Parses the text after `OSPREY-KIT-READY `.
    pub fn parse(rest: &str) -> Self {
        let mut r = KitReady {
            line: rest.to_string(),
            ..KitReady::default()
        };
        for (k, v) in rest.split_whitespace().filter_map(|kv| kv.split_once('=')) {
            match k {
                "kernel" => r.kernel = v.to_string(),
                "cpus" => r.cpus = v.parse().unwrap_or(0),
                "mem_kib" => r.mem_kib = v.parse().unwrap_or(0),
                "disks" => {
                    r.disks = v
                        .split(';')
                        .filter_map(|d| {
                            let mut f = d.split(':');
                            Some(KitDisk {
                                name: f.next()?.to_string(),
                                sectors: f.next()?.parse().ok()?,
                                queues: f.next()?.parse().ok()?,
                            })
                        })
                        .collect();
                }
                _ => {}
            }
        }
        r
    }
}

/// One fio run's block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KitRun {
    /// Run number, from 1.
    pub n: u32,
    /// The lines between BEGIN and END.
    pub json: String,
    /// fio's exit code (None: no END line).
    pub rc: Option<i32>,
    /// fio's stderr and stray stdout (`OSPREY-FIO-LOG N …`).
    pub log: Vec<String>,
}

/// Everything the kit printed that the runner reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KitConsole {
    /// The READY line.
    pub ready: Option<KitReady>,
    /// The fio runs, in order.
    pub runs: Vec<KitRun>,
    /// `OSPREY-KIT-ERROR` texts.
    pub errors: Vec<String>,
    /// `OSPREY-KIT-DONE` runs and failed counts.
    pub done: Option<(u32, u32)>,
    /// The last non-empty console lines, for error messages.
    pub tail: Vec<String>,
}

/// A kernel message (`[   12.345678] …`), which the serial console may interleave with fio's JSON.
fn is_printk(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|r| r.split_once("] "))
        .is_some_and(|(t, _)| {
            let t = t.trim_start();
            t.split_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
        })
}

fn field<'a>(rest: &'a str, key: &str) -> Option<&'a str> {
    rest.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

impl KitConsole {
    /// Reads a whole console text (other lines, such as kernel messages, are skipped).
    pub fn parse(console: &str) -> Self {
        let mut c = KitConsole::default();
        let mut open: Option<KitRun> = None;
        let mut before_error: Vec<&str> = Vec::new();
        for raw in console.lines() {
            let line = raw.trim_end_matches(['\r', '\n']);
            if let Some(run) = open.as_mut() {
                if let Some(rest) = line.strip_prefix("OSPREY-FIO-END ") {
                    let mut run = open.take().unwrap_or_default();
                    run.rc = field(rest, "rc").and_then(|v| v.parse().ok()).or(Some(-1));
                    c.runs.push(run);
                } else if !is_printk(line) {
                    run.json.push_str(line);
                    run.json.push('\n');
                }
                continue;
            }
            if !line.trim().is_empty() {
                c.tail.push(line.trim().to_string());
                if c.errors.is_empty() {
                    before_error.push(line);
                }
            }
            if let Some(rest) = line.strip_prefix("OSPREY-KIT-READY ") {
                c.ready = Some(KitReady::parse(rest));
            } else if let Some(rest) = line.strip_prefix("OSPREY-FIO-BEGIN ") {
                open = Some(KitRun {
                    n: rest.trim().parse().unwrap_or(0),
                    ..KitRun::default()
                });
            } else if let Some(rest) = line.strip_prefix("OSPREY-FIO-LOG ") {
                let (n, text) = rest.split_once(' ').unwrap_or((rest, ""));
                let n: u32 = n.parse().unwrap_or(0);
                if let Some(run) = c.runs.iter_mut().rev().find(|r| r.n == n) {
                    run.log.push(text.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("OSPREY-KIT-ERROR") {
                if c.errors.is_empty() {
                    // The lines leading up to the first error say where it happened.
                    c.errors.push(excerpt(&before_error));
                } else {
                    c.errors.push(rest.trim().to_string());
                }
            } else if let Some(rest) = line.strip_prefix("OSPREY-KIT-DONE ") {
                let num = |k| field(rest, k).and_then(|v| v.parse().ok()).unwrap_or(0);
                c.done = Some((num("runs"), num("failed")));
            }
        }
        if let Some(run) = open {
            // BEGIN without END: the guest stopped inside the run.
            c.runs.push(run);
        }
        // Enough for an excerpt.
        let start = c.tail.len().saturating_sub(8);
        c.tail.drain(..start);
        c
    }

    /// Fio run `n`'s report, checked: no kit error, a READY line whose `vda` has `queues`
    /// hardware queues, a complete block with rc 0, and parseable JSON.
    pub fn fio_job(&self, n: u32, queues: u32) -> Result<FioJobReport, KitError> {
        if let Some(first) = self.errors.first() {
            return Err(KitError::Kit(first.clone()));
        }
        let ready = self
            .ready
            .as_ref()
            .ok_or_else(|| KitError::NoReady(excerpt(&self.tail)))?;
        let vda = ready.disks.iter().find(|d| d.name == "vda");
        if vda.map(|d| d.queues) != Some(queues) {
            return Err(KitError::Queues {
                disk: "vda".into(),
                found: vda.map_or_else(|| "no vda, so no".into(), |d| d.queues.to_string()),
                want: queues,
                line: ready.line.clone(),
            });
        }
        let run = self
            .runs
            .iter()
            .find(|r| r.n == n && r.rc.is_some())
            .ok_or_else(|| KitError::NoRun(n, excerpt(&self.tail)))?;
        let rc = run.rc.unwrap_or(-1);
        if rc != 0 {
            let excerpt = if run.log.is_empty() {
                excerpt(&self.tail)
            } else {
                excerpt(&run.log)
            };
            return Err(KitError::FioFailed { rc, excerpt });
        }
        parse_fio_job(&run.json).map_err(|e| KitError::Fio(n, e))
    }
}

/// A run's sample from fio's job report (the side `p.rw` moves data on) and Osprey's log.
///
/// From fio: IOPS, MiB/s, latency (clat, or lat when only it has percentiles: mean, p50, p99),
/// requests (`total_ios`), errors (`total_err`, else 1 when the job's `error` is set), the queue
/// depth (the `iodepth` fio ran with) and the run time. From Osprey's log, per request Osprey
/// completed (boot and ramp included on both sides of the division): dataplane CPU, drive kicks
/// and interrupts, batch and iothread sleeps. Not measured (NaN): the guest's own kicks and
/// interrupts, and all-thread and vCPU CPU per I/O (the VM's CPU time includes the Linux boot).
pub fn fio_sample(job: &FioJobReport, p: &Point, log: &VmmLog) -> Result<RunSample, GuestError> {
    let side = job.side(p.rw);
    if side.total_ios == 0 {
        return Err(SampleError::NoRequests.into());
    }
    let cpu = log.cpu()?;
    let drive = log.drive()?;
    let n = drive.requests;
    let sleeps: u64 = log.iothreads.iter().map(|t| t.stats.sleeps).sum();
    let lat = if side.clat_ns.percentile.is_empty() && !side.lat_ns.percentile.is_empty() {
        &side.lat_ns
    } else {
        &side.clat_ns
    };
    let pct = |q: f64| lat.pct(q).map_or(f64::NAN, |ns| ns / 1e3);
    Ok(RunSample {
        iops: side.iops,
        bw_mib_s: side.bw_bytes / f64::from(1u32 << 20),
        lat_mean_us: lat.mean / 1e3,
        lat_p50_us: pct(50.0),
        lat_p99_us: pct(99.0),
        cpu_total_us: f64::NAN,
        cpu_vcpu_us: f64::NAN,
        cpu_dataplane_us: us_per_io(cpu.dataplane_ms(), n),
        guest_kicks: f64::NAN,
        guest_irqs: f64::NAN,
        drive_kicks: per_io(drive.kicks, n),
        drive_irqs: per_io(drive.notifications, n),
        batch_mean: per_io(drive.requests, drive.submissions.max(1)),
        sleeps: per_io(sleeps, n),
        requests: side.total_ios,
        errors: job.total_err.unwrap_or(u64::from(job.error != 0)),
        // fio's default iodepth is 1.
        guest_qd: job
            .option_u64("iodepth")
            .map_or(1, |d| u32::try_from(d).unwrap_or(u32::MAX)),
        elapsed_s: side.runtime as f64 / 1e3,
    })
}

/// The sample of fio run 1 of a kit console, for point `p`.
pub fn kit_sample(console: &str, p: &Point, log: &VmmLog) -> Result<RunSample, GuestError> {
    let job = KitConsole::parse(console).fio_job(1, p.queues)?;
    fio_sample(&job, p, log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, PollSetting, Rw};

    const RANDREAD: &str = include_str!("../tests/fixtures/kit-randread-4k-qd8-2jobs.txt");
    const RANDWRITE: &str = include_str!("../tests/fixtures/kit-randwrite-4k-qd8-2jobs.txt");

    fn point(rw: Rw, queues: u32) -> Point {
        Point {
            rw,
            bs: 4096,
            qd: 8,
            queues,
            engine: Engine::IoUring,
            poll: PollSetting::Classic(None),
            max_batch: 32,
            irq: true,
            hog: 0,
        }
    }

    /// The fixture's own JSON, read without the runner's structs.
    fn raw(console: &str) -> serde_json::Value {
        let begin = console.find("OSPREY-FIO-BEGIN 1\n").expect("begin") + 19;
        let end = console.find("OSPREY-FIO-END 1").expect("end");
        serde_json::from_str(&console[begin..end]).expect("fixture json")
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn reads_the_ready_line_and_the_run() {
        let c = KitConsole::parse(RANDREAD);
        let r = c.ready.as_ref().expect("ready");
        assert_eq!(r.kernel, "6.1.0-56-cloud-amd64");
        assert_eq!((r.cpus, r.mem_kib), (2, 1_006_592));
        assert_eq!(
            r.disks,
            [KitDisk {
                name: "vda".into(),
                sectors: 2_097_152,
                queues: 2
            }]
        );
        assert_eq!(c.runs.len(), 1);
        assert_eq!(c.runs[0].rc, Some(0));
        assert_eq!(c.done, Some((1, 0)));
        assert!(c.errors.is_empty());
    }

    #[test]
    fn a_real_randread_run_becomes_a_sample() {
        let p = point(Rw::RandRead, 2);
        let log = crate::vmm_log::tests::recorded();
        let s = kit_sample(RANDREAD, &p, &log).expect("sample");
        let j = &raw(RANDREAD)["jobs"][0];
        let r = &j["read"];
        let f = |v: &serde_json::Value| v.as_f64().expect("number");
        assert!(close(s.iops, f(&r["iops"])), "{} vs {}", s.iops, r["iops"]);
        assert!(close(s.bw_mib_s, f(&r["bw_bytes"]) / 1_048_576.0));
        assert!(close(s.lat_mean_us, f(&r["clat_ns"]["mean"]) / 1e3));
        assert!(close(
            s.lat_p50_us,
            f(&r["clat_ns"]["percentile"]["50.000000"]) / 1e3
        ));
        assert!(close(
            s.lat_p99_us,
            f(&r["clat_ns"]["percentile"]["99.000000"]) / 1e3
        ));
        assert_eq!(Some(s.requests), r["total_ios"].as_u64());
        assert!(close(s.elapsed_s, f(&r["runtime"]) / 1e3));
        assert_eq!(s.errors, 0);
        assert_eq!(s.guest_qd, 8);
        // The fixture's numbers, written out, so a change of the reading shows.
        assert_eq!(s.requests, 389_854);
        assert!(close(s.iops, 194_537.924152));
        assert!(close(s.lat_p99_us, 2_473.984));
        // From Osprey's log, per request Osprey completed (20,001 there).
        assert!(close(s.cpu_dataplane_us, 89.9 * 1000.0 / 20_001.0));
        assert!(close(s.drive_kicks, 20.0 / 20_001.0));
        assert_eq!(s.drive_irqs, 0.0);
        assert!(close(s.batch_mean, 20_001.0 / 2_500.0));
        assert!(close(s.sleeps, 7.0 / 20_001.0));
        // Not measured with the Linux guest.
        for v in [s.guest_kicks, s.guest_irqs, s.cpu_total_us, s.cpu_vcpu_us] {
            assert!(v.is_nan(), "{s:?}");
        }
    }

    #[test]
    fn a_real_randwrite_run_takes_the_write_side() {
        let log = crate::vmm_log::tests::recorded();
        let s = kit_sample(RANDWRITE, &point(Rw::RandWrite, 2), &log).expect("sample");
        let w = &raw(RANDWRITE)["jobs"][0]["write"];
        assert_eq!(Some(s.requests), w["total_ios"].as_u64());
        assert_eq!(s.requests, 253_501);
        assert!(close(s.iops, 126_434.413965));
        assert!(close(
            s.lat_p99_us,
            w["clat_ns"]["percentile"]["99.000000"]
                .as_f64()
                .expect("p99")
                / 1e3
        ));
        // The read side of a write job is empty: asking for it is "no requests".
        let e = kit_sample(RANDWRITE, &point(Rw::RandRead, 2), &log).expect_err("must fail");
        assert!(
            matches!(e, GuestError::Sample(SampleError::NoRequests)),
            "{e}"
        );
    }

    #[test]
    fn kernel_messages_inside_the_json_are_skipped() {
        assert!(is_printk(
            "[   12.345678] virtio_blk virtio0: [vda] 2097152 512-byte blocks"
        ));
        assert!(!is_printk("[\"a\", \"b\"]"));
        assert!(!is_printk("  \"iops\" : 1.0,"));
        let noisy = RANDREAD.replacen(
            "\"jobs\" : [",
            "\"jobs\" : [\n[  101.000001] random: crng init done",
            1,
        );
        assert_ne!(noisy, RANDREAD);
        let log = crate::vmm_log::tests::recorded();
        let s = kit_sample(&noisy, &point(Rw::RandRead, 2), &log).expect("sample");
        assert_eq!(s.requests, 389_854);
    }

    #[test]
    fn lat_percentiles_are_used_when_clat_has_none() {
        let log = crate::vmm_log::tests::recorded();
        let json = r#"{"jobs":[{"error":0,"job options":{"iodepth":"4"},
            "read":{"iops":10.0,"bw_bytes":40960.0,"total_ios":20,"runtime":2000,
                    "clat_ns":{"mean":900.0},
                    "lat_ns":{"mean":1000.0,"percentile":{"50.000000":800,"99.000000":5000}}},
            "write":{}}]}"#;
        let job = parse_fio_job(json).expect("json");
        let s = fio_sample(&job, &point(Rw::Read, 1), &log).expect("sample");
        assert_eq!((s.lat_mean_us, s.lat_p50_us, s.lat_p99_us), (1.0, 0.8, 5.0));
        assert_eq!((s.guest_qd, s.elapsed_s), (4, 2.0));
    }

    #[test]
    fn a_failing_fio_is_a_failed_run_with_its_stderr() {
        let console = RANDREAD
            .replace("OSPREY-FIO-END 1 rc=0", "OSPREY-FIO-END 1 rc=1")
            .replace(
                "OSPREY-KIT-DONE runs=1 failed=0",
                "OSPREY-FIO-LOG 1 fio: pid=97, err=5/file:io_u.c:1889, func=io_u error, error=Input/output error\n\
                 OSPREY-KIT-DONE runs=1 failed=1",
            );
        let log = crate::vmm_log::tests::recorded();
        let e = kit_sample(&console, &point(Rw::RandRead, 2), &log).expect_err("must fail");
        let msg = e.to_string();
        assert!(
            matches!(e, GuestError::Kit(KitError::FioFailed { rc: 1, .. })),
            "{msg}"
        );
        assert!(msg.contains("rc=1"), "{msg}");
        assert!(msg.contains("Input/output error"), "{msg}");
    }

    #[test]
    fn a_kit_error_fails_the_run_with_the_console_excerpt() {
        let console = "[    1.2] virtio_blk virtio0: 1/0/0 default/read/poll queues\n\
            OSPREY-KIT: init start\n\
            OSPREY-KIT-ERROR insmod /lib/modules/6.1/virtio_blk.ko failed: Invalid module format\n";
        let log = crate::vmm_log::tests::recorded();
        let e = kit_sample(console, &point(Rw::RandRead, 1), &log).expect_err("must fail");
        let msg = e.to_string();
        assert!(msg.contains("Invalid module format"), "{msg}");
        assert!(msg.contains("init start"), "{msg}");
    }

    #[test]
    fn missing_ready_wrong_queues_and_cut_runs_are_errors() {
        let log = crate::vmm_log::tests::recorded();
        let panic = "Kernel panic - not syncing: VFS: Unable to mount root fs\n";
        let e = kit_sample(panic, &point(Rw::RandRead, 1), &log).expect_err("must fail");
        assert!(matches!(e, GuestError::Kit(KitError::NoReady(_))), "{e}");
        assert!(e.to_string().contains("Unable to mount root fs"), "{e}");
        // The fixture's vda has 2 hardware queues; a 4-queue point did not get what it asked for.
        let e = kit_sample(RANDREAD, &point(Rw::RandRead, 4), &log).expect_err("must fail");
        assert!(
            matches!(e, GuestError::Kit(KitError::Queues { want: 4, .. })),
            "{e}"
        );
        // Cut off inside the JSON (no END line).
        let cut = &RANDREAD[..RANDREAD.find("OSPREY-FIO-END").expect("end")];
        let e = kit_sample(cut, &point(Rw::RandRead, 2), &log).expect_err("must fail");
        assert!(matches!(e, GuestError::Kit(KitError::NoRun(1, _))), "{e}");
        // END rc=0 around something that is not fio JSON.
        let bad = "OSPREY-KIT-READY kernel=k cpus=1 mem_kib=1 disks=vda:8:1\n\
            OSPREY-FIO-BEGIN 1\nfio: unrecognized option\nOSPREY-FIO-END 1 rc=0\n";
        let e = kit_sample(bad, &point(Rw::RandRead, 1), &log).expect_err("must fail");
        assert!(matches!(e, GuestError::Kit(KitError::Fio(1, _))), "{e}");
    }
}
