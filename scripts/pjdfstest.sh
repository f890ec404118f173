#!/bin/bash
# Run the pjdfstest POSIX suite (8,798 assertions in 238 files) on lanefs
# mounts: the held-out "standard POSIX suite" of issue 12, run here by hand.
# Not part of CI: the suite's source is not a Debian package and CI fetches
# nothing but packages.
#
# Usage: scripts/pjdfstest.sh PJDFSTEST_SRC [CONFIG...]
#   PJDFSTEST_SRC  a pjdfstest checkout (github.com/pjd/pjdfstest; the
#                  twelfth session ran 85a8aea); built out of tree, in
#                  $BUILD (default /tmp/pjdfstest-build).
#   CONFIG         any of
#                    memory-dev        --memory, /dev/fuse transport
#                    memory-uring      --memory, FUSE-over-io_uring
#                    image-uring-wbc   an image file, io_uring, -o writeback_cache
#                  (default: all three). Every mount has `-o allow_other`
#                  alone: lanefs makes that imply default_permissions
#                  (docs/FUSE.md), so this is also issue 12's check that
#                  allow_other alone gives tmpfs's permission behaviour.
# Env: LANEFS_BIN (default target/release/lanefs, built if missing),
#      NO_APT=1 skips apt-get (autoconf, automake, gcc, make, perl's prove
#      must then be installed).
#
# Exit status: 0 when every config passes; the failing files are printed.
set -euo pipefail

die() { echo "pjdfstest: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 PJDFSTEST_SRC [memory-dev|memory-uring|image-uring-wbc ...]"
SRC=$(realpath -e "$1" 2>/dev/null) || die "$1: no such directory"
shift
[ -f "$SRC/pjdfstest.c" ] && [ -d "$SRC/tests" ] || die "$SRC: not a pjdfstest tree"
CONFIGS=("$@")
[ ${#CONFIGS[@]} -gt 0 ] || CONFIGS=(memory-dev memory-uring image-uring-wbc)
[ "$(id -u)" = 0 ] || die "run as root (the suite changes owners and modes)"
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-/tmp/pjdfstest-build}
BIN=${LANEFS_BIN:-$REPO/target/release/lanefs}

if [ "${NO_APT:-0}" != 1 ]; then
  for p in autoconf automake gcc make perl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
      || apt-get install -y -q "$p" >/dev/null || die "apt-get install $p failed"
  done
fi
if [ ! -x "$BIN" ]; then
  (cd "$REPO" && cargo build --release -p lanefs-cli) || die "cargo build failed"
fi

# The suite's tests run `$(dirname $0)/../../pjdfstest`: build in a copy.
if [ ! -x "$BUILD/pjdfstest" ]; then
  rm -rf "$BUILD" && cp -a "$SRC" "$BUILD"
  (cd "$BUILD" && autoreconf -ifs && ./configure && make pjdfstest) >"$BUILD.log" 2>&1 \
    || die "building pjdfstest failed; see $BUILD.log"
fi

MNT=$(mktemp -d /tmp/lanefs-pjd.XXXXXX)
IMG=""
cleanup() {
  mountpoint -q "$MNT" && { umount "$MNT" 2>/dev/null || umount -l "$MNT"; }
  rmdir "$MNT" 2>/dev/null || true
  [ -n "$IMG" ] && rm -f "$IMG"
  return 0
}
trap cleanup EXIT

failed=()
for c in "${CONFIGS[@]}"; do
  case "$c" in
    memory-dev) args=(--memory "$MNT" --transport dev -o allow_other) ;;
    memory-uring) args=(--memory "$MNT" --transport uring -o allow_other) ;;
    image-uring-wbc)
      IMG=$(mktemp /tmp/lanefs-pjd-img.XXXXXX)
      "$BIN" mkfs --size 512M "$IMG" >/dev/null
      args=("$IMG" "$MNT" --transport uring -o allow_other,writeback_cache) ;;
    *) die "unknown config $c" ;;
  esac
  [ "$c" = memory-dev ] || grep -qx Y /sys/module/fuse/parameters/enable_uring \
    || { echo "pjdfstest: $c: FUSE-over-io_uring is off (echo Y > /sys/module/fuse/parameters/enable_uring)" >&2; failed+=("$c"); continue; }
  "$BIN" mount "${args[@]}" || die "$c: mount failed"
  log=/tmp/lanefs-pjdfstest-$c.log
  start=$(date +%s)
  if (cd "$MNT" && prove -r "$BUILD/tests") >"$log" 2>&1; then
    echo "pjdfstest: $c: PASS ($(grep -o 'Files=.*Tests=[0-9]*' "$log"), $(( $(date +%s) - start )) s)"
  else
    echo "pjdfstest: $c: FAIL (log: $log)"
    grep -E "^/.*\.t \.+ *(Failed|Dubious)|^Failed|Wstat" "$log" | head -40 || true
    failed+=("$c")
  fi
  umount "$MNT"
  if [ -n "$IMG" ]; then
    # The daemon finishes its last commit after the kernel lets go.
    for _ in $(seq 300); do pgrep -f -- "$IMG" >/dev/null || break; sleep 0.1; done
    "$BIN" fsck "$IMG" || { echo "pjdfstest: $c: fsck found damage" >&2; failed+=("$c-fsck"); }
    rm -f "$IMG"; IMG=""
  fi
done
[ ${#failed[@]} -eq 0 ] || die "failed: ${failed[*]}"
