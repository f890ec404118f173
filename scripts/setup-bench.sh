#!/usr/bin/env bash
# Install what `lanefs bench` needs beyond Rust on a Debian machine:
#   fonts-dejavu-core  the TrueType font the --plot PNGs use for text
#   e2fsprogs          mkfs.ext4 for the managed ext4 target
#   fuse3              fusermount3 for the managed lanefs target
#   util-linux         mount / umount / losetup
# The managed tmpfs / ext4 / lanefs targets mount file systems: run the
# benchmark as root (or give it CAP_SYS_ADMIN).
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
need=()
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v losetup >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi
echo "setup-bench: ready"
