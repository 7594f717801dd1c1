//! The config's tests: parsing errors name the JSON path, values and start-up's preflight name
//! the field, and a config serialises back to the file's shape.

use super::*;

fn parse(json: &str) -> Result<VmConfig, ConfigError> {
    VmConfig::from_json(json, "vm.json")
}

/// Values, then start-up's preflight, as `osprey` checks a config.
fn check(c: &VmConfig) -> Result<crate::preflight::Preflight, ConfigError> {
    crate::preflight::check(c, 1024)
}

#[test]
fn defaults_fill_in() {
    let c = parse(r#"{"boot-source":{"kernel_image_path":"/k"}}"#).expect("parse");
    assert_eq!(
        c.machine,
        MachineConfig {
            vcpu_count: 1,
            mem_size_mib: 128,
            thread_weights: crate::thread_weights::ThreadWeights::Dynamic,
            thread_placement: crate::thread_placement::ThreadPlacement::Apart,
            vcpu_affinity: Vec::new(),
            smt: false,
            track_dirty_pages: false,
            cpu_template: None,
            huge_pages: None,
        }
    );
    assert_eq!(c.boot.kernel_image_path, PathBuf::from("/k"));
    assert!(c.drives.is_empty() && c.iothreads.is_empty() && c.api.is_none());
}

#[test]
fn unknown_field_names_its_path() {
    let e = parse(r#"{"boot-source":{"kernel_image_path":"/k"},"machine-config":{"vcpus":2}}"#)
        .expect_err("must fail");
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "vm.json: machine-config.vcpus: unknown field `vcpus`, expected one of \
             `vcpu_count`, `mem_size_mib`, `thread_weights`, `thread_placement`, `vcpu_affinity`"
        ),
        "{msg}"
    );
}

#[test]
fn wrong_type_names_its_path() {
    let e =
        parse(r#"{"boot-source":{"kernel_image_path":"/k"},"machine-config":{"vcpu_count":"2"}}"#)
            .expect_err("must fail");
    assert!(
        e.to_string()
            .starts_with("vm.json: machine-config.vcpu_count: invalid type"),
        "{e}"
    );
}

#[test]
fn bad_enum_lists_variants() {
    let e = parse(
        r#"{"boot-source":{"kernel_image_path":"/k"},"drives":[{"drive_id":"a","path_on_host":"/x","io_engine":"iouring"}]}"#,
    )
    .expect_err("must fail");
    let msg = e.to_string();
    assert!(
        msg.contains("drives[0].io_engine: unknown variant `iouring`"),
        "{msg}"
    );
    assert!(msg.contains("`IoUring`"), "{msg}");
}

#[test]
fn missing_boot_source_is_named() {
    let e = parse(r#"{}"#).expect_err("must fail");
    assert!(e.to_string().contains("missing field `boot-source`"), "{e}");
}

#[test]
fn validation_names_fields() {
    let kernel = std::env::current_exe().expect("exe");
    let mut c = parse(r#"{"boot-source":{"kernel_image_path":"/k"}}"#).expect("parse");
    c.boot.kernel_image_path = kernel;
    assert!(check(&c).is_ok());

    let mut z = c.clone();
    z.machine.vcpu_count = 0;
    assert_eq!(
        check(&z).expect_err("zero").to_string(),
        "machine-config.vcpu_count: must be between 1 and 64, got 0"
    );
    // firecracker-containerd's default on Intel: refused, saying what to set instead.
    let mut t2 = c.clone();
    t2.machine.cpu_template = Some("T2".into());
    let e = check(&t2).expect_err("T2").to_string();
    assert!(
        e.starts_with("machine-config.cpu_template: `T2` is not supported")
            && e.contains("set \"None\" or leave the field out")
            && e.contains("firecracker-containerd"),
        "{e}"
    );
    let mut none = c.clone();
    none.machine.cpu_template = Some("None".into());
    assert!(check(&none).is_ok());
    let mut small = c.clone();
    small.machine.mem_size_mib = 4;
    assert_eq!(
        check(&small).expect_err("small").to_string(),
        "machine-config.mem_size_mib: must be at least 16 MiB, got 4"
    );
    let mut big = c.clone();
    big.machine.mem_size_mib = 2048;
    assert!(check(&big)
        .expect_err("big")
        .to_string()
        .contains("more than the host"));
    let mut missing = c.clone();
    missing.boot.kernel_image_path = "/nonexistent/vmlinux".into();
    assert_eq!(
        check(&missing).expect_err("missing").to_string(),
        "boot-source.kernel_image_path: /nonexistent/vmlinux: No such file or directory (os error 2)"
    );
    let mut tab = c.clone();
    tab.boot.boot_args = "console=ttyS0\tquiet".into();
    assert!(check(&tab)
        .expect_err("tab")
        .to_string()
        .starts_with("boot-source.boot_args: only printable ASCII"));
    let mut long = c.clone();
    long.boot.boot_args = "x".repeat(arch::layout::CMDLINE_MAX_SIZE);
    assert!(check(&long)
        .expect_err("long")
        .to_string()
        .contains("bytes is longer than the"));
    let mut dup = c.clone();
    let t: IoThreadConfig = serde_json::from_str(r#"{"id":"io0"}"#).expect("iothread");
    assert_eq!(t.poll_max_ns, 32768);
    assert_eq!(t.max_batch, 32);
    dup.iothreads = vec![t.clone(), t.clone()];
    assert_eq!(
        check(&dup).expect_err("dup").to_string(),
        "iothreads[1].id: duplicate id `io0`"
    );
    let mut pinned = c.clone();
    let mut far = t;
    far.cpu_affinity = vec![100_000];
    pinned.iothreads = vec![far];
    let e = check(&pinned).expect_err("CPU 100000").to_string();
    assert!(
        e.starts_with(
            "iothreads[0].cpu_affinity: CPU 100000 is not available to Osprey (allowed: "
        ),
        "{e}"
    );
    let mut vcpus = c.clone();
    vcpus.machine.vcpu_count = 2;
    vcpus.machine.vcpu_affinity = vec![vec![], vec![100_000]];
    let e = check(&vcpus).expect_err("CPU 100000").to_string();
    assert!(
        e.starts_with(
            "machine-config.vcpu_affinity[1]: CPU 100000 is not available to Osprey (allowed: "
        ),
        "{e}"
    );
    let cpu0 = crate::affinity::allowed_cpus()[0];
    vcpus.machine.vcpu_affinity = vec![vec![cpu0], vec![cpu0], vec![cpu0]];
    assert_eq!(
        check(&vcpus).expect_err("3 entries").to_string(),
        "machine-config.vcpu_affinity: 3 entries for 2 vCPU(s): entry i pins vCPU i"
    );
    vcpus.machine.vcpu_affinity = vec![vec![cpu0]];
    check(&vcpus).expect("one entry for two vCPUs: the second is not pinned");
}

#[test]
fn the_snapshot_folder_is_checked_by_name() {
    let kernel = std::env::current_exe().expect("exe");
    let with_folder = |folder: &str| -> VmConfig {
        serde_json::from_value(serde_json::json!({
            "boot-source": {"kernel_image_path": kernel},
            "snapshot": {"folder": folder},
        }))
        .expect("config")
    };
    let tmp = std::env::temp_dir();
    assert!(check(&with_folder(&tmp.display().to_string())).is_ok());
    let file = kernel.display().to_string();
    for (folder, error) in [
        ("", "snapshot.folder: must name a folder".to_string()),
        (
            "/",
            "snapshot.folder: /: not the root folder nor a folder under /dev, /proc or /sys: \
             Osprey may create and overwrite any file beneath it"
                .to_string(),
        ),
        (
            "/dev/shm",
            "snapshot.folder: /dev/shm: not the root folder nor a folder under /dev, /proc or \
             /sys: Osprey may create and overwrite any file beneath it"
                .to_string(),
        ),
        (
            "/nonexistent/snaps",
            "snapshot.folder: /nonexistent/snaps: not an existing folder".to_string(),
        ),
        (
            &file,
            format!("snapshot.folder: {file}: not an existing folder"),
        ),
    ] {
        let e = check(&with_folder(folder)).expect_err(folder);
        assert_eq!(e.to_string(), error);
    }
    let unknown: Result<VmConfig, _> = parse(
        r#"{"boot-source":{"kernel_image_path":"/k"},"snapshot":{"folder":"/s","path":"/x"}}"#,
    );
    assert!(unknown
        .expect_err("unknown field")
        .to_string()
        .contains("snapshot.path"));
}

#[test]
fn drive_errors_name_the_field() {
    let kernel = std::env::current_exe().expect("exe");
    let disk = std::env::temp_dir().join(format!("osprey-cfg-disk-{}", std::process::id()));
    std::fs::write(&disk, vec![0u8; 8192]).expect("disk");
    let base = |drive: serde_json::Value, iothreads: serde_json::Value| -> VmConfig {
        let v = serde_json::json!({
            "boot-source": {"kernel_image_path": kernel},
            "drives": [drive],
            "iothreads": iothreads,
        });
        serde_json::from_value(v).expect("config")
    };
    let ok = base(
        serde_json::json!({"drive_id": "d0", "path_on_host": disk}),
        serde_json::json!([]),
    );
    assert!(check(&ok).is_ok());
    assert_eq!(ok.drives[0].num_queues, 1);
    assert_eq!(ok.drives[0].queue_size, 256);
    let cases = [
        (
            serde_json::json!({"drive_id": "d0", "path_on_host": disk, "queue_size": 100}),
            serde_json::json!([]),
            "drives[0].queue_size: must be a power of two from 2 to 1024, got 100",
        ),
        (
            serde_json::json!({"drive_id": "d0", "path_on_host": disk, "num_queues": 0}),
            serde_json::json!([]),
            "drives[0].num_queues: must be between 1 and 16, got 0",
        ),
        (
            serde_json::json!({"drive_id": "d0", "path_on_host": disk, "iothread": "io9"}),
            serde_json::json!([{"id": "io0"}]),
            "drives[0].iothread: unknown iothread `io9` (defined: io0)",
        ),
        (
            serde_json::json!({"drive_id": "d0", "path_on_host": disk}),
            serde_json::json!([{"id": "io0", "max_batch": 5000}]),
            "iothreads[0].max_batch: must be at most 1024 (0 means the default, 32), got 5000",
        ),
        (
            serde_json::json!({"drive_id": "a b", "path_on_host": disk}),
            serde_json::json!([]),
            "drives[0].drive_id: must be 1-64 characters of A-Z, a-z, 0-9, - and _",
        ),
    ];
    for (drive, threads, want) in cases {
        assert_eq!(
            check(&base(drive, threads)).expect_err(want).to_string(),
            want
        );
    }
    let mut dup = ok.clone();
    dup.drives.push(dup.drives[0].clone());
    assert_eq!(
        check(&dup).expect_err("dup").to_string(),
        "drives[1].drive_id: duplicate id `d0`"
    );
    let mut missing = ok.clone();
    missing.drives[0].path_on_host = "/nonexistent/disk.img".into();
    assert_eq!(
        check(&missing).expect_err("missing").to_string(),
        "drives[0].path_on_host: /nonexistent/disk.img: No such file or directory (os error 2)"
    );
    std::fs::remove_file(disk).ok();
}

#[test]
fn serialises_back_to_the_file_shape() {
    let c = parse(r#"{"boot-source":{"kernel_image_path":"/k","boot_args":"x"}}"#).expect("parse");
    let v = serde_json::to_value(&c).expect("to json");
    assert_eq!(v["machine-config"]["vcpu_count"], 1);
    assert_eq!(v["boot-source"]["boot_args"], "x");
    let again: VmConfig = serde_json::from_value(v).expect("round trip");
    assert_eq!(again, c);
}
