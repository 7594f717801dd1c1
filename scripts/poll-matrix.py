#!/usr/bin/env python3
"""Polling comparison (issue 5): Osprey's test guest on a RAM-backed block device (a loop device
with direct I/O over /dev/shm), 4k randread and randwrite at QD1, QD8 and QD32, for polling off,
classic (default), weighted W=2/3/4 and classic with a 200 µs window. Reports guest IOPS, mean and
p99 latency, kicks per request, and the dataplane thread's CPU per I/O. Prints a markdown table.

Needs root (losetup) and a release build (`make build guest`).
Usage: scripts/poll-matrix.py [--engine IoUring] [--seconds-per-point 2] [--repeats 1]
"""
import json, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OSPREY = os.path.join(ROOT, "target/release/osprey")
GUEST = os.path.join(ROOT, "guest-images/build/test-guest.elf")
CONFIGS = [("off", {"poll_max_ns": 0}),
           ("classic (default)", {}),
           ("weighted W=2", {"poll_policy": "Weighted", "poll_weight": 2}),
           ("weighted W=3", {"poll_policy": "Weighted", "poll_weight": 3}),
           ("weighted W=4", {"poll_policy": "Weighted", "poll_weight": 4}),
           ("classic 200 µs", {"poll_max_ns": 200000})]
POINTS = [(rw, qd) for rw in ("randread", "randwrite") for qd in (1, 8, 32)]


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout.strip()


def boot(dev, engine, rw, qd, count, thread, tsc):
    args = f"mode=blk rw={rw} bs=4096 qd={qd} count={count} range=1g tsc_khz={tsc}"
    cfg = {"machine-config": {"vcpu_count": 1, "mem_size_mib": 256},
           "boot-source": {"kernel_image_path": GUEST, "boot_args": args},
           "drives": [{"drive_id": "nvme0", "path_on_host": dev, "direct": True, "io_engine": engine,
                       "queue_size": 256, "iothread": "io0"}],
           "iothreads": [dict({"id": "io0"}, **thread)]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    out = subprocess.run([OSPREY, "--config", f.name], capture_output=True, text=True, timeout=600)
    os.unlink(f.name)
    blk = json.loads(next(l[4:] for l in out.stdout.splitlines() if l.startswith("BLK ")))
    run = blk["runs"][0]
    cpu_line = next(l for l in out.stderr.splitlines() if "CPU time by thread" in l)
    cpu = {k: float(v) for k, v in re.findall(r"([\w-]+) ([\d.]+) ms", cpu_line)}
    n = run["requests"]
    return {"iops": run["iops"], "mean": run["lat_ns"]["mean"] / 1e3, "p99": run["lat_ns"]["p99"] / 1e3,
            "kicks": run["kicks"] / n, "cpu": cpu.get("iothread-io0", 0.0) * 1e3 / n, "errors": run["errors"]}


def main():
    engine, secs, repeats = arg("--engine", "IoUring"), arg("--seconds-per-point", 2), arg("--repeats", 1)
    img = "/dev/shm/osprey-poll.img"
    sh(f"dd if=/dev/urandom of={img} bs=1M count=1024 status=none")
    dev = sh(f"losetup --direct-io=on -f --show {img}")
    try:
        out = subprocess.run([OSPREY, "--kernel", GUEST, "--cmdline", "mode=report"], capture_output=True, text=True)
        tsc = int(re.search(r"vCPU TSC frequency: (\d+) kHz", out.stderr).group(1))
        print(f"Engine {engine}; store {dev} (loop, direct-io over {img}); vCPU TSC {tsc} kHz; "
              f"{secs} s per point, median of {repeats}.\n")
        print("| point | polling | IOPS | mean µs | p99 µs | kicks/req | dataplane CPU/IO µs |")
        print("|---|---|---|---|---|---|---|")
        for rw, qd in POINTS:
            # Size each run from a quick polling-off probe so every point lasts about `secs`.
            probe = boot(dev, engine, rw, qd, 2000, {"poll_max_ns": 0}, tsc)
            count = max(2000, int(probe["iops"] * secs))
            for name, thread in CONFIGS:
                rs = sorted((boot(dev, engine, rw, qd, count, thread, tsc) for _ in range(repeats)), key=lambda r: r["iops"])
                r = rs[len(rs) // 2]
                print(f"| 4k {rw} QD{qd} | {name} | {r['iops']:,} | {r['mean']:.1f} | {r['p99']:.1f} "
                      f"| {r['kicks']:.3f} | {r['cpu']:.2f} |", flush=True)
    finally:
        sh(f"losetup -d {dev}")
        os.unlink(img)


if __name__ == "__main__":
    main()
