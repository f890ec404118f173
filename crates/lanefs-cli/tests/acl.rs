//! POSIX ACLs through a real mount, against a fresh tmpfs (the oracle):
//! the same `setfacl`/`getfacl`/`chmod`/create sequence (under `umask
//! 077`, in a directory with a default ACL) on both, comparing every
//! `getfacl -n` listing, every mode, every command's exit status, and
//! then the outcome of opens, `access` and creates by users 1000
//! (named in the ACLs), 1001 (not named) and 1002 (in the owning group
//! and in a named group). On a mount with `default_permissions` (implied
//! by `allow_other`: the kernel evaluates the ACLs, `FUSE_POSIX_ACL`), one
//! with `no_default_permissions` (the engine alone does), and on an image
//! store. Root; `setfacl`/`getfacl` from the `acl` package.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;

/// The shell steps, run as root in the tree's root under `umask 077`;
/// after each, its exit status and `getfacl -n` of every path named, and
/// `stat -c '%n %a'` of them, are recorded.
const STEPS: &[&str] = &[
    "touch f && chmod 644 f",
    "setfacl -m u:1000:rw,g:2000:r f",
    "setfacl -m m::r f",
    "chmod 660 f",
    "chmod 604 f",
    "setfacl -m u:1000:rw,g::r f && chmod 640 f",
    "setfacl -d -m u:1000:rw f",
    "mkdir -m 755 d && setfacl -m u:1000:rwx,g::-,o::- d",
    "setfacl -d -m u:1000:rwx,g::rx,g:2000:rwx,o::x d",
    "touch d/new && mkdir d/sub && mkfifo d/fifo && ln -s new d/sym",
    "mkdir d/sub/deeper && touch d/sub/deeper/leaf",
    "setfacl -x u:1000 d/new",
    "setfacl -k d/sub && touch d/sub/plain",
    "setfacl -b d/fifo",
    "setfacl --set u::rw,g::r,o::- d/new",
    "touch g && chown 0:2000 g && chmod 2770 g && setfacl -m u:1000:r g",
    "setfacl -m u:1000:r d/sym",
];

const PATHS: &[&str] = &[
    "f",
    "g",
    "d",
    "d/new",
    "d/sub",
    "d/fifo",
    "d/sub/deeper",
    "d/sub/deeper/leaf",
    "d/sub/plain",
];

fn sh(root: &Path, script: &str) -> (i32, String) {
    let out = run_timeout(
        30,
        Command::new("sh")
            .arg("-c")
            .arg(format!("umask 077; {script}"))
            .current_dir(root),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), text)
}

/// Everything the steps show on the tree at `root`.
fn steps(root: &Path) -> Vec<String> {
    let mut log = Vec::new();
    for step in STEPS {
        let (rc, _) = sh(root, step);
        log.push(format!("$ {step} -> {rc}"));
        for p in PATHS {
            if !root.join(p).exists() {
                continue;
            }
            let (_, acl) = sh(root, &format!("getfacl -n {p} 2>&1"));
            let (_, mode) = sh(root, &format!("stat -c '%n %a %u %g' {p}"));
            log.push(format!("{}{acl}", mode.trim_end()));
        }
    }
    log
}

/// Opens, `access` and creates by three users on the tree the steps
/// left, each as (user, what, path, result).
fn accesses(root: &Path) -> Vec<(u32, &'static str, &'static str, i32)> {
    let users: [(u32, u32, &[u32]); 3] = [(1000, 1000, &[]), (1001, 1001, &[]), (1002, 0, &[2000])];
    let cases: &[(&str, &str)] = &[
        ("read", "f"),
        ("write", "f"),
        ("read", "g"),
        ("write", "g"),
        ("read", "d/new"),
        ("write", "d/new"),
        ("read", "d/sub/deeper/leaf"),
        ("write", "d/sub/deeper/leaf"),
        ("read", "d/sub/plain"),
        ("search", "d"),
        ("search", "d/sub"),
        ("list", "d"),
        ("create", "d/by-user"),
        ("create", "d/sub/by-user"),
        ("exec", "d/sub/deeper"),
    ];
    let mut out = Vec::new();
    for (uid, gid, groups) in users {
        for &(what, p) in cases {
            let path = root.join(p);
            let c = CString::new(path.as_os_str().as_bytes()).unwrap();
            let r = as_ids(uid, gid, groups, || {
                // SAFETY: c is a valid C string.
                unsafe {
                    let rc = match what {
                        "read" => libc::open(c.as_ptr(), libc::O_RDONLY),
                        "write" => libc::open(c.as_ptr(), libc::O_WRONLY),
                        "list" => libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY),
                        "search" => libc::access(c.as_ptr(), libc::X_OK),
                        "exec" => libc::access(c.as_ptr(), libc::R_OK | libc::X_OK),
                        "create" => libc::open(
                            c.as_ptr(),
                            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                            0o666,
                        ),
                        _ => unreachable!(),
                    };
                    if rc < 0 {
                        errno()
                    } else {
                        0
                    }
                }
            });
            // A create that worked is undone, so that the next user's
            // create meets the same directory.
            if what == "create" && r == 0 {
                std::fs::remove_file(&path).unwrap();
            }
            out.push((uid, what, p, r));
        }
    }
    out
}

fn acls_match_tmpfs_with(args: &[&str]) {
    require_tool("setfacl");
    require_tool("getfacl");
    let m = TestMount::with("acl", args, &[]);
    std::fs::set_permissions(&m.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = Tmpfs::new("acl-tmpfs");
    let want = steps(&t.0);
    let got = steps(&m.mnt);
    // The oracle says what we expect it to (so the test tests something).
    let joined = want.join("\n");
    assert!(
        joined.contains("user:1000:rw-\t#effective:r--"),
        "tmpfs: {joined}"
    );
    assert!(joined.contains("default:group:2000:rwx"), "tmpfs: {joined}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "step line {i}: lanefs (left) vs tmpfs (right)");
    }
    assert_eq!(got.len(), want.len());
    let want = accesses(&t.0);
    assert!(
        want.contains(&(1000, "create", "d/by-user", 0)),
        "tmpfs: {want:?}"
    );
    assert!(
        want.contains(&(1001, "search", "d", libc::EACCES)),
        "tmpfs: {want:?}"
    );
    let got = accesses(&m.mnt);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "lanefs (left) vs tmpfs (right)");
    }
}

/// With `default_permissions` (here implied by `allow_other`): the
/// kernel checks, with `FUSE_POSIX_ACL`.
fn acls_match_tmpfs() {
    acls_match_tmpfs_with(&["-o", "allow_other"]);
}

/// With `no_default_permissions` (`engine_checks_opts`): no
/// `FUSE_POSIX_ACL`, the engine checks alone.
fn acls_match_tmpfs_engine_checks() {
    if let Some(opts) = engine_checks_opts() {
        acls_match_tmpfs_with(&opts);
    }
}

/// On an image store, checked by `lanefs fsck` at the unmount.
fn acls_match_tmpfs_on_an_image() {
    on_image(&transport(), acls_match_tmpfs);
}

on_both_transports!(
    acls_match_tmpfs,
    acls_match_tmpfs_engine_checks,
    acls_match_tmpfs_on_an_image
);
