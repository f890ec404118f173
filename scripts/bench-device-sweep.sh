#!/bin/bash
# Thread sweep past this machine's 2 cores (run on a many-core machine):
# the seeds' experiments, each beside its before-designs, and the
# shared-object workloads, engine beside tmpfs. Results go to $OUT.
#   OUT=/tmp/sweep LANEFS_BIN=target/release/lanefs bash scripts/bench-device-sweep.sh
# Knobs: T (thread counts, default 1,2,4,8,16), D (window), R (runs).
set -u
B=$(realpath "${LANEFS_BIN:-target/release/lanefs}")
T=${T:-1,2,4,8,16}; D=${D:-0.3s}; R=${R:-3}
mkdir -p "$OUT"
{ date -u; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2; grep -i cpus_allowed_list /proc/self/status; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
cd /tmp || exit 1
timeout 200 "$B" bench -w seeds --variant seeds --threads "$T" --duration "$D" --runs "$R" --json "$OUT/seeds16.json" > "$OUT/seeds16.txt" 2>&1; echo "seeds rc=$?"
W=MRPL,MRPM,MRPH,MWCL,MWCM,MWUM,MWRM,MRDM,DRBM,DRBH,DWOM,DWAL
timeout 220 "$B" bench -t inproc,tmpfs -w $W --threads "$T" --duration "$D" --runs "$R" --files 30000 --json "$OUT/matrix16.json" > "$OUT/matrix16.txt" 2>&1; echo "matrix rc=$?"
tail -40 "$OUT/seeds16.txt" "$OUT/matrix16.txt"
