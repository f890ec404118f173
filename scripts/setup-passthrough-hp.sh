#!/bin/bash
# Build libfuse's passthrough_hp example (the C reference file system that
# scripts/bench-fuse-hp.sh measures beside lanefs) from a libfuse source tree,
# with FUSE-over-io_uring compiled in, and print the binary's path.
#
# Usage: scripts/setup-passthrough-hp.sh LIBFUSE_SRC [OUT_DIR]
#   LIBFUSE_SRC  a libfuse checkout or unpacked archive (issue 12 measured
#                master e8d407c); nothing is fetched from the network but
#                Debian packages.
#   OUT_DIR      meson build directory (default /tmp/passthrough-hp-build);
#                must be outside this repository.
# Env: NO_APT=1 skips apt-get (the build tools must then be installed).
#
# The binary is OUT_DIR/example/passthrough_hp; it finds its libfuse3 in
# OUT_DIR/lib through the rpath meson sets, so nothing is installed system-wide.
set -euo pipefail

die() { echo "setup-passthrough-hp: $*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 LIBFUSE_SRC [OUT_DIR]"
SRC=$(realpath -e "$1" 2>/dev/null) || die "$1: no such directory"
OUT=$(realpath -m "${2:-/tmp/passthrough-hp-build}")
[ -f "$SRC/meson.build" ] && [ -f "$SRC/example/passthrough_hp.cc" ] \
  || die "$SRC: not a libfuse source tree (no meson.build / example/passthrough_hp.cc)"
REPO=$(cd "$(dirname "$0")/.." && pwd)
case "$OUT/" in "$REPO"/*) die "$OUT: build outside the repository" ;; esac

# Build dependencies, from Debian only. liburing-dev is what turns
# fuse-over-io_uring on (meson's enable-io-uring needs liburing with SQE128).
DEPS=(meson ninja-build pkg-config g++ liburing-dev)
if [ "${NO_APT:-0}" != 1 ]; then
  missing=()
  for p in "${DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "need root to install ${missing[*]} (or install them and set NO_APT=1)"
    echo "setup-passthrough-hp: apt-get install ${missing[*]}" >&2
    apt-get install -y -q "${missing[@]}" >/dev/null \
      || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; } \
      || die "apt-get install ${missing[*]} failed"
  fi
fi
for t in meson ninja pkg-config c++; do
  command -v "$t" >/dev/null || die "$t not found (install: ${DEPS[*]})"
done
pkg-config --exists liburing || die "liburing not found by pkg-config (install liburing-dev)"

# Only the library and the examples: no utils (fusermount3/mount.fuse3 come
# from the distribution's fuse3), no tests, nothing installed.
MESON_OPTS=(-Dbuildtype=release -Denable-io-uring=true -Dexamples=true
            -Dutils=false -Dtests=false)
if [ -f "$OUT/build.ninja" ]; then
  meson configure "$OUT" "${MESON_OPTS[@]}" >/dev/null || die "meson configure $OUT failed"
else
  meson setup "$OUT" "$SRC" "${MESON_OPTS[@]}" >"$OUT.meson.log" 2>&1 \
    || die "meson setup failed; see $OUT.meson.log"
fi
# HAVE_URING in the generated config is what compiles lib/fuse_uring.c in.
grep -qs '^#define HAVE_URING' "$OUT/fuse_config.h" \
  || die "libfuse configured without io_uring support (liburing too old? see $OUT.meson.log)"
ninja -C "$OUT" example/passthrough_hp >"$OUT.ninja.log" 2>&1 \
  || die "build failed; see $OUT.ninja.log"
BIN="$OUT/example/passthrough_hp"
[ -x "$BIN" ] || die "$BIN was not built"
"$BIN" --help >/dev/null 2>&1 || die "$BIN does not run (--help failed)"
echo "$BIN"
