#!/usr/bin/env python3
"""Check a `lanefs bench --json` results file against the goals of issue 8.

Usage: scripts/bench-goals.py RESULTS.json [BASELINE_TARGET=inproc]
Prints one line per goal with the measured value (medians from the file).
"""
import json
import sys

res = json.load(open(sys.argv[1]))
me = sys.argv[2] if len(sys.argv) > 2 else "inproc"
rows = {(r["workload"], r["target"], r["threads"]): r for r in res["results"]}
threads = sorted({r["threads"] for r in res["results"]})
lo, hi = threads[0], threads[-1]


def rate(w, t, n):
    r = rows.get((w, t, n))
    return r["ops_per_sec"] if r and r["status"] == "ok" else None


def ratio(w, a, b, n):
    x, y = rate(w, a, n), rate(w, b, n)
    return x / y if x and y else None


def line(goal, value, target):
    ok = "met" if value is not None and value >= target else "NOT met"
    v = "n/a" if value is None else f"{value:.2f}"
    print(f"{goal:<58} {v:>7}  (goal >= {target})  {ok}")


print(f"results: {sys.argv[1]}  commit {res['commit'][:12]}  threads {lo}..{hi}")
line(f"MRPL {me} / tmpfs, {hi} threads", ratio("MRPL", me, "tmpfs", hi), 5)
pair = {}
for t in (me, "tmpfs"):
    c, u = rate("MWCL", t, hi), rate("MWUL", t, hi)
    pair[t] = 1 / (1 / c + 1 / u) if c and u else None
cu = pair[me] / pair["tmpfs"] if pair[me] and pair["tmpfs"] else None
line(f"create+unlink (MWCL then MWUL) {me} / tmpfs, {hi} threads", cu, 4)
line(f"DRBL {me} / tmpfs, {hi} threads", ratio("DRBL", me, "tmpfs", hi), 3)
for w in sorted({r["workload"] for r in res["results"]}):
    if w.endswith("L") and w.startswith(("M", "D")):
        a, b = rate(w, me, lo), rate(w, me, hi)
        line(f"{w} {me} scaling {hi}/{lo}", b / a if a and b else None, 1.9)
peers = [t for t in ("vfs", "rsfs") if any(r["target"] == t for r in res["results"])]
for p in peers:
    for w in sorted({r["workload"] for r in res["results"]}):
        r = ratio(w, me, p, hi)
        if r is not None:
            line(f"{w} {me} / {p}, {hi} threads", r, 1)
