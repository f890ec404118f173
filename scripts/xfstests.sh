#!/bin/bash
# Run xfstests (fstests) against lanefs FUSE mounts of image files.
# Not part of CI: xfstests is not a Debian package. Rerunnable: every step
# checks whether it is already done.
#
# Usage: scripts/xfstests.sh [CHECK_ARGS...]
#   CHECK_ARGS go to xfstests' ./check (default: -g quick); this script adds
#   the exclusions below and FSTYP's `-fuse`. Examples:
#     scripts/xfstests.sh -g quick
#     scripts/xfstests.sh generic/001 generic/013
#     scripts/xfstests.sh -g auto -x stress
#
# Env:
#   XFSTESTS_SRC   where xfstests is checked out and built (default
#                  /var/tmp/xfstests-src; cloned from $XFSTESTS_REPO if it
#                  is not there yet, then built with make).
#   XFSTESTS_REPO  a git repository of xfstests (default: the local bare
#                  snapshot /work/.mirror/kdave+xfstests/repo, else
#                  https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git).
#   LANEFS_BIN     the lanefs binary (default target/release/lanefs of this
#                  repository, or $CARGO_TARGET_DIR/release/lanefs; built if
#                  missing).
#   IMG_DIR        where the TEST and SCRATCH images live (default
#                  /var/tmp/lanefs-xfstests); IMG_SIZE their size (4G).
#   TEST_DIR, SCRATCH_MNT  the mount points (default /mnt/lanefs-test,
#                  /mnt/lanefs-scratch).
#   LANEFS_OPTS    mount options (default allow_other,default_permissions).
#   TEST_TIMEOUT   seconds one test may run before the watchdog kills it
#                  (default 300; xfstests has no per-test timeout of its own).
#   NO_APT=1       skip apt-get.
#
# How lanefs is plugged in (see docs/FUSE.md, "xfstests"):
#  * FSTYP=fuse, FUSE_SUBTYP=.lanefs: xfstests mounts with
#    `mount -t fuse.lanefs IMAGE DIR -o OPTS`, which runs the helper
#    /sbin/mount.fuse.lanefs this script writes. The helper formats IMAGE
#    (`lanefs mkfs`) if it does not exist yet, then runs lanefs's mount
#    helper form `lanefs IMAGE DIR -o OPTS` (which returns once the mount is
#    live; a mount of an image the last daemon has not let go yet is
#    retried for up to 120 s, as a FUSE umount does not wait for the
#    daemon), keeping its recovery report off the test's output, and with
#    `dev,suid` first, as mount.fuse3 gives root (FUSE's own default is
#    nodev,nosuid; xfstests makes device nodes and setuid files). An image
#    keeps its contents across unmount and mount, as a disk does.
#  * `mount -o remount,...` of a FUSE mount: neither lanefs nor libfuse's
#    mount.fuse3 take `remount`; the kernel does (ro/rw and the generic
#    flags), so the helper hands a remount to `mount -i` (mount(2) with
#    MS_REMOUNT, no helper).
#  * xfstests' "mkfs" of a FUSE scratch device is mount + `rm -rf` +
#    unmount; there is no fsck hook for FUSE.
#  * xfstests checks that TEST_DEV's type is $FSTYP ("fuse") but the mount is
#    "fuse.lanefs" (libfuse's low-level examples mount as plain "fuse"):
#    common/rc's _fs_type already maps fuse.glusterfs and fuse.ceph-fuse to
#    their FSTYP; this script adds fuse.lanefs -> fuse to that sed, in the
#    local checkout only.
set -euo pipefail
# The whole script is one compound command, read before it runs (an edit
# of this file during a run cannot change what the run does).
{
die() { echo "xfstests.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root"

REPO=$(cd "$(dirname "$0")/.." && pwd)
SRC=${XFSTESTS_SRC:-/var/tmp/xfstests-src}
if [ -z "${XFSTESTS_REPO:-}" ]; then
  if [ -d /work/.mirror/kdave+xfstests/repo ]; then
    XFSTESTS_REPO=/work/.mirror/kdave+xfstests/repo
  else
    XFSTESTS_REPO=https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git
  fi
fi
if [ -z "${LANEFS_BIN:-}" ]; then
  LANEFS_BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/lanefs
fi
IMG_DIR=${IMG_DIR:-/var/tmp/lanefs-xfstests}
IMG_SIZE=${IMG_SIZE:-4G}
TEST_DIR=${TEST_DIR:-/mnt/lanefs-test}
SCRATCH_MNT=${SCRATCH_MNT:-/mnt/lanefs-scratch}
LANEFS_OPTS=${LANEFS_OPTS:-allow_other,default_permissions}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(-g quick)

# 1. Packages the build and the tests use.
if [ "${NO_APT:-0}" != 1 ]; then
  PKGS=(build-essential autoconf automake libtool libtool-bin pkg-config
    xfslibs-dev uuid-dev libattr1-dev libacl1-dev libaio-dev liburing-dev
    libgdbm-dev libgdbm-compat-dev libcap-dev xfsprogs e2fsprogs acl attr bc
    fio gawk psmisc quota sed dbench git fuse3 util-linux)
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  fi
fi

# 2. xfstests, cloned and built once.
if [ ! -d "$SRC/.git" ]; then
  git clone -q "$XFSTESTS_REPO" "$SRC" || die "git clone $XFSTESTS_REPO failed"
fi
if [ ! -x "$SRC/ltp/fsstress" ]; then
  (cd "$SRC" && make -j"$(nproc)") >"$SRC.build.log" 2>&1 \
    || die "building xfstests failed; see $SRC.build.log"
fi
if ! grep -q 's/fuse.lanefs/fuse/' "$SRC/common/rc"; then
  sed -i "s|-e 's/fuse.ceph-fuse/ceph-fuse/'|-e 's/fuse.ceph-fuse/ceph-fuse/' -e 's/fuse.lanefs/fuse/'|" \
    "$SRC/common/rc"
  grep -q 's/fuse.lanefs/fuse/' "$SRC/common/rc" || die "could not patch _fs_type in $SRC/common/rc"
fi
# The users and group the suite's permission tests switch to.
# (README: useradd fsgqa, fsgqa2, 123456-fsgqa, each with its own group.)
for u in fsgqa fsgqa2 123456-fsgqa; do
  getent group "$u" >/dev/null || groupadd "$u"
  id "$u" >/dev/null 2>&1 || useradd -m -g "$u" "$u"
done

# 3. lanefs and its mount helper.
if [ ! -x "$LANEFS_BIN" ]; then
  (cd "$REPO" && cargo build --release -p lanefs-cli) || die "cargo build failed"
fi
LANEFS_BIN=$(realpath "$LANEFS_BIN")
cat >/sbin/mount.fuse.lanefs.new <<EOF
#!/bin/bash
# Written by lanefs's scripts/xfstests.sh: mount(8)'s helper for
# "mount -t fuse.lanefs IMAGE DIR [-o OPTS]".
LANEFS=$LANEFS_BIN
src=\$1 dir=\$2
opts=""
prev=""
for a in "\$@"; do
  [ "\$prev" = -o ] && opts="\$opts,\$a"
  prev=\$a
done
case ",\$opts," in
  *,remount,*) exec mount -i "\$@" ;;
esac
if [ "\$src" != memory ] && [ "\$src" != none ] && [ ! -e "\$src" ]; then
  "\$LANEFS" mkfs --size "$IMG_SIZE" "\$src" >/dev/null || exit 32
fi
# As mount.fuse3 does for root: dev,suid unless the options say otherwise
# (a FUSE mount is nodev,nosuid by default; xfstests expects a disk's).
shift 2
devsuid=()
[ "\$(id -u)" = 0 ] && devsuid=(-o dev,suid)
# A FUSE umount returns before the daemon has written everything back and
# let the image go; lanefs's mount waits 5 s for it, and a cycle mount
# after heavy writes (fsstress) can need longer: retry for up to 120 s.
err=\$(mktemp)
for _ in \$(seq 24); do
  if "\$LANEFS" "\$src" "\$dir" "\${devsuid[@]}" "\$@" >/dev/null 2>"\$err"; then rm -f "\$err"; exit 0; fi
  grep -q "in use by another lanefs process" "\$err" || break
  echo "\$(date +%T) \$src still in use; retrying" >>"$IMG_DIR/mount-retries.log"
done
cat "\$err" >&2; rm -f "\$err"; exit 32
EOF
chmod 755 /sbin/mount.fuse.lanefs.new
mv /sbin/mount.fuse.lanefs.new /sbin/mount.fuse.lanefs

# 4. Images, mount points, local.config.
mkdir -p "$IMG_DIR" "$TEST_DIR" "$SCRATCH_MNT"
for m in "$TEST_DIR" "$SCRATCH_MNT"; do
  if mountpoint -q "$m"; then umount "$m" || umount -l "$m"; fi
done
TEST_DEV=$IMG_DIR/test.img
SCRATCH_DEV=$IMG_DIR/scratch.img
for img in "$TEST_DEV" "$SCRATCH_DEV"; do
  # A fresh file system for each run, as a fresh mkfs of the devices.
  for _ in 1 2 3 4 5 6; do
    "$LANEFS_BIN" mkfs --force --size "$IMG_SIZE" "$img" >/dev/null 2>&1 && break
    sleep 1 # the last daemon may still hold it
  done
done
cat >"$SRC/local.config" <<EOF
# Written by lanefs's scripts/xfstests.sh
export FSTYP=fuse
export FUSE_SUBTYP=.lanefs
export TEST_DEV=$TEST_DEV
export TEST_DIR=$TEST_DIR
export SCRATCH_DEV=$SCRATCH_DEV
export SCRATCH_MNT=$SCRATCH_MNT
export MOUNT_OPTIONS="-o $LANEFS_OPTS"
export TEST_FS_MOUNT_OPTS="-o $LANEFS_OPTS"
EOF

# Tests that need what a FUSE daemon of image files cannot be: the
# shutdown ioctl, quotas, block devices (dm, loop), fs-specific tools.
EXCLUDE_GROUPS=shutdown,quota

# 5. Run, with a watchdog: a test that runs past TEST_TIMEOUT seconds is
# killed (it and every process under it, by pid) and shows as failed.
LOG=$IMG_DIR/check.log
descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$p"
    descendants "$p"
  done
}
watchdog() {
  local check=$1 cur="" since=0 now
  while kill -0 "$check" 2>/dev/null; do
    sleep 5
    # The running test: the `/bin/bash $SRC/tests/DIR/NNN` under check.
    now=$(ps -o pid=,args= --ppid "$check" 2>/dev/null \
      | awk '$3 ~ /\/tests\/[^\/]+\/[0-9]+$/ {print $1 ":" $3}' | head -1)
    if [ "$now" != "$cur" ]; then
      cur=$now
      since=$SECONDS
    elif [ -n "$cur" ] && [ $((SECONDS - since)) -ge "$TEST_TIMEOUT" ]; then
      echo "xfstests.sh: ${cur#*:} ran past ${TEST_TIMEOUT}s; killing it" >&2
      echo "${cur#*:}" >>"$IMG_DIR/timed-out"
      local pid=${cur%%:*}
      # shellcheck disable=SC2046
      kill -9 "$pid" $(descendants "$pid") 2>/dev/null || true
      since=$SECONDS
    fi
  done
}
rm -f "$IMG_DIR/timed-out"
cd "$SRC"
set +e
./check -fuse -x "$EXCLUDE_GROUPS" "${ARGS[@]}" 2>&1 | tee "$LOG" &
sleep 2
CHECK_PID=$(pgrep -P "$$" -x check || ps -o pid=,args= --ppid "$$" | awk '/\.\/check/ {print $1; exit}')
if [ -n "$CHECK_PID" ]; then
  watchdog "$CHECK_PID" &
  WD=$!
fi
wait %1
[ -n "${WD:-}" ] && kill "$WD" 2>/dev/null
set -e

# 6. Summary.
echo
echo "== summary (log: $LOG, results: $SRC/results) =="
# "Ran:" lists every test tried, the not-run ones included.
ran=$(sed -n 's/^Ran: //p' "$LOG" | tail -1 | wc -w)
notrun=$(sed -n 's/^Not run: //p' "$LOG" | tail -1 | wc -w)
failures=$(sed -n 's/^Failures: //p' "$LOG" | tail -1)
nfail=$(echo "$failures" | wc -w)
echo "tried $ran: passed $((ran - notrun - nfail)), failed $nfail, not run $notrun"
[ -z "$failures" ] || echo "failures: $failures"
[ -f "$IMG_DIR/timed-out" ] && echo "timed out (killed): $(tr '\n' ' ' <"$IMG_DIR/timed-out")"
[ "$nfail" = 0 ]
exit
}
