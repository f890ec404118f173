#!/bin/bash
# A/B of two lanefs binaries on a many-core machine, alternating
# old,new,old,new, then a probe of the allocator (mimalloc with large OS
# pages and eager commit) on creates. Results go to $OUT.
#   OLD=path/to/lanefs-old NEW=path/to/lanefs-new OUT=/tmp/ab bash scripts/bench-device-ab.sh
# Knobs: W (workloads), T (thread counts, default 1,4,16), K (alternations,
# default 2), PROBE=0 skips the allocator probe.
set -u
OLD=$(realpath "$OLD"); NEW=$(realpath "$NEW")
mkdir -p "$OUT"; cd /tmp || exit 1
{ date -u; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo; } > "$OUT/machine.txt"
W=${W:-MWCM,MWUM,MWRM,MRDM,MWCL}
T=${T:-1,4,16}
for k in $(seq "${K:-2}"); do
  for v in old new; do
    B=$OLD; [ "$v" = new ] && B=$NEW
    timeout 100 "$B" bench -t inproc -w "$W" --threads "$T" --duration 0.25s --runs 3 --files 30000 --json "$OUT/$v-$k.json" > /dev/null 2>&1; echo "$v-$k rc=$?"
  done
done
[ "${PROBE:-1}" = 0 ] && exit 0
MIMALLOC_ALLOW_LARGE_OS_PAGES=1 MIMALLOC_ARENA_EAGER_COMMIT=1 timeout 60 "$NEW" bench -t inproc -w MWCL,MWCM --threads 1,16 --duration 0.25s --runs 3 --files 30000 > "$OUT/new-mi.txt" 2>&1; echo "mi rc=$?"
timeout 60 "$NEW" bench -t inproc -w MWCL,MWCM --threads 1,16 --duration 0.25s --runs 3 --files 30000 > "$OUT/new-plain.txt" 2>&1; echo "plain rc=$?"
