#!/usr/bin/env python3
"""sbs_median.py RESULTS.jsonl KEY...: the median over rounds of each KEY, per VMM (and per
`load` when the rows carry one), for the side-by-side scripts (scripts/*-side-by-side.sh).

Each line of RESULTS.jsonl is {"round": N, "vmm": NAME, ["load": idle|busy,] "result": {...}};
a result with an "error" is a failed round: counted, not part of the median.
"""
import json
import statistics
import sys


def main():
    path, keys = sys.argv[1], sys.argv[2:]
    rows = [json.loads(line) for line in open(path) if line.strip()]
    groups = list(dict.fromkeys((r.get("load", ""), r["vmm"]) for r in rows))
    width = max([22] + [len(k) + 2 for k in keys])
    print("median over rounds:")
    print("%-24s" % "vmm" + "".join("%*s" % (width, k) for k in keys))
    for load, vmm in groups:
        mine = [r["result"] for r in rows if (r.get("load", ""), r["vmm"]) == (load, vmm)]
        ok = [x for x in mine if "error" not in x]
        bad = len(mine) - len(ok)
        cells = []
        for k in keys:
            vals = [x[k] for x in ok if k in x]
            cells.append("%*.2f" % (width, statistics.median(vals)) if vals else "%*s" % (width, "-"))
        name = "%s %s" % (vmm, load) if load else vmm
        print("%-24s" % name + "".join(cells) + ("   (%d failed rounds)" % bad if bad else ""))


if __name__ == "__main__":
    main()
