#!/usr/bin/env bash
# The cost of the rate-limit check itself: the test guest's 4 KiB random reads from a file in
# /dev/shm (Null engine: no I/O, so Osprey's own work is all there is), with no limit and with an
# ops + bandwidth limit far above what the guest can reach, alternated REPEATS times. Prints the
# guest's IOPS and the iothread's CPU per request (from the drive and iothread stats Osprey logs
# when the VM stops) per run, then the medians.
#
# Usage: scripts/rate-limit-cost.sh [OSPREY]   Env: REPEATS (5), COUNT (300000), QD (1), ENGINE (Null)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./target/release/osprey}
repeats=${REPEATS:-5}
count=${COUNT:-300000}
qd=${QD:-1}
engine=${ENGINE:-Null}
make -s guest >/dev/null
dir=$(mktemp -d /dev/shm/osprey-rlcost.XXXXXX)
trap 'rm -rf "$dir"' EXIT
truncate -s 256M "$dir/disk.img"

run() {
  local limit=$1
  cat >"$dir/vm.json" <<JSON
{"machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
 "boot-source": {"kernel_image_path": "$PWD/guest-images/build/test-guest.elf",
                 "boot_args": "mode=blk rw=randread qd=$qd count=$count"},
 "drives": [{"drive_id": "disk0", "path_on_host": "$dir/disk.img", "io_engine": "$engine",
             "iothread": "io0" $limit}],
 "iothreads": [{"id": "io0"}]}
JSON
  "$bin" --config "$dir/vm.json" >"$dir/out.txt" 2>"$dir/err.txt"
  python3 - "$dir/out.txt" "$dir/err.txt" <<'PY'
import json, sys
out = open(sys.argv[1]).read(); err = open(sys.argv[2]).read()
blk = json.loads(next(l[4:] for l in out.splitlines() if l.startswith("BLK ")))
iops = next(r for r in blk["runs"] if r["name"] == "main")["iops"]
stats = json.loads(next(l.split("iothread stats ", 1)[1] for l in err.splitlines() if "iothread stats " in l))
drive = json.loads(next(l.split("drive stats ", 1)[1] for l in err.splitlines() if "drive stats " in l))
cpu = stats["stats"]["cpu_ns"] if "stats" in stats else stats["cpu_ns"]
print(f"{iops} {cpu / drive['requests']:.1f}")
PY
}

high=', "rate_limiter": {"ops": {"size": 1000000000, "refill_time": 1}, "bandwidth": {"size": 1000000000000, "refill_time": 1}}'
echo "variant iops iothread_ns_per_request"
: >"$dir/none"; : >"$dir/limit"
for _ in $(seq "$repeats"); do
  r=$(run ""); echo "none $r"; echo "$r" >>"$dir/none"
  r=$(run "$high"); echo "limit $r"; echo "$r" >>"$dir/limit"
done
python3 - "$dir/none" "$dir/limit" <<'PY'
import statistics, sys
def med(path, i): return statistics.median(float(l.split()[i]) for l in open(path) if l.strip())
n_iops, l_iops = med(sys.argv[1], 0), med(sys.argv[2], 0)
n_cpu, l_cpu = med(sys.argv[1], 1), med(sys.argv[2], 1)
print(f"median: no limit {n_iops:.0f} IOPS, {n_cpu:.0f} ns/request; limit far above {l_iops:.0f} IOPS, {l_cpu:.0f} ns/request; "
      f"IOPS x{l_iops / n_iops:.3f}, CPU per request x{l_cpu / n_cpu:.3f}")
PY
