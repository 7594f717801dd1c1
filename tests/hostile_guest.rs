//! A misbehaving guest, or a store that stops answering, may cost the guest its own device, never
//! the host anything it did not ask for: a broken queue left alone costs no CPU, a reset never
//! completes while the store still holds requests that may write guest memory, and requests the
//! kernel refuses with EAGAIN are retried without any fd to wake the thread.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::{test_guest, Vmm};
use serde_json::{json, Value};

/// A one-drive test-guest VM config; `drive` adds fields to the drive.
fn config(disk: &Path, drive: Value, args: &str, sock: Option<&Path>) -> Value {
    let mut d = json!({"drive_id": "disk0", "path_on_host": disk});
    if let (Some(dst), Some(extra)) = (d.as_object_mut(), drive.as_object()) {
        dst.extend(extra.clone());
    }
    let mut cfg = json!({
        "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
        "boot-source": {"kernel_image_path": test_guest(), "boot_args": format!("mode=blk {args}")},
        "drives": [d],
        "iothreads": [{"id": "io0"}],
    });
    if let Some(sock) = sock {
        cfg["api"] = json!({"socket": sock});
    }
    cfg
}

fn spawn(scratch: &Scratch, cfg: &Value) -> Vmm {
    let path = scratch.file("vm.json", &cfg.to_string());
    Vmm::spawn(["--config".as_ref(), path.as_os_str()])
}

/// The guest posts a valid read and a looping chain, kicks once and then leaves the broken queue
/// alone for 2 s without resetting. The read goes to io_uring with O_DIRECT (it completes after
/// the turn that broke the queue): the queue must reap it, then stop costing anything. Before the
/// fix, the completion eventfd stayed readable and the iothread spun at ~100 % of a core.
#[test]
fn a_broken_queue_left_alone_costs_the_host_no_cpu() {
    let scratch = Scratch::under(Path::new(env!("CARGO_TARGET_TMPDIR")), "hostile-broken");
    // Written out, not sparse: an O_DIRECT read of a hole completes inside the submission call.
    let disk = scratch.0.join("disk.img");
    std::fs::write(&disk, vec![0x5au8; 16 << 20]).expect("write the disk");
    std::fs::File::open(&disk)
        .and_then(|f| f.sync_all())
        .expect("sync the disk");
    let cfg = config(
        &disk,
        json!({"io_engine": "IoUring", "direct": true}),
        "rw=read count=64 broken_idle_ms=2000",
        None,
    );
    let mut vmm = spawn(&scratch, &cfg);
    let begin = vmm.wait_console(Duration::from_secs(60), |l| {
        l == "osprey-test-guest: broken-idle begin"
    });
    assert!(
        begin.is_some(),
        "{}\n{}",
        vmm.console_text(),
        vmm.log_text()
    );
    let (t0, cpu0) = (
        Instant::now(),
        common::thread_cpu_ns(vmm.pid(), "iothread-io0"),
    );
    let end = vmm
        .wait_console(Duration::from_secs(30), |l| {
            l.starts_with("osprey-test-guest: broken-idle end")
        })
        .unwrap_or_else(|| panic!("{}\n{}", vmm.console_text(), vmm.log_text()));
    let (wall, cpu) = (
        t0.elapsed(),
        common::thread_cpu_ns(vmm.pid(), "iothread-io0") - cpu0,
    );
    let share = cpu as f64 / wall.as_nanos() as f64;
    eprintln!(
        "broken queue idle: iothread CPU {:.2} ms over {wall:?} = {:.2} %; {}",
        cpu as f64 / 1e6,
        share * 100.0,
        end.text
    );
    assert!(
        end.text.contains("read_status=0 used=2 needs_reset=1"),
        "the valid read completed, the broken chain came back, the device needs a reset: {}",
        end.text
    );
    assert!(
        wall > Duration::from_millis(1500),
        "the idle lasted {wall:?}"
    );
    assert!(
        share < 0.02,
        "a broken queue left alone must not cost CPU: {:.1} %",
        share * 100.0
    );
    let st = vmm.wait_exit(Duration::from_secs(60));
    let r = common::blk_report(&vmm);
    assert_eq!(st.code(), Some(0), "{r}\n{}", vmm.log_text());
    assert!(
        vmm.log_text()
            .contains("stopped; its fds are no longer watched"),
        "{}",
        vmm.log_text()
    );
}

/// The store never answers a read (fault injection `HANG`, like a hung NFS server); the guest's
/// request times out and it resets the device. The reset must not be acknowledged (the request
/// may still write guest memory), the VM and its API stay up, and the API shows the stuck state.
#[test]
fn a_reset_waits_for_a_hung_store_and_says_so() {
    let scratch = Scratch::new("hostile-hang");
    let disk = scratch.sparse("disk.img", 16 << 20);
    let sock = scratch.0.join("api.sock");
    let cfg = config(
        &disk,
        json!({"io_engine": "Sync", "fault_injection": {"error": "HANG", "operations": ["read"]}}),
        "rw=read count=4 qd=1 timeout_ms=300 hang=2",
        Some(&sock),
    );
    let mut vmm = spawn(&scratch, &cfg);
    let hung = vmm.wait_console(Duration::from_secs(60), |l| l == "osprey-test-guest: hang");
    assert!(hung.is_some(), "{}\n{}", vmm.console_text(), vmm.log_text());
    let r = common::blk_report(&vmm);
    eprintln!("hung store: BLK error {} main {}", r["error"], r["runs"][0]);
    assert_eq!(r["runs"][0]["timed_out"], true, "{r}");
    assert_eq!(
        r["error"], "reinit after a stalled run failed",
        "the guest's reset must not complete: {r}"
    );
    let (status, body) =
        vmm::api::client::request(&sock, "GET", "/drives/disk0", None).expect("API alive");
    assert_eq!(status, 200, "{body}");
    let d: Value = serde_json::from_str(&body).expect("json");
    eprintln!("hung store: GET /drives/disk0 {d}");
    assert_eq!(d["reset_pending"], true, "{d}");
    assert_eq!(d["in_flight"], 1, "{d}");
    let log = vmm.log_text();
    assert!(
        log.contains("reset waits for 1 requests the backing store has not completed"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

/// Every submission is refused with EAGAIN for a while (fault injection `EAGAIN`): nothing is in
/// flight, so no fd will fire; the iothread's retry timer must get the requests through.
#[test]
fn submissions_refused_with_eagain_are_retried_until_they_complete() {
    let scratch = Scratch::new("hostile-eagain");
    let disk = scratch.sparse("disk.img", 16 << 20);
    let cfg = config(
        &disk,
        json!({"io_engine": "IoUring",
               "fault_injection": {"error": "EAGAIN", "operations": ["read", "write"], "max_errors": 50}}),
        "rw=verify count=64 qd=4 timeout_ms=2000",
        None,
    );
    let mut vmm = spawn(&scratch, &cfg);
    let st = vmm.wait_exit(Duration::from_secs(60));
    let r = common::blk_report(&vmm);
    let m = &r["runs"][0];
    eprintln!("eagain: main {m}");
    assert_eq!(m["timed_out"], false, "{m}\n{}", vmm.log_text());
    assert_eq!(m["requests"], 64, "{m}");
    assert_eq!(
        (m["errors"].clone(), m["mismatches"].clone()),
        (json!(0), json!(0)),
        "{m}"
    );
    assert_eq!(st.code(), Some(0), "{}", vmm.log_text());
    // The queue logs its engine typed: the plan refuses submissions (EAGAIN).
    let log = vmm.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("engine IoUring, fault injection: ")
                && l.contains(r#""action":"Refuse""#)),
        "{log}"
    );
}
