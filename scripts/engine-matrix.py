#!/usr/bin/env python3
"""Engine comparison on a RAM-backed block device (a loop device with direct I/O over a file in
/dev/shm, standing in for fast NVMe): Osprey's test guest at 4k randread QD1 and QD32, 4k
randwrite QD32 and 128k randread QD8 on every engine, the effect of max_batch 1/8/32/128 at QD128
on 4 queues, and host fio on the same device for scale. Prints markdown tables.

Needs root (losetup), a release build (`make build guest`), and fio for the host rows.
Usage: scripts/engine-matrix.py [--seconds-per-point N]
"""
import json, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OSPREY = os.path.join(ROOT, "target/release/osprey")
GUEST = os.path.join(ROOT, "guest-images/build/test-guest.elf")
POINTS = [("4k randread QD1", "randread", 4096, 1), ("4k randread QD32", "randread", 4096, 32),
          ("4k randwrite QD32", "randwrite", 4096, 32), ("128k randread QD8", "randread", 131072, 8)]
ENGINES = ["IoUring", "LinuxAio", "Sync", "Null"]


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout.strip()


def tsc_khz():
    out = subprocess.run([OSPREY, "--kernel", GUEST, "--cmdline", "mode=report"], capture_output=True, text=True)
    return int(re.search(r"vCPU TSC frequency: (\d+) kHz", out.stderr).group(1))


def boot(dev, engine, rw, bs, qd, queues, count, max_batch=0, tsc=0):
    args = f"mode=blk rw={rw} bs={bs} qd={qd} queues={queues} count={count} range=1g tsc_khz={tsc}"
    cfg = {"machine-config": {"vcpu_count": 1, "mem_size_mib": 256},
           "boot-source": {"kernel_image_path": GUEST, "boot_args": args},
           "drives": [{"drive_id": "nvme0", "path_on_host": dev, "direct": True, "io_engine": engine,
                       "num_queues": queues, "queue_size": 256, "iothread": "io0"}],
           "iothreads": [{"id": "io0", "max_batch": max_batch}]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    out = subprocess.run([OSPREY, "--config", f.name], capture_output=True, text=True, timeout=300)
    os.unlink(f.name)
    blk = json.loads(next(l[4:] for l in out.stdout.splitlines() if l.startswith("BLK ")))
    run = blk["runs"][0]
    cpu_line = next(l for l in out.stderr.splitlines() if "CPU time by thread" in l)
    cpu = {k: float(v) for k, v in re.findall(r"([\w-]+) ([\d.]+) ms", cpu_line)}
    stats = json.loads(next(l.split("drive stats ", 1)[1] for l in out.stderr.splitlines() if "drive stats " in l))
    n = run["requests"]
    outside = sum(v for k, v in cpu.items() if not k.startswith("vcpu")) * 1e3 / n
    return {"iops": run["iops"], "mean": run["lat_ns"]["mean"] / 1e3, "p50": run["lat_ns"]["p50"] / 1e3,
            "p99": run["lat_ns"]["p99"] / 1e3, "cpu_us": outside, "errors": run["errors"],
            "engine": stats["engine"], "batch_hist": stats["batch_hist"], "kicks": run["kicks"] / n}


def fio(dev, engine, rw, bs, qd, secs):
    out = sh(f"fio --name=h --filename={dev} --direct=1 --rw={rw} --bs={bs} --iodepth={qd} "
             f"--ioengine={engine} --runtime={secs} --time_based --output-format=json")
    j = json.loads(out)["jobs"][0]
    side = j["read"] if "read" in rw else j["write"]
    return side["iops"], side["clat_ns"]["mean"] / 1e3


def main():
    secs = 2
    if "--seconds-per-point" in sys.argv:
        secs = int(sys.argv[sys.argv.index("--seconds-per-point") + 1])
    img = "/dev/shm/osprey-matrix.img"
    sh(f"dd if=/dev/urandom of={img} bs=1M count=1024 status=none")
    dev = sh(f"losetup --direct-io=on -f --show {img}")
    try:
        tsc = tsc_khz()
        print(f"Store: {dev} (loop, direct-io over {img}, 1 GiB). vCPU TSC {tsc} kHz.\n")
        print("| engine | point | IOPS | mean µs | p50 µs | p99 µs | VMM CPU/IO outside vCPUs µs | kicks/req | errors |")
        print("|---|---|---|---|---|---|---|---|---|")
        for engine in ENGINES:
            for name, rw, bs, qd in POINTS:
                guess = {1: 40000, 8: 30000, 32: 150000}[qd] * secs // (2 if bs > 4096 else 1)
                r = boot(dev, engine, rw, bs, qd, 1, guess, tsc=tsc)
                print(f"| {engine} | {name} | {r['iops']:,} | {r['mean']:.1f} | {r['p50']:.1f} | {r['p99']:.1f} "
                      f"| {r['cpu_us']:.2f} | {r['kicks']:.3f} | {r['errors']} |", flush=True)
        print("\nmax_batch at 4k randread QD128 × 4 queues:\n")
        print("| engine | max_batch | IOPS | mean µs | p99 µs | VMM CPU/IO µs | batch histogram (≤1,2,4,8,16,32,64,128,256,more) |")
        print("|---|---|---|---|---|---|---|")
        for engine in ["IoUring", "LinuxAio"]:
            for mb in [1, 8, 32, 128]:
                r = boot(dev, engine, "randread", 4096, 128, 4, 300000 * secs // 2, max_batch=mb, tsc=tsc)
                print(f"| {engine} | {mb} | {r['iops']:,} | {r['mean']:.1f} | {r['p99']:.1f} | {r['cpu_us']:.2f} "
                      f"| {r['batch_hist']} |", flush=True)
        if subprocess.run("command -v fio", shell=True, capture_output=True).returncode == 0:
            print("\nHost fio on the same device:\n")
            print("| fio engine | point | IOPS | mean µs |")
            print("|---|---|---|---|")
            for eng in ["io_uring", "libaio", "psync"]:
                for name, rw, bs, qd in POINTS:
                    if eng == "psync" and qd > 1:
                        continue
                    iops, mean = fio(dev, eng, rw, bs, qd, secs)
                    print(f"| {eng} | {name} | {iops:,.0f} | {mean:.1f} |", flush=True)
    finally:
        sh(f"losetup -d {dev}")
        os.unlink(img)


if __name__ == "__main__":
    main()
