//! The VM config (docs/config.md) and the test guest's `mode=blk` command line for one run of a
//! point: 1 vCPU, 256 MiB, one virtio-blk drive on the store served by iothread `io0`.

use std::path::Path;

use serde_json::{json, Value};

use crate::matrix::Point;

/// Virtqueue size for every run.
pub const QUEUE_SIZE: u32 = 256;

/// What a run needs besides the point.
#[derive(Debug, Clone)]
pub struct RunParams<'a> {
    /// Osprey's test guest ELF.
    pub guest: &'a Path,
    /// The store (block device or file).
    pub store: &'a Path,
    /// Open the store with O_DIRECT.
    pub direct: bool,
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
pub fn guest_cmdline(p: &Point, r: &RunParams<'_>) -> String {
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

/// The VM config JSON.
pub fn vm_config(p: &Point, r: &RunParams<'_>) -> Value {
    let mut iothread = p.poll.iothread_fields();
    iothread.insert("id".into(), "io0".into());
    iothread.insert("max_batch".into(), p.max_batch.into());
    json!({
        "machine-config": { "vcpu_count": 1, "mem_size_mib": 256 },
        "boot-source": {
            "kernel_image_path": r.guest,
            "boot_args": guest_cmdline(p, r),
        },
        "drives": [{
            "drive_id": "bench0",
            "path_on_host": r.store,
            "direct": r.direct,
            "io_engine": p.engine.as_str(),
            "num_queues": p.queues,
            "queue_size": QUEUE_SIZE,
            "iothread": "io0",
        }],
        "iothreads": [Value::Object(iothread)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Engine, PollSetting, Rw};

    #[test]
    fn builds_the_config_and_command_line() {
        let p = Point {
            rw: Rw::RandWrite,
            bs: 4096,
            qd: 32,
            queues: 2,
            engine: Engine::LinuxAio,
            poll: PollSetting::Weighted(3),
            max_batch: 128,
            irq: false,
        };
        let r = RunParams {
            guest: Path::new("/g.elf"),
            store: Path::new("/dev/loop0"),
            direct: true,
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
        let c = vm_config(&p, &r);
        assert_eq!(c["drives"][0]["io_engine"], "LinuxAio");
        assert_eq!(c["drives"][0]["num_queues"], 2);
        assert_eq!(c["drives"][0]["direct"], true);
        assert_eq!(c["drives"][0]["path_on_host"], "/dev/loop0");
        assert_eq!(c["iothreads"][0]["id"], "io0");
        assert_eq!(c["iothreads"][0]["max_batch"], 128);
        assert_eq!(c["iothreads"][0]["poll_policy"], "Weighted");
        assert_eq!(c["iothreads"][0]["poll_weight"], 3);
        assert_eq!(c["boot-source"]["kernel_image_path"], "/g.elf");
    }
}
