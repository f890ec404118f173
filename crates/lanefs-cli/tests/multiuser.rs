//! Multi-user semantics through a real mount, with a fresh tmpfs as the
//! oracle where Linux decides: `chown(f, -1, -1)` by a non-owner of a
//! setuid/setgid file (EPERM) and of a plain one (ctime moves), writes by
//! a non-owner through their own fd (bits dropped, the write not refused),
//! and the dropped bits visible at once despite a long attribute timeout;
//! the engine's atime policy from `noatime`/`strictatime`/`nodiratime`;
//! who may enter a mount (`allow_root`, none of them) and the mount flags
//! `noexec`/`nosuid`/`nodev`/`sync`/`dirsync`; `execve` asks for execute,
//! not read, permission (against tmpfs, with and without
//! `default_permissions`). Both transports; root.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::*;

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// What one case ends in: the call's result (0 or errno), the mode
/// afterwards, and whether ctime moved.
type Outcome = (String, i32, u32, bool);

/// The cases, run in directory `dir`: files owned by 1000:1000, the
/// caller 1001:1001 (outside the group) or the owner.
fn chown_and_write_cases(dir: &Path) -> Vec<Outcome> {
    let cases: &[(&str, u32, u32, &str)] = &[
        // name, mode, caller, what
        ("suid", 0o4755, 1001, "chown"),
        ("sgid_gx", 0o2755, 1001, "chown"),
        ("sgid_nogx", 0o2745, 1001, "chown"),
        ("plain", 0o644, 1001, "chown"),
        ("sticky", 0o1755, 1001, "chown"),
        ("owner_suid", 0o6755, 1000, "chown"),
        ("w_suid_sgid", 0o6777, 1001, "write"),
        ("w_sgid_nogx", 0o2776, 1001, "write"),
        ("w_owner", 0o6775, 1000, "write"),
    ];
    let mut out = Vec::new();
    for &(name, mode, caller, what) in cases {
        let p = dir.join(name);
        std::fs::write(&p, b"0123").unwrap();
        std::os::unix::fs::chown(&p, Some(1000), Some(1000)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let before = std::fs::metadata(&p).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(15));
        let c = c_path(&p);
        let r = as_ids(caller, caller, &[], || {
            // SAFETY: c is a valid C string; the buffer outlives the write.
            unsafe {
                if what == "chown" {
                    if libc::chown(c.as_ptr(), u32::MAX, u32::MAX) != 0 {
                        return errno();
                    }
                    return 0;
                }
                let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_APPEND);
                if fd < 0 {
                    return errno();
                }
                let r = if libc::write(fd, b"x".as_ptr().cast(), 1) == 1 {
                    0
                } else {
                    errno()
                };
                libc::close(fd);
                r
            }
        });
        let after = std::fs::metadata(&p).unwrap();
        let moved = (after.ctime(), after.ctime_nsec()) != (before.ctime(), before.ctime_nsec());
        out.push((name.to_string(), r, after.mode() & 0o7777, moved));
    }
    out
}

fn chown_and_writes_by_other_users_match_tmpfs() {
    let m = TestMount::with("chownperm", &["-o", "allow_other"], &[]);
    std::fs::set_permissions(&m.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = Tmpfs::new("chownperm-tmpfs");
    let want = chown_and_write_cases(&t.0);
    let got = chown_and_write_cases(&m.mnt);
    // The oracle says what we expect it to (so the test tests something).
    let suid = &want[0];
    assert_eq!((suid.1, suid.2), (libc::EPERM, 0o4755), "tmpfs: {want:?}");
    assert_eq!(want[3].1, 0, "tmpfs: plain chown(-1,-1) succeeds");
    assert!(want[3].3, "tmpfs: plain chown(-1,-1) moves ctime");
    assert_eq!(got, want, "lanefs (left) vs tmpfs (right)");
}

/// A file `f` and a directory `d` (holding one entry) whose atimes are
/// set `offset` seconds from now; then `f` is read through a fresh open
/// and `d` listed. Returns whether each atime moved.
fn access_moves_atime(m: &TestMount, offset: i64) -> (bool, bool) {
    let f = m.path("f");
    let d = m.path("d");
    std::fs::write(&f, b"data").unwrap();
    std::fs::create_dir_all(d.join("e")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let at = now + offset;
    for p in [&f, &d] {
        let ts = [
            libc::timespec {
                tv_sec: at,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        ];
        let c = c_path(p);
        // SAFETY: valid C string and two timespecs.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) },
            0
        );
    }
    // A fresh open (no keep_cache: the kernel drops the pages) reaches
    // the daemon's READ; a listing (no cache_dir) its READDIR.
    assert_eq!(std::fs::read(&f).unwrap(), b"data");
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    let moved = |p: &Path| std::fs::metadata(p).unwrap().atime() != at;
    (moved(&f), moved(&d))
}

fn atime_policy_follows_the_mount_options() {
    let opts = |extra: &str| format!("nokeep_cache,nocache_dir,attr_timeout=0{extra}");
    let m = TestMount::with("relatime", &["-o", &opts("")], &[]);
    assert_eq!(
        access_moves_atime(&m, -3600),
        (true, true),
        "relatime, stale atime"
    );
    assert_eq!(
        access_moves_atime(&m, 3600),
        (false, false),
        "relatime, fresh atime"
    );
    drop(m);
    let m = TestMount::with("noatime", &["-o", &opts(",noatime")], &[]);
    assert_eq!(access_moves_atime(&m, -3600), (false, false), "noatime");
    drop(m);
    let m = TestMount::with("strictatime", &["-o", &opts(",strictatime")], &[]);
    assert_eq!(access_moves_atime(&m, 3600), (true, true), "strictatime");
    drop(m);
    let m = TestMount::with("nodiratime", &["-o", &opts(",strictatime,nodiratime")], &[]);
    assert_eq!(access_moves_atime(&m, 3600), (true, false), "nodiratime");
}

/// stat(2) of `p` as user `id`: 0 or the errno.
fn stat_as(id: u32, p: &Path) -> i32 {
    let c = c_path(p);
    as_ids(id, id, &[], || {
        // SAFETY: valid C string and a stat buffer on the child's stack.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::stat(c.as_ptr(), &mut st) != 0 {
                return errno();
            }
        }
        0
    })
}

/// Without allow_other nobody but the mounting user (root here) gets in;
/// with allow_root only root (the daemon refuses the rest); with
/// allow_other everybody, with the kernel checking permissions.
fn who_may_enter_the_mount() {
    let m = TestMount::new("private");
    std::fs::write(m.path("f"), b"").unwrap();
    assert_eq!(stat_as(0, &m.path("f")), 0);
    assert_eq!(
        stat_as(1000, &m.path("f")),
        libc::EACCES,
        "not opened to others"
    );
    drop(m);
    let m = TestMount::with("allowroot", &["-o", "allow_root"], &[]);
    std::fs::write(m.path("f"), b"").unwrap();
    assert_eq!(stat_as(0, &m.path("f")), 0);
    assert_eq!(
        stat_as(1000, &m.path("f")),
        libc::EACCES,
        "allow_root admits only root"
    );
    drop(m);
    let m = TestMount::with("allowother", &["-o", "allow_other"], &[]);
    std::fs::create_dir(m.path("closed")).unwrap();
    std::fs::write(m.path("closed/f"), b"").unwrap();
    std::fs::set_permissions(m.path("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(stat_as(1000, &m.path("closed")), 0);
    assert_eq!(
        stat_as(1000, &m.path("closed/f")),
        libc::EACCES,
        "default_permissions"
    );
}

/// The per-mount and superblock options of the mount at `p` (mountinfo).
fn mount_options(p: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = p.to_string_lossy().to_string();
    let line = info
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .expect("not in mountinfo")
        .to_string();
    let f: Vec<&str> = line.split(' ').collect();
    let sep = f.iter().position(|x| *x == "-").unwrap();
    f[5].split(',')
        .chain(f[sep + 3].split(','))
        .map(String::from)
        .collect()
}

/// Run `script`; retried on ETXTBSY, which a concurrent test's fork
/// (holding a copy of our just-closed write fd until it execs or exits)
/// can cause.
fn run_script(script: &Path) -> std::io::Result<std::process::ExitStatus> {
    for _ in 0..50 {
        match Command::new(script).status() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r,
        }
    }
    Command::new(script).status()
}

fn mount_flags_reach_the_kernel() {
    let m = TestMount::with(
        "flags",
        &["-o", "noexec,nosuid,nodev,sync,dirsync,noatime"],
        &[],
    );
    let o = mount_options(&m.mnt);
    for want in ["noexec", "nosuid", "nodev", "sync", "dirsync", "noatime"] {
        assert!(o.iter().any(|x| x == want), "{want} missing: {o:?}");
    }
    let script = m.path("run.sh");
    std::fs::write(&script, b"#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = run_script(&script).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "noexec: {e}");
    drop(m);
    // Control: the same script runs on a mount with `exec`, and the
    // defaults are nosuid,nodev.
    let m = TestMount::with("exec", &["-o", "exec"], &[]);
    let o = mount_options(&m.mnt);
    assert!(
        o.iter().any(|x| x == "nosuid") && o.iter().any(|x| x == "nodev"),
        "{o:?}"
    );
    let script = m.path("run.sh");
    std::fs::write(&script, b"#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(run_script(&script).unwrap().success());
}

/// `execve` of a copy of `/bin/true` with each mode, as user 1000 and as
/// root, in directory `dir`: "MODE as UID: 0" (it ran) or the errno.
fn exec_cases(dir: &Path) -> Vec<String> {
    let modes = [0o711, 0o744, 0o700, 0o755, 0o644, 0o100];
    let mut out = Vec::new();
    for mode in modes {
        let p = dir.join(format!("prog{mode:o}"));
        std::fs::copy("/bin/true", &p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let c = c_path(&p);
        for id in [1000, 0] {
            let r = as_ids(id, id, &[], || {
                let argv = [c.as_ptr(), std::ptr::null()];
                // Retried on ETXTBSY: a concurrent test's fork may hold
                // a copy of the copy's just-closed write fd.
                for _ in 0..50 {
                    // SAFETY: a valid C string and a null-terminated argv.
                    unsafe { libc::execv(c.as_ptr(), argv.as_ptr()) };
                    if errno() != libc::ETXTBSY {
                        break;
                    }
                    // SAFETY: plain sleep.
                    unsafe { libc::usleep(20_000) };
                }
                errno()
            });
            out.push(format!("{mode:04o} as {id}: {r}"));
        }
    }
    out
}

/// Running a program asks for execute permission, not read permission
/// (Linux's `may_open` with `MAY_EXEC`): the kernel's FUSE OPEN of an
/// `execve` carries `__FMODE_EXEC`, which the engine honours. Until
/// 2026-11 it checked read permission: a `0711` program failed `EACCES`
/// for user 1000 (and with `no_default_permissions`, where the kernel
/// asks only for some execute bit, a `0744` one ran for anyone).
fn exec_needs_execute_not_read_permission() {
    let t = Tmpfs::new("exec-tmpfs");
    let want = exec_cases(&t.0);
    let eacces = libc::EACCES;
    for case in [
        "0711 as 1000: 0".to_string(),
        format!("0744 as 1000: {eacces}"),
        format!("0644 as 0: {eacces}"),
    ] {
        assert!(want.contains(&case), "tmpfs: {want:?}");
    }
    for opts in ["allow_other", "allow_other,no_default_permissions"] {
        let m = TestMount::with("exec-perm", &["-o", opts], &[]);
        std::fs::set_permissions(&m.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let got = exec_cases(&m.mnt);
        assert_eq!(got, want, "-o {opts}: lanefs (left) vs tmpfs (right)");
    }
}

/// A non-root write that drops setuid shows at once, also where the
/// kernel cached the old mode for long (`attr_timeout=30`): the handler's
/// attribute invalidation reaches the kernel (until that notification was
/// fixed, `stat` showed 4777 for up to 30 s).
fn kill_by_a_write_shows_at_once() {
    let m = TestMount::with("killshows", &["-o", "allow_other,attr_timeout=30"], &[]);
    let f = m.path("f");
    std::fs::write(&f, b"x").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4777)).unwrap();
    let mode = || std::fs::metadata(&f).unwrap().mode() & 0o7777;
    assert_eq!(mode(), 0o4777, "cached before the write");
    let out = sh_as_user_1000(&format!("printf y >> {}", f.display()));
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(mode(), 0o777, "setuid still shown after a non-root write");
}

on_both_transports!(
    kill_by_a_write_shows_at_once,
    chown_and_writes_by_other_users_match_tmpfs,
    atime_policy_follows_the_mount_options,
    who_may_enter_the_mount,
    mount_flags_reach_the_kernel,
    exec_needs_execute_not_read_permission,
);
