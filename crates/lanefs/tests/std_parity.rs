//! The library used as a user of `std::fs` would, differentially: each test
//! does the same thing through [`lanefs::Filesystem`] and through
//! `std::fs` / `std::os::unix::fs` on a fresh directory of a tmpfs mounted
//! for it (unmounted on drop, also when the test fails), and compares the
//! values, the `io::ErrorKind` and the `raw_os_error()` of each outcome.
//!
//! Where std answers with an error of its own making (no errno: a NUL byte
//! in a path, invalid UTF-8), only the kind is compared; lanefs's errno for
//! those is the one Linux would give for the same condition (`EINVAL`).
//!
//! Calls about the root itself and absolute symlinks run std's side on a
//! thread `chroot`ed into the tmpfs directory (`unshare(CLONE_FS)` first);
//! calls of an unprivileged user run it on a thread with per-thread
//! `setfsuid`/`setfsgid`/`setgroups`, beside a lanefs view with that
//! credential. Tests without a std counterpart (threads, deep trees,
//! listings that change) check lanefs alone.
//!
//! Needs root (mount, chroot, setfsuid); without it the differential tests
//! say so and pass. `LANEFS_PARITY_IMAGE=1` runs the library on an image
//! file instead of memory.

use std::ffi::OsStr;
use std::fmt::Debug;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use lanefs::Filesystem;
use lanefs_difftest::TmpfsMount;

/// A tmpfs directory (std's side) and an empty lanefs (the library's side),
/// both with the process's umask.
struct Pair {
    // Field order: the file system goes before its image's directory.
    fs: Filesystem,
    _image_dir: Option<tempfile::TempDir>,
    _mount: TmpfsMount,
    root: PathBuf,
    mismatches: Vec<String>,
}

fn process_umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("Umask:"))
        .expect("Umask line");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).expect("octal umask")
}

fn pair() -> Option<Pair> {
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
    fn k<P: AsRef<Path>>(&self, path: P) -> PathBuf {
        let b = path.as_ref().as_os_str().as_bytes();
        let mut out = self.root.as_os_str().as_bytes().to_vec();
        if !b.starts_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(b);
        PathBuf::from(OsStr::from_bytes(&out))
    }

    /// Record a difference between the library's outcome `l` and std's `s`.
    #[track_caller]
    fn same<T: PartialEq + Debug>(&mut self, what: &str, l: &io::Result<T>, s: &io::Result<T>) {
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
    fn trees(&mut self, what: &str) {
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
    fn finish(self) {
        assert!(
            self.mismatches.is_empty(),
            "{} difference(s):\n{}",
            self.mismatches.len(),
            self.mismatches.join("\n")
        );
    }
}

type TreeRow = (PathBuf, &'static str, u32, u64, Vec<u8>);

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

fn unit<T>(r: io::Result<T>) -> io::Result<()> {
    r.map(|_| ())
}

// ---- OpenOptions ----------------------------------------------------------

/// What the existing name is before an open.
#[derive(Clone, Copy, Debug)]
enum Before {
    Missing,
    File,
    DanglingLink,
    LinkToFile,
    Dir,
}

#[test]
fn open_options_matrix() {
    let Some(mut p) = pair() else { return };
    let befores = [
        Before::Missing,
        Before::File,
        Before::DanglingLink,
        Before::LinkToFile,
        Before::Dir,
    ];
    let mut n = 0;
    for before in befores {
        for bits in 0u32..64 {
            n += 1;
            let name = format!("/o{n}");
            let target = format!("/t{n}");
            match before {
                Before::Missing => {}
                Before::File => {
                    p.fs.write(&name, b"old content").unwrap();
                    std::fs::write(p.k(&name), b"old content").unwrap();
                }
                Before::DanglingLink | Before::LinkToFile => {
                    let t = format!("t{n}");
                    p.fs.symlink(&t, &name).unwrap();
                    std::os::unix::fs::symlink(&t, p.k(&name)).unwrap();
                    if let Before::LinkToFile = before {
                        p.fs.write(&target, b"old content").unwrap();
                        std::fs::write(p.k(&target), b"old content").unwrap();
                    }
                }
                Before::Dir => {
                    p.fs.create_dir(&name).unwrap();
                    std::fs::create_dir(p.k(&name)).unwrap();
                }
            }
            let on = |i: u32| bits & (1 << i) != 0;
            let (read, write, append, truncate, create, create_new) =
                (on(0), on(1), on(2), on(3), on(4), on(5));
            let what = format!(
                "open {before:?} read={read} write={write} append={append} \
                 truncate={truncate} create={create} create_new={create_new}"
            );
            let l = lanefs::OpenOptions::new()
                .read(read)
                .write(write)
                .append(append)
                .truncate(truncate)
                .create(create)
                .create_new(create_new)
                .open(&p.fs, &name);
            let s = std::fs::OpenOptions::new()
                .read(read)
                .write(write)
                .append(append)
                .truncate(truncate)
                .create(create)
                .create_new(create_new)
                .open(p.k(&name));
            let (mut lf, mut sf) = match (l, s) {
                (Ok(l), Ok(s)) => (l, s),
                (l, s) => {
                    let (l, s) = (unit(l), unit(s));
                    p.same(&what, &l, &s);
                    continue;
                }
            };
            let mut lb = [0u8; 3];
            let mut sb = [0u8; 3];
            let l = lf.read(&mut lb).map(|n| lb[..n].to_vec());
            let s = sf.read(&mut sb).map(|n| sb[..n].to_vec());
            p.same(&format!("{what}: read"), &l, &s);
            let l = lf.write(b"XY");
            let s = sf.write(b"XY");
            p.same(&format!("{what}: write"), &l, &s);
            let l = lf.stream_position();
            let s = sf.stream_position();
            p.same(&format!("{what}: position"), &l, &s);
            let l = lf.metadata().map(|m| (m.len(), m.permissions()));
            let s = sf
                .metadata()
                .map(|m| (m.len(), m.permissions().mode() & 0o7777));
            p.same(&format!("{what}: fstat"), &l, &s);
        }
    }
    p.trees("after the open matrix");
    p.finish();
}

#[test]
fn open_options_mode_and_custom_flags() {
    let Some(mut p) = pair() else { return };
    p.fs.write("/f", b"data").unwrap();
    std::fs::write(p.k("/f"), b"data").unwrap();
    p.fs.create_dir("/d").unwrap();
    std::fs::create_dir(p.k("/d")).unwrap();
    p.fs.symlink("f", "/lf").unwrap();
    std::os::unix::fs::symlink("f", p.k("/lf")).unwrap();
    p.fs.symlink("d", "/ld").unwrap();
    std::os::unix::fs::symlink("d", p.k("/ld")).unwrap();

    // (path, read, write, create, create_new, mode, custom flags)
    let cases: &[(&str, bool, bool, bool, bool, u32, i32)] = &[
        ("/m1", false, true, true, false, 0o640, 0),
        ("/m2", false, true, true, false, 0o4755, 0),
        ("/m3", true, true, false, true, 0o7777, 0),
        ("/m4", false, true, true, false, 0, 0),
        ("/f", false, true, true, false, 0o600, 0), // mode ignored: exists
        ("/lf", true, false, false, false, 0o666, libc::O_NOFOLLOW),
        ("/lf", false, true, true, false, 0o666, libc::O_NOFOLLOW),
        ("/ld", true, false, false, false, 0o666, libc::O_DIRECTORY),
        (
            "/ld",
            true,
            false,
            false,
            false,
            0o666,
            libc::O_DIRECTORY | libc::O_NOFOLLOW,
        ),
        ("/f", true, false, false, false, 0o666, libc::O_DIRECTORY),
        ("/d", true, false, false, false, 0o666, libc::O_DIRECTORY),
        ("/d", false, true, false, false, 0o666, libc::O_DIRECTORY),
        ("/m5", false, true, true, false, 0o666, libc::O_DIRECTORY),
        ("/f", true, false, false, false, 0o666, libc::O_EXCL),
        ("/f", true, false, false, false, 0o666, libc::O_NOATIME),
        (
            "/f",
            true,
            false,
            false,
            false,
            0o666,
            libc::O_SYNC | libc::O_DSYNC,
        ),
        ("/f", true, false, false, false, 0o666, libc::O_WRONLY), // ignored
        ("/f/", true, false, false, false, 0o666, 0),
        ("/d/", true, false, false, false, 0o666, 0),
        ("/m6/", false, true, true, false, 0o666, 0),
        ("/missing/x", false, true, true, false, 0o666, 0),
        ("/f/x", false, true, true, false, 0o666, 0),
        ("/ld/x", false, true, true, false, 0o644, 0),
        ("/ld/x", false, true, false, true, 0o644, 0),
        // Creation and truncation through the raw flags alone.
        ("/c1", true, false, false, false, 0o600, libc::O_CREAT),
        (
            "/c1",
            true,
            false,
            false,
            false,
            0o600,
            libc::O_CREAT | libc::O_EXCL,
        ),
        (
            "/lf",
            true,
            false,
            false,
            false,
            0o600,
            libc::O_CREAT | libc::O_EXCL,
        ),
        ("/f", true, false, false, false, 0o666, libc::O_TRUNC),
        ("/d", true, false, false, false, 0o666, libc::O_TRUNC),
        ("/f", true, false, false, false, 0o666, libc::O_APPEND),
        ("/c2/", true, false, false, false, 0o600, libc::O_CREAT),
        ("/d/", false, true, false, true, 0o600, 0),
        ("/c3/", false, true, false, true, 0o600, 0),
        ("/f/", false, true, false, true, 0o600, 0),
        ("/lf/", false, true, true, false, 0o600, 0),
        ("/ld/", false, true, true, false, 0o600, 0),
        // (The root itself is not compared: on the std side "/" is the
        // case directory, an ordinary one.)
        ("/d/.", false, true, true, false, 0o600, 0),
        ("/d/.", false, true, false, true, 0o600, 0),
        ("/d/..", true, false, false, false, 0o600, libc::O_DIRECTORY),
    ];
    for &(path, read, write, create, create_new, mode, flags) in cases {
        let what = format!(
            "open {path} read={read} write={write} create={create} \
             create_new={create_new} mode={mode:o} flags={flags:#x}"
        );
        let l = lanefs::OpenOptions::new()
            .read(read)
            .write(write)
            .create(create)
            .create_new(create_new)
            .mode(mode)
            .custom_flags(flags)
            .open(&p.fs, path)
            .and_then(|f| f.metadata().map(|m| (m.is_dir(), m.permissions())));
        let s = std::fs::OpenOptions::new()
            .read(read)
            .write(write)
            .create(create)
            .create_new(create_new)
            .mode(mode)
            .custom_flags(flags)
            .open(p.k(path))
            .and_then(|f| {
                f.metadata()
                    .map(|m| (m.is_dir(), m.permissions().mode() & 0o7777))
            });
        p.same(&what, &l, &s);
    }
    for path in ["/new1", "/f", "/lf", "/ld/new2", "/d/", "/missing/x"] {
        let l = p.fs.create_new(path).and_then(|mut f| {
            f.write_all(b"rw")?;
            f.seek(SeekFrom::Start(0))?;
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            Ok(s)
        });
        let r = std::fs::File::create_new(p.k(path)).and_then(|mut f| {
            f.write_all(b"rw")?;
            f.seek(SeekFrom::Start(0))?;
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            Ok(s)
        });
        p.same(&format!("create_new {path}"), &l, &r);
    }
    let l = lanefs::File::options()
        .read(true)
        .open(&p.fs, "/f")
        .and_then(|f| f.metadata())
        .map(|m| m.len());
    let r = std::fs::File::options()
        .read(true)
        .open(p.k("/f"))
        .and_then(|f| f.metadata())
        .map(|m| m.len());
    p.same("File::options", &l, &r);
    p.trees("after the opens");
    p.finish();
}

// ---- File -----------------------------------------------------------------

#[test]
fn file_seek_read_write() {
    let Some(mut p) = pair() else { return };
    let mut lf = lanefs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(p.k("/f"))
        .unwrap();
    let seeks = [
        SeekFrom::End(-1),
        SeekFrom::Current(-1),
        SeekFrom::Start(0),
        SeekFrom::Start(u64::MAX),
        SeekFrom::Start(i64::MAX as u64),
        SeekFrom::Current(1),
        SeekFrom::Current(i64::MIN),
        SeekFrom::End(i64::MAX),
        SeekFrom::End(i64::MIN),
        SeekFrom::Start(10),
        SeekFrom::Current(-5),
        SeekFrom::End(0),
    ];
    for s in seeks {
        let l = lf.seek(s);
        let r = sf.seek(s);
        p.same(&format!("seek {s:?} on empty"), &l, &r);
    }
    // Writes after a seek past the end leave a hole.
    lf.seek(SeekFrom::Start(100)).unwrap();
    sf.seek(SeekFrom::Start(100)).unwrap();
    let l = lf.write(b"tail");
    let r = sf.write(b"tail");
    p.same("write at 100", &l, &r);
    for s in [
        SeekFrom::End(-4),
        SeekFrom::End(-105),
        SeekFrom::Current(-2),
        SeekFrom::End(10),
    ] {
        let l = lf.seek(s);
        let r = sf.seek(s);
        p.same(&format!("seek {s:?}"), &l, &r);
        let mut lb = [9u8; 8];
        let mut sb = [9u8; 8];
        let l = lf.read(&mut lb).map(|n| lb[..n].to_vec());
        let r = sf.read(&mut sb).map(|n| sb[..n].to_vec());
        p.same(&format!("read after seek {s:?}"), &l, &r);
    }
    // Reading at and past EOF.
    for off in [0u64, 50, 103, 104, 105, 1 << 40, i64::MAX as u64, u64::MAX] {
        let mut lb = [7u8; 16];
        let mut sb = [7u8; 16];
        let l = lf.read_at(&mut lb, off).map(|n| lb[..n].to_vec());
        let r = sf.read_at(&mut sb, off).map(|n| sb[..n].to_vec());
        p.same(&format!("read_at {off}"), &l, &r);
        let l = lf.write_at(b"", off);
        let r = sf.write_at(b"", off);
        p.same(&format!("write_at empty {off}"), &l, &r);
    }
    for off in [3u64, 200, (i64::MAX - 1) as u64, i64::MAX as u64] {
        let l = lf.write_at(b"pq", off);
        let r = sf.write_at(b"pq", off);
        p.same(&format!("write_at {off}"), &l, &r);
        let l = lf.metadata().map(|m| m.len());
        let r = sf.metadata().map(|m| m.len());
        p.same(&format!("size after write_at {off}"), &l, &r);
    }
    let l = lf.stream_position();
    let r = sf.stream_position();
    p.same("position after positional I/O", &l, &r);
    // read_exact_at / write_all_at through the trait-free helpers.
    let mut lb = [0u8; 10];
    let mut sb = [0u8; 10];
    let l = lf.read_exact_at(&mut lb, 98).map(|_| lb.to_vec());
    let r = sf.read_exact_at(&mut sb, 98).map(|_| sb.to_vec());
    p.same("read_exact_at 98", &l, &r);
    let l = lf.read_exact_at(&mut lb, 200).map(|_| lb.to_vec());
    let r = sf.read_exact_at(&mut sb, 200).map(|_| sb.to_vec());
    p.same("read_exact_at past EOF", &l, &r);
    let l = lf.write_all_at(b"all", 7);
    let r = sf.write_all_at(b"all", 7);
    p.same("write_all_at", &l, &r);
    // Vectored I/O.
    lf.seek(SeekFrom::Start(0)).unwrap();
    sf.seek(SeekFrom::Start(0)).unwrap();
    let l = lf.write_vectored(&[io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")]);
    let r = sf.write_vectored(&[io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")]);
    p.same("write_vectored", &l, &r);
    lf.seek(SeekFrom::Start(0)).unwrap();
    sf.seek(SeekFrom::Start(0)).unwrap();
    let (mut l1, mut l2, mut s1, mut s2) = ([0u8; 3], [0u8; 3], [0u8; 3], [0u8; 3]);
    let l = lf
        .read_vectored(&mut [io::IoSliceMut::new(&mut l1), io::IoSliceMut::new(&mut l2)])
        .map(|n| (n, l1, l2));
    let r = sf
        .read_vectored(&mut [io::IoSliceMut::new(&mut s1), io::IoSliceMut::new(&mut s2)])
        .map(|n| (n, s1, s2));
    p.same("read_vectored", &l, &r);
    drop((lf, sf));
    p.trees("after the seeks and writes");
    p.finish();
}

#[test]
fn file_access_modes_and_set_len() {
    let Some(mut p) = pair() else { return };
    p.fs.write("/f", b"0123456789").unwrap();
    std::fs::write(p.k("/f"), b"0123456789").unwrap();
    // Read-only handle.
    let mut lf = p.fs.open("/f").unwrap();
    let mut sf = std::fs::File::open(p.k("/f")).unwrap();
    let l = lf.write(b"x");
    let r = sf.write(b"x");
    p.same("write on read-only", &l, &r);
    let l = lf.write(b"");
    let r = sf.write(b"");
    p.same("empty write on read-only", &l, &r);
    let l = lf.write_at(b"x", 0);
    let r = sf.write_at(b"x", 0);
    p.same("write_at on read-only", &l, &r);
    let l = lf.set_len(3);
    let r = sf.set_len(3);
    p.same("set_len on read-only", &l, &r);
    let l = lf.sync_all();
    let r = sf.sync_all();
    p.same("sync_all on read-only", &l, &r);
    let l = lf.sync_data();
    let r = sf.sync_data();
    p.same("sync_data on read-only", &l, &r);
    let l = lf.flush();
    let r = sf.flush();
    p.same("flush on read-only", &l, &r);
    let mut ls = String::new();
    let mut ss = String::new();
    let l = lf.read_to_string(&mut ls).map(|_| ls.clone());
    let r = sf.read_to_string(&mut ss).map(|_| ss.clone());
    p.same("read_to_string", &l, &r);
    // Write-only handle.
    let mut lf = lanefs::OpenOptions::new()
        .write(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .write(true)
        .open(p.k("/f"))
        .unwrap();
    let mut lb = [0u8; 4];
    let mut sb = [0u8; 4];
    let l = lf.read(&mut lb);
    let r = sf.read(&mut sb);
    p.same("read on write-only", &l, &r);
    let l = lf.read(&mut []);
    let r = sf.read(&mut []);
    p.same("empty read on write-only", &l, &r);
    let l = lf.read_at(&mut lb, 0);
    let r = sf.read_at(&mut sb, 0);
    p.same("read_at on write-only", &l, &r);
    for size in [20u64, 5, 0, 1 << 33, 7, i64::MAX as u64, u64::MAX] {
        let l = lf
            .set_len(size)
            .and_then(|_| lf.metadata().map(|m| m.len()));
        let r = sf
            .set_len(size)
            .and_then(|_| sf.metadata().map(|m| m.len()));
        p.same(&format!("set_len {size}"), &l, &r);
    }
    // set_len leaves the position alone.
    lf.seek(SeekFrom::Start(3)).unwrap();
    sf.seek(SeekFrom::Start(3)).unwrap();
    lf.set_len(1).unwrap();
    sf.set_len(1).unwrap();
    let l = lf.write(b"ab").and_then(|_| lf.stream_position());
    let r = sf.write(b"ab").and_then(|_| sf.stream_position());
    p.same("write after shrink below position", &l, &r);
    // Append: writes go to the end; the position follows.
    let mut lf = lanefs::OpenOptions::new()
        .append(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .append(true)
        .open(p.k("/f"))
        .unwrap();
    let l = lf.seek(SeekFrom::Start(0));
    let r = sf.seek(SeekFrom::Start(0));
    p.same("seek on append", &l, &r);
    let l = lf.write(b"++").and_then(|_| lf.stream_position());
    let r = sf.write(b"++").and_then(|_| sf.stream_position());
    p.same("append write", &l, &r);
    let l = lf.write_at(b"@@", 0);
    let r = sf.write_at(b"@@", 0);
    p.same("append write_at", &l, &r);
    let l = lf.set_len(2);
    let r = sf.set_len(2);
    p.same("set_len on append", &l, &r);
    drop((lf, sf));
    // A directory handle.
    p.fs.create_dir("/d").unwrap();
    std::fs::create_dir(p.k("/d")).unwrap();
    let mut lf = p.fs.open("/d").unwrap();
    let mut sf = std::fs::File::open(p.k("/d")).unwrap();
    let l = lf.read(&mut lb);
    let r = sf.read(&mut sb);
    p.same("read of a directory", &l, &r);
    let l = lf.set_len(0);
    let r = sf.set_len(0);
    p.same("set_len of a directory", &l, &r);
    let l = lf.sync_all();
    let r = sf.sync_all();
    p.same("sync_all of a directory", &l, &r);
    let l = lf.stream_position();
    let r = sf.stream_position();
    p.same("seek in a directory", &l, &r);
    let l = lf.metadata().map(|m| m.is_dir());
    let r = sf.metadata().map(|m| m.is_dir());
    p.same("fstat of a directory", &l, &r);
    let l = p.fs.read("/d");
    let r = std::fs::read(p.k("/d"));
    p.same("fs::read of a directory", &l, &r);
    drop((lf, sf));
    p.trees("after the handles");
    p.finish();
}

#[test]
fn file_metadata_unlinked_and_permissions() {
    let Some(mut p) = pair() else { return };
    let lf = p.fs.create("/f").unwrap();
    let sf = std::fs::File::create(p.k("/f")).unwrap();
    lf.write_at(b"abc", 0).unwrap();
    sf.write_at(b"abc", 0).unwrap();
    p.fs.remove_file("/f").unwrap();
    std::fs::remove_file(p.k("/f")).unwrap();
    let l = lf.metadata().map(|m| (m.nlink(), m.len(), m.is_file()));
    let r = sf
        .metadata()
        .map(|m| (m.nlink() as u32, m.len(), m.is_file()));
    p.same("fstat of an unlinked file", &l, &r);
    let l = lf.set_len(1).and_then(|_| lf.metadata().map(|m| m.len()));
    let r = sf.set_len(1).and_then(|_| sf.metadata().map(|m| m.len()));
    p.same("set_len of an unlinked file", &l, &r);
    for mode in [0o4755u32, 0o2755, 0o1777, 0o7777, 0o0, 0o100644] {
        let l = lf
            .set_permissions(mode)
            .and_then(|_| lf.metadata().map(|m| m.permissions()));
        let r = sf
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|_| sf.metadata().map(|m| m.permissions().mode() & 0o7777));
        p.same(&format!("fchmod {mode:o}"), &l, &r);
    }
    // chmod by path, setuid bits included.
    p.fs.write("/g", b"").unwrap();
    std::fs::write(p.k("/g"), b"").unwrap();
    p.fs.symlink("g", "/lg").unwrap();
    std::os::unix::fs::symlink("g", p.k("/lg")).unwrap();
    for (path, mode) in [("/g", 0o6755u32), ("/lg", 0o1700), ("/nope", 0o600)] {
        let l =
            p.fs.set_permissions(path, mode)
                .and_then(|_| p.fs.metadata(path).map(|m| m.permissions()));
        let r = std::fs::set_permissions(p.k(path), std::fs::Permissions::from_mode(mode))
            .and_then(|_| std::fs::metadata(p.k(path)))
            .map(|m| m.permissions().mode() & 0o7777);
        p.same(&format!("chmod {path} {mode:o}"), &l, &r);
    }
    drop((lf, sf));
    p.trees("after chmods");
    p.finish();
}

#[test]
fn metadata_fields() {
    let Some(mut p) = pair() else { return };
    for (name, size) in [
        ("/empty", 0usize),
        ("/one", 1),
        ("/page", 4096),
        ("/odd", 10_000),
    ] {
        p.fs.write(name, vec![b'x'; size]).unwrap();
        std::fs::write(p.k(name), vec![b'x'; size]).unwrap();
    }
    p.fs.write("/sparse", b"").unwrap();
    std::fs::write(p.k("/sparse"), b"").unwrap();
    {
        let lf = lanefs::OpenOptions::new()
            .write(true)
            .open(&p.fs, "/sparse")
            .unwrap();
        let sf = std::fs::OpenOptions::new()
            .write(true)
            .open(p.k("/sparse"))
            .unwrap();
        lf.write_at(b"end", 1 << 20).unwrap();
        sf.write_at(b"end", 1 << 20).unwrap();
    }
    p.fs.create_dir("/d").unwrap();
    std::fs::create_dir(p.k("/d")).unwrap();
    p.fs.symlink("one", "/link").unwrap();
    std::os::unix::fs::symlink("one", p.k("/link")).unwrap();
    p.fs.hard_link("/one", "/one2").unwrap();
    std::fs::hard_link(p.k("/one"), p.k("/one2")).unwrap();
    for name in [
        "/empty", "/one", "/page", "/odd", "/sparse", "/link", "/d", "/one2",
    ] {
        for follow in [true, false] {
            let l = if follow {
                p.fs.metadata(name)
            } else {
                p.fs.symlink_metadata(name)
            }
            .map(|m| {
                (
                    m.is_file(),
                    m.is_dir(),
                    m.is_symlink(),
                    m.len(),
                    m.mode(),
                    m.nlink(),
                    m.uid(),
                    m.gid(),
                    m.blocks(),
                    m.blksize(),
                )
            });
            let r = if follow {
                std::fs::metadata(p.k(name))
            } else {
                std::fs::symlink_metadata(p.k(name))
            }
            .map(|m| {
                (
                    m.is_file(),
                    m.is_dir(),
                    m.file_type().is_symlink(),
                    m.len(),
                    m.mode(),
                    m.nlink() as u32,
                    m.uid(),
                    m.gid(),
                    m.blocks(),
                    m.blksize() as u32,
                )
            });
            p.same(&format!("stat {name} follow={follow}"), &l, &r);
        }
    }
    // The times as SystemTimes, set alike on both sides.
    let (a, m) = (
        lanefs::Timespec {
            sec: 1_234_567_890,
            nsec: 42,
        },
        lanefs::Timespec {
            sec: -86_400,
            nsec: 7,
        },
    );
    p.fs.set_times(
        "/one",
        Some(lanefs::TimeSet::At(a)),
        Some(lanefs::TimeSet::At(m)),
    )
    .unwrap();
    let sf = std::fs::File::options()
        .write(true)
        .open(p.k("/one"))
        .unwrap();
    std_futimens(
        &sf,
        Some(lanefs::TimeSet::At(a)),
        Some(lanefs::TimeSet::At(m)),
    )
    .unwrap();
    let l = p.fs.metadata("/one").map(|m| {
        (
            m.accessed(),
            m.modified(),
            m.created() <= std::time::SystemTime::now(),
        )
    });
    let r = std::fs::metadata(p.k("/one")).and_then(|m| {
        Ok((
            m.accessed()?,
            m.modified()?,
            m.created()? <= std::time::SystemTime::now(),
        ))
    });
    p.same("accessed, modified, created", &l, &r);
    p.finish();
}

#[test]
fn read_to_end_of_a_big_sparse_file() {
    let Some(mut p) = pair() else { return };
    let size = 64u64 << 20;
    let lf = p.fs.create("/big").unwrap();
    lf.set_len(size).unwrap();
    lf.write_at(b"end", size - 3).unwrap();
    let sf = std::fs::File::create(p.k("/big")).unwrap();
    sf.set_len(size).unwrap();
    sf.write_at(b"end", size - 3).unwrap();
    let t = std::time::Instant::now();
    let l = p.fs.read("/big");
    let lane_time = t.elapsed();
    let r = std::fs::read(p.k("/big"));
    let (l, r) = (
        l.map(|v| (v.len(), v[v.len() - 3..].to_vec())),
        r.map(|v| (v.len(), v[v.len() - 3..].to_vec())),
    );
    p.same("read a 64 MiB sparse file", &l, &r);
    eprintln!("lanefs read of 64 MiB sparse: {lane_time:?}");
    let mut out = Vec::new();
    let l = p.fs.open("/big").and_then(|mut f| f.read_to_end(&mut out));
    let mut out2 = Vec::new();
    let r = std::fs::File::open(p.k("/big")).and_then(|mut f| f.read_to_end(&mut out2));
    p.same("read_to_end", &l, &r);
    p.finish();
}

// ---- names and directories -------------------------------------------------

/// Run the same tree-building steps on both sides.
fn build(p: &mut Pair, dirs: &[&str], files: &[(&str, &[u8])], links: &[(&str, &str)]) {
    for d in dirs {
        p.fs.create_dir_all(d).unwrap();
        std::fs::create_dir_all(p.k(d)).unwrap();
    }
    for (f, data) in files {
        p.fs.write(f, data).unwrap();
        std::fs::write(p.k(f), data).unwrap();
    }
    for (target, link) in links {
        p.fs.symlink(target, link).unwrap();
        std::os::unix::fs::symlink(target, p.k(link)).unwrap();
    }
}

#[test]
fn create_dir_all_and_remove_dir_all() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/keep/inner", "/victim/sub/deeper", "/a"],
        &[
            ("/keep/precious", b"do not remove"),
            ("/keep/inner/also", b"also precious"),
            ("/victim/file", b"x"),
            ("/victim/sub/deeper/f", b"y"),
            ("/a/file", b"z"),
        ],
        &[
            ("../keep", "/victim/to_keep_dir"),
            ("../keep/precious", "/victim/sub/to_keep_file"),
            ("nowhere", "/victim/dangling"),
            ("keep", "/link_to_keep"),
        ],
    );
    for path in [
        "/a/file/b/c",
        "/a/file",
        "/a/file/",
        "/a/new/deeper/",
        "/a//new2///x",
        "/link_to_keep/made_through_link",
        "/victim/dangling/x",
        "/a/../a/./x",
        "/",
        "",
    ] {
        let l = p.fs.create_dir_all(path);
        let r = std::fs::create_dir_all(if path.is_empty() {
            PathBuf::new()
        } else {
            p.k(path)
        });
        p.same(&format!("create_dir_all {path:?}"), &l, &r);
    }
    p.trees("after create_dir_all");
    for path in [
        "/link_to_keep",
        "/a/file",
        "/nothing",
        "/victim/sub/to_keep_file",
        "/victim",
    ] {
        let l = p.fs.remove_dir_all(path);
        let r = std::fs::remove_dir_all(p.k(path));
        p.same(&format!("remove_dir_all {path}"), &l, &r);
        p.trees(&format!("after remove_dir_all {path}"));
    }
    p.finish();
}

#[test]
fn read_dir_entries() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d/sub"],
        &[("/d/file", b"1")],
        &[
            ("file", "/d/lfile"),
            ("sub", "/d/lsub"),
            ("gone", "/d/ldangling"),
            ("d", "/ld"),
        ],
    );
    let name_bytes = OsStr::from_bytes(b"/d/caf\xe9\xff");
    p.fs.write(name_bytes, b"latin1").unwrap();
    std::fs::write(p.k(name_bytes), b"latin1").unwrap();
    for dir in ["/d", "/ld", "/ld/", "/d/file", "/missing", "/d/ldangling"] {
        let l = p.fs.read_dir(dir).and_then(|rd| {
            let mut v = rd
                .map(|e| {
                    e.map(|e| {
                        let m = p.fs.symlink_metadata(Path::new(dir).join(e.file_name()));
                        (
                            e.file_name(),
                            format!("{:?}", e.kind()),
                            e.ino() == m.as_ref().map(|m| m.ino()).unwrap_or(0),
                            e.path(),
                        )
                    })
                })
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        let r = std::fs::read_dir(p.k(dir)).and_then(|rd| {
            let mut v = rd
                .map(|e| {
                    let e = e?;
                    let t = e.file_type()?;
                    let kind = if t.is_symlink() {
                        "Symlink"
                    } else if t.is_dir() {
                        "Directory"
                    } else {
                        "Regular"
                    };
                    let ino = std::os::unix::fs::DirEntryExt::ino(&e);
                    let path = Path::new("/").join(e.path().strip_prefix(&p.root).unwrap());
                    Ok((
                        e.file_name(),
                        kind.to_string(),
                        ino == e.metadata()?.ino(),
                        path,
                    ))
                })
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        p.same(&format!("read_dir {dir}"), &l, &r);
    }
    // A listing of a directory removed after it was opened.
    p.fs.create_dir("/dying").unwrap();
    std::fs::create_dir(p.k("/dying")).unwrap();
    let lrd = p.fs.read_dir("/dying").unwrap();
    let srd = std::fs::read_dir(p.k("/dying")).unwrap();
    p.fs.remove_dir("/dying").unwrap();
    std::fs::remove_dir(p.k("/dying")).unwrap();
    let l = lrd
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>();
    let r = srd
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>();
    p.same("read_dir of a removed directory", &l, &r);
    p.finish();
}

#[test]
fn links_renames_and_read_link() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d1/sub", "/d2", "/full/x", "/empty"],
        &[("/f", b"f"), ("/g", b"g"), ("/d1/in", b"in")],
        &[("f", "/lf"), ("nowhere", "/dangling"), ("d1", "/ld1")],
    );
    let hard = [
        ("/f", "/hf"),
        ("/lf", "/hlf"),
        ("/dangling", "/hdangling"),
        ("/d1", "/hd1"),
        ("/f", "/g"),
        ("/missing", "/x"),
        ("/f", "/missing_dir/x"),
        ("/f", "/hf2/"),
        ("/ld1/", "/hd"),
    ];
    for (from, to) in hard {
        let l = p.fs.hard_link(from, to);
        let r = std::fs::hard_link(p.k(from), p.k(to));
        p.same(&format!("hard_link {from} {to}"), &l, &r);
    }
    for name in ["/f", "/hf", "/lf"] {
        let l = p.fs.symlink_metadata(name).map(|m| m.nlink());
        let r = std::fs::symlink_metadata(p.k(name)).map(|m| m.nlink() as u32);
        p.same(&format!("nlink {name}"), &l, &r);
    }
    for name in [
        "/lf",
        "/dangling",
        "/f",
        "/lf/",
        "/ld1/",
        "/missing",
        "/ld1",
    ] {
        let l = p.fs.read_link(name);
        let r = std::fs::read_link(p.k(name));
        p.same(&format!("read_link {name}"), &l, &r);
    }
    let renames = [
        ("/f", "/hf"), // same inode: nothing happens
        ("/g", "/d2"),
        ("/d2", "/g"),
        ("/d1", "/full"),
        ("/d1", "/d1/sub/x"),
        ("/d1", "/empty"),
        ("/empty", "/moved"),
        ("/missing", "/x"),
        ("/g", "/g2/"),
        ("/moved/", "/moved2/"),
        ("/lf", "/lf2"),
        ("/g", "/full/.."),
        ("/hf", "/full/x/hf"),
        ("/moved", "/ld1"),
        ("/ld1", "/moved"),
        ("/full/x/hf", "/dangling"),
        ("/dangling", "/dangling"),
        ("/moved", "/moved/"),
        ("/moved", "/d1/sub/../.."),
        ("/lf2", "/moved/lf3"),
    ];
    for (from, to) in renames {
        let l = p.fs.rename(from, to);
        let r = std::fs::rename(p.k(from), p.k(to));
        p.same(&format!("rename {from} {to}"), &l, &r);
        p.trees(&format!("after rename {from} {to}"));
    }
    p.finish();
}

#[test]
fn odd_inputs() {
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/d"], &[("/f", b"f")], &[]);
    let long_name = "n".repeat(256);
    let ok_name = "n".repeat(255);
    let long_path = format!("/{}", "d/".repeat(2100));
    let nul: &OsStr = OsStr::from_bytes(b"/a\0b");
    let paths: Vec<PathBuf> = vec![
        PathBuf::from(format!("/{long_name}")),
        PathBuf::from(format!("/{ok_name}")),
        PathBuf::from(&long_path),
        PathBuf::from(OsStr::from_bytes(b"/\xff\xfe")),
        PathBuf::from("/d/./../d//"),
    ];
    for path in &paths {
        let l = p.fs.write(path, b"x");
        let r = std::fs::write(p.k(path), b"x");
        p.same(&format!("write {}", path.display()), &l, &r);
        let l = p.fs.create_dir(path);
        let r = std::fs::create_dir(p.k(path));
        p.same(&format!("create_dir {}", path.display()), &l, &r);
        let l = p.fs.metadata(path).map(|m| m.len());
        let r = std::fs::metadata(p.k(path)).map(|m| m.len());
        p.same(&format!("metadata {}", path.display()), &l, &r);
    }
    // The root prefix of the std side makes a 4096-byte path there a
    // longer one; the limit itself is covered in posix_edge_cases.rs.
    let nul_long = {
        let mut v = b"/".to_vec();
        v.extend(vec![b'a'; 5000]);
        v.push(0);
        PathBuf::from(OsStr::from_bytes(&v))
    };
    for path in [Path::new(nul), nul_long.as_path()] {
        let what = |op: &str| format!("{op} {:?}", path.as_os_str().len());
        let l = p.fs.write(path, b"x");
        let r = std::fs::write(p.k(path), b"x");
        p.same(&what("write"), &l, &r);
        let l = unit(p.fs.open(path));
        let r = unit(std::fs::File::open(p.k(path)));
        p.same(&what("open"), &l, &r);
        let l = p.fs.create_dir_all(path);
        let r = std::fs::create_dir_all(p.k(path));
        p.same(&what("create_dir_all"), &l, &r);
        let l = p.fs.symlink(path, "/s");
        let r = std::os::unix::fs::symlink(path, p.k("/s"));
        p.same(&what("symlink target"), &l, &r);
        let l = p.fs.rename("/f", path);
        let r = std::fs::rename(p.k("/f"), p.k(path));
        p.same(&what("rename to"), &l, &r);
        let l = p.fs.remove_dir_all(path);
        let r = std::fs::remove_dir_all(p.k(path));
        p.same(&what("remove_dir_all"), &l, &r);
    }
    for path in ["/f", "/f/", "/f/x", "/nope", "/d/../f", &long_path] {
        let l = p.fs.exists(path);
        let r = std::fs::metadata(p.k(path)).map(|_| true).or_else(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Ok(false)
            } else {
                Err(e)
            }
        });
        p.same(&format!("exists {path}"), &l, &r);
    }
    // A name too long in the middle of a path, in each call.
    let mid = format!("/d/{long_name}/x");
    let l = p.fs.create_dir_all(&mid);
    let r = std::fs::create_dir_all(p.k(&mid));
    p.same("create_dir_all with a long name inside", &l, &r);
    let l = p.fs.canonicalize(&mid);
    let r = std::fs::canonicalize(p.k(&mid)).map(|_| PathBuf::new());
    p.same("canonicalize with a long name inside", &l, &r);
    let l = p.fs.remove_dir_all(&mid);
    let r = std::fs::remove_dir_all(p.k(&mid));
    p.same("remove_dir_all with a long name inside", &l, &r);
    let l = p.fs.copy("/f", &mid);
    let r = std::fs::copy(p.k("/f"), p.k(&mid));
    p.same("copy to a long name inside", &l, &r);
    let l = p.fs.read_link(&mid);
    let r = std::fs::read_link(p.k(&mid));
    p.same("read_link with a long name inside", &l, &r);
    // Empty paths (std's are relative to the current directory, so only
    // the error cases compare).
    let l = unit(p.fs.open(""));
    let r = unit(std::fs::File::open(""));
    p.same("open empty", &l, &r);
    let l = unit(p.fs.metadata(""));
    let r = unit(std::fs::metadata(""));
    p.same("metadata empty", &l, &r);
    let l = p.fs.remove_file("");
    let r = std::fs::remove_file("");
    p.same("remove_file empty", &l, &r);
    let l = p.fs.symlink("", "/s");
    let r = std::os::unix::fs::symlink("", p.k("/s"));
    p.same("symlink to empty", &l, &r);
    // Invalid UTF-8 content.
    p.fs.write("/bin", b"\xff\xfe").unwrap();
    std::fs::write(p.k("/bin"), b"\xff\xfe").unwrap();
    let l = p.fs.read_to_string("/bin");
    let r = std::fs::read_to_string(p.k("/bin"));
    p.same("read_to_string of invalid UTF-8", &l, &r);
    p.trees("after odd inputs");
    p.finish();
}

// ---- threads ------------------------------------------------------------------

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn types_are_send_and_sync_as_std() {
    assert_send_sync::<std::fs::File>();
    assert_send_sync::<lanefs::File>();
    assert_send_sync::<Filesystem>();
    assert_send_sync::<lanefs::OpenOptions>();
    assert_send_sync::<lanefs::Metadata>();
    assert_send_sync::<lanefs::ReadDir>();
    assert_send_sync::<lanefs::DirEntryOwned>();
}

// ---- canonicalize, copy, try_clone ------------------------------------------

#[test]
fn canonicalize_as_realpath() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d/sub/deep", "/a/b/c"],
        &[("/f", b"f"), ("/d/sub/file", b"x")],
        &[
            ("d", "/ld"),
            ("f", "/lf"),
            ("sub/deep", "/d/ldeep"),
            ("../..", "/a/b/c/up2"),
            ("../d/sub/", "/a/lslash"),
            ("nowhere", "/dangling"),
            ("loop2", "/loop1"),
            ("loop1", "/loop2"),
            ("lf", "/chain0"),
        ],
    );
    for i in 1..=41 {
        let (t, l) = (format!("chain{}", i - 1), format!("/chain{i}"));
        p.fs.symlink(&t, &l).unwrap();
        std::os::unix::fs::symlink(&t, p.k(&l)).unwrap();
    }
    let cases = [
        "/",
        "//",
        "/.",
        "/d",
        "/d/",
        "/d/.",
        "/d/..",
        "/d/../d/sub",
        "/./d//sub/./",
        "/f",
        "/f/",
        "/f/.",
        "/f/..",
        "/f/./x",
        "/f/x",
        "/f//",
        "/missing",
        "/missing/..",
        "/ld",
        "/ld/",
        "/ld/..",
        "/ld/../f",
        "/ld/sub/../..",
        "/lf",
        "/lf/",
        "/lf/.",
        "/lf/..",
        "/d/ldeep/..",
        "/d/ldeep/../file",
        "/a/b/c/up2",
        "/a/b/c/up2/b/c/up2/..",
        "/a/lslash",
        "/a/lslash/file",
        "/a/lslash/file/",
        "/dangling",
        "/dangling/..",
        "/loop1",
        "/loop1/x",
        "/chain38",
        "/chain39",
        "/chain40",
        "/chain41",
        "d/sub",
        "/d/sub/file/..",
    ];
    for path in cases {
        let l = p.fs.canonicalize(path);
        let r = std::fs::canonicalize(p.k(path)).map(|c| {
            let rel = c.strip_prefix(&p.root).expect("inside the case root");
            Path::new("/").join(rel)
        });
        p.same(&format!("canonicalize {path}"), &l, &r);
    }
    // Absolute targets (lanefs only: on the tmpfs they would leave the
    // case directory): the resolution restarts at the root.
    p.fs.symlink("/d/sub", "/abs").unwrap();
    p.fs.symlink("/abs/../ldeep", "/d/sub/deep/abs2").unwrap();
    assert_eq!(
        p.fs.canonicalize("/abs/deep/abs2").unwrap(),
        Path::new("/d/sub/deep")
    );
    let nul = p.fs.canonicalize(OsStr::from_bytes(b"/d\0")).unwrap_err();
    let snul = std::fs::canonicalize(OsStr::from_bytes(b"/d\0")).unwrap_err();
    assert_eq!(nul.kind(), snul.kind());
    p.finish();
}

#[test]
fn copy_as_std() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d"],
        &[
            ("/tool", b"#!/bin/sh\n"),
            ("/old", b"a longer old content than the source"),
            ("/empty", b""),
        ],
        &[
            ("tool", "/ltool"),
            ("old", "/lold"),
            ("made_by_copy", "/dangling"),
        ],
    );
    for (name, mode) in [("/tool", 0o4750u32), ("/old", 0o600), ("/empty", 0o2644)] {
        p.fs.set_permissions(name, mode).unwrap();
        std::fs::set_permissions(p.k(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    {
        // A sparse source: a hole, data, a hole at the end.
        let lf = p.fs.create("/sparse").unwrap();
        let sf = std::fs::File::create(p.k("/sparse")).unwrap();
        lf.write_all_at(b"middle", 300_000).unwrap();
        sf.write_all_at(b"middle", 300_000).unwrap();
        lf.set_len(700_000).unwrap();
        sf.set_len(700_000).unwrap();
    }
    let cases = [
        ("/tool", "/new"),
        ("/tool", "/old"),
        ("/empty", "/empty2"),
        ("/ltool", "/lold"),
        ("/tool", "/dangling"),
        ("/sparse", "/sparse2"),
        ("/d", "/x"),
        ("/missing", "/x"),
        ("/tool", "/d"),
        ("/tool", "/missing/x"),
        ("/tool/", "/x"),
        ("/tool", "/x/"),
        ("/new", "/new"),
    ];
    for (from, to) in cases {
        let l = p.fs.copy(from, to);
        let r = std::fs::copy(p.k(from), p.k(to));
        p.same(&format!("copy {from} {to}"), &l, &r);
    }
    p.trees("after the copies");
    p.finish();
}

#[test]
fn try_clone_shares_the_position() {
    let Some(mut p) = pair() else { return };
    p.fs.write("/f", b"0123456789").unwrap();
    std::fs::write(p.k("/f"), b"0123456789").unwrap();
    for append in [false, true] {
        let mut la = lanefs::OpenOptions::new()
            .read(true)
            .write(!append)
            .append(append)
            .open(&p.fs, "/f")
            .unwrap();
        let mut sa = std::fs::OpenOptions::new()
            .read(true)
            .write(!append)
            .append(append)
            .open(p.k("/f"))
            .unwrap();
        let mut two = [0u8; 2];
        la.read_exact(&mut two).unwrap();
        sa.read_exact(&mut two).unwrap();
        let mut lb = la.try_clone().unwrap();
        let mut sb = sa.try_clone().unwrap();
        let what = |s: &str| format!("append={append}: {s}");
        let l = lb.stream_position();
        let r = sb.stream_position();
        p.same(&what("clone's position"), &l, &r);
        let (mut l3, mut s3) = ([0u8; 3], [0u8; 3]);
        let l = lb.read(&mut l3).map(|n| l3[..n].to_vec());
        let r = sb.read(&mut s3).map(|n| s3[..n].to_vec());
        p.same(&what("read through the clone"), &l, &r);
        let l = la.stream_position();
        let r = sa.stream_position();
        p.same(&what("original's position after it"), &l, &r);
        let l = la.write(b"W").and_then(|_| lb.stream_position());
        let r = sa.write(b"W").and_then(|_| sb.stream_position());
        p.same(&what("clone's position after a write"), &l, &r);
        let l = la
            .seek(SeekFrom::End(-1))
            .and_then(|_| lb.stream_position());
        let r = sa
            .seek(SeekFrom::End(-1))
            .and_then(|_| sb.stream_position());
        p.same(&what("clone's position after a seek"), &l, &r);
        // The clone of a clone, and the original gone.
        let mut lc = lb.try_clone().unwrap();
        let mut sc = sb.try_clone().unwrap();
        drop((la, sa, lb, sb));
        let l = lc.stream_position().and_then(|_| lc.write(b"Z"));
        let r = sc.stream_position().and_then(|_| sc.write(b"Z"));
        p.same(&what("write through the last clone"), &l, &r);
        let l = lc.stream_position();
        let r = sc.stream_position();
        p.same(&what("last clone's position"), &l, &r);
    }
    // A clone keeps an unlinked file.
    let la = p.fs.open("/f").unwrap();
    let sa = std::fs::File::open(p.k("/f")).unwrap();
    let mut lb = la.try_clone().unwrap();
    let mut sb = sa.try_clone().unwrap();
    drop((la, sa));
    p.fs.remove_file("/f").unwrap();
    std::fs::remove_file(p.k("/f")).unwrap();
    let mut ls = Vec::new();
    let mut ss = Vec::new();
    let l = lb.read_to_end(&mut ls).map(|_| ls.clone());
    let r = sb.read_to_end(&mut ss).map(|_| ss.clone());
    p.same("read of an unlinked file through a clone", &l, &r);
    p.finish();
}

/// Threads opening, writing, truncating, linking, renaming and removing one
/// name: every call succeeds or fails as Linux may (`ENOENT`, `EEXIST`),
/// nothing panics, and the engine's check passes after.
#[test]
fn many_threads_on_one_file() {
    let fs = Filesystem::new_in_memory().unwrap();
    let threads = 4;
    let rounds = 400;
    let start = std::sync::Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let fs = fs.clone();
            let start = start.clone();
            std::thread::spawn(move || -> Result<(), String> {
                start.wait();
                let allowed = |e: &io::Error| {
                    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EEXIST))
                };
                for i in 0..rounds {
                    let step = |r: io::Result<()>, what: &str| match r {
                        Err(e) if !allowed(&e) => Err(format!("thread {t} {what}: {e}")),
                        _ => Ok(()),
                    };
                    let r = lanefs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(i % 3 == 0)
                        .open(&fs, "/one")
                        .and_then(|mut f| {
                            f.write_all(format!("{t}:{i};").as_bytes())?;
                            f.write_all_at(b"@", (i % 7) as u64)?;
                            if i % 5 == 0 {
                                f.set_len((i % 11) as u64)?;
                            }
                            let g = f.try_clone()?;
                            let mut buf = Vec::new();
                            f.seek(SeekFrom::Start(0))?;
                            f.read_to_end(&mut buf)?;
                            g.sync_data()?;
                            Ok(())
                        });
                    step(r, "open/write")?;
                    match i % 4 {
                        0 => step(fs.remove_file("/one"), "remove")?,
                        1 => step(fs.hard_link("/one", format!("/h{t}")), "link")?,
                        2 => step(fs.rename(format!("/h{t}"), "/one"), "rename")?,
                        _ => step(unit(fs.metadata("/one")), "stat")?,
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no panic").unwrap();
    }
    fs.core().check().expect("engine check");
}

/// Reads through clones of one `File` on several threads move one shared
/// position: every byte is read exactly once, as with `dup`ed descriptors.
#[test]
fn clones_share_the_position_across_threads() {
    let fs = Filesystem::new_in_memory().unwrap();
    // Each 4-byte word holds its own offset: a chunk says where it was.
    let data: Vec<u8> = (0..50_000u32).flat_map(|i| (i * 4).to_le_bytes()).collect();
    fs.write("/f", &data).unwrap();
    let first = fs.open("/f").unwrap();
    let clones: Vec<_> = (0..4).map(|_| first.try_clone().unwrap()).collect();
    drop(first);
    let handles: Vec<_> = clones
        .into_iter()
        .map(|mut f| {
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let mut buf = [0u8; 996];
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        return got;
                    }
                    got.push(buf[..n].to_vec());
                }
            })
        })
        .collect();
    let mut chunks: Vec<(usize, Vec<u8>)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .map(|c| {
            let at = u32::from_le_bytes(c[..4].try_into().unwrap()) as usize;
            (at, c)
        })
        .collect();
    chunks.sort();
    let mut next = 0;
    for (at, c) in chunks {
        assert_eq!(at, next, "each byte read exactly once, in one piece");
        assert_eq!(c, data[at..at + c.len()]);
        next = at + c.len();
    }
    assert_eq!(next, data.len());
}

/// A tree deeper than any path can name (built by renames), removed and
/// canonicalized without exhausting the stack.
#[test]
fn deep_trees() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/deep").unwrap();
    let depth = 3000;
    for _ in 0..depth {
        fs.create_dir("/t").unwrap();
        fs.rename("/deep", "/t/deep").unwrap();
        fs.rename("/t", "/deep").unwrap();
    }
    // 851 levels named through a symlink: the path given fits PATH_MAX,
    // the answer (4255 bytes) not: realpath says ENAMETOOLONG.
    fs.symlink(format!("/deep{}", "/deep".repeat(400)), "/half")
        .unwrap();
    let err = fs
        .canonicalize(format!("/half{}", "/deep".repeat(450)))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    let shallow = format!("/deep{}", "/deep".repeat(100));
    assert_eq!(fs.canonicalize(&shallow).unwrap(), Path::new(&shallow));
    let r = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            fs.remove_dir_all("/deep")?;
            fs.core()
                .check()
                .map_err(|p| io::Error::other(p.join("; ")))?;
            let left = fs.read_dir("/")?.map(|e| e.map(|e| e.file_name()));
            left.collect::<io::Result<Vec<_>>>()
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(r.unwrap(), ["half"]);
}

// ---- times and unprivileged callers ------------------------------------------

/// `futimens` on a std file with lanefs's `TimeSet`s.
fn std_futimens(
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

fn std_times(m: &std::fs::Metadata) -> (i64, i64, i64, i64) {
    (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())
}

fn lane_times(m: &lanefs::Metadata) -> (i64, i64, i64, i64) {
    let (a, t) = (m.atime(), m.mtime());
    (a.sec, a.nsec as i64, t.sec, t.nsec as i64)
}

#[test]
fn file_set_times_and_set_modified() {
    use lanefs::{TimeSet, Timespec};
    let Some(mut p) = pair() else { return };
    p.fs.write("/f", b"x").unwrap();
    std::fs::write(p.k("/f"), b"x").unwrap();
    let t1 = Timespec {
        sec: 1_000_000_000,
        nsec: 123,
    };
    let before = Timespec {
        sec: -5,
        nsec: 999_999_999,
    };
    let bad = Timespec {
        sec: 1,
        nsec: 1_000_000_000,
    };
    for write in [false, true] {
        let lf = lanefs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(&p.fs, "/f")
            .unwrap();
        let sf = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(p.k("/f"))
            .unwrap();
        let cases = [
            (Some(TimeSet::At(t1)), None),
            (None, Some(TimeSet::At(t1))),
            (Some(TimeSet::At(before)), Some(TimeSet::At(before))),
            (Some(TimeSet::At(bad)), None),
            (None, Some(TimeSet::At(bad))),
            (None, None),
        ];
        let t0 = Some(TimeSet::At(Timespec {
            sec: 86_400,
            nsec: 5,
        }));
        for (a, m) in cases {
            // From the same times on both sides.
            lf.set_times(t0, t0).unwrap();
            std_futimens(&sf, t0, t0).unwrap();
            let l = lf
                .set_times(a, m)
                .and_then(|_| lf.metadata())
                .map(|m| lane_times(&m));
            let r = std_futimens(&sf, a, m)
                .and_then(|_| sf.metadata())
                .map(|m| std_times(&m));
            p.same(&format!("futimens write={write} {a:?} {m:?}"), &l, &r);
        }
        let when = std::time::UNIX_EPOCH - std::time::Duration::new(7, 250);
        let l = lf
            .set_modified(when)
            .and_then(|_| lf.metadata())
            .map(|m| lane_times(&m));
        let r = sf
            .set_modified(when)
            .and_then(|_| sf.metadata())
            .map(|m| std_times(&m));
        p.same(&format!("set_modified write={write}"), &l, &r);
    }
    p.finish();
}

/// Run `f` on a thread whose file-system ids are `uid`/`gid` with no
/// supplementary groups (per-thread system calls: the rest of the test
/// process stays root).
fn as_user<T: Send + 'static>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: raw per-thread credential calls with valid arguments
        // (glibc's wrappers of setgroups would change every thread).
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                0
            );
            libc::syscall(libc::SYS_setfsgid, gid);
            libc::syscall(libc::SYS_setfsuid, uid);
        }
        f()
    })
    .join()
    .expect("user thread")
}

#[test]
fn unprivileged_handles_and_calls() {
    use lanefs::TimeSet;
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/rootdir", "/locked", "/tmp"],
        &[
            ("/mine", b"mine"),
            ("/theirs", b"theirs"),
            ("/secret", b"secret"),
            ("/ro", b"read only"),
            ("/locked/f", b"f"),
        ],
        &[],
    );
    for (path, mode, owner) in [
        ("/mine", 0o644, 1000),
        ("/theirs", 0o666, 0),
        ("/secret", 0o600, 0),
        ("/ro", 0o644, 0),
        ("/rootdir", 0o755, 0),
        ("/locked", 0o700, 0),
        ("/tmp", 0o1777, 0),
    ] {
        p.fs.set_permissions(path, mode).unwrap();
        p.fs.chown(path, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(p.k(path), std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(p.k(path), Some(owner), Some(owner)).unwrap();
    }
    let user = p.fs.with_cred(lanefs::Cred::user(1000, 1000));
    let root = p.root.clone();
    let k = move |path: &str| root.join(path.trim_start_matches('/'));

    type Outcomes = Vec<(String, io::Result<String>)>;
    let lane: Outcomes = {
        let fs = user.clone();
        let mut v: Outcomes = Vec::new();
        let mut rec = |what: &str, r: io::Result<String>| v.push((what.to_string(), r));
        let theirs = lanefs::OpenOptions::new().write(true).open(&fs, "/theirs");
        rec(
            "open theirs",
            theirs.as_ref().map(|_| String::new()).map_err(clone_err),
        );
        if let Ok(f) = &theirs {
            rec(
                "theirs touch",
                f.set_times(Some(TimeSet::Now), Some(TimeSet::Now))
                    .map(|_| String::new()),
            );
            rec(
                "theirs set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            rec(
                "theirs fchmod",
                f.set_permissions(0o600).map(|_| String::new()),
            );
            rec("theirs set_len", f.set_len(2).map(|_| String::new()));
        }
        let ro = fs.open("/ro");
        if let Ok(f) = &ro {
            rec(
                "ro touch",
                f.set_times(Some(TimeSet::Now), Some(TimeSet::Now))
                    .map(|_| String::new()),
            );
        }
        let mine = fs.open("/mine");
        if let Ok(f) = &mine {
            rec(
                "mine set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            rec(
                "mine fchmod 4755",
                f.set_permissions(0o4755)
                    .and_then(|_| f.metadata())
                    .map(|m| format!("{:o}", m.permissions())),
            );
            rec(
                "mine fchmod 2755",
                f.set_permissions(0o2755)
                    .and_then(|_| f.metadata())
                    .map(|m| format!("{:o}", m.permissions())),
            );
        }
        rec("open secret", fs.open("/secret").map(|_| String::new()));
        rec(
            "create in rootdir",
            fs.write("/rootdir/x", b"x").map(|_| String::new()),
        );
        rec(
            "canonicalize locked",
            fs.canonicalize("/locked/f")
                .map(|p| p.display().to_string()),
        );
        rec(
            "copy ro to rootdir",
            fs.copy("/ro", "/rootdir/x").map(|n| n.to_string()),
        );
        rec(
            "copy ro to tmp",
            fs.copy("/ro", "/tmp/x")
                .and_then(|n| Ok(format!("{n} {:o}", fs.metadata("/tmp/x")?.permissions()))),
        );
        rec(
            "copy mine to tmp",
            fs.copy("/mine", "/tmp/y")
                .and_then(|n| Ok(format!("{n} {:o}", fs.metadata("/tmp/y")?.permissions()))),
        );
        rec(
            "remove_dir_all locked",
            fs.remove_dir_all("/locked").map(|_| String::new()),
        );
        rec(
            "read_dir locked",
            fs.read_dir("/locked").map(|_| String::new()),
        );
        let opens: [(&str, bool, bool, i32); 6] = [
            ("/theirs", true, false, libc::O_NOATIME),
            ("/mine", true, false, libc::O_NOATIME),
            ("/ro", true, false, libc::O_TRUNC),
            ("/theirs", true, false, libc::O_TRUNC),
            ("/ro", false, true, libc::O_APPEND),
            ("/rootdir", true, false, libc::O_DIRECTORY),
        ];
        for (path, read, write, flags) in opens {
            rec(
                &format!("open {path} {flags:#x}"),
                lanefs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .custom_flags(flags)
                    .open(&fs, path)
                    .and_then(|f| f.metadata())
                    .map(|m| m.len().to_string()),
            );
        }
        v
    };
    let kernel: Outcomes = as_user(1000, 1000, move || {
        let mut v: Outcomes = Vec::new();
        let mut rec = |what: &str, r: io::Result<String>| v.push((what.to_string(), r));
        let theirs = std::fs::OpenOptions::new().write(true).open(k("/theirs"));
        rec(
            "open theirs",
            theirs.as_ref().map(|_| String::new()).map_err(clone_err),
        );
        if let Ok(f) = &theirs {
            rec(
                "theirs touch",
                std_futimens(f, Some(TimeSet::Now), Some(TimeSet::Now)).map(|_| String::new()),
            );
            rec(
                "theirs set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            rec(
                "theirs fchmod",
                f.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map(|_| String::new()),
            );
            rec("theirs set_len", f.set_len(2).map(|_| String::new()));
        }
        let ro = std::fs::File::open(k("/ro"));
        if let Ok(f) = &ro {
            rec(
                "ro touch",
                std_futimens(f, Some(TimeSet::Now), Some(TimeSet::Now)).map(|_| String::new()),
            );
        }
        let mine = std::fs::File::open(k("/mine"));
        if let Ok(f) = &mine {
            rec(
                "mine set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            let chmod = |mode: u32| {
                f.set_permissions(std::fs::Permissions::from_mode(mode))
                    .and_then(|_| f.metadata())
                    .map(|m| format!("{:o}", m.permissions().mode() & 0o7777))
            };
            rec("mine fchmod 4755", chmod(0o4755));
            rec("mine fchmod 2755", chmod(0o2755));
        }
        rec(
            "open secret",
            std::fs::File::open(k("/secret")).map(|_| String::new()),
        );
        rec(
            "create in rootdir",
            std::fs::write(k("/rootdir/x"), b"x").map(|_| String::new()),
        );
        rec(
            "canonicalize locked",
            std::fs::canonicalize(k("/locked/f")).map(|p| p.display().to_string()),
        );
        rec(
            "copy ro to rootdir",
            std::fs::copy(k("/ro"), k("/rootdir/x")).map(|n| n.to_string()),
        );
        let perm = |p: &str| -> io::Result<u32> {
            Ok(std::fs::metadata(k(p))?.permissions().mode() & 0o7777)
        };
        rec(
            "copy ro to tmp",
            std::fs::copy(k("/ro"), k("/tmp/x"))
                .and_then(|n| Ok(format!("{n} {:o}", perm("/tmp/x")?))),
        );
        rec(
            "copy mine to tmp",
            std::fs::copy(k("/mine"), k("/tmp/y"))
                .and_then(|n| Ok(format!("{n} {:o}", perm("/tmp/y")?))),
        );
        rec(
            "remove_dir_all locked",
            std::fs::remove_dir_all(k("/locked")).map(|_| String::new()),
        );
        rec(
            "read_dir locked",
            std::fs::read_dir(k("/locked")).map(|_| String::new()),
        );
        let opens: [(&str, bool, bool, i32); 6] = [
            ("/theirs", true, false, libc::O_NOATIME),
            ("/mine", true, false, libc::O_NOATIME),
            ("/ro", true, false, libc::O_TRUNC),
            ("/theirs", true, false, libc::O_TRUNC),
            ("/ro", false, true, libc::O_APPEND),
            ("/rootdir", true, false, libc::O_DIRECTORY),
        ];
        for (path, read, write, flags) in opens {
            rec(
                &format!("open {path} {flags:#x}"),
                std::fs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .custom_flags(flags)
                    .open(k(path))
                    .and_then(|f| f.metadata())
                    .map(|m| m.len().to_string()),
            );
        }
        v
    });
    assert_eq!(lane.len(), kernel.len(), "{lane:?} {kernel:?}");
    for ((what, l), (_, r)) in lane.iter().zip(&kernel) {
        p.same(what, l, r);
    }
    p.trees("after the unprivileged calls");
    p.finish();
}

fn clone_err(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

#[test]
fn name_operations_by_type_and_slashes() {
    let Some(mut p) = pair() else { return };
    let setup = |p: &mut Pair| {
        build(
            p,
            &["/d/sub", "/e", "/t/inner"],
            &[("/f", b"f"), ("/d/x", b"x"), ("/t/inner/y", b"y")],
            &[
                ("f", "/lf"),
                ("d", "/ld"),
                ("e", "/le"),
                ("nowhere", "/dangling"),
                ("t", "/lt"),
            ],
        );
    };
    setup(&mut p);
    let paths = [
        "/f",
        "/f/",
        "/d",
        "/d/",
        "/e",
        "/e/",
        "/e/.",
        "/e/..",
        "/lf",
        "/lf/",
        "/ld",
        "/ld/",
        "/le",
        "/le/",
        "/dangling",
        "/dangling/",
        "/missing",
        "/missing/",
        "/f/x",
    ];
    for path in paths {
        let l = p.fs.remove_file(path);
        let r = std::fs::remove_file(p.k(path));
        p.same(&format!("remove_file {path}"), &l, &r);
        let l = p.fs.remove_dir(path);
        let r = std::fs::remove_dir(p.k(path));
        p.same(&format!("remove_dir {path}"), &l, &r);
        let l = p.fs.create_dir(path);
        let r = std::fs::create_dir(p.k(path));
        p.same(&format!("create_dir {path}"), &l, &r);
        let l = p.fs.symlink("target", path);
        let r = std::os::unix::fs::symlink("target", p.k(path));
        p.same(&format!("symlink to {path}"), &l, &r);
        let l = p.fs.hard_link("/f", path);
        let r = std::fs::hard_link(p.k("/f"), p.k(path));
        p.same(&format!("hard_link to {path}"), &l, &r);
        p.trees(&format!("after the calls on {path}"));
        for side in [true, false] {
            if side {
                let _ = p.fs.remove_dir_all("/");
                for e in p.fs.read_dir("/").unwrap() {
                    let name = Path::new("/").join(e.unwrap().file_name());
                    p.fs.remove_dir_all(&name)
                        .or_else(|_| p.fs.remove_file(&name))
                        .unwrap();
                }
            } else {
                for e in std::fs::read_dir(&p.root).unwrap() {
                    let name = e.unwrap().path();
                    std::fs::remove_dir_all(&name)
                        .or_else(|_| std::fs::remove_file(&name))
                        .unwrap();
                }
            }
        }
        setup(&mut p);
    }
    for path in ["/lt/", "/d/.", "/d/..", "/lt/.", "/t/inner/.."] {
        let l = p.fs.remove_dir_all(path);
        let r = std::fs::remove_dir_all(p.k(path));
        p.same(&format!("remove_dir_all {path}"), &l, &r);
        p.trees(&format!("after remove_dir_all {path}"));
    }
    p.finish();
}

/// `remove_dir_all` beside another thread removing entries of the same
/// tree: entries that vanish are no error (std ignores `ENOENT` below the
/// top), and the tree is gone after.
#[test]
fn remove_dir_all_beside_another_remover() {
    for round in 0..6 {
        let fs = Filesystem::new_in_memory().unwrap();
        let (dirs, files) = (40, 60);
        for d in 0..dirs {
            fs.create_dir_all(format!("/tree/d{d}/sub")).unwrap();
            for f in 0..files {
                fs.write(format!("/tree/d{d}/f{f}"), b"x").unwrap();
            }
        }
        let other = fs.clone();
        let remover = std::thread::spawn(move || {
            for d in (0..dirs).rev() {
                let _ = other.remove_dir_all(format!("/tree/d{d}/sub"));
                for f in 0..files {
                    let _ = other.remove_file(format!("/tree/d{d}/f{f}"));
                }
            }
        });
        let r = fs.remove_dir_all("/tree");
        remover.join().unwrap();
        assert!(r.is_ok(), "round {round}: {r:?}");
        assert!(!fs.try_exists("/tree").unwrap());
        fs.core().check().unwrap();
    }
}

#[test]
fn tmpfile_and_path_flags() {
    use std::os::fd::AsRawFd;
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/d"], &[("/f", b"data")], &[]);
    for (write, read, flags) in [
        (true, false, libc::O_TMPFILE),
        (true, true, libc::O_TMPFILE),
        (false, true, libc::O_TMPFILE),
        (true, false, libc::O_TMPFILE | libc::O_EXCL),
    ] {
        let what = format!("tmpfile write={write} read={read} flags={flags:#x}");
        let l = lanefs::OpenOptions::new()
            .write(write)
            .read(read)
            .mode(0o640)
            .custom_flags(flags)
            .open(&p.fs, "/d");
        let s = std::fs::OpenOptions::new()
            .write(write)
            .read(read)
            .mode(0o640)
            .custom_flags(flags)
            .open(p.k("/d"));
        let (mut lf, mut sf) = match (l, s) {
            (Ok(l), Ok(s)) => (l, s),
            (l, s) => {
                p.same(&what, &unit(l), &unit(s));
                continue;
            }
        };
        let l = lf
            .write(b"anon")
            .and_then(|_| lf.metadata())
            .map(|m| (m.nlink(), m.len(), m.permissions()));
        let r = sf
            .write(b"anon")
            .and_then(|_| sf.metadata())
            .map(|m| (m.nlink() as u32, m.len(), m.permissions().mode() & 0o7777));
        p.same(&format!("{what}: write, fstat"), &l, &r);
        let l = p.fs.link_file(&lf, "/d/named");
        let target = std::ffi::CString::new(p.k("/d/named").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid descriptor and NUL-terminated paths.
        let rc = unsafe {
            libc::linkat(
                sf.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        let r = if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
        p.same(&format!("{what}: link"), &l, &r);
        let _ = p.fs.remove_file("/d/named");
        let _ = std::fs::remove_file(p.k("/d/named"));
    }
    p.trees("after tmpfiles");
    p.finish();
}

/// Which of a file's times each call moves, on both sides: (atime, mtime,
/// ctime) changed, for a sequence of calls a std user makes.
#[test]
fn which_times_each_call_moves() {
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/d"], &[("/d/f", b"0123456789")], &[]);
    type Step = (
        &'static str,
        &'static str,
        fn(&Filesystem) -> io::Result<()>,
        fn(&Path) -> io::Result<()>,
    );
    let steps: &[Step] = &[
        (
            "read",
            "/d/f",
            |fs| unit(fs.read("/d/f")),
            |r| unit(std::fs::read(r.join("d/f"))),
        ),
        (
            "read again",
            "/d/f",
            |fs| unit(fs.read("/d/f")),
            |r| unit(std::fs::read(r.join("d/f"))),
        ),
        (
            "write_at",
            "/d/f",
            |fs| {
                lanefs::OpenOptions::new()
                    .write(true)
                    .open(fs, "/d/f")?
                    .write_all_at(b"x", 3)
            },
            |r| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("d/f"))?
                    .write_all_at(b"x", 3)
            },
        ),
        (
            "set_len same size",
            "/d/f",
            |fs| {
                lanefs::OpenOptions::new()
                    .write(true)
                    .open(fs, "/d/f")?
                    .set_len(10)
            },
            |r| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("d/f"))?
                    .set_len(10)
            },
        ),
        (
            "set_len smaller",
            "/d/f",
            |fs| {
                lanefs::OpenOptions::new()
                    .write(true)
                    .open(fs, "/d/f")?
                    .set_len(8)
            },
            |r| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("d/f"))?
                    .set_len(8)
            },
        ),
        (
            "chmod",
            "/d/f",
            |fs| fs.set_permissions("/d/f", 0o600),
            |r| std::fs::set_permissions(r.join("d/f"), std::fs::Permissions::from_mode(0o600)),
        ),
        (
            "open read-only",
            "/d/f",
            |fs| unit(fs.open("/d/f")),
            |r| unit(std::fs::File::open(r.join("d/f"))),
        ),
        (
            "hard_link",
            "/d/f",
            |fs| fs.hard_link("/d/f", "/d/g"),
            |r| std::fs::hard_link(r.join("d/f"), r.join("d/g")),
        ),
        (
            "hard_link: the dir",
            "/d",
            |fs| fs.hard_link("/d/f", "/d/h"),
            |r| std::fs::hard_link(r.join("d/f"), r.join("d/h")),
        ),
        (
            "rename",
            "/d/f",
            |fs| fs.rename("/d/g", "/d/g2"),
            |r| std::fs::rename(r.join("d/g"), r.join("d/g2")),
        ),
        (
            "read_dir: the dir",
            "/d",
            |fs| fs.read_dir("/d")?.try_for_each(unit),
            |r| std::fs::read_dir(r.join("d"))?.try_for_each(unit),
        ),
        (
            "truncate to empty",
            "/d/f",
            |fs| unit(fs.create("/d/f")),
            |r| unit(std::fs::File::create(r.join("d/f"))),
        ),
        (
            "truncate empty again",
            "/d/f",
            |fs| unit(fs.create("/d/f")),
            |r| unit(std::fs::File::create(r.join("d/f"))),
        ),
        (
            "empty write",
            "/d/f",
            |fs| unit(fs.create("/d/f")?.write(b"")),
            |r| unit(std::fs::File::create(r.join("d/f"))?.write(b"")),
        ),
        (
            "remove a link: the dir",
            "/d",
            |fs| fs.remove_file("/d/h"),
            |r| std::fs::remove_file(r.join("d/h")),
        ),
        (
            "remove a link",
            "/d/f",
            |fs| fs.remove_file("/d/g2"),
            |r| std::fs::remove_file(r.join("d/g2")),
        ),
        (
            "copy onto it",
            "/d/f",
            |fs| unit(fs.copy("/d/f", "/d/c")),
            |r| unit(std::fs::copy(r.join("d/f"), r.join("d/c"))),
        ),
    ];
    let lane_t = |fs: &Filesystem, path: &str| {
        let m = fs.metadata(path).unwrap();
        (m.atime(), m.mtime(), m.ctime())
    };
    let std_t = |path: &Path| {
        let m = std::fs::metadata(path).unwrap();
        (
            (m.atime(), m.atime_nsec()),
            (m.mtime(), m.mtime_nsec()),
            (m.ctime(), m.ctime_nsec()),
        )
    };
    for (what, watched, lane_op, std_op) in steps {
        // Past the clock's granularity, so that a change shows.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (l0, s0) = (lane_t(&p.fs, watched), std_t(&p.k(watched)));
        let l = lane_op(&p.fs);
        let r = std_op(&p.root);
        p.same(&format!("{what}: result"), &l, &r);
        let (l1, s1) = (lane_t(&p.fs, watched), std_t(&p.k(watched)));
        let l = Ok::<_, io::Error>((l0.0 != l1.0, l0.1 != l1.1, l0.2 != l1.2));
        let r = Ok((s0.0 != s1.0, s0.1 != s1.1, s0.2 != s1.2));
        p.same(
            &format!("{what}: (atime, mtime, ctime) moved of {watched}"),
            &l,
            &r,
        );
    }
    p.finish();
}

/// Reading a sparse file too big for memory whole: an `OutOfMemory` error
/// up front, as std's `read_to_end` (which reserves the file's size
/// fallibly), not a growing vector until the allocator aborts.
#[test]
fn reading_whole_a_file_too_big_for_memory() {
    let Some(mut p) = pair() else { return };
    let size = 1u64 << 62;
    p.fs.create("/huge").unwrap().set_len(size).unwrap();
    std::fs::File::create(p.k("/huge"))
        .unwrap()
        .set_len(size)
        .unwrap();
    let l = p.fs.read("/huge").map(|v| v.len());
    let r = std::fs::read(p.k("/huge")).map(|v| v.len());
    p.same("fs::read", &l, &r);
    let l = p.fs.read_to_string("/huge").map(|v| v.len());
    let r = std::fs::read_to_string(p.k("/huge")).map(|v| v.len());
    p.same("fs::read_to_string", &l, &r);
    let mut lv = Vec::new();
    let mut sv = Vec::new();
    let l = p.fs.open("/huge").and_then(|mut f| f.read_to_end(&mut lv));
    let r = std::fs::File::open(p.k("/huge")).and_then(|mut f| f.read_to_end(&mut sv));
    p.same("File::read_to_end", &l, &r);
    // From near the end it fits.
    let mut lv = Vec::new();
    let mut sv = Vec::new();
    let l = p.fs.open("/huge").and_then(|mut f| {
        f.seek(SeekFrom::End(-5))?;
        f.read_to_end(&mut lv)
    });
    let r = std::fs::File::open(p.k("/huge")).and_then(|mut f| {
        f.seek(SeekFrom::End(-5))?;
        f.read_to_end(&mut sv)
    });
    p.same("File::read_to_end of the last bytes", &l, &r);
    let mut ls = String::from("kept");
    let mut ss = String::from("kept");
    p.fs.write("/bad", b"ok\xff").unwrap();
    std::fs::write(p.k("/bad"), b"ok\xff").unwrap();
    let l =
        p.fs.open("/bad")
            .and_then(|mut f| f.read_to_string(&mut ls))
            .map_err(|e| (e.kind(), ls.clone()));
    let r = std::fs::File::open(p.k("/bad"))
        .and_then(|mut f| f.read_to_string(&mut ss))
        .map_err(|e| (e.kind(), ss.clone()));
    assert_eq!(l, r, "read_to_string of invalid UTF-8");
    p.finish();
}

/// The usual std loop: remove (or rename) each entry while the listing
/// goes on. Every entry there before is seen exactly once (no removal
/// finds its name gone), and the directory ends as the loop left it.
#[test]
fn changing_a_directory_while_listing_it() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/d").unwrap();
    let n = 1000;
    for i in 0..n {
        fs.write(format!("/d/f{i}"), b"x").unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    for (k, e) in fs.read_dir("/d").unwrap().enumerate() {
        let e = e.unwrap();
        assert!(
            seen.insert(e.file_name()),
            "{:?} listed twice",
            e.file_name()
        );
        fs.remove_file(e.path()).unwrap();
        // New names while listing: may be listed or not (POSIX), but
        // must not disturb the rest.
        if k % 3 == 0 {
            fs.write(format!("/d/new{k}"), b"y").unwrap();
        }
    }
    for i in 0..n {
        assert!(
            seen.contains(std::ffi::OsStr::new(&format!("f{i}"))),
            "f{i} never listed"
        );
    }
    let left: Vec<_> = fs
        .read_dir("/d")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(left.iter().all(|n| n.starts_with("new")), "{left:?}");
    // Renaming each entry within the directory while listing.
    fs.remove_dir_all("/d").unwrap();
    fs.create_dir("/d").unwrap();
    for i in 0..n {
        fs.write(format!("/d/a{i}"), b"x").unwrap();
    }
    let mut renamed = 0;
    for e in fs.read_dir("/d").unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(i) = name.strip_prefix('a') {
            fs.rename(format!("/d/{name}"), format!("/d/b{i}")).unwrap();
            renamed += 1;
        }
    }
    assert_eq!(renamed, n, "each old name listed exactly once");
}

#[test]
fn fchown_as_std() {
    let Some(mut p) = pair() else { return };
    let cases: &[(&str, u32, Option<u32>, Option<u32>)] = &[
        ("/a", 0o6755, Some(1000), Some(1000)),
        ("/b", 0o6755, None, None),
        ("/c", 0o2644, None, None),
        ("/d", 0o4755, None, Some(5)),
        ("/e", 0o644, Some(7), None),
    ];
    for &(name, mode, uid, gid) in cases {
        p.fs.write(name, b"x").unwrap();
        std::fs::write(p.k(name), b"x").unwrap();
        p.fs.set_permissions(name, mode).unwrap();
        std::fs::set_permissions(p.k(name), std::fs::Permissions::from_mode(mode)).unwrap();
        let lf = p.fs.open(name).unwrap();
        let sf = std::fs::File::open(p.k(name)).unwrap();
        let l = lf
            .set_owner(uid, gid)
            .and_then(|_| lf.metadata())
            .map(|m| (m.uid(), m.gid(), m.permissions()));
        let r = std::os::unix::fs::fchown(&sf, uid, gid)
            .and_then(|_| sf.metadata())
            .map(|m| (m.uid(), m.gid(), m.permissions().mode() & 0o7777));
        p.same(&format!("fchown {name} {mode:o} {uid:?} {gid:?}"), &l, &r);
    }
    // Unprivileged: the owner may change the group to one of its own.
    for name in ["/mine", "/theirs"] {
        p.fs.write(name, b"x").unwrap();
        std::fs::write(p.k(name), b"x").unwrap();
    }
    p.fs.chown("/mine", Some(1000), Some(1000)).unwrap();
    std::os::unix::fs::chown(p.k("/mine"), Some(1000), Some(1000)).unwrap();
    let user = p.fs.with_cred(lanefs::Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![1001],
    });
    let ops: [(Option<u32>, Option<u32>); 5] = [
        (None, Some(1001)),
        (None, Some(0)),
        (Some(0), None),
        (Some(1000), None),
        (None, None),
    ];
    let lane: Vec<io::Result<()>> = ["/mine", "/theirs"]
        .iter()
        .flat_map(|name| {
            let f = user.open(name);
            ops.iter()
                .map(|&(u, g)| {
                    f.as_ref()
                        .map_err(clone_err)
                        .and_then(|f| f.set_owner(u, g))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let root = p.root.clone();
    let kernel: Vec<io::Result<()>> = as_user(1000, 1000, move || {
        // SAFETY: a per-thread raw setgroups with a valid one-element list.
        unsafe {
            let groups = [1001 as libc::gid_t];
            assert_eq!(libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()), 0);
        }
        ["/mine", "/theirs"]
            .iter()
            .flat_map(|name| {
                let f = std::fs::File::open(root.join(&name[1..]));
                ops.iter()
                    .map(|&(u, g)| {
                        f.as_ref()
                            .map_err(clone_err)
                            .and_then(|f| std::os::unix::fs::fchown(f, u, g))
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    for (i, (l, r)) in lane.iter().zip(&kernel).enumerate() {
        p.same(&format!("unprivileged fchown #{i}"), l, r);
    }
    p.finish();
}

/// Handles made after the last `Filesystem` view is gone (clones of an open
/// file) work on any thread, and the listing's entries keep their paths.
#[test]
fn clones_and_listings_after_the_filesystem_is_gone() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/d").unwrap();
    fs.write("/d/f", b"hello").unwrap();
    let mut f = lanefs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fs, "/d/f")
        .unwrap();
    let listing = fs.read_dir("/d").unwrap();
    drop(fs);
    let mut g = f.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        g.seek(SeekFrom::End(0))?;
        g.write_all(b", world")?;
        g.sync_all()?;
        Ok::<_, io::Error>(g.position())
    });
    assert_eq!(t.join().unwrap().unwrap(), 12);
    assert_eq!(f.position(), 12, "the position is shared");
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello, world");
    let paths: Vec<PathBuf> = listing.map(|e| e.unwrap().path()).collect();
    assert_eq!(paths, [PathBuf::from("/d/f")]);
    let h = f.try_clone().unwrap();
    drop(f);
    assert_eq!(h.metadata().unwrap().len(), 12);
}

/// `..` after a symlink is the parent of the link's target (physical
/// resolution), in every call that takes a path.
#[test]
fn dotdot_after_symlinks() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/a/b/c", "/x/y"],
        &[("/a/b/in_b", b"b"), ("/x/in_x", b"x")],
        &[("../../a/b/c", "/x/y/lc"), ("a/b", "/lb")],
    );
    let names = |p: &Pair,
                 path: &str|
     -> (
        io::Result<Vec<std::ffi::OsString>>,
        io::Result<Vec<std::ffi::OsString>>,
    ) {
        let l = p.fs.read_dir(path).and_then(|rd| {
            let mut v = rd
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        let r = std::fs::read_dir(p.k(path)).and_then(|rd| {
            let mut v = rd
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        (l, r)
    };
    for path in [
        "/x/y/lc/..",
        "/x/y/lc/../..",
        "/lb/..",
        "/lb/../b/c/..",
        "/x/y/lc/../in_b/..",
    ] {
        let (l, r) = names(&p, path);
        p.same(&format!("read_dir {path}"), &l, &r);
    }
    for path in ["/x/y/lc/../in_b", "/lb/../../x/in_x", "/lb/in_b/.."] {
        let l = p.fs.read(path);
        let r = std::fs::read(p.k(path));
        p.same(&format!("read {path}"), &l, &r);
    }
    let l = p.fs.write("/x/y/lc/../new", b"n");
    let r = std::fs::write(p.k("/x/y/lc/../new"), b"n");
    p.same("write through lc/..", &l, &r);
    p.trees("after the writes through ..");
    p.finish();
}

/// Threads creating overlapping trees at once all succeed (std's
/// `create_dir_all` takes an `EEXIST` on a directory for success).
#[test]
fn racing_create_dir_all() {
    for _ in 0..20 {
        let fs = Filesystem::new_in_memory().unwrap();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || fs.create_dir_all(format!("/r/s/t/u/v/w{}", t % 2)))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        assert!(fs.metadata("/r/s/t/u/v/w1").unwrap().is_dir());
    }
}

/// `Read`, `Write` and `Seek` through `&File`, mixed with calls through
/// `&mut File` and clones: one position, as std's.
#[test]
fn shared_file_references() {
    use std::io::BufRead;
    let Some(mut p) = pair() else { return };
    p.fs.write("/f", b"line one\nline two\nline three\n")
        .unwrap();
    std::fs::write(p.k("/f"), b"line one\nline two\nline three\n").unwrap();
    let mut lf = lanefs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p.k("/f"))
        .unwrap();
    let mut lb = [0u8; 5];
    let mut sb = [0u8; 5];
    let l = lf.read(&mut lb).map(|n| lb[..n].to_vec());
    let r = sf.read(&mut sb).map(|n| sb[..n].to_vec());
    p.same("read through &mut", &l, &r);
    let l = (&lf).read(&mut lb).map(|n| lb[..n].to_vec());
    let r = (&sf).read(&mut sb).map(|n| sb[..n].to_vec());
    p.same("read through &", &l, &r);
    let l = lf.stream_position();
    let r = sf.stream_position();
    p.same("position through &mut after &", &l, &r);
    let l = (&lf).seek(SeekFrom::Current(-2));
    let r = (&sf).seek(SeekFrom::Current(-2));
    p.same("seek through &", &l, &r);
    let l = (&lf).write(b"ONE").and_then(|_| lf.stream_position());
    let r = (&sf).write(b"ONE").and_then(|_| sf.stream_position());
    p.same("write through &", &l, &r);
    let l = lf.seek(SeekFrom::Start(0));
    let r = sf.seek(SeekFrom::Start(0));
    p.same("seek through &mut", &l, &r);
    let l: io::Result<Vec<String>> = io::BufReader::new(&lf).lines().collect();
    let r: io::Result<Vec<String>> = io::BufReader::new(&sf).lines().collect();
    p.same("lines through BufReader<&File>", &l, &r);
    let lc = lf.try_clone().unwrap();
    let sc = sf.try_clone().unwrap();
    let l = (&lc)
        .seek(SeekFrom::Start(5))
        .and_then(|_| lf.stream_position());
    let r = (&sc)
        .seek(SeekFrom::Start(5))
        .and_then(|_| sf.stream_position());
    p.same("seek through a clone's &", &l, &r);
    let mut lv = Vec::new();
    let mut sv = Vec::new();
    let l = io::copy(&mut &lf, &mut lv).map(|n| (n, lv.clone()));
    let r = io::copy(&mut &sf, &mut sv).map(|n| (n, sv.clone()));
    p.same("io::copy from &File", &l, &r);
    let mut ls = String::new();
    let mut ss = String::new();
    (&lf).seek(SeekFrom::Start(0)).unwrap();
    (&sf).seek(SeekFrom::Start(0)).unwrap();
    let l = (&lf).read_to_string(&mut ls).map(|n| (n, ls.clone()));
    let r = (&sf).read_to_string(&mut ss).map(|n| (n, ss.clone()));
    p.same("read_to_string through &", &l, &r);
    drop((lf, sf, lc, sc));
    p.trees("after the shared references");
    p.finish();
}

/// Random sequences of calls through `File`s on one file — positional and
/// not, vectored, through `&File`, clones and drops — on both sides: every
/// outcome and the final content equal.
#[test]
fn random_file_call_sequences() {
    let Some(mut p) = pair() else { return };
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }
    // LANEFS_PARITY_SEEDS for a longer run (2000 pass).
    let seeds: u64 = std::env::var("LANEFS_PARITY_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    for seed in 1..=seeds {
        let name = format!("/r{seed}");
        p.fs.write(&name, b"").unwrap();
        std::fs::write(p.k(&name), b"").unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut slots: Vec<(lanefs::File, std::fs::File, String)> = Vec::new();
        for step in 0..250 {
            if slots.is_empty() || rng.below(12) == 0 {
                let (read, write, append) = match rng.below(4) {
                    0 => (true, false, false),
                    1 => (false, true, false),
                    2 => (true, true, false),
                    _ => (rng.below(2) == 0, false, true),
                };
                let l = lanefs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .append(append)
                    .open(&p.fs, &name)
                    .unwrap();
                let s = std::fs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .append(append)
                    .open(p.k(&name))
                    .unwrap();
                slots.push((l, s, format!("r={read} w={write} a={append}")));
                continue;
            }
            let i = rng.below(slots.len() as u64) as usize;
            let len = rng.below(9000) as usize;
            let off = rng.below(20_000);
            let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ (step as u8)).collect();
            let op = rng.below(14);
            if op == 10 {
                let (lf, sf, how) = &slots[i];
                let clone = (
                    lf.try_clone().unwrap(),
                    sf.try_clone().unwrap(),
                    format!("clone of {how}"),
                );
                slots.push(clone);
                continue;
            }
            if op == 11 && slots.len() > 1 {
                slots.swap_remove(i);
                continue;
            }
            let (lf, sf, how) = &mut slots[i];
            let what = format!("seed {seed} step {step} op {op} on {how}");
            let (l, r): (io::Result<Vec<u8>>, io::Result<Vec<u8>>) = match op {
                0 => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    (
                        lf.read(&mut a).map(|n| a[..n].to_vec()),
                        sf.read(&mut b).map(|n| b[..n].to_vec()),
                    )
                }
                1 => (
                    lf.write(&data).map(|n| vec![n as u8]),
                    sf.write(&data).map(|n| vec![n as u8]),
                ),
                2 => {
                    let to = match rng.below(3) {
                        0 => SeekFrom::Start(off),
                        1 => SeekFrom::Current(off as i64 - 10_000),
                        _ => SeekFrom::End(off as i64 - 10_000),
                    };
                    (
                        lf.seek(to).map(|n| n.to_le_bytes().to_vec()),
                        sf.seek(to).map(|n| n.to_le_bytes().to_vec()),
                    )
                }
                3 => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    (
                        lf.read_at(&mut a, off).map(|n| a[..n].to_vec()),
                        sf.read_at(&mut b, off).map(|n| b[..n].to_vec()),
                    )
                }
                4 => (
                    lf.write_at(&data, off).map(|n| vec![n as u8]),
                    sf.write_at(&data, off).map(|n| vec![n as u8]),
                ),
                5 => (
                    lf.set_len(off).map(|_| Vec::new()),
                    sf.set_len(off).map(|_| Vec::new()),
                ),
                6 => {
                    let (mut a1, mut a2) = (vec![0; len / 2], vec![0; len - len / 2]);
                    let (mut b1, mut b2) = (vec![0; len / 2], vec![0; len - len / 2]);
                    let l = lf
                        .read_vectored(&mut [
                            io::IoSliceMut::new(&mut a1),
                            io::IoSliceMut::new(&mut a2),
                        ])
                        .map(|n| [a1.clone(), a2.clone()].concat()[..n].to_vec());
                    let r = sf
                        .read_vectored(&mut [
                            io::IoSliceMut::new(&mut b1),
                            io::IoSliceMut::new(&mut b2),
                        ])
                        .map(|n| [b1.clone(), b2.clone()].concat()[..n].to_vec());
                    (l, r)
                }
                7 => {
                    let (x, y) = data.split_at(len / 3);
                    (
                        lf.write_vectored(&[io::IoSlice::new(x), io::IoSlice::new(y)])
                            .map(|n| n.to_le_bytes().to_vec()),
                        sf.write_vectored(&[io::IoSlice::new(x), io::IoSlice::new(y)])
                            .map(|n| n.to_le_bytes().to_vec()),
                    )
                }
                8 => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    (
                        (&*lf).read(&mut a).map(|n| a[..n].to_vec()),
                        (&*sf).read(&mut b).map(|n| b[..n].to_vec()),
                    )
                }
                9 => (
                    (&*lf).write(&data).map(|n| vec![n as u8]),
                    (&*sf).write(&data).map(|n| vec![n as u8]),
                ),
                12 => {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    (
                        lf.read_to_end(&mut a).map(|_| a),
                        sf.read_to_end(&mut b).map(|_| b),
                    )
                }
                _ => (
                    lf.stream_position().map(|n| n.to_le_bytes().to_vec()),
                    sf.stream_position().map(|n| n.to_le_bytes().to_vec()),
                ),
            };
            p.same(&what, &l, &r);
            if !p.mismatches.is_empty() {
                break;
            }
        }
        drop(slots);
        let l = p.fs.read(&name);
        let r = std::fs::read(p.k(&name));
        p.same(&format!("seed {seed}: final content"), &l, &r);
        if !p.mismatches.is_empty() {
            break;
        }
        // Long runs stay within a small image.
        p.fs.remove_file(&name).unwrap();
        std::fs::remove_file(p.k(&name)).unwrap();
    }
    p.finish();
}

#[test]
fn recursive_dir_builder_modes() {
    use std::os::unix::fs::DirBuilderExt;
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/exists"], &[("/file", b"")], &[]);
    for (path, mode) in [
        ("/a/b/c", 0o750u32),
        ("/exists/x/y", 0o700),
        ("/exists", 0o700),
        ("/file/x", 0o755),
        ("/s/t", 0o1777),
    ] {
        let l = p.fs.create_dir_all_mode(path, mode);
        let r = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(p.k(path));
        p.same(&format!("DirBuilder {path} {mode:o}"), &l, &r);
    }
    p.trees("after the recursive builders");
    p.finish();
}

// ---- the root and absolute symlinks (std's side in a chroot) ----------------

/// Run `f` on a thread whose root and working directory are `root`
/// (`unshare(CLONE_FS)` first, so the rest of the process keeps its own):
/// absolute paths and `..` stay inside, as in lanefs.
fn in_chroot<T: Send + 'static>(root: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
    let dir = std::ffi::CString::new(root.as_os_str().as_bytes()).unwrap();
    std::thread::spawn(move || {
        // SAFETY: per-thread calls on valid NUL-terminated paths.
        unsafe {
            assert_eq!(libc::unshare(libc::CLONE_FS), 0, "unshare");
            assert_eq!(libc::chroot(dir.as_ptr()), 0, "chroot");
            assert_eq!(libc::chdir(c"/".as_ptr()), 0, "chdir");
        }
        f()
    })
    .join()
    .expect("chroot thread")
}

type Outcome = io::Result<String>;

/// The calls about the root and absolute links, through any file system.
fn root_calls(
    canonicalize: &dyn Fn(&str) -> io::Result<PathBuf>,
    open: &dyn Fn(&str, bool, bool, bool, i32) -> Outcome,
    other: &dyn Fn(&str) -> Outcome,
) -> Vec<(String, Outcome)> {
    let mut v = Vec::new();
    for path in [
        "/",
        "/..",
        "/../..",
        "/abs",
        "/abs/..",
        "/abs/../abs2",
        "/d/rel_root/d",
        "/d/../../d",
        "/loop_abs",
        "/abs2/file",
        "/d/rel_root/abs/../..",
    ] {
        v.push((
            format!("canonicalize {path}"),
            canonicalize(path).map(|p| p.display().to_string()),
        ));
    }
    for (path, write, create, create_new, flags) in [
        ("/", false, false, false, 0),
        ("/", false, false, false, libc::O_DIRECTORY),
        ("/", true, false, false, 0),
        ("/", true, true, false, 0),
        ("/", true, false, true, 0),
        ("/..", true, true, false, 0),
        ("/..", true, false, true, 0),
        ("/abs", false, false, false, libc::O_NOFOLLOW),
        ("/abs/", false, false, false, libc::O_NOFOLLOW),
        ("/dangling_abs", true, true, false, 0),
        ("/dangling_abs", true, false, true, 0),
    ] {
        v.push((
            format!("open {path} w={write} c={create} cn={create_new} {flags:#x}"),
            open(path, write, create, create_new, flags),
        ));
    }
    for op in [
        "rename / /x",
        "rename /d /",
        "rename /d /..",
        "remove_dir /",
        "remove_dir /..",
        "remove_file /",
        "create_dir /",
        "create_dir /..",
        "hard_link /d/f /",
        "symlink /",
        "read_link /",
        "read_link /abs",
        "metadata /..",
        "read_dir /..",
        "remove_dir_all /",
    ] {
        v.push((op.to_string(), other(op)));
    }
    v
}

fn names_sorted(it: impl Iterator<Item = io::Result<std::ffi::OsString>>) -> Outcome {
    let mut v = it.collect::<io::Result<Vec<_>>>()?;
    v.sort();
    Ok(format!("{v:?}"))
}

#[test]
fn the_root_and_absolute_symlinks() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d/sub"],
        &[("/d/f", b"f")],
        &[
            ("/d", "/abs"),
            ("/abs/sub", "/abs2"),
            ("/", "/d/rel_root"),
            ("/loop_abs", "/loop_abs"),
            ("/made_abs", "/dangling_abs"),
        ],
    );
    let fs = p.fs.clone();
    let lane = {
        let canonicalize = |path: &str| fs.canonicalize(path);
        let open = |path: &str, write: bool, create: bool, create_new: bool, flags: i32| {
            lanefs::OpenOptions::new()
                .read(!write)
                .write(write)
                .create(create)
                .create_new(create_new)
                .custom_flags(flags)
                .open(&fs, path)
                .and_then(|f| f.metadata())
                .map(|m| format!("{:?} {}", m.kind(), m.nlink()))
        };
        let other = |op: &str| -> Outcome {
            let w: Vec<&str> = op.split(' ').collect();
            let done = |r: io::Result<()>| r.map(|_| String::new());
            match w[0] {
                "rename" => done(fs.rename(w[1], w[2])),
                "remove_dir" => done(fs.remove_dir(w[1])),
                "remove_file" => done(fs.remove_file(w[1])),
                "create_dir" => done(fs.create_dir(w[1])),
                "hard_link" => done(fs.hard_link(w[1], w[2])),
                "symlink" => done(fs.symlink("x", w[1])),
                "read_link" => fs.read_link(w[1]).map(|p| p.display().to_string()),
                "metadata" => fs.metadata(w[1]).map(|m| format!("{:?}", m.kind())),
                "read_dir" => names_sorted(fs.read_dir(w[1])?.map(|e| e.map(|e| e.file_name()))),
                _ => done(fs.remove_dir_all(w[1])),
            }
        };
        root_calls(&canonicalize, &open, &other)
    };
    let kernel = in_chroot(&p.root, || {
        let canonicalize = |path: &str| std::fs::canonicalize(path);
        let open = |path: &str, write: bool, create: bool, create_new: bool, flags: i32| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .create(create)
                .create_new(create_new)
                .custom_flags(flags)
                .open(path)
                .and_then(|f| f.metadata())
                .map(|m| {
                    let kind = if m.is_dir() {
                        "Directory"
                    } else if m.file_type().is_symlink() {
                        "Symlink"
                    } else {
                        "Regular"
                    };
                    format!("{kind} {}", m.nlink())
                })
        };
        let other = |op: &str| -> Outcome {
            let w: Vec<&str> = op.split(' ').collect();
            let done = |r: io::Result<()>| r.map(|_| String::new());
            match w[0] {
                "rename" => done(std::fs::rename(w[1], w[2])),
                "remove_dir" => done(std::fs::remove_dir(w[1])),
                "remove_file" => done(std::fs::remove_file(w[1])),
                "create_dir" => done(std::fs::create_dir(w[1])),
                "hard_link" => done(std::fs::hard_link(w[1], w[2])),
                "symlink" => done(std::os::unix::fs::symlink("x", w[1])),
                "read_link" => std::fs::read_link(w[1]).map(|p| p.display().to_string()),
                "metadata" => std::fs::metadata(w[1])
                    .map(|m| if m.is_dir() { "Directory" } else { "Regular" }.to_string()),
                "read_dir" => {
                    names_sorted(std::fs::read_dir(w[1])?.map(|e| e.map(|e| e.file_name())))
                }
                _ => done(std::fs::remove_dir_all(w[1])),
            }
        };
        root_calls(&canonicalize, &open, &other)
    });
    for ((what, l), (_, r)) in lane.iter().zip(&kernel) {
        p.same(what, l, r);
    }
    p.trees("after the calls on the root");
    p.finish();
}

/// Writers on several threads through one position (clones, `&File`) or
/// through `O_APPEND`: every record lands whole and none overwrites
/// another, as on Linux (appends are atomic; a shared position moves under
/// its lock).
#[test]
fn concurrent_writers_keep_records_whole() {
    let fs = Filesystem::new_in_memory().unwrap();
    const REC: usize = 100;
    const PER: usize = 300;
    for mode in ["append", "clones", "shared ref"] {
        let path = format!("/{}", mode.replace(' ', "_"));
        let f = lanefs::OpenOptions::new()
            .write(true)
            .create(true)
            .append(mode == "append")
            .open(&fs, &path)
            .unwrap();
        let f = std::sync::Arc::new(f);
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let fs = fs.clone();
                let path = path.clone();
                let shared = f.clone();
                let clone = f.try_clone().unwrap();
                let mode = mode.to_string();
                std::thread::spawn(move || {
                    let mut own = match mode.as_str() {
                        "append" => Some(
                            lanefs::OpenOptions::new()
                                .append(true)
                                .open(&fs, &path)
                                .unwrap(),
                        ),
                        "clones" => Some(clone),
                        _ => None,
                    };
                    for i in 0..PER {
                        let mut rec = vec![b'a' + t; REC];
                        rec[..4].copy_from_slice(&(i as u32).to_le_bytes());
                        match own.as_mut() {
                            Some(f) => f.write_all(&rec).unwrap(),
                            None => (&*shared).write_all(&rec).unwrap(),
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let data = fs.read(&path).unwrap();
        assert_eq!(
            data.len(),
            4 * PER * REC,
            "{mode}: every record written once"
        );
        let mut per_thread = [0usize; 4];
        for rec in data.chunks(REC) {
            let t = rec[REC - 1];
            assert!(rec[4..].iter().all(|&b| b == t), "{mode}: a record torn");
            let i = u32::from_le_bytes(rec[..4].try_into().unwrap()) as usize;
            let t = (t - b'a') as usize;
            assert_eq!(i, per_thread[t], "{mode}: records of a thread in order");
            per_thread[t] += 1;
        }
    }
}
