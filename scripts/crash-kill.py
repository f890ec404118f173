#!/usr/bin/env python3
"""Kill -9 the image daemon at random moments and check what recovery gives.

Usage (as root): scripts/crash-kill.py LANEFS_BIN WORKDIR [ROUNDS] [SEED] [-- MOUNT_ARGS...]

Each round: mount WORKDIR/img (made by `lanefs mkfs` in the first round) on
WORKDIR/mnt in the foreground, run a worker process that writes,
overwrites (also through a shared mapping, then msync), truncates,
fallocates (plain, keep-size, punch, zero-range),
fsyncs/fdatasyncs, renames a fsynced temporary over a file (sometimes
fsyncing the directory), unlinks open files and syncfs'es, logging each
step to WORKDIR/log before it makes it (and each durability point after it
returned); SIGKILL the daemon after a random delay; lazily unmount the dead
mount; `lanefs fsck` (must exit 0); mount again and check every file
against the log: its size is that of a version written since its last
fsync, every byte one some such version had there (zero past a version's
end), growing it reads zeros, and names unlinked before a completed fsync of the directory
are gone. Then `lanefs fsck` again after a clean unmount.

Exit status 0 when every round held, 1 at the first failure (the image is
kept as WORKDIR/img.bad).

With a standard tool as the load instead:
scripts/crash-kill.py --load TOOL LANEFS_BIN WORKDIR [ROUNDS] [SEED] [-- MOUNT_ARGS...]
TOOL is fio, dbench, fs_mark or bonnie (bonnie++). Each round mounts
WORKDIR/img (IMGSIZE, default 512M), runs the tool on it with random
options, SIGKILLs the daemon after up to DELAY_MAX seconds (default 8;
with STOP=TERM it SIGTERMs it instead, which must exit 0 under the load),
lazily unmounts, `lanefs fsck`s (must exit 0), mounts again and reads every
file (no error may come back), unmounts cleanly (SIGTERM; the daemon must
exit 0) and fscks again. fio writes one file a round with crc32c verify
headers (--fsync=1, --fdatasync=1, --end_fsync=1 or --fsync=4 with
end_fsync): every file whose fio finished before the kill must verify
whole in every later round (without end_fsync fio never syncs its last
write: all but it), and of the file in flight at the kill, with
--fsync=1/--fdatasync=1, the size seen just before the kill less one
block. The other tools check fsck and a readable tree only.
"""

import ctypes
import json
import mmap
import os
import random
import shutil
import signal
import subprocess
import sys
import time

FILES = 3
SPAN = 40_000
POOL_LEN = 1 << 20

libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_KEEP, FALLOC_PUNCH, FALLOC_ZERO = 1, 2, 0x10


def pool():
    b = random.Random(12345).randbytes(POOL_LEN)
    return b.replace(b"\0", b"\1")


POOL = pool()


def data(k, w, off, length):
    """What write w of file k put at off..off+length: byte i is POOL[(s+i)%N]."""
    s = (w * 7919 + k * 104729) % POOL_LEN
    out = bytearray()
    pos = (s + off) % POOL_LEN
    while len(out) < length:
        take = min(length - len(out), POOL_LEN - pos)
        out += POOL[pos:pos + take]
        pos = 0
    return bytes(out)


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def syncfs(fd):
    if libc.syncfs(fd) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ---- worker ----

def worker(mnt, logpath, seed):
    log = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(**kw):
        os.write(log, (json.dumps(kw) + "\n").encode())

    rng = random.Random(seed)
    handles = []
    for k in range(FILES):
        handles.append(os.open(f"{mnt}/f{k}", os.O_RDWR))
    dfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    held = []
    w = int(time.time() * 1000) % 1_000_000_000
    step = 0
    while True:
        step += 1
        k = rng.randrange(FILES)
        fd = handles[k]
        off = rng.randrange(SPAN)
        length = 1 + rng.randrange(12_000)
        c = rng.randrange(16)
        if c <= 3:
            w += 1
            note(op="write", k=k, off=off, len=length, w=w)
            os.pwrite(fd, data(k, w, off, length), off)
        elif c <= 5:
            size = rng.randrange(SPAN)
            note(op="trunc", k=k, size=size)
            os.ftruncate(fd, size)
        elif c <= 7:
            mode = rng.choice([0, FALLOC_KEEP, FALLOC_PUNCH | FALLOC_KEEP,
                               FALLOC_PUNCH | FALLOC_KEEP, FALLOC_ZERO,
                               FALLOC_ZERO | FALLOC_KEEP])
            note(op="falloc", k=k, mode=mode, off=off, len=length)
            fallocate(fd, mode, off, length)
        elif c <= 9:
            if rng.random() < 0.5:
                os.fsync(fd)
            else:
                os.fdatasync(fd)
            note(op="fsynced", k=k)
        elif c == 10:
            tmp = f"{mnt}/t{step}"
            t = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            w += 1
            os.pwrite(t, data(k, w, 0, length), 0)
            os.fsync(t)
            note(op="rename", k=k, len=length, w=w)
            os.rename(tmp, f"{mnt}/f{k}")
            held.append(handles[k])
            handles[k] = t
            if rng.random() < 0.5:
                os.fsync(dfd)
                note(op="dirsynced")
        elif c == 11:
            u = f"{mnt}/u{step}"
            h = os.open(u, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.pwrite(h, b"\x77" * length, 0)
            os.fsync(h)
            note(op="unlink", name=f"u{step}")
            os.unlink(u)
            os.pwrite(h, b"\x78" * 5000, length)
            held.append(h)
        elif c == 12:
            if held:
                os.close(held.pop(rng.randrange(len(held))))
        elif c == 13:
            # A store through a shared mapping, inside the file, then
            # msync(MS_SYNC) (an fsync of the range).
            size = os.fstat(fd).st_size
            if size >= 4096:
                off = rng.randrange(size - 1) & ~4095
                length = min(length, size - off)
                w += 1
                note(op="write", k=k, off=off, len=length, w=w)
                mm = mmap.mmap(fd, size - off, offset=off)
                mm[0:length] = data(k, w, off, length)
                if rng.random() < 0.5:
                    mm.flush()
                    note(op="fsynced", k=k)
                mm.close()
            else:
                time.sleep(rng.random() * 0.01)
        elif c == 14:
            # Through FUSE syncfs(2) never reaches the daemon (the kernel
            # sends FUSE_SYNCFS only to virtiofs): no durability point.
            syncfs(dfd)
        else:
            for j, h in enumerate(handles):
                os.fsync(h)
                note(op="fsynced", k=j)
            os.fsync(dfd)
            note(op="dirsynced")


# ---- model ----

class Name:
    def __init__(self, content):
        self.alts = [[content]]

    def current(self):
        return self.alts[-1][-1]

    def push(self, v):
        self.alts[-1].append(v)

    def durable(self):
        self.alts[-1] = [self.current()]

    def matches(self, got):
        for vers in self.alts:
            if not any(len(v) == len(got) for v in vers):
                continue
            if all(any((v[i] if i < len(v) else 0) == b for v in vers)
                   for i, b in enumerate(got)):
                return True
        return False


def model_from_log(names, logpath):
    """Apply the log to `names` (dict k -> Name); returns unlinked names
    that a completed syncfs covers."""
    gone, pending_unlink, renamed = [], [], []
    if not os.path.exists(logpath):
        return gone
    for line in open(logpath):
        if not line.endswith("\n"):
            break
        e = json.loads(line)
        op = e["op"]
        if op in ("write", "trunc", "falloc"):
            n = names[e["k"]]
            v = bytearray(n.current())
            if op == "write":
                end = e["off"] + e["len"]
                if len(v) < end:
                    v.extend(b"\0" * (end - len(v)))
                v[e["off"]:end] = data(e["k"], e["w"], e["off"], e["len"])
            elif op == "trunc":
                s = e["size"]
                v = v[:s] + b"\0" * max(0, s - len(v))
            else:
                mode, off, end = e["mode"], e["off"], e["off"] + e["len"]
                if mode & (FALLOC_PUNCH | FALLOC_ZERO):
                    for i in range(off, min(end, len(v))):
                        v[i] = 0
                if not mode & FALLOC_KEEP and len(v) < end:
                    v.extend(b"\0" * (end - len(v)))
            n.push(bytes(v))
        elif op == "fsynced":
            names[e["k"]].durable()
        elif op == "rename":
            names[e["k"]].alts.append([data(e["k"], e["w"], 0, e["len"])])
            renamed.append(e["k"])
        elif op == "dirsynced":
            for k in renamed:
                names[k].alts = [names[k].alts[-1]]
            renamed = []
            gone += pending_unlink
            pending_unlink = []
        elif op == "unlink":
            pending_unlink.append(e["name"])
        elif op == "synced":
            for n in names.values():
                n.alts = [n.alts[-1]]
                n.durable()
            renamed = []
            gone += pending_unlink
            pending_unlink = []
    return gone


# ---- driver ----

def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def mount(lanefs, img, mnt, args):
    p = subprocess.Popen([lanefs, "mount", "-f", img, mnt] + args,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(400):
        if mounted(mnt):
            return p
        if p.poll() is not None:
            raise SystemExit(f"mount failed: {p.stderr.read().decode()}")
        time.sleep(0.025)
    raise SystemExit("mount timed out")


def fsck(lanefs, img, what):
    r = run([lanefs, "fsck", img])
    if r.returncode != 0:
        print(f"FAIL {what}: fsck exit {r.returncode}\n{r.stdout}{r.stderr}")
        return False
    return True




# ---- standard tools as the load (--load) ----

BS = 4096


def fio_cmd(mnt, name, size, extra):
    return ["fio", f"--name={name}", f"--filename={mnt}/{name}", f"--size={size}",
            "--rw=write", f"--bs={BS}", "--verify=crc32c", "--ioengine=psync",
            # Threads, not processes: a forked fio job makes its own
            # session, which the SIGKILL of the tool's group misses.
            "--fallocate=none", "--thread"] + extra


def load_main(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    tool, lanefs, work = argv[0], argv[1], argv[2]
    rounds = int(argv[3]) if len(argv) > 3 else 10
    seed = int(argv[4]) if len(argv) > 4 else int(time.time())
    delay_max = float(os.environ.get("DELAY_MAX", "8"))
    term = os.environ.get("STOP") == "TERM"
    rng = random.Random(seed)
    img, mnt = f"{work}/img", f"{work}/mnt"
    os.makedirs(mnt, exist_ok=True)
    r = run([lanefs, "mkfs", "--force", img, "--size", os.environ.get("IMGSIZE", "512M")])
    if r.returncode != 0:
        raise SystemExit(f"mkfs: {r.stderr}")
    complete = {}  # fio: name -> bytes fsynced when its fio finished
    for rnd in range(rounds):
        what = f"{tool} round {rnd} (seed {seed})"
        p = mount(lanefs, img, mnt, extra)
        inflight = None
        if tool == "dbench":
            cmd = ["dbench", "-D", mnt, "-t", "60", str(rng.choice([1, 2, 4])),
                   "--loadfile=/usr/share/dbench/client.txt"]
            cmd += rng.choice([[], ["--sync"], ["--fsync"]])
        elif tool == "fs_mark":
            st = os.statvfs(mnt)
            if st.f_bavail < st.f_blocks // 4 or st.f_favail < st.f_files // 4:
                for e in os.listdir(mnt):
                    if e.startswith("fsm"):
                        shutil.rmtree(f"{mnt}/{e}")
            d = f"{mnt}/fsm{rnd}"
            os.makedirs(d, exist_ok=True)
            cmd = ["fs_mark", "-d", d, "-n", "2000", "-s", str(rng.choice([0, 4096, 16384])),
                   "-S", str(rng.randrange(4)), "-t", "2", "-L", "3", "-k"]
        elif tool == "fio":
            opts = rng.choice([["--fsync=1"], ["--fdatasync=1"], ["--end_fsync=1"],
                               ["--fsync=4", "--end_fsync=1"]])
            inflight = (f"f{rnd}", rng.choice([4, 8, 16, 24]) << 20, opts)
            cmd = fio_cmd(mnt, inflight[0], inflight[1], ["--do_verify=0"] + opts)
        elif tool == "bonnie":
            os.makedirs(f"{mnt}/bon", exist_ok=True)
            cmd = ["bonnie++", "-d", f"{mnt}/bon", "-u", "root", "-s", "64M", "-r", "32",
                   "-n", "2:4096:0:4", "-q", "-x", "1", "-f"]
        else:
            raise SystemExit(f"unknown load {tool}")
        wk = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              cwd=work, start_new_session=True)
        delay = 0.3 + rng.random() * delay_max
        t0 = time.time()
        while time.time() - t0 < delay and wk.poll() is None:
            time.sleep(0.05)
        finished = wk.poll()
        seen = 0
        if inflight:
            try:
                seen = os.stat(f"{mnt}/{inflight[0]}").st_size
            except OSError:
                pass
        if term:
            # A clean stop under load: busy, the daemon detaches lazily
            # and exits once the session ends (at most 5 s), after its
            # final write-back.
            os.kill(p.pid, signal.SIGTERM)
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = "hung"
                p.kill()
                p.wait()
            if rc != 0:
                print(f"FAIL {what}: SIGTERM under load: daemon exit {rc}")
                return 1
        else:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        try:
            os.killpg(wk.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wk.wait()
        run(["fusermount3", "-u", "-z", mnt])
        if term and not mounted(mnt):
            # What the tool made after the lazy detach went to the mount
            # point's own directory.
            for e in os.listdir(mnt):
                shutil.rmtree(f"{mnt}/{e}", ignore_errors=True)
                if os.path.lexists(f"{mnt}/{e}"):
                    os.unlink(f"{mnt}/{e}")
        if inflight and finished == 0:
            name, size, opts = inflight
            # fio syncs before the next write: without end_fsync its last
            # write is never synced.
            complete[name] = size if "--end_fsync=1" in opts else size - BS
            inflight = None
        if not fsck(lanefs, img, what + " after the kill"):
            shutil.copy(img, img + ".bad")
            return 1
        p = mount(lanefs, img, mnt, extra)
        ok = True
        for dp, _, fns in os.walk(mnt):
            for fn in fns:
                try:
                    with open(os.path.join(dp, fn), "rb") as f:
                        while f.read(1 << 20):
                            pass
                except OSError as e:
                    print(f"FAIL {what}: {dp}/{fn}: {e}")
                    ok = False
        checks = list(complete.items())
        if inflight and inflight[2][0] in ("--fsync=1", "--fdatasync=1") and seen > BS:
            checks.append((inflight[0], (seen - BS) // BS * BS))
        for name, size in checks:
            try:
                st = os.stat(f"{mnt}/{name}").st_size
            except OSError as e:
                st = f"{e}"
            if not isinstance(st, int) or st < size:
                print(f"FAIL {what}: {name}: {st}, {size} bytes were fsynced")
                ok = False
                continue
            r = run(fio_cmd(mnt, name, size, ["--verify_only", "--verify_fatal=1"]))
            if r.returncode != 0:
                print(f"FAIL {what}: {name}: fio verify of {size} bytes:\n{r.stdout[-600:]}")
                ok = False
        if inflight and os.path.exists(f"{mnt}/{inflight[0]}"):
            os.unlink(f"{mnt}/{inflight[0]}")
        while sum(complete.values()) > 160 << 20:
            k = next(iter(complete))
            os.unlink(f"{mnt}/{k}")
            del complete[k]
        if tool == "bonnie" or (tool == "fs_mark" and rnd % 3 == 2):
            for e in os.listdir(mnt):
                if e.startswith(("fsm", "bon")):
                    shutil.rmtree(f"{mnt}/{e}")
        os.kill(p.pid, signal.SIGTERM)
        if p.wait() != 0 or mounted(mnt):
            print(f"FAIL {what}: clean unmount: daemon exit {p.returncode}, "
                  f"mounted {mounted(mnt)}")
            ok = False
        if not ok or not fsck(lanefs, img, what + " after the check"):
            shutil.copy(img, img + ".bad")
            return 1
        verified = f", {len(checks)} fio files verified" if tool == "fio" else ""
        print(f"ok {what}: {'SIGTERM' if term else 'SIGKILL'} after {delay:.1f} s "
              f"(tool {'done' if finished == 0 else 'running'}){verified}", flush=True)
    return 0


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "--load":
        return load_main(argv[1:])
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    if argv and argv[0] == "worker":
        worker(argv[1], argv[2], int(argv[3]))
        return
    lanefs, work = argv[0], argv[1]
    rounds = int(argv[2]) if len(argv) > 2 else 20
    seed = int(argv[3]) if len(argv) > 3 else int(time.time())
    rng = random.Random(seed)
    os.makedirs(work, exist_ok=True)
    img, mnt, logpath = f"{work}/img", f"{work}/mnt", f"{work}/log"
    os.makedirs(mnt, exist_ok=True)
    r = run([lanefs, "mkfs", "--force", img, "--size", "128M"])
    if r.returncode != 0:
        raise SystemExit(f"mkfs: {r.stderr}")
    p = mount(lanefs, img, mnt, extra)
    for k in range(FILES):
        open(f"{mnt}/f{k}", "wb").close()
    run(["sync", "-f", mnt])
    st = os.statvfs(mnt)
    fresh = (st.f_bfree, st.f_ffree)
    os.kill(p.pid, signal.SIGTERM)
    p.wait()
    names = {k: Name(b"") for k in range(FILES)}
    for rnd in range(rounds):
        what = f"round {rnd} (seed {seed})"
        if os.path.exists(logpath):
            os.unlink(logpath)
        p = mount(lanefs, img, mnt, extra)
        wseed = rng.randrange(1 << 30)
        wk = subprocess.Popen([sys.executable, __file__, "worker", mnt, logpath, str(wseed)],
                              stdout=subprocess.DEVNULL, stderr=open(f"{work}/worker.err", "w"))
        time.sleep(0.2 + rng.random() * 1.5)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        wk.kill()
        wk.wait()
        run(["fusermount3", "-u", "-z", mnt])
        gone = model_from_log(names, logpath)
        if not fsck(lanefs, img, what + " after the kill"):
            shutil.copy(img, img + ".bad")
            return 1
        p = mount(lanefs, img, mnt, extra)
        ok = True
        for k, n in names.items():
            try:
                got = open(f"{mnt}/f{k}", "rb").read()
            except OSError as e:
                print(f"FAIL {what}: f{k}: {e}")
                ok = False
                continue
            if not n.matches(got):
                sizes = [[len(v) for v in a] for a in n.alts]
                bad = next((i for i, b in enumerate(got)
                            if not any((v[i] if i < len(v) else 0) == b
                                       for a in n.alts for v in a)), None)
                print(f"FAIL {what}: f{k} has {len(got)} bytes, first byte no version "
                      f"had at {bad}; version sizes {sizes}")
                ok = False
                continue
            # Grow it: zeros past the old end. Then this is the file's state.
            with open(f"{mnt}/f{k}", "r+b") as f:
                f.truncate(len(got) + 12288)
                f.seek(len(got))
                tail = f.read()
                if tail.strip(b"\0"):
                    i = len(got) + next(i for i, b in enumerate(tail) if b)
                    print(f"FAIL {what}: f{k} grown from {len(got)} reads stale bytes at {i}")
                    ok = False
                f.truncate(len(got))
            names[k] = Name(got)
        for u in gone:
            if os.path.exists(f"{mnt}/{u}"):
                print(f"FAIL {what}: {u} unlinked before a directory fsync came back")
                ok = False
        for e in os.listdir(mnt):
            if e[0] in "tu":
                os.unlink(f"{mnt}/{e}")
        os.kill(p.pid, signal.SIGTERM)
        p.wait()
        if not ok or not fsck(lanefs, img, what + " after the check"):
            shutil.copy(img, img + ".bad")
            return 1
        print(f"ok {what}: log {sum(1 for _ in open(logpath)) if os.path.exists(logpath) else 0} steps",
              flush=True)
    # No space or inode leaked across the crashes: emptied, the file system
    # has what it had when fresh.
    p = mount(lanefs, img, mnt, extra)
    for k in range(FILES):
        os.truncate(f"{mnt}/f{k}", 0)
    st = os.statvfs(mnt)
    os.kill(p.pid, signal.SIGTERM)
    p.wait()
    # Emptied entry blocks stay with their directory until it is freed
    # (docs/FORMAT.md, departures): the root's temporaries cost a few.
    if st.f_ffree != fresh[1] or not fresh[0] - 4 <= st.f_bfree <= fresh[0]:
        print(f"FAIL seed {seed}: free blocks/inodes {(st.f_bfree, st.f_ffree)}, fresh {fresh}")
        return 1
    print(f"ok: {rounds} rounds, free counts as fresh (less {fresh[0] - st.f_bfree} entry blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
