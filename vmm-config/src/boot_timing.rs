//! When each start-up step finished, in ms since the process started: config parsed, memory
//! set up, kernel loaded (and how long unpacking a bzImage took), first vCPU entry. One VM per
//! process, so one set of stamps; shown in the start-up log and in `GET /`.

use std::sync::atomic::{AtomicU64, Ordering};
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
}
