#!/usr/bin/env bash
# snapshot-load-side-by-side.sh: `PUT /snapshot/load` as a client sees it, Osprey beside
# Firecracker, rounds alternating in one run (issue 53).
#
# Each VMM boots the test guest (2 vCPUs, 1 GiB, ring-3 QD16 4k random reads on a 256 MiB file),
# is paused mid-I/O and snapshotted once (Full, memory to a file). Then each round starts a fresh
# process per VMM, in alternating order, and times `PUT /snapshot/load` with
# `mem_backend: File` and `resume_vm: true` from the request to its answer (curl's time_total
# over the API socket, connection included, the same for both). It prints every round, both
# medians and their ratio (Osprey / Firecracker; the goal is <= 0.5).
#
# Usage: scripts/snapshot-load-side-by-side.sh [ROUNDS (default 5, at least 3)]
# Environment: OSPREY=path (default target/release/osprey), OSPREY_FIRECRACKER=path (default
# /work/anchors/firecracker), OUT=dir (default target/snapshot-load/<UTC timestamp>).
# Without a Firecracker binary (scripts/build-firecracker.sh builds one) it prints "NOT RUN" and
# exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-5}
OSPREY=${OSPREY:-target/release/osprey}
FC=${OSPREY_FIRECRACKER:-/work/anchors/firecracker}
OUT=${OUT:-target/snapshot-load/$(date -u +%Y%m%dT%H%M%SZ)}
GUEST_ARGS="mode=blk rw=randread bs=4096 qd=16 count=100000000"

if ! [[ "$ROUNDS" =~ ^[0-9]+$ ]] || ((ROUNDS < 3 || ROUNDS > 100)); then
    echo "snapshot-load: ROUNDS must be 3-100 (got $ROUNDS)" >&2
    exit 2
fi
if [[ ! -x "$FC" ]]; then
    echo "snapshot-load: NOT RUN (no Firecracker binary at $FC: scripts/build-firecracker.sh)"
    exit 0
fi
for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "snapshot-load: NOT RUN ($tool is missing)"; exit 0; }
done
[[ -x "$OSPREY" ]] || nice -n 5 cargo build --release -q -p osprey
[[ -f guest-images/build/test-guest.elf ]] || make -s guest
GUEST=$(realpath guest-images/build/test-guest.elf)

mkdir -p "$OUT"
OUT=$(realpath "$OUT")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
head -c 256M /dev/urandom >"$OUT/disk.img"

api() { # socket method path [body] -> prints "status seconds"
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --unix-socket "$1" -X "$2" \
        -H 'Content-Type: application/json' ${4:+--data "$4"} "http://localhost$3"
}
wait_sock() { for _ in $(seq 1 500); do [[ -S "$1" ]] && return 0; sleep 0.01; done; return 1; }

# One snapshot per VMM: boot over the API, run 1 s, pause, create.
snapshot() { # name binary extra-args...
    local name=$1 bin=$2 dir="$OUT/$1"
    shift 2
    mkdir -p "$dir"
    # Osprey's pre-boot sandbox takes paths in the API socket's folder only.
    cp "$GUEST" "$dir/test-guest.elf"
    cp "$OUT/disk.img" "$dir/disk.img"
    local sock="$dir/boot.sock"
    "$bin" --api-sock "$sock" "$@" >"$dir/boot.log" 2>&1 &
    PIDS+=($!)
    local pid=$!
    wait_sock "$sock"
    api "$sock" PUT /boot-source "{\"kernel_image_path\": \"$dir/test-guest.elf\", \"boot_args\": \"$GUEST_ARGS\"}" >/dev/null
    api "$sock" PUT /drives/d0 "{\"drive_id\": \"d0\", \"path_on_host\": \"$dir/disk.img\", \"is_root_device\": false, \"is_read_only\": false}" >/dev/null
    api "$sock" PUT /machine-config '{"vcpu_count": 2, "mem_size_mib": 1024}' >/dev/null
    api "$sock" PUT /actions '{"action_type": "InstanceStart"}' >/dev/null
    sleep 1
    api "$sock" PATCH /vm '{"state": "Paused"}' >/dev/null
    local r
    r=$(api "$sock" PUT /snapshot/create "{\"snapshot_type\": \"Full\", \"snapshot_path\": \"$dir/state.snap\", \"mem_file_path\": \"$dir/mem.snap\"}")
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [[ "${r%% *}" == 204 ]] || { echo "snapshot-load: $name could not snapshot ($r; $dir/boot.log)" >&2; exit 1; }
}

load() { # name binary round extra-args... -> milliseconds
    local name=$1 bin=$2 round=$3 dir="$OUT/$1"
    shift 3
    local sock="$dir/load$round.sock"
    "$bin" --api-sock "$sock" "$@" >"$dir/load$round.log" 2>&1 &
    local pid=$!
    PIDS+=($pid)
    wait_sock "$sock"
    local r
    r=$(api "$sock" PUT /snapshot/load "{\"snapshot_path\": \"$dir/state.snap\", \"mem_backend\": {\"backend_type\": \"File\", \"backend_path\": \"$dir/mem.snap\"}, \"resume_vm\": true}")
    sleep 0.3
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [[ "${r%% *}" == 204 ]] || { echo "snapshot-load: $name round $round: $r ($dir/load$round.log)" >&2; exit 1; }
    python3 -c "print(f'{float(\"${r#* }\") * 1e3:.2f}')"
}

snapshot osprey "$OSPREY"
snapshot firecracker "$FC" --enable-pci
echo "round,osprey_ms,firecracker_ms" >"$OUT/rounds.csv"
for round in $(seq 1 "$ROUNDS"); do
    if ((round % 2)); then
        o=$(load osprey "$OSPREY" "$round"); f=$(load firecracker "$FC" "$round" --enable-pci)
    else
        f=$(load firecracker "$FC" "$round" --enable-pci); o=$(load osprey "$OSPREY" "$round")
    fi
    echo "$round,$o,$f" | tee -a "$OUT/rounds.csv"
done
python3 - "$OUT/rounds.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
o = statistics.median(float(r["osprey_ms"]) for r in rows)
f = statistics.median(float(r["firecracker_ms"]) for r in rows)
print(f"median: Osprey {o:.2f} ms, Firecracker {f:.2f} ms, Osprey/Firecracker {o / f:.2f}x (goal <= 0.5)")
PY
echo "rounds and logs in $OUT; host load: $(cut -d' ' -f1-3 /proc/loadavg)"
