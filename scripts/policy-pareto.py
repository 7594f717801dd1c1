#!/usr/bin/env python3
"""Per-point Pareto panels of a poll-policy matrix (osprey-bench results.csv).

One panel per workload point (rw x QD x queues x engine) and host state (hog column), each
policy one marker: x = cores Osprey's dataplane used (dataplane CPU per I/O x IOPS), y = IOPS.
Up and to the left is better. Plain SVG, no plotting library.

Usage: scripts/policy-pareto.py RESULTS_CSV OUT_SVG
"""
import csv
import sys
from collections import OrderedDict

COLORS = {"off": "#888888", "classic": "#d62728", "weighted:3": "#1f77b4", "adaptive": "#2ca02c"}
W, H, PAD = 260, 190, 42


def panel(svg, x0, y0, title, rows):
    pts = []
    for r in rows:
        try:
            iops = float(r["iops"])
            cores = float(r["cpu_dataplane_us_per_io"]) * iops / 1e6
        except (ValueError, KeyError):
            continue
        pts.append((r["poll"], cores, iops))
    svg.append(f'<g transform="translate({x0},{y0})">')
    svg.append(f'<rect x="0" y="0" width="{W}" height="{H}" fill="none" stroke="#ccc"/>')
    svg.append(f'<text x="{W/2}" y="13" font-size="11" text-anchor="middle">{title}</text>')
    if not pts:
        svg.append("</g>")
        return
    xmax = max(p[1] for p in pts) * 1.15 or 1.0
    ymax = max(p[2] for p in pts) * 1.15 or 1.0
    pw, ph = W - PAD - 10, H - PAD - 20

    def sx(v):
        return PAD + v / xmax * pw

    def sy(v):
        return 20 + ph - v / ymax * ph

    svg.append(f'<line x1="{PAD}" y1="{20+ph}" x2="{PAD+pw}" y2="{20+ph}" stroke="#000"/>')
    svg.append(f'<line x1="{PAD}" y1="20" x2="{PAD}" y2="{20+ph}" stroke="#000"/>')
    svg.append(f'<text x="{PAD+pw}" y="{H-6}" font-size="9" text-anchor="end">cores {xmax/1.15:.2f} max</text>')
    svg.append(f'<text x="4" y="30" font-size="9">{ymax/1.15/1000:.0f}k</text>')
    for poll, cores, iops in pts:
        c = COLORS.get(poll, "#000")
        svg.append(f'<circle cx="{sx(cores):.1f}" cy="{sy(iops):.1f}" r="4" fill="{c}"><title>{poll}: {iops:.0f} IOPS, {cores:.3f} cores</title></circle>')
    svg.append("</g>")


def main():
    src, out = sys.argv[1], sys.argv[2]
    rows = [r for r in csv.DictReader(open(src)) if r.get("status") == "ok"]
    groups = OrderedDict()
    for r in rows:
        key = (r["rw"], int(r["qd"]), int(r["queues"]), r["engine"])
        groups.setdefault(key, {}).setdefault(r.get("hog", "0"), []).append(r)
    hogs = sorted({h for g in groups.values() for h in g})
    keys = sorted(groups)
    cols = len(hogs)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{cols*(W+10)+10}" height="{len(keys)*(H+10)+40}" font-family="sans-serif">']
    lx = 10
    for poll, c in COLORS.items():
        svg.append(f'<circle cx="{lx+5}" cy="15" r="5" fill="{c}"/><text x="{lx+14}" y="19" font-size="12">{poll}</text>')
        lx += 110
    for i, key in enumerate(keys):
        for j, hog in enumerate(hogs):
            rw, qd, q, engine = key
            title = f"{rw} QD{qd} x{q} {engine}, hog {hog}"
            panel(svg, 10 + j * (W + 10), 30 + i * (H + 10), title, groups[key].get(hog, []))
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg))


if __name__ == "__main__":
    main()
