#!/usr/bin/env bash
# vsock-side-by-side.sh: virtio-vsock over Firecracker's host-side Unix socket, Osprey beside
# Firecracker and Cloud Hypervisor, rounds alternating in one run (issue 51).
#
# Each round boots every VMM afresh (1 vCPU, 128 MiB, the test guest's `mode=vsock-echo
# port=1024`, guest CID 3), in an order that rotates from round to round, waits for the guest's
# listening line and runs scripts/vsock-bench.c (compiled here with `cc -O2`; one thread, epoll,
# 256 KiB reads and writes, so the client takes little of the host's CPU) against it: 64-byte
# round trips (mean, p99 over ROUNDTRIPS), bulk echo over 1 and over 8 connections (MB/s of
# payload, compared on return) and the VMM's CPU per MB in each bulk phase
# (/proc/PID/task/*/schedstat; non-vCPU threads apart from the vCPU threads, which the polling
# guest keeps busy). Each round also runs the client against scripts/vsock-host-echo.c (row
# `host-echo`: a host thread per connection that answers CONNECT and echoes, polling its socket,
# no VM): the floor, what the client's own socket calls and wake-ups cost on this host. It prints every round, then the
# median of each figure per VMM. Say how busy the host was when you quote it.
#
# Usage: scripts/vsock-side-by-side.sh [ROUNDS (default 3, at least 3)]
# Environment: OSPREY=path (default target/release/osprey), OSPREY_FIRECRACKER=path (default
# /work/anchors/firecracker), OSPREY_CLOUD_HYPERVISOR=path (default
# /work/anchors/cloud-hypervisor), ROUNDTRIPS (default 10000), BULK_BYTES (default 64 MiB per
# phase), OUT=dir (default target/vsock-side-by-side/<UTC timestamp>), OSPREY_B=path (a second
# Osprey build, run as `osprey-b`: a before/after in the same run), PLACE=apart (after boot,
# every VMM's vCPU threads pinned to CPU 1 and its other threads, and the client, to CPU 0, by
# scripts/lib/place_threads.py: the same placement for every VMM; default: the scheduler's).
# A VMM whose binary is absent is listed as NOT RUN; the others still run.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-3}
OSPREY=${OSPREY:-target/release/osprey}
FC=${OSPREY_FIRECRACKER:-/work/anchors/firecracker}
CH=${OSPREY_CLOUD_HYPERVISOR:-/work/anchors/cloud-hypervisor}
ROUNDTRIPS=${ROUNDTRIPS:-10000}
BULK_BYTES=${BULK_BYTES:-67108864}
OUT=${OUT:-target/vsock-side-by-side/$(date -u +%Y%m%dT%H%M%SZ)}
PLACE=${PLACE:-}
PORT=1024
GUEST_ARGS="console=ttyS0 mode=vsock-echo port=$PORT"

if ! [[ "$ROUNDS" =~ ^[0-9]+$ ]] || ((ROUNDS < 3 || ROUNDS > 100)); then
    echo "vsock-side-by-side: ROUNDS must be 3-100 (got $ROUNDS)" >&2
    exit 2
fi
[[ -z $PLACE || $PLACE == apart ]] || { echo "vsock-side-by-side: PLACE: apart or empty, not $PLACE" >&2; exit 2; }
command -v python3 >/dev/null || { echo "vsock-side-by-side: NOT RUN (python3 is missing)"; exit 0; }
command -v cc >/dev/null || { echo "vsock-side-by-side: NOT RUN (no C compiler, cc)"; exit 0; }
[[ -f guest-images/build/test-guest.elf ]] || make -s guest
GUEST=$(realpath guest-images/build/test-guest.elf)
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
BENCH=$OUT/vsock-bench
cc -O2 -o "$BENCH" scripts/vsock-bench.c
ECHO=$OUT/vsock-host-echo
cc -O2 -pthread -o "$ECHO" scripts/vsock-host-echo.c

VMMS=()
[[ -x "$OSPREY" ]] && VMMS+=(osprey) || echo "osprey: NOT RUN (no binary at $OSPREY)"
[[ -x "$FC" ]] && VMMS+=(firecracker) || echo "firecracker: NOT RUN (no binary at $FC)"
[[ -x "$CH" ]] && VMMS+=(cloud-hypervisor) || echo "cloud-hypervisor: NOT RUN (no binary at $CH)"
if [[ -n "${OSPREY_B:-}" ]]; then
    [[ -x "$OSPREY_B" ]] && VMMS+=(osprey-b) || echo "osprey-b: NOT RUN (no binary at $OSPREY_B)"
fi
((${#VMMS[@]})) || exit 0
VMMS+=(host-echo) # the floor: the same client against a host process, no VM

PID=
cleanup() { [[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null || true; }
trap cleanup EXIT

fc_config() { # uds -> config json (Firecracker's shape, which Osprey's config file reads too)
    cat <<EOF
{"boot-source": {"kernel_image_path": "$GUEST", "boot_args": "$GUEST_ARGS"},
 "drives": [],
 "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
 "vsock": {"guest_cid": 3, "uds_path": "$1"}}
EOF
}

start() { # vmm dir -> sets PID, the VMM's serial output in dir/serial.txt
    local vmm=$1 dir=$2 uds=$2/v.sock
    rm -f "$uds"
    fc_config "$uds" >"$dir/vm.json"
    case $vmm in
    host-echo) # no guest: a host thread answers CONNECT and echoes
        "$ECHO" "$uds" >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null &
        PID=$!
        for _ in $(seq 1 250); do [[ -S "$uds" ]] && return 0; sleep 0.02; done
        echo "host-echo: no socket (see $dir)" >&2
        return 1 ;;
    osprey) "$OSPREY" --config "$dir/vm.json" >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    osprey-b) "$OSPREY_B" --config "$dir/vm.json" >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    firecracker)
        : >"$dir/fc.log" # its log would interleave with the serial lines on stdout
        "$FC" --no-api --enable-pci --config-file "$dir/vm.json" --log-path "$dir/fc.log" \
            >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    cloud-hypervisor)
        "$CH" --kernel "$GUEST" --cmdline "$GUEST_ARGS" --memory size=128M --cpus boot=1 \
            --serial tty --console off --vsock "cid=3,socket=$uds" >"$dir/serial.txt" \
            2>"$dir/vmm.log" </dev/null & ;;
    esac
    PID=$!
    for _ in $(seq 1 1000); do
        grep -q '^VSOCK ready' "$dir/serial.txt" 2>/dev/null && [[ -S "$uds" ]] &&
            return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.02
    done
    echo "$vmm: the guest did not come up (see $dir)" >&2
    return 1
}

echo "vsock side by side: $ROUNDS rounds, ${VMMS[*]}, $ROUNDTRIPS round trips, $BULK_BYTES bulk bytes, placement: ${PLACE:-scheduler}"
echo "host load at start: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) CPUs; out: $OUT"
: >"$OUT/results.jsonl"
n=${#VMMS[@]}
for r in $(seq 1 "$ROUNDS"); do
    for i in $(seq 0 $((n - 1))); do
        vmm=${VMMS[$(((i + r) % n))]}
        dir=$OUT/r$r-$vmm
        mkdir -p "$dir"
        la=$(cut -d' ' -f1 /proc/loadavg)
        pin=() booted=0
        start "$vmm" "$dir" && booted=1
        if ((booted)) && [[ $PLACE == apart ]]; then
            pin=(taskset -c 0)
            python3 scripts/lib/place_threads.py "$PID" 1 0 >"$dir/placement.txt" || booted=0
        fi
        if ((booted)); then
            res=$("${pin[@]}" "$BENCH" --uds "$dir/v.sock" --port $PORT --pid "$PID" \
                --rounds "$ROUNDTRIPS" --total "$BULK_BYTES" || true)
        else
            res='{"error": "did not boot"}'
        fi
        kill -9 "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
        PID=
        echo "round $r $vmm (load avg $la): $res"
        echo "{\"round\": $r, \"vmm\": \"$vmm\", \"loadavg\": $la, \"result\": $res}" \
            >>"$OUT/results.jsonl"
    done
done
echo "host load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 scripts/lib/sbs_median.py "$OUT/results.jsonl" rtt_mean_us rtt_p99_us bulk1_MBps \
    bulk8_MBps bulk1_vmm_ms_per_MB bulk8_vmm_ms_per_MB bulk1_vcpu_ms_per_MB bulk8_vcpu_ms_per_MB
