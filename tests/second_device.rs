//! A second device kind joins an iothread from outside the crate, through the public traits
//! only: a toy "echo" device whose guest posts numbers on a shared ring and kicks an eventfd,
//! and whose handler doubles each number and signals a completion eventfd. It is polled, drained
//! and detached like a virtio-blk queue, and gets its ring back on detach without a downcast.

use std::collections::VecDeque;
use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::poll::{PolicyKind, PollParams};
use dataplane::{Detach, Handler, IoThread, Poll, ThreadTurn, TurnEnd, Watch};
use vmm_sys_util::eventfd::EventFd;

/// The toy device's "virtqueue": requests in, results out.
#[derive(Debug, Default)]
struct EchoRing {
    avail: VecDeque<u64>,
    used: Vec<u64>,
    /// The guest need not kick: the thread is polling the ring.
    kicks_suppressed: bool,
}

/// What the device gets back when its handler leaves the thread.
#[derive(Debug)]
struct EchoQueue {
    ring: Arc<Mutex<EchoRing>>,
    served: u64,
}

struct EchoHandler {
    owner: u64,
    kick: EventFd,
    done: EventFd,
    queue: EchoQueue,
    back: Sender<EchoQueue>,
}

impl Handler for EchoHandler {
    fn owner(&self) -> u64 {
        self.owner
    }
    fn wake_fds(&self) -> Vec<RawFd> {
        vec![self.kick.as_raw_fd()]
    }
    fn run(&mut self, max_batch: usize, _turn: &ThreadTurn) -> TurnEnd {
        let mut ring = self.queue.ring.lock().expect("ring");
        let mut n = 0;
        while n < max_batch {
            let Some(v) = ring.avail.pop_front() else {
                break;
            };
            ring.used.push(v * 2);
            n += 1;
        }
        self.queue.served += n as u64;
        if n > 0 {
            let _ = self.done.write(1);
        }
        TurnEnd {
            more: !ring.avail.is_empty(),
            ..TurnEnd::IDLE
        }
    }
    fn drain(&mut self, _turn: &ThreadTurn) -> usize {
        0
    }
    fn detach(self: Box<Self>) {
        let _ = self.back.send(self.queue);
    }
    fn poller(&mut self) -> Option<&mut dyn Poll> {
        Some(self)
    }
}

impl Poll for EchoHandler {
    fn poll(&mut self) -> bool {
        !self.queue.ring.lock().expect("ring").avail.is_empty()
    }
    fn watch(&mut self, what: Watch, on: bool) -> bool {
        if what != Watch::Polling {
            return false;
        }
        let mut ring = self.queue.ring.lock().expect("ring");
        ring.kicks_suppressed = on;
        !on && !ring.avail.is_empty()
    }
    fn completed(&self) -> u64 {
        self.queue.served
    }
}

/// The guest side: posts a number and kicks unless the thread polls.
fn post(ring: &Mutex<EchoRing>, kick: &EventFd, v: u64) {
    let mut r = ring.lock().expect("ring");
    r.avail.push_back(v);
    if !r.kicks_suppressed {
        kick.write(1).expect("kick");
    }
}

fn wait_used(ring: &Mutex<EchoRing>, n: usize) {
    let t0 = Instant::now();
    while ring.lock().expect("ring").used.len() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the echo device stalled"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn echo(
    owner: u64,
) -> (
    EchoHandler,
    Arc<Mutex<EchoRing>>,
    EventFd,
    Receiver<EchoQueue>,
) {
    let ring = Arc::new(Mutex::new(EchoRing::default()));
    let kick = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let (back, returned) = mpsc::channel();
    let h = EchoHandler {
        owner,
        kick: kick.try_clone().expect("clone"),
        done: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
        queue: EchoQueue {
            ring: ring.clone(),
            served: 0,
        },
        back,
    };
    (h, ring, kick, returned)
}

#[test]
fn a_toy_device_is_served_polled_and_handed_back() {
    let params = PollParams {
        policy: PolicyKind::Classic,
        ..PollParams::default()
    };
    let thread = IoThread::spawn_with("echo", 4, params).expect("iothread");
    let (a, ring_a, kick_a, back_a) = echo(1);
    let (b, ring_b, kick_b, back_b) = echo(2);
    thread
        .attach(vec![Box::new(a), Box::new(b)])
        .expect("two toy devices join the thread");
    for i in 0..100 {
        post(&ring_a, &kick_a, i);
        post(&ring_b, &kick_b, 1000 + i);
    }
    wait_used(&ring_a, 100);
    wait_used(&ring_b, 100);
    assert_eq!(
        ring_a.lock().expect("ring").used,
        (0..100).map(|i| i * 2).collect::<Vec<_>>()
    );
    let stats = thread.stats().snapshot();
    let stat = |name: &str| {
        stats
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .expect("stat")
    };
    assert_eq!(stat("handlers"), 2);
    assert_eq!(stat("poll_disabled_handlers"), 0, "the toy device polls");
    assert_eq!(
        thread.detach(1, Duration::from_secs(1)).expect("detach"),
        Detach::Done(1)
    );
    let queue = back_a.try_recv().expect("device 1 got its queue back");
    assert_eq!(queue.served, 100);
    // The other device keeps being served.
    post(&ring_b, &kick_b, 7);
    wait_used(&ring_b, 101);
    assert!(
        back_b.try_recv().is_err(),
        "device 2 is still on the thread"
    );
    thread.shutdown();
}
