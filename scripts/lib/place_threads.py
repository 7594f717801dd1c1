"""place_threads.py: pin a running VMM's threads the same way whatever the VMM (the side-by-side
scripts' `PLACE=apart`): its vCPU threads on one set of host CPUs, every other thread (device
threads, iothreads, the main loop) on another. Names come from vmm_cpu.py, so Osprey, Firecracker,
Cloud Hypervisor and QEMU are placed alike.

Usage: python3 scripts/lib/place_threads.py PID VCPU_CPUS OTHER_CPUS   (e.g. 1234 1 0; a list
is comma-separated). Prints one line per thread moved; exits 1 if the process is gone.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmm_cpu  # noqa: E402


def cpus(text):
    return {int(c) for c in text.split(",") if c != ""}


def place(pid, vcpu_cpus, other_cpus):
    """Pins each thread of `pid`; returns [(tid, comm, kind, cpus)] of those moved."""
    moved = []
    for t in sorted(os.listdir("/proc/%d/task" % pid), key=int):
        base = "/proc/%d/task/%s/" % (pid, t)
        try:
            with open(base + "comm") as f:
                comm = f.read().rstrip("\n")
            with open(base + "stat") as f:
                flags = vmm_cpu.task_flags(f.read())
        except OSError:
            continue  # exited meanwhile
        kind = vmm_cpu.kind(comm, flags)
        if kind == "kernel":
            continue
        target = vcpu_cpus if kind == "vcpu" else other_cpus
        try:
            os.sched_setaffinity(int(t), target)
        except OSError:
            continue
        moved.append((int(t), comm, kind, sorted(target)))
    return moved


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    pid = int(sys.argv[1])
    if not os.path.isdir("/proc/%d" % pid):
        print("place_threads: no process %d" % pid, file=sys.stderr)
        sys.exit(1)
    for tid, comm, kind, target in place(pid, cpus(sys.argv[2]), cpus(sys.argv[3])):
        print("pinned %d (%s, %s) to CPUs %s" % (tid, comm, kind, ",".join(map(str, target))))


if __name__ == "__main__":
    main()
