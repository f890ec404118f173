#!/bin/bash
# Install everything lanefs needs to build and to run its whole test suite
# on Debian 12 (bookworm). Idempotent; run as root.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh: run as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
  ca-certificates curl build-essential pkg-config \
  fuse3 libfuse3-dev kmod util-linux e2fsprogs procps \
  fio stress-ng fsmark dbench

# /dev/fuse: load the module if the kernel has it as one.
if [ ! -e /dev/fuse ]; then
  modprobe fuse 2>/dev/null || true
fi
if [ ! -c /dev/fuse ]; then
  echo "scripts/setup.sh: warning: /dev/fuse is missing; FUSE mounts will fail" >&2
fi

# Rust toolchain (rustup) if cargo is not there yet.
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
fi

echo "scripts/setup.sh: done"
