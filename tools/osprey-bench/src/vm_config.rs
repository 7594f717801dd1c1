//! The VM config (docs/config.md) of one run of a point: the guest's boot half ([`Boot`]: kernel,
//! initrd, command line, vCPUs, memory) and the half every guest shares: one virtio-blk drive on
//! the store with the point's engine and queues, served by iothread `io0` with the point's polling
//! and `max_batch`.

use std::path::Path;

use serde_json::{json, Value};

use crate::guest::Boot;
use crate::matrix::Point;

/// Virtqueue size for every run.
pub const QUEUE_SIZE: u32 = 256;

/// The store as the drive opens it.
#[derive(Debug, Clone, Copy)]
pub struct DriveParams<'a> {
    /// The store (block device or file).
    pub store: &'a Path,
    /// Open the store with O_DIRECT.
    pub direct: bool,
}

/// The VM config JSON.
pub fn vm_config(p: &Point, drive: &DriveParams<'_>, boot: &Boot) -> Value {
    let mut iothread = p.poll.iothread_fields();
    iothread.insert("id".into(), "io0".into());
    iothread.insert("max_batch".into(), p.max_batch.into());
    let mut boot_source = json!({
        "kernel_image_path": boot.kernel,
        "boot_args": boot.cmdline,
    });
    if let Some(initrd) = &boot.initrd {
        boot_source["initrd_path"] = json!(initrd);
    }
    json!({
        "machine-config": { "vcpu_count": boot.vcpus, "mem_size_mib": boot.mem_mib },
        "boot-source": boot_source,
        "drives": [{
            "drive_id": "bench0",
            "path_on_host": drive.store,
            "direct": drive.direct,
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
    use std::path::PathBuf;

    #[test]
    fn builds_the_config() {
        let p = Point::example();
        let drive = DriveParams {
            store: Path::new("/dev/loop0"),
            direct: true,
        };
        let boot = Boot {
            kernel: PathBuf::from("/g.elf"),
            initrd: None,
            cmdline: "mode=blk".into(),
            vcpus: 1,
            mem_mib: 256,
        };
        let c = vm_config(&p, &drive, &boot);
        assert_eq!(c["drives"][0]["io_engine"], "LinuxAio");
        assert_eq!(c["drives"][0]["num_queues"], 2);
        assert_eq!(c["drives"][0]["queue_size"], 256);
        assert_eq!(c["drives"][0]["direct"], true);
        assert_eq!(c["drives"][0]["path_on_host"], "/dev/loop0");
        assert_eq!(c["iothreads"][0]["id"], "io0");
        assert_eq!(c["iothreads"][0]["max_batch"], 128);
        assert_eq!(c["iothreads"][0]["poll_policy"], "Weighted");
        assert_eq!(c["iothreads"][0]["poll_weight"], 3);
        assert_eq!(c["boot-source"]["kernel_image_path"], "/g.elf");
        assert_eq!(c["boot-source"]["boot_args"], "mode=blk");
        assert!(c["boot-source"].get("initrd_path").is_none());
        assert_eq!(c["machine-config"]["vcpu_count"], 1);
        assert_eq!(c["machine-config"]["mem_size_mib"], 256);
        let with_initrd = Boot {
            initrd: Some(PathBuf::from("/k/initramfs.cpio")),
            vcpus: 4,
            mem_mib: 1024,
            ..boot
        };
        let c = vm_config(&p, &drive, &with_initrd);
        assert_eq!(c["boot-source"]["initrd_path"], "/k/initramfs.cpio");
        assert_eq!(c["machine-config"]["vcpu_count"], 4);
        assert_eq!(c["machine-config"]["mem_size_mib"], 1024);
    }
}
