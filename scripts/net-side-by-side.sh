#!/usr/bin/env bash
# net-side-by-side.sh: virtio-net behind a tap, Osprey beside Firecracker, Cloud Hypervisor and
# QEMU, rounds alternating in one run (issue 52).
#
# Each round boots every VMM afresh (1 vCPU, 128 MiB, the test guest's `mode=net-echo ip=...`, a
# virtio-net-pci device on a tap of its own that this script creates and deletes), in an order
# that rotates from round to round, waits for the guest's ready line and runs
# scripts/net-bench.py against it twice: on the idle host and with a CPU-bound process pinned to
# CPU 1 (`busy`; the order of the two alternates by round). Figures: `ping -c 10000 -i 0` round
# trip (mean and p99 of the per-reply times), flood-ping (`ping -f -c 100000`) echoes per second
# and loss, and the VMM's CPU per echo (threads outside the vCPUs, from
# /proc/PID/task/*/schedstat; scripts/lib/vmm_cpu.py names the vCPU threads). Every round's load
# average goes into the output: quote it with the figures. Then the median per VMM and load.
#
# Usage: scripts/net-side-by-side.sh [ROUNDS (default 3, at least 3)]   (root: taps, ping -i 0)
# Environment: OSPREY=path (default target/release/osprey), OSPREY_FIRECRACKER=path (default
# /work/anchors/firecracker), OSPREY_CLOUD_HYPERVISOR=path (default
# /work/anchors/cloud-hypervisor), OSPREY_QEMU=path (default qemu-system-x86_64 on PATH),
# OSPREY_B=path (a second Osprey build, run as `osprey-b`: a before/after in the same run),
# LOADS="idle busy" (either or both), PINGS (default 10000), FLOOD (default 100000),
# OUT=dir (default target/net-side-by-side/<UTC timestamp>), PLACE=apart (after boot, every
# VMM's vCPU threads pinned to CPU 1 and its other threads, and ping, to CPU 0, by
# scripts/lib/place_threads.py: the same placement for every VMM; default: the scheduler's).
# A VMM whose binary is absent prints NOT RUN; the others still run. Each round also runs the
# same measurements against scripts/net-tap-echo.c (row `tap-echo`, compiled here with `cc -O2`:
# a host thread that answers ARP and ICMP echo on its own tap, sleeping in read(2) between frames,
# and a thread named vcpu0 spinning beside it as the test guest's vCPU does; no VM): the floor,
# what the host's own ping, tap and wake-ups cost at each load (TAP_ECHO=0 leaves it out).
#
# QEMU: `-netdev tap,...,vhost=off -device virtio-net-pci,...,romfile=` (no iPXE option ROM: it
# runs in the emulated ring 0 of kvm_pvm and takes a minute), SeaBIOS still takes ~15-30 s.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-3}
OSPREY=${OSPREY:-target/release/osprey}
FC=${OSPREY_FIRECRACKER:-/work/anchors/firecracker}
CH=${OSPREY_CLOUD_HYPERVISOR:-/work/anchors/cloud-hypervisor}
QEMU=${OSPREY_QEMU:-$(command -v qemu-system-x86_64 || echo /nonexistent/qemu-system-x86_64)}
LOADS=${LOADS:-idle busy}
PINGS=${PINGS:-10000}
FLOOD=${FLOOD:-100000}
OUT=${OUT:-target/net-side-by-side/$(date -u +%Y%m%dT%H%M%SZ)}
PLACE=${PLACE:-}

if ! [[ "$ROUNDS" =~ ^[0-9]+$ ]] || ((ROUNDS < 3 || ROUNDS > 100)); then
    echo "net-side-by-side: ROUNDS must be 3-100 (got $ROUNDS)" >&2
    exit 2
fi
[[ -z $PLACE || $PLACE == apart ]] || { echo "net-side-by-side: PLACE: apart or empty, not $PLACE" >&2; exit 2; }
for l in $LOADS; do
    [[ $l == idle || $l == busy ]] || { echo "net-side-by-side: LOADS: idle or busy, not $l" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "net-side-by-side: NOT RUN (python3 is missing)"; exit 0; }
command -v ping >/dev/null || { echo "net-side-by-side: NOT RUN (iputils ping is missing)"; exit 0; }
((EUID == 0)) || { echo "net-side-by-side: NOT RUN (needs root: taps and ping -i 0)"; exit 0; }
[[ -c /dev/net/tun ]] || { echo "net-side-by-side: NOT RUN (no /dev/net/tun)"; exit 0; }
[[ -f guest-images/build/test-guest.elf ]] || make -s guest
GUEST=$(realpath guest-images/build/test-guest.elf)
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

VMMS=()
[[ -x "$OSPREY" ]] && VMMS+=(osprey) || echo "NOT RUN: osprey (no binary at $OSPREY)"
[[ -x "$FC" ]] && VMMS+=(firecracker) || echo "NOT RUN: firecracker (no binary at $FC)"
[[ -x "$CH" ]] && VMMS+=(cloud-hypervisor) || echo "NOT RUN: cloud-hypervisor (no binary at $CH)"
[[ -x "$QEMU" ]] && VMMS+=(qemu) || echo "NOT RUN: qemu (no binary at $QEMU)"
if [[ -n "${OSPREY_B:-}" ]]; then # a second Osprey build, for a before/after in the same run
    [[ -x "$OSPREY_B" ]] && VMMS+=(osprey-b) || echo "NOT RUN: osprey-b (no binary at $OSPREY_B)"
fi
((${#VMMS[@]})) || exit 0
if [[ ${TAP_ECHO:-1} != 0 ]]; then # the floor: a host process on a tap, no VM
    if command -v cc >/dev/null; then
        TAP_ECHO_BIN=$OUT/net-tap-echo
        cc -O2 -pthread -o "$TAP_ECHO_BIN" scripts/net-tap-echo.c
        VMMS+=(tap-echo)
    else
        echo "NOT RUN: tap-echo (no C compiler, cc)"
    fi
fi

PID= HOG= BENCH= TAPS=()
cleanup() {
    [[ -n "$BENCH" ]] && pkill -9 -P "$BENCH" 2>/dev/null || true # its ping
    [[ -n "$BENCH" ]] && kill -9 "$BENCH" 2>/dev/null || true
    [[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null || true
    [[ -n "$HOG" ]] && kill -9 "$HOG" 2>/dev/null || true
    for t in "${TAPS[@]}"; do ip link del "$t" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One tap per VMM for the whole run, named after this script's pid: VMM i gets tap
# sbs<pid>n<i>, the host 10.250.<i>.1/30 and the guest 10.250.<i>.2.
make_tap() { # index -> tap name on stdout
    local t=sbs$$n$1
    ip tuntap add dev "$t" mode tap
    TAPS+=("$t")
    ip addr add "10.250.$1.1/30" dev "$t"
    ip link set "$t" up
}

start() { # vmm dir tap ip mac -> sets PID, the guest's serial output in dir/serial.txt
    local vmm=$1 dir=$2 tap=$3 ip=$4 mac=$5
    local args="console=ttyS0 mode=net-echo ip=$ip"
    cat >"$dir/vm.json" <<EOF
{"boot-source": {"kernel_image_path": "$GUEST", "boot_args": "$args"},
 "drives": [],
 "machine-config": {"vcpu_count": 1, "mem_size_mib": 128},
 "network-interfaces": [{"iface_id": "eth0", "host_dev_name": "$tap", "guest_mac": "$mac"}]}
EOF
    case $vmm in
    tap-echo) "$TAP_ECHO_BIN" --tap "$tap" --ip "$ip" --mac "$mac" --spinner >"$dir/serial.txt" \
        2>"$dir/vmm.log" </dev/null & ;;
    osprey) "$OSPREY" --config "$dir/vm.json" >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    osprey-b) "$OSPREY_B" --config "$dir/vm.json" >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    firecracker)
        : >"$dir/fc.log" # its log would interleave with the serial lines on stdout
        "$FC" --no-api --enable-pci --config-file "$dir/vm.json" --log-path "$dir/fc.log" \
            >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    cloud-hypervisor)
        "$CH" --kernel "$GUEST" --cmdline "$args" --memory size=128M --cpus boot=1 \
            --serial tty --console off --net "tap=$tap,mac=$mac" >"$dir/serial.txt" \
            2>"$dir/vmm.log" </dev/null & ;;
    qemu)
        "$QEMU" -machine pc,accel=kvm -cpu host,-arch-capabilities -smp 1 -m 128M \
            -nographic -no-reboot -monitor none -serial stdio -name vm,debug-threads=on \
            -kernel "$GUEST" -append "$args" \
            -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no,vhost=off" \
            -device "virtio-net-pci,netdev=n0,mac=$mac,disable-legacy=on,romfile=" \
            >"$dir/serial.txt" 2>"$dir/vmm.log" </dev/null & ;;
    esac
    PID=$!
    for _ in $(seq 1 3000); do # 60 s: QEMU's SeaBIOS runs in emulated ring 0
        grep -q 'net-echo ready' "$dir/serial.txt" 2>/dev/null && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.02
    done
    echo "$vmm: the guest did not come up (see $dir)" >&2
    return 1
}

measure() { # load ip file: the JSON into file (not in a subshell: cleanup must see HOG)
    local load=$1 ip=$2 file=$3
    if [[ $load == busy ]]; then
        taskset -c 1 sh -c 'while :; do :; done' &
        HOG=$!
    fi
    local pin=()
    [[ $PLACE == apart ]] && pin=(taskset -c 0)
    # In the background, so that a signal runs the cleanup at once, not after the pings.
    "${pin[@]}" python3 scripts/net-bench.py --ip "$ip" --pid "$PID" --count "$PINGS" --flood "$FLOOD" \
        >"$file" &
    BENCH=$!
    wait "$BENCH" || true
    BENCH=
    if [[ -n "$HOG" ]]; then
        kill -9 "$HOG" 2>/dev/null || true
        wait "$HOG" 2>/dev/null || true
        HOG=
    fi
    [[ -s "$file" ]] || echo '{"error": "net-bench.py printed nothing"}' >"$file"
}

echo "net side by side: $ROUNDS rounds, ${VMMS[*]}, loads: $LOADS, $PINGS pings, flood $FLOOD, placement: ${PLACE:-scheduler}"
echo "host load at start: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) CPUs; out: $OUT"
n=${#VMMS[@]}
declare -A TAP
for i in $(seq 0 $((n - 1))); do
    make_tap "$i"
    TAP[${VMMS[$i]}]=$i
done
: >"$OUT/results.jsonl"
read -r -a loads <<<"$LOADS"
for r in $(seq 1 "$ROUNDS"); do
    order=("${loads[@]}")
    ((r % 2 == 0 && ${#loads[@]} == 2)) && order=("${loads[1]}" "${loads[0]}")
    for i in $(seq 0 $((n - 1))); do
        vmm=${VMMS[$(((i + r) % n))]}
        k=${TAP[$vmm]}
        ip=10.250.$k.2
        mac=$(printf '06:00:0a:fa:%02x:02' "$k")
        dir=$OUT/r$r-$vmm
        mkdir -p "$dir"
        booted=0
        start "$vmm" "$dir" "sbs$$n$k" "$ip" "$mac" && booted=1
        if ((booted)) && [[ $PLACE == apart ]]; then
            python3 scripts/lib/place_threads.py "$PID" 1 0 >"$dir/placement.txt" || booted=0
        fi
        for load in "${order[@]}"; do
            la=$(cut -d' ' -f1 /proc/loadavg)
            if ((booted)); then
                measure "$load" "$ip" "$dir/$load.json"
                res=$(<"$dir/$load.json")
            else
                res='{"error": "did not boot"}'
            fi
            echo "round $r $vmm $load (load avg $la): $res"
            echo "{\"round\": $r, \"vmm\": \"$vmm\", \"load\": \"$load\", \"loadavg\": $la, \"result\": $res}" \
                >>"$OUT/results.jsonl"
        done
        kill -9 "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
        PID=
    done
done
echo "host load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/lib/sbs_median.py "$OUT/results.jsonl" rtt_mean_us rtt_p99_us flood_pps \
    flood_loss_pct flood_dev_us_per_echo rtt_dev_us_per_echo flood_vcpu_us_per_echo
