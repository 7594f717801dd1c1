//! The transport driven by `vhost`'s own frontend over a socket pair: a real `VirtioBlock` on an
//! iothread, guest memory in a memfd both sides map.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use dataplane::engine::EngineKind;
use dataplane::IoThread;
use vhost::vhost_user::message::{
    VhostUserHeaderFlag, VhostUserInflight, VhostUserProtocolFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, FileOffset, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::*;
use crate::block::{request_type, status, BlockDeviceConfig, VirtioBlock};
use crate::test_utils::queue::{
    desc, disk_image, engine, open_disk, write_header, F_NEXT, F_WRITE,
};
use crate::virtio::{GuestMemory, VIRTIO_RING_F_EVENT_IDX};

/// Where the fake frontend says guest memory sits in its address space.
const FRONTEND_VA: u64 = 0x7f00_0000_0000;
/// Guest memory size.
const MEM_BYTES: u64 = 0x50_0000;

/// A memfd of `len` bytes (what a frontend shares guest memory as).
pub(super) fn shared_file(len: u64) -> File {
    // SAFETY: the name is a NUL-terminated string; the call only creates a descriptor.
    let fd = unsafe { libc::memfd_create(c"osprey-vhost-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).expect("size the memfd");
    f
}

struct Rig {
    frontend: Frontend,
    mem: GuestMemory,
    file: File,
    disk: std::path::PathBuf,
    device: Arc<Mutex<VhostUserDevice>>,
    backend: std::thread::JoinHandle<()>,
    iothread: Arc<IoThread>,
}

fn rig(name: &str, num_queues: u16) -> Rig {
    let disk = disk_image(&format!("vhost-{name}"), 1 << 20);
    let iothread = IoThread::spawn(&format!("vu-{name}"), 0).expect("iothread");
    let block = VirtioBlock::new(
        BlockDeviceConfig {
            drive_id: name.into(),
            file: open_disk(&disk),
            read_only: false,
            capacity_sectors: 2048,
            num_queues,
            queue_size: 256,
            engine: engine(EngineKind::Sync, 16),
            rate_limits: Default::default(),
        },
        iothread.clone(),
    );
    let device = Arc::new(Mutex::new(VhostUserDevice::new(name, Box::new(block))));
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let served = device.clone();
    let backend = std::thread::spawn(move || serve_connection(theirs, &served));
    let file = shared_file(MEM_BYTES);
    let mem = GuestMemory::from_ranges_with_files(&[(
        GuestAddress(0),
        MEM_BYTES as usize,
        Some(FileOffset::new(file.try_clone().expect("dup"), 0)),
    )])
    .expect("map the memfd");
    Rig {
        frontend: Frontend::from_stream(ours, u64::from(num_queues)),
        mem,
        file,
        disk,
        device,
        backend,
        iothread,
    }
}

impl Rig {
    /// What QEMU does before the first ring starts.
    fn negotiate(&mut self) -> u64 {
        let f = &mut self.frontend;
        f.set_owner().expect("SET_OWNER");
        let features = f.get_features().expect("GET_FEATURES");
        f.set_features(features).expect("SET_FEATURES");
        let proto = f.get_protocol_features().expect("GET_PROTOCOL_FEATURES");
        assert!(proto.contains(
            VhostUserProtocolFeatures::CONFIG
                | VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK
                | VhostUserProtocolFeatures::RESET_DEVICE
                | VhostUserProtocolFeatures::INFLIGHT_SHMFD
        ));
        f.set_protocol_features(proto)
            .expect("SET_PROTOCOL_FEATURES");
        // As QEMU does once REPLY_ACK is on: every message waits for the backend's answer.
        f.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        f.set_mem_table(&[VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEM_BYTES,
            userspace_addr: FRONTEND_VA,
            mmap_offset: 0,
            mmap_handle: self.file.as_raw_fd(),
        }])
        .expect("SET_MEM_TABLE");
        features
    }

    /// Configures and starts ring `index` on `vq`; returns its kick and call eventfds.
    fn start_ring(&mut self, index: usize, vq: &MockSplitQueue<GuestMemory>) -> (EventFd, EventFd) {
        self.start_ring_at(index, vq, 0)
    }

    /// `start_ring` with `base` as `SET_VRING_BASE`.
    fn start_ring_at(
        &mut self,
        index: usize,
        vq: &MockSplitQueue<GuestMemory>,
        base: u16,
    ) -> (EventFd, EventFd) {
        let f = &mut self.frontend;
        f.set_vring_num(index, 16).expect("SET_VRING_NUM");
        f.set_vring_addr(
            index,
            &VringConfigData {
                queue_max_size: 16,
                queue_size: 16,
                flags: 0,
                desc_table_addr: FRONTEND_VA + vq.desc_table_addr().0,
                used_ring_addr: FRONTEND_VA + vq.used_addr().0,
                avail_ring_addr: FRONTEND_VA + vq.avail_addr().0,
                log_addr: None,
            },
        )
        .expect("SET_VRING_ADDR");
        f.set_vring_base(index, base).expect("SET_VRING_BASE");
        let call = EventFd::new(libc::EFD_NONBLOCK).expect("call");
        let kick = EventFd::new(0).expect("kick");
        f.set_vring_call(index, &call).expect("SET_VRING_CALL");
        f.set_vring_kick(index, &kick).expect("SET_VRING_KICK");
        f.set_vring_enable(index, true).expect("SET_VRING_ENABLE");
        (kick, call)
    }

    /// The rings running in the device (the lock is not held while the caller asserts: a
    /// panic under it would poison it for the backend thread).
    fn running(&self) -> Vec<usize> {
        self.device.lock().expect("lock").running_rings().to_vec()
    }

    fn finish(self) {
        let Rig {
            frontend,
            device,
            backend,
            iothread,
            disk,
            ..
        } = self;
        drop(frontend);
        backend.join().expect("the backend thread");
        let running = device.lock().expect("lock").running_rings().to_vec();
        assert!(running.is_empty(), "a disconnect stops every ring");
        iothread.shutdown();
        std::fs::remove_file(&disk).ok();
    }
}

/// A write then a read on `vq` (descriptors at `slot`, buffers at `base`).
fn write_then_read(mem: &GuestMemory, vq: &MockSplitQueue<GuestMemory>, base: u64, sector: u64) {
    write_header(mem, base, request_type::OUT, sector);
    mem.write_slice(&[0xa5u8; 512], GuestAddress(base + 0x1000))
        .expect("data");
    write_header(mem, base + 0x100, request_type::IN, sector);
    mem.write_obj(0xffu8, GuestAddress(base + 0x3000))
        .expect("status");
    mem.write_obj(0xffu8, GuestAddress(base + 0x3010))
        .expect("status");
    vq.add_desc_chains(
        &[
            desc(base, 16, F_NEXT, 1),
            desc(base + 0x1000, 512, F_NEXT, 2),
            desc(base + 0x3000, 1, F_WRITE, 0),
            desc(base + 0x100, 16, F_NEXT, 4),
            desc(base + 0x2000, 512, F_NEXT | F_WRITE, 5),
            desc(base + 0x3010, 1, F_WRITE, 0),
        ],
        0,
    )
    .expect("chains");
}

fn wait_for_used(vq: &MockSplitQueue<GuestMemory>, call: &EventFd, want: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while vq.used().idx().load() < want {
        assert!(
            std::time::Instant::now() < deadline,
            "no completion: used idx {} of {want}",
            vq.used().idx().load()
        );
        // The call eventfd is non-blocking: a test that fails must not hang.
        if call.read().is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

#[test]
fn requests_complete_through_the_frontends_eventfds_and_memory() {
    let mut r = rig("io", 1);
    let features = r.negotiate();
    assert_ne!(
        features & VIRTIO_RING_F_EVENT_IDX,
        0,
        "EVENT_IDX is offered"
    );
    let config = r
        .frontend
        .get_config(
            0,
            60,
            vhost::vhost_user::message::VhostUserConfigFlags::WRITABLE,
            &[0; 60],
        )
        .expect("GET_CONFIG")
        .1;
    assert_eq!(
        u64::from_le_bytes(config[..8].try_into().expect("8")),
        2048,
        "capacity"
    );
    let mem = r.mem.clone();
    let vq = MockSplitQueue::create(&mem, GuestAddress(0), 16);
    write_then_read(&r.mem, &vq, 0x10_0000, 4);
    let (kick, call) = r.start_ring(0, &vq);
    assert_eq!(r.running(), &[0]);
    kick.write(1).expect("kick");
    wait_for_used(&vq, &call, 2);
    assert_eq!(
        r.mem.read_obj::<u8>(GuestAddress(0x10_3000)).expect("s"),
        status::OK
    );
    assert_eq!(
        r.mem.read_obj::<u8>(GuestAddress(0x10_3010)).expect("s"),
        status::OK
    );
    let mut back = [0u8; 512];
    r.mem
        .read_slice(&mut back, GuestAddress(0x10_2000))
        .expect("read back");
    assert_eq!(back, [0xa5; 512], "the read returned the write");
    let mut disk = [0u8; 512];
    let mut f = File::open(&r.disk).expect("disk");
    f.seek(SeekFrom::Start(4 * 512)).expect("seek");
    f.read_exact(&mut disk).expect("read");
    assert_eq!(disk, [0xa5; 512], "the write reached the file");
    // GET_VRING_BASE stops the ring and says where: two requests consumed.
    assert_eq!(r.frontend.get_vring_base(0).expect("GET_VRING_BASE"), 2);
    assert!(r.running().is_empty());
    r.finish();
}

#[test]
fn rings_start_and_stop_one_at_a_time() {
    let mut r = rig("mq", 2);
    r.negotiate();
    assert_eq!(r.frontend.get_queue_num().expect("GET_QUEUE_NUM"), 2);
    let mem = r.mem.clone();
    let vq0 = MockSplitQueue::create(&mem, GuestAddress(0), 16);
    let vq1 = MockSplitQueue::create(&mem, GuestAddress(0x8000), 16);
    let (_k0, _c0) = r.start_ring(0, &vq0);
    let (kick1, call1) = r.start_ring(1, &vq1);
    assert_eq!(r.running(), &[0, 1]);
    // Ring 0 stops; ring 1 keeps serving.
    assert_eq!(r.frontend.get_vring_base(0).expect("GET_VRING_BASE"), 0);
    assert_eq!(r.running(), &[1]);
    write_then_read(&r.mem, &vq1, 0x20_0000, 8);
    kick1.write(1).expect("kick");
    wait_for_used(&vq1, &call1, 2);
    assert_eq!(
        r.mem.read_obj::<u8>(GuestAddress(0x20_3010)).expect("s"),
        status::OK
    );
    // A disabled ring stops too.
    r.frontend
        .set_vring_enable(1, false)
        .expect("SET_VRING_ENABLE");
    assert!(r.running().is_empty());
    r.finish();
}

#[test]
fn bad_ring_sizes_and_indexes_are_refused() {
    let mut r = rig("bad", 1);
    r.negotiate();
    assert!(
        r.frontend.set_vring_num(0, 12).is_err(),
        "not a power of two"
    );
    assert!(
        r.frontend.set_vring_num(0, 512).is_err(),
        "above the maximum"
    );
    r.finish();
}

/// A backend that died with a write in flight and a read already completed: the next one, handed
/// the frontend's inflight region and the used index as the ring's base (what QEMU sends after
/// a crash), completes the write, without a kick, and does not run the read again.
#[test]
fn a_restarted_backend_resubmits_what_the_region_holds_and_nothing_else() {
    let mut r = rig("inflight", 1);
    r.negotiate();
    let ask = VhostUserInflight {
        mmap_size: 0,
        mmap_offset: 0,
        num_queues: 1,
        queue_size: 16,
    };
    let (region, file) = r.frontend.get_inflight_fd(&ask).expect("GET_INFLIGHT_FD");
    assert_eq!(region.mmap_size, 320, "16 + 16·16 bytes, rounded up to 64");
    let mem = r.mem.clone();
    let vq = MockSplitQueue::create(&mem, GuestAddress(0), 16);
    // Avail: the write (head 0), then the read (head 3). The dead backend completed the read
    // (its status byte says 0x77) and published used index 1.
    write_then_read(&r.mem, &vq, 0x10_0000, 4);
    r.mem
        .write_obj(0x77u8, GuestAddress(0x10_3010))
        .expect("status");
    let used = vq.used_addr().0;
    r.mem
        .write_obj([3u32, 513u32], GuestAddress(used + 4))
        .expect("used[0]");
    r.mem
        .write_obj(1u16, GuestAddress(used + 2))
        .expect("used idx");
    // Its region (the spec's layout, written by hand): version 1, 16 states, used index 1,
    // head 0 in flight with counter 5.
    let view = GuestMemory::from_ranges_with_files(&[(
        GuestAddress(0),
        region.mmap_size as usize,
        Some(FileOffset::new(file.try_clone().expect("dup"), 0)),
    )])
    .expect("map the region");
    view.write_obj(1u16, GuestAddress(8)).expect("version");
    view.write_obj(16u16, GuestAddress(10)).expect("desc_num");
    view.write_obj(1u16, GuestAddress(14)).expect("used_idx");
    view.write_obj(1u8, GuestAddress(16))
        .expect("desc[0].inflight");
    view.write_obj(5u64, GuestAddress(24))
        .expect("desc[0].counter");
    r.frontend
        .set_inflight_fd(&region, file.as_raw_fd())
        .expect("SET_INFLIGHT_FD");
    let (_kick, call) = r.start_ring_at(0, &vq, 1);
    wait_for_used(&vq, &call, 2);
    let used1 = vq.used().ring().ref_at(1).expect("used[1]").load();
    assert_eq!(used1.id(), 0, "the write came back");
    assert_eq!(
        r.mem.read_obj::<u8>(GuestAddress(0x10_3000)).expect("s"),
        status::OK
    );
    assert_eq!(
        r.mem.read_obj::<u8>(GuestAddress(0x10_3010)).expect("s"),
        0x77,
        "the read completed before the restart is not run again"
    );
    assert_eq!(
        view.read_obj::<u8>(GuestAddress(16)).expect("flag"),
        0,
        "head 0 is no longer in flight"
    );
    assert_eq!(view.read_obj::<u16>(GuestAddress(14)).expect("used_idx"), 2);
    let mut disk = [0u8; 512];
    let mut f = File::open(&r.disk).expect("disk");
    f.seek(SeekFrom::Start(4 * 512)).expect("seek");
    f.read_exact(&mut disk).expect("read");
    assert_eq!(disk, [0xa5; 512], "the resubmitted write reached the file");
    assert_eq!(r.frontend.get_vring_base(0).expect("GET_VRING_BASE"), 2);
    r.finish();
}
