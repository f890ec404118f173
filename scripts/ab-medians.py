#!/usr/bin/env python3
"""A/B medians: ab-medians.py DIR — for each workload and thread count, the median over DIR/old-*.json and over DIR/new-*.json (each file holds the median of its runs), and new/old."""
import json, glob, statistics, sys
d = sys.argv[1]
def load(v):
    out = {}
    for f in sorted(glob.glob(f"{d}/{v}-*.json")):
        for r in json.load(open(f))["results"]:
            if r.get("status") != "ok": continue
            out.setdefault((r["workload"], r["threads"]), []).append(r["ops_per_sec"])
    return out
o, n = load("old"), load("new")
fmt = lambda x: f"{x/1e6:.2f}M" if x >= 1e6 else f"{x/1e3:.0f}k"
ws, ts = [], sorted({t for (_, t) in o})
for (w, t) in o:
    if w not in ws: ws.append(w)
print(f"{'workload':22} " + "  ".join(f"{'old '+str(t)+'t':>8} {'new':>8} {'new/old':>7}" for t in ts))
for w in ws:
    cells = []
    for t in ts:
        if (w, t) in o and (w, t) in n:
            a, b = statistics.median(o[(w, t)]), statistics.median(n[(w, t)])
            cells.append(f"{fmt(a):>8} {fmt(b):>8} {b/a:7.2f}")
        else:
            cells.append(f"{'-':>8} {'-':>8} {'-':>7}")
    print(f"{w:22} " + "  ".join(cells))
