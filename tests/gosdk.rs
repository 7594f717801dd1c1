//! Osprey under an orchestrator's client that its authors did not write: the unmodified
//! firecracker-go-sdk v1.0.0 (the library under firecracker-containerd, flintlock and Ignite)
//! boots Osprey's test guest with a root drive, a second drive, a vsock (`VsockDevices`) and a
//! network interface on a tap of the test's own (`NetworkInterfaces` with a
//! `StaticNetworkConfiguration`: tap name and MAC), pauses and resumes it, swaps the second
//! drive's file with `UpdateGuestDrive` while the guest reads it, reaches the guest's agent port
//! through the vsock as firecracker-containerd does (`CONNECT 10789`, a line starting `OK `
//! within 1 s, retried) and checks the echo, pings the guest through the tap, reads the metrics
//! file it configured, and shuts it down with `Shutdown` then `StopVMM`. One boot: the guest's
//! `mode=blk ... hang=3` reads the drive, then serves the agent's vsock port and the ping
//! (`mode=agent`'s services). Where no tap can be made (not root) or iputils' `ping` is missing,
//! the network interface or the ping is left out with a `NOT RUN` line for that part.
//!
//! The client is the Go program in `tests/gosdk/` (its go.mod and go.sum pin the SDK and every
//! dependency). This test builds it with the `go` found on PATH or in the usual install places
//! (the module cache and `GOPROXY` are Go's own, from the environment), runs it against the
//! `osprey` binary cargo built for this test, and fails when it fails, with its step-by-step
//! output. Where no Go toolchain is found, or the modules cannot be fetched, it prints a
//! `NOT RUN` line with the reason and passes (.ci/run makes Go available where it can).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::stamp::write_stamp_file;
use common::tap::{have_ping, TestTap};
use common::{osprey, output_within, repo_root, test_guest};
use serde_json::{json, Value};

/// The oldest Go that builds the program (the `go` line of tests/gosdk/go.mod; built with 1.20
/// and 1.26). Debian 12's golang-go (1.19) is older.
const MIN_GO_MINOR: u32 = 20;
/// Fetching the modules on a cold cache (about 30 modules, ~125 MB).
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(180);
/// A cold `go build` compiles the SDK and its dependencies (~25-30 s on 2 cores); warm, under 1 s.
const BUILD_TIMEOUT: Duration = Duration::from_secs(240);
/// The Go program's run; it limits itself to 55 s (`-timeout`).
const RUN_TIMEOUT: Duration = Duration::from_secs(70);

/// The second drive's files: stamped with tag A at boot, then B (larger, so the guest sees the
/// capacity change too); `common::stamp` writes them, the guest's `rw=stamp` checks every sector.
const TAG_A: u32 = 0xA1;
const TAG_B: u32 = 0xB2;
const A_BYTES: u64 = 4 << 20;
const B_BYTES: u64 = 6 << 20;
/// firecracker-containerd's agent port (`defaultVSockPort`); the guest echoes on it.
const AGENT_PORT: u32 = 10789;

/// A `go` command and its version: `OSPREY_GO` when set (a path, e.g. another Go version), else
/// `go` from PATH or the usual install places; `Err` says why none.
fn find_go() -> Result<(PathBuf, String), String> {
    let candidates = match std::env::var_os("OSPREY_GO") {
        Some(go) => vec![PathBuf::from(go)],
        None => {
            let mut found = vec![PathBuf::from("go"), PathBuf::from("/usr/local/go/bin/go")];
            if let Some(home) = std::env::var_os("HOME") {
                found.push(Path::new(&home).join("go/bin/go"));
            }
            found.push(PathBuf::from("/usr/lib/go/bin/go"));
            found
        }
    };
    let mut too_old = Vec::new();
    for go in candidates {
        let Ok(out) = Command::new(&go).arg("version").output() else {
            continue;
        };
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match go_minor(&version) {
            Some(minor) if out.status.success() && minor >= MIN_GO_MINOR => {
                return Ok((go, version));
            }
            _ => too_old.push(format!("{} ({version})", go.display())),
        }
    }
    if too_old.is_empty() {
        Err("no Go toolchain: `go` is not on PATH nor in /usr/local/go/bin (or OSPREY_GO)".into())
    } else {
        Err(format!(
            "no Go 1.{MIN_GO_MINOR} or newer; found {}",
            too_old.join(", ")
        ))
    }
}

/// The minor version in `go version`'s answer (`go version go1.26.8 linux/amd64` → 26).
fn go_minor(version: &str) -> Option<u32> {
    let v = version.split_whitespace().nth(2)?.strip_prefix("go1.")?;
    v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// `go <args>` in tests/gosdk.
fn go_command(go: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(go);
    cmd.args(args).current_dir(repo_root().join("tests/gosdk"));
    cmd
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Builds the Go program into `dir`; `Err` (a NOT RUN reason) when the modules cannot be fetched.
fn build_client(go: &Path, dir: &Path) -> Result<PathBuf, String> {
    let t0 = Instant::now();
    let download = output_within(go_command(go, &["mod", "download"]), DOWNLOAD_TIMEOUT);
    if !download.status.success() {
        return Err(format!(
            "the Go modules could not be fetched (GOPROXY={}): {}",
            std::env::var("GOPROXY").unwrap_or_else(|_| "Go's default".into()),
            text(&download).trim()
        ));
    }
    let bin = dir.join("gosdk-client");
    let bin_arg = bin.to_string_lossy().into_owned();
    // -buildvcs=false: the checkout may be a git worktree or a tarball Go cannot stamp.
    let build = output_within(
        go_command(go, &["build", "-buildvcs=false", "-o", &bin_arg, "."]),
        BUILD_TIMEOUT,
    );
    assert!(
        build.status.success(),
        "go build of tests/gosdk failed:\n{}",
        text(&build)
    );
    println!("built tests/gosdk in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(bin)
}

/// The guest's workload: read the second virtio-blk device (`dev=1`: the root drive is the first,
/// as in Firecracker) at QD8, check each sector's stamp, print a `stamp tag=` line when the tag
/// changes, end the run 1000 requests after tag B shows, print the BLK line, then stay up
/// (`hang=3`) as the agent's stand-in: the vsock echo on `AGENT_PORT` and, with `guest_ip`, the
/// answers to ping.
fn guest_args(guest_ip: Option<&str>) -> String {
    let ip = guest_ip.map(|ip| format!(" ip={ip}")).unwrap_or_default();
    format!(
        "mode=blk dev=1 rw=stamp bs=4096 qd=8 count=4000000000 range={A_BYTES} \
         stamp_until={TAG_B} timeout_ms=20000 hang=3 port={AGENT_PORT}{ip}"
    )
}

#[test]
fn firecracker_go_sdk_boots_pauses_swaps_a_drive_reaches_vsock_and_nic_and_stops_osprey() {
    let (go, version) = match find_go() {
        Ok(found) => found,
        Err(reason) => {
            println!("NOT RUN: firecracker-go-sdk test ({reason})");
            return;
        }
    };
    let scratch = Scratch::new("gosdk");
    let client = match build_client(&go, &scratch.0) {
        Ok(bin) => bin,
        Err(reason) => {
            println!("NOT RUN: firecracker-go-sdk test ({reason})");
            return;
        }
    };
    println!("using {version}");

    // Every file in one folder with the API socket, as a jailer's user puts them in the jail:
    // with the sandbox on, the pre-boot API takes paths in the socket's folder (and the
    // operator's --allow-folder ones), and the swapped-in file sits beside the drive's first
    // (docs/security.md). The kernel is copied in.
    let kernel = scratch.0.join("test-guest.elf");
    std::fs::copy(test_guest(), &kernel).expect("copy the kernel into the VM's folder");
    let root = scratch.sparse("root.img", 1 << 20);
    let data = scratch.0.join("data-a.img");
    write_stamp_file(&data, TAG_A, A_BYTES);
    let swap_to = scratch.0.join("data-b.img");
    write_stamp_file(&swap_to, TAG_B, B_BYTES);
    let tap = TestTap::create(0);
    if tap.is_none() {
        println!("NOT RUN (network interface and ping): cannot create a tap (needs root and /dev/net/tun)");
    }
    let ping = tap.as_ref().filter(|_| have_ping());
    if tap.is_some() && ping.is_none() {
        println!("NOT RUN (ping): iputils' ping is not installed");
    }
    let mut cmd = Command::new(&client);
    cmd.arg("-osprey")
        .arg(osprey())
        .arg("-kernel")
        .arg(&kernel)
        .arg("-root")
        .arg(&root)
        .arg("-data")
        .arg(&data)
        .arg("-swap-to")
        .arg(&swap_to)
        .arg("-workdir")
        .arg(&scratch.0)
        .arg("-kernel-args")
        .arg(guest_args(ping.map(|t| t.guest_ip.as_str())))
        .arg("-vsock")
        .arg(scratch.0.join("firecracker.vsock"))
        .arg("-vsock-port")
        .arg(AGENT_PORT.to_string())
        .arg("-report")
        .arg(format!("^osprey-test-guest: stamp tag={TAG_A} "))
        .arg("-after-swap")
        .arg(format!(
            "^osprey-test-guest: stamp tag={TAG_B} capacity_bytes={B_BYTES} "
        ))
        .args(["-final", "^BLK "]);
    if let Some(tap) = &tap {
        cmd.args(["-tap", &tap.name, "-mac", &tap.guest_mac]);
    }
    if let Some(tap) = ping {
        cmd.args(["-ping", &tap.guest_ip]);
    }
    let t0 = Instant::now();
    let out = output_within(cmd, RUN_TIMEOUT);
    let said = text(&out);
    assert!(
        out.status.success(),
        "the firecracker-go-sdk client failed ({}):\n{said}",
        out.status
    );
    assert!(said.contains("gosdk: PASS"), "no PASS line:\n{said}");
    assert!(
        said.contains(&format!("CONNECT {AGENT_PORT} answered OK")),
        "the agent's port was not reached:\n{said}"
    );
    if ping.is_some() {
        assert!(said.contains(" 0% packet loss"), "no ping:\n{said}");
    }

    // What the guest read, from its BLK line (echoed by the client as `guest| BLK {...}`):
    // tag A then tag B, every sector right, every request issued completed.
    let report = said
        .lines()
        .find_map(|l| l.strip_prefix("guest| BLK "))
        .and_then(|json| serde_json::from_str::<Value>(json).ok())
        .unwrap_or_else(|| panic!("no BLK line:\n{said}"));
    let run = &report["runs"][0];
    let stamp = &report["stamp"];
    for (what, got) in [
        ("failures", &report["failures"]),
        ("errors", &run["errors"]),
        ("mismatches", &run["mismatches"]),
        ("bad_magic", &stamp["bad_magic"]),
        ("bad_sector", &stamp["bad_sector"]),
        ("bad_fill", &stamp["bad_fill"]),
        ("other_tags", &stamp["other_tags"]),
    ] {
        assert_eq!(got, &json!(0), "{what}: {report}");
    }
    assert_eq!(
        run["requests"], stamp["issued"],
        "a request was lost: {report}"
    );
    let tags: Vec<&Value> = stamp["tags"]
        .as_array()
        .map_or(vec![], |t| t.iter().collect());
    assert_eq!(
        tags.iter().map(|t| t["tag"].clone()).collect::<Vec<_>>(),
        [json!(TAG_A), json!(TAG_B)],
        "tag A, then tag B: {report}"
    );
    assert_eq!(stamp["capacity_bytes"], json!(B_BYTES), "{report}");
    println!(
        "{said}\nthe go-sdk run took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
