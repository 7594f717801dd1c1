#!/usr/bin/env python3
"""Passes Osprey's output through unchanged and, at the end, prints a summary a person reads at a
glance of each test-guest `BLK {...}` report (the JSON line stays, for scripts), in at most 100
columns: the device, the engine Osprey used (its one-line name, from its `drive stats` log
line), and per run IOPS, mean and p99 latency, errors and kicks per request. Used by `make run`:

    osprey --config examples/test-guest.json 2>&1 | scripts/blk-summary.py
"""

import json
import sys


def summary(report, engines):
    dev = report.get("device") or {}
    lines = [
        "Summary: virtio-blk at PCI slot {}, {} queue(s) of {}, {:.0f} MiB{}".format(
            dev.get("slot", "?"),
            report.get("queues_used", report.get("num_queues", "?")),
            report.get("queue_size", "?"),
            (report.get("capacity_bytes") or 0) / 2**20,
            ", read-only" if report.get("ro") else "",
        )
    ]
    for drive, engine in engines:
        lines.append(f"  drive {drive}: engine {engine}")
    for run in report.get("runs") or []:
        requests = run.get("requests") or 0
        lat = run.get("lat_ns") or {}
        kicks = (run.get("kicks") or 0) / requests if requests else 0.0
        # Two lines per run, so that the summary fits in 100 columns.
        lines.append(
            "  {name}: {rw} {bs} B QD{qd}: {iops:,} IOPS, mean {mean:.1f} µs, "
            "p99 {p99:.1f} µs".format(
                name=run.get("name", "?"),
                rw=run.get("rw", "?"),
                bs=run.get("bs", "?"),
                qd=run.get("qd", "?"),
                iops=run.get("iops") or 0,
                mean=(lat.get("mean") or 0) / 1000,
                p99=(lat.get("p99") or 0) / 1000,
            )
        )
        lines.append(
            "    {errors} errors, {mismatches} mismatches, {kicks:.3f} kicks/request".format(
                errors=run.get("errors", "?"),
                mismatches=run.get("mismatches", "?"),
                kicks=kicks,
            )
        )
    if report.get("failures"):
        lines.append(f"  failures: {report['failures']}")
    return lines


def main():
    reports, engines = [], []
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        text = line.strip()
        if text.startswith("BLK {"):
            try:
                reports.append(json.loads(text[4:]))
            except json.JSONDecodeError:
                pass
        marker = "drive stats {"
        if marker in text:
            try:
                stats = json.loads(text[text.index(marker) + len(marker) - 1:])
                engines.append((stats.get("drive_id", "?"), stats.get("engine", "?")))
            except json.JSONDecodeError:
                pass
    for report in reports:
        print("\n".join(summary(report, engines)))


if __name__ == "__main__":
    main()
