//! virtio-blk end to end: Osprey's test guest finds the device on PCI, initialises it, and drives
//! it from ring 3 (MMIO kicks, polled or MSI-X completions) while the iothread serves it. Each test
//! checks the guest's `BLK {...}` report field by field, and the backing file on the host where
//! bytes should have landed.

mod common;

use common::blk::{boot, read_at, run, run_config, Disk};
use serde_json::json;

#[test]
fn device_is_found_with_the_configured_shape() {
    let disk = Disk::new("shape", 32 << 20);
    let (status, r, log) = boot(
        &disk,
        json!({"num_queues": 4, "queue_size": 128}),
        "rw=read count=16",
    );
    assert_eq!(status, 0, "{r}\n{log}");
    assert_eq!(r["found"], true);
    assert_eq!(r["device"]["slot"], 1);
    assert_eq!(r["capacity_bytes"], 32 << 20);
    assert_eq!(r["num_queues"], 4);
    assert_eq!(r["queue_size"], 128);
    assert_eq!(r["seg_max"], 126);
    assert_eq!(r["serial"], "disk0");
    assert_eq!(r["serial_status"], 0);
    assert_eq!(r["ro"], false);
    let offered = u64::from_str_radix(
        r["features_offered"]
            .as_str()
            .expect("hex")
            .trim_start_matches("0x"),
        16,
    )
    .expect("features");
    for (bit, name) in [
        (32, "VERSION_1"),
        (29, "EVENT_IDX"),
        (28, "INDIRECT_DESC"),
        (12, "MQ"),
        (9, "FLUSH"),
        (13, "DISCARD"),
        (14, "WRITE_ZEROES"),
    ] {
        assert_ne!(
            offered & (1 << bit),
            0,
            "{name} must be offered: {offered:#x}"
        );
    }
    assert_eq!(
        offered & (1 << 5),
        0,
        "RO must not be offered for a writable drive"
    );
    assert!(log.contains("virtio-blk at 00:01.0"), "{log}");
}

#[test]
fn the_guest_reads_the_host_tsc_frequency_from_kvmclock() {
    let Some(host) = common::host_tsc_khz() else {
        eprintln!("skipped: KVM_GET_TSC_KHZ gives no frequency here");
        return;
    };
    let disk = Disk::new("kvmclock", 1 << 20);
    // No tsc_khz= on the command line: the guest asks KVM's pvclock.
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": common::test_guest(),
                        "boot_args": "mode=blk rw=read count=16"},
        "drives": [{"drive_id": "disk0", "path_on_host": disk.path}],
    });
    let (status, r, log) = run_config(&disk, &cfg, "kvmclock");
    assert_eq!(status, 0, "{r}\n{log}");
    assert_eq!(r["tsc_khz_source"], "kvmclock", "{r}");
    let guest = r["tsc_khz"].as_f64().expect("tsc_khz");
    // pvclock's multiplier carries 32 bits of fraction: within a kHz or so of KVM's figure.
    assert!(
        (guest - f64::from(host)).abs() <= f64::from(host) * 1e-4,
        "guest {guest} kHz against KVM's {host} kHz"
    );
}

#[test]
fn verify_passes_over_one_two_and_four_queues() {
    let disk = Disk::new("verify", 64 << 20);
    for queues in [1, 2, 4] {
        let args = format!("rw=verify queues={queues} qd=8 count=2000 bs=4096 seed={queues}");
        let (status, r, log) = boot(&disk, json!({"num_queues": 4}), &args);
        let m = run(&r, "main");
        assert_eq!(status, 0, "queues={queues}: {r}\n{log}");
        assert_eq!(r["queues_used"], queues);
        assert_eq!(m["errors"], 0, "queues={queues}: {m}");
        assert_eq!(m["mismatches"], 0, "queues={queues}: {m}");
        assert!(m["requests"].as_u64().expect("requests") >= 2000, "{m}");
        assert_eq!(m["timed_out"], false);
        // With EVENT_IDX and several requests in flight, the guest must not kick once per request.
        assert!(
            m["kicks"].as_u64().expect("kicks") < m["requests"].as_u64().expect("requests"),
            "{m}"
        );
    }
}

#[test]
fn interrupt_and_polled_completions_both_work() {
    let disk = Disk::new("irq", 16 << 20);
    let (status, r, log) = boot(&disk, json!({}), "rw=randread qd=16 count=3000 irq=1");
    let m = run(&r, "main");
    assert_eq!(status, 0, "{r}\n{log}");
    assert_eq!(r["msix"], true, "{r}");
    assert_eq!(
        (m["errors"].as_u64(), m["mismatches"].as_u64()),
        (Some(0), Some(0)),
        "{m}"
    );
    assert!(
        m["interrupts"].as_u64().expect("interrupts") > 0,
        "MSI-X must deliver: {m}"
    );
    assert_eq!(m["irq_wait_timeouts"], 0, "{m}");

    let (status, r, _) = boot(&disk, json!({}), "rw=randread qd=16 count=3000 irq=0");
    let m = run(&r, "main");
    assert_eq!(status, 0);
    assert_eq!(m["errors"], 0);
    assert_eq!(m["interrupts"], 0, "polled mode takes no interrupts: {m}");
}

#[test]
fn guest_pattern_lands_in_the_backing_file_at_its_offset() {
    let disk = Disk::new("pattern", 8 << 20);
    let lba = 1234u64;
    let (status, r, log) = boot(
        &disk,
        json!({}),
        &format!("rw=read count=1 pattern_lba={lba} pattern=c0ffee42"),
    );
    assert_eq!(status, 0, "{r}\n{log}");
    assert_eq!(r["pattern"]["status"], 0, "{r}");
    assert_eq!(r["pattern"]["bad_sectors"], 0, "{r}");
    let sectors = r["pattern"]["sectors"].as_u64().expect("sectors") as usize;
    assert!(sectors >= 1);
    let bytes = read_at(&disk.path, lba * 512, sectors * 512);
    let want: Vec<u8> = 0xc0ff_ee42u32
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(sectors * 512)
        .collect();
    assert_eq!(
        bytes, want,
        "the host file must hold the guest's pattern at LBA {lba}"
    );
    assert!(
        read_at(&disk.path, (lba - 1) * 512, 512)
            .iter()
            .all(|&b| b == 0),
        "the sector before is untouched"
    );
    assert!(
        read_at(&disk.path, (lba + sectors as u64) * 512, 512)
            .iter()
            .all(|&b| b == 0),
        "the sector after is untouched"
    );
}

#[test]
fn read_only_drive_answers_writes_with_ioerr_and_keeps_the_file() {
    let disk = Disk::new("ro", 4 << 20);
    std::fs::write(&disk.path, vec![0x77u8; 4 << 20]).expect("fill");
    let (status, r, log) = boot(&disk, json!({"is_read_only": true}), "rw=write count=8");
    assert_eq!(r["ro"], true, "{r}");
    let m = run(&r, "main");
    assert_eq!(m["requests"], 8, "{m}");
    assert_eq!(m["errors"], 8, "every write must fail: {m}");
    assert_ne!(status, 0, "the guest reports failure");
    assert!(log.contains("write to a read-only drive"), "{log}");
    assert!(
        read_at(&disk.path, 0, 4 << 20).iter().all(|&b| b == 0x77),
        "the file must be unchanged"
    );
}

#[test]
fn hostile_requests_get_their_status_and_the_vmm_keeps_serving() {
    let disk = Disk::new("hostile", 8 << 20);
    let (status, r, log) = boot(&disk, json!({}), "hostile=1 rw=verify count=64");
    assert_eq!(status, 0, "{r}\n{log}");
    let cases = r["hostile"].as_array().expect("hostile cases");
    let names: Vec<&str> = cases.iter().filter_map(|c| c["case"].as_str()).collect();
    for want in [
        "desc_addr_oob",
        "chain_too_long",
        "chain_loop",
        "data_wrong_dir",
        "status_zero_len",
        "past_end",
        "unknown_type",
    ] {
        assert!(names.contains(&want), "case {want} missing: {names:?}");
    }
    for c in cases {
        assert_eq!(c["ok"], true, "hostile case failed: {c}");
    }
    let status_of = |name: &str| {
        cases
            .iter()
            .find(|c| c["case"] == name)
            .map(|c| c["status"].clone())
    };
    assert_eq!(
        status_of("unknown_type"),
        Some(json!(2)),
        "UNSUPP for an unknown type"
    );
    assert_eq!(status_of("past_end"), Some(json!(1)), "IOERR past the end");
    assert_eq!(
        status_of("chain_loop"),
        Some(json!("needs_reset")),
        "a loop marks the device broken"
    );
    assert_eq!(
        r["hostile_post_ok"], true,
        "I/O works after the hostile requests: {r}"
    );
    let m = run(&r, "main");
    assert_eq!(
        (m["errors"].as_u64(), m["mismatches"].as_u64()),
        (Some(0), Some(0)),
        "{m}"
    );
    assert!(log.contains("the device needs a reset"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn reset_and_reinitialisation_work() {
    // Linux AIO too: its context must be destroyed on the iothread that made it, not on the
    // vCPU thread that takes the queues back (its seccomp filter has no io_destroy).
    for engine in ["Auto", "LinuxAio"] {
        let disk = Disk::new(&format!("reinit-{engine}"), 8 << 20);
        let (status, r, log) = boot(
            &disk,
            json!({"num_queues": 2, "io_engine": engine}),
            "rw=verify queues=2 qd=4 count=256 reinit=1",
        );
        assert_eq!(status, 0, "{engine}: {r}\n{log}");
        assert_eq!(r["reinit_ok"], true, "{engine}: {r}");
        assert!(r["resets"].as_u64().expect("resets") >= 1, "{r}");
        let again = run(&r, "reinit_verify");
        assert_eq!(
            (again["errors"].as_u64(), again["mismatches"].as_u64()),
            (Some(0), Some(0)),
            "{engine}: {again}"
        );
    }
}

#[test]
fn discard_write_zeroes_and_flush() {
    let disk = Disk::new("zeroes", 8 << 20);
    let (status, r, log) = boot(
        &disk,
        json!({}),
        "rw=write count=64 flush_every=8 discard=1 write_zeroes=1",
    );
    assert_eq!(status, 0, "{r}\n{log}");
    assert_eq!(r["discard"]["status"], 0, "{r}");
    assert_eq!(r["write_zeroes"]["status"], 0, "{r}");
    assert_eq!(
        r["write_zeroes"]["bad_sectors"], 0,
        "write-zeroes must read back as zeros: {r}"
    );
    let m = run(&r, "main");
    assert_eq!(m["errors"], 0, "{m}");
    assert_eq!(m["flushes"], 8, "{m}");
    let (off, n) = (
        r["write_zeroes"]["sector"].as_u64().expect("sector") * 512,
        r["write_zeroes"]["sectors"].as_u64().expect("n") as usize * 512,
    );
    assert!(
        read_at(&disk.path, off, n).iter().all(|&b| b == 0),
        "zeroed on the host too"
    );
}

#[test]
fn odd_sized_file_is_rounded_down_with_a_warning() {
    let disk = Disk::new("odd", 0);
    std::fs::write(&disk.path, vec![0u8; (1 << 20) + 100]).expect("write");
    let (status, r, log) = boot(&disk, json!({}), "rw=read count=4");
    assert_eq!(status, 0, "{log}");
    assert_eq!(r["capacity_bytes"], 1 << 20, "{r}");
    assert!(
        log.contains(
            "1048676 bytes is not a multiple of 512: the guest sees 1048576 bytes, the last 100 \
             are not visible to it"
        ),
        "{log}"
    );
}
