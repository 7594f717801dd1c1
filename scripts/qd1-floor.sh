#!/usr/bin/env bash
# qd1-floor.sh: Osprey's QD1 latency against the host's own floor, side by side in one run.
#
# Each round runs, in alternating order, the host's `fio --ioengine=psync --rw=randread --bs=4k
# --iodepth=1` on a 256 MiB file in /dev/shm, and Osprey's test guest (ring 3, QD1 4k randread,
# one queue, default config: Auto engine, Adaptive polling) through tools/osprey-bench on a
# 256 MiB file in /dev/shm of the same kind (pseudo-random data), and between them
# scripts/qd1-handoff.c: two bare threads polling each other with the same reads, the floor of any
# polling VMM here (the read plus two cross-core hand-offs, no VMM), and scripts/qd1-ring-floor.c:
# the same two threads passing each request through a virtqueue's lines as the test guest lays
# them out (split ring without and with Osprey's prefetches, and packed), the floor of a
# virtio-blk device driven by that guest. osprey-bench opens its drive
# with O_DIRECT where the file system allows it (tmpfs does on Linux 6.6+), so fio does too
# unless DIRECT=0. It prints every round, the medians of the three means and their ratios to the
# host's pread.
#
# Usage: scripts/qd1-floor.sh [ROUNDS (default 5, at least 3)] [SECONDS per run (default 2)]
# Environment: OSPREY=path/to/osprey (default target/release/osprey), OSPREY_B=another build to
# run beside it in every round (a before/after; its median and its ratio to OSPREY's are
# printed too), HOG=1 runs a CPU-bound
# loop beside both sides (a busy host), DIRECT=0|1 fio's O_DIRECT (default 1), OUT=dir (default target/qd1-floor/<UTC timestamp>).
# Without fio the script prints "NOT RUN" and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-2}
OSPREY=${OSPREY:-target/release/osprey}
OSPREY_B=${OSPREY_B:-}
HOG=${HOG:-0}
DIRECT=${DIRECT:-1}
OUT=${OUT:-target/qd1-floor/$(date -u +%Y%m%dT%H%M%SZ)}
SIZE=256m

if ! [[ "$ROUNDS" =~ ^[0-9]+$ ]] || ((ROUNDS < 3 || ROUNDS > 100)); then
    echo "qd1-floor: ROUNDS must be 3-100 (got $ROUNDS)" >&2
    exit 2
fi
if ! command -v fio >/dev/null; then
    echo "qd1-floor: NOT RUN (fio is not installed: apt-get install fio)"
    exit 0
fi
for tool in jq python3; do
    command -v "$tool" >/dev/null || { echo "qd1-floor: NOT RUN ($tool is missing)"; exit 0; }
done

BENCH=target/release/osprey-bench
[[ -x "$BENCH" ]] || nice -n 5 cargo build --release -q -p osprey-bench
[[ -x "$OSPREY" ]] || nice -n 5 cargo build --release -q -p osprey
[[ -f guest-images/build/test-guest.elf ]] || make -s guest

mkdir -p "$OUT"
HANDOFF=$OUT/qd1-handoff
cc -O2 -pthread -o "$HANDOFF" scripts/qd1-handoff.c
RING=$OUT/qd1-ring-floor
cc -O2 -pthread -o "$RING" scripts/qd1-ring-floor.c
FILE=/dev/shm/qd1-floor-$$.img
HOG_PID=
cleanup() {
    [[ -n "$HOG_PID" ]] && kill "$HOG_PID" 2>/dev/null || true
    rm -f "$FILE"
}
trap cleanup EXIT
# The host's file: 256 MiB of pseudo-random data, as osprey-bench fills its own store.
head -c 256M /dev/urandom >"$FILE"

host_run() { # round -> mean latency in µs
    local json="$OUT/fio-$1.json"
    if ((HOG)); then setsid sh -c 'while :; do :; done' & HOG_PID=$!; fi
    fio --name=qd1 --filename="$FILE" --direct="$DIRECT" --ioengine=psync --rw=randread --bs=4k --iodepth=1 \
        --size=$SIZE --runtime="${SECONDS_PER_RUN}s" --time_based --randrepeat=0 \
        --norandommap --output-format=json >"$json"
    if [[ -n "$HOG_PID" ]]; then kill "$HOG_PID"; wait "$HOG_PID" 2>/dev/null || true; HOG_PID=; fi
    jq '.jobs[0].read.lat_ns.mean / 1000' "$json"
}

handoff_run() { # -> mean latency in µs of the two-thread hand-off
    if ((HOG)); then setsid sh -c 'while :; do :; done' & HOG_PID=$!; fi
    local r
    r=$("$HANDOFF" "$FILE" "$SECONDS_PER_RUN" "$DIRECT")
    if [[ -n "$HOG_PID" ]]; then kill "$HOG_PID"; wait "$HOG_PID" 2>/dev/null || true; HOG_PID=; fi
    echo "$r" >>"$OUT/handoff.log"
    awk '{print $4}' <<<"$r"
}

ring_run() { # -> the split ring's (bare, prefetching) and the packed ring's means in µs, tab-separated
    if ((HOG)); then setsid sh -c 'while :; do :; done' & HOG_PID=$!; fi
    local r
    r=$("$RING" "$FILE" "$SECONDS_PER_RUN" "$DIRECT" split split-prefetch packed)
    if [[ -n "$HOG_PID" ]]; then kill "$HOG_PID"; wait "$HOG_PID" 2>/dev/null || true; HOG_PID=; fi
    echo "$r" | tr '\n' ' ' >>"$OUT/ring.log"; echo >>"$OUT/ring.log"
    awk '{printf "%s%s", (NR > 1 ? "\t" : ""), $2}' <<<"$r"
}

osprey_run() { # round [binary [label]] -> mean latency in µs (the guest's own measurement)
    local dir="$OUT/${3:-osprey}-$1"
    nice -n 0 "$BENCH" --osprey "${2:-$OSPREY}" --store file --store-dir /dev/shm --store-size $SIZE \
        --rw randread --bs 4k --qd 1 --queues 1 --engine Auto --poll adaptive --irq 0 \
        --hog "$HOG" --repeats 1 --seconds "$SECONDS_PER_RUN" --no-native --out "$dir" \
        >"$dir.log" 2>&1 || { echo "qd1-floor: osprey-bench failed, see $dir.log" >&2; exit 1; }
    python3 -c 'import csv,sys; r=[x for x in csv.DictReader(open(sys.argv[1])) if x["status"]=="ok"]; print(r[0]["lat_mean_us"])' "$dir/results.csv"
}

echo "qd1-floor: $ROUNDS rounds of ${SECONDS_PER_RUN}s, hog=$HOG, fio direct=$DIRECT, osprey=$OSPREY${OSPREY_B:+, osprey B=$OSPREY_B}, load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$OUT/rounds.tsv"
b_run() { # round -> B's mean, or nothing without OSPREY_B
    if [[ -n "$OSPREY_B" ]]; then osprey_run "$1" "$OSPREY_B" osprey-b; fi
}
for ((i = 1; i <= ROUNDS; i++)); do
    if ((i % 2)); then h=$(host_run "$i"); f=$(handoff_run); r=$(ring_run); o=$(osprey_run "$i"); b=$(b_run "$i")
    else b=$(b_run "$i"); o=$(osprey_run "$i"); r=$(ring_run); f=$(handoff_run); h=$(host_run "$i"); fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$h" "$o" "$f" "$b" "$r" >>"$OUT/rounds.tsv"
    IFS=$'\t' read -r rs rsp rp <<<"$r"
    printf 'round %d: host pread %.3f µs, floors: hand-off %.3f, split ring %.3f (prefetching %.3f), packed ring %.3f µs; Osprey %.3f µs%s (load %s)\n' \
        "$i" "$h" "$f" "$rs" "$rsp" "$rp" "$o" "${b:+, Osprey B $b µs}" "$(cut -d' ' -f1 /proc/loadavg)"
done
python3 - "$OUT/rounds.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
h = statistics.median(float(r[1]) for r in rows)
o = statistics.median(float(r[2]) for r in rows)
f = statistics.median(float(r[3]) for r in rows)
s0 = statistics.median(float(r[5]) for r in rows)
s = statistics.median(float(r[6]) for r in rows)
p = statistics.median(float(r[7]) for r in rows)
print(f"median of {len(rows)} rounds: host pread {h:.3f} µs, hand-off floor {f:.3f} µs "
      f"({f / h:.2f}×), split ring floor {s0:.3f} µs ({s0 / h:.2f}×), prefetching {s:.3f} µs "
      f"({s / h:.2f}×), packed ring floor {p:.3f} µs ({p / h:.2f}×), Osprey {o:.3f} µs "
      f"({o / h:.2f}×; {o / s:.2f}× the prefetching split ring's floor)")
if all(r[4].strip() for r in rows):
    b = statistics.median(float(r[4]) for r in rows)
    print(f"Osprey B {b:.3f} µs ({b / h:.2f}× the host pread; B/A {b / o:.2f}×)")
PY
echo "qd1-floor: results in $OUT"
