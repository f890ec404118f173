//! The harness of the `std_parity_*` tests, which use the library as a
//! user of `std::fs` would, differentially: each test does the same thing
//! through [`lanefs::Filesystem`] and through `std::fs` /
//! `std::os::unix::fs` on a fresh directory of a tmpfs mounted for it
//! (a [`Pair`]: unmounted on drop, also when the test fails), and compares
//! the values, the `io::ErrorKind` and the `raw_os_error()` of each
//! outcome ([`Pair::same`], [`Pair::trees`]). Setup that must be the
//! same on both sides goes through one call each ([`Pair::write_both`],
//! [`Pair::create_dir_both`], [`Pair::symlink_both`], [`build`]).
//!
//! Where std answers with an error of its own making (no errno: a NUL byte
//! in a path, invalid UTF-8), only the kind is compared; lanefs's errno for
//! those is the one Linux would give for the same condition (`EINVAL`).
//! Tests without a std counterpart (threads, deep trees, listings that
//! change) check lanefs alone.
//!
//! Needs root (mount); without it [`pair`] says so and gives `None`, and
//! the differential tests pass. `LANEFS_PARITY_IMAGE=1` runs the library
//! on an image file instead of memory.

use std::ffi::OsStr;
use std::fmt::Debug;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use lanefs::Filesystem;
use lanefs_difftest::TmpfsMount;

/// A tmpfs directory (std's side) and an empty lanefs (the library's side),
/// both with the process's umask.
pub struct Pair {
    // Field order: the file system goes before its image's directory.
    pub fs: Filesystem,
    _image_dir: Option<tempfile::TempDir>,
    _mount: TmpfsMount,
    pub root: PathBuf,
    pub mismatches: Vec<String>,
}

fn process_umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("Umask:"))
        .expect("Umask line");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).expect("octal umask")
}

pub fn pair() -> Option<Pair> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("std_parity: skipped (needs root to mount a tmpfs)");
        return None;
    }
    let mount = TmpfsMount::new().expect("mount a tmpfs");
    let root = mount.fresh_dir().expect("fresh dir");
    // LANEFS_PARITY_IMAGE=1: the library on an image file instead of memory.
    let (fs, image_dir) = if std::env::var_os("LANEFS_PARITY_IMAGE").is_some() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fs = Filesystem::create_image(dir.path().join("fs.img"), 64 << 20).expect("image");
        (fs, Some(dir))
    } else {
        (Filesystem::new_in_memory().expect("lanefs"), None)
    };
    Some(Pair {
        fs: fs.with_umask(process_umask()),
        _image_dir: image_dir,
        _mount: mount,
        root,
        mismatches: Vec::new(),
    })
}

/// What is compared of an error.
fn err_key(e: &io::Error) -> (io::ErrorKind, Option<i32>) {
    (e.kind(), e.raw_os_error())
}

impl Pair {
    /// `path` (absolute in lanefs) on the tmpfs.
    pub fn k<P: AsRef<Path>>(&self, path: P) -> PathBuf {
        let b = path.as_ref().as_os_str().as_bytes();
        let mut out = self.root.as_os_str().as_bytes().to_vec();
        if !b.starts_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(b);
        PathBuf::from(OsStr::from_bytes(&out))
    }

    /// Setup: write `data` to `path` on both sides.
    #[track_caller]
    pub fn write_both<P: AsRef<Path>, D: AsRef<[u8]>>(&self, path: P, data: D) {
        self.fs.write(&path, &data).unwrap();
        std::fs::write(self.k(path), data).unwrap();
    }

    /// Setup: make the directory `path` on both sides.
    #[track_caller]
    pub fn create_dir_both<P: AsRef<Path>>(&self, path: P) {
        self.fs.create_dir(&path).unwrap();
        std::fs::create_dir(self.k(path)).unwrap();
    }

    /// Setup: make the symlink `link` to `target` on both sides.
    #[track_caller]
    pub fn symlink_both<T: AsRef<Path>, L: AsRef<Path>>(&self, target: T, link: L) {
        self.fs.symlink(&target, &link).unwrap();
        std::os::unix::fs::symlink(target, self.k(link)).unwrap();
    }

    /// Record a difference between the library's outcome `l` and std's `s`.
    #[track_caller]
    pub fn same<T: PartialEq + Debug>(&mut self, what: &str, l: &io::Result<T>, s: &io::Result<T>) {
        let ok = match (l, s) {
            (Ok(a), Ok(b)) => a == b,
            // std's own errors (no errno): the kind only.
            (Err(a), Err(b)) if b.raw_os_error().is_none() => a.kind() == b.kind(),
            (Err(a), Err(b)) => err_key(a) == err_key(b),
            _ => false,
        };
        if !ok {
            self.mismatches
                .push(format!("{what}: lanefs {l:?}, std {s:?}"));
        }
    }

    /// Both trees below the root, as (path, kind, perm, size, content or
    /// link target), sorted.
    pub fn trees(&mut self, what: &str) {
        let l = lane_tree(&self.fs, Path::new("/"));
        let s = std_tree(&self.root, Path::new("/"));
        if l != s {
            let only_l: Vec<_> = l.iter().filter(|r| !s.contains(r)).collect();
            let only_s: Vec<_> = s.iter().filter(|r| !l.contains(r)).collect();
            self.mismatches.push(format!(
                "{what}: trees differ\n  only lanefs {only_l:?}\n  only std {only_s:?}"
            ));
        }
    }

    #[track_caller]
    pub fn finish(self) {
        assert!(
            self.mismatches.is_empty(),
            "{} difference(s):\n{}",
            self.mismatches.len(),
            self.mismatches.join("\n")
        );
    }
}

pub type TreeRow = (PathBuf, &'static str, u32, u64, Vec<u8>);

fn lane_tree(fs: &Filesystem, dir: &Path) -> Vec<TreeRow> {
    let mut out = Vec::new();
    for e in fs.read_dir(dir).expect("lanefs read_dir") {
        let p = dir.join(e.expect("entry").file_name());
        let m = fs.symlink_metadata(&p).expect("lanefs lstat");
        if m.is_dir() {
            out.push((p.clone(), "dir", m.permissions(), m.len(), Vec::new()));
            out.extend(lane_tree(fs, &p));
        } else if m.is_symlink() {
            let t = fs.read_link(&p).expect("readlink");
            let t = t.as_os_str().as_bytes().to_vec();
            out.push((p, "link", 0, m.len(), t));
        } else {
            let data = fs.read(&p).unwrap_or_default();
            out.push((p, "file", m.permissions(), m.len(), data));
        }
    }
    out.sort();
    out
}

fn std_tree(root: &Path, dir: &Path) -> Vec<TreeRow> {
    let mut out = Vec::new();
    let real = root.join(dir.strip_prefix("/").expect("absolute"));
    for e in std::fs::read_dir(&real).expect("std read_dir") {
        let p = dir.join(e.expect("entry").file_name());
        let rp = root.join(p.strip_prefix("/").expect("absolute"));
        let m = std::fs::symlink_metadata(&rp).expect("std lstat");
        let perm = m.permissions().mode() & 0o7777;
        if m.is_dir() {
            out.push((p.clone(), "dir", perm, m.len(), Vec::new()));
            out.extend(std_tree(root, &p));
        } else if m.file_type().is_symlink() {
            let t = std::fs::read_link(&rp).expect("readlink");
            let t = t.as_os_str().as_bytes().to_vec();
            out.push((p, "link", 0, m.len(), t));
        } else {
            let data = std::fs::read(&rp).unwrap_or_default();
            out.push((p, "file", perm, m.len(), data));
        }
    }
    out.sort();
    out
}

pub fn unit<T>(r: io::Result<T>) -> io::Result<()> {
    r.map(|_| ())
}

/// Run the same tree-building steps on both sides.
pub fn build(p: &mut Pair, dirs: &[&str], files: &[(&str, &[u8])], links: &[(&str, &str)]) {
    for d in dirs {
        p.fs.create_dir_all(d).unwrap();
        std::fs::create_dir_all(p.k(d)).unwrap();
    }
    for (f, data) in files {
        p.write_both(f, data);
    }
    for (target, link) in links {
        p.symlink_both(target, link);
    }
}

/// `futimens` on a std file with lanefs's `TimeSet`s.
pub fn std_futimens(
    f: &std::fs::File,
    atime: Option<lanefs::TimeSet>,
    mtime: Option<lanefs::TimeSet>,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let ts = |t: Option<lanefs::TimeSet>| match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(lanefs::TimeSet::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(lanefs::TimeSet::At(t)) => libc::timespec {
            tv_sec: t.sec,
            tv_nsec: t.nsec as i64,
        },
    };
    let times = [ts(atime), ts(mtime)];
    // SAFETY: a valid descriptor and a two-element array.
    if unsafe { libc::futimens(f.as_raw_fd(), times.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
