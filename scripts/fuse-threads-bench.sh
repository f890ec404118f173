#!/bin/bash
# Measure lanefs through FUSE with 1 vs N request threads on two simple
# parallel workloads (docs/FUSE.md quotes the numbers). Root; needs fio and
# fs_mark. Usage: scripts/fuse-threads-bench.sh [LANEFS_BIN] [THREADS...]
set -euo pipefail
BIN=$(realpath "${1:-target/release/lanefs}")
shift || true
THREADS=${*:-1 2 4}
JOBS=${JOBS:-$(nproc)}
for t in $THREADS; do
  mnt=$(mktemp -d /tmp/lanefs-bench-XXXXXX)
  "$BIN" mount --memory --threads "$t" "$mnt"
  trap 'fusermount3 -uz "$mnt" 2>/dev/null || true' EXIT
  # 4 KiB O_DIRECT random reads: every read is a FUSE READ request.
  rr=$(fio --name=rr --directory="$mnt" --size=64M --bs=4k --rw=randread \
        --direct=1 --ioengine=psync --numjobs="$JOBS" --time_based --runtime=5 \
        --group_reporting --output-format=terse 2>/dev/null | awk -F';' '{print $8}')
  # Metadata: JOBS threads creating 0-byte files (LOOKUP+CREATE+RELEASE...).
  mkdir "$mnt/fsm"
  fm=$(cd /tmp && fs_mark -d "$mnt/fsm" -t "$JOBS" -n 4000 -s 0 -S 0 -L 1 2>/dev/null \
        | awk '/^ *[0-9]/ {print $4}' | tail -1)
  echo "threads=$t jobs=$JOBS randread_iops=$rr fs_mark_files_per_sec=$fm"
  "$BIN" umount "$mnt"
  rmdir "$mnt"
  trap - EXIT
done
