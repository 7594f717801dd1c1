//! The control queue of a multi-queue NIC (VIRTIO_NET_F_CTRL_VQ, virtio 1.2 5.1.6.5): each
//! chain is a command (`class: u8`, `command: u8`, its data) in readable buffers followed by a
//! one-byte ack the device writes. Only `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` is served: a pair
//! count in 1..=`max_virtqueue_pairs` answers OK and becomes the enabled count; any other
//! count, class or command answers ERR.
//!
//! The guest's chains are hostile: at most [`MAX_CMD_LEN`] readable bytes are looked at, a chain
//! is walked at most as far as the queue is long (virtio-queue's iterator stops there, so a
//! looping chain ends), every buffer is checked against guest memory, and a chain without a
//! writable byte is returned unanswered. Nothing here panics on what the guest wrote.

use virtio_bindings::virtio_net as vn;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};

use super::LogLimit;
use crate::virtio::GuestMemory;

/// The most command bytes looked at (header and data); a PAIRS_SET needs 4.
pub const MAX_CMD_LEN: usize = 64;

/// The ack bytes.
const OK: u8 = vn::VIRTIO_NET_OK as u8;
const ERR: u8 = vn::VIRTIO_NET_ERR as u8;

/// What one command asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` with this count.
    PairsSet(u16),
    /// Any other class or command (answered ERR).
    Unsupported {
        /// The class byte.
        class: u8,
        /// The command byte.
        command: u8,
    },
    /// Fewer bytes than the header and its data need (answered ERR).
    Short,
}

impl Command {
    /// Decodes the readable bytes of a chain.
    pub fn parse(bytes: &[u8]) -> Self {
        let [class, command, data @ ..] = bytes else {
            return Command::Short;
        };
        if (u32::from(*class), u32::from(*command))
            != (vn::VIRTIO_NET_CTRL_MQ, vn::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET)
        {
            return Command::Unsupported {
                class: *class,
                command: *command,
            };
        }
        match data {
            [lo, hi, ..] => Command::PairsSet(u16::from_le_bytes([*lo, *hi])),
            _ => Command::Short,
        }
    }
}

/// The control queue's state: the pairs the device has and the pairs the driver enabled.
#[derive(Debug)]
pub struct CtrlQueue {
    max_pairs: u16,
    enabled: u16,
    log: LogLimit,
}

/// What [`CtrlQueue::serve`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Chains returned to the guest.
    pub chains: usize,
    /// The enabled pair count changed.
    pub pairs_changed: bool,
    /// Chains remain (the budget was spent).
    pub more: bool,
}

impl CtrlQueue {
    /// A control queue for a device of `max_pairs` pairs, of which `enabled` are in use (1 at
    /// reset; a restored snapshot's count after a restore).
    pub fn new(max_pairs: u16, enabled: u16) -> Self {
        let max_pairs = max_pairs.max(1);
        Self {
            max_pairs,
            enabled: enabled.clamp(1, max_pairs),
            log: LogLimit::default(),
        }
    }

    /// The pairs the driver enabled (1 until its first PAIRS_SET).
    pub fn enabled(&self) -> u16 {
        self.enabled
    }

    /// Applies one command; the ack byte.
    pub fn apply(&mut self, cmd: Command) -> u8 {
        match cmd {
            Command::PairsSet(n) if (1..=self.max_pairs).contains(&n) => {
                self.enabled = n;
                OK
            }
            other => {
                if self.log.allow() {
                    log::warn!(
                        "virtio-net control queue: {other:?} refused (pairs 1..={})",
                        self.max_pairs
                    );
                }
                ERR
            }
        }
    }

    /// Serves up to `budget` chains of `queue`; an error only when the ring itself is broken
    /// (the used ring could not be written).
    pub fn serve(
        &mut self,
        queue: &mut Queue,
        mem: &GuestMemory,
        budget: usize,
    ) -> Result<Served, virtio_queue::Error> {
        let mut served = Served::default();
        let before = self.enabled;
        for _ in 0..budget.max(1) {
            let Some(chain) = queue.pop_descriptor_chain(mem) else {
                served.pairs_changed = self.enabled != before;
                return Ok(served);
            };
            let head = chain.head_index();
            let mut cmd = [0u8; MAX_CMD_LEN];
            let mut len = 0usize;
            let mut ack_at: Option<GuestAddress> = None;
            let mut bad = false;
            // The iterator stops after as many descriptors as the queue holds.
            for d in chain {
                if d.is_write_only() {
                    if d.len() > 0 && ack_at.is_none() {
                        ack_at = Some(d.addr());
                    }
                    continue;
                }
                if ack_at.is_some() {
                    // A readable buffer after the writable one: not a command.
                    bad = true;
                    continue;
                }
                let room = MAX_CMD_LEN - len;
                let take = usize::try_from(d.len()).unwrap_or(usize::MAX).min(room);
                if take > 0 && mem.read_slice(&mut cmd[len..len + take], d.addr()).is_err() {
                    bad = true;
                }
                len += take;
            }
            let written = match ack_at {
                Some(at) => {
                    let ack = if bad {
                        ERR
                    } else {
                        self.apply(Command::parse(&cmd[..len]))
                    };
                    u32::from(mem.write_obj(ack, at).is_ok())
                }
                None => {
                    if self.log.allow() {
                        log::warn!("virtio-net control queue: a chain with no ack byte");
                    }
                    0
                }
            };
            queue.add_used(mem, head, written)?;
            served.chains += 1;
        }
        served.more = true;
        served.pairs_changed = self.enabled != before;
        Ok(served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::queue::{desc, guest_memory, F_NEXT, F_WRITE};
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::Address;

    const CMD: u64 = 0x10_0000;
    const ACK: u64 = 0x20_0000;

    fn used(mem: &GuestMemory, vq: &MockSplitQueue<GuestMemory>, i: u64) -> (u32, u32) {
        let at = vq.used_addr().unchecked_add(4 + 8 * i);
        let id: u32 = mem.read_obj(at).expect("id");
        let len: u32 = mem.read_obj(at.unchecked_add(4)).expect("len");
        (id, len)
    }

    /// One command chain: header+data readable, then the ack.
    fn command(mem: &GuestMemory, bytes: &[u8]) -> Vec<RawDescriptor> {
        mem.write_slice(bytes, GuestAddress(CMD)).expect("cmd");
        mem.write_obj(0xaau8, GuestAddress(ACK)).expect("ack");
        vec![
            desc(CMD, bytes.len() as u32, F_NEXT, 1),
            desc(ACK, 1, F_WRITE, 0),
        ]
    }

    fn ack(mem: &GuestMemory) -> u8 {
        mem.read_obj(GuestAddress(ACK)).expect("ack")
    }

    #[test]
    fn parse_knows_pairs_set_and_nothing_else() {
        assert_eq!(Command::parse(&[4, 0, 3, 0]), Command::PairsSet(3));
        assert_eq!(Command::parse(&[4, 0, 0, 1]), Command::PairsSet(256));
        assert_eq!(Command::parse(&[4, 0, 3]), Command::Short);
        assert_eq!(Command::parse(&[4]), Command::Short);
        assert_eq!(Command::parse(&[]), Command::Short);
        assert_eq!(
            Command::parse(&[0, 0, 1]),
            Command::Unsupported {
                class: 0,
                command: 0
            }
        );
        assert_eq!(
            Command::parse(&[4, 1, 0, 0]),
            Command::Unsupported {
                class: 4,
                command: 1
            }
        );
    }

    /// PAIRS_SET in 1..=max answers OK and sets the count; 0, max+1, other classes and short
    /// commands answer ERR and leave it.
    #[test]
    fn pairs_set_answers_ok_in_range_and_err_otherwise() {
        let mem = guest_memory(0x100_0000);
        let mut ctrl = CtrlQueue::new(4, 1);
        let cases: &[(&[u8], u8, u16)] = &[
            (&[4, 0, 3, 0], OK, 3),
            (&[4, 0, 0, 0], ERR, 3),
            (&[4, 0, 5, 0], ERR, 3),
            (&[4, 0, 4, 0], OK, 4),
            (&[1, 0, 1], ERR, 4), // VIRTIO_NET_CTRL_MAC
            (&[4, 0, 1], ERR, 4), // data cut short
            (&[4, 0, 1, 0], OK, 1),
        ];
        for (i, (bytes, want, pairs)) in cases.iter().enumerate() {
            let vq = MockSplitQueue::create(&mem, GuestAddress(0), 16);
            vq.add_desc_chains(&command(&mem, bytes), 0).expect("post");
            let mut q = vq.create_queue().expect("q");
            let served = ctrl.serve(&mut q, &mem, 8).expect("serve");
            assert_eq!(served.chains, 1, "case {i}");
            assert_eq!(ack(&mem), *want, "case {i}: {bytes:?}");
            assert_eq!(ctrl.enabled(), *pairs, "case {i}");
            assert_eq!(used(&mem, &vq, 0), (0, 1), "case {i}");
        }
    }

    /// A chain that loops back on itself, one with no writable byte, one with a buffer outside
    /// guest memory and one far larger than any command: each returned, none answered OK, the
    /// count untouched, no panic.
    #[test]
    fn hostile_chains_are_returned_without_effect() {
        let mem = guest_memory(0x100_0000);
        let mut ctrl = CtrlQueue::new(4, 2);
        mem.write_slice(&[4, 0, 3, 0], GuestAddress(CMD))
            .expect("cmd");
        let chains: Vec<Vec<RawDescriptor>> = vec![
            // 0 → 1 → 0 → ...: stops at the queue's length, no ack byte.
            vec![desc(CMD, 4, F_NEXT, 1), desc(CMD, 4, F_NEXT, 0)],
            // No writable descriptor.
            vec![desc(CMD, 4, 0, 0)],
            // Outside guest memory, then the ack: ERR.
            vec![desc(0x4000_0000, 4, F_NEXT, 1), desc(ACK, 1, F_WRITE, 0)],
            // A 1 MiB command: only MAX_CMD_LEN bytes looked at; it is a PAIRS_SET(3).
            vec![desc(CMD, 0x10_0000, F_NEXT, 1), desc(ACK, 1, F_WRITE, 0)],
            // Readable after writable: ERR.
            vec![
                desc(CMD, 2, F_NEXT, 1),
                desc(ACK, 1, F_WRITE | F_NEXT, 2),
                desc(CMD + 2, 2, 0, 0),
            ],
        ];
        for (i, chain) in chains.iter().enumerate() {
            let vq = MockSplitQueue::create(&mem, GuestAddress(0), 16);
            mem.write_obj(0xaau8, GuestAddress(ACK)).expect("ack");
            vq.add_desc_chains(chain, 0).expect("post");
            let mut q = vq.create_queue().expect("q");
            let served = ctrl.serve(&mut q, &mem, 8).expect("serve");
            assert_eq!(served.chains, 1, "chain {i}");
            match i {
                0 | 1 => assert_eq!((ack(&mem), used(&mem, &vq, 0).1), (0xaa, 0), "chain {i}"),
                3 => {
                    assert_eq!(ack(&mem), OK, "an oversized chain is still a command");
                    assert_eq!(ctrl.enabled(), 3);
                }
                _ => assert_eq!(ack(&mem), ERR, "chain {i}"),
            }
            if i < 3 {
                assert_eq!(ctrl.enabled(), 2, "chain {i}");
            }
        }
    }

    /// The budget bounds one call; the rest is served on the next.
    #[test]
    fn the_budget_bounds_a_turn() {
        let mem = guest_memory(0x100_0000);
        let mut ctrl = CtrlQueue::new(2, 1);
        let vq = MockSplitQueue::create(&mem, GuestAddress(0), 16);
        let mut chains = Vec::new();
        for i in 0..3u16 {
            chains.push(desc(CMD, 4, F_NEXT, 2 * i + 1));
            chains.push(desc(ACK, 1, F_WRITE, 0));
        }
        mem.write_slice(&[4, 0, 2, 0], GuestAddress(CMD))
            .expect("cmd");
        vq.add_desc_chains(&chains, 0).expect("post");
        let mut q = vq.create_queue().expect("q");
        let first = ctrl.serve(&mut q, &mem, 2).expect("serve");
        assert_eq!(
            (first.chains, first.more, first.pairs_changed),
            (2, true, true)
        );
        let second = ctrl.serve(&mut q, &mem, 2).expect("serve");
        assert_eq!(
            (second.chains, second.more, second.pairs_changed),
            (1, false, false)
        );
        assert_eq!(ctrl.enabled(), 2);
    }
}
