//! A fake guest driver on its own thread, for driving a real iothread without a guest. It keeps
//! every chain it owns in flight: publishes free chains on the avail ring (kicking only when
//! EVENT_IDX says so), consumes the used ring, checks each status byte, and republishes. It
//! spins on the used ring for a while before it asks for an interrupt and sleeps on it, so it
//! costs the dataplane as little as a busy-polling guest would.
//!
//! Every wait is bounded: a stall of [`STALL_TIMEOUT`] ends the run with an error that
//! [`FakeDriver::run`] turns into a panic naming the state, and dropping a [`FakeDriver`] stops
//! and joins its thread.

use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::block::status;
use devices::virtio::host_ring::HostMemory;
use devices::virtio::GuestMemory;
use vmm_sys_util::eventfd::EventFd;

use crate::block::Chains;
use crate::ring::DriverRing;

/// How long the driver spins on the used ring before it sleeps on the interrupt.
pub const SPIN: Duration = Duration::from_millis(2);
/// No completion for this long fails the run.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest one [`FakeDriver::run`] may take before the caller gives up.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Sleeps on the interrupt are cut into slices this long (to notice a stop).
const SLEEP_SLICE_MS: libc::c_int = 10;

/// What the driver thread gets.
#[derive(Debug)]
pub struct DriverSetup {
    /// The queue, driver side.
    pub ring: DriverRing,
    /// Guest memory (status bytes).
    pub mem: GuestMemory,
    /// The chains the driver keeps in flight (their number is the queue depth).
    pub chains: Chains,
    /// The queue's notification eventfd.
    pub kick: EventFd,
    /// The interrupt eventfd the device writes.
    pub irq: EventFd,
}

/// What one run cost the driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunReport {
    /// From the first publish to the last completion.
    pub elapsed: Duration,
    /// Requests completed.
    pub requests: u64,
    /// Kicks (queue notifications) written.
    pub kicks: u64,
    /// Times the driver slept on the interrupt.
    pub sleeps: u64,
}

/// The driver thread.
#[derive(Debug)]
pub struct FakeDriver {
    runs: Option<Sender<u64>>,
    reports: Receiver<Result<RunReport, String>>,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl FakeDriver {
    /// Starts the thread; it idles until [`FakeDriver::run`].
    pub fn spawn(setup: DriverSetup) -> Self {
        let (run_tx, run_rx) = mpsc::channel::<u64>();
        let (report_tx, report_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut driver = Driver {
            host: HostMemory::new(&setup.mem),
            free: setup.chains.heads.clone(),
            in_flight: vec![false; usize::from(setup.ring.size())],
            batch: Vec::with_capacity(setup.chains.heads.len()),
            setup,
            stop: stop.clone(),
        };
        let join = std::thread::Builder::new()
            .name("fake-driver".into())
            .spawn(move || {
                while let Ok(n) = run_rx.recv() {
                    if report_tx.send(driver.run(n)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn the driver thread");
        Self {
            runs: Some(run_tx),
            reports: report_rx,
            stop,
            join: Some(join),
        }
    }

    /// Runs `requests` requests through the queue and waits for all of them. Panics, with the
    /// reason, when the dataplane stalls or the driver finds a bad completion.
    pub fn run(&self, requests: u64) -> RunReport {
        let runs = self.runs.as_ref().expect("driver running");
        runs.send(requests)
            .expect("the fake driver thread is gone (it panicked?)");
        match self.reports.recv_timeout(RUN_TIMEOUT) {
            Ok(Ok(report)) => report,
            Ok(Err(why)) => panic!("fake driver: {why}"),
            Err(RecvTimeoutError::Timeout) => panic!(
                "fake driver: {requests} requests not done within {RUN_TIMEOUT:?} (dataplane stuck?)"
            ),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("fake driver: the thread died during a run (see its panic above)")
            }
        }
    }
}

impl Drop for FakeDriver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.runs = None; // the thread's recv fails: it exits
        if let Some(join) = self.join.take() {
            // Bounded: a run in progress notices `stop` within a sleep slice or a spin.
            let _ = join.join();
        }
    }
}

struct Driver {
    setup: DriverSetup,
    /// Guest memory as the guest sees it: status bytes are read and written natively.
    host: HostMemory,
    free: Vec<u16>,
    /// Indexed by head descriptor.
    in_flight: Vec<bool>,
    batch: Vec<u16>,
    stop: Arc<AtomicBool>,
}

impl Driver {
    fn run(&mut self, n: u64) -> Result<RunReport, String> {
        let start = Instant::now();
        let mut report = RunReport::default();
        let mut submitted = 0u64;
        while report.requests < n {
            if self.stop.load(Ordering::Relaxed) {
                return Err("stopped during a run".into());
            }
            self.batch.clear();
            while submitted < n {
                let Some(head) = self.free.pop() else { break };
                let at = self.setup.chains.status_addr(head);
                if !self.host.write_u8(at.0, 0xff) {
                    return Err(format!("status byte of chain {head} outside guest memory"));
                }
                self.in_flight[usize::from(head)] = true;
                self.batch.push(head);
                submitted += 1;
            }
            if !self.batch.is_empty() && self.setup.ring.publish(&self.batch) {
                self.setup.kick.write(1).map_err(|e| format!("kick: {e}"))?;
                report.kicks += 1;
            }
            let mut got = 0;
            while let Some((head, len)) = self.setup.ring.pop_used() {
                self.check(head, len)?;
                self.in_flight[usize::from(head)] = false;
                self.free.push(head);
                got += 1;
            }
            report.requests += got;
            if got == 0 && report.requests < n {
                self.wait(&mut report, n)?;
            }
        }
        report.elapsed = start.elapsed();
        Ok(report)
    }

    fn check(&self, head: u16, len: u32) -> Result<(), String> {
        let chains = &self.setup.chains;
        if !self
            .in_flight
            .get(usize::from(head))
            .copied()
            .unwrap_or(false)
        {
            return Err(format!(
                "used entry for chain {head}, which is not in flight"
            ));
        }
        let [st] = self
            .host
            .read_bytes::<1>(chains.status_addr(head).0)
            .ok_or("status byte outside guest memory")?;
        if st != status::OK || len != chains.used_len() {
            return Err(format!(
                "chain {head} completed with status {st} and used length {len} (want {} and {})",
                status::OK,
                chains.used_len()
            ));
        }
        Ok(())
    }

    /// Waits for a used entry: spins for [`SPIN`], then sleeps on the interrupt.
    fn wait(&mut self, report: &mut RunReport, n: u64) -> Result<(), String> {
        let spin_start = Instant::now();
        let mut spins = 0u32;
        while !self.setup.ring.has_used() {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && spin_start.elapsed() >= SPIN {
                return self.sleep(report, n);
            }
        }
        Ok(())
    }

    fn sleep(&mut self, report: &mut RunReport, n: u64) -> Result<(), String> {
        let deadline = Instant::now() + STALL_TIMEOUT;
        loop {
            if self.setup.ring.arm_interrupt() {
                return Ok(());
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err("stopped during a run".into());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no completion for {STALL_TIMEOUT:?}: {} of {n} requests done, {} in flight; \
                     the iothread lost a kick or stopped",
                    report.requests,
                    self.setup.chains.heads.len() - self.free.len()
                ));
            }
            report.sleeps += 1;
            let mut pfd = libc::pollfd {
                fd: self.setup.irq.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is one valid pollfd that outlives the call, and nfds is 1; poll
            // only writes its `revents`.
            let r = unsafe { libc::poll(&mut pfd, 1, SLEEP_SLICE_MS) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(format!("poll on the interrupt eventfd: {e}"));
                }
            }
            // Clear the interrupt (EAGAIN when it did not fire).
            let _ = self.setup.irq.read();
        }
    }
}
