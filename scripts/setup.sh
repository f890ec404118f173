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
  fio stress-ng fsmark dbench fonts-dejavu-core

# /dev/fuse: load the module if the kernel has it as one.
if [ ! -e /dev/fuse ]; then
  modprobe fuse 2>/dev/null || true
fi
if [ ! -c /dev/fuse ]; then
  echo "scripts/setup.sh: warning: /dev/fuse is missing; FUSE mounts will fail" >&2
fi

# Rust toolchain (rustup, with rustfmt and clippy for scripts/test.sh) if
# cargo is not there yet; linked into /usr/local/bin so that the same shell
# (the README's one-line commands) finds it without re-reading PATH.
if ! command -v cargo >/dev/null 2>&1; then
  if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile default
  fi
  for b in cargo rustc rustup rustfmt cargo-fmt cargo-clippy clippy-driver rustdoc; do
    if [ -x "$HOME/.cargo/bin/$b" ]; then
      ln -sf "$HOME/.cargo/bin/$b" "/usr/local/bin/$b"
    fi
  done
fi

echo "scripts/setup.sh: done"
