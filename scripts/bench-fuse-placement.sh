#!/usr/bin/env bash
# One thread's FUSE round trip against where the scheduler runs its two
# halves: DWOL (and MWCL on io_uring) at 1 thread on a lanefs memory
# mount, with the bench thread and the daemon left free or pinned by
# taskset to one core or to different cores. Needs root, /dev/fuse and
# a release build (cargo build --release -p lanefs-cli). Prints the
# bench's 1-thread lines; docs/BENCHMARKS.md (seventeenth session) reads them.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
B=${LANEFS_BIN:-$REPO/target/release/lanefs}
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 1; }
W=$(mktemp -d /tmp/fuse-placement.XXXXXX)
trap 'for m in "$W"/dev "$W"/uring; do mountpoint -q "$m" && fusermount3 -u "$m"; done; rm -rf "$W"' EXIT
bench() { "$@" "$B" bench -t "m=$W/$T" -w "$WL" --threads 1 --runs 5 --duration 1s 2>&1 | grep -E '^(1 |[A-Z]+ — )'; }

mkdir -p "$W/dev"
"$B" mount --memory --transport dev --log-file "$W/dev.log" "$W/dev"
PID=$(pgrep -n -f "mount --memory --transport dev --log-file $W/dev.log")
T=dev WL=DWOL
echo "== /dev/fuse, free";                        bench env
taskset -a -p -c 0 "$PID" >/dev/null
echo "== /dev/fuse, bench cpu0, daemon cpu0";     bench taskset -c 0
taskset -a -p -c 1 "$PID" >/dev/null
echo "== /dev/fuse, bench cpu0, daemon cpu1";     bench taskset -c 0
fusermount3 -u "$W/dev"

P=/sys/module/fuse/parameters/enable_uring
if [ -e "$P" ]; then
  echo Y >"$P"
  mkdir -p "$W/uring"
  "$B" mount --memory --transport uring --log-file "$W/uring.log" "$W/uring"
  T=uring WL=DWOL,MWCL
  echo "== io_uring (ring threads pinned per CPU), free"; bench env
  echo "== io_uring, bench cpu0";                      bench taskset -c 0
  echo "== io_uring, bench cpu1";                      bench taskset -c 1
fi
