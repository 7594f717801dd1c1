//! Keeping an iothread off the CPUs where given threads run (the VM's vCPUs, which a polling
//! guest keeps busy). Where a vCPU and the iothread that serves it share a CPU, every hand-off
//! between them is a context switch, and one that takes a vCPU off its CPU costs it far more
//! than the switch itself: on a host that also runs a CPU-bound process, a ping's round trip
//! measured 90 µs with the two together against 25 µs apart (docs/network.md). So every
//! [`CHECK_PERIOD_NS`] the thread reads which CPU each watched thread is running on
//! (`/proc/self/task/<tid>/stat`, opened by the owner) and restricts itself to the other CPUs
//! it may use; when that leaves none (as many running vCPUs as CPUs), it may use all of them.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::cpu_set::set_this_thread_cpus;

/// How often the thread looks where the watched threads run (ns).
pub const CHECK_PERIOD_NS: u64 = 10_000_000;

/// The largest `/proc/<pid>/task/<tid>/stat` read (the line is ~300 bytes).
const STAT_BYTES: usize = 1024;

/// What the thread keeps apart from, and where it runs now.
#[derive(Debug)]
pub struct KeepApart {
    /// Each watched thread's `stat` file.
    watched: Vec<File>,
    /// The CPUs the thread may use (sorted).
    allowed: Vec<usize>,
    /// The CPUs it was last restricted to (`None`: not yet).
    current: Option<Vec<usize>>,
    next_check_ns: u64,
    /// Times the thread changed its CPUs.
    moves: u64,
}

impl KeepApart {
    /// Keeps the calling thread off the CPUs where the threads of `watched` (their `stat`
    /// files) are running, within `allowed`.
    pub fn new(watched: Vec<File>, mut allowed: Vec<usize>) -> Self {
        allowed.sort_unstable();
        allowed.dedup();
        Self {
            watched,
            allowed,
            current: None,
            next_check_ns: 0,
            moves: 0,
        }
    }

    /// Times the thread changed its CPUs.
    pub fn moves(&self) -> u64 {
        self.moves
    }

    /// At most every [`CHECK_PERIOD_NS`] (`now_ns` on the caller's monotonic clock): reads where
    /// the watched threads run and moves the calling thread if its CPUs should change. Returns
    /// the new CPUs when it moved.
    pub fn check(&mut self, now_ns: u64) -> Option<Vec<usize>> {
        if now_ns < self.next_check_ns {
            return None;
        }
        self.next_check_ns = now_ns.saturating_add(CHECK_PERIOD_NS);
        let mut buf = [0u8; STAT_BYTES];
        let running: Vec<usize> = self
            .watched
            .iter()
            .filter_map(|f| {
                let n = f.read_at(&mut buf, 0).ok()?;
                let (state, cpu) = parse_stat(std::str::from_utf8(buf.get(..n)?).ok()?)?;
                (state == 'R').then_some(cpu)
            })
            .collect();
        let want = apart_from(&self.allowed, &running);
        if self.current.as_ref() == Some(&want) {
            return None;
        }
        if let Err(e) = set_this_thread_cpus(&want) {
            log::warn!("iothread: cannot keep off the vCPUs' CPUs ({e}); placement stops");
            self.watched.clear();
            self.current = Some(want);
            self.next_check_ns = u64::MAX;
            return None;
        }
        self.moves += 1;
        self.current = Some(want.clone());
        Some(want)
    }
}

/// The CPUs of `allowed` that no thread of `running_on` runs on, or all of `allowed` when
/// that leaves none.
pub fn apart_from(allowed: &[usize], running_on: &[usize]) -> Vec<usize> {
    let free: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !running_on.contains(c))
        .collect();
    if free.is_empty() {
        allowed.to_vec()
    } else {
        free
    }
}

/// The state (field 3) and the CPU it last ran on (field 39) of a `/proc/.../stat` line. The
/// command name (field 2) may hold spaces and parentheses: the fields after it are counted
/// from its last `)`.
pub fn parse_stat(line: &str) -> Option<(char, usize)> {
    let rest = line.get(line.rfind(')')? + 1..)?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 39 is the 37th after the state (field 3).
    let cpu = fields.nth(35)?.parse().ok()?;
    Some((state, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_set::allowed_cpus;

    /// A stat line as the kernel writes it, for a thread named `comm` in `state` on `cpu`.
    fn stat(comm: &str, state: char, cpu: usize) -> String {
        let mut f: Vec<String> = vec!["1234".into(), format!("({comm})"), state.to_string()];
        for i in 4..=52 {
            f.push(if i == 39 { cpu.to_string() } else { "0".into() });
        }
        f.join(" ")
    }

    #[test]
    fn the_state_and_cpu_come_from_after_the_last_parenthesis() {
        assert_eq!(parse_stat(&stat("vcpu0", 'R', 3)), Some(('R', 3)));
        assert_eq!(parse_stat(&stat("a) R 9 (b", 'S', 1)), Some(('S', 1)));
        assert_eq!(parse_stat("1234 (x) R 1 2"), None, "too short");
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn the_thread_takes_the_cpus_no_running_vcpu_holds() {
        assert_eq!(apart_from(&[0, 1], &[0]), vec![1]);
        assert_eq!(apart_from(&[0, 1, 2, 3], &[1, 3]), vec![0, 2]);
        assert_eq!(
            apart_from(&[0, 1], &[5]),
            vec![0, 1],
            "a CPU it may not use"
        );
    }

    #[test]
    fn with_no_cpu_to_spare_it_may_use_them_all() {
        assert_eq!(apart_from(&[0, 1], &[0, 1]), vec![0, 1]);
        assert_eq!(apart_from(&[2], &[2]), vec![2]);
    }

    /// A watched thread of this process that spins: the checking thread moves off its CPU.
    #[test]
    fn a_checking_thread_moves_off_a_spinning_threads_cpu_once() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty(), "sched_getaffinity");
        if allowed.len() < 2 {
            eprintln!("skipped: one CPU");
            return;
        }
        let spin_cpu = allowed[0];
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let spinner = std::thread::spawn(move || {
            set_this_thread_cpus(&[spin_cpu]).expect("pin the spinner");
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = tid_rx.recv().expect("tid");
        let file = File::open(format!("/proc/self/task/{tid}/stat")).expect("stat");
        let checker = std::thread::spawn(move || {
            let mut apart = KeepApart::new(vec![file], allowed);
            // The spinner may be between two slices at a check: a few looks find it running.
            let mut moved = None;
            for i in 0..100 {
                if let Some(cpus) = apart.check(i * CHECK_PERIOD_NS) {
                    moved = Some(cpus);
                }
                if moved.as_ref().is_some_and(|c| !c.contains(&spin_cpu)) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            (moved, apart.moves())
        });
        let (moved, moves) = checker.join().expect("checker");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().expect("spinner");
        let moved = moved.expect("the checker restricted itself");
        assert!(
            !moved.contains(&spin_cpu),
            "off the spinner's CPU: {moved:?}"
        );
        assert!(moves >= 1);
    }

    /// A watched thread that ended holds no CPU: the checker may use every CPU again.
    #[test]
    fn a_watched_thread_that_ended_frees_every_cpu() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty(), "sched_getaffinity");
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let watched = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            let _ = go_rx.recv();
        });
        let tid = tid_rx.recv().expect("tid");
        let file = File::open(format!("/proc/self/task/{tid}/stat")).expect("stat");
        let _ = go_tx.send(());
        watched.join().expect("watched thread");
        let checker = std::thread::spawn(move || {
            let mut apart = KeepApart::new(vec![file], allowed.clone());
            (apart.check(0), allowed)
        });
        let (cpus, allowed) = checker.join().expect("checker");
        assert_eq!(cpus, Some(allowed), "every CPU it may use");
    }
}
