#!/usr/bin/env python3
"""net-hostile-cpu.py: what a hostile virtio-net guest costs the host (issue 52: < 2 % of a core).

Boots Osprey (--osprey, default target/release/osprey) with the test guest's
`mode=net-echo ip=... hostile=1` on a tap of its own (root; the script creates and deletes it):
for one second the guest's tx ring carries nothing but chains that are not frames (a
device-writable buffer, one outside guest memory, one longer than any frame), posted as fast as
the device hands them back. It samples the VMM's threads every 5 ms (scripts/lib/vmm_cpu.py:
the vCPU threads apart; the test guest polls, so they run all the time) and reports the
non-vCPU threads' CPU in % of one core from the guest's `net hostile start` line to its
`net hostile sent=N returned=M` line, with N and M, and whether 100 pings answer afterwards.
Prints each of --rounds runs (default 3, the load average with each) and the medians.
Usage: scripts/net-hostile-cpu.py [--osprey PATH] [--rounds N]
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import rounds  # noqa: E402
import vmm_cpu  # noqa: E402

TAP, HOST_IP, GUEST_IP = "ospreyhost0", "172.31.250.1", "172.31.250.2"


# The figures whose medians are printed.
KEYS = ("flood_dev_pct", "flood_s", "sent", "returned", "pings_answered")

def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def one_run(osprey, guest, timeout):
    d = tempfile.mkdtemp(prefix="net-hostile-")
    sh("ip", "tuntap", "add", "dev", TAP, "mode", "tap")
    try:
        sh("ip", "addr", "add", HOST_IP + "/24", "dev", TAP)
        sh("ip", "link", "set", TAP, "up")
        return measure(osprey, guest, timeout, d)
    finally:
        subprocess.run(["ip", "link", "del", TAP], stderr=subprocess.DEVNULL)


def measure(osprey, guest, timeout, d):
    args = "console=ttyS0 mode=net-echo ip=%s hostile=1" % GUEST_IP
    cfg = {"boot-source": {"kernel_image_path": guest, "boot_args": args},
           "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
           "network-interfaces": [{"iface_id": "eth0", "host_dev_name": TAP,
                                   "guest_mac": "06:00:ac:1f:fa:02"}]}
    p, serial = rounds.boot(osprey, cfg, d)
    marks, samples, text = {}, [], ""
    t_end = time.monotonic() + timeout
    try:
        while p.poll() is None and time.monotonic() < t_end and "ready" not in marks:
            now, c = time.monotonic(), vmm_cpu.cpu_ns(p.pid)
            if c["dev"] or c["vcpu"]:
                samples.append((now, c["dev"]))
            serial.seek(0)
            text = serial.read()
            for key, needle in (("start", "net hostile start"), ("done", "net hostile sent="),
                                ("ready", "net-echo ready")):
                if key not in marks and needle in text:
                    marks[key] = len(samples) - 1
            time.sleep(0.005)
        if "ready" not in marks or "start" not in marks or "done" not in marks:
            return {"error": "no hostile or ready line (see %s)" % d}
        ping = subprocess.run(["ping", "-c", "100", "-i", "0.002", "-W", "1", "-q", GUEST_IP],
                              capture_output=True, text=True)
        got = re.search(r"(\d+) received", ping.stdout)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    (t0, c0), (t1, c1) = samples[marks["start"]], samples[marks["done"]]
    sent = re.search(r"net hostile sent=(\d+) returned=(\d+)", text)
    return {"flood_dev_pct": round(100.0 * (c1 - c0) / 1e9 / max(t1 - t0, 1e-9), 3),
            "flood_s": round(t1 - t0, 3),
            "sent": int(sent.group(1)) if sent else None,
            "returned": int(sent.group(2)) if sent else None,
            "pings_answered": int(got.group(1)) if got else 0}


if __name__ == "__main__":
    raise SystemExit(rounds.main(one_run, KEYS, 60.0))
