//! O_DIRECT: what the engine learns of the device from its inline calls. It keeps the calls'
//! average duration and, from one call in [`CPU_SAMPLE_EVERY_CALLS`] (later one in
//! [`SETTLED_CPU_SAMPLE_EVERY_CALLS`]), the share of a call the thread spends on its CPU: a
//! device that keeps the caller on its CPU (zram, a RAM disk) does its work in the caller's
//! context, one that lets it sleep waits for an interrupt (NVMe, a loop device's worker).

use std::time::Instant;

use super::tuning::AutoTuning;

/// Inline calls per CPU-clock sample at first: reading the thread's CPU clock is a syscall
/// before and one after the call, too dear for every call.
pub(super) const CPU_SAMPLE_EVERY_CALLS: u32 = 64;
/// Samples taken at [`CPU_SAMPLE_EVERY_CALLS`] before sampling slows down: by then the share
/// is known, and the samples' syscalls would only add to the calls' tail latency.
pub(super) const EARLY_CPU_SAMPLES: u32 = 16;
/// Inline calls per CPU-clock sample once the device is known: a device whose behaviour
/// changes is still noticed within a few thousand calls.
pub(super) const SETTLED_CPU_SAMPLE_EVERY_CALLS: u32 = 1024;
/// The least share of a call's time, in ‰, that the thread spends on its CPU for the device to
/// count as working in the caller's context: nothing is gained by handing such calls to another
/// thread, so every request goes inline at any depth.
pub(super) const ON_CPU_MIN_PERMILLE: u32 = 750;
/// A new call moves the average duration by 1/2^this: a single slow call does not decide.
const CALL_NS_WEIGHT_SHIFT: u32 = 3;
/// A new sample moves the average CPU share by 1/this: samples are rarer than calls.
const CPU_SHARE_WEIGHT_DIVISOR: u32 = 4;

/// The device as its inline calls showed it.
#[derive(Debug, Default)]
pub(super) struct CallSampler {
    /// The average duration of an inline call (ns), 0 before the first timed call.
    pub(super) call_ns: u64,
    /// The average share of an inline call spent on the CPU (‰); `None` before the first
    /// sample.
    pub(super) on_cpu_permille: Option<u32>,
    /// Inline calls so far (wrapping).
    calls: u32,
    /// Samples of the CPU clock so far (saturating).
    samples: u32,
}

/// The clocks read around one inline call: its start when the call is timed, and the thread's
/// CPU time when it is sampled.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CallClock {
    /// The thread's CPU time at the start (ns), when the call samples it.
    cpu0: Option<u64>,
    /// The wall-clock start, when the call is timed.
    start: Option<Instant>,
}

impl CallClock {
    /// Wall time since the start (ns), 0 for a call that is not timed.
    pub(super) fn elapsed_ns(&self) -> u64 {
        self.start.map_or(0, |s| s.elapsed().as_nanos() as u64)
    }
}

impl CallSampler {
    /// Counts a call about to start and reads the clocks it needs: every call is timed except
    /// on a device known to work in the caller's context (its calls cannot block on anything
    /// but the CPU), which is timed only when its CPU share is sampled (one call in
    /// [`CPU_SAMPLE_EVERY_CALLS`] or [`SETTLED_CPU_SAMPLE_EVERY_CALLS`], and every probe).
    pub(super) fn start_call(&mut self, probe: bool) -> CallClock {
        let sample = probe || cpu_sample_due(self.calls, self.samples);
        self.calls = self.calls.wrapping_add(1);
        let timed = sample || !self.on_cpu();
        CallClock {
            cpu0: sample.then(crate::stats::thread_cpu_ns),
            start: timed.then(Instant::now),
        }
    }

    /// The call started with `clock` ended after `took_ns` (its retry's alone, if it had one),
    /// and `ok` (transferred data): its duration and CPU share join the averages.
    pub(super) fn finish_call(&mut self, clock: &CallClock, ok: bool, took_ns: u64) {
        if let Some(cpu0) = clock.cpu0 {
            if ok && took_ns > 0 {
                let cpu = crate::stats::thread_cpu_ns().saturating_sub(cpu0);
                self.record_cpu(cpu, took_ns);
            }
        }
        if clock.start.is_some() && ok {
            self.record_duration(took_ns);
        }
    }

    /// A sampled call spent `cpu_ns` of its `took_ns` (not 0) on the thread's CPU.
    fn record_cpu(&mut self, cpu_ns: u64, took_ns: u64) {
        self.samples = self.samples.saturating_add(1);
        let permille = cpu_permille(cpu_ns, took_ns);
        self.on_cpu_permille = Some(match self.on_cpu_permille {
            None => permille,
            Some(p) => p - p / CPU_SHARE_WEIGHT_DIVISOR + permille / CPU_SHARE_WEIGHT_DIVISOR,
        });
    }

    /// A timed call completed in `took_ns`.
    fn record_duration(&mut self, took_ns: u64) {
        self.call_ns = if self.call_ns == 0 {
            took_ns
        } else {
            self.call_ns - (self.call_ns >> CALL_NS_WEIGHT_SHIFT)
                + (took_ns >> CALL_NS_WEIGHT_SHIFT)
        };
    }

    /// The sampled calls keep the thread on its CPU (the device works in the caller's context).
    pub(super) fn on_cpu(&self) -> bool {
        self.on_cpu_permille
            .is_some_and(|p| p >= ON_CPU_MIN_PERMILLE)
    }

    /// Inline costs no more than handing over: the device works in the caller's context, or
    /// its calls average under [`AutoTuning::fast_direct_call_ns`].
    pub(super) fn fast(&self, tuning: &AutoTuning) -> bool {
        self.on_cpu() || (self.call_ns != 0 && self.call_ns < tuning.fast_direct_call_ns)
    }
}

/// Whether the inline call after `calls` earlier ones samples the CPU clock, `samples` having
/// been taken: one in [`CPU_SAMPLE_EVERY_CALLS`] at first, one in
/// [`SETTLED_CPU_SAMPLE_EVERY_CALLS`] after [`EARLY_CPU_SAMPLES`].
pub(super) fn cpu_sample_due(calls: u32, samples: u32) -> bool {
    let every = if samples < EARLY_CPU_SAMPLES {
        CPU_SAMPLE_EVERY_CALLS
    } else {
        SETTLED_CPU_SAMPLE_EVERY_CALLS
    };
    calls.is_multiple_of(every)
}

/// The share (‰) of `took_ns` of wall time that `cpu_ns` of the thread's CPU time is; `took_ns`
/// must not be 0.
pub(super) fn cpu_permille(cpu_ns: u64, took_ns: u64) -> u32 {
    (cpu_ns.saturating_mul(1000) / took_ns).min(1000) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_clock_is_sampled_less_once_the_device_is_known() {
        let due = |samples| (0..4096u32).filter(|&c| cpu_sample_due(c, samples)).count();
        assert_eq!(due(0), 4096 / CPU_SAMPLE_EVERY_CALLS as usize);
        assert_eq!(
            due(EARLY_CPU_SAMPLES - 1),
            4096 / CPU_SAMPLE_EVERY_CALLS as usize
        );
        assert_eq!(
            due(EARLY_CPU_SAMPLES),
            4096 / SETTLED_CPU_SAMPLE_EVERY_CALLS as usize
        );
        // The counter wraps on a long run: sampling goes on at the same rate.
        assert!(cpu_sample_due(0, u32::MAX));
    }
}
