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
    assert!(stdout.is_empty(), "nothing on the console: {stdout}");
    assert!(
        !stderr.contains("KVM:"),
        "no KVM resource may exist yet: {stderr}"
    );
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
            "machine-config.vcpu_count: invalid type: string \"two\", expected u8".into(),
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
            "machine-config.mem_size_mib: invalid value: integer `-5`, expected u64".into(),
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
        "osprey: error: machine-config.vcpu_count: must be between 1 and 64, got 0",
    );
    let small = s.file(
        "small.json",
        &with_kernel(r#","machine-config":{"mem_size_mib":8}"#),
    );
    expect_error(
        &["--config".as_ref(), small.as_os_str()],
        "osprey: error: machine-config.mem_size_mib: must be at least 16 MiB, got 8",
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
        stderr.starts_with(
            "osprey: error: machine-config.mem_size_mib: 100000000 MiB is more than the host's"
        ),
        "{stderr}"
    );
    let nokernel = s.file(
        "nokernel.json",
        r#"{"boot-source":{"kernel_image_path":"/nonexistent/vmlinux"}}"#,
    );
    expect_error(
        &["--config".as_ref(), nokernel.as_os_str()],
        "osprey: error: boot-source.kernel_image_path: /nonexistent/vmlinux: No such file or directory (os error 2)",
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
        "osprey: error: boot-source.initrd_path: /nonexistent/initrd: No such file or directory (os error 2)",
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
            "osprey: error: boot-source.kernel_image_path: {}: is a directory",
            s.0.display()
        ),
    );
}

#[test]
fn flag_errors() {
    let k = test_guest();
    expect_error(
        &[
            "--kernel".as_ref(),
            k.as_os_str(),
            "--cpus".as_ref(),
            "0".as_ref(),
        ],
        "osprey: error: machine-config.vcpu_count: must be between 1 and 64, got 0",
    );
    expect_error(
        &[],
        "osprey: error: --config: give a config file with --config FILE, or a kernel with --kernel PATH",
    );
    // clap's own errors (unknown flag, bad number) also exit 2.
    let (status, _, stderr) = run_to_exit(["--cpus", "many"], Duration::from_secs(10));
    assert_eq!(status.code(), Some(2));
    assert!(
        stderr.contains("invalid value 'many' for '--cpus <N>'"),
        "{stderr}"
    );
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
    let (status, stdout, _) = run_to_exit(["--version"], Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        stdout.trim(),
        format!("osprey {}", env!("CARGO_PKG_VERSION"))
    );
}
