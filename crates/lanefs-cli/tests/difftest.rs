//! Differential test through the mount: the same random sequence of
//! system calls runs on a fresh lanefs mount and on a fresh kernel tmpfs;
//! every outcome (value or errno) must agree, and so must the final trees
//! (names, types, modes, owners, sizes, link counts, contents, symlink
//! targets, xattrs). Accepted divergences (not compared): timestamps other
//! than explicitly set ones, st_blocks, inode numbers, directory st_size.
//! Sticky directories are made (`mkdir 01777`, `chmod` of any mode): with
//! `default_permissions`, as here, the kernel applies the VFS's
//! `may_create_in_sticky` to the mount as to tmpfs (`edge.rs`). Only on a
//! host with `fs.protected_symlinks`/`protected_regular`/`protected_fifos`
//! on, whose rules this run has not been checked under, is the sticky bit
//! stripped from every mode (`strip_sticky`). Until 2026-11 the sticky bit
//! was never set.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::*;

#[derive(Debug, Clone)]
enum Op {
    Create(String, u32, bool),
    Mkdir(String, u32),
    Mknod(String, u32),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, u32),
    Link(String, String),
    Symlink(String, String),
    Readlink(String),
    Write(String, u64, u32, u8, bool),
    Read(String, u64, u32),
    Truncate(String, u64),
    Punch(String, u64, u64),
    Chmod(String, u32),
    Chown(String, u32, u32),
    Utimes(String, i64),
    SetXattr(String, String, u32, u32),
    GetXattr(String, String),
    RmXattr(String, String),
    ListXattr(String),
    Stat(String),
    Lstat(String),
    ReadDir(String),
    /// Open for writing as identity `.1` (an index into IDENTITIES), then
    /// write as the op's identity: setuid/setgid follow the *writer*
    /// (root keeps them: CAP_FSETID); the mode after the write is compared.
    WriteVia(String, usize, u64, u32, u8),
    /// `posix_fallocate` through an fd opened by identity `.1`.
    FallocVia(String, usize, u64, u64),
    /// `chown(p, -1, -1)` as any identity: Linux updates ctime and drops
    /// setuid (setgid with group-exec or outside the group), which is a
    /// mode change a non-owner may not make (EPERM); compared is the
    /// result and whether ctime moved, the mode through the final tree.
    ChownKeep(String),
    /// `statx(p, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_BTIME)`:
    /// compared are the result, which of those fields came back, the
    /// type and mode, and whether the birth time is a time of this run
    /// (the times themselves differ between the two mounts).
    Statx(String),
    /// `open(dir, O_TMPFILE | O_RDWR [| O_EXCL], mode)`, write `.3`
    /// bytes, `fstat` (mode, owner, link count, size), then, if `.4` names
    /// a path, `linkat` through `/proc/self/fd` to give it that name.
    Tmpfile(String, u32, bool, u32, Option<String>),
    /// `lgetxattr` (`.2` false; the value is compared) or `lremovexattr`
    /// of a POSIX ACL name (`.1`: the default ACL, else the access ACL).
    Acl(String, bool, bool),
    /// `setxattr` of a POSIX ACL name (`.1`: the default ACL) with value
    /// `ACL_VALUES[.2]`: named entries for the identities' users and
    /// groups with masks, an ACL a mode says all of, malformed ones, a
    /// bare header (removes).
    SetAcl(String, bool, usize),
}

/// The values of `Op::SetAcl`.
fn acl_values() -> Vec<Vec<u8>> {
    const N: u32 = u32::MAX;
    let (uo, u, go, g, m, o) = (0x01u16, 0x02u16, 0x04u16, 0x08u16, 0x10u16, 0x20u16);
    vec![
        lanefs_core::posix_acl_xattr(&[(uo, 7, N), (u, 5, 1000), (go, 4, N), (m, 5, N), (o, 0, N)]),
        lanefs_core::posix_acl_xattr(&[
            (uo, 6, N),
            (u, 7, 1001),
            (go, 0, N),
            (g, 6, 2000),
            (m, 7, N),
            (o, 1, N),
        ]),
        lanefs_core::posix_acl_xattr(&[(uo, 7, N), (go, 5, N), (g, 7, 2000), (m, 3, N), (o, 4, N)]),
        lanefs_core::posix_acl_xattr(&[
            (uo, 7, N),
            (u, 7, 1000),
            (u, 6, 1001),
            (go, 7, N),
            (m, 0, N),
            (o, 5, N),
        ]),
        lanefs_core::posix_acl_xattr(&[(uo, 7, N), (u, 7, 1001), (go, 5, N), (m, 7, N), (o, 1, N)]),
        lanefs_core::posix_acl_xattr(&[(uo, 6, N), (go, 4, N), (o, 4, N)]),
        lanefs_core::posix_acl_xattr(&[(go, 7, N), (uo, 7, N), (o, 0, N)]),
        3u32.to_le_bytes().to_vec(),
        2u32.to_le_bytes().to_vec(),
    ]
}

fn gen_path(r: &mut Rng) -> String {
    let names = ["a", "b", "c", "d", "e"];
    let depth = 1 + r.below(3);
    let mut p = String::new();
    for i in 0..depth {
        if i > 0 {
            p.push('/');
        }
        p.push_str(r.pick(&names));
    }
    if r.below(50) == 0 {
        p.push_str(&"x".repeat(256)); // ENAMETOOLONG
    }
    p
}

fn gen_op(r: &mut Rng) -> Op {
    let p = gen_path(r);
    match r.below(117) {
        100..=103 => Op::WriteVia(
            p,
            r.below(IDENTITIES.len() as u64) as usize,
            r.below(20000),
            1 + r.below(9000) as u32,
            r.next() as u8,
        ),
        104..=106 => Op::FallocVia(
            p,
            r.below(IDENTITIES.len() as u64) as usize,
            r.below(20000),
            1 + r.below(9000),
        ),
        107 => Op::ChownKeep(p),
        108 => Op::Statx(p),
        112..=113 => Op::Acl(p, r.below(2) == 0, r.below(2) == 0),
        114..=116 => {
            // Mostly the root and the top-level names, where creates
            // inherit and walks search.
            let at = match r.below(3) {
                0 => ".".to_string(),
                1 => r.pick(&["a", "b", "c"]).to_string(),
                _ => p,
            };
            Op::SetAcl(
                at,
                r.below(2) == 0,
                r.below(acl_values().len() as u64) as usize,
            )
        }
        109..=111 => {
            // The directory: the root or a generated path.
            let dir = if r.below(3) == 0 { ".".to_string() } else { p };
            Op::Tmpfile(
                dir,
                [0o644, 0o600, 0o2755, 0o4755][r.below(4) as usize],
                r.below(4) == 0,
                r.below(9000) as u32,
                (r.below(4) != 0).then(|| gen_path(r)),
            )
        }
        0..=11 => Op::Create(
            p,
            [0o644, 0o600, 0o755, 0o4755, 0o2755, 0o6775, 0o2745][r.below(7) as usize],
            r.below(3) == 0,
        ),
        12..=21 => Op::Mkdir(
            p,
            [0o755, 0o700, 0o777, 0o2755, 0o1777][r.below(5) as usize],
        ),
        22..=23 => Op::Mknod(
            p,
            // S_IFCHR with rdev 0: a whiteout, which anyone may make.
            [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR][r.below(3) as usize] | 0o644,
        ),
        24..=29 => Op::Unlink(p),
        30..=34 => Op::Rmdir(p),
        35..=42 => {
            let flags = [
                0,
                0,
                0,
                libc::RENAME_NOREPLACE,
                libc::RENAME_EXCHANGE,
                libc::RENAME_WHITEOUT,
                libc::RENAME_WHITEOUT | libc::RENAME_NOREPLACE,
            ][r.below(7) as usize];
            Op::Rename(p, gen_path(r), flags)
        }
        43..=46 => Op::Link(p, gen_path(r)),
        47..=49 => Op::Symlink(gen_path(r), p),
        50..=51 => Op::Readlink(p),
        52..=61 => Op::Write(
            p,
            r.below(20000),
            1 + r.below(9000) as u32,
            r.next() as u8,
            r.below(5) == 0,
        ),
        62..=66 => Op::Read(p, r.below(20000), 1 + r.below(9000) as u32),
        67..=70 => Op::Truncate(p, r.below(30000)),
        71..=72 => Op::Punch(p, r.below(20000), 1 + r.below(9000)),
        73..=75 => Op::Chmod(p, r.below(0o10000) as u32),
        76..=77 => Op::Chown(
            p,
            [0, 1000, 1001][r.below(3) as usize],
            [0, 1000, 2000][r.below(3) as usize],
        ),
        78..=79 => Op::Utimes(p, 1_000_000 + r.below(1_000_000) as i64),
        80..=83 => {
            let flags =
                [0, libc::XATTR_CREATE as u32, libc::XATTR_REPLACE as u32][r.below(3) as usize];
            Op::SetXattr(
                p,
                format!("user.{}", r.pick(&["k1", "k2", "k3"])),
                1 + r.below(300) as u32,
                flags,
            )
        }
        84..=85 => Op::GetXattr(p, format!("user.{}", r.pick(&["k1", "k2", "k3"]))),
        86 => Op::RmXattr(p, format!("user.{}", r.pick(&["k1", "k2", "k3"]))),
        87 => Op::ListXattr(p),
        88..=92 => Op::Stat(p),
        93..=95 => Op::Lstat(p),
        96..=99 => Op::ReadDir(p),
        _ => unreachable!(),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Val {
    Unit,
    Num(i64),
    Bytes(Vec<u8>),
    Stat(StatView),
    Names(Vec<Vec<u8>>),
}

#[derive(Debug, PartialEq, Eq)]
struct StatView {
    mode: u32,
    nlink: u64,
    uid: u32,
    gid: u32,
    size: Option<i64>,
}

type Outcome = Result<Val, i32>;

fn cs(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn rc(r: libc::c_int) -> Outcome {
    if r < 0 {
        Err(errno())
    } else {
        Ok(Val::Unit)
    }
}

fn stat_view(p: &Path, follow: bool) -> Outcome {
    let c = cs(p);
    // SAFETY: zeroed stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    let r = unsafe {
        if follow {
            libc::stat(c.as_ptr(), &mut st)
        } else {
            libc::lstat(c.as_ptr(), &mut st)
        }
    };
    if r < 0 {
        return Err(errno());
    }
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    Ok(Val::Stat(StatView {
        mode: st.st_mode,
        nlink: st.st_nlink,
        uid: st.st_uid,
        gid: st.st_gid,
        size: if is_dir { None } else { Some(st.st_size) },
    }))
}

fn with_fd(p: &Path, flags: i32, f: impl FnOnce(i32) -> Outcome) -> Outcome {
    let c = cs(p);
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NONBLOCK,
            0o644,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    let r = f(fd);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    r
}

/// Who runs an op: (fsuid, fsgid, supplementary groups).
const IDENTITIES: [Ident; 4] = [
    (0, 0, &[]),
    (0, 0, &[]),
    (1000, 1000, &[2000]),
    (1001, 2000, &[]),
];

/// Switch this thread's file-system identity (raw syscalls: per thread,
/// unlike glibc's setgroups which changes every thread).
fn become_who(uid: u32, gid: u32, groups: &[u32]) {
    // SAFETY: plain syscalls on this thread's credentials; `groups` is a
    // valid array of gid_t for its length.
    unsafe {
        libc::syscall(libc::SYS_setfsuid, 0);
        libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr());
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
    }
}

/// `stat`'s ctime of `p` as (seconds, nanoseconds).
fn ctime_of(p: &Path) -> Result<(i64, i64), i32> {
    // SAFETY: zeroed stat is a valid out-buffer; valid C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::lstat(cs(p).as_ptr(), &mut st) } < 0 {
        return Err(errno());
    }
    Ok((st.st_ctime, st.st_ctime_nsec))
}

/// Open `p` for writing as identity `opener`, then run `f` on the fd as
/// `writer`; the fd is closed as the writer.
fn via_fd(p: &Path, opener: usize, writer: Ident, f: impl FnOnce(i32) -> Outcome) -> Outcome {
    let o = IDENTITIES[opener];
    become_who(o.0, o.1, o.2);
    let c = cs(p);
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    let e = errno();
    become_who(writer.0, writer.1, writer.2);
    if fd < 0 {
        return Err(e);
    }
    let r = f(fd).and_then(|v| {
        // SAFETY: zeroed stat is a valid out-buffer; fd is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } < 0 {
            return Err(errno());
        }
        Ok(Val::Bytes(
            format!("{v:?} mode={:o}", st.st_mode).into_bytes(),
        ))
    });
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    r
}

type Ident = (u32, u32, &'static [u32]);

fn apply(root: &Path, op: &Op, who: Ident) -> Outcome {
    let j = |s: &String| root.join(s);
    // SAFETY (all calls below): pointers are valid C strings / buffers that
    // outlive each call; fds are opened and closed here.
    unsafe {
        match op {
            Op::Create(p, mode, excl) => {
                let fl = libc::O_CREAT
                    | libc::O_WRONLY
                    | libc::O_NONBLOCK
                    | if *excl { libc::O_EXCL } else { 0 };
                let c = cs(&j(p));
                let fd = libc::open(c.as_ptr(), fl, *mode);
                if fd < 0 {
                    return Err(errno());
                }
                libc::close(fd);
                Ok(Val::Unit)
            }
            Op::Mkdir(p, mode) => rc(libc::mkdir(cs(&j(p)).as_ptr(), *mode)),
            Op::Mknod(p, mode) => rc(libc::mknod(cs(&j(p)).as_ptr(), *mode, 0)),
            Op::Unlink(p) => rc(libc::unlink(cs(&j(p)).as_ptr())),
            Op::Rmdir(p) => rc(libc::rmdir(cs(&j(p)).as_ptr())),
            Op::Rename(a, b, fl) => rc(libc::renameat2(
                libc::AT_FDCWD,
                cs(&j(a)).as_ptr(),
                libc::AT_FDCWD,
                cs(&j(b)).as_ptr(),
                *fl,
            )),
            Op::Link(a, b) => {
                // After the daemon drops setuid/setgid on a write, the
                // kernel's cached mode is only marked stale, and
                // `may_linkat` (protected_hardlinks) reads it without a
                // refresh: a stat first, on both sides, so that this
                // documented kernel-side gap (docs/FUSE.md,
                // FUSE_HANDLE_KILLPRIV_V2) does not fail the comparison.
                let mut st: libc::stat = std::mem::zeroed();
                libc::lstat(cs(&j(a)).as_ptr(), &mut st);
                rc(libc::link(cs(&j(a)).as_ptr(), cs(&j(b)).as_ptr()))
            }
            Op::Symlink(t, p) => rc(libc::symlink(cs(Path::new(t)).as_ptr(), cs(&j(p)).as_ptr())),
            Op::Readlink(p) => {
                let mut buf = vec![0u8; 8192];
                let n = libc::readlink(cs(&j(p)).as_ptr(), buf.as_mut_ptr().cast(), buf.len());
                if n < 0 {
                    return Err(errno());
                }
                buf.truncate(n as usize);
                Ok(Val::Bytes(buf))
            }
            Op::Write(p, off, len, fill, append) => {
                let fl = libc::O_WRONLY | if *append { libc::O_APPEND } else { 0 };
                with_fd(&j(p), fl, |fd| {
                    let data: Vec<u8> = (0..*len).map(|i| fill.wrapping_add(i as u8)).collect();
                    let n = if *append {
                        libc::write(fd, data.as_ptr().cast(), data.len())
                    } else {
                        libc::pwrite(fd, data.as_ptr().cast(), data.len(), *off as i64)
                    };
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(Val::Num(n as i64))
                    }
                })
            }
            Op::Read(p, off, len) => with_fd(&j(p), libc::O_RDONLY, |fd| {
                let mut buf = vec![0u8; *len as usize];
                let n = libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), *off as i64);
                if n < 0 {
                    return Err(errno());
                }
                buf.truncate(n as usize);
                Ok(Val::Bytes(buf))
            }),
            Op::Truncate(p, n) => rc(libc::truncate(cs(&j(p)).as_ptr(), *n as i64)),
            Op::Punch(p, off, len) => with_fd(&j(p), libc::O_WRONLY, |fd| {
                rc(libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    *off as i64,
                    *len as i64,
                ))
            }),
            Op::Chmod(p, m) => rc(libc::chmod(cs(&j(p)).as_ptr(), *m)),
            Op::Chown(p, u, g) => rc(libc::lchown(cs(&j(p)).as_ptr(), *u, *g)),
            Op::Utimes(p, t) => {
                let ts = [
                    libc::timespec {
                        tv_sec: *t,
                        tv_nsec: 5,
                    },
                    libc::timespec {
                        tv_sec: *t + 7,
                        tv_nsec: 123_456_789,
                    },
                ];
                let r = libc::utimensat(libc::AT_FDCWD, cs(&j(p)).as_ptr(), ts.as_ptr(), 0);
                if r < 0 {
                    return Err(errno());
                }
                // Explicitly set times are compared.
                let c = cs(&j(p));
                let mut st: libc::stat = std::mem::zeroed();
                if libc::stat(c.as_ptr(), &mut st) < 0 {
                    return Err(errno());
                }
                Ok(Val::Bytes(
                    format!(
                        "{}.{} {}.{}",
                        st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec
                    )
                    .into_bytes(),
                ))
            }
            Op::SetXattr(p, n, len, fl) => {
                let v = vec![b'v'; *len as usize];
                rc(libc::lsetxattr(
                    cs(&j(p)).as_ptr(),
                    CString::new(n.as_str()).unwrap().as_ptr(),
                    v.as_ptr().cast(),
                    v.len(),
                    *fl as i32,
                ))
            }
            Op::GetXattr(p, n) => {
                let mut buf = vec![0u8; 1024];
                let r = libc::lgetxattr(
                    cs(&j(p)).as_ptr(),
                    CString::new(n.as_str()).unwrap().as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                );
                if r < 0 {
                    return Err(errno());
                }
                buf.truncate(r as usize);
                Ok(Val::Bytes(buf))
            }
            Op::RmXattr(p, n) => rc(libc::lremovexattr(
                cs(&j(p)).as_ptr(),
                CString::new(n.as_str()).unwrap().as_ptr(),
            )),
            Op::ListXattr(p) => list_xattrs(&j(p)).map(Val::Names),
            Op::Stat(p) => stat_view(&j(p), true),
            Op::Lstat(p) => stat_view(&j(p), false),
            Op::WriteVia(p, opener, off, len, fill) => via_fd(&j(p), *opener, who, |fd| {
                let data: Vec<u8> = (0..*len).map(|i| fill.wrapping_add(i as u8)).collect();
                let n = libc::pwrite(fd, data.as_ptr().cast(), data.len(), *off as i64);
                if n < 0 {
                    Err(errno())
                } else {
                    Ok(Val::Num(n as i64))
                }
            }),
            Op::FallocVia(p, opener, off, len) => via_fd(&j(p), *opener, who, |fd| {
                match libc::posix_fallocate(fd, *off as i64, *len as i64) {
                    0 => Ok(Val::Unit),
                    e => Err(e),
                }
            }),
            Op::ChownKeep(p) => {
                let before = ctime_of(&j(p))?;
                // Let the clock move past the coarse tick tmpfs may use.
                // Under the writeback cache the kernel stamps a FUSE
                // file's ctime itself with its coarse clock (one tick,
                // 4 ms at HZ=250; FUSE is not a multigrain-timestamp file
                // system like tmpfs): a change within the same tick as the
                // last one shows no new ctime. That divergence is
                // documented (docs/FUSE.md, "Writeback cache"); the test
                // waits past a tick there to check everything else.
                let tick = if common::writeback() { 12 } else { 2 };
                std::thread::sleep(std::time::Duration::from_millis(tick));
                if libc::lchown(cs(&j(p)).as_ptr(), u32::MAX, u32::MAX) < 0 {
                    return Err(errno());
                }
                Ok(Val::Num((ctime_of(&j(p))? != before) as i64))
            }
            Op::Tmpfile(dir, mode, excl, len, name) => {
                let fl = libc::O_TMPFILE
                    | libc::O_RDWR
                    | libc::O_CLOEXEC
                    | if *excl { libc::O_EXCL } else { 0 };
                let fd = libc::open(cs(&j(dir)).as_ptr(), fl, *mode);
                if fd < 0 {
                    return Err(errno());
                }
                let data = vec![b't'; *len as usize];
                let n = libc::write(fd, data.as_ptr().cast(), data.len());
                let mut st: libc::stat = std::mem::zeroed();
                let r = libc::fstat(fd, &mut st);
                let mut desc = format!(
                    "wrote={n} fstat={r} mode={:o} uid={} gid={} nlink={} size={}",
                    st.st_mode, st.st_uid, st.st_gid, st.st_nlink, st.st_size
                );
                if let Some(to) = name {
                    let proc_path = cs(Path::new(&format!("/proc/self/fd/{fd}")));
                    let r = libc::linkat(
                        libc::AT_FDCWD,
                        proc_path.as_ptr(),
                        libc::AT_FDCWD,
                        cs(&j(to)).as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    );
                    let e = if r < 0 { errno() } else { 0 };
                    libc::fstat(fd, &mut st);
                    desc.push_str(&format!(" link={r}/{e} nlink={}", st.st_nlink));
                }
                libc::close(fd);
                Ok(Val::Bytes(desc.into_bytes()))
            }
            Op::Acl(p, default, remove) => {
                let name = if *default {
                    c"system.posix_acl_default"
                } else {
                    c"system.posix_acl_access"
                };
                let c = cs(&j(p));
                if *remove {
                    rc(libc::lremovexattr(c.as_ptr(), name.as_ptr()))
                } else {
                    let mut buf = [0u8; 256];
                    let n =
                        libc::lgetxattr(c.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 256);
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(Val::Bytes(buf[..n as usize].to_vec()))
                    }
                }
            }
            Op::SetAcl(p, default, which) => {
                let name = if *default {
                    c"system.posix_acl_default"
                } else {
                    c"system.posix_acl_access"
                };
                let v = &acl_values()[*which];
                rc(libc::setxattr(
                    cs(&j(p)).as_ptr(),
                    name.as_ptr(),
                    v.as_ptr().cast(),
                    v.len(),
                    0,
                ))
            }
            Op::Statx(p) => {
                let want = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
                let mut sx: libc::statx = std::mem::zeroed();
                let r = libc::statx(
                    libc::AT_FDCWD,
                    cs(&j(p)).as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                    want,
                    &mut sx,
                );
                if r < 0 {
                    return Err(errno());
                }
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs() as i64;
                // Made during this run: within the last day, not later
                // than now.
                let born = sx.stx_btime.tv_sec;
                let recent = born <= now && born > now - 86_400;
                Ok(Val::Bytes(
                    format!(
                        "mask={:#x} mode={:o} btime_recent={recent}",
                        sx.stx_mask & want,
                        sx.stx_mode
                    )
                    .into_bytes(),
                ))
            }
            Op::ReadDir(p) => match std::fs::read_dir(j(p)) {
                Ok(it) => {
                    let mut v: Vec<Vec<u8>> = it
                        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
                        .collect();
                    v.sort();
                    Ok(Val::Names(v))
                }
                Err(e) => Err(e.raw_os_error().unwrap_or(0)),
            },
        }
    }
}

fn list_xattrs(p: &Path) -> Result<Vec<Vec<u8>>, i32> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C string and buffer.
    let n = unsafe { libc::llistxattr(cs(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(errno());
    }
    buf.truncate(n as usize);
    let mut v: Vec<Vec<u8>> = buf
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        // Security/system attributes differ between file systems.
        .filter(|s| s.starts_with(b"user."))
        .map(|s| s.to_vec())
        .collect();
    v.sort();
    Ok(v)
}

fn snapshot(root: &Path, rel: &Path, out: &mut BTreeMap<String, String>) {
    let mut names: Vec<_> = std::fs::read_dir(root.join(rel))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for n in names {
        let r = rel.join(&n);
        let p = root.join(&r);
        let Ok(Val::Stat(st)) = stat_view(&p, false) else {
            panic!("lstat {}", p.display())
        };
        let mut desc = format!("{st:?} xattrs={:?}", list_xattrs(&p));
        match st.mode & libc::S_IFMT {
            libc::S_IFREG => {
                let data = std::fs::read(&p).unwrap();
                let h = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
                });
                desc.push_str(&format!(" len={} fnv={h:x}", data.len()));
            }
            libc::S_IFLNK => {
                desc.push_str(&format!(" -> {:?}", std::fs::read_link(&p).unwrap()));
            }
            _ => {}
        }
        out.insert(r.to_string_lossy().into_owned(), desc);
        if st.mode & libc::S_IFMT == libc::S_IFDIR {
            snapshot(root, &r, out);
        }
    }
}

/// Whether the host applies `fs.protected_symlinks`, `protected_regular`
/// or `protected_fifos` (as `lanefs_difftest::host_protects_sticky_dirs`).
fn host_protects_sticky_dirs() -> bool {
    ["protected_symlinks", "protected_regular", "protected_fifos"]
        .iter()
        .any(|f| {
            std::fs::read_to_string(format!("/proc/sys/fs/{f}"))
                .map(|s| s.trim() != "0")
                .unwrap_or(false)
        })
}

/// Take the sticky bit off the mode `op` sets, if it sets one.
fn strip_sticky(op: &mut Op) {
    if let Op::Mkdir(_, mode) | Op::Chmod(_, mode) = op {
        *mode &= !0o1000;
    }
}

fn syscalls_match_tmpfs() {
    require_tool("mount");
    let ops = env_count("LANEFS_DIFF_OPS", 50_000);
    let seed = env_seed("LANEFS_DIFF_SEED");
    eprintln!("difftest: {ops} ops, seed {seed:#x} (LANEFS_DIFF_SEED to replay)");
    let m = TestMount::with("diff", &["-o", "allow_other,default_permissions"], &[]);
    // The oracle, mounted `nodev` as a lanefs mount is by default: opening
    // a device node (a whiteout `RENAME_WHITEOUT` left) is `EACCES` on both.
    let t = Tmpfs::with("diff-tmpfs", "size=256m,nodev");
    // Same root permissions on both.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&m.mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&t.0, std::fs::Permissions::from_mode(0o777)).unwrap();

    let strip = host_protects_sticky_dirs();
    let mut r = Rng(seed);
    let mut log: Vec<String> = Vec::new();
    for i in 0..ops {
        let mut op = gen_op(&mut r);
        if strip {
            strip_sticky(&mut op);
        }
        let who = IDENTITIES[r.below(IDENTITIES.len() as u64) as usize];
        become_who(who.0, who.1, who.2);
        let a = apply(&m.mnt, &op, who);
        let b = apply(&t.0, &op, who);
        become_who(0, 0, &[]);
        log.push(format!("{i}: as {}:{} {op:?} -> {b:?}", who.0, who.1));
        if a != b {
            let full = std::env::temp_dir().join(format!("lanefs-difftest-{seed:x}.log"));
            let _ = std::fs::write(&full, log.join("\n"));
            eprintln!("full history in {}", full.display());
            panic!(
                "op {i} differs (seed {seed:#x}):\n  as {who:?} {op:?}\n  lanefs: {a:?}\n  tmpfs:  {b:?}\nhistory:\n{}",
                log[log.len().saturating_sub(30)..].join("\n")
            );
        }
    }
    let mut sa = BTreeMap::new();
    let mut sb = BTreeMap::new();
    snapshot(&m.mnt, Path::new(""), &mut sa);
    snapshot(&t.0, Path::new(""), &mut sb);
    assert_eq!(sa, sb, "final trees differ (seed {seed:#x})");
    eprintln!("difftest: ok, {} entries in the final tree", sa.len());
}

on_both_transports_and_writeback!(syscalls_match_tmpfs,);
