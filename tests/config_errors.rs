//! Every bad configuration gives a one-line error naming the field or path, exit status 2, and
//! happens before any KVM resource exists (the KVM start-up line is never logged).

mod common;

use std::time::Duration;

use common::scratch::Scratch;
use common::{run_to_exit, test_guest};

/// Runs osprey with `args`, expects status 2 and exactly one stderr line equal to `expected`.
fn expect_error(args: &[&std::ffi::OsStr], expected: &str) {
    let (status, stdout, stderr) = run_to_exit(args, Duration::from_secs(10));
    assert_eq!(status.code(), Some(2), "args {args:?}\nstderr: {stderr}");
    assert_eq!(stderr.trim_end(), expected, "args {args:?}");
    assert_speaks_json(&stderr);
    assert!(stdout.is_empty(), "nothing on the console: {stdout}");
    assert!(
        !stderr.contains("KVM:"),
        "no KVM resource may exist yet: {stderr}"
    );
}

/// No message names a Rust type (`u8`, `struct X`) or prints a Debug dump (`Some(`, `{ `).
fn assert_speaks_json(stderr: &str) {
    for line in stderr.lines() {
        assert!(
            !vmm::test_utils::messages::names_a_rust_type(line),
            "a message in Rust's words, not the config's: {line}"
        );
    }
}

fn with_kernel(json_rest: &str) -> String {
    let k = test_guest();
    format!(
        r#"{{"boot-source":{{"kernel_image_path":"{}"}}{json_rest}}}"#,
        k.display()
    )
}

#[test]
fn file_errors_name_the_file_and_field() {
    let s = Scratch::new("cfgerr-file");
    let missing = s.0.join("absent.json");
    expect_error(
        &["--config".as_ref(), missing.as_os_str()],
        &format!(
            "osprey: error: {}: No such file or directory (os error 2)",
            missing.display()
        ),
    );

    let cases: Vec<(&str, String, String)> = vec![
        (
            "unknown.json",
            with_kernel(r#","machine-config":{"vcpu_count":1,"memory":64}"#),
            "machine-config.memory: unknown field `memory`, expected one of `vcpu_count`, \
             `mem_size_mib`, `thread_weights`"
                .into(),
        ),
        (
            "type.json",
            with_kernel(r#","machine-config":{"vcpu_count":"two"}"#),
            "machine-config.vcpu_count: invalid type: string \"two\", expected an integer from 0 to 255".into(),
        ),
        (
            "syntax.json",
            "{\"boot-source\": {".into(),
            "boot-source: EOF while parsing an object".into(),
        ),
        (
            "engine.json",
            with_kernel(r#","drives":[{"drive_id":"d0","path_on_host":"/tmp/x","io_engine":"iouring"}]"#),
            "drives[0].io_engine: unknown variant `iouring`, expected one of `Sync`, `IoUring`, `LinuxAio`, `Null`".into(),
        ),
        (
            "negative.json",
            with_kernel(r#","machine-config":{"mem_size_mib":-5}"#),
            "machine-config.mem_size_mib: invalid value: number -5, expected an integer from 0 to 18446744073709551615".into(),
        ),
        (
            "float.json",
            with_kernel(r#","machine-config":{"mem_size_mib":1e20}"#),
            "machine-config.mem_size_mib: invalid type: number 1e+20, expected an integer from 0 to 18446744073709551615".into(),
        ),
        (
            "object.json",
            with_kernel(r#","drives":[{"drive_id":"d0","path_on_host":"/tmp/x","rate_limiter":"fast"}]"#),
            "drives[0].rate_limiter: invalid type: string \"fast\", expected an object".into(),
        ),
    ];
    for (name, text, expected_tail) in cases {
        let p = s.file(name, &text);
        let (status, _, stderr) = run_to_exit(
            ["--config".as_ref(), p.as_os_str()],
            Duration::from_secs(10),
        );
        assert_eq!(status.code(), Some(2), "{name}: {stderr}");
        let prefix = format!("osprey: error: {}: {expected_tail}", p.display());
        assert!(
            stderr.starts_with(&prefix),
            "{name}:\n got: {stderr}\nwant: {prefix}…"
        );
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{name}: one line: {stderr}"
        );
        assert!(!stderr.contains("KVM:"), "{name}: {stderr}");
        assert_speaks_json(&stderr);
    }
}

#[test]
fn value_errors_name_the_field() {
    let s = Scratch::new("cfgerr-values");
    let zero = s.file(
        "zero.json",
        &with_kernel(r#","machine-config":{"vcpu_count":0}"#),
    );
    expect_error(
        &["--config".as_ref(), zero.as_os_str()],
        &format!(
            "osprey: error: {}: machine-config.vcpu_count: must be between 1 and 64, got 0",
            zero.display()
        ),
    );
    let small = s.file(
        "small.json",
        &with_kernel(r#","machine-config":{"mem_size_mib":8}"#),
    );
    expect_error(
        &["--config".as_ref(), small.as_os_str()],
        &format!(
            "osprey: error: {}: machine-config.mem_size_mib: must be at least 16 MiB, got 8",
            small.display()
        ),
    );
    let huge = s.file(
        "huge.json",
        &with_kernel(r#","machine-config":{"mem_size_mib":100000000}"#),
    );
    let (status, _, stderr) = run_to_exit(
        ["--config".as_ref(), huge.as_os_str()],
        Duration::from_secs(10),
    );
    assert_eq!(status.code(), Some(2));
    assert!(
        stderr.starts_with(&format!(
            "osprey: error: {}: machine-config.mem_size_mib: 100000000 MiB is more than the host's",
            huge.display()
        )),
        "{stderr}"
    );
    let nokernel = s.file(
        "nokernel.json",
        r#"{"boot-source":{"kernel_image_path":"/nonexistent/vmlinux"}}"#,
    );
    expect_error(
        &["--config".as_ref(), nokernel.as_os_str()],
        &format!(
            "osprey: error: {}: boot-source.kernel_image_path: /nonexistent/vmlinux: No such file or directory (os error 2)",
            nokernel.display()
        ),
    );
    let noinitrd = s.file(
        "noinitrd.json",
        &format!(
            r#"{{"boot-source":{{"kernel_image_path":"{}","initrd_path":"/nonexistent/initrd"}}}}"#,
            test_guest().display()
        ),
    );
    expect_error(
        &["--config".as_ref(), noinitrd.as_os_str()],
        &format!(
            "osprey: error: {}: boot-source.initrd_path: /nonexistent/initrd: No such file or directory (os error 2)",
            noinitrd.display()
        ),
    );
    let dir_kernel = s.file(
        "dir.json",
        &format!(
            r#"{{"boot-source":{{"kernel_image_path":"{}"}}}}"#,
            s.0.display()
        ),
    );
    expect_error(
        &["--config".as_ref(), dir_kernel.as_os_str()],
        &format!(
            "osprey: error: {}: boot-source.kernel_image_path: {}: is a directory",
            dir_kernel.display(),
            s.0.display()
        ),
    );
}

#[test]
fn flag_errors() {
    // Without any flag Osprey serves Firecracker's socket (tests/firecracker_compat.rs); a
    // check has nothing to check.
    expect_error(
        &["--check-config".as_ref()],
        "osprey: error: --config: give a config file with --config FILE, a kernel with --kernel PATH, or an API socket with --api-sock PATH to configure the VM over the API",
    );
    // clap's own errors (unknown flag, bad number) also exit 2, and say the range.
    for (args, want) in [
        (["--cpus", "many"], "invalid value 'many' for '--cpus <N>': must be a whole number from 1 to 64, got many"),
        (["--cpus", "-1"], "invalid value '-1' for '--cpus <N>': must be a whole number from 1 to 64, got -1"),
        (["--cpus", "0"], "invalid value '0' for '--cpus <N>': must be a whole number from 1 to 64, got 0"),
        (["--cpus", "65"], "invalid value '65' for '--cpus <N>': must be a whole number from 1 to 64, got 65"),
        (["--memory", "-4"], "invalid value '-4' for '--memory <MIB>': must be a whole number of MiB, at least 16, got -4"),
        (["--uid", "-1"], "invalid value '-1' for '--uid <UID>': must be a whole number from 0 to 4294967294, got -1"),
    ] {
        let (status, _, stderr) = run_to_exit(args, Duration::from_secs(10));
        assert_eq!(status.code(), Some(2), "{args:?}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert_speaks_json(&stderr);
    }
}

/// `--sandbox strict` with `--seccomp off` is refused at check time, as start-up refuses it.
#[test]
fn a_strict_sandbox_without_seccomp_is_a_config_error() {
    let k = test_guest();
    for check in [true, false] {
        let mut args = vec![
            "--kernel".as_ref(),
            k.as_os_str(),
            "--sandbox".as_ref(),
            "strict".as_ref(),
            "--seccomp".as_ref(),
            "off".as_ref(),
        ];
        if check {
            args.push("--check-config".as_ref());
        }
        let (status, _, stderr) = run_to_exit(&args, Duration::from_secs(10));
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(
                "osprey: error: sandbox.mode: --sandbox strict: seccomp is off (--seccomp off)"
            ),
            "{stderr}"
        );
        assert!(!stderr.contains("KVM:"), "{stderr}");
    }
}

/// A minimal x86-64 ELF whose one PT_LOAD segment spans `memsz` bytes from 1 MiB.
fn elf_kernel(memsz: u64) -> Vec<u8> {
    let mut b = vec![0u8; 64 + 56];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // program headers right after
    b[54..56].copy_from_slice(&56u16.to_le_bytes());
    b[56..58].copy_from_slice(&1u16.to_le_bytes());
    b[64..68].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    b[64 + 24..64 + 32].copy_from_slice(&0x10_0000u64.to_le_bytes());
    b[64 + 40..64 + 48].copy_from_slice(&memsz.to_le_bytes());
    b
}

/// A file that is not a kernel (random bytes, a disk image) is refused with exit 2, naming
/// `boot-source.kernel_image_path`, by `--check-config` and by a start alike, before KVM.
#[test]
fn a_file_that_is_not_a_kernel_is_refused_before_kvm() {
    let s = Scratch::new("cfgerr-notkernel");
    let garbage = s.0.join("garbage.bin");
    let bytes: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&garbage, bytes).expect("garbage");
    let disk = s.sparse("disk.img", 64 << 20);
    for kernel in [&garbage, &disk] {
        let want = format!(
            "osprey: error: boot-source.kernel_image_path: {}: not a kernel: neither an ELF \
             (vmlinux, or an ELF with a PVH note) nor a bzImage",
            kernel.display()
        );
        expect_error(
            &[
                "--kernel".as_ref(),
                kernel.as_os_str(),
                "--check-config".as_ref(),
            ],
            &want,
        );
        expect_error(&["--kernel".as_ref(), kernel.as_os_str()], &want);
        let cfg = s.file(
            "notkernel.json",
            &format!(
                r#"{{"boot-source":{{"kernel_image_path":"{}"}}}}"#,
                kernel.display()
            ),
        );
        expect_error(
            &["--config".as_ref(), cfg.as_os_str()],
            &format!(
                "osprey: error: {}: {}",
                cfg.display(),
                &want["osprey: error: ".len()..]
            ),
        );
    }
}

/// `--check-config` refuses what start-up would refuse (a kernel or initrd too big for guest
/// memory, an API socket another process serves), warns about what start-up would warn about
/// (a disk size that is not a multiple of 512), and prints every effective value: the drive's
/// iothread, the implicit iothread, every path absolute (relative ones from the file's folder).
#[test]
fn check_config_finds_what_start_up_would_refuse_or_warn() {
    let s = Scratch::new("cfgerr-host");
    let check = |cfg: &std::path::Path| {
        let mut cmd = std::process::Command::new(common::osprey());
        cmd.arg("--config")
            .arg(cfg)
            .arg("--check-config")
            .current_dir("/");
        let out = common::output_within(cmd, Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_speaks_json(&stderr);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        )
    };
    let k = test_guest();

    // A disk of 8 KiB + 100 bytes, named relative to the config's folder.
    std::fs::write(s.0.join("odd.img"), vec![0u8; 8192 + 100]).expect("disk");
    let cfg = s.file(
        "odd.json",
        &format!(
            r#"{{"boot-source":{{"kernel_image_path":"{}"}},
                "drives":[{{"drive_id":"d0","path_on_host":"odd.img"}}]}}"#,
            k.display()
        ),
    );
    let (code, stdout, stderr) = check(&cfg);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("drives[0].path_on_host:")
            && stderr.contains("8292 bytes is not a multiple of 512: the guest sees 8192 bytes"),
        "the boot-time warning appears at check time: {stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["drives"][0]["iothread"], "io0", "{v}");
    assert_eq!(v["iothreads"][0]["id"], "io0", "{v}");
    assert_eq!(v["iothreads"][0]["poll_policy"], "Adaptive", "{v}");
    assert_eq!(
        v["drives"][0]["path_on_host"].as_str(),
        Some(s.0.join("odd.img").to_str().expect("utf8")),
        "relative to the config's folder, printed absolute"
    );
    assert_eq!(v["boot-source"]["kernel_image_path"].as_str(), k.to_str());

    // More vCPUs than host CPUs: start-up's warning, at check time.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) + 1;
    if cpus <= 64 {
        let mut cmd = std::process::Command::new(common::osprey());
        cmd.arg("--kernel")
            .arg(&k)
            .arg("--cpus")
            .arg(cpus.to_string())
            .arg("--check-config");
        let out = common::output_within(cmd, Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "machine-config.vcpu_count: {cpus} vCPUs is more than the"
            )),
            "{stderr}"
        );
    }

    // An API socket another process serves.
    let sock = s.0.join("busy.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    let cfg = s.file(
        "busy.json",
        &format!(
            r#"{{"boot-source":{{"kernel_image_path":"{}"}},"api":{{"socket":"busy.sock"}}}}"#,
            k.display()
        ),
    );
    let (code, _, stderr) = check(&cfg);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "osprey: error: {}: api.socket: {}: another running process serves this socket",
            cfg.display(),
            sock.display()
        )),
        "{stderr}"
    );

    // An initrd bigger than the guest's memory above the kernel.
    let initrd = s.sparse("big-initrd.img", 120 << 20);
    let cfg = s.file(
        "initrd.json",
        &format!(
            r#"{{"machine-config":{{"mem_size_mib":128}},
                "boot-source":{{"kernel_image_path":"{}","initrd_path":"{}"}}}}"#,
            k.display(),
            initrd.display()
        ),
    );
    let (code, _, stderr) = check(&cfg);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("boot-source.initrd_path: ")
            && stderr.contains("the initrd is 120 MiB, but only"),
        "{stderr}"
    );

    // A kernel that needs more memory than the guest has.
    let big = s.0.join("big-kernel.elf");
    std::fs::write(&big, elf_kernel(200 << 20)).expect("elf");
    let cfg = s.file(
        "kernel.json",
        &format!(
            r#"{{"machine-config":{{"mem_size_mib":128}},"boot-source":{{"kernel_image_path":"{}"}}}}"#,
            big.display()
        ),
    );
    let (code, _, stderr) = check(&cfg);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("boot-source.kernel_image_path: ")
            && stderr
                .contains("the kernel needs guest memory up to 201 MiB, but the guest has 128 MiB"),
        "{stderr}"
    );
}

/// Every example in examples/ passes `--check-config` from another directory: paths in a config
/// file are taken from the file's folder.
#[test]
fn every_example_checks_from_any_directory() {
    let root = common::repo_root();
    test_guest();
    common::example_disk();
    common::linux::fetch_kernel();
    let mut examples: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 3, "{examples:?}");
    for example in examples {
        let mut cmd = std::process::Command::new(common::osprey());
        cmd.arg("--config")
            .arg(&example)
            .arg("--check-config")
            .current_dir(std::env::temp_dir());
        let out = common::output_within(cmd, Duration::from_secs(10));
        assert!(
            out.status.success(),
            "{}: {}",
            example.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `rate-limit-groups` is the section's name, as the other sections and the API path are;
/// the old `rate_limit_groups` is still read, with a warning that says the new name.
#[test]
fn sections_are_kebab_case_and_the_old_name_warns() {
    let s = Scratch::new("cfgerr-kebab");
    let group = r#"[{"id":"g","ops":{"size":100,"refill_time":1000}}]"#;
    for (name, key, warns) in [
        ("new", "rate-limit-groups", false),
        ("old", "rate_limit_groups", true),
    ] {
        let cfg = s.file(
            &format!("{name}.json"),
            &with_kernel(&format!(
                r#","{key}":{group},"drives":[{{"drive_id":"d0","path_on_host":"{}","rate_limit_group":"g"}}]"#,
                s.sparse("d.img", 1 << 20).display()
            )),
        );
        let (status, stdout, stderr) = run_to_exit(
            [
                "--config".as_ref(),
                cfg.as_os_str(),
                "--check-config".as_ref(),
            ],
            Duration::from_secs(10),
        );
        assert_eq!(status.code(), Some(0), "{key}: {stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
        assert_eq!(v["rate-limit-groups"][0]["id"], "g", "{key}: {v}");
        assert_eq!(
            stderr.contains("the section is now spelled `rate-limit-groups`"),
            warns,
            "{key}: {stderr}"
        );
    }
}

#[test]
fn check_config_prints_effective_values() {
    let s = Scratch::new("cfgerr-check");
    let p = s.file("ok.json", &with_kernel(r#","iothreads":[{"id":"io0"}]"#));
    let (status, stdout, stderr) = run_to_exit(
        [
            "--config".as_ref(),
            p.as_os_str(),
            "--check-config".as_ref(),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["machine-config"]["vcpu_count"], 1);
    assert_eq!(v["machine-config"]["mem_size_mib"], 128);
    assert_eq!(v["iothreads"][0]["poll_max_ns"], 32768);
    assert_eq!(v["iothreads"][0]["max_batch"], 32);
}

#[test]
fn help_and_version() {
    let (status, stdout, _) = run_to_exit(["--help"], Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    for flag in [
        "--config",
        "--kernel",
        "--initrd",
        "--cmdline",
        "--cpus",
        "--memory",
        "--check-config",
        "--log-level",
    ] {
        assert!(
            stdout.contains(flag),
            "--help must explain {flag}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("0xf4"),
        "--help must explain exit statuses:\n{stdout}"
    );
    // Every top-level section of the config, as the config type writes them.
    let full = vmm::config::VmConfig {
        rate_limit_groups: vec![serde_json::from_str(r#"{"id":"g"}"#).expect("group")],
        api: Some(vmm::config::ApiConfig {
            socket: "/s".into(),
        }),
        metrics: Some(serde_json::from_str(r#"{"path":"/m"}"#).expect("metrics")),
        snapshot: Some(vmm::config::SnapshotConfig {
            folder: "/srv/snaps".into(),
        }),
        ..Default::default()
    };
    let sections = serde_json::to_value(&full).expect("json");
    let sections: Vec<&String> = sections.as_object().expect("object").keys().collect();
    assert_eq!(sections.len(), 9, "{sections:?}");
    for section in sections {
        assert!(
            stdout.contains(section.as_str()),
            "--help must name the config section {section}:\n{stdout}"
        );
    }
    let (status, api_help, _) = run_to_exit(["api", "--help"], Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert!(
        api_help.contains("Change a running VM (iothreads, drives, rate-limit groups)"),
        "{api_help}"
    );
    assert!(api_help.contains("OSPREY_API_SOCK"), "{api_help}");
    let (status, stdout, _) = run_to_exit(["--version"], Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        stdout.trim(),
        format!(
            "osprey {} (Firecracker API v{})",
            env!("CARGO_PKG_VERSION"),
            vmm::identity::FIRECRACKER_API_VERSION
        )
    );
}

/// `osprey api` takes its socket from `OSPREY_API_SOCK` when `--api-sock` is not given.
#[test]
fn the_api_socket_comes_from_the_environment() {
    let s = Scratch::new("cfgerr-env");
    let sock = s.0.join("absent.sock");
    let mut cmd = std::process::Command::new(common::osprey());
    cmd.args(["api", "get", "/"]).env("OSPREY_API_SOCK", &sock);
    let out = common::output_within(cmd, Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "not a usage error: {stderr}");
    assert!(stderr.contains(&sock.display().to_string()), "{stderr}");
    let mut cmd = std::process::Command::new(common::osprey());
    cmd.args(["api", "get", "/"]).env_remove("OSPREY_API_SOCK");
    let out = common::output_within(cmd, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "without either, a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-sock"));
}
