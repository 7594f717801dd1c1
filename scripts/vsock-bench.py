#!/usr/bin/env python3
"""vsock-bench.py: the host side of one vsock measurement round (scripts/vsock-side-by-side.sh).

Talks Firecracker's hybrid-vsock protocol to a guest that echoes (the test guest's
`mode=vsock-echo port=N`): connect to the VMM's Unix socket, `CONNECT <port>\\n`, expect
`OK <host_port>\\n`, then:

- rtt: one connection, ROUNDS round trips of 64 bytes (send, read the 64 bytes back), each timed
  with perf_counter_ns; mean and p99 in microseconds.
- bulk1 / bulk8: 1 and 8 connections at once, each writing its share of TOTAL bytes (random,
  compared when they come back) while a second thread reads the echo; MB/s of payload echoed
  (one direction, MB = 10^6 bytes) from the first write to the last byte read back.
- CPU: the VMM's on-CPU time over each bulk phase (scripts/lib/vmm_cpu.py: /proc/PID/task/*/
  schedstat, KVM's kernel worker left out) divided by the payload MB, split into the vCPU threads
  (`vcpu_ms_per_MB`: the test guest polls its rings, so this is mostly how long the vCPU ran,
  not work done) and all other threads (`vmm_ms_per_MB`: the device side, the figure to compare).

Prints one JSON object. Exit 1 when a CONNECT is refused or an echo does not match.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import vmm_cpu  # noqa: E402


def connect(path, port, timeout):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    s.sendall(b"CONNECT %d\n" % port)
    line = b""
    while not line.endswith(b"\n") and len(line) < 64:
        c = s.recv(1)
        if not c:
            break
        line += c
    if not line.startswith(b"OK "):
        raise RuntimeError("CONNECT %d answered %r" % (port, line))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return s


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        c = s.recv(n - len(buf))
        if not c:
            raise RuntimeError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += c
    return bytes(buf)


def rtt(path, port, rounds, timeout):
    s = connect(path, port, timeout)
    msg = os.urandom(64)
    for _ in range(100):  # warm-up, not counted
        s.sendall(msg)
        recv_exact(s, 64)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        s.sendall(msg)
        back = recv_exact(s, 64)
        samples.append(time.perf_counter_ns() - t0)
        if back != msg:
            raise RuntimeError("rtt: echo mismatch")
    s.close()
    samples.sort()
    p99 = samples[min(len(samples) - 1, (len(samples) * 99) // 100)]
    return sum(samples) / len(samples) / 1000.0, p99 / 1000.0


def bulk(path, port, conns, total, pid, timeout):
    share = total // conns
    socks = [connect(path, port, timeout) for _ in range(conns)]
    datas = [os.urandom(share) for _ in range(conns)]
    errors = []

    def run(s, data):
        try:
            w = threading.Thread(target=s.sendall, args=(data,))
            w.start()
            back = recv_exact(s, len(data))
            w.join()
            if back != data:
                errors.append("bulk: echo mismatch")
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            errors.append("bulk: %s" % e)
        finally:
            s.close()

    threads = [threading.Thread(target=run, args=(s, d)) for s, d in zip(socks, datas)]
    c0, t0 = vmm_cpu.cpu_ns(pid), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs, c1 = time.perf_counter() - t0, vmm_cpu.cpu_ns(pid)
    if errors:
        raise RuntimeError(errors[0])
    mb = share * conns / 1e6
    cpu = vmm_cpu.delta(c0, c1)
    return mb / secs, cpu["dev"] / 1e6 / mb, cpu["vcpu"] / 1e6 / mb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uds", required=True)
    ap.add_argument("--port", type=int, default=1024)
    ap.add_argument("--pid", type=int, required=True, help="the VMM's pid (for schedstat)")
    ap.add_argument("--rounds", type=int, default=10000)
    ap.add_argument("--total", type=int, default=64 << 20, help="bulk bytes per phase")
    ap.add_argument("--timeout", type=float, default=30.0)
    a = ap.parse_args()
    out = {}
    try:
        out["rtt_mean_us"], out["rtt_p99_us"] = rtt(a.uds, a.port, a.rounds, a.timeout)
        for n in (1, 8):
            (out["bulk%d_MBps" % n], out["bulk%d_vmm_ms_per_MB" % n],
             out["bulk%d_vcpu_ms_per_MB" % n]) = bulk(a.uds, a.port, n, a.total, a.pid, a.timeout)
    except (OSError, RuntimeError) as e:
        out["error"] = str(e)
        print(json.dumps(out))
        return 1
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
