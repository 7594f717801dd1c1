#!/usr/bin/env python3
"""Auto vs the best explicit engine per point, from osprey-bench store runs (one results.csv
per store directory), with the share of requests Auto served inline (from the drive stats in the
run logs). Usage: scripts/store-table.py target/bench/stores-file target/bench/stores-loop ..."""
import csv, glob, re, sys, os
stores = sys.argv[1:]
print("| store | rw | QD | queues | Auto IOPS | best explicit (IOPS) | Auto/best | Auto dataplane µs/IO vs best's | Auto inline share | Auto mean lat / Sync's (QD1) |")
print("|---|---|---|---|---|---|---|---|---|---|")
fails=[]
for sdir in stores:
    name = os.path.basename(sdir).replace("stores-","")
    rows = list(csv.DictReader(open(f"{sdir}/results.csv")))
    pts = {}
    for r in rows:
        pts.setdefault((r["rw"], int(r["qd"]), int(r["queues"])), {})[r["engine"]] = r
    for key in sorted(pts, key=lambda k:(k[0],k[1],k[2])):
        e = pts[key]
        a = e.get("Auto")
        if not a or a["status"]!="ok": print("|",name,key,"missing"); continue
        others = {k:v for k,v in e.items() if k!="Auto" and v["status"]=="ok"}
        best = max(others, key=lambda k: float(others[k]["iops"]))
        b = others[best]
        ratio = float(a["iops"])/float(b["iops"])
        cpu_a=float(a["cpu_dataplane_us_per_io"]); cpu_b=float(b["cpu_dataplane_us_per_io"])
        # inline share from the logs of Auto's point
        pt = int(a["point"]); inl=dfr=0
        for f in glob.glob(f"{sdir}/logs/point-{pt:03d}-run*.log"):
            t=open(f).read()
            m1=re.findall(r'"inline_requests":(\d+)',t); m2=re.findall(r'"deferred_requests":(\d+)',t)
            inl+=sum(map(int,m1)); dfr+=sum(map(int,m2))
        share = inl/(inl+dfr) if inl+dfr else float('nan')
        lat=""
        if key[1]==1 and "Sync" in e:
            lat=f'{float(a["lat_mean_us"]):.1f}/{float(e["Sync"]["lat_mean_us"]):.1f} µs = {float(a["lat_mean_us"])/float(e["Sync"]["lat_mean_us"]):.2f}'
        flag = "" if ratio>=0.95 and cpu_a<=cpu_b*1.05 else " ✗"
        if flag: fails.append((name,key,ratio,cpu_a,cpu_b,best))
        print(f"| {name} | {key[0]} | {key[1]} | {key[2]} | {float(a['iops'])/1000:.0f}k | {best} ({float(b['iops'])/1000:.0f}k) | {ratio:.2f}{flag} | {cpu_a:.2f} vs {cpu_b:.2f} | {share*100:.0f} % | {lat} |")
print()
for f in fails: print("MISS", f, file=sys.stderr)
