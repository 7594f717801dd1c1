#!/usr/bin/env python3
"""vsock-hostile-cpu.py: what a hostile vsock guest costs the host (issue 51: < 2 % of a core).

Boots Osprey (--osprey, default target/release/osprey) with the test guest's
`mode=vsock-connect port=10789 count=4 bytes=262144 par=4 hostile=2` (tests/vsock_guest.rs: eight
malformed packets 50 ms apart, then 1 s of REQUESTs to a port nobody listens on, as fast as the
guest can post them, then a verified workload) and an echo listener on
`<uds_path>_10789`, samples the VMM's threads every 5 ms (scripts/lib/vmm_cpu.py: the vCPU
threads apart; the test guest polls, so they run all the time) and reports the non-vCPU threads'
CPU in % of one core:
- hostile: from the guest's ready line to its `vsock hostile sent=` line (the device's set-up
  and the eight malformed packets, about 0.4 s of them);
- flood: from its `vsock flood start` line to its `vsock flood sent=` line (1 s), with the
  REQUESTs the guest sent and the RSTs it got back;
- life: the whole VM's, start-up and workload included, from the VMM's own exit log (`CPU time
  by thread`, `VM stopped after`): sampling cannot see threads that already exited.
Prints each of --rounds runs (default 3, the load average with each) and the medians.
Usage: scripts/vsock-hostile-cpu.py [--osprey PATH] [--rounds N]
"""
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import rounds  # noqa: E402
import vmm_cpu  # noqa: E402

PORT = 10789


# The figures whose medians are printed.
KEYS = ("hostile_dev_pct", "hostile_s", "flood_dev_pct", "flood_s", "flood_sent",
        "life_dev_pct", "life_s")

def echo_listener(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)

    def one(c):
        with c:
            while True:
                b = c.recv(65536)
                if not b:
                    return
                c.sendall(b)

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv


def one_run(osprey, guest, timeout):
    d = tempfile.mkdtemp(prefix="vsock-hostile-")
    uds = os.path.join(d, "v.sock")
    srv = echo_listener("%s_%d" % (uds, PORT))
    args = "console=ttyS0 mode=vsock-connect port=%d count=4 bytes=262144 par=4 hostile=2" % PORT
    cfg = {"boot-source": {"kernel_image_path": guest, "boot_args": args},
           "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
           "vsock": {"guest_cid": 3, "uds_path": uds}}
    p, serial = rounds.boot(osprey, cfg, d)
    marks, samples = {}, []
    t_end = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < t_end:
        now, c = time.monotonic(), vmm_cpu.cpu_ns(p.pid)
        if c["dev"] or c["vcpu"]:
            samples.append((now, c["dev"]))
        serial.seek(0)
        text = serial.read()
        for key, needle in (("ready", "osprey-test-guest: ready"),
                            ("hostile_done", "vsock hostile sent="),
                            ("flood_start", "vsock flood start"),
                            ("flood_done", "vsock flood sent=")):
            if key not in marks and needle in text:
                marks[key] = len(samples) - 1
        time.sleep(0.005)
    if p.poll() is None:
        p.kill()
    p.wait()
    srv.close()
    serial.seek(0)
    text = serial.read()
    if any(k not in marks for k in ("ready", "hostile_done", "flood_start", "flood_done")) \
            or len(samples) < 2:
        return {"error": "no ready, hostile or flood line (see %s)" % d}

    def pct(a, b):
        (t0, c0), (t1, c1) = samples[a], samples[b]
        return 100.0 * (c1 - c0) / 1e9 / max(t1 - t0, 1e-9), t1 - t0

    hostile, hs = pct(marks["ready"], marks["hostile_done"])
    flood, fs = pct(marks["flood_start"], marks["flood_done"])
    sent = re.search(r"vsock flood sent=(\d+) rst=(\d+)", text)
    report = {}
    for line in text.splitlines():
        if line.startswith("VSOCK {"):
            try:
                report = json.loads(line[len("VSOCK "):])
            except ValueError:
                pass
    ok = (report.get("error") is None and report.get("mismatches") == 0
          and report.get("verified") == report.get("count"))
    out = {"hostile_dev_pct": round(hostile, 3), "hostile_s": round(hs, 3),
           "flood_dev_pct": round(flood, 3), "flood_s": round(fs, 3),
           "flood_sent": int(sent.group(1)) if sent else None,
           "flood_rst": int(sent.group(2)) if sent else None, "workload_ok": ok}
    log = open(os.path.join(d, "vmm.log")).read()
    threads = re.search(r"CPU time by thread: (.*)", log)
    life = re.search(r"VM stopped after ([0-9.]+) s", log)
    if threads and life:
        dev_ms = 0.0
        for name, ms in re.findall(r"([^,]+?) ([0-9.]+) ms", threads.group(1)):
            kind = "kernel" if name.strip() == "kvm-nx-lpage-re" else vmm_cpu.kind(name.strip(), 0)
            if kind == "dev":
                dev_ms += float(ms)
        out["life_dev_pct"] = round(100.0 * dev_ms / 1000.0 / float(life.group(1)), 3)
        out["life_s"] = float(life.group(1))
    return out


if __name__ == "__main__":
    raise SystemExit(rounds.main(one_run, KEYS, 120.0))
