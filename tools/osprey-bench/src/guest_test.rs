//! Osprey's test guest as the runner's guest (`--guest test-guest`, the default): its ELF booted
//! with 1 vCPU and 256 MiB, the `mode=blk` command line that carries the point and a request
//! count, and its `BLK {json}` console report combined with Osprey's log into a sample. Runs on
//! any KVM, kvm_pvm included (the load generator runs in ring 3).

use std::path::Path;

use crate::blk_report::BlkReport;
use crate::guest::{Boot, GuestError, GuestRun};
use crate::matrix::Point;
use crate::sample::RunSample;
use crate::vm_run::VmOutput;
use crate::vmm_log::VmmLog;

/// vCPUs of every test-guest run.
pub const VCPUS: u32 = 1;
/// Guest memory of every test-guest run, MiB.
pub const MEM_MIB: u64 = 256;

/// One test-guest run of a point.
#[derive(Debug, Clone)]
pub struct TestRun<'a> {
    /// Osprey's test guest ELF.
    pub elf: &'a Path,
    /// Bytes of the store the guest uses from sector 0.
    pub range: u64,
    /// Requests to complete.
    pub count: u64,
    /// The vCPU TSC frequency Osprey logged.
    pub tsc_khz: u64,
    /// Pattern and random-offset seed.
    pub seed: u64,
}

/// The guest command line.
pub fn guest_cmdline(p: &Point, r: &TestRun<'_>) -> String {
    format!(
        "mode=blk rw={} bs={} qd={} queues={} count={} range={} tsc_khz={} irq={} seed={}",
        p.rw,
        p.bs,
        p.qd,
        p.queues,
        r.count,
        r.range,
        r.tsc_khz,
        u8::from(p.irq),
        r.seed
    )
}

impl GuestRun for TestRun<'_> {
    fn boot(&self, p: &Point) -> Boot {
        Boot {
            kernel: self.elf.to_path_buf(),
            initrd: None,
            cmdline: guest_cmdline(p, self),
            vcpus: VCPUS,
            mem_mib: MEM_MIB,
        }
    }

    /// The `BLK` line and Osprey's log (Osprey's exit status is not checked: the report is).
    fn sample(&self, _p: &Point, out: &VmOutput) -> Result<RunSample, GuestError> {
        let report = BlkReport::from_console(&out.console)?;
        let log = VmmLog::of_run(&out.log, out.metrics.as_ref())?;
        RunSample::from_outputs(&report, &log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_command_line_and_boot() {
        let p = Point::example();
        let r = TestRun {
            elf: Path::new("/g.elf"),
            range: 1 << 30,
            count: 50_000,
            tsc_khz: 2_445_426,
            seed: 2,
        };
        assert_eq!(
            guest_cmdline(&p, &r),
            "mode=blk rw=randwrite bs=4096 qd=32 queues=2 count=50000 range=1073741824 \
             tsc_khz=2445426 irq=0 seed=2"
        );
        let b = r.boot(&p);
        assert_eq!(b.kernel, Path::new("/g.elf"));
        assert_eq!(b.initrd, None);
        assert_eq!((b.vcpus, b.mem_mib), (1, 256));
    }
}
