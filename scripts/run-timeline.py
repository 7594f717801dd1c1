#!/usr/bin/env python3
"""What happened inside a run, interval by interval: from a metrics file that osprey-bench
`--metrics-interval MS` had Osprey append every MS ms (one JSON line per interval), print for each
interval the drive's IOPS, and as % of the interval's wall time the iothread's CPU, its polling
and completion spinning, its run delay (runnable, waiting for a CPU), the vCPU thread's CPU, and
Adaptive's mode (P polling, S sleeping between events) with its trial count. Usage:
scripts/run-timeline.py target/bench/X/metrics/point-001-run1.jsonl [more.jsonl ...]"""
import json
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
FIELDS = ("poll_ns", "completion_spin_ns", "cpu_ns", "run_delay_ns")
for path in sys.argv[1:]:
    print(f"{path}\n   t ms    IOPS  io CPU  poll  spin  delay  vCPU  mode")
    prev = None
    for line in open(path):
        d = json.loads(line)
        st = d["iothreads"][0]["stats"] if d.get("iothreads") else {}
        cur = {
            "t": d["utc_timestamp_ms"],
            "up": d["vm"]["uptime_ms"],
            "req": sum(x["requests"] for x in d.get("drives", [])),
            "vcpu": sum(x["cpu_ns"] for x in d["threads"] if x["name"].startswith("vcpu")),
            **{k: st.get(k, 0) for k in FIELDS},
        }
        if prev and cur["t"] > prev["t"]:
            dt_ms = cur["t"] - prev["t"]
            pct = lambda k: (cur[k] - prev[k]) / 1e4 / dt_ms  # ns over ms, as %
            mode = "S" if st.get("payoff_sleeping") else "P"
            print(f"{cur['up']:7d} {(cur['req'] - prev['req']) * 1000 / dt_ms:7.0f} "
                  f"{pct('cpu_ns'):6.0f}% {pct('poll_ns'):4.0f}% {pct('completion_spin_ns'):4.0f}% "
                  f"{pct('run_delay_ns'):5.0f}% {pct('vcpu'):4.0f}%  {mode}{st.get('payoff_trials', 0)}")
        prev = cur
