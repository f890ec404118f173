#!/bin/bash
# Thread sweep past this machine's 2 cores (run on a many-core machine):
# the seeds' experiments, each beside its before-designs; the whole fxmark
# matrix, engine beside tmpfs (fs_mark on its own, it takes longest); and,
# where /dev/fuse works, a few workloads through `lanefs mount` beside
# tmpfs. Results (JSON, tables, plots) go to $OUT.
#   OUT=/tmp/sweep LANEFS_BIN=target/release/lanefs bash scripts/bench-device-sweep.sh
# Knobs: T (thread counts, default 1,2,4,8,16), D (window), R (runs),
# FUSE=0 skips the mount. A binary carried to such a machine should be
# stripped with `strip --strip-debug` only, so profiles keep its symbols.
set -u
B=$(realpath "${LANEFS_BIN:-target/release/lanefs}")
export LANEFS_BIN=$B
T=${T:-1,2,4,8,16}; D=${D:-0.25s}; R=${R:-3}
mkdir -p "$OUT"
{ date -u; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2; grep -i cpus_allowed_list /proc/self/status; cat /etc/os-release; } > "$OUT/machine.txt" 2>&1
cd /tmp || exit 1
timeout 200 "$B" bench -t inproc -w seeds --variant seeds --threads "$T" --duration "$D" --runs "$R" --json "$OUT/seeds.json" --plot "$OUT/seeds.png" > "$OUT/seeds.txt" 2>&1; echo "seeds rc=$?"
W=MRPL,MRPM,MRPH,MRDL,MRDM,MWCL,MWCM,MWUL,MWUM,MWRL,MWRM,DRBL,DRBM,DRBH,DWOL,DWOM,DWAL,DWTL
timeout 230 "$B" bench -t inproc,tmpfs -w $W --threads "$T" --duration "$D" --runs "$R" --json "$OUT/matrix.json" --plot "$OUT/matrix.png" > "$OUT/matrix.txt" 2>&1; echo "matrix rc=$?"
timeout 150 "$B" bench -t inproc,tmpfs -w FSMARK,FSMARK_SYNC --threads "$T" --duration "$D" --runs "$R" --json "$OUT/fsmark.json" > "$OUT/fsmark.txt" 2>&1; echo "fsmark rc=$?"
if [ "${FUSE:-1}" = 1 ] && [ -e /dev/fuse ]; then
  timeout 80 "$B" bench -t lanefs,tmpfs -w MWCL,DWOL,MRDL,DRBL --threads 1,4,16 --duration "$D" --runs "$R" --json "$OUT/fuse.json" > "$OUT/fuse.txt" 2>&1; echo "fuse rc=$?"
fi
tail -12 "$OUT/seeds.txt" "$OUT/matrix.txt" "$OUT/fsmark.txt"
