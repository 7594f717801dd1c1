//! Boots Osprey's own test guest and checks what it reports: the CPUs described by the MP table,
//! the memory map, the exact command line, and every way a VM can end (debug-exit status, i8042
//! reset, triple fault, guest exception, vCPU failure, SIGTERM, SIGINT).

mod common;

use std::time::Duration;

use common::{run_to_exit, test_guest, Vmm};

const MIB: u64 = 1 << 20;
const READY: &str = "osprey-test-guest: ready";
const TIMEOUT: Duration = Duration::from_secs(30);

fn report_of(console: &str) -> serde_json::Value {
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("REPORT "))
        .unwrap_or_else(|| panic!("no REPORT line in console:\n{console}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("REPORT is not JSON ({e}): {line}"))
}

/// The RAM the guest must find for `mib` MiB: everything but the EBDA..1 MiB hole, with memory
/// above 3 GiB moved above 4 GiB.
fn expected_memory(mib: u64) -> (u64, u64) {
    let bytes = mib * MIB;
    let ram = bytes - (0x10_0000 - 0x9_fc00);
    let top = if bytes > 0xc000_0000 {
        bytes + 0x4000_0000
    } else {
        bytes
    };
    (ram, top)
}

#[test]
fn reports_cpus_memory_and_cmdline_for_several_shapes() {
    let guest = test_guest();
    for (cpus, mib, status) in [(1u8, 64u64, 0u8), (2, 256, 7), (4, 1024, 42), (2, 4096, 0)] {
        let cmdline = format!("mode=report exit={status} tag=\"q\\x\" cpus={cpus}");
        let (st, console, log) = run_to_exit(
            [
                "--kernel".as_ref(),
                guest.as_os_str(),
                "--cpus".as_ref(),
                cpus.to_string().as_ref(),
                "--memory".as_ref(),
                mib.to_string().as_ref(),
                "--cmdline".as_ref(),
                cmdline.as_ref(),
            ],
            TIMEOUT,
        );
        assert_eq!(
            st.code(),
            Some(i32::from(status)),
            "cpus={cpus} mem={mib}\n{console}\n{log}"
        );
        assert!(
            console.lines().any(|l| l == READY),
            "no ready line:\n{console}"
        );
        let r = report_of(&console);
        assert_eq!(r["cpus"], u64::from(cpus), "{r}");
        // More vCPUs than host CPUs (KVM_CAP_NR_VCPUS) runs, with a warning naming the field.
        // SAFETY: sysconf only reads a system value.
        let host_cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        assert_eq!(
            log.contains("machine-config.vcpu_count: ") && log.contains("the vCPUs will share CPUs"),
            i64::from(cpus) > host_cpus as i64,
            "cpus={cpus}, host CPUs {host_cpus}: overcommit warning iff more vCPUs than CPUs\n{log}"
        );
        let ids: Vec<u64> = (0..u64::from(cpus)).collect();
        assert_eq!(r["apic_ids"], serde_json::json!(ids), "{r}");
        assert_eq!(r["bsp_apic_id"], 0, "{r}");
        assert_eq!(r["mp_table"], true, "{r}");
        assert_eq!(r["cmdline"], cmdline.as_str(), "{r}");
        let (ram, top) = expected_memory(mib);
        assert_eq!(r["mem_ram_bytes"], ram, "mem={mib}: {r}");
        assert_eq!(r["mem_top"], top, "mem={mib}: {r}");
        let map = r["memmap"].as_array().expect("memmap array");
        assert_eq!(
            map[0],
            serde_json::json!({"addr": 0, "size": 0x9fc00, "type": 1})
        );
        assert_eq!(map[1]["type"], 2, "EBDA..1MiB reserved: {r}");
        assert!(
            console.contains(&format!("osprey-test-guest: exit {status}")),
            "{console}"
        );
        assert!(
            log.contains("KVM: kvm_"),
            "start-up log must name the KVM flavor:\n{log}"
        );
    }
}

#[test]
fn config_file_boots_the_same_guest() {
    let guest = test_guest();
    let dir = std::env::temp_dir().join(format!("osprey-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let cfg = dir.join("vm.json");
    let json = serde_json::json!({
        "machine-config": {"vcpu_count": 2, "mem_size_mib": 96},
        "boot-source": {"kernel_image_path": guest, "boot_args": "mode=report exit=9 from=file"},
    });
    std::fs::write(&cfg, json.to_string()).expect("write cfg");
    let (st, console, log) = run_to_exit(["--config".as_ref(), cfg.as_os_str()], TIMEOUT);
    assert_eq!(st.code(), Some(9), "{console}\n{log}");
    let r = report_of(&console);
    assert_eq!(r["cpus"], 2);
    assert_eq!(r["cmdline"], "mode=report exit=9 from=file");
    assert_eq!(r["mem_top"], 96 * MIB);
    // A command-line flag overrides the file.
    let (st, console, _) = run_to_exit(
        [
            "--config".as_ref(),
            cfg.as_os_str(),
            "--cpus".as_ref(),
            "1".as_ref(),
        ],
        TIMEOUT,
    );
    assert_eq!(st.code(), Some(9));
    assert_eq!(report_of(&console)["cpus"], 1);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn ring3_code_runs_and_returns_to_ring0() {
    let guest = test_guest();
    let (st, console, log) = run_to_exit(
        [
            "--kernel".as_ref(),
            guest.as_os_str(),
            "--cmdline".as_ref(),
            "mode=user".as_ref(),
        ],
        TIMEOUT,
    );
    assert_eq!(st.code(), Some(0), "{console}\n{log}");
    let r = report_of(&console);
    assert_eq!(r["user"]["iterations"], 1_000_000, "{r}");
    assert!(r["user"]["cycles"].as_u64().expect("cycles") > 0, "{r}");
}

fn boot_mode(mode: &str) -> (Option<i32>, String, String) {
    let guest = test_guest();
    let cmdline = format!("mode={mode}");
    let (st, console, log) = run_to_exit(
        [
            "--kernel".as_ref(),
            guest.as_os_str(),
            "--cmdline".as_ref(),
            cmdline.as_ref(),
        ],
        TIMEOUT,
    );
    assert!(
        console.contains(READY),
        "{mode}: guest never got ready:\n{console}\n{log}"
    );
    (st.code(), console, log)
}

#[test]
fn i8042_reset_is_a_clean_exit() {
    let (code, _, log) = boot_mode("reset");
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("the guest reset the machine (i8042)"), "{log}");
}

#[test]
fn triple_fault_is_a_clean_exit() {
    let (code, _, log) = boot_mode("triple-fault");
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("triple fault (KVM_EXIT_SHUTDOWN)"), "{log}");
}

#[test]
fn guest_exception_reports_status_3() {
    let (code, console, _) = boot_mode("exception");
    assert_eq!(code, Some(3));
    assert!(console.contains("EXCEPTION vector=6"), "{console}");
}

#[test]
fn vcpu_failure_names_exit_suberror_and_rip() {
    let (code, _, log) = boot_mode("mmio-exec");
    assert_eq!(code, Some(1), "{log}");
    let err = log
        .lines()
        .find(|l| l.starts_with("osprey: error: vCPU 0 failed:"))
        .unwrap_or_else(|| panic!("no error line:\n{log}"));
    assert!(
        err.contains("KVM_EXIT_INTERNAL_ERROR (suberror 1 emulation failure"),
        "{err}"
    );
    assert!(err.contains("at guest RIP 0xd0000000"), "{err}");
}

#[test]
fn bad_guest_mode_exits_2_from_the_guest() {
    let (code, console, _) = boot_mode("no-such-mode");
    assert_eq!(code, Some(2), "{console}");
}

fn stops_on_signal(sig: i32) {
    let guest = test_guest();
    let mut vmm = Vmm::spawn([
        "--kernel".as_ref(),
        guest.as_os_str(),
        "--cpus".as_ref(),
        "2".as_ref(),
        "--cmdline".as_ref(),
        "mode=halt".as_ref(),
    ]);
    assert!(
        vmm.wait_console(TIMEOUT, |l| l == READY).is_some(),
        "not ready:\n{}",
        vmm.log_text()
    );
    // The guest now sits in `hlt` forever: only the signal can end it.
    std::thread::sleep(Duration::from_millis(200));
    vmm.signal(sig);
    let status = vmm.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{}", vmm.log_text());
    assert!(
        vmm.log_text()
            .contains(&format!("received signal {sig}; stopped the VM")),
        "{}",
        vmm.log_text()
    );
}

#[test]
fn sigterm_stops_a_halted_guest_cleanly() {
    stops_on_signal(libc::SIGTERM);
}

#[test]
fn sigint_stops_a_halted_guest_cleanly() {
    stops_on_signal(libc::SIGINT);
}
