//! An O_DIRECT file: the Linux AIO engine beside the ring for small turns, inline only when
//! alone or fast, probes of a sleeping device, the gate switching inline off and probing again.

use super::*;

use crate::engine::auto::direct::{MAX_PROBE_GAP_TURNS, MIN_PROBE_GAP_TURNS};
use crate::engine::auto::gate::{
    MAX_FAILED_ATTEMPTS, MAX_REPROBE_GAP_REQUESTS, MIN_REPROBE_GAP_REQUESTS, WINDOW_ATTEMPTS,
};

#[test]
fn small_direct_turns_go_to_linux_aio_beside_the_ring_and_batches_to_the_ring() {
    let Some((s, e)) = direct_engine("auto-shallow") else {
        return;
    };
    if e.inner.kind() != EngineKind::IoUring {
        eprintln!("no io_uring here: no engine beside it");
        return;
    }
    let aio = inner(open(&s.path, true, true), 32, true, EngineKind::LinuxAio);
    let mut e = e.with_shallow(aio);
    assert_eq!(e.completion_fds().len(), 2, "a wake-up from either engine");
    // A device known to sleep in its calls; another queue has work: nothing goes inline.
    e.direct_mut().sampler.on_cpu_permille = Some(0);
    let busy = ThreadTurn::new(0, 2);
    let buf = Aligned::new(8 * 4096);
    let one = |i: u64| IoRequest {
        op: IoOp::Write {
            offset: i * 4096,
            iovecs: iovecs![buf.iov(i as usize * 4096, 4096)],
        },
        token: i,
    };
    // A turn of one: to Linux AIO.
    e.submit(one(0)).expect("room");
    e.commit(&busy);
    assert_eq!(e.shallow_in_flight(), 1, "{:?}", e.stats());
    // A flush after it waits for it, though the flush goes to the ring.
    e.submit(IoRequest {
        op: IoOp::Flush,
        token: 100,
    })
    .expect("room");
    e.commit(&busy);
    assert_eq!(
        e.inner.in_flight(),
        0,
        "the flush went before the write completed"
    );
    let done = complete_in(&mut e, 2, &busy);
    let tokens: Vec<u64> = done.iter().map(|c| c.token).collect();
    assert_eq!(tokens, [0, 100], "{done:?}");
    // A turn of ring_batch() or more: to the ring.
    for i in 0..ring_batch() as u64 {
        e.submit(one(i)).expect("room");
    }
    e.commit(&busy);
    assert_eq!(e.shallow_in_flight(), 0);
    assert_eq!(complete_in(&mut e, ring_batch(), &busy).len(), ring_batch());
    let st = e.stats();
    assert_eq!(
        (st.inline, st.deferred, st.shallow),
        (0, 1 + ring_batch() as u64, 1),
        "{st:?}"
    );
}

#[test]
fn an_o_direct_request_goes_inline_only_when_alone_on_the_thread() {
    let Some((_store, mut e)) = direct_engine("auto-alone") else {
        return;
    };
    let buf = Aligned::new(4096);
    // A device known to sleep in its calls (no probe due: the CPU share is sampled).
    e.direct_mut().sampler.on_cpu_permille = Some(0);
    // Another queue of the thread has work this round: the request must not block it.
    let busy = ThreadTurn::new(0, 2);
    e.submit(read(&buf, 0, 1)).expect("room");
    assert_eq!(complete_in(&mut e, 1, &busy).len(), 1);
    let st = e.stats();
    assert_eq!((st.inline, st.failed, st.deferred), (0, 0, 1), "{st:?}");
    // The only queue with work, but the thread serves another one, which may get work
    // while the call waits: not inline either.
    let shared = ThreadTurn::new(2, 1);
    e.submit(read(&buf, 8192, 3)).expect("room");
    assert_eq!(complete_in(&mut e, 1, &shared).len(), 1);
    let st = e.stats();
    assert_eq!((st.attempts, st.deferred), (0, 2), "{st:?}");
    // Alone: tried inline.
    let alone = ThreadTurn::new(1, 1);
    e.submit(read(&buf, 4096, 2)).expect("room");
    assert_eq!(complete_in(&mut e, 1, &alone).len(), 1);
    let st = e.stats();
    assert_eq!(st.attempts, 1, "{st:?}");
}

#[test]
fn a_device_completing_on_the_callers_cpu_gets_every_request_inline() {
    let Some((_store, mut e)) = direct_engine("auto-on-cpu") else {
        return;
    };
    let buf = Aligned::new(4096);
    let busy = ThreadTurn::new(0, 2);
    // Unknown device: the first request of the turn is a probe, the others go async.
    for t in 0..8 {
        e.submit(read(&buf, t * 4096, t)).expect("room");
    }
    assert_eq!(complete_in(&mut e, 8, &busy).len(), 8);
    let st = e.stats();
    assert_eq!(st.attempts, 1, "one probe: {st:?}");
    // A device measured to keep the caller on its CPU (zram): every request inline.
    e.direct_mut().sampler.on_cpu_permille = Some(950);
    for t in 0..8 {
        e.submit(read(&buf, t * 4096, 100 + t)).expect("room");
    }
    assert_eq!(
        e.commit(&busy),
        8,
        "the turn's requests, all inline, count as started"
    );
    assert_eq!(complete_in(&mut e, 8, &busy).len(), 8);
    let after = e.stats();
    assert_eq!(after.attempts - st.attempts, 8, "{after:?}");
}

#[test]
fn probes_of_a_sleeping_device_at_depth_grow_rarer() {
    let Some((_store, mut e)) = direct_engine("auto-probe-gap") else {
        return;
    };
    let buf = Aligned::new(4096);
    // A device known to sleep in its calls, and slowly (an average of 1 ms: one fast call
    // moves it by an eighth); another queue has work (no request is alone).
    e.direct_mut().sampler.on_cpu_permille = Some(0);
    e.direct_mut().sampler.call_ns = 1_000_000;
    let busy = ThreadTurn::new(0, 2);
    let mut token = 0;
    let mut turns = |e: &mut AutoEngine, n: u32| {
        for _ in 0..n {
            for t in 0..2 {
                e.submit(read(&buf, t * 4096, token)).expect("room");
                token += 1;
            }
            assert_eq!(complete_in(e, 2, &busy).len(), 2);
        }
        e.stats().attempts
    };
    assert_eq!(turns(&mut e, MIN_PROBE_GAP_TURNS - 1), 0, "no probe yet");
    assert_eq!(turns(&mut e, 1), 1, "the first probe");
    // Still sleeping (one sample moves the average by a quarter at most): the gap doubled.
    assert!(
        !e.direct_mut().sampler.on_cpu(),
        "{:?}",
        e.direct_mut().sampler.on_cpu_permille
    );
    assert_eq!(
        turns(&mut e, 2 * MIN_PROBE_GAP_TURNS - 1),
        1,
        "the gap doubled"
    );
    assert_eq!(turns(&mut e, 1), 2, "the second probe");
    // The gap stops growing at its cap.
    e.direct_mut().probe_gap_turns = MAX_PROBE_GAP_TURNS;
    e.direct_mut().turns_since_probe = MAX_PROBE_GAP_TURNS - 1;
    e.direct_mut().sampler.on_cpu_permille = Some(0);
    assert_eq!(turns(&mut e, 1), 3, "the third probe");
    assert_eq!(e.direct_mut().probe_gap_turns, MAX_PROBE_GAP_TURNS);
}

#[test]
fn a_device_completing_in_the_caller_gets_linux_aio_opened_without_a_probe() {
    // What `engine::open` wraps for zram: Linux AIO, opened straight away (a probe's
    // io_destroy would stall the iothread for an RCU grace period per queue).
    let dir = std::env::current_dir().expect("cwd").join("target");
    let s = store(&dir, "auto-in-caller-aio", 1 << 20);
    let file = open(&s.path, true, true);
    if !is_direct(&file) {
        eprintln!("target/ is a memory file system: nothing to check");
        return;
    }
    let opts = EngineOptions {
        kind: EngineKind::LinuxAio,
        depth: 32,
        io_uring: IoUringFlags::default(),
        direct: true,
        fault: None,
    };
    let engine = crate::engine::open_auto_aio(
        &file,
        &opts,
        &crate::engine::AioContextPool::new(),
        "a test's batches",
        "none",
    )
    .expect("Linux AIO opens on an O_DIRECT file here");
    assert_eq!(engine.kind(), EngineKind::LinuxAio);
    assert_eq!(engine.capacity(), 32, "{}", engine.info());
    // The caller's file stays usable for the inline path.
    let mut e = AutoEngine::new(file, engine);
    let buf = Aligned::new(4096);
    e.submit(read(&buf, 0, 7)).expect("room");
    let done = complete(&mut e, 1);
    assert_eq!((done[0].token, done[0].result), (7, 4096));
}

#[test]
fn a_store_where_inline_fails_stops_trying_then_probes_again() {
    // O_DIRECT on the work tree's file system: RWF_NOWAIT reads are refused or blocking.
    let dir = std::env::current_dir().expect("cwd").join("target");
    let s = store(&dir, "auto-direct", 1 << 20);
    let kind = crate::engine::auto_async_kind(true, &crate::engine::AioContextPool::new());
    let mut e = AutoEngine::new(
        open(&s.path, true, true),
        inner(open(&s.path, true, true), 32, true, kind),
    );
    let buf = Aligned::new(4096);
    // Force every attempt to fail by reading a range the page cache cannot hold for
    // O_DIRECT: count how the decision moves instead of what the kernel does.
    e.gate.failures = MAX_FAILED_ATTEMPTS + 1;
    e.gate.attempts = WINDOW_ATTEMPTS - 1;
    e.submit(read(&buf, 0, 0)).expect("room");
    assert_eq!(complete(&mut e, 1).len(), 1);
    assert!(
        !e.gate.trying,
        "more than 3/4 failures in a window switch inline off"
    );
    // Each failed probe doubles the wait: 256, 512, ..., then 4,096 for good.
    for wait in [256u32, 512, 1024, 2048, 4096, 4096] {
        let before = e.stats();
        for t in 1..=u64::from(wait) - 1 {
            e.submit(read(&buf, (t % 64) * 4096, t)).expect("room");
            assert_eq!(complete(&mut e, 1).len(), 1);
        }
        let after = e.stats();
        assert_eq!(after.attempts, before.attempts, "no attempts while off");
        e.submit(read(&buf, 0, 1 << 20)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        assert!(e.gate.trying, "probing again after {wait} requests");
        // The probe's window fails as well.
        e.gate.failures = MAX_FAILED_ATTEMPTS + 1;
        e.gate.attempts = WINDOW_ATTEMPTS - 1;
        e.submit(read(&buf, 0, 1 << 21)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
        assert!(!e.gate.trying, "a failed probe switches inline off again");
    }
    // A probe whose window passes resets the wait: the next failure waits 256 again.
    for t in 1..=u64::from(MAX_REPROBE_GAP_REQUESTS) {
        e.submit(read(&buf, (t % 64) * 4096, t)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
    }
    assert!(e.gate.trying);
    (e.gate.failures, e.gate.attempts) = (0, WINDOW_ATTEMPTS - 1);
    e.submit(read(&buf, 0, 1 << 22)).expect("room");
    assert_eq!(complete(&mut e, 1).len(), 1);
    assert!(e.gate.trying, "a passing window keeps inline on");
    (e.gate.failures, e.gate.attempts) = (MAX_FAILED_ATTEMPTS + 1, WINDOW_ATTEMPTS - 1);
    e.submit(read(&buf, 0, 1 << 23)).expect("room");
    assert_eq!(complete(&mut e, 1).len(), 1);
    assert!(!e.gate.trying);
    for t in 1..=u64::from(MIN_REPROBE_GAP_REQUESTS) {
        e.submit(read(&buf, (t % 64) * 4096, t)).expect("room");
        assert_eq!(complete(&mut e, 1).len(), 1);
    }
    assert!(e.gate.trying, "back to the shortest wait");
}

#[test]
fn tuning_replaces_the_host_dependent_thresholds() {
    let Some((_store, e)) = direct_engine("auto-tuning") else {
        return;
    };
    let fast_call_us = |e: &AutoEngine| match e.info() {
        crate::engine::EngineInfo::Auto(a) => a.fast_call_us,
        other => panic!("not Auto: {other:?}"),
    };
    assert_eq!(fast_call_us(&e), 4);
    let mut e = e.with_tuning(AutoTuning {
        fast_direct_call_ns: 8_000,
        ..AutoTuning::default()
    });
    assert_eq!(fast_call_us(&e), 8);
    // A device whose calls average 6 µs: slow by default, fast under the new bound.
    e.direct_mut().sampler.call_ns = 6_000;
    let tuning = e.tuning;
    assert!(e.direct_mut().sampler.fast(&tuning));
    assert!(!e.direct_mut().sampler.fast(&AutoTuning::default()));
}
