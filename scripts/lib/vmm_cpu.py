"""vmm_cpu.py: a VMM's on-CPU time split by thread, for the side-by-side benchmarks
(scripts/net-bench.py; scripts/vsock-bench.c reads the same in C). Imported, not run.

Reads /proc/PID/task/*/{comm,stat,schedstat} (schedstat field 1: nanoseconds on a CPU). Each
thread is one of:
- "vcpu": the VMM's vCPU threads, by name: Osprey and Cloud Hypervisor `vcpuN`, Firecracker
  `fc_vcpu N`, QEMU (`-name ...,debug-threads=on`) `CPU n/KVM`;
- "kernel": kernel workers living in the process (KVM's `kvm-nx-lpage-re`: PF_USER_WORKER in
  the task flags on recent kernels, PF_KTHREAD on older ones; io_uring's workers, PF_IO_WORKER,
  stay the VMM's), the same under every VMM and not the VMM's work;
- "dev": everything else (device threads, iothreads, the VMM's main loop): the figure the
  side-by-side compares.
Threads that exit between two samples are missed.
"""
import os
import re

PF_KTHREAD = 0x00200000
PF_USER_WORKER = 0x00004000
PF_IO_WORKER = 0x00000010
VCPU_NAME = re.compile(r"^(vcpu\d+|fc_vcpu \d+|CPU \d+/KVM)$")


def kind(comm, flags):
    """"vcpu", "kernel" or "dev" for a thread named `comm` with task flags `flags`."""
    if flags & PF_KTHREAD or (flags & PF_USER_WORKER and not flags & PF_IO_WORKER):
        return "kernel"
    if VCPU_NAME.match(comm):
        return "vcpu"
    return "dev"


def task_flags(stat):
    # Field 9 of stat, counted after the ")" that closes the name (which may hold spaces).
    rest = stat[stat.rindex(")") + 2:].split()
    return int(rest[6])


def cpu_ns(pid):
    """{"dev": ns, "vcpu": ns, "kernel": ns}: on-CPU time of the process's threads so far."""
    out = {"dev": 0, "vcpu": 0, "kernel": 0}
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tasks:
        base = "/proc/%d/task/%s/" % (pid, t)
        try:
            with open(base + "comm") as f:
                comm = f.read().rstrip("\n")
            with open(base + "stat") as f:
                flags = task_flags(f.read())
            with open(base + "schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[kind(comm, flags)] += ns
    return out


def delta(before, after):
    """after - before, per kind."""
    return {k: after[k] - before[k] for k in before}
