#!/bin/bash
# One interleaved `lanefs bench` run of lanefs through FUSE (both transports)
# beside libfuse's passthrough_hp over tmpfs (both transports) and tmpfs
# itself: the comparison issue 12 sets its goals on. docs/bench/passthrough-hp.md
# explains the targets and the options.
#
# Usage: scripts/bench-fuse-hp.sh [-- EXTRA LANEFS BENCH ARGS]
#   Extra args go to `lanefs bench`; -w/--workload, --threads, --runs and
#   --files given there replace this script's defaults (--files is capped to
#   what passthrough_hp's open-files limit allows), e.g. a smoke run:
#     scripts/bench-fuse-hp.sh -- --duration 50ms --runs 1 --files 2000
# Env:
#   HP_BIN      passthrough_hp (default /tmp/passthrough-hp-build/example/
#               passthrough_hp, as scripts/setup-passthrough-hp.sh builds it)
#   LANEFS_BIN  lanefs (default target/release/lanefs of this checkout)
#   OUT         results directory, outside the repository (default /tmp/fuse-hp)
#   NO_URING=1  leave out the io_uring targets (kernels without FUSE io_uring)
#   LANEFS_OPTS extra `lanefs mount` options for every lanefs target, e.g.
#               "-o cache_dir,entry_timeout=86400,attr_timeout=86400" to
#               match passthrough_hp's own caching (see the doc)
#   HP_WB=1     also hp-wb: passthrough_hp --nopassthrough on /dev/fuse, which
#               turns its writeback cache on (see the doc)
# Root only (mounts). Everything mounted is unmounted on exit, also on error.
set -euo pipefail

die() { echo "bench-fuse-hp: $*" >&2; exit 1; }
note() { echo "bench-fuse-hp: $*" >&2; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
HP_BIN=${HP_BIN:-/tmp/passthrough-hp-build/example/passthrough_hp}
LANEFS_BIN=${LANEFS_BIN:-$REPO/target/release/lanefs}
OUT=$(realpath -m "${OUT:-/tmp/fuse-hp}")
# Sizes as the bench's managed targets use (crates/lanefs-bench/src/target.rs).
LANEFS_CAPACITY=8G
LANEFS_INODES=4194304
TMPFS_SIZE=16g
MOUNT_WAIT_S=20

if [ $# -gt 0 ]; then
  [ "$1" = -- ] || die "usage: $0 [-- extra lanefs bench args]"
  shift
fi
EXTRA=("$@")

# ---- checks -----------------------------------------------------------------
[ "$(id -u)" = 0 ] || die "run as root (mounts tmpfs and FUSE file systems)"
for t in mount umount mountpoint fusermount3 realpath mktemp; do
  command -v "$t" >/dev/null || die "$t not found"
done
[ -x "$HP_BIN" ] || die "$HP_BIN: no passthrough_hp (build it: scripts/setup-passthrough-hp.sh LIBFUSE_SRC, or set HP_BIN)"
[ -x "$LANEFS_BIN" ] || die "$LANEFS_BIN: no lanefs binary (cargo build --release -p lanefs-cli, or set LANEFS_BIN)"
"$LANEFS_BIN" bench --help >/dev/null 2>&1 || die "$LANEFS_BIN has no working 'bench' subcommand"
[ -e /dev/fuse ] || die "/dev/fuse missing (modprobe fuse)"
case "$OUT/" in "$REPO"/*) die "$OUT: results go outside the repository" ;; esac
mkdir -p "$OUT" || die "cannot create $OUT"

# passthrough_hp holds an O_PATH fd for every inode the kernel knows (its
# entries are cached for a day) and raises its soft open-files limit only to
# the hard one. MWUL pre-creates --files files per thread (200000 a second of
# window by default), so raise the hard limit where we may (CAP_SYS_RESOURCE),
# else cap the budget to what fits.
NOFILE=$(cat /proc/sys/fs/nr_open)
( ulimit -n "$NOFILE" ) 2>/dev/null || NOFILE=$(ulimit -Hn)
[ "$NOFILE" = unlimited ] && NOFILE=$(cat /proc/sys/fs/nr_open)

has() { # has OPT...: is any of these options among the extra args?
  local a o
  for a in "${EXTRA[@]}"; do for o in "$@"; do
    case "$a" in "$o" | "$o"=*) return 0 ;; esac
  done; done
  return 1
}
argval() { # argval OPT: the value of OPT among the extra args (last wins)
  local a v="" next=0
  for a in "${EXTRA[@]}"; do
    if [ $next = 1 ]; then v=$a; next=0; continue; fi
    case "$a" in "$1") next=1 ;; "$1"=*) v=${a#*=} ;; esac
  done
  echo "$v"
}
FILES_ARGS=()
# The files budget passthrough_hp's open-files limit allows (2000 fds slack
# for its own and for FORGETs still in flight between runs).
TMAX=$(argval --threads | tr ',' '\n' | sort -n | tail -n1)
TMAX=${TMAX:-2}
FILES_MAX=$(( (NOFILE - 2000) / TMAX / 1000 * 1000 ))
[ "$FILES_MAX" -gt 0 ] || die "open-files limit $NOFILE too low for passthrough_hp"
if has --files; then
  [ "$(argval --files)" -le "$FILES_MAX" ] \
    || die "--files $(argval --files) x $TMAX threads will not fit passthrough_hp's open-files limit $NOFILE; use --files $FILES_MAX or less"
elif [ "$FILES_MAX" -lt 200000 ]; then
  note "open-files hard limit $NOFILE (no CAP_SYS_RESOURCE to raise it): --files $FILES_MAX per thread, so fast targets' create/unlink windows end early"
  FILES_ARGS=(--files "$FILES_MAX")
fi
# Defaults, each unless the extra args give it.
DEFAULT_ARGS=()
has -w --workload || DEFAULT_ARGS+=(-w MWCL,MWUL,MRDL,DWOL,DWAL,FSMARK)
has --threads || DEFAULT_ARGS+=(--threads 1,2)
has --runs || DEFAULT_ARGS+=(--runs 5)

URING=1
if [ "${NO_URING:-0}" = 1 ]; then
  URING=0
else
  P=/sys/module/fuse/parameters/enable_uring
  [ -e "$P" ] || die "kernel has no FUSE-over-io_uring ($P missing); NO_URING=1 runs the /dev/fuse targets only"
  if [ "$(cat "$P")" != Y ]; then
    echo Y >"$P" 2>/dev/null || die "cannot turn on $P"
    note "turned on $P"
  fi
fi

# ---- mounts, torn down on any exit --------------------------------------------
WORK=$(mktemp -d /tmp/bench-fuse-hp.XXXXXX)
HP_PIDS=()
BENCH_PID=""
LANEFS_MNTS=()
FUSE_MNTS=()

cleanup() {
  local rc=$? m p i
  set +e
  if [ -n "$BENCH_PID" ] && kill -0 "$BENCH_PID" 2>/dev/null; then
    # It stops at its next poll and removes its run directory.
    kill -TERM "$BENCH_PID"
    wait "$BENCH_PID" 2>/dev/null
  fi
  for m in "${LANEFS_MNTS[@]}"; do
    mountpoint -q "$m" && { "$LANEFS_BIN" umount "$m" 2>/dev/null || fusermount3 -uz "$m"; }
  done
  for m in "${FUSE_MNTS[@]}"; do
    mountpoint -q "$m" && { fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"; }
  done
  for p in "${HP_PIDS[@]}"; do
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && { kill "$p"; wait "$p" 2>/dev/null; }
  done
  if mountpoint -q "$WORK/backing"; then
    umount "$WORK/backing" 2>/dev/null || { sleep 1; umount "$WORK/backing"; } \
      || umount -l "$WORK/backing"
  fi
  if grep -q " $WORK/" /proc/self/mounts; then
    note "still mounted under $WORK; unmount by hand"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/backing"
mount -t tmpfs -o "size=$TMPFS_SIZE,mode=0755" bench-fuse-hp "$WORK/backing" \
  || die "mounting the backing tmpfs failed"

# wait_mounted DIR PID LOG: until DIR is a mount point (or PID died).
wait_mounted() {
  local i
  for i in $(seq $((MOUNT_WAIT_S * 10))); do
    mountpoint -q "$1" && return 0
    kill -0 "$2" 2>/dev/null || die "passthrough_hp for $1 exited: $(tail -n1 "$3")"
    sleep 0.1
  done
  die "$1 not mounted after ${MOUNT_WAIT_S}s"
}

# mount_hp NAME [passthrough_hp options]: passthrough_hp over its own directory of
# the backing tmpfs, in the foreground (so we hold its pid and its log).
# FUSE_INIT_STATUS=1 makes libfuse log what FUSE_INIT negotiated, which is how
# we know io_uring really engaged (or did not).
mount_hp() {
  local name=$1 want=$2 i; shift 2
  mkdir -p "$WORK/backing/$name" "$WORK/$name"
  ( ulimit -n "$NOFILE" && FUSE_INIT_STATUS=1 exec "$HP_BIN" --foreground "$@" \
      "$WORK/backing/$name" "$WORK/$name" ) >"$OUT/$name.log" 2>&1 </dev/null &
  HP_PIDS+=($!)
  FUSE_MNTS+=("$WORK/$name")
  wait_mounted "$WORK/$name" "$!" "$OUT/$name.log"
  for i in $(seq 50); do grep -q '^FUSE_INIT: io_uring=' "$OUT/$name.log" && break; sleep 0.1; done
  grep -q "^FUSE_INIT: io_uring=$want\b" "$OUT/$name.log" \
    || die "$name: expected io_uring=$want, log says: $(grep '^FUSE_INIT: io_uring=' "$OUT/$name.log" || echo nothing)"
  TARGETS+=",$name=$WORK/$name"
}

# mount_lanefs NAME TRANSPORT [mount options...]: a memory lanefs, checked through
# `lanefs stats` to be served on TRANSPORT.
mount_lanefs() {
  local name=$1 transport=$2; shift 2
  mkdir -p "$WORK/$name"
  "$LANEFS_BIN" mount --memory --capacity "$LANEFS_CAPACITY" --inodes "$LANEFS_INODES" \
    --transport "$transport" --log-file "$OUT/$name.log" ${LANEFS_OPTS:-} "$@" "$WORK/$name" 2>"$OUT/$name.err" \
    || { rmdir "$WORK/$name"; return 1; }
  LANEFS_MNTS+=("$WORK/$name")
  "$LANEFS_BIN" stats "$WORK/$name" >"$OUT/$name.stats" || die "lanefs stats $WORK/$name failed"
  grep -qx "transport=$transport" "$OUT/$name.stats" \
    || die "$name: asked for --transport $transport, lanefs stats says $(grep '^transport=' "$OUT/$name.stats")"
  TARGETS+=",$name=$WORK/$name"
}

TARGETS=""
mount_lanefs lanefs-dev dev || die "lanefs mount --transport dev failed: $(cat "$OUT/lanefs-dev.err")"
if [ $URING = 1 ]; then
  mount_lanefs lanefs-uring uring || die "lanefs mount --transport uring failed: $(cat "$OUT/lanefs-uring.err")"
fi
# The writeback cache, where this lanefs has it (issue 12 adds -o writeback_cache).
WB_TRANSPORT=$([ $URING = 1 ] && echo uring || echo dev)
if ! mount_lanefs lanefs-wb "$WB_TRANSPORT" -o writeback_cache; then
  note "lanefs-wb left out: $(tail -n1 "$OUT/lanefs-wb.err")"
fi
mount_hp hp off
[ $URING = 1 ] && mount_hp hpuring on -o io_uring
[ "${HP_WB:-0}" = 1 ] && mount_hp hp-wb off --nopassthrough
TARGETS="${TARGETS#,},tmpfs"

# ---- the run ------------------------------------------------------------------
ARGS=(-t "$TARGETS" "${DEFAULT_ARGS[@]}" "${FILES_ARGS[@]}")
ARGS+=(--json "$OUT/results.json" --csv "$OUT/results.csv" --plot "$OUT/results.png")
ARGS+=("${EXTRA[@]}")

{
  echo "date: $(date -u +%FT%TZ)"
  echo "machine: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, $(awk '/^MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
  echo "lanefs: $LANEFS_BIN ($(git -C "$REPO" describe --always --dirty 2>/dev/null || echo 'no git'))"
  echo "passthrough_hp: $HP_BIN"
  echo "lanefs mount options: ${LANEFS_OPTS:-(defaults)}"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "targets: $TARGETS"
  echo "command: lanefs bench ${ARGS[*]}"
} | tee "$OUT/machine.txt"

START=$(date +%s)
# In the background, so that a signal to this script runs the trap at once
# (bash defers traps while a foreground command runs); the trap stops it.
: >"$OUT/bench.txt"
"$LANEFS_BIN" bench "${ARGS[@]}" >>"$OUT/bench.txt" 2>&1 </dev/null &
BENCH_PID=$!
tail -n +1 --pid="$BENCH_PID" -f "$OUT/bench.txt" &
TAIL_PID=$!
wait "$BENCH_PID" || die "lanefs bench failed: $(tail -n1 "$OUT/bench.txt")"
BENCH_PID=""
wait "$TAIL_PID"
echo "elapsed: $(($(date +%s) - START)) s" | tee -a "$OUT/machine.txt"
"$LANEFS_BIN" bench report "$OUT/results.json" -o "$OUT/report.md" \
  || note "lanefs bench report failed (results.json is still there)"
# `lanefs bench` exits 0 when some cells failed (it still writes the rest).
FAILED=$(grep -o '[0-9]* result(s) failed' "$OUT/bench.txt" || true)
[ -z "$FAILED" ] || die "$FAILED (see the notes in $OUT/bench.txt)"
note "results in $OUT (results.json/.csv/.png, report.md, bench.txt, machine.txt, logs)"
