#!/usr/bin/env bash
# qd1-stages.sh: where a QD1 4k read's time goes, stage by stage, from a run of the test guest.
#
# Builds Osprey with the `stage-stamps` feature into target/qd1/osprey-stamps (the plain
# release build is rebuilt afterwards by cargo when next asked for), boots the test guest with
# `tsc_stamp=1` (ring 3, QD1 4k randread, one queue, default config, a 256 MiB /dev/shm file)
# through tools/osprey-bench, and prints each stage's median and mean in ns: guest publishes →
# the iothread pops it → handed to the engine → commit returned (the read) → used published,
# and the rest of the guest's mean latency: used published → the guest sees it.
#
# Usage: scripts/qd1-stages.sh [ROUNDS (default 3)] [SECONDS per run (default 2)]
# Environment: HOG=1 runs a CPU-bound loop beside the VM; OUT=dir.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-2}
HOG=${HOG:-0}
OUT=${OUT:-target/qd1-stages/$(date -u +%Y%m%dT%H%M%SZ)}
STAMPS=target/qd1/osprey-stamps

if [[ ! -x "$STAMPS" || -n "${REBUILD:-}" ]]; then
    nice -n 5 cargo build --release -q -p osprey --features stage-stamps
    mkdir -p "$(dirname "$STAMPS")"
    cp target/release/osprey "$STAMPS"
fi
[[ -x target/release/osprey-bench ]] || nice -n 5 cargo build --release -q -p osprey-bench
[[ -f guest-images/build/test-guest.elf ]] || make -s guest
mkdir -p "$OUT"
for ((i = 1; i <= ROUNDS; i++)); do
    OSPREY_BENCH_GUEST_ARGS=tsc_stamp=1 target/release/osprey-bench --osprey "$STAMPS" \
        --store file --store-dir /dev/shm --store-size 256m --rw randread --bs 4k --qd 1 \
        --queues 1 --engine Auto --poll adaptive --irq 0 --hog "$HOG" --repeats 1 \
        --seconds "$SECONDS_PER_RUN" --no-native --out "$OUT/run-$i" >"$OUT/run-$i.log" 2>&1 \
        || { echo "qd1-stages: osprey-bench failed, see $OUT/run-$i.log" >&2; exit 1; }
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import csv, glob, os, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
khz = None
for line in open("/proc/cpuinfo"):
    if line.startswith("cpu MHz"):
        khz = float(line.split(":")[1]) * 1000
        break
names, med, mean, guest = None, {}, {}, []
for i in range(1, rounds + 1):
    d = f"{out}/run-{i}"
    rows = [r for r in csv.DictReader(open(f"{d}/results.csv")) if r["status"] == "ok"]
    guest.append(float(rows[0]["lat_mean_us"]) * 1000)
    # The recorded run's log: the last one osprey-bench wrote for the point.
    logs = sorted(glob.glob(f"{d}/logs/point-*.log"), key=os.path.getmtime)
    text = open(logs[-1]).read() if logs else ""
    m = re.search(r"stage stamps over (\d+) reads \(TSC cycles\)(.*)", text)
    if not m:
        sys.exit(f"qd1-stages: no stage-stamps line in {logs[-1] if logs else d + '/logs'}")
    parts = [p.strip() for p in m.group(2).split(";") if p.strip() and ":" in p]
    for p in parts:
        name, v = p.split(":", 1)
        nums = re.findall(r"\d+", v)
        if name.startswith("dropped") or len(nums) < 2:
            continue
        med.setdefault(name, []).append(int(nums[0]) * 1e6 / khz)
        mean.setdefault(name, []).append(int(nums[1]) * 1e6 / khz)
host_mean = sum(statistics.median(v) for v in mean.values())
print(f"QD1 4k randread stages, median over {rounds} runs of each run's median / mean (ns), "
      f"TSC {khz / 1000:.0f} MHz:")
for name in med:
    print(f"  {name:40s} median {statistics.median(med[name]):6.0f}   mean {statistics.median(mean[name]):6.0f}")
g = statistics.median(guest)
print(f"  {'used published -> guest sees it (rest)':40s} {'':13s}   mean {g - host_mean:6.0f}")
print(f"  {'guest mean latency':40s} {'':13s}   mean {g:6.0f}")
PY
echo "qd1-stages: runs in $OUT"
