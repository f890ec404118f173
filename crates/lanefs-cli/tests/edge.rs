//! Edge cases of single operations through a real mount, each sequence run
//! on a lanefs mount and on a fresh tmpfs (the oracle) and compared step by
//! step: results (value or errno) and what the names then are.
//!
//! `renameat2(RENAME_WHITEOUT)` (tmpfs: the source name is left naming a
//! 0/0 character device of mode 0 owned by the caller, its group as a
//! create's in that directory): a file, a directory across parents, over
//! an existing target, with `RENAME_NOREPLACE`, two names of one inode,
//! into a setgid directory, and the invalid combination with
//! `RENAME_EXCHANGE`. Until 2026-11 lanefs answered `EINVAL`.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A fresh tmpfs (the oracle), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(name: &str) -> Tmpfs {
        let dir = unique_dir(name);
        let out = run_timeout(
            30,
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "mode=0755", "none"])
                .arg(&dir),
        );
        assert!(out.status.success(), "{}", show(&out));
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `renameat2(root/a, root/b, flags)`: 0 or the errno.
fn rename2(root: &Path, a: &str, b: &str, flags: u32) -> i32 {
    let (a, b) = (c(&root.join(a)), c(&root.join(b)));
    // SAFETY: valid C strings; renameat2 takes plain integers otherwise.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// What `root/p` is: type and mode, rdev, owner, link count; a
/// directory's size; or the errno of `lstat`.
fn what(root: &Path, p: &str) -> String {
    match std::fs::symlink_metadata(root.join(p)) {
        Ok(m) => {
            let size = if m.is_dir() || m.is_file() {
                m.size()
            } else {
                0
            };
            format!(
                "{p}: mode {:o} rdev {} owner {}:{} nlink {} size {size}",
                m.mode(),
                m.rdev(),
                m.uid(),
                m.gid(),
                m.nlink()
            )
        }
        Err(e) => format!("{p}: {:?}", e.raw_os_error()),
    }
}

/// The whiteout sequence on the tree at `root`; one line per step.
fn whiteout_steps(root: &Path) -> Vec<String> {
    let mk = |p: &str| std::fs::create_dir(root.join(p)).unwrap();
    let wr = |p: &str, d: &str| std::fs::write(root.join(p), d).unwrap();
    mk("A");
    mk("B");
    mk("A/sub");
    mk("A/sub/deep");
    wr("A/f", "aaaa");
    wr("B/g", "bb");
    wr("file", "x");
    wr("h1", "h");
    std::fs::hard_link(root.join("h1"), root.join("h2")).unwrap();
    mk("sg");
    std::os::unix::fs::chown(root.join("sg"), None, Some(50)).unwrap();
    let sg = c(&root.join("sg"));
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::chmod(sg.as_ptr(), 0o2777) }, 0);
    let (wo, noreplace, exchange) = (
        libc::RENAME_WHITEOUT,
        libc::RENAME_NOREPLACE,
        libc::RENAME_EXCHANGE,
    );
    let steps: &[(&str, &str, u32, &[&str])] = &[
        ("file", "wo", wo, &["file", "wo", "."]),
        ("wo", "B/g", wo, &["wo", "B/g", "B"]),
        (
            "A/sub",
            "B/sub",
            wo,
            &["A", "B", "A/sub", "B/sub", "B/sub/deep/.."],
        ),
        ("B/g", "A/f", wo | noreplace, &["B/g", "A/f"]),
        ("B/g", "new", wo | noreplace, &["B/g", "new"]),
        ("A/f", "B/g", wo | exchange, &["A/f", "B/g"]),
        ("missing", "x", wo, &["missing", "x"]),
        ("h1", "h2", wo, &["h1", "h2"]),
        ("new", "sg/n", 0, &["new", "sg/n"]),
        ("sg/n", "sg/m", wo, &["sg/n", "sg/m", "sg"]),
        ("B/sub", "A/sub", 0, &["B/sub", "A/sub"]),
        ("new", "A/sub", 0, &["new", "A/sub", "A"]),
    ];
    let mut out = Vec::new();
    for (a, b, flags, show) in steps {
        out.push(format!(
            "renameat2({a}, {b}, {flags:#x}) = {}",
            rename2(root, a, b, *flags)
        ));
        out.extend(show.iter().map(|p| what(root, p)));
    }
    out
}

fn rename_whiteout_matches_tmpfs() {
    let m = TestMount::new("whiteout");
    let t = Tmpfs::new("whiteout-tmpfs");
    let got = whiteout_steps(&m.mnt);
    let want = whiteout_steps(&t.0);
    assert!(
        want.iter().any(|l| l.contains("mode 20000 rdev 0")),
        "tmpfs made no whiteout: {want:#?}"
    );
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            g, w,
            "lanefs (left) vs tmpfs (right)\nall of tmpfs: {want:#?}"
        );
    }
    assert_eq!(got.len(), want.len());
}

on_both_transports!(rename_whiteout_matches_tmpfs);
