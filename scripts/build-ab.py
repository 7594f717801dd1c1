#!/usr/bin/env python3
"""Builds compared side by side: for an osprey-bench run given several binaries (`--osprey
A,B,...`), each point's median IOPS and dataplane CPU per I/O per build, every build against
build 1, and the geometric mean of those ratios per host state (hog). Several results.csv files
(rounds of the same command) pool their points: a point's ratio is then the median of the
rounds' ratios. Usage: scripts/build-ab.py target/bench/ab-r1/results.csv [more.csv ...]"""
import csv
import math
import statistics
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
# (point without build) -> build -> list of rows, one per file
pts = {}
for path in sys.argv[1:]:
    for r in csv.DictReader(open(path)):
        if r.get("status") != "ok" or not r.get("iops"):
            continue
        key = (r["rw"], r["bs"], int(r["qd"]), int(r["queues"]), r["engine"], r["poll"],
               r["max_batch"], r["irq"], r.get("hog", "0"))
        pts.setdefault(key, {}).setdefault(int(r.get("build", "1")), []).append(r)
builds = sorted({b for e in pts.values() for b in e})
if len(builds) < 2:
    sys.exit("build-ab: every row is build 1: was osprey-bench given several --osprey binaries?")
others = builds[1:]


def ratio(e, b, col):
    pairs = zip(e[b], e[1])
    return statistics.median(float(x[col]) / float(y[col]) for x, y in pairs)


print("| rw | bs | QD | q | engine | poll | hog | " + " | ".join(f"build {b} IOPS (µs/IO)" for b in builds)
      + " | " + " | ".join(f"{b}/1 IOPS" for b in others) + " |")
print("|---|---|---|---|---|---|---|" + "---|" * (len(builds) + len(others)))
logs = {}
for key in sorted(pts):
    e = pts[key]
    if not all(b in e for b in builds):
        continue
    cells = []
    for b in builds:
        iops = statistics.median(float(r["iops"]) for r in e[b])
        cpu = statistics.median(float(r["cpu_dataplane_us_per_io"] or "nan") for r in e[b])
        cells.append(f"{iops / 1000:.1f}k ({cpu:.2f})")
    ratios = [ratio(e, b, "iops") for b in others]
    for b, x in zip(others, ratios):
        logs.setdefault((key[8], b), []).append(math.log(x))
    rw, bs, qd, q, engine, poll, _, _, hog = key
    print(f"| {rw} | {bs} | {qd} | {q} | {engine} | {poll} | {hog} | " + " | ".join(cells) + " | "
          + " | ".join(f"{x:.2f}" for x in ratios) + " |")
print()
for (hog, b), ls in sorted(logs.items()):
    print(f"hog={hog}: build {b} / build 1 IOPS, geometric mean over {len(ls)} points: "
          f"{math.exp(sum(ls) / len(ls)):.3f}x (range {math.exp(min(ls)):.2f}-{math.exp(max(ls)):.2f})")
