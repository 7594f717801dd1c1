#!/usr/bin/env python3
"""Side by side: the test guest in QEMU reading 4k blocks at random from a /dev/shm file (and,
with --loop, from a loop device over it) through block backends (--backends), alternating, each
point repeated:

  qemu-iothread  QEMU's built-in virtio-blk-pci with an iothread and aio=io_uring (its adaptive
                 polling at its defaults)
  qsd            QEMU + qemu-storage-daemon's vhost-user-blk export (iothread, aio=io_uring)
  osprey         QEMU + `osprey vhost-user-blk` at its defaults
  ch-vub         QEMU + Cloud Hypervisor's `vhost_user_block` backend at its defaults (queue
                 polling on; --ch-vub names the binary: scripts/build-cloud-hypervisor.sh)

For each run: the guest's IOPS and mean latency (its BLK line), and the backend's CPU time per
I/O from /proc/PID/task/*/schedstat (the whole backend process; for QEMU's built-in device, its
iothread `IO iot0` and the io_uring workers `iou-wrk-TID` that run the reads it submits when the
file system cannot do them without blocking — on tmpfs every read — whose CPU the table also
shows without them). The guest idles after its report (`hang=2`), so the CPU is read before
QEMU goes away. Prints a markdown table of medians and writes every run to --csv.

  tools/osprey-bench/vhost-user-bench.py --osprey target/release/osprey --repeats 3
"""

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GUEST = os.path.join(REPO, "guest-images", "build", "test-guest.elf")
MEM_MIB = 256


def threads_of(pid):
    """(TID, name, CPU ns) of each thread of process `pid` still there."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                comm = f.read().strip()
            with open(f"{base}/schedstat") as f:
                out.append((tid, comm, int(f.read().split()[0])))
        except FileNotFoundError:
            pass
    return out


def task_cpu_ns(pid, comm=None):
    """CPU ns of process `pid`'s threads (only those named `comm`, if given, and the io_uring
    workers that thread spawned: `iou-wrk-TID`, which run the requests it hands to io_uring
    that the file system cannot do without blocking, e.g. every tmpfs read before Linux 6.x)."""
    threads = threads_of(pid)
    if comm is None:
        return sum(ns for _, _, ns in threads)
    owners = {tid for tid, c, _ in threads if c == comm}
    return sum(ns for tid, c, ns in threads
               if tid in owners or (c.startswith("iou-wrk-") and c[len("iou-wrk-"):] in owners))


def thread_cpu_ns(pid):
    """CPU ns of each thread of process `pid`, summed by thread name."""
    out = {}
    for _, comm, ns in threads_of(pid):
        out[comm] = out.get(comm, 0) + ns
    return out


def pin_page_cache(path):
    """Maps `path` (the loop device) shared and locked in a child process, which holds its page
    cache resident until killed: a host that reclaims idle page cache proactively (DAMON, as
    this kind of host runs) would otherwise evict the loop device's cache between its runs, and
    whichever backend ran first after the /dev/shm runs would read a cold cache."""
    code = (
        "import ctypes, os, sys, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.mmap.restype = ctypes.c_void_p\n"
        "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,"
        " ctypes.c_int, ctypes.c_long]\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "size = os.lseek(fd, 0, os.SEEK_END)\n"
        "MAP_SHARED, MAP_POPULATE, MAP_LOCKED = 0x01, 0x8000, 0x2000\n"
        "p = libc.mmap(None, size, 1, MAP_SHARED | MAP_POPULATE | MAP_LOCKED, fd, 0)\n"
        "if p in (None, ctypes.c_void_p(-1).value): sys.exit(f'mmap: {os.strerror(ctypes.get_errno())}')\n"
        "print('pinned', flush=True)\n"
        "time.sleep(1e9)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    if child.stdout.readline().strip() != "pinned":
        raise RuntimeError(f"could not pin the page cache of {path}")
    return child


def wait_for(path, timeout=10.0):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.01)


def qemu_argv(guest_args, device_args):
    return [
        "qemu-system-x86_64", "-name", "bench,debug-threads=on",
        "-machine", "pc,accel=kvm", "-cpu", "host,-arch-capabilities", "-smp", "1",
        "-m", f"{MEM_MIB}M",
        "-object", f"memory-backend-memfd,id=mem,size={MEM_MIB}M,share=on",
        "-numa", "node,memdev=mem",
        "-nographic", "-no-reboot", "-monitor", "none", "-serial", "stdio",
        "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
        "-kernel", GUEST, "-append", f"mode=blk {guest_args} hang=2",
    ] + device_args


def run_guest(argv, cpu_of, backend_pid=None):
    """Boots QEMU, waits for the BLK line, reads the backend CPU, kills QEMU. Also returns the
    CPU each thread of QEMU (and of the backend process) spent over the run, by thread name."""
    qemu = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)

    def threads():
        out = {f"qemu/{k}": v for k, v in thread_cpu_ns(qemu.pid).items()}
        if backend_pid is not None:
            out.update({f"backend/{k}": v for k, v in thread_cpu_ns(backend_pid).items()})
        return out

    cpu0 = None
    threads0 = {}
    report = None
    try:
        for raw in qemu.stdout:
            line = raw.decode(errors="replace")
            if "osprey-test-guest: ready" in line and cpu0 is None:
                cpu0 = cpu_of(qemu.pid)
                threads0 = threads()
            i = line.find("BLK {")
            if i >= 0:
                cpu1 = cpu_of(qemu.pid)
                threads1 = threads()
                report = json.loads(line[i + 4:])
                break
    finally:
        qemu.send_signal(signal.SIGKILL)
        qemu.wait()
    if report is None:
        raise RuntimeError("no BLK line from the guest")
    per_thread = {k: v - threads0.get(k, 0) for k, v in threads1.items()}
    return report, (cpu1 - (cpu0 or 0)), per_thread


def bench_point(kind, args, shm_file, qd, count, osprey, osprey_args=()):
    import stat
    driver = "host_device" if stat.S_ISBLK(os.stat(shm_file).st_mode) else "file"
    guest_args = f"rw=randread bs=4096 qd={qd} count={count} queues=1"
    tmp = tempfile.mkdtemp(prefix="vu-bench-")
    sock = os.path.join(tmp, "vu.sock")
    backend = None
    try:
        if kind == "qemu-iothread":
            dev = [
                "-object", "iothread,id=iot0",
                "-drive", f"file={shm_file},if=none,id=d0,format=raw,cache=writeback,aio=io_uring",
                "-device", "virtio-blk-pci,drive=d0,iothread=iot0,num-queues=1,disable-legacy=on",
            ]
            cpu_of = lambda qpid: task_cpu_ns(qpid, "IO iot0")
        else:
            if kind == "qsd":
                cmd = [
                    "qemu-storage-daemon",
                    "--object", "iothread,id=iot0",
                    "--blockdev", f"driver={driver},node-name=file0,filename={shm_file},aio=io_uring,cache.direct=off",
                    "--export", f"type=vhost-user-blk,id=exp0,node-name=file0,addr.type=unix,"
                                f"addr.path={sock},writable=on,num-queues=1,iothread=iot0",
                ]
            elif kind == "ch-vub":
                cmd = [args.ch_vub, "--block-backend",
                       f"path={shm_file},socket={sock},num_queues=1"]
            else:
                binary = args.osprey_alt if kind == "osprey-alt" else osprey
                cmd = [binary, "vhost-user-blk", "--socket", sock, "--path", shm_file,
                       *osprey_args]
            backend = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(sock)
            dev = [
                "-chardev", f"socket,id=vu,path={sock}",
                "-device", "vhost-user-blk-pci,chardev=vu,num-queues=1,disable-legacy=on",
            ]
            cpu_of = lambda _qpid: task_cpu_ns(backend.pid)
        report, cpu_ns, per_thread = run_guest(qemu_argv(guest_args, dev), cpu_of,
                                               backend.pid if backend else None)
    finally:
        if backend is not None:
            backend.send_signal(signal.SIGKILL)
            backend.wait()
        if os.path.exists(sock):
            os.unlink(sock)
        os.rmdir(tmp)
    run = report["runs"][0]
    if run["errors"] or run["timed_out"]:
        raise RuntimeError(f"{kind} qd{qd}: {run}")
    return {
        "backend": kind, "qd": qd, "requests": run["requests"], "iops": run["iops"],
        "mean_lat_us": run["lat_ns"]["mean"] / 1000.0,
        "cpu_ns_per_io": cpu_ns / max(run["requests"], 1),
        "cpu_ns_per_io_iothread_alone": (per_thread.get("qemu/IO iot0", 0) if kind == "qemu-iothread"
                                         else cpu_ns) / max(run["requests"], 1),
        "threads": {k: v / max(run["requests"], 1) for k, v in per_thread.items() if v > 0},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--osprey", default=os.path.join(REPO, "target", "release", "osprey"))
    p.add_argument("--ch-vub", default="vhost_user_block",
                   help="Cloud Hypervisor's vhost_user_block binary, for the ch-vub backend")
    p.add_argument("--osprey-alt", help="a second osprey binary, run as backend `osprey-alt` "
                   "(compare two builds side by side: --backends osprey,osprey-alt)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size-mib", type=int, default=128)
    p.add_argument("--count-qd1", type=int, default=20000)
    p.add_argument("--count-qd32", type=int, default=100000)
    p.add_argument("--csv", default="vhost-user-bench.csv")
    p.add_argument("--osprey-arg", action="append", default=[],
                   help="an extra argument for `osprey vhost-user-blk` (repeat for several)")
    p.add_argument("--qd", default="1,32", help="queue depths to run, of 1 and 32")
    p.add_argument("--backends", default="qemu-iothread,qsd,osprey",
                   help="backends to run, of qemu-iothread, qsd, osprey, osprey-alt, ch-vub")
    p.add_argument("--threads", action="store_true",
                   help="also print each run's CPU per I/O of every QEMU and backend thread")
    p.add_argument("--loop", action="store_true",
                   help="also read through a loop device over the file (losetup; needs root)")
    p.add_argument("--loop-only", action="store_true",
                   help="read only through the loop device (implies --loop)")
    a = p.parse_args()
    shm_file = f"/dev/shm/vu-bench-{os.getpid()}.img"
    with open(shm_file, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(a.size_mib):
            f.write(block)
    rows = []
    loop = None
    pinner = None
    try:
        stores = [] if a.loop_only else [("shm", shm_file)]
        if a.loop or a.loop_only:
            loop = subprocess.check_output(["losetup", "-f", "--show", shm_file], text=True).strip()
            pinner = pin_page_cache(loop)
            stores.append(("loop", loop))
        for rep in range(a.repeats):
            for store, path in stores:
                for qd, count in ((1, a.count_qd1), (32, a.count_qd32)):
                    if str(qd) not in a.qd.split(","):
                        continue
                    kinds = a.backends.split(",")
                    # Each repeat starts with the next backend: none always runs first.
                    shift = rep % len(kinds)
                    for kind in kinds[shift:] + kinds[:shift]:
                        r = bench_point(kind, a, path, qd, count, a.osprey, a.osprey_arg)
                        r["store"] = store
                        r["repeat"] = rep
                        rows.append(r)
                        print(f"rep {rep} {store:<4} qd{qd:<2} {kind:<14} {r['iops']:>8} IOPS "
                              f"{r['mean_lat_us']:7.1f} µs {r['cpu_ns_per_io']:8.0f} ns CPU/IO",
                              file=sys.stderr, flush=True)
                        if a.threads:
                            for name, ns in sorted(r["threads"].items(), key=lambda t: -t[1]):
                                print(f"      {name:<32} {ns:8.0f} ns/IO", file=sys.stderr)
    finally:
        if pinner:
            pinner.kill()
            pinner.wait()
        if loop:
            subprocess.call(["losetup", "-d", loop])
        os.unlink(shm_file)
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "threads"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print("| store | QD | backend | IOPS | mean latency (µs) | backend CPU per I/O (µs) "
          "| without io_uring workers (µs) |")
    print("|---|---|---|---|---|---|---|")
    for store in dict.fromkeys(r["store"] for r in rows):
        for qd in (1, 32):
            for kind in a.backends.split(","):
                pts = [r for r in rows if r["store"] == store and r["qd"] == qd and r["backend"] == kind]
                if not pts:
                    continue
                med = lambda k: statistics.median(r[k] for r in pts)
                print(f"| {store} | {qd} | {kind} | {med('iops'):.0f} | {med('mean_lat_us'):.1f} | "
                      f"{med('cpu_ns_per_io') / 1000:.2f} | "
                      f"{med('cpu_ns_per_io_iothread_alone') / 1000:.2f} |")


if __name__ == "__main__":
    main()
