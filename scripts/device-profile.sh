#!/bin/bash
# Profile workloads at many threads on a lent many-core machine (which has
# no profiler of its own): a perf binary and its libraries travel as a
# tarball. One report per workload, flat and with DWARF call chains.
#   OUT=/tmp/prof LANEFS_BIN=… PERF_TAR=… T=16 W="MWCM DWOM" bash scripts/device-profile.sh
# Knobs: T (threads), D (window), W (workloads, space-separated; a seed part
# like seed002:stress-orphan runs with --variant default).
set -u
B=$(realpath "${LANEFS_BIN:-target/release/lanefs}")
T=${T:-16}; D=${D:-2s}; W=${W:-MWCM DWOM}
mkdir -p "$OUT" /tmp/perfpk
tar -C /tmp/perfpk -xJf "$PERF_TAR" || exit 1
P() { LD_LIBRARY_PATH=/tmp/perfpk/lib /tmp/perfpk/perf "$@"; }
{ date -u; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2; } > "$OUT/machine.txt" 2>&1
cd /tmp || exit 1
for w in $W; do
  f="$OUT/prof-${w//:/-}.txt"
  echo "== $w at $T threads" | tee "$f"
  timeout 120 env LD_LIBRARY_PATH=/tmp/perfpk/lib /tmp/perfpk/perf record -q -F 250 --call-graph dwarf,8192 -o /tmp/perf.data -- \
    "$B" bench -t inproc -w "$w" --threads "$T" --duration "$D" --runs 1 >> "$f" 2>&1
  P report -i /tmp/perf.data --no-children --stdio --sort sym --percent-limit 1 -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -40 >> "$f"
  echo "-- callers of the top symbols" >> "$f"
  P report -i /tmp/perf.data --no-children --stdio --sort sym --percent-limit 4 -g caller,2,callee,function,percent --max-stack 12 2>/dev/null | grep -v "^#" | grep -v "^$" | head -220 >> "$f"
  rm -f /tmp/perf.data
done
wc -l "$OUT"/*.txt
