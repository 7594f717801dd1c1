//! A vCPU paused and snapshotted on the test guest's ring-3 `int3` path (`mode=int3-loop`:
//! ring-0 → ring-3 → `int3` → ring-0 round trips, forever) must restore with the `int3` not
//! lost (docs/snapshot.md, "A vCPU on its way into a software exception"): many
//! pause/snapshot/resume rounds in one process, each saved vCPU state classified by where its
//! RIP stands and what `KVM_GET_VCPU_EVENTS` said (none may be in ring 3 just past the
//! `int3`); then the snapshots taken on the `int3` path are loaded in new processes, and each
//! guest must go on looping (not stop at the `ud2` after the `int3`). `OSPREY_INT3_ROUNDS`
//! rounds (200 by default).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::common::scratch::Scratch;
use super::common::{api_call as call, test_guest, Vmm};
use super::{load_over_api, rounds_from_env, wait_for_socket};
use serde_json::json;

/// The address of `symbol` in the test guest (read with `nm`).
fn guest_symbol(symbol: &str) -> u64 {
    let out = std::process::Command::new("nm")
        .arg(test_guest())
        .output()
        .expect("run nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.ends_with(&format!(" {symbol}")))
        .unwrap_or_else(|| panic!("no {symbol} in the test guest"));
    u64::from_str_radix(line.split_whitespace().next().expect("address"), 16).expect("hex")
}

/// One saved vCPU, in a line: where RIP is and what its events hold.
fn describe(state: &vmm::snapshot::kvm_state::VcpuState, int3: u64) -> String {
    let e = &state.vcpu_events;
    let at = match state.regs.rip {
        r if r == int3 => "at int3".to_string(),
        r if r == int3 + 1 => "after int3".to_string(),
        _ => format!("ring{}", state.sregs.cs.selector & 3),
    };
    format!(
        "{at} cs={:#x} exc(inj={} pend={} nr={} payload={}) int(inj={} soft={} nr={}) \
         nmi(inj={} pend={}) flags={:#x}",
        state.sregs.cs.selector,
        e.exception.injected,
        e.exception.pending,
        e.exception.nr,
        e.exception_has_payload,
        e.interrupt.injected,
        e.interrupt.soft,
        e.interrupt.nr,
        e.nmi.injected,
        e.nmi.pending,
        e.flags,
    )
}

/// Loads the snapshot in `dir` in a new process, resumed; whether its guest goes on looping
/// (a new `INT3LOOP n=` line) rather than stopping at the `ud2` after its `int3`.
fn restored_runs(dir: &Path, what: &str) -> bool {
    let (mut vmm, status, v, _) = load_over_api(dir, true, "load");
    assert_eq!(status, 204, "{what}: {v}\n{}", vmm.log_text());
    let beat = vmm.wait_console(Duration::from_secs(20), |l| {
        l.starts_with("INT3LOOP n=") || l.starts_with("EXCEPTION") || l.contains("error")
    });
    let runs = beat.is_some_and(|l| l.text.starts_with("INT3LOOP n="));
    if !runs {
        eprintln!("{what}: restored guest stopped:\n{}", vmm.console_text());
    }
    vmm.signal(libc::SIGKILL);
    vmm.wait_exit(Duration::from_secs(10));
    runs
}

#[test]
fn a_vcpu_snapshotted_on_its_int3_keeps_it() {
    let rounds = rounds_from_env("OSPREY_INT3_ROUNDS", 200);
    let int3 = guest_symbol("user_exit");
    assert_eq!(guest_symbol("user_exit_after_int3"), int3 + 1);
    let scratch = Scratch::new("int3");
    let sock = scratch.0.join("api.sock");
    let cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 32},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": "mode=int3-loop"},
        "api": {"socket": sock},
    });
    let cfg_path = scratch.file("vm.json", &cfg.to_string());
    let mut vmm = Vmm::spawn(["--config".as_ref(), cfg_path.as_os_str()]);
    let ready = vmm.wait_console(Duration::from_secs(30), |l| l == "INT3LOOP ready");
    assert!(ready.is_some(), "guest not ready:\n{}", vmm.log_text());
    wait_for_socket(&sock);

    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut kept = Vec::new();
    for round in 0..rounds {
        let dir = scratch.0.join(format!("round-{round}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Paused"}"#));
        assert_eq!(status, 204, "pause: {v}");
        let body = json!({"snapshot_type": "Full", "snapshot_path": dir.join("state.snap"),
                          "mem_file_path": dir.join("mem.snap")});
        let (status, v) = call(&sock, "PUT", "/snapshot/create", Some(&body.to_string()));
        assert_eq!(status, 204, "create: {v}\n{}", vmm.log_text());
        let (status, v) = call(&sock, "PATCH", "/vm", Some(r#"{"state": "Resumed"}"#));
        assert_eq!(status, 204, "resume: {v}");
        let state = vmm::snapshot::file::read(&dir.join("state.snap")).expect("read back");
        let line = describe(&state.vcpus[0], int3);
        *seen.entry(line.clone()).or_default() += 1;
        if line.contains("int3") || !line.contains("exc(inj=0 pend=0") {
            kept.push((round, dir, line));
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
        // Let the guest run a little between pauses (a few hundred round trips).
        std::thread::sleep(Duration::from_millis(3));
    }
    let ran_on = vmm
        .log_text()
        .lines()
        .filter(|l| l.contains("runs on to the next kick"))
        .count();
    vmm.signal(libc::SIGKILL);
    vmm.wait_exit(Duration::from_secs(10));
    eprintln!("{rounds} pauses, saved vCPU states:");
    for (line, n) in &seen {
        eprintln!("  {n:4}  {line}");
    }
    eprintln!("pauses that met the int3 window and ran on: {ran_on}");
    let past_int3 = seen
        .iter()
        .filter(|(line, _)| line.starts_with("after int3"))
        .map(|(_, n)| n)
        .sum::<usize>();

    let mut lost = Vec::new();
    for (round, dir, line) in kept.iter().take(40) {
        let what = format!("round {round} ({line})");
        if !restored_runs(dir, &what) {
            lost.push(what);
        }
    }
    eprintln!(
        "loaded {} snapshots taken on the int3 path; {} lost the int3",
        kept.len().min(40),
        lost.len()
    );
    assert!(lost.is_empty(), "restored guests that stopped: {lost:#?}");
    assert_eq!(
        past_int3, 0,
        "saved vCPUs in ring 3 just past the int3 with no exception: {seen:#?}"
    );
}
