//! A multi-queue NIC on an iothread, over `SOCK_SEQPACKET` pairs as its tap queues: what it
//! offers, that pair 1 moves nothing until the guest's PAIRS_SET, and then that it does.

use std::io::{Read, Write};
use std::time::Duration;

use dataplane::IoThread;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::device::{NetDeviceConfig, VirtioNet};
use super::tap::{frame_pair, Tap};
use super::throttle::NetRateLimits;
use super::{features, VNET_HDR_LEN};
use crate::test_utils::queue::{desc, guest_memory, FakeInterrupt, F_NEXT, F_WRITE};
use crate::virtio::{ActivatedQueue, GuestMemory, ResetOutcome, VirtioDevice};

fn used_idx(mem: &GuestMemory, vq: &MockSplitQueue<GuestMemory>) -> u16 {
    mem.read_obj(vq.used_addr().unchecked_add(2))
        .expect("used idx")
}

fn wait_used(mem: &GuestMemory, vq: &MockSplitQueue<GuestMemory>, n: u16) {
    for _ in 0..2000 {
        if used_idx(mem, vq) == n {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("used idx never reached {n}");
}

/// Interface `eth0` over `tap`, no MAC, no limits, served by a new iothread `thread_name`.
fn device_on(tap: Tap, thread_name: &str) -> (VirtioNet, std::sync::Arc<IoThread>) {
    let thread = IoThread::spawn(thread_name, 0).expect("iothread");
    let dev = VirtioNet::new(
        NetDeviceConfig {
            iface_id: "eth0".into(),
            tap,
            mac: None,
            rate_limits: NetRateLimits::default(),
        },
        thread.clone(),
    );
    (dev, thread)
}

/// A two-queue tap over two `SOCK_SEQPACKET` pairs, and the host ends of queues 0 and 1.
fn two_queue_tap() -> (Tap, std::fs::File, std::fs::File) {
    let (q0, host0) = frame_pair().expect("pair");
    let (q1, host1) = frame_pair().expect("pair");
    let tap = Tap::from_file(q0, "mq").with_queues(vec![Tap::from_file(q1, "mq")]);
    (tap, host0, host1)
}

fn activated(vq: &MockSplitQueue<GuestMemory>, index: u16, kick: &EventFd) -> ActivatedQueue {
    ActivatedQueue {
        index,
        queue: vq.create_queue().expect("q"),
        kick: kick.try_clone().expect("dup"),
        inflight: None,
    }
}

#[test]
fn a_single_queue_tap_offers_no_mq_and_one_pair() {
    let (dev_end, _host) = frame_pair().expect("pair");
    let (dev, thread) = device_on(Tap::from_file(dev_end, "pair"), "net-1q");
    assert_eq!(dev.features() & (features::MQ | features::CTRL_VQ), 0);
    assert_eq!(dev.queue_max_sizes().len(), 2);
    assert_eq!(dev.max_pairs(), 1);
    thread.shutdown();
}

/// Two pairs: MQ and CTRL_VQ offered, 5 queues, `max_virtqueue_pairs` 2. A frame on tap queue
/// 1 stays there until the guest's PAIRS_SET(2) (acked OK); then it lands in rx ring 2. Reset
/// returns all five queues and the count goes back to 1.
#[test]
fn pair_one_carries_frames_only_after_pairs_set() {
    let mem = guest_memory(0x100_0000);
    let (tap, _host0, mut host1) = two_queue_tap();
    let (mut dev, thread) = device_on(tap, "net-mq");
    let both = features::MQ | features::CTRL_VQ;
    assert_eq!(dev.features() & both, both);
    assert_eq!(dev.queue_max_sizes().len(), 5);
    let mut pairs = [0u8; 2];
    dev.read_config(8, &mut pairs);
    assert_eq!(u16::from_le_bytes(pairs), 2);
    dev.ack_features(dev.features());

    let rings: Vec<MockSplitQueue<GuestMemory>> = (0..5u64)
        .map(|i| MockSplitQueue::create(&mem, GuestAddress(i * 0x1000), 16))
        .collect();
    let kicks: Vec<EventFd> = (0..5)
        .map(|_| EventFd::new(libc::EFD_NONBLOCK).expect("efd"))
        .collect();
    // An rx buffer on pair 1's rx ring (queue 2).
    rings[2]
        .add_desc_chains(&[desc(0x20_0000, 2048, F_WRITE, 0)], 0)
        .expect("rx chain");
    let queues = (0..5u16)
        .map(|i| activated(&rings[usize::from(i)], i, &kicks[usize::from(i)]))
        .collect();
    let irq = FakeInterrupt::new();
    dev.activate(mem.clone(), irq.clone(), queues)
        .expect("activate");

    let inbound: Vec<u8> = (0..80u8).collect();
    host1.write_all(&inbound).expect("to pair 1");
    kicks[2].write(1).expect("kick");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(used_idx(&mem, &rings[2]), 0, "pair 1 is not enabled yet");
    assert_eq!(dev.enabled_pairs(), 1);

    // VIRTIO_NET_CTRL_MQ, VQ_PAIRS_SET, 2.
    mem.write_slice(&[4, 0, 2, 0], GuestAddress(0x30_0000))
        .expect("cmd");
    mem.write_obj(0xaau8, GuestAddress(0x30_1000)).expect("ack");
    rings[4]
        .add_desc_chains(
            &[
                desc(0x30_0000, 4, F_NEXT, 1),
                desc(0x30_1000, 1, F_WRITE, 0),
            ],
            0,
        )
        .expect("ctrl chain");
    kicks[4].write(1).expect("kick");
    wait_used(&mem, &rings[4], 1);
    let ack: u8 = mem.read_obj(GuestAddress(0x30_1000)).expect("ack");
    assert_eq!(ack, 0, "VIRTIO_NET_OK");
    wait_used(&mem, &rings[2], 1);
    assert_eq!(dev.enabled_pairs(), 2);
    let mut got = vec![0u8; inbound.len()];
    mem.read_slice(&mut got, GuestAddress(0x20_0000))
        .expect("r");
    assert_eq!(&got[VNET_HDR_LEN..], &inbound[VNET_HDR_LEN..]);
    let mut none = [0u8; 8];
    assert!(host1.read(&mut none).is_err(), "nothing sent back");

    assert!(matches!(dev.reset(), ResetOutcome::Done(q) if q.len() == 5));
    assert_eq!(dev.enabled_pairs(), 1);
    thread.shutdown();
}

/// Without MQ negotiated, a multi-queue device takes only pair 0; a queue of another pair is
/// refused, and so is MQ without pair 1's queues.
#[test]
fn activation_takes_only_the_negotiated_queues() {
    let mem = guest_memory(0x100_0000);
    let (tap, _h0, _h1) = two_queue_tap();
    let (mut dev, thread) = device_on(tap, "net-mq2");
    let rings: Vec<MockSplitQueue<GuestMemory>> = (0..5u64)
        .map(|i| MockSplitQueue::create(&mem, GuestAddress(i * 0x1000), 16))
        .collect();
    let kick = EventFd::new(libc::EFD_NONBLOCK).expect("efd");
    let irq = FakeInterrupt::new();
    dev.ack_features(dev.features() & !features::MQ);
    let three = (0..3u16)
        .map(|i| activated(&rings[usize::from(i)], i, &kick))
        .collect();
    assert!(dev.activate(mem.clone(), irq.clone(), three).is_err());
    dev.ack_features(dev.features());
    let no_pair_1 = [0u16, 1, 4]
        .iter()
        .map(|&i| activated(&rings[usize::from(i)], i, &kick))
        .collect();
    assert!(dev.activate(mem.clone(), irq.clone(), no_pair_1).is_err());
    dev.ack_features(dev.features() & !features::MQ);
    let pair_0 = (0..2u16)
        .map(|i| activated(&rings[usize::from(i)], i, &kick))
        .collect();
    dev.activate(mem.clone(), irq, pair_0).expect("one pair");
    assert!(matches!(dev.reset(), ResetOutcome::Done(q) if q.len() == 2));
    thread.shutdown();
}
