//! A vCPU thread: runs `KVM_RUN`, dispatches port and MMIO exits to the buses (counting them for
//! Firecracker's `vcpu` metrics; the boot timer's byte first), and reports the exits that end the
//! VM (shutdown, internal error, failed entry) to the control thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use devices::bus::Bus;
use kvm_ioctls::{VcpuExit, VcpuFd};
use vm_memory::GuestMemoryMmap;

use crate::events::{ControlEvent, ControlSender, PauseState};
use crate::sandbox::ThreadHook;
use crate::soft_exception;
use crate::stop::StopReason;

/// Everything a vCPU thread needs.
pub struct VcpuRunner {
    /// The vCPU index (also its APIC id).
    pub id: u8,
    /// The KVM vCPU.
    pub fd: VcpuFd,
    /// Port I/O devices.
    pub pio: Arc<Bus>,
    /// MMIO devices.
    pub mmio: Arc<Bus>,
    /// Guest memory (read at a pause: `soft_exception`).
    pub mem: GuestMemoryMmap,
    /// Where to report the end of the VM.
    pub events: ControlSender,
    /// Set by the control thread to stop every vCPU.
    pub stop: Arc<AtomicBool>,
    /// Pause requests from the control thread.
    pub pause: Arc<PauseState>,
    /// Runs on the vCPU thread before its first `KVM_RUN` (installs the seccomp filter).
    pub on_start: Option<ThreadHook>,
}

impl std::fmt::Debug for VcpuRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VcpuRunner").field("id", &self.id).finish()
    }
}

impl VcpuRunner {
    /// Runs until the VM stops or this vCPU ends it.
    pub fn run(mut self) {
        let id = self.id;
        if let Some(hook) = self.on_start.take() {
            if let Err(e) = hook() {
                let message = e.to_string();
                self.events
                    .send(ControlEvent::Stop(StopReason::Failed { vcpu: id, message }));
                return;
            }
        }
        if id == 0 {
            crate::boot_timing::mark(crate::boot_timing::Step::FirstVcpuEntry);
        }
        let mut extra_runs = 0;
        while !self.stop.load(Ordering::Acquire) {
            // One look at the pause lock per exit while running, as before the run-on check.
            if !self.pause.is_paused() {
                extra_runs = 0;
            } else if extra_runs < soft_exception::MAX_EXTRA_RUNS
                && soft_exception::may_be_delivering(&self.fd, &self.mem)
            {
                // Run on to the next kick rather than park with the exception undelivered.
                extra_runs += 1;
                log::info!(
                    "vCPU {id} paused right after a ring-3 int3/int n: runs on to the next kick"
                );
            } else {
                if extra_runs == soft_exception::MAX_EXTRA_RUNS {
                    log::warn!(
                        "vCPU {id} paused right after a ring-3 software exception \
                         {extra_runs} times in a row; parked there"
                    );
                }
                extra_runs = 0;
                self.pause
                    .park_while_paused(&self.stop, self.id, &mut self.fd);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let outcome = match self.fd.run() {
                Ok(exit) => dispatch(exit, &self.pio, &self.mmio),
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Step::Continue,
                Err(e) => Step::Fail(format!("KVM_RUN failed: {e}")),
            };
            match outcome {
                Step::Continue => {}
                Step::Shutdown(reason) => {
                    self.events.send(ControlEvent::Stop(StopReason::Shutdown {
                        vcpu: id,
                        reason,
                    }));
                    break;
                }
                Step::Fail(what) => {
                    let message = format!("{what} at guest RIP {}", self.rip_text());
                    self.events
                        .send(ControlEvent::Stop(StopReason::Failed { vcpu: id, message }));
                    break;
                }
                Step::InternalError => {
                    let detail = self.internal_error_detail();
                    let message = format!(
                        "KVM_EXIT_INTERNAL_ERROR ({detail}) at guest RIP {}",
                        self.rip_text()
                    );
                    self.events
                        .send(ControlEvent::Stop(StopReason::Failed { vcpu: id, message }));
                    break;
                }
            }
        }
    }

    fn rip_text(&self) -> String {
        match self.fd.get_regs() {
            Ok(r) => format!("{:#x}", r.rip),
            Err(e) => format!("unknown ({e})"),
        }
    }

    fn internal_error_detail(&mut self) -> String {
        let run = self.fd.get_kvm_run();
        // SAFETY: KVM filled `internal` for the KVM_EXIT_INTERNAL_ERROR exit we just returned
        // from; the union holds plain integers, so any bit pattern is a valid value.
        let internal = unsafe { run.__bindgen_anon_1.internal };
        let n = (internal.ndata as usize).min(internal.data.len());
        let data: Vec<String> = internal.data[..n]
            .iter()
            .map(|d| format!("{d:#x}"))
            .collect();
        let name = match internal.suberror {
            1 => " emulation failure",
            2 => " simultaneous exception",
            3 => " delivery event",
            4 => " unexpected exit reason",
            _ => "",
        };
        format!(
            "suberror {}{name}, data [{}]",
            internal.suberror,
            data.join(", ")
        )
    }
}

enum Step {
    Continue,
    Shutdown(String),
    Fail(String),
    InternalError,
}

fn dispatch(exit: VcpuExit<'_>, pio: &Bus, mmio: &Bus) -> Step {
    use crate::metrics::firecracker::VCPU_EXITS as exits;
    let count = |c: &std::sync::atomic::AtomicU64| c.fetch_add(1, Ordering::Relaxed);
    match exit {
        VcpuExit::IoOut(port, data) => {
            count(&exits.io_out);
            if !pio.write(u64::from(port), data) {
                log::trace!("Unclaimed port write {port:#x} <- {data:x?}");
            }
            Step::Continue
        }
        VcpuExit::IoIn(port, data) => {
            count(&exits.io_in);
            pio.read(u64::from(port), data);
            Step::Continue
        }
        VcpuExit::MmioWrite(addr, data) => {
            count(&exits.mmio_write);
            if crate::boot_timing::guest_signal(addr, data) {
                return Step::Continue;
            }
            if !mmio.write(addr, data) {
                log::debug!("Unclaimed MMIO write {addr:#x} <- {data:x?}");
            }
            Step::Continue
        }
        VcpuExit::MmioRead(addr, data) => {
            count(&exits.mmio_read);
            if !mmio.read(addr, data) {
                log::debug!("Unclaimed MMIO read {addr:#x}");
            }
            Step::Continue
        }
        VcpuExit::Hlt => Step::Shutdown("the guest halted (KVM_EXIT_HLT)".into()),
        VcpuExit::Shutdown => Step::Shutdown("triple fault (KVM_EXIT_SHUTDOWN)".into()),
        VcpuExit::SystemEvent(kind, _) => {
            Step::Shutdown(format!("system event {kind} (KVM_EXIT_SYSTEM_EVENT)"))
        }
        VcpuExit::InternalError => {
            count(&exits.failures);
            Step::InternalError
        }
        VcpuExit::FailEntry(reason, cpu) => {
            count(&exits.failures);
            Step::Fail(format!(
                "KVM_EXIT_FAIL_ENTRY (hardware entry failure reason {reason:#x}, host CPU {cpu})"
            ))
        }
        VcpuExit::Intr | VcpuExit::IrqWindowOpen => Step::Continue,
        other => {
            count(&exits.failures);
            Step::Fail(format!("unexpected VM exit {other:?}"))
        }
    }
}
