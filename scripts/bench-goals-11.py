#!/usr/bin/env python3
"""Check `lanefs bench --json` results against the goals of issue 11.

Usage: scripts/bench-goals-11.py MATRIX.json [SEEDS.json [DRBH.json]]

MATRIX.json: a run of the fxmark matrix with targets inproc and tmpfs (and
optionally vfs, rsfs) at 1 and N threads. SEEDS.json: a run of
`-w seeds --variant seeds` (or `all`). DRBH.json: a run of
`-w DRBH --variant 'default;read=locked'` (seed 003's goal is stated on
DRBH). Prints one line per goal with the
measured value (medians from the files, ratios only within one file).
"""
import json
import sys

# The before-design each seed workload is compared with, and the goal.
SEED_GOALS = {
    "seed000": ("icache=global", 2.0),
    "seed001": ("reclaim=sync-grace", 4.6),
    "seed002:stress-orphan": ("orphan=locked", 1.7),
    "seed003:read": ("read=locked", 1.5),
}
READ = ["MRPL", "MRPM", "MRPH", "MRDL", "MRDM", "DRBL", "DRBM", "DRBH"]
SHARED_WRITES = ["MWCM", "MWUM", "MWRM"]


def load(path):
    res = json.load(open(path))
    rows = {}
    for r in res["results"]:
        # Non-engine targets record their variant as "-".
        variant = r.get("variant") or "default"
        key = (r["workload"], r["target"], "default" if variant == "-" else variant, r["threads"])
        rows[key] = r
    return res, rows


def line(goal, value, target):
    ok = "met" if value is not None and value >= target else "NOT met"
    v = "n/a" if value is None else f"{value:.2f}"
    print(f"{goal:<60} {v:>7}  (goal >= {target})  {ok}")


def matrix(path):
    res, rows = load(path)
    threads = sorted({k[3] for k in rows})
    lo, hi = threads[0], threads[-1]

    def rate(w, t, n):
        r = rows.get((w, t, "default", n))
        return r["ops_per_sec"] if r and r["status"] == "ok" else None

    def ratio(a, b):
        return a / b if a and b else None

    print(f"matrix: {path}  commit {res['commit'][:12]}  threads {lo}..{hi}")
    print(f"machine: {res.get('machine')}")
    line(f"MRPL inproc / tmpfs, {hi} threads", ratio(rate("MRPL", "inproc", hi), rate("MRPL", "tmpfs", hi)), 5)
    workloads = sorted({k[0] for k in rows})
    for w in workloads:
        if w in READ or (w.endswith("L") and w.startswith(("MW", "DW"))):
            line(f"{w} inproc scaling {hi}/{lo}", ratio(rate(w, "inproc", hi), rate(w, "inproc", lo)), 1.9)
    for w in SHARED_WRITES:
        if w in workloads:
            line(f"{w} inproc scaling {hi}/{lo}", ratio(rate(w, "inproc", hi), rate(w, "inproc", lo)), 1.3)
    for p in ("vfs", "rsfs"):
        for w in workloads:
            r = ratio(rate(w, "inproc", hi), rate(w, p, hi))
            if r is not None:
                line(f"{w} inproc / {p}, {hi} threads", r, 1)


def seeds(path):
    res, rows = load(path)
    threads = sorted({k[3] for k in rows})
    hi = threads[-1]
    print(f"seeds: {path}  commit {res['commit'][:12]}  threads {hi}")

    def rate(w, v):
        r = rows.get((w, "inproc", v, hi))
        return r["ops_per_sec"] if r and r["status"] == "ok" else None

    for w, (before, goal) in SEED_GOALS.items():
        d, b = rate(w, "default"), rate(w, before)
        line(f"{w} default / {before}, {hi} threads", d / b if d and b else None, goal)
    # The default is never slower than any of its baselines.
    for (w, t, v, n), r in sorted(rows.items()):
        if v == "default" or n != hi or r["status"] != "ok":
            continue
        d = rate(w, "default")
        if d:
            line(f"{w} default / {v}, {hi} threads", d / r["ops_per_sec"], 1)


def drbh(path):
    res, rows = load(path)
    hi = max(k[3] for k in rows)

    def rate(v):
        r = rows.get(("DRBH", "inproc", v, hi))
        return r["ops_per_sec"] if r and r["status"] == "ok" else None

    d, b = rate("default"), rate("read=locked")
    print(f"DRBH: {path}  commit {res['commit'][:12]}")
    line(f"DRBH lockless / locked read, {hi} threads", d / b if d and b else None, 1.5)


matrix(sys.argv[1])
if len(sys.argv) > 2:
    seeds(sys.argv[2])
if len(sys.argv) > 3:
    drbh(sys.argv[3])
