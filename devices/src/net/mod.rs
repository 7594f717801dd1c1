//! virtio-net: a tap-backed NIC served by an iothread. The tap ([`tap`]: open and configure),
//! the receive path ([`rx`]: tap → guest, MRG_RXBUF), the transmit path ([`tx`]: guest → tap),
//! the handler that runs one queue pair on an iothread under the thread's polling policy
//! ([`handler`]) and its short wait for the guest's answer ([`answer`]), the per-direction rate
//! limits ([`throttle`]), the counters ([`stats`]), the control queue of a multi-queue NIC
//! ([`ctrl`]) and the device model over the virtio-pci transport ([`device`]).
//!
//! Frames cross the tap with a 12-byte `virtio_net_hdr_v1` in front (IFF_VNET_HDR with
//! TUNSETVNETHDRSZ 12), the header virtio 1.x puts in front of every frame: the device passes it
//! through, so the checksum and segmentation offloads the guest negotiates are the tap's.

pub mod answer;
pub mod ctrl;
pub mod device;
pub mod handler;
pub mod mq;
pub mod rx;
pub mod stats;
pub mod tap;
pub mod throttle;
pub mod tx;

#[cfg(test)]
mod mq_tests;
#[cfg(test)]
mod pair_tests;

pub use device::{NetDeviceConfig, VirtioNet};
pub use stats::NetStats;
pub use tap::{Tap, TapError};

use virtio_bindings::virtio_net as vn;

/// What one direction's turn works with, rx or tx: its ring, the guest memory, the tap, its
/// rate limiter, the interface's counters, and the flag a used entry sets (the pair then
/// signals the guest if its suppression rules ask for it).
#[derive(Debug)]
pub struct PathIo<'a> {
    pub ring: &'a mut crate::virtio::host_ring::HostRing,
    pub mem: &'a crate::virtio::host_ring::HostMemory,
    pub tap: &'a Tap,
    pub throttle: &'a mut throttle::DirectionThrottle,
    pub stats: &'a NetStats,
    pub used: &'a mut bool,
}

/// Bytes of the virtio-net header in front of every frame (`virtio_net_hdr_v1`, with
/// `num_buffers`: virtio 1.x always has it).
pub const VNET_HDR_LEN: usize = 12;
/// Offset of `num_buffers` in the header.
pub const NUM_BUFFERS_OFFSET: usize = 10;
/// The largest frame the device moves, header included: 64 KiB of TSO/UFO payload plus
/// Ethernet and VLAN headers, after the virtio-net header (Firecracker's bound too).
pub const MAX_FRAME_LEN: usize = VNET_HDR_LEN + 65550;
/// The smallest frame worth sending: the header and an Ethernet header.
pub const MIN_FRAME_LEN: usize = VNET_HDR_LEN + 14;
/// Bytes of the config space the device fills: `mac[6]`, `status: u16`,
/// `max_virtqueue_pairs: u16`.
pub const CONFIG_LEN: usize = 10;
/// The default size of each queue.
pub const QUEUE_SIZE: u16 = 256;

/// A MAC address.
pub type Mac = [u8; 6];

/// Feature bits (virtio 1.2, 5.1.3), as masks of the bit numbers in `virtio-bindings`.
pub mod features {
    use super::vn;

    /// The driver may hand frames with partial checksums (the tap finishes them).
    pub const CSUM: u64 = 1 << vn::VIRTIO_NET_F_CSUM;
    /// The driver takes frames with partial checksums.
    pub const GUEST_CSUM: u64 = 1 << vn::VIRTIO_NET_F_GUEST_CSUM;
    /// The config space holds the MAC.
    pub const MAC: u64 = 1 << vn::VIRTIO_NET_F_MAC;
    /// The driver takes TCPv4 segments larger than the MTU.
    pub const GUEST_TSO4: u64 = 1 << vn::VIRTIO_NET_F_GUEST_TSO4;
    /// The driver takes TCPv6 segments larger than the MTU.
    pub const GUEST_TSO6: u64 = 1 << vn::VIRTIO_NET_F_GUEST_TSO6;
    /// The driver takes UDP fragments larger than the MTU.
    pub const GUEST_UFO: u64 = 1 << vn::VIRTIO_NET_F_GUEST_UFO;
    /// The device takes TCPv4 segments larger than the MTU.
    pub const HOST_TSO4: u64 = 1 << vn::VIRTIO_NET_F_HOST_TSO4;
    /// The device takes TCPv6 segments larger than the MTU.
    pub const HOST_TSO6: u64 = 1 << vn::VIRTIO_NET_F_HOST_TSO6;
    /// The device takes UDP fragments larger than the MTU.
    pub const HOST_UFO: u64 = 1 << vn::VIRTIO_NET_F_HOST_UFO;
    /// A received frame may span several rx chains (`num_buffers`).
    pub const MRG_RXBUF: u64 = 1 << vn::VIRTIO_NET_F_MRG_RXBUF;
    /// `max_virtqueue_pairs` is valid and the driver may use several queue pairs.
    pub const MQ: u64 = 1 << vn::VIRTIO_NET_F_MQ;
    /// The control queue (the last queue) is there; MQ needs it.
    pub const CTRL_VQ: u64 = 1 << vn::VIRTIO_NET_F_CTRL_VQ;

    /// The offloads Firecracker offers.
    pub const OFFLOADS: u64 =
        CSUM | GUEST_CSUM | GUEST_TSO4 | GUEST_TSO6 | GUEST_UFO | HOST_TSO4 | HOST_TSO6 | HOST_UFO;
}

/// Writes the config space for `mac` (if any) and `pairs` queue pairs.
pub fn encode_config(mac: Option<Mac>, pairs: u16) -> [u8; CONFIG_LEN] {
    let mut space = [0u8; CONFIG_LEN];
    if let Some(mac) = mac {
        space[..6].copy_from_slice(&mac);
    }
    // status: VIRTIO_NET_S_LINK_UP (only meaningful with F_STATUS, which is not offered).
    space[6..8].copy_from_slice(&1u16.to_le_bytes());
    space[8..10].copy_from_slice(&pairs.to_le_bytes());
    space
}

/// Copies the config space bytes at `offset` into `data`; bytes past its end read as 0.
pub fn read_config(space: &[u8], offset: u64, data: &mut [u8]) {
    data.fill(0);
    let Ok(start) = usize::try_from(offset) else {
        return;
    };
    if start >= space.len() {
        return;
    }
    let n = data.len().min(space.len() - start);
    data[..n].copy_from_slice(&space[start..start + n]);
}

/// Counts log lines so a hostile guest cannot flood the log.
#[derive(Debug, Default)]
pub(crate) struct LogLimit(u64);

impl LogLimit {
    pub(crate) fn allow(&mut self) -> bool {
        self.0 += 1;
        self.0 <= 10 || self.0.is_power_of_two()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_space_holds_the_mac_and_pairs_and_reads_past_the_end_as_zero() {
        let space = encode_config(Some([2, 0, 0, 0, 0, 7]), 1);
        let mut mac = [0u8; 6];
        read_config(&space, 0, &mut mac);
        assert_eq!(mac, [2, 0, 0, 0, 0, 7]);
        let mut pairs = [0u8; 2];
        read_config(&space, 8, &mut pairs);
        assert_eq!(u16::from_le_bytes(pairs), 1);
        let mut past = [0xffu8; 4];
        read_config(&space, 8, &mut past);
        assert_eq!(past, [1, 0, 0, 0]);
        read_config(&space, u64::MAX, &mut past);
        assert_eq!(past, [0; 4]);
    }
}
