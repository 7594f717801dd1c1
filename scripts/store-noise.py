#!/usr/bin/env python3
"""How much of Auto's gap to the best explicit engine is noise, per point of osprey-bench store
runs: each engine's per-run IOPS (from logs/point-NNN-runK.console), a one-sided Mann-Whitney
test of "Auto's runs are below the best engine's", and the chance that an engine whose runs come
from the best engine's own distribution meets the issue's bar (its median >= 0.95 x the largest
median of the explicit engines), by bootstrap. The sum of those chances is the number of points
a perfect Auto would be expected to pass in one such run.
Usage: scripts/store-noise.py target/bench/s9-zram target/bench/s9-loop ...
       scripts/store-noise.py --compare poll --subject adaptive target/bench/policy-matrix4
       scripts/store-noise.py --metric cpu target/bench/s14-loop ...
(the second form: the Adaptive policy against the best other policy, per engine and hog count;
the third: the bar's CPU half, dataplane CPU per I/O of each run from metrics/point-NNN-runK.jsonl
against the engine with the best median IOPS: a one-sided test of "Auto's CPU per I/O is above
that engine's", and the chance that one drawn from that engine's runs stays within its 1.05x)."""
import argparse, csv, glob, json, math, os, random, re, statistics

ap = argparse.ArgumentParser()
ap.add_argument("dirs", nargs="+")
ap.add_argument("--compare", choices=["engine", "poll"], default="engine")
ap.add_argument("--subject", default="Auto")
ap.add_argument("--metric", choices=["iops", "cpu"], default="iops")
args = ap.parse_args()

random.seed(1)
DRAWS = 2000


def run_index(path):
    """K of a `point-NNN-runK.<ext>` file: the round the run belongs to."""
    return int(re.search(r"-run(\d+)\.", path).group(1))


def runs_of(sdir, point):
    """IOPS of each recorded run, by round."""
    out = {}
    for f in glob.glob(f"{sdir}/logs/point-{point:03d}-run*.console"):
        for line in open(f, errors="replace"):
            if line.startswith("BLK "):
                j = json.loads(line[4:])
                main = [r["iops"] for r in j.get("runs", []) if r.get("name") == "main"]
                if main:
                    out[run_index(f)] = main[0]
    return out


def cpu_runs_of(sdir, point):
    """Dataplane CPU per I/O (µs) of each recorded run, by round: the iothreads' CPU over the
    requests."""
    out = {}
    for f in glob.glob(f"{sdir}/metrics/point-{point:03d}-run*.jsonl"):
        lines = [l for l in open(f, errors="replace") if l.strip()]
        if not lines:
            continue
        j = json.loads(lines[-1])
        cpu = sum(t["cpu_ns"] for t in j.get("threads", []) if t["name"].startswith("iothread-"))
        reqs = sum(d["requests"] for d in j.get("drives", []))
        if reqs:
            out[run_index(f)] = cpu / reqs / 1e3
    return out


def below_p(a, b):
    """One-sided Mann-Whitney U p-value (normal approximation, ties halved) that a < b."""
    u = sum((x < y) + 0.5 * (x == y) for x in a for y in b)
    n, m = len(a), len(b)
    mu, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
    return 0.5 * math.erfc((u - mu) / sd / math.sqrt(2)) if sd else 1.0


def resampled_median(xs):
    return statistics.median(random.choices(xs, k=len(xs)))


S = args.subject
CPU = args.metric == "cpu"


def judge(runs):
    """`runs`: per variant, (IOPS runs, CPU runs), each by round. The best other variant by
    median IOPS, the subject's and its runs of the metric (lists), the ratio of medians, the
    one-sided p that the subject is worse, the chance that a variant drawn from the best's own
    runs passes, whether the subject passes, and the median of the paired per-round ratios
    (None without a common round); None when a variant has no runs."""
    sub = runs.pop(S, None)
    if not sub or not runs or not all(v[0] for v in runs.values()):
        return None
    best = max(runs, key=lambda k: statistics.median(runs[k][0].values()))
    if CPU:
        mine, theirs = sub[1], runs[best][1]
        if not mine or not all(v[1] for v in runs.values()):
            return None
    else:
        mine, theirs = sub[0], runs[best][0]
        if not mine:
            return None
    rounds = sorted(set(mine) & set(theirs))
    paired = statistics.median(mine[k] / theirs[k] for k in rounds) if rounds else None
    mine, theirs = list(mine.values()), list(theirs.values())
    ratio = statistics.median(mine) / statistics.median(theirs)
    if CPU:
        p = below_p(theirs, mine)
        ok = sum(resampled_median(theirs) <= 1.05 * resampled_median(theirs) for _ in range(DRAWS))
        return best, mine, theirs, ratio, p, ok / DRAWS, ratio <= 1.05, paired
    e = [list(v[0].values()) for v in runs.values()]
    p = below_p(mine, theirs)
    ok = 0
    for _ in range(DRAWS):
        ideal = resampled_median(theirs)
        ok += ideal >= 0.95 * max(resampled_median(v) for v in e)
    return best, mine, theirs, ratio, p, ok / DRAWS, ratio >= 0.95, paired


def show(x):
    return f"{x:.2f} µs" if CPU else f"{x/1e3:.0f}k"


side = "above" if CPU else "below"
extra = " engine | hog |" if args.compare == "poll" else ""
print(f"| store | rw | QD | q |{extra} {S} median (runs) | best other median | {S}/best | p({S} {side} best) | P(one like the best passes) | paired by round |")
print("|---|---|---|---|" + "---|" * (extra.count("|")) + "---|---|---|---|---|---|")
expected = passed = significant = points = paired_passed = 0
all_pass = 1.0
for sdir in args.dirs:
    name = os.path.basename(sdir)
    pts = {}
    for r in csv.DictReader(open(f"{sdir}/results.csv")):
        if r["status"] == "ok":
            key = (r["rw"], int(r["qd"]), int(r["queues"]))
            if args.compare == "poll":
                key += (r["engine"], int(r["hog"] or 0))
            point = int(r["point"])
            cpu = cpu_runs_of(sdir, point) if CPU else None
            pts.setdefault(key, {})[r[args.compare]] = (runs_of(sdir, point), cpu)
    for key in sorted(pts):
        judged = judge(pts[key])
        if judged is None:
            continue
        best, mine, theirs, ratio, p, chance, ok, paired = judged
        paired_ok = paired is not None and (paired <= 1.05 if CPU else paired >= 0.95)
        paired_passed += paired_ok
        shown_paired = "-" if paired is None else f"{paired:.2f}"
        points += 1
        expected += chance
        all_pass *= chance
        passed += ok
        significant += p < 0.05
        cols = " | ".join(str(k) for k in key)
        print(f"| {name} | {cols} | {show(statistics.median(mine))} ({len(mine)}) | {best} {show(statistics.median(theirs))} | {ratio:.2f} | {p:.3f}{' ✗' if p < 0.05 else ''} | {chance:.2f} | {shown_paired}{'' if paired_ok else ' ✗'} |")
if CPU:
    print(f"\n{S}'s CPU per I/O <= 1.05 x the best-IOPS engine's at {passed} of {points} points; significantly above it (p < 0.05) at {significant};"
          f" one drawn from that engine's own runs would pass {expected:.1f} of {points} on average, and every point with probability {all_pass:.2g};"
          f" paired by round (median of the per-round ratios) <= 1.05 at {paired_passed} of {points}")
else:
    print(f"\n{S} >= 0.95 x best (IOPS) at {passed} of {points} points; significantly below the best (p < 0.05) at {significant};"
          f" one drawn from the best's own runs would pass {expected:.1f} of {points} on average, and every point with probability {all_pass:.2g};"
          f" paired by round (median of the per-round ratios) >= 0.95 at {paired_passed} of {points}")
