//! When each start-up step finished, in ms since the process started: config parsed, memory
//! set up, kernel loaded (and how long unpacking a bzImage took), first vCPU entry. One VM per
//! process, so one set of stamps; shown in the start-up log and in `GET /`. Also Firecracker's
//! boot timer (`--boot-timer`): the guest's signal that it has booted, logged with the time
//! taken ([`guest_signal`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A start-up step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The config file was read and validated.
    ConfigParsed,
    /// Guest memory exists.
    MemorySetUp,
    /// Kernel, initrd and boot structures are in guest memory.
    KernelLoaded,
    /// The boot vCPU entered the guest for the first time.
    FirstVcpuEntry,
}

struct Stamps {
    origin: Instant,
    /// µs since `origin` + 1 (0: not yet).
    steps: [AtomicU64; 4],
    unpack_us: AtomicU64,
}

fn stamps() -> &'static Stamps {
    static STAMPS: OnceLock<Stamps> = OnceLock::new();
    STAMPS.get_or_init(|| Stamps {
        origin: Instant::now(),
        steps: Default::default(),
        unpack_us: AtomicU64::new(0),
    })
}

/// Starts the clock (call first thing in `main`; later calls do nothing).
pub fn start() {
    stamps();
}

/// Records `step` now, the first time only.
pub fn mark(step: Step) {
    let s = stamps();
    let us = s.origin.elapsed().as_micros() as u64 + 1;
    let _ = s.steps[step as usize].compare_exchange(0, us, Ordering::Relaxed, Ordering::Relaxed);
}

/// Records how long unpacking the kernel took.
pub fn set_unpack(took: Duration) {
    stamps()
        .unpack_us
        .store(took.as_micros() as u64, Ordering::Relaxed);
}

/// Start-up's steps: ms from the process's start to each (`null` until reached), and how long
/// unpacking the kernel took (`null` when it was not packed).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct BootTimings {
    /// The config was read and checked.
    pub config_parsed_ms: Option<f64>,
    /// Guest memory was mapped.
    pub memory_set_up_ms: Option<f64>,
    /// The kernel was loaded into guest memory.
    pub kernel_loaded_ms: Option<f64>,
    /// Time spent unpacking a compressed kernel.
    pub kernel_unpack_ms: Option<f64>,
    /// The first vCPU entered the guest.
    pub first_vcpu_entry_ms: Option<f64>,
}

/// The stamps so far.
pub fn timings() -> BootTimings {
    let s = stamps();
    let ms = |step: Step| {
        let v = s.steps[step as usize].load(Ordering::Relaxed);
        (v != 0).then(|| (v - 1) as f64 / 1e3)
    };
    let unpack = s.unpack_us.load(Ordering::Relaxed);
    BootTimings {
        config_parsed_ms: ms(Step::ConfigParsed),
        memory_set_up_ms: ms(Step::MemorySetUp),
        kernel_loaded_ms: ms(Step::KernelLoaded),
        kernel_unpack_ms: (unpack != 0).then(|| unpack as f64 / 1e3),
        first_vcpu_entry_ms: ms(Step::FirstVcpuEntry),
    }
}

/// [`timings`] as JSON, for the log.
pub fn json() -> serde_json::Value {
    serde_json::to_value(timings()).unwrap_or_default()
}

/// The guest-physical address a guest writes [`BOOT_COMPLETE`] to when it has booted
/// (Firecracker's boot timer: the start of the 32-bit MMIO gap).
pub const BOOT_TIMER_ADDR: u64 = 0xc000_0000;
/// The byte that says "booted" (Firecracker's `MAGIC_VALUE_SIGNAL_GUEST_BOOT_COMPLETE`).
pub const BOOT_COMPLETE: u8 = 123;

static BOOT_TIMER: AtomicBool = AtomicBool::new(false);

/// Turns the boot timer on (`--boot-timer`): [`guest_signal`] then takes the guest's writes.
pub fn enable_boot_timer() {
    BOOT_TIMER.store(true, Ordering::Relaxed);
}

/// A guest MMIO write at `addr`: with the boot timer on, a one-byte write at
/// [`BOOT_TIMER_ADDR`] is the timer's (true: taken, no device sees it), and [`BOOT_COMPLETE`]
/// logs the time since the process started, wall and CPU, in Firecracker's words. A device's
/// register there is written 32 bits at a time (virtio's rule), so no driver write is taken.
pub fn guest_signal(addr: u64, data: &[u8]) -> bool {
    if addr != BOOT_TIMER_ADDR || data.len() != 1 || !BOOT_TIMER.load(Ordering::Relaxed) {
        return false;
    }
    if data[0] == BOOT_COMPLETE {
        let wall_us = stamps().origin.elapsed().as_micros() as u64;
        let cpu_us = process_cpu_us();
        log::info!(
            "Guest-boot-time = {wall_us:>6} us {} ms, {cpu_us:>6} CPU us {} CPU ms",
            wall_us / 1000,
            cpu_us / 1000
        );
    }
    true
}

/// The process's CPU time so far, in µs (0 if the clock cannot be read).
fn process_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; the call only
    // writes it.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } == 0;
    if !ok {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_stamped_once_and_in_order() {
        start();
        mark(Step::ConfigParsed);
        std::thread::sleep(Duration::from_millis(2));
        mark(Step::KernelLoaded);
        let first = json();
        mark(Step::KernelLoaded);
        assert_eq!(
            json()["kernel_loaded_ms"],
            first["kernel_loaded_ms"],
            "first stamp kept"
        );
        let parsed = first["config_parsed_ms"].as_f64().expect("parsed");
        let loaded = first["kernel_loaded_ms"].as_f64().expect("loaded");
        assert!(loaded >= parsed + 1.9, "{first}");
        assert!(first["first_vcpu_entry_ms"].is_null());
    }

    #[test]
    fn the_boot_timer_takes_only_its_byte_when_on() {
        assert!(
            !guest_signal(BOOT_TIMER_ADDR, &[BOOT_COMPLETE]),
            "off by default"
        );
        enable_boot_timer();
        assert!(guest_signal(BOOT_TIMER_ADDR, &[BOOT_COMPLETE]));
        assert!(
            guest_signal(BOOT_TIMER_ADDR, &[7]),
            "any byte there is the timer's"
        );
        assert!(
            !guest_signal(BOOT_TIMER_ADDR, &[BOOT_COMPLETE, 0, 0, 0]),
            "a 32-bit write"
        );
        assert!(!guest_signal(BOOT_TIMER_ADDR + 4, &[BOOT_COMPLETE]));
    }
}
