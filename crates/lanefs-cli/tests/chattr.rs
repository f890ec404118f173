//! Inode flags through a real mount, against a fresh tmpfs (the oracle):
//! the same sequence of `chattr` runs and system calls on both — opens,
//! writes and `ftruncate`/`fallocate` through descriptors opened before
//! a flag was set, truncates, chmod/chown/utimes, xattrs, links,
//! removals, renames, creates in flagged directories, flag changes by
//! their owner and by another user, `FS_IOC_FSSETXATTR`, and atime under
//! `noatime` — comparing every result (errno, values) and, after each
//! step, `lsattr -d` of every path. On both transports, with and without
//! `default_permissions`, with the writeback cache, and on an image store
//! (checked by `lanefs fsck` at the unmount). Root; `chattr` and
//! `lsattr` from e2fsprogs.

mod common;

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;

/// The steps, run in the tree's root. `$ ` runs a shell command (its
/// exit status is recorded); anything else is a system call of [`call`]
/// (its errno or value is recorded). `hold N PATH FLAGS` keeps a
/// descriptor open as `N` for later `fwrite`/`ftrunc`/`falloc`/`punch`.
const STEPS: &[&str] = &[
    "$ touch f i a && mkdir d ad e && touch d/x ad/x && mkdir d/sub ad/sub",
    "$ echo hello > i && echo hello > a && chown 1000:1000 f",
    "$ lsattr -d f d",
    "getflags f",
    "fsgetxattr f",
    "hold i1 i rdwr",
    "hold a1 a wronly",
    "$ chattr +i i",
    "$ chattr +a a",
    "$ chattr +i d",
    "$ chattr +a ad",
    "$ chattr +S f",
    "setflags f 0x8",
    "setflags f 0x80000",
    "fssetxattr f 0x20 0",
    "fssetxattr f 0 4096",
    "fssetxattr f 0x1000 0",
    "fssetxattr f 0x80000040 0",
    "fsgetxattr f",
    "setflags f 0",
    "ctime-moves f 0x40",
    "ctime-moves d 0x50",
    // Immutable file.
    "open i wronly",
    "open i rdwr",
    "open i rdonly-trunc",
    "open i append",
    "open i rdonly",
    // Only without `default_permissions` (NOT_WITH_KERNEL_CHECKS).
    "access-w i",
    "access-w d",
    "fwrite i1",
    "ftrunc i1 3",
    "falloc i1",
    "truncate i 1",
    "chmod i",
    "chown i",
    "chown-none i",
    "utimes i",
    "touch i",
    "now-omit i",
    "setxattr i",
    "removexattr i",
    "link i i2",
    "unlink i",
    "rename i i3",
    "rename f i",
    // Not `rmdir i`: tmpfs answers EPERM (the flag, before ENOTDIR), but
    // through a mount the kernel answers ENOTDIR from the type it knows
    // before asking (docs/FUSE.md, "Inode flags").
    "$ cat i",
    // Append-only file.
    "open a wronly",
    "open a rdwr",
    "open a append",
    "open a append-trunc",
    "open a rdonly-trunc",
    "append a",
    "fwrite a1",
    "ftrunc a1 2",
    "falloc a1",
    "punch a1",
    "truncate a 1",
    "chmod a",
    "utimes a",
    "touch a",
    "setxattr a",
    "link a a2",
    "unlink a",
    "rename a a3",
    "$ cat a",
    "release i1",
    "release a1",
    // Immutable directory.
    "create d/n",
    "create-excl d/x",
    "open d/x wronly",
    "mkdir d/m",
    "mkdir d/x",
    "mkfifo d/p",
    "symlink d/s",
    "link f d/l",
    "unlink d/x",
    "unlink d/zz",
    "rmdir d/sub",
    "rename d/x d/y",
    "rename d/x x",
    "rename f d/f",
    "rename d/sub e/sub",
    "rename d d2",
    "rmdir d",
    "chmod d",
    "$ ls d",
    // Append-only directory.
    "create ad/n",
    "mkdir ad/m",
    "symlink ad/s",
    "link f ad/l",
    "unlink ad/x",
    "rmdir ad/sub",
    "rename ad/x ad/y",
    "rename ad/n n",
    "create h",
    "rename h ad/h",
    "create g",
    "rename g ad/n",
    "$ ls ad",
    // Flags of the owner (1000) and of someone else (1001).
    "as1000 setflags f 0x40",
    "as1000 setflags f 0x50",
    "as1000 setflags f 0x8",
    "as1001 setflags f 0x40",
    "as1001 setflags f 0",
    "$ chattr +i f",
    "as1000 setflags f 0x10",
    "as1000 setflags f 0",
    "$ chattr -i f",
    // New entries inherit nodump and noatime.
    "$ mkdir inh && chattr +dA inh && touch inh/f && mkdir inh/d",
    // noatime: a read keeps atime (the kernel's page cache of the file
    // dropped first, so that the read reaches the daemon).
    "$ echo data > na && touch -a -d @1000 na && chattr +A na",
    "$ dd if=na iflag=nocache count=0 status=none && cat na > /dev/null",
    "atime na",
    "$ chattr -A na && touch -a -d @1000 na",
    "$ dd if=na iflag=nocache count=0 status=none && cat na > /dev/null",
    "atime na",
    // Cleared, everything goes.
    "$ chattr -i i d && chattr -a a ad && rm -r i a d ad",
];

/// The paths whose `lsattr -d` is recorded after every step.
const PATHS: &[&str] = &[
    "f", "i", "a", "d", "ad", "d/x", "ad/x", "ad/n", "inh", "inh/f", "inh/d", "na",
];

fn cpath(root: &Path, p: &str) -> CString {
    CString::new(root.join(p).as_os_str().as_bytes()).unwrap()
}

/// 0 or the errno of a libc call's result `r`.
fn rc(r: libc::c_long) -> i64 {
    if r < 0 {
        errno() as i64
    } else {
        0
    }
}

fn open_flags(how: &str) -> i32 {
    match how {
        "wronly" => libc::O_WRONLY,
        "rdwr" => libc::O_RDWR,
        "rdonly" => libc::O_RDONLY,
        "rdonly-trunc" => libc::O_RDONLY | libc::O_TRUNC,
        "append" => libc::O_WRONLY | libc::O_APPEND,
        "append-trunc" => libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC,
        other => panic!("open mode {other}"),
    }
}

/// Open `p` with `flags` (and `O_NONBLOCK`, as `lsattr` does), run `f` on
/// the descriptor, close it: the open's errno, or `f`'s result.
fn with_fd(p: &CString, flags: i32, f: impl FnOnce(i32) -> i64) -> i64 {
    // SAFETY: `p` is a NUL-terminated path; the descriptor is closed here.
    let fd = unsafe { libc::open(p.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return errno() as i64;
    }
    let r = f(fd);
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    r
}

/// An ioctl on `fd` with `arg` as its buffer: 0 or the errno.
fn ioctl(fd: i32, cmd: libc::c_ulong, arg: &mut [u8]) -> i64 {
    // SAFETY: `arg` is as large as the command's argument (4 or 28 bytes).
    rc(unsafe { libc::ioctl(fd, cmd, arg.as_mut_ptr()) } as libc::c_long)
}

fn set_flags(p: &CString, flags: u32) -> i64 {
    with_fd(p, libc::O_RDONLY, |fd| {
        ioctl(fd, FS_IOC_SETFLAGS, &mut flags.to_ne_bytes())
    })
}

fn fsxattr(xflags: u32, extsize: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..4].copy_from_slice(&xflags.to_ne_bytes());
    b[4..8].copy_from_slice(&extsize.to_ne_bytes());
    b
}

fn times(p: &CString, a: libc::timespec, m: libc::timespec) -> i64 {
    let ts = [a, m];
    // SAFETY: `p` is a path, `ts` two valid timespecs.
    rc(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ts.as_ptr(), 0) } as libc::c_long)
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// Run step `s` (not a shell one) in `root`: its result as text.
fn call(root: &Path, held: &mut HashMap<String, i32>, s: &str) -> String {
    let w: Vec<&str> = s.split(' ').collect();
    let p = |i: usize| cpath(root, w[i]);
    let hex = |i: usize| u32::from_str_radix(w[i].trim_start_matches("0x"), 16).unwrap();
    let fd = |i: usize| held[w[i]];
    // SAFETY (every libc call below): paths are NUL-terminated strings,
    // descriptors are ours, buffers as large as the call says.
    let r: i64 = unsafe {
        match w[0] {
            "as1000" | "as1001" => {
                // `as1000 setflags PATH HEX`: only system calls in the
                // forked child.
                let uid = if w[0] == "as1000" { 1000 } else { 1001 };
                assert_eq!(w[1], "setflags", "{s}");
                let (path, flags) = (p(2), hex(3));
                as_ids(uid, uid, &[], move || set_flags(&path, flags) as i32) as i64
            }
            "getflags" => {
                let mut b = [0u8; 4];
                let e = with_fd(&p(1), libc::O_RDONLY, |fd| {
                    ioctl(fd, FS_IOC_GETFLAGS, &mut b)
                });
                return format!("-> {e} {:#x}", u32::from_ne_bytes(b));
            }
            "setflags" => set_flags(&p(1), hex(2)),
            "ctime-moves" => {
                // stat, set, stat again: the new ctime is seen at once.
                let ctime = || {
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::stat(p(1).as_ptr(), &mut st);
                    (st.st_ctime, st.st_ctime_nsec)
                };
                let before = ctime();
                std::thread::sleep(std::time::Duration::from_millis(20));
                let e = set_flags(&p(1), hex(2));
                return format!("-> {e} moved: {}", ctime() > before);
            }
            "fsgetxattr" => {
                let mut b = [0u8; 28];
                let e = with_fd(&p(1), libc::O_RDONLY, |fd| {
                    ioctl(fd, FS_IOC_FSGETXATTR, &mut b)
                });
                return format!("-> {e} {b:?}");
            }
            "fssetxattr" => {
                let mut b = fsxattr(hex(2), w[3].parse().unwrap());
                with_fd(&p(1), libc::O_RDONLY, |fd| {
                    ioctl(fd, FS_IOC_FSSETXATTR, &mut b)
                })
            }
            "open" => with_fd(&p(1), open_flags(w[2]), |_| 0),
            "hold" => {
                let fd = libc::open(p(2).as_ptr(), open_flags(w[3]) | libc::O_CLOEXEC);
                if fd >= 0 {
                    held.insert(w[1].to_string(), fd);
                }
                rc(fd as libc::c_long)
            }
            "release" => rc(libc::close(held.remove(w[1]).unwrap()) as libc::c_long),
            "fwrite" => rc(libc::pwrite(fd(1), b"X".as_ptr().cast(), 1, 0) as libc::c_long),
            "ftrunc" => rc(libc::ftruncate(fd(1), w[2].parse().unwrap()) as libc::c_long),
            "falloc" => rc(libc::fallocate(fd(1), 0, 0, 8192) as libc::c_long),
            "punch" => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                rc(libc::fallocate(fd(1), mode, 0, 1) as libc::c_long)
            }
            "append" => with_fd(&p(1), open_flags("append"), |fd| {
                rc(libc::write(fd, b"Y".as_ptr().cast(), 1) as libc::c_long)
            }),
            "truncate" => rc(libc::truncate(p(1).as_ptr(), w[2].parse().unwrap()) as libc::c_long),
            "access-w" => rc(libc::access(p(1).as_ptr(), libc::W_OK) as libc::c_long),
            "chmod" => rc(libc::chmod(p(1).as_ptr(), 0o600) as libc::c_long),
            "chown" => rc(libc::chown(p(1).as_ptr(), 1, 1) as libc::c_long),
            "chown-none" => rc(libc::chown(p(1).as_ptr(), u32::MAX, u32::MAX) as libc::c_long),
            "utimes" => times(&p(1), ts(1, 0), ts(2, 0)),
            "touch" => times(&p(1), ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_NOW)),
            "now-omit" => times(&p(1), ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_OMIT)),
            "atime" => {
                let mut st: libc::stat = std::mem::zeroed();
                let e = rc(libc::stat(p(1).as_ptr(), &mut st) as libc::c_long);
                return format!("-> {e} atime kept: {}", st.st_atime == 1000);
            }
            "setxattr" => {
                let n = c"user.a";
                rc(
                    libc::setxattr(p(1).as_ptr(), n.as_ptr(), b"1".as_ptr().cast(), 1, 0)
                        as libc::c_long,
                )
            }
            "removexattr" => {
                rc(libc::removexattr(p(1).as_ptr(), c"user.a".as_ptr()) as libc::c_long)
            }
            "link" => rc(libc::link(p(1).as_ptr(), p(2).as_ptr()) as libc::c_long),
            "unlink" => rc(libc::unlink(p(1).as_ptr()) as libc::c_long),
            "rmdir" => rc(libc::rmdir(p(1).as_ptr()) as libc::c_long),
            "rename" => rc(libc::rename(p(1).as_ptr(), p(2).as_ptr()) as libc::c_long),
            "mkdir" => rc(libc::mkdir(p(1).as_ptr(), 0o755) as libc::c_long),
            "mkfifo" => rc(libc::mkfifo(p(1).as_ptr(), 0o644) as libc::c_long),
            "symlink" => rc(libc::symlink(c"t".as_ptr(), p(1).as_ptr()) as libc::c_long),
            "create" => with_fd(&p(1), libc::O_CREAT | libc::O_WRONLY, |_| 0),
            "create-excl" => with_fd(&p(1), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, |_| 0),
            other => panic!("unknown step {other}"),
        }
    };
    format!("-> {r}")
}

fn sh(root: &Path, script: &str) -> String {
    let out = run_timeout(
        30,
        Command::new("sh").arg("-c").arg(script).current_dir(root),
    );
    format!(
        "-> {} {}{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Steps whose outcome through a mount differs under `-o writeback_cache`,
/// where the kernel owns a regular file's c/mtime and keeps its own ctime
/// over the one a flag change set (docs/FUSE.md, "Inode flags"). Skipped
/// on both sides when the cache is on.
const NOT_UNDER_WRITEBACK: &[&str] = &["ctime-moves f "];

/// Steps whose outcome through a mount differs with `default_permissions`:
/// `access(W_OK)` of an immutable inode is answered by the kernel's
/// `generic_permission`, which knows no flags (0; tmpfs: `EPERM`), without
/// asking the daemon (docs/FUSE.md, "Inode flags"). Skipped on both sides
/// when the kernel checks.
const NOT_WITH_KERNEL_CHECKS: &[&str] = &["access-w "];

/// Everything the steps show on the tree at `root`; `kernel_checks`: the
/// mount has `default_permissions`.
fn steps(root: &Path, kernel_checks: bool) -> Vec<String> {
    let mut held = HashMap::new();
    let mut log = Vec::new();
    for step in STEPS {
        let among = |list: &[&str]| list.iter().any(|s| step.starts_with(s));
        let skip = (writeback() && among(NOT_UNDER_WRITEBACK))
            || (kernel_checks && among(NOT_WITH_KERNEL_CHECKS));
        let r = match step.strip_prefix("$ ") {
            _ if skip => "skipped (writeback cache)".to_string(),
            Some(script) => sh(root, script),
            None => call(root, &mut held, step),
        };
        log.push(format!("{step} {r}"));
        let present: Vec<&str> = PATHS
            .iter()
            .copied()
            .filter(|p| root.join(p).symlink_metadata().is_ok())
            .collect();
        log.push(sh(root, &format!("lsattr -d {} 2>&1", present.join(" "))));
    }
    log
}

fn flags_match_tmpfs_with(args: &[&str]) {
    require_tool("chattr");
    require_tool("lsattr");
    let m = TestMount::with("chattr", args, &[]);
    let kernel_checks = !args.iter().any(|a| a.contains("no_default_permissions"));
    std::fs::set_permissions(&m.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = Tmpfs::new("chattr-tmpfs");
    let want = steps(&t.0, kernel_checks);
    // The oracle says what we expect it to (so the test tests something).
    let joined = want.join("\n");
    assert!(joined.contains("unlink i -> 1\n"), "tmpfs: {joined}");
    assert!(
        joined
            .lines()
            .any(|l| l.ends_with(" d") && l.starts_with("----i-")),
        "tmpfs: {joined}"
    );
    assert!(
        joined.contains("atime na -> 0 atime kept: true"),
        "tmpfs: {joined}"
    );
    let got = steps(&m.mnt, kernel_checks);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "step line {i}: lanefs (left) vs tmpfs (right)");
    }
    assert_eq!(got.len(), want.len());
}

/// With `default_permissions` (implied by `allow_other`).
fn flags_match_tmpfs() {
    flags_match_tmpfs_with(&["-o", "allow_other"]);
}

/// With `no_default_permissions` (`engine_checks_opts`): the engine makes
/// every permission check (the kernel still checks ownership and
/// `CAP_LINUX_IMMUTABLE` before a set).
fn flags_match_tmpfs_engine_checks() {
    if let Some(opts) = engine_checks_opts() {
        flags_match_tmpfs_with(&opts);
    }
}

/// On an image store, checked by `lanefs fsck` at the unmount.
fn flags_match_tmpfs_on_an_image() {
    on_image(&transport(), flags_match_tmpfs);
}

on_both_transports_and_writeback!(flags_match_tmpfs);
on_both_transports!(
    flags_match_tmpfs_engine_checks,
    flags_match_tmpfs_on_an_image
);
