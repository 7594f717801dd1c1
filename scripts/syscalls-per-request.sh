#!/usr/bin/env bash
# System calls per guest request of the whole Osprey process (every thread), counted with
# `perf stat -e raw_syscalls:sys_enter` around a test-guest run of 4 KiB random reads from a file
# in /dev/shm. Each point runs twice, with N1 and N2 requests, and reports
# (syscalls(N2) - syscalls(N1)) / (N2 - N1), so boot and set-up cancel out; the guest's IOPS of the
# longer run comes along. Variants repeat and alternate between the binaries given, so a noisy
# host shifts them alike: compare the medians.
#
# Usage: scripts/syscalls-per-request.sh [OSPREY...]   (default ./target/release/osprey)
# Env: REPEATS (3), N1 (10000), N2 (60000), POINTS ("IoUring:1:32768 IoUring:1:0 ..."; each
# ENGINE:QD:POLL_MAX_NS).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(./target/release/osprey)
repeats=${REPEATS:-3}
n1=${N1:-10000}
n2=${N2:-60000}
points=${POINTS:-"IoUring:1:32768 IoUring:1:0 Sync:1:32768 IoUring:32:32768 IoUring:32:0 LinuxAio:32:32768 Sync:32:32768"}
make -s guest >/dev/null
dir=$(mktemp -d /dev/shm/osprey-syscalls.XXXXXX)
trap 'rm -rf "$dir"' EXIT
truncate -s 1G "$dir/disk.img"

# Prints "syscalls iops" for one run.
run() {
  local bin=$1 engine=$2 qd=$3 poll=$4 count=$5
  cat >"$dir/vm.json" <<EOF
{"machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
 "boot-source": {"kernel_image_path": "$PWD/guest-images/build/test-guest.elf",
                 "boot_args": "mode=blk rw=randread bs=4096 qd=$qd count=$count"},
 "drives": [{"drive_id": "disk0", "path_on_host": "$dir/disk.img", "io_engine": "$engine", "iothread": "io0"}],
 "iothreads": [{"id": "io0", "poll_max_ns": $poll}]}
EOF
  perf stat -x, -e raw_syscalls:sys_enter -o "$dir/perf.txt" -- "$bin" --config "$dir/vm.json" \
    >"$dir/out.txt" 2>"$dir/err.txt" || { echo "osprey failed: $(tail -3 "$dir/err.txt")" >&2; return 1; }
  echo "$(grep raw_syscalls "$dir/perf.txt" | cut -d, -f1) $(grep -o '"iops":[0-9]*' "$dir/out.txt" | head -1 | cut -d: -f2)"
}

echo "binary engine qd poll_max_ns syscalls/request iops"
for _ in $(seq "$repeats"); do
  for p in $points; do
    IFS=: read -r engine qd poll <<<"$p"
    for bin in "${bins[@]}"; do
      read -r s1 _ < <(run "$bin" "$engine" "$qd" "$poll" "$n1")
      read -r s2 iops < <(run "$bin" "$engine" "$qd" "$poll" "$n2")
      awk -v b="$bin" -v e="$engine" -v q="$qd" -v p="$poll" -v a="$s1" -v c="$s2" -v n="$((n2 - n1))" -v i="$iops" \
        'BEGIN { printf "%s %s %s %s %.3f %s\n", b, e, q, p, (c - a) / n, i }'
    done
  done
done
