//! What kind of file the `Auto` engine is given, found once when the engine is built: opened with
//! O_DIRECT or not, a regular file on a memory file system (which `engine::open` gives the Sync
//! engine instead), or an O_DIRECT block device that does its work in the caller's context
//! (which `engine::open` wraps around Linux AIO rather than io_uring).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::time::Instant;

use super::sampler::{cpu_permille, ON_CPU_MIN_PERMILLE};

/// Reads [`completes_in_caller`] times: an odd count, whose median decides, so that one read
/// preempted on a busy host does not.
const CALLER_PROBE_READS: usize = 9;

/// Whether `file` is an O_DIRECT block device that does its work in the caller's context (zram,
/// a RAM disk): the median of a few 4 KiB reads at offset 0 keeps the thread on its CPU for at
/// least `ON_CPU_MIN_PERMILLE` (‰) of its time. A device that sleeps for its completion (NVMe, a
/// loop device's worker) is not one; neither, on a busy host, is a device whose probe was
/// preempted (then `Auto` keeps io_uring).
pub fn completes_in_caller(file: &File) -> bool {
    use std::os::unix::fs::FileTypeExt;
    /// A page, read into a page-aligned buffer: valid O_DIRECT for logical blocks up to 4 KiB.
    const READ_BYTES: usize = 4096;
    if !is_direct(file)
        || !file
            .metadata()
            .is_ok_and(|m| m.file_type().is_block_device())
    {
        return false;
    }
    let Ok(layout) = std::alloc::Layout::from_size_align(READ_BYTES, READ_BYTES) else {
        return false;
    };
    // SAFETY: the layout has a non-zero size.
    let buf = unsafe { std::alloc::alloc(layout) };
    if buf.is_null() {
        return false;
    }
    let mut shares = [0u32; CALLER_PROBE_READS];
    let mut ok = true;
    for share in &mut shares {
        let cpu0 = crate::stats::thread_cpu_ns();
        let start = Instant::now();
        // SAFETY: `buf` is READ_BYTES writable bytes, aligned for O_DIRECT, alive until the
        // dealloc below; pread writes at most READ_BYTES bytes into it.
        let r = unsafe { libc::pread(file.as_raw_fd(), buf.cast(), READ_BYTES, 0) };
        let took = start.elapsed().as_nanos() as u64;
        let cpu = crate::stats::thread_cpu_ns().saturating_sub(cpu0);
        if r != READ_BYTES as isize || took == 0 {
            ok = false;
            break;
        }
        *share = cpu_permille(cpu, took);
    }
    // SAFETY: `buf` came from `alloc` with this layout and is freed once.
    unsafe { std::alloc::dealloc(buf, layout) };
    shares.sort_unstable();
    ok && shares[CALLER_PROBE_READS / 2] >= ON_CPU_MIN_PERMILLE
}

/// Whether `file` was opened with O_DIRECT.
pub(super) fn is_direct(file: &File) -> bool {
    // SAFETY: F_GETFL on an fd we own has no memory effects.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

/// Whether `file` is a regular file on tmpfs or ramfs, whose reads and writes never wait for a
/// device. A block device node lives on devtmpfs, which reports tmpfs's magic: its I/O goes to
/// the device, so only regular files count.
pub fn in_memory(file: &File) -> bool {
    if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
        return false;
    }
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    // SAFETY: an all-zero statfs is a valid value for the kernel to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs into `st`, which lives for the call.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as libc::c_long, TMPFS_MAGIC | RAMFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::conformance::{open, store};

    #[test]
    fn only_direct_block_devices_are_probed_for_in_caller_completion() {
        let dir = std::env::current_dir().expect("cwd").join("target");
        let t = store(&dir, "in-caller", 1 << 20);
        assert!(
            !completes_in_caller(&open(&t.path, true, true)),
            "a regular O_DIRECT file"
        );
        assert!(
            !completes_in_caller(&open(&t.path, true, false)),
            "a buffered file"
        );
        // A block device opened without O_DIRECT is not probed either (a page-cache read
        // would say nothing about the device).
        if let Ok(f) = std::fs::File::open("/dev/zram0") {
            assert!(!completes_in_caller(&f));
        }
    }

    #[test]
    fn device_nodes_on_devtmpfs_are_not_memory_files() {
        // devtmpfs reports tmpfs's magic; a loop or NVMe node there must keep RWF_NOWAIT.
        let null = File::open("/dev/null").expect("/dev/null");
        assert!(!in_memory(&null));
        let dir = std::env::temp_dir();
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() { shm } else { dir.as_path() };
        let p = base.join(format!("osprey-auto-memfs-{}", std::process::id()));
        let f = File::create(&p).expect("create");
        let on_tmpfs = shm.is_dir();
        let got = in_memory(&f);
        let _ = std::fs::remove_file(&p);
        if on_tmpfs {
            assert!(got, "a regular file in /dev/shm is a memory file");
        }
    }
}
