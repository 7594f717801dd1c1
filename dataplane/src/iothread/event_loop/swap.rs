//! A file swap on the iothread ([`crate::IoThread::swap_file`]): the owner's handlers drain
//! (no new requests; those in flight complete on the old file), then each one's engine is
//! rebuilt on the new file, all or none, the owner's hook runs, and they resume. Checked at
//! every loop iteration like a detach, so the thread serves its other handlers meanwhile.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, EpollEvent, EventSet};

use super::{fd_token, Loop};
use crate::handler::{AttachError, Watch};
use crate::iothread::{SwapHook, SwapOutcome};

/// A swap waiting for the owner's in-flight requests.
pub(in crate::iothread) struct PendingSwap {
    owner: u64,
    file: File,
    deadline: Instant,
    /// Requests in flight when the thread first looked.
    drained: Option<usize>,
    on_swapped: SwapHook,
    reply: Sender<Result<SwapOutcome, AttachError>>,
}

impl PendingSwap {
    /// A swap of `owner`'s handlers onto `file` that gives up `wait` from now.
    pub(in crate::iothread) fn new(
        owner: u64,
        file: File,
        wait: Duration,
        on_swapped: SwapHook,
        reply: Sender<Result<SwapOutcome, AttachError>>,
    ) -> Self {
        Self {
            owner,
            file,
            deadline: Instant::now() + wait,
            drained: None,
            on_swapped,
            reply,
        }
    }

    /// When the swap gives up.
    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Loop {
    /// Answers the swaps whose owner drained (swapped, or failed with the old file kept) or
    /// whose deadline passed (given up); the others wait for a later iteration.
    pub(super) fn finish_swaps(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.swaps.len() {
            let owner = self.swaps[i].owner;
            let slots = self.owner_slots(owner);
            let mut in_flight = 0;
            for &slot in &slots {
                if let Some(Some(s)) = self.slots.get_mut(slot) {
                    in_flight += s.handler.drain(&self.turn);
                }
            }
            // A command the thread reaches only after its deadline (it was blocked, e.g. in a
            // synchronous read of a hung file) is given up: its caller may have given up too.
            let late = self.swaps[i].drained.is_none() && now >= self.swaps[i].deadline;
            let drained = *self.swaps[i].drained.get_or_insert(in_flight);
            // The caller waits a margin past the deadline, so a swap it saw start and found
            // drained at the deadline still counts.
            if in_flight == 0 && !late {
                let swap = self.swaps.swap_remove(i);
                let result = self.swap_files(&slots, &swap.file);
                if result.is_ok() {
                    (swap.on_swapped)();
                }
                self.resume(owner, &slots);
                let _ = swap
                    .reply
                    .send(result.map(|()| SwapOutcome::Swapped { drained }));
            } else if late || now >= self.swaps[i].deadline {
                let swap = self.swaps.swap_remove(i);
                self.resume(owner, &slots);
                log::warn!(
                    "iothread: file swap given up: {in_flight} requests still in flight on the \
                     old file"
                );
                let _ = swap.reply.send(Ok(SwapOutcome::TimedOut { in_flight }));
            } else {
                i += 1;
            }
        }
    }

    /// The slots of `owner`'s handlers.
    fn owner_slots(&self, owner: u64) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|s| s.handler.owner() == owner))
            .map(|(slot, _)| slot)
            .collect()
    }

    /// Rebuilds the engine of every handler in `slots` (drained) on `file`, all or none: on a
    /// failure the handlers already moved get their old file back. Their fds are unwatched
    /// around it (an engine's completion fd changes with the engine; a number the kernel
    /// reuses for the new fd must not be deleted as the old one).
    fn swap_files(&mut self, slots: &[usize], file: &File) -> Result<(), AttachError> {
        let mut watched = Vec::with_capacity(slots.len());
        for &slot in slots {
            self.end_watches(slot);
            watched.push(self.unregister_fds(slot));
        }
        let mut replaced: Vec<(usize, File)> = Vec::with_capacity(slots.len());
        let mut failure = None;
        for &slot in slots {
            let Some(Some(s)) = self.slots.get_mut(slot) else {
                continue;
            };
            let turn = &self.turn;
            let moved = match s.handler.backing() {
                Some(b) => file
                    .try_clone()
                    .map_err(AttachError::DupFile)
                    .and_then(|f| b.replace_file(f, turn)),
                None => Err(AttachError::NoFile),
            };
            match moved {
                Ok(old) => replaced.push((slot, old)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_some() {
            for (slot, old) in replaced.into_iter().rev() {
                let turn = &self.turn;
                let back = self
                    .slots
                    .get_mut(slot)
                    .and_then(Option::as_mut)
                    .and_then(|s| s.handler.backing())
                    .map(|b| b.replace_file(old, turn));
                if let Some(Err(e)) = back {
                    log::error!("iothread: handler {slot} lost its file on a failed swap: {e}");
                }
            }
        }
        for (&slot, was_watched) in slots.iter().zip(watched) {
            if was_watched {
                self.register_fds(slot);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Ends the poll and completion watch of the handler in `slot` (a new engine starts
    /// without them).
    fn end_watches(&mut self, slot: usize) {
        if self.suppressed.contains(&slot) {
            if let Some(s) = self.slot(slot) {
                s.end_watch(Watch::Polling);
            }
            self.suppressed.retain(|&c| c != slot);
        }
        if self.completions_watched.contains(&slot) {
            if let Some(s) = self.slot(slot) {
                s.end_watch(Watch::Completions);
            }
            self.completions_watched.retain(|&c| c != slot);
        }
    }

    /// Stops watching the fds of the handler in `slot`; returns whether it had any (a stopped
    /// handler has none, and gets none back).
    fn unregister_fds(&mut self, slot: usize) -> bool {
        let Some(Some(s)) = self.slots.get_mut(slot) else {
            return false;
        };
        let fds = std::mem::take(&mut s.watched);
        let had = !fds.is_empty();
        for fd in fds {
            self.unregister(fd);
        }
        had
    }

    /// Watches the current fds of the handler in `slot` (edge-triggered: one already signalled,
    /// a kick during the swap, is reported at once). A failure leaves that fd out, logged: the
    /// handler still runs on its other fds and the thread's turns.
    fn register_fds(&mut self, slot: usize) {
        let Some(fds) = self.slot(slot).map(|s| s.handler.wake_fds()) else {
            return;
        };
        let mut watched = Vec::with_capacity(fds.len());
        for (index, fd) in fds.into_iter().enumerate() {
            let added = self.epoll.ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(
                    EventSet::IN | EventSet::EDGE_TRIGGERED,
                    fd_token(slot, index),
                ),
            );
            match added {
                Ok(()) => {
                    self.stats.watched_fds.fetch_add(1, Ordering::Relaxed);
                    watched.push(fd);
                }
                Err(e) => {
                    log::error!("iothread: handler {slot}: watching fd {fd} after a swap: {e}")
                }
            }
        }
        if let Some(Some(s)) = self.slots.get_mut(slot) {
            s.watched = watched;
        }
    }

    /// Lets the handlers in `slots` take requests again, unless a detach of `owner` is
    /// waiting for them to drain; each gets a turn at once for what the guest queued meanwhile.
    fn resume(&mut self, owner: u64, slots: &[usize]) {
        if self.detaches.iter().any(|d| d.owner == owner) {
            return;
        }
        for &slot in slots {
            if let Some(s) = self.slot(slot) {
                s.handler.resume();
                if !self.carry.contains(&slot) {
                    self.carry.push(slot);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::io::{AsRawFd, RawFd};
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use vmm_sys_util::eventfd::EventFd;

    use crate::handler::{AttachError, FileBacked, Handler, TurnEnd};
    use crate::iothread::tests::wait_for;
    use crate::iothread::{IoThread, IoThreadError, SwapOutcome, ThreadTurn};

    /// What a test sees of a [`Swappable`] handler.
    #[derive(Default)]
    struct Seen {
        /// The first byte of the handler's file, read at each turn.
        first_byte: AtomicU64,
        /// Requests "in flight": drain reports them, the test completes them.
        in_flight: AtomicUsize,
        /// Draining (no new work) since the last resume.
        draining: AtomicBool,
        /// Turns taken while not draining.
        working_turns: AtomicU64,
        /// Refuse the next `replace_file`.
        refuse: AtomicBool,
        /// The events in order: "drain", "replace", "resume".
        log: Mutex<Vec<&'static str>>,
    }

    struct Swappable {
        owner: u64,
        kick: EventFd,
        file: std::fs::File,
        seen: Arc<Seen>,
    }

    impl Swappable {
        fn new(owner: u64, file: &std::fs::File) -> (Self, Arc<Seen>) {
            let seen = Arc::new(Seen::default());
            let h = Self {
                owner,
                kick: EventFd::new(libc::EFD_NONBLOCK).expect("efd"),
                file: file.try_clone().expect("dup"),
                seen: seen.clone(),
            };
            (h, seen)
        }

        fn note(&self, what: &'static str) {
            self.seen.log.lock().expect("log").push(what);
        }
    }

    impl Handler for Swappable {
        fn owner(&self) -> u64 {
            self.owner
        }
        fn wake_fds(&self) -> Vec<RawFd> {
            vec![self.kick.as_raw_fd()]
        }
        fn run(&mut self, _max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
            let mut byte = [0u8; 1];
            if self.file.seek(SeekFrom::Start(0)).is_ok() && self.file.read(&mut byte).is_ok() {
                self.seen
                    .first_byte
                    .store(u64::from(byte[0]), Ordering::SeqCst);
            }
            if !self.seen.draining.load(Ordering::SeqCst) {
                self.seen.working_turns.fetch_add(1, Ordering::SeqCst);
            }
            TurnEnd::IDLE
        }
        fn drain(&mut self, _turn: &ThreadTurn) -> usize {
            if !self.seen.draining.swap(true, Ordering::SeqCst) {
                self.note("drain");
            }
            self.seen.in_flight.load(Ordering::SeqCst)
        }
        fn resume(&mut self) {
            self.note("resume");
            self.seen.draining.store(false, Ordering::SeqCst);
        }
        fn backing(&mut self) -> Option<&mut dyn FileBacked> {
            Some(self)
        }
    }

    impl FileBacked for Swappable {
        fn replace_file(
            &mut self,
            file: std::fs::File,
            _turn: &ThreadTurn,
        ) -> Result<std::fs::File, AttachError> {
            if self.seen.refuse.swap(false, Ordering::SeqCst) {
                return Err(AttachError::NoFile);
            }
            self.note("replace");
            Ok(std::mem::replace(&mut self.file, file))
        }
    }

    fn file_with(byte: u8) -> std::fs::File {
        let mut f = tempfile();
        std::io::Write::write_all(&mut f, &[byte; 16]).expect("write");
        f
    }

    fn tempfile() -> std::fs::File {
        use std::sync::atomic::AtomicU32;
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "osprey-swap-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        std::fs::remove_file(&path).ok();
        f
    }

    #[test]
    fn swaps_after_in_flight_requests_complete_then_runs_the_hook_then_resumes() {
        let t = IoThread::spawn("swap-ok", 0).expect("spawn");
        let old = file_with(0xaa);
        let (a, seen_a) = Swappable::new(1, &old);
        let (b, seen_b) = Swappable::new(1, &old);
        let (other, seen_other) = Swappable::new(2, &old);
        let kick_a = a.kick.try_clone().expect("dup");
        t.attach(vec![Box::new(a), Box::new(b), Box::new(other)])
            .expect("attach");
        seen_a.in_flight.store(3, Ordering::SeqCst);
        let hook_seen = seen_a.clone();
        let hooked_while_draining = Arc::new(AtomicBool::new(false));
        let hooked = hooked_while_draining.clone();
        let completer = {
            let seen = seen_a.clone();
            // The completion's signal, as an engine's completion fd would give it.
            let signal = kick_a.try_clone().expect("dup");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                seen.in_flight.store(0, Ordering::SeqCst);
                signal.write(1).expect("signal");
            })
        };
        let outcome = t
            .swap_file(
                1,
                file_with(0xbb),
                Duration::from_secs(5),
                Box::new(move || {
                    hooked.store(hook_seen.draining.load(Ordering::SeqCst), Ordering::SeqCst)
                }),
            )
            .expect("swap");
        completer.join().expect("completer");
        assert_eq!(outcome, SwapOutcome::Swapped { drained: 3 });
        assert!(
            hooked_while_draining.load(Ordering::SeqCst),
            "the hook runs before the handlers take requests again"
        );
        for seen in [&seen_a, &seen_b] {
            assert_eq!(
                *seen.log.lock().expect("log"),
                vec!["drain", "replace", "resume"]
            );
        }
        assert!(
            seen_other.log.lock().expect("log").is_empty(),
            "another owner's handler is left alone"
        );
        // The handler works on the new file, woken by its kick fd (watched again).
        kick_a.write(1).expect("kick");
        wait_for(|| seen_a.first_byte.load(Ordering::SeqCst) == 0xbb);
        t.shutdown();
    }

    #[test]
    fn a_swap_that_outlasts_its_wait_is_given_up_on_the_old_file() {
        let t = IoThread::spawn("swap-timeout", 0).expect("spawn");
        let old = file_with(0xaa);
        let (h, seen) = Swappable::new(1, &old);
        let kick = h.kick.try_clone().expect("dup");
        t.attach(vec![Box::new(h)]).expect("attach");
        seen.in_flight.store(1, Ordering::SeqCst);
        let ran = Arc::new(AtomicBool::new(false));
        let hook_ran = ran.clone();
        let outcome = t
            .swap_file(
                1,
                file_with(0xbb),
                Duration::from_millis(50),
                Box::new(move || hook_ran.store(true, Ordering::SeqCst)),
            )
            .expect("answered");
        assert_eq!(outcome, SwapOutcome::TimedOut { in_flight: 1 });
        assert!(!ran.load(Ordering::SeqCst), "no hook for a swap given up");
        assert_eq!(*seen.log.lock().expect("log"), vec!["drain", "resume"]);
        let before = seen.working_turns.load(Ordering::SeqCst);
        kick.write(1).expect("kick");
        wait_for(|| seen.working_turns.load(Ordering::SeqCst) > before);
        assert_eq!(seen.first_byte.load(Ordering::SeqCst), 0xaa, "old file");
        seen.in_flight.store(0, Ordering::SeqCst);
        t.shutdown();
    }

    #[test]
    fn a_swap_the_thread_reaches_after_its_deadline_is_given_up() {
        let t = IoThread::spawn("swap-late", 0).expect("spawn");
        let old = file_with(0xaa);
        let (h, seen) = Swappable::new(1, &old);
        t.attach(vec![Box::new(h)]).expect("attach");
        // The thread is busy (a blocking read of a hung file) past the swap's deadline.
        let busy = {
            let t = t.clone();
            std::thread::spawn(move || {
                t.run_on_thread(Box::new(|| {
                    std::thread::sleep(Duration::from_millis(100));
                    Ok(())
                }))
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        let ran = Arc::new(AtomicBool::new(false));
        let hook_ran = ran.clone();
        let outcome = t
            .swap_file(
                1,
                file_with(0xbb),
                Duration::from_millis(20),
                Box::new(move || hook_ran.store(true, Ordering::SeqCst)),
            )
            .expect("answered within the margin");
        busy.join().expect("busy").expect("hook");
        assert_eq!(outcome, SwapOutcome::TimedOut { in_flight: 0 });
        assert!(!ran.load(Ordering::SeqCst));
        assert!(!seen.log.lock().expect("log").contains(&"replace"));
        t.shutdown();
    }

    #[test]
    fn a_failed_replacement_puts_every_old_file_back() {
        let t = IoThread::spawn("swap-fail", 0).expect("spawn");
        let old = file_with(0xaa);
        let (a, seen_a) = Swappable::new(1, &old);
        let (b, seen_b) = Swappable::new(1, &old);
        seen_b.refuse.store(true, Ordering::SeqCst);
        let kick_a = a.kick.try_clone().expect("dup");
        t.attach(vec![Box::new(a), Box::new(b)]).expect("attach");
        let e = t
            .swap_file(1, file_with(0xbb), Duration::from_secs(1), Box::new(|| {}))
            .expect_err("refused");
        assert!(matches!(e, IoThreadError::Swap { .. }), "{e}");
        assert_eq!(
            *seen_a.log.lock().expect("log"),
            vec!["drain", "replace", "replace", "resume"],
            "moved, then moved back"
        );
        kick_a.write(1).expect("kick");
        wait_for(|| seen_a.working_turns.load(Ordering::SeqCst) > 0);
        assert_eq!(seen_a.first_byte.load(Ordering::SeqCst), 0xaa);
        // An owner with no handler here swaps at once: only its hook runs.
        let ran = Arc::new(AtomicBool::new(false));
        let hook_ran = ran.clone();
        let outcome = t
            .swap_file(
                9,
                file_with(0xcc),
                Duration::from_secs(1),
                Box::new(move || hook_ran.store(true, Ordering::SeqCst)),
            )
            .expect("no handlers");
        assert_eq!(outcome, SwapOutcome::Swapped { drained: 0 });
        assert!(ran.load(Ordering::SeqCst));
        t.shutdown();
    }
}
