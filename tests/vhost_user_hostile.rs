//! `osprey vhost-user-blk` (sandboxed, its default) against hostile frontends, written here as
//! raw protocol messages: memory tables whose regions do not fit their fds (larger than the
//! file, past its end, 1 TiB, offset 2^62), wrap the address space, overlap, have size 0,
//! number more than the protocol's 8 or do not match the fds sent; rings past the end of their
//! region or of the file; a file shrunk after `SET_MEM_TABLE`; each then kicked. A second,
//! honest frontend (this file's small virtio-blk driver on another drive of the same backend)
//! writes and reads back blocks throughout and must see every one; afterwards the backend's fds
//! and RSS are back where they started (RSS within [`RSS_SLACK_KB`]).
//! A frontend that shrinks its memory while its rings run is caught only at the fault: the
//! backend reads zeros there and goes on. A fatal signal is reported by its name (not as a
//! seccomp trap) and the sockets are removed; `SIGTERM` removes them too, with status 0. No
//! QEMU needed.

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::scratch::Scratch;
use common::Vmm;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// How far the backend's RSS may be above its start after the hostile sessions.
const RSS_SLACK_KB: u64 = 2048;
/// Where every frontend here says its memory is in its address space.
const VA: u64 = 0x7f00_0000_0000;
/// `VIRTIO_F_VERSION_1`: the one feature the frontends here ack (without `PROTOCOL_FEATURES`
/// every ring is enabled from the start).
const VERSION_1: u64 = 1 << 32;

/// A memfd of `bytes`.
fn memfd(bytes: u64) -> File {
    use std::os::unix::io::FromRawFd;
    // SAFETY: a NUL-terminated name; the call only creates a descriptor.
    let fd = unsafe { libc::memfd_create(c"vhost-hostile".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(bytes).expect("size the memfd");
    f
}

/// The backend: drive `hostile` on `h.sock`, drive `honest` on `o.sock`, API on `api.sock`.
struct Backend {
    vmm: Vmm,
    dir: PathBuf,
    _scratch: Scratch,
}

impl Backend {
    fn start(name: &str) -> Backend {
        let scratch = Scratch::new(&format!("vhost-hostile-{name}"));
        let dir = scratch.0.clone();
        let (h, o) = (
            scratch.sparse("h.img", 8 << 20),
            scratch.sparse("o.img", 8 << 20),
        );
        let config = scratch.file(
            "backend.json",
            &format!(
                r#"{{"drives": [
                    {{"drive_id": "hostile", "path_on_host": "{}", "socket": "{}"}},
                    {{"drive_id": "honest", "path_on_host": "{}", "socket": "{}"}}]}}"#,
                h.display(),
                dir.join("h.sock").display(),
                o.display(),
                dir.join("o.sock").display()
            ),
        );
        let api = dir.join("api.sock");
        let mut vmm = Vmm::spawn([
            "vhost-user-blk".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--api-sock".as_ref(),
            api.as_os_str(),
        ]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !vmm.log_text().contains("vhost-user-blk: API on") {
            assert!(
                Instant::now() < deadline && !vmm.has_exited(),
                "the backend did not start:\n{}",
                vmm.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !vmm.log_text().contains("sandbox: off"),
            "{}",
            vmm.log_text()
        );
        Backend {
            vmm,
            dir,
            _scratch: scratch,
        }
    }

    fn sock(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A frontend speaking the protocol by hand: no reply-ack, so nothing it sends is checked on
/// this side.
struct Raw {
    sock: UnixStream,
}

/// `VhostUserMemoryRegion` as sent: guest address, size, frontend address, offset.
#[derive(Clone, Copy)]
struct Region {
    gpa: u64,
    size: u64,
    va: u64,
    offset: u64,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let sock = UnixStream::connect(path).expect("connect");
        let mut raw = Raw { sock };
        raw.send(3, &[], &[]); // SET_OWNER
        raw.send(2, &VERSION_1.to_le_bytes(), &[]); // SET_FEATURES
        raw
    }

    /// Sends message `request` with `body` and `fds`; a closed connection is fine (the backend
    /// may drop a frontend that broke the protocol).
    fn send(&mut self, request: u32, body: &[u8], fds: &[RawFd]) {
        let mut msg = Vec::with_capacity(12 + body.len());
        msg.extend_from_slice(&request.to_le_bytes());
        msg.extend_from_slice(&1u32.to_le_bytes()); // version 1, no flags
        msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
        msg.extend_from_slice(body);
        let _ = self.sock.send_with_fds(&[&msg[..]], fds);
    }

    fn set_mem_table(&mut self, regions: &[Region], fds: &[RawFd]) {
        let mut body = Vec::new();
        body.extend_from_slice(&(regions.len() as u32).to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        for r in regions {
            for v in [r.gpa, r.size, r.va, r.offset] {
                body.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.send(5, &body, fds);
    }

    /// Ring 0 of 16 entries at frontend address `at` (descriptors, then the avail ring at
    /// +0x100, the used ring at +0x200), its eventfds, and a kick.
    fn start_ring(&mut self, at: u64) -> (EventFd, EventFd) {
        let pair = |a: u32, b: u32| [a.to_le_bytes(), b.to_le_bytes()].concat();
        self.send(8, &pair(0, 16), &[]); // SET_VRING_NUM
        let mut addr = pair(0, 0);
        for v in [at, at.wrapping_add(0x200), at.wrapping_add(0x100), 0] {
            addr.extend_from_slice(&v.to_le_bytes());
        }
        self.send(9, &addr, &[]); // SET_VRING_ADDR
        self.send(10, &pair(0, 0), &[]); // SET_VRING_BASE
        let (kick, call) = (EventFd::new(0).expect("efd"), EventFd::new(0).expect("efd"));
        self.send(13, &0u64.to_le_bytes(), &[call.as_raw_fd()]); // SET_VRING_CALL
        self.send(12, &0u64.to_le_bytes(), &[kick.as_raw_fd()]); // SET_VRING_KICK
        let _ = kick.write(1);
        (kick, call)
    }

    /// Waits for the backend's answer to a GET_FEATURES: every message before it was handled.
    fn sync(&mut self) {
        use std::io::Read;
        self.send(1, &[], &[]);
        self.sock
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut reply = [0u8; 20];
        // A backend that dropped the connection answers nothing: fine too.
        let _ = self.sock.read_exact(&mut reply);
    }
}

/// The honest frontend: one request at a time on ring 0 of drive `honest`, in its own 1 MiB
/// memfd, written and read back.
struct Honest {
    _frontend: vhost::vhost_user::Frontend,
    mem: File,
    kick: EventFd,
    _call: EventFd,
    next: u16,
}

// Guest-physical layout of the honest frontend's memory (= file offsets).
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const HEADER: u64 = 0x3000;
const DATA: u64 = 0x4000;
const STATUS: u64 = 0x5000;
const BLOCK: usize = 4096;

impl Honest {
    fn connect(sock: &Path) -> Honest {
        use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
        let mem = memfd(1 << 20);
        let f = vhost::vhost_user::Frontend::connect(sock, 1).expect("connect");
        f.set_owner().expect("SET_OWNER");
        let offered = f.get_features().expect("GET_FEATURES");
        assert_ne!(offered & VERSION_1, 0);
        f.set_features(VERSION_1).expect("SET_FEATURES");
        f.set_mem_table(&[VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: 1 << 20,
            userspace_addr: VA,
            mmap_offset: 0,
            mmap_handle: mem.as_raw_fd(),
        }])
        .expect("SET_MEM_TABLE");
        f.set_vring_num(0, 16).expect("SET_VRING_NUM");
        f.set_vring_addr(
            0,
            &VringConfigData {
                queue_max_size: 16,
                queue_size: 16,
                flags: 0,
                desc_table_addr: VA + DESC,
                avail_ring_addr: VA + AVAIL,
                used_ring_addr: VA + USED,
                log_addr: None,
            },
        )
        .expect("SET_VRING_ADDR");
        f.set_vring_base(0, 0).expect("SET_VRING_BASE");
        let (kick, call) = (EventFd::new(0).expect("efd"), EventFd::new(0).expect("efd"));
        f.set_vring_call(0, &call).expect("SET_VRING_CALL");
        f.set_vring_kick(0, &kick).expect("SET_VRING_KICK");
        Honest {
            _frontend: f,
            mem,
            kick,
            _call: call,
            next: 0,
        }
    }

    fn put(&self, at: u64, bytes: &[u8]) {
        self.mem
            .write_all_at(bytes, at)
            .expect("write guest memory");
    }

    fn get_u16(&self, at: u64) -> u16 {
        let mut b = [0u8; 2];
        self.mem
            .read_exact_at(&mut b, at)
            .expect("read guest memory");
        u16::from_le_bytes(b)
    }

    /// One request: `write` (type 1) the data area to `sector`, or read (type 0) into it.
    fn request(&mut self, write: bool, sector: u64) -> Result<(), String> {
        let (t, data_flags) = if write { (1u32, 0u16) } else { (0, 2) };
        let mut header = Vec::new();
        header.extend_from_slice(&t.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        header.extend_from_slice(&sector.to_le_bytes());
        self.put(HEADER, &header);
        self.put(STATUS, &[0xff]);
        let desc = |addr: u64, len: u32, flags: u16, next: u16| {
            [
                &addr.to_le_bytes()[..],
                &len.to_le_bytes(),
                &flags.to_le_bytes(),
                &next.to_le_bytes(),
            ]
            .concat()
        };
        let table = [
            desc(HEADER, 16, 1, 1),
            desc(DATA, BLOCK as u32, 1 | data_flags, 2),
            desc(STATUS, 1, 2, 0),
        ]
        .concat();
        self.put(DESC, &table);
        let slot = u64::from(self.next % 16);
        self.put(AVAIL + 4 + 2 * slot, &0u16.to_le_bytes());
        self.next = self.next.wrapping_add(1);
        self.put(AVAIL + 2, &self.next.to_le_bytes());
        self.kick.write(1).map_err(|e| format!("kick: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.get_u16(USED + 2) != self.next {
            if Instant::now() > deadline {
                return Err(format!("request {} not completed in 10 s", self.next));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut status = [0u8];
        self.mem.read_exact_at(&mut status, STATUS).expect("status");
        if status[0] != 0 {
            return Err(format!("request {}: status {}", self.next, status[0]));
        }
        Ok(())
    }

    /// Writes a block stamped with `round` at a sector of its own and reads it back.
    fn verified_io(&mut self, round: u64) -> Result<(), String> {
        let sector = (round % 1024) * 8;
        let block: Vec<u8> = (0..BLOCK)
            .map(|i| (round as usize).wrapping_mul(31).wrapping_add(i) as u8)
            .collect();
        self.put(DATA, &block);
        self.request(true, sector)?;
        self.put(DATA, &vec![0u8; BLOCK]);
        self.request(false, sector)?;
        let mut back = vec![0u8; BLOCK];
        self.mem.read_exact_at(&mut back, DATA).expect("data");
        if back != block {
            return Err(format!("round {round}: sector {sector} read back differs"));
        }
        Ok(())
    }
}

/// Runs the honest frontend until `stop`, counting verified rounds in `done`.
fn honest_io(sock: PathBuf, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) -> Result<(), String> {
    let mut honest = Honest::connect(&sock);
    let mut round = 0;
    while !stop.load(Ordering::Relaxed) {
        honest.verified_io(round)?;
        round += 1;
        done.store(round, Ordering::Relaxed);
    }
    Ok(())
}

/// One hostile session: what it sends, and a piece of what the backend must log for it (after
/// the fix), if anything particular.
type Session = (&'static str, Box<dyn Fn(&Path)>);

fn sessions() -> Vec<Session> {
    let one = |size: u64, offset: u64, file: u64, ring: u64| -> Box<dyn Fn(&Path)> {
        Box::new(move |sock: &Path| {
            let mem = memfd(file);
            let mut raw = Raw::connect(sock);
            let region = Region {
                gpa: 0,
                size,
                va: VA,
                offset,
            };
            raw.set_mem_table(&[region], &[mem.as_raw_fd()]);
            let _fds = raw.start_ring(VA + ring);
            raw.sync();
        })
    };
    let table = |regions: Vec<Region>, fds: usize, ring: u64| -> Box<dyn Fn(&Path)> {
        Box::new(move |sock: &Path| {
            let files: Vec<File> = (0..fds).map(|_| memfd(0x10000)).collect();
            let raw_fds: Vec<RawFd> = files.iter().map(AsRawFd::as_raw_fd).collect();
            let mut raw = Raw::connect(sock);
            raw.set_mem_table(&regions, &raw_fds);
            let _fds = raw.start_ring(ring);
            raw.sync();
        })
    };
    let r = |gpa: u64, size: u64, va: u64, offset: u64| Region {
        gpa,
        size,
        va,
        offset,
    };
    vec![
        (
            "1 MiB region on a 4 KiB memfd",
            one(1 << 20, 0, 0x1000, 0x8_0000),
        ),
        (
            "1 TiB region on a 64 KiB memfd",
            one(1 << 40, 0, 0x10000, 1 << 30),
        ),
        ("offset 2^62", one(0x10000, 1 << 62, 0x10000, 0)),
        (
            "region past the end of its memfd",
            one(0x10000, 0xf000, 0x10000, 0x4000),
        ),
        ("size 0", one(0, 0, 0x10000, 0)),
        (
            "guest address + size wraps",
            table(vec![r(u64::MAX - 0xfff, 0x10000, VA, 0)], 1, VA),
        ),
        (
            "frontend address + size wraps",
            table(
                vec![r(0, 0x10000, u64::MAX - 0xfff, 0)],
                1,
                u64::MAX - 0xfff,
            ),
        ),
        (
            "overlapping guest addresses",
            table(
                vec![r(0, 0x10000, VA, 0), r(0x8000, 0x10000, VA + 0x100000, 0)],
                2,
                VA,
            ),
        ),
        (
            "overlapping frontend addresses",
            table(
                vec![r(0, 0x10000, VA, 0), r(0x100000, 0x10000, VA + 0x8000, 0)],
                2,
                VA,
            ),
        ),
        (
            "9 regions",
            table(
                (0..9)
                    .map(|i| r(i << 20, 0x10000, VA + (i << 20), 0))
                    .collect(),
                9,
                VA,
            ),
        ),
        (
            "2 regions, 1 fd",
            table(
                vec![r(0, 0x10000, VA, 0), r(1 << 20, 0x10000, VA + (1 << 20), 0)],
                1,
                VA,
            ),
        ),
        ("1 region, 2 fds", table(vec![r(0, 0x10000, VA, 0)], 2, VA)),
        // A valid table; the used ring (+0x200, 0x86 bytes) runs past the region's end.
        (
            "ring past the end of its region",
            one(0x10000, 0, 0x10000, 0x10000 - 0x240),
        ),
        ("ring in no region", one(0x10000, 0, 0x10000, 0x20000)),
        (
            "memfd shrunk after SET_MEM_TABLE, then a ring kicked in the lost part",
            Box::new(move |sock: &Path| {
                let mem = memfd(0x10000);
                let mut raw = Raw::connect(sock);
                raw.set_mem_table(&[r(0, 0x10000, VA, 0)], &[mem.as_raw_fd()]);
                raw.sync();
                mem.set_len(0x1000).expect("shrink");
                let _fds = raw.start_ring(VA + 0x8000);
                raw.sync();
            }),
        ),
        (
            "memfd shrunk to 0 under a running ring, then a kick",
            Box::new(move |sock: &Path| {
                let mem = memfd(0x10000);
                let mut raw = Raw::connect(sock);
                raw.set_mem_table(&[r(0, 0x10000, VA, 0)], &[mem.as_raw_fd()]);
                let (kick, _call) = raw.start_ring(VA + 0x8000);
                raw.sync();
                // Only the fault itself can tell: the backend reads zeros there.
                mem.set_len(0).expect("shrink");
                kick.write(1).expect("kick");
                std::thread::sleep(Duration::from_millis(50));
                raw.sync();
            }),
        ),
    ]
}

#[test]
fn hostile_frontends_lose_their_connection_never_the_backend() {
    let mut backend = Backend::start("sessions");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let honest = {
        let (sock, stop, done) = (backend.sock("o.sock"), stop.clone(), done.clone());
        std::thread::spawn(move || honest_io(sock, stop, done))
    };
    let wait_rounds = |backend: &mut Backend, n: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while done.load(Ordering::Relaxed) < n {
            assert!(
                Instant::now() < deadline && !backend.vmm.has_exited(),
                "the honest frontend is stuck at {} rounds:\n{}",
                done.load(Ordering::Relaxed),
                backend.vmm.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_rounds(&mut backend, 20);
    // `OSPREY_HOSTILE_CASE=<n>`: session n alone (to see which sessions a backend survives).
    if let Some(n) = std::env::var("OSPREY_HOSTILE_CASE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let all = sessions();
        let (name, session) = &all[n];
        println!("session {n} alone: {name}");
        session(&backend.sock("h.sock"));
        backend.vmm.wait_log_count("waiting for a frontend", 1);
        let at = done.load(Ordering::Relaxed);
        wait_rounds(&mut backend, at + 5);
        stop.store(true, Ordering::Relaxed);
        assert_eq!(honest.join().expect("honest thread"), Ok(()));
        return;
    }
    // One refused session first, so that the start counts whatever the first connection
    // allocates for good (the log's buffers).
    sessions()[0].1(&backend.sock("h.sock"));
    backend.vmm.wait_log_count("waiting for a frontend", 1);
    let before = backend.vmm.footprint();
    for (i, (name, session)) in sessions().iter().enumerate() {
        println!("session {i}: {name}");
        session(&backend.sock("h.sock"));
        backend.vmm.wait_log_count("waiting for a frontend", i + 2);
        let at = done.load(Ordering::Relaxed);
        wait_rounds(&mut backend, at + 5);
        assert!(
            !backend.vmm.has_exited(),
            "the backend died of {name}:\n{}",
            backend.vmm.log_text()
        );
    }
    // With the honest frontend still connected, as at the start.
    let after = backend.vmm.footprint();
    stop.store(true, Ordering::Relaxed);
    let result = honest.join().expect("honest thread");
    assert_eq!(result, Ok(()), "{}", backend.vmm.log_text());
    println!(
        "honest rounds {}; backend fds, VmSize kB, VmRSS kB: before {before:?}, after {after:?}",
        done.load(Ordering::Relaxed)
    );
    let log = backend.vmm.log_text();
    for refused in [
        "needs 0x100000 bytes of its file, which has 0x1000",
        "needs 0x10000000000 bytes of its file",
        "needs 0x1f000 bytes of its file, which has 0x10000",
        "overlaps the one at",
        "runs past the end of its memory region",
        "needs 0x10000 bytes of its file, which has 0x1000",
        "a frontend shrank its memory under running rings",
    ] {
        assert!(log.contains(refused), "no {refused:?} in the log:\n{log}");
    }
    assert_eq!(
        after.0, before.0,
        "open fds before/after the hostile sessions"
    );
    assert!(
        after.1 <= before.1 + (16 << 10),
        "VmSize grew from {} to {} kB",
        before.1,
        after.1
    );
    assert!(
        after.2 <= before.2 + RSS_SLACK_KB,
        "VmRSS grew from {} to {} kB (slack {RSS_SLACK_KB})",
        before.2,
        after.2
    );
}

#[test]
fn a_fatal_signal_is_reported_by_name_and_sockets_are_removed() {
    let mut backend = Backend::start("sigsegv");
    backend.vmm.signal(libc::SIGSEGV);
    let status = backend.vmm.wait_exit(Duration::from_secs(20));
    let log = backend.vmm.log_text();
    assert!(
        log.contains("fatal signal SIGSEGV"),
        "no SIGSEGV report:\n{log}"
    );
    assert!(!log.contains("forbidden syscall"), "{log}");
    assert_eq!(status.code(), Some(128 + libc::SIGSEGV), "{log}");
    for s in ["h.sock", "o.sock", "api.sock"] {
        assert!(!backend.sock(s).exists(), "{s} left behind:\n{log}");
    }
}

#[test]
fn sigterm_stops_the_backend_and_removes_its_sockets() {
    let mut backend = Backend::start("sigterm");
    backend.vmm.signal(libc::SIGTERM);
    let status = backend.vmm.wait_exit(Duration::from_secs(10));
    let log = backend.vmm.log_text();
    assert_eq!(status.code(), Some(0), "{log}");
    for s in ["h.sock", "o.sock", "api.sock"] {
        assert!(!backend.sock(s).exists(), "{s} left behind:\n{log}");
    }
}
