#!/usr/bin/env bash
# Quick virtio-blk measurement: 4 KiB random reads from Osprey's test guest at QD1 and QD32
# against a file in /dev/shm, reporting the guest's IOPS and latency and the VMM's CPU time per
# I/O outside the vCPU threads (from Osprey's per-thread CPU summary, which it reads from
# /proc/self/task/*/schedstat). Then fio on the host against the same file, for scale, if fio is
# installed. Usage: scripts/blk-quick.sh [count] (default 200000 requests per point).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-200000}
make -s build guest >/dev/null
disk=/dev/shm/osprey-blk-quick.img
truncate -s 1G "$disk"
dd if=/dev/urandom of="$disk" bs=1M count=1024 conv=notrunc status=none
trap 'rm -f "$disk" "$cfg"' EXIT
cfg=$(mktemp --suffix=.json)
# The guest converts TSC cycles to time with the vCPU's TSC frequency, which Osprey logs.
tsc_khz=$(./target/release/osprey --kernel guest-images/build/test-guest.elf --cmdline mode=report 2>&1 |
  sed -n 's/.*vCPU TSC frequency: \([0-9]*\) kHz.*/\1/p')
echo "vCPU TSC: ${tsc_khz} kHz"
for qd in 1 32; do
  cat >"$cfg" <<JSON
{"machine-config":{"vcpu_count":1,"mem_size_mib":256},
 "boot-source":{"kernel_image_path":"guest-images/build/test-guest.elf",
                "boot_args":"mode=blk rw=randread bs=4096 qd=$qd count=$count range=1g tsc_khz=$tsc_khz"},
 "drives":[{"drive_id":"shm0","path_on_host":"$disk","num_queues":1,"queue_size":256}],
 "iothreads":[{"id":"io0"}]}
JSON
  out=$(./target/release/osprey --config "$cfg" 2>&1)
  python3 - "$qd" <<PY
import json, re, sys
out = """$out"""
qd = sys.argv[1]
blk = json.loads(next(l[4:] for l in out.splitlines() if l.startswith("BLK ")))
run = blk["runs"][0]
cpu = dict((k, float(v)) for k, v in re.findall(r"([\w-]+) ([\d.]+) ms", next(l for l in out.splitlines() if "CPU time by thread" in l)))
n = run["requests"]
outside = sum(v for k, v in cpu.items() if not k.startswith("vcpu"))
print(f"QD{qd}: {run['iops']} IOPS, latency mean {run['lat_ns']['mean']/1000:.1f} us p50 {run['lat_ns']['p50']/1000:.1f} us p99 {run['lat_ns']['p99']/1000:.1f} us, "
      f"kicks/req {run['kicks']/n:.3f}; VMM CPU outside vCPUs {outside*1e3/n:.2f} us/IO "
      f"(iothread {cpu.get('iothread-io0',0)*1e3/n:.2f} us/IO), vCPU {sum(v for k,v in cpu.items() if k.startswith('vcpu'))*1e3/n:.2f} us/IO")
PY
done
if command -v fio >/dev/null; then
  for qd in 1 32; do
    eng=psync; [ "$qd" -gt 1 ] && eng=io_uring
    fio --name=host --filename="$disk" --rw=randread --bs=4k --iodepth=$qd --ioengine=$eng \
        --runtime=5 --time_based --group_reporting --output-format=json 2>/dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]['read']; print(f'host fio QD$qd ($eng): {j[\"iops\"]:.0f} IOPS, mean {j[\"clat_ns\"][\"mean\"]/1000:.1f} us')"
  done
else
  echo "fio not installed (apt-get install fio) — host comparison skipped"
fi
