#!/usr/bin/env python3
"""net-bench.py: the host side of one virtio-net measurement (scripts/net-side-by-side.sh).

Against a guest that answers ping behind a tap (the test guest's `mode=net-echo ip=A.B.C.D`),
with the host's own iputils `ping` (root):

- rtt: `ping -c COUNT -i 0 -W 1 IP`; mean and p99 of the per-reply times (`time=` of every reply
  line, in microseconds, read from a file afterwards), lost echoes counted.
- flood: `ping -f -q -c FLOOD IP`; echoes per second (received / ping's `time`), loss in %.
- CPU: the VMM's on-CPU time (scripts/lib/vmm_cpu.py: threads outside the vCPUs, `dev`) over each
  phase divided by the echoes received (one echo = a request frame in and a reply frame out), in
  microseconds per echo; the vCPU threads apart (`vcpu`: the test guest polls its rings, so this
  is how long the vCPU ran, not work done).

Prints one JSON object. Exit 1 when ping fails to run or gets no
reply at all.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import vmm_cpu  # noqa: E402

REPLY = re.compile(r"icmp_seq=\d+ .*time=([0-9.]+) ms")
SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received.*time (\d+)ms")


def ping(args, ip, timeout):
    # Its lines go to a file, not a pipe: a reader woken for every reply line would compete
    # with ping, the VMM and the vCPU for the CPUs and add ~5-10 us to each round trip here.
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.run(["ping"] + args + [ip], stdout=out, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
        out.seek(0)
        stdout = out.read()
    m = SUMMARY.search(stdout)
    if not m:
        raise RuntimeError("ping %s: no summary (exit %d): %s" % (args, p.returncode,
                                                                  (stdout + p.stderr)[-300:]))
    sent, got, ms = (int(x) for x in m.groups())
    if got == 0:
        raise RuntimeError("ping %s: no reply" % args)
    return sent, got, ms, stdout


def phase(pid, fn):
    c0 = vmm_cpu.cpu_ns(pid)
    r = fn()
    return r, vmm_cpu.delta(c0, vmm_cpu.cpu_ns(pid))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ip", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the VMM's pid (for schedstat)")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--flood", type=int, default=100000)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()
    out = {}
    try:
        ping(["-c", "100", "-i", "0", "-W", "1"], a.ip, a.timeout)  # warm-up, not counted
        (sent, got, _, text), cpu = phase(
            a.pid, lambda: ping(["-c", str(a.count), "-i", "0", "-W", "1"], a.ip, a.timeout))
        us = sorted(float(x) * 1000.0 for x in REPLY.findall(text))
        if not us:
            raise RuntimeError("rtt: no reply line")
        out["rtt_mean_us"] = sum(us) / len(us)
        out["rtt_p99_us"] = us[min(len(us) - 1, (len(us) * 99) // 100)]
        out["rtt_lost"] = sent - got
        out["rtt_dev_us_per_echo"] = cpu["dev"] / 1000.0 / got
        (sent, got, ms, _), cpu = phase(
            a.pid, lambda: ping(["-f", "-q", "-c", str(a.flood)], a.ip, a.timeout))
        out["flood_pps"] = got / max(ms, 1) * 1000.0
        out["flood_loss_pct"] = 100.0 * (sent - got) / sent
        out["flood_dev_us_per_echo"] = cpu["dev"] / 1000.0 / got
        out["flood_vcpu_us_per_echo"] = cpu["vcpu"] / 1000.0 / got
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        out["error"] = str(e)
        print(json.dumps(out))
        return 1
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
