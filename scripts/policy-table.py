#!/usr/bin/env python3
"""The poll-policy matrix as a table: per point (rw, QD, queues, engine, hog), each policy's
IOPS and dataplane CPU per I/O, Adaptive against the best of the others (IOPS) and against
Classic (CPU per I/O). Usage: scripts/policy-table.py target/bench/policy-matrix/results.csv"""
import csv
import sys

rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("status") == "ok"]
pts = {}
for r in rows:
    key = (r["rw"], int(r["qd"]), int(r["queues"]), r["engine"], r.get("hog", "0"))
    pts.setdefault(key, {})[r["poll"]] = r
pols = ["off", "classic", "weighted:3", "adaptive"]
print("| rw | QD | q | engine | hog | " + " | ".join(f"{p} IOPS (µs/IO)" for p in pols) + " | adaptive / best other | adaptive CPU/IO / classic's |")
print("|---|---|---|---|---|" + "---|" * len(pols) + "---|---|")
misses = 0
for key in sorted(pts):
    e = pts[key]
    if not all(p in e for p in pols):
        continue
    cells = [f'{float(e[p]["iops"])/1000:.1f}k ({float(e[p]["cpu_dataplane_us_per_io"]):.2f})' for p in pols]
    a = float(e["adaptive"]["iops"])
    best = max(float(e[p]["iops"]) for p in pols if p != "adaptive")
    cpu_ratio = float(e["adaptive"]["cpu_dataplane_us_per_io"]) / float(e["classic"]["cpu_dataplane_us_per_io"])
    ok = a >= 0.95 * best and cpu_ratio <= 1.0
    misses += not ok
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | " + " | ".join(cells) + f" | {a/best:.2f}{'' if a >= 0.95*best else ' ✗'} | {cpu_ratio:.2f}{'' if cpu_ratio <= 1.0 else ' ✗'} |")
print(f"\n{misses} of {len(pts)} points miss the bar (IOPS >= 0.95 x best other and CPU/IO <= classic's)")
for key in sorted(pts):
    if key[1] == 1 and key[4] == "1":
        e = pts[key]
        if all(p in e for p in ("off", "classic", "adaptive")):
            a = float(e["adaptive"]["iops"])
            print(f"hog=1 QD1 {key[0]} q{key[2]} {key[3]}: adaptive/off {a/float(e['off']['iops']):.2f}, adaptive/classic {a/float(e['classic']['iops']):.2f}")
for hog in sorted({k[4] for k in pts}):
    keys = [k for k in pts if k[4] == hog and all(p in pts[k] for p in pols)]
    if not keys:
        continue
    iops = lambda k, p: float(pts[k][p]["iops"])
    within = sum(iops(k, "adaptive") >= 0.95 * max(iops(k, p) for p in pols[:3]) for k in keys)
    gm = {p: 1.0 for p in pols[:3]}
    for k in keys:
        for p in gm:
            gm[p] *= iops(k, "adaptive") / iops(k, p)
    means = ", ".join(f"{gm[p] ** (1 / len(keys)):.2f}x {p}" for p in gm)
    print(f"hog={hog}: adaptive within 0.95x of the best other at {within} of {len(keys)} points; geometric mean {means}")
