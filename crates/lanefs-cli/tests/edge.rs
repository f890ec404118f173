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
//!
//! Writes land where the kernel puts them, whatever the descriptor's
//! `O_APPEND` was at open: after `fcntl(F_SETFL)` clears or sets it, and
//! for a store through a shared mapping of an `O_APPEND` descriptor.
//! Until 2026-11 the daemon appended every write through a handle opened
//! `O_APPEND` (the mapped page went to the end of the file).
//!
//! Likewise a read moves atime by the descriptor's `O_NOATIME` at the
//! time of the read, set or cleared by `fcntl(F_SETFL)` after the open
//! (until 2026-11 the open's flag counted), and so does a listing (until
//! 2026-11 every listing counted, whatever the descriptor's flag).
//!
//! `open(O_CREAT)` of an existing socket or (`O_NOFOLLOW`) symlink in a
//! sticky directory, as a user who owns neither it nor the directory: the
//! VFS's `may_create_in_sticky` (`EACCES` where the directory is
//! world-writable) applies to a `default_permissions` mount as to tmpfs.
//!
//! A truncate to the size a file has: by path it moves no time where
//! nothing is allocated, through a descriptor (or `O_TRUNC`) always, and
//! either way it gives back a `fallocate(KEEP_SIZE)` reservation past the
//! end, as on tmpfs.
//!
//! A `write(2)` that does not fit returns a short count, as on tmpfs
//! (the kernel sends a write that starts inside a page it does not cache
//! as more than one WRITE, each all-or-nothing in the engine): docs/FUSE.md,
//! "Known gaps".

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

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

/// The sticky-create cases on the tree at `root`: directories `w` (root's,
/// 01777) and `g` (root's, group 1000, 01775), each holding a socket and a
/// symlink owned by 1001, one socket owned by root and one by 1000; each
/// opened `O_CREAT` by user 1000. One line per open.
fn sticky_create_steps(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (dir, mode, gid) in [("w", 0o1777, 0), ("g", 0o1775, 1000)] {
        let d = root.join(dir);
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, None, Some(gid)).unwrap();
        let cd = c(&d);
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::chmod(cd.as_ptr(), mode) }, 0);
        for (name, owner) in [("sock1001", 1001), ("sockroot", 0), ("sock1000", 1000)] {
            let p = c(&d.join(name));
            // SAFETY: a valid C string.
            assert_eq!(
                unsafe { libc::mknod(p.as_ptr(), libc::S_IFSOCK | 0o666, 0) },
                0
            );
            std::os::unix::fs::lchown(d.join(name), Some(owner), Some(owner)).unwrap();
        }
        std::os::unix::fs::symlink("target", d.join("sym1001")).unwrap();
        std::os::unix::fs::lchown(d.join("sym1001"), Some(1001), Some(1001)).unwrap();
        for (name, extra) in [
            ("sock1001", 0),
            ("sockroot", 0),
            ("sock1000", 0),
            ("sym1001", libc::O_NOFOLLOW),
        ] {
            let p = c(&d.join(name));
            let r = as_ids(1000, 1000, &[], || {
                // SAFETY: a valid C string.
                let fd = unsafe {
                    libc::open(p.as_ptr(), libc::O_CREAT | libc::O_RDONLY | extra, 0o644)
                };
                if fd >= 0 {
                    0
                } else {
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(254)
                }
            });
            out.push(format!(
                "open({dir}/{name}, O_CREAT{}) = {r}",
                if extra != 0 { "|O_NOFOLLOW" } else { "" }
            ));
        }
    }
    out
}

fn sticky_create_matches_tmpfs() {
    let m = TestMount::with(
        "stickycreate",
        &["-o", "allow_other,default_permissions"],
        &[],
    );
    let t = Tmpfs::new("stickycreate-tmpfs");
    let want = sticky_create_steps(&t.0);
    let eacces = format!("open(w/sock1001, O_CREAT) = {}", libc::EACCES);
    assert!(want.contains(&eacces), "tmpfs: {want:#?}");
    let got = sticky_create_steps(&m.mnt);
    assert_eq!(got, want, "lanefs (left) vs tmpfs (right)");
}

/// `open(2)` of `p` with `flags`; panics on failure.
fn open_fd(p: &Path, flags: i32) -> i32 {
    let cp = c(p);
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(cp.as_ptr(), flags) };
    assert!(fd >= 0, "open {p:?}: {}", std::io::Error::last_os_error());
    fd
}

/// The append sequences on the tree at `root`; then the page cache is
/// dropped and each file's size and contents read back (from the file
/// system, not the kernel's cache).
fn append_steps(root: &Path) -> Vec<String> {
    let (toggled, mapped) = (root.join("toggled"), root.join("mapped"));
    std::fs::write(&toggled, b"0123456789").unwrap();
    std::fs::write(&mapped, vec![b'a'; 8192]).unwrap();
    // SAFETY: plain system calls on descriptors this function owns; the
    // mapping is 8192 bytes of an 8192-byte file, written inside it.
    unsafe {
        let fd = open_fd(&toggled, libc::O_WRONLY | libc::O_APPEND);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, 0), 0);
        assert_eq!(libc::lseek(fd, 2, libc::SEEK_SET), 2);
        assert_eq!(libc::write(fd, b"AB".as_ptr().cast(), 2), 2);
        assert_eq!(libc::pwrite(fd, b"C".as_ptr().cast(), 1, 5), 1);
        libc::close(fd);
        let fd = open_fd(&toggled, libc::O_WRONLY);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, libc::O_APPEND), 0);
        assert_eq!(libc::lseek(fd, 0, libc::SEEK_SET), 0);
        assert_eq!(libc::write(fd, b"Z".as_ptr().cast(), 1), 1);
        assert_eq!(libc::pwrite(fd, b"Y".as_ptr().cast(), 1, 1), 1);
        libc::close(fd);

        let fd = open_fd(&mapped, libc::O_RDWR | libc::O_APPEND);
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let m = libc::mmap(std::ptr::null_mut(), 8192, prot, libc::MAP_SHARED, fd, 0);
        assert_ne!(m, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(b"HELLO".as_ptr(), m.cast::<u8>().add(100), 5);
        assert_eq!(libc::msync(m, 8192, libc::MS_SYNC), 0);
        libc::munmap(m, 8192);
        libc::close(fd);
    }
    std::fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
    let t = std::fs::read(&toggled).unwrap();
    let m = std::fs::read(&mapped).unwrap();
    let hello = m.windows(5).position(|w| w == b"HELLO");
    vec![
        format!("toggled: {:?}", String::from_utf8_lossy(&t)),
        format!("mapped: size {} HELLO at {hello:?}", m.len()),
    ]
}

fn append_follows_the_descriptor_not_the_open() {
    let m = TestMount::new("append");
    let t = Tmpfs::new("append-tmpfs");
    let want = append_steps(&t.0);
    assert_eq!(want[1], "mapped: size 8192 HELLO at Some(100)", "tmpfs");
    let got = append_steps(&m.mnt);
    assert_eq!(got, want, "lanefs (left) vs tmpfs (right)");
}

/// Whether a read moves atime when `fcntl(F_SETFL)` sets `O_NOATIME`
/// after a plain open, and when it clears it after an `O_NOATIME` open
/// (relatime: atime is set before mtime first, so a read that counts
/// moves it). The page cache is dropped first so that the read reaches
/// the file system.
fn noatime_steps(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (name, open_flags, set_flags) in [
        ("set_after_open", 0, libc::O_NOATIME),
        ("cleared_after_open", libc::O_NOATIME, 0),
    ] {
        let p = root.join(name);
        std::fs::write(&p, [7u8; 100]).unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        let new = std::time::UNIX_EPOCH + std::time::Duration::from_secs(2000);
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_times(
            std::fs::FileTimes::new()
                .set_accessed(old)
                .set_modified(new),
        )
        .unwrap();
        drop(f);
        std::fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
        let fd = open_fd(&p, libc::O_RDONLY | open_flags);
        let mut buf = [0u8; 10];
        // SAFETY: a descriptor this function owns and a buffer of 10 bytes.
        unsafe {
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, set_flags), 0);
            assert_eq!(libc::read(fd, buf.as_mut_ptr().cast(), 10), 10);
            libc::close(fd);
        }
        let atime = std::fs::metadata(&p).unwrap().atime();
        out.push(format!("{name}: atime moved {}", atime != 1000));
    }
    out
}

fn noatime_follows_the_descriptor_not_the_open() {
    let m = TestMount::new("noatime-fcntl");
    let t = Tmpfs::new("noatime-fcntl-tmpfs");
    let want = noatime_steps(&t.0);
    assert_eq!(
        want,
        [
            "set_after_open: atime moved false",
            "cleared_after_open: atime moved true"
        ],
        "tmpfs"
    );
    assert_eq!(
        noatime_steps(&m.mnt),
        want,
        "lanefs (left) vs tmpfs (right)"
    );
}

/// Whether a listing (`getdents64` until the end) moves a directory's
/// atime when `fcntl(F_SETFL)` sets `O_NOATIME` after a plain open, when
/// it clears it after an `O_NOATIME` open, and (controls) when the open's
/// flag is kept either way. Under `strictatime` every listing that counts
/// moves atime.
fn dir_noatime_steps(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (name, open_flags, set_flags) in [
        ("set_after_open", 0, libc::O_NOATIME),
        ("cleared_after_open", libc::O_NOATIME, 0),
        ("kept_noatime", libc::O_NOATIME, libc::O_NOATIME),
        ("kept_plain", 0, 0),
    ] {
        let d = root.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("entry"), b"").unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        std::fs::File::open(&d)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_accessed(old))
            .unwrap();
        let fd = open_fd(&d, libc::O_RDONLY | libc::O_DIRECTORY | open_flags);
        let mut buf = [0u8; 4096];
        let mut calls = 0;
        // SAFETY: a descriptor this function owns and a buffer of 4096
        // bytes.
        unsafe {
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, set_flags), 0);
            loop {
                let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
                assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
                calls += 1;
                if n == 0 {
                    break;
                }
            }
            libc::close(fd);
        }
        assert!(calls >= 2, "a listing and its end");
        let atime = std::fs::metadata(&d).unwrap().atime();
        out.push(format!("{name}: atime moved {}", atime != 1000));
    }
    out
}

/// A listing decides atime by the descriptor's `O_NOATIME` at the time
/// of the listing, as a read does (`fuse_read_in.flags` of READDIR and
/// READDIRPLUS). Until 2026-11 the daemon listed through a handle opened
/// without the open's flags, so every listing counted.
fn dir_noatime_follows_the_descriptor_not_the_open() {
    let m = TestMount::with(
        "dir-noatime-fcntl",
        &["-o", "strictatime,nocache_dir,attr_timeout=0"],
        &[],
    );
    let t = Tmpfs::with("dir-noatime-fcntl-tmpfs", "mode=0755,strictatime");
    let want = dir_noatime_steps(&t.0);
    assert_eq!(
        want,
        [
            "set_after_open: atime moved false",
            "cleared_after_open: atime moved true",
            "kept_noatime: atime moved false",
            "kept_plain: atime moved true",
        ],
        "tmpfs"
    );
    assert_eq!(
        dir_noatime_steps(&m.mnt),
        want,
        "lanefs (left) vs tmpfs (right)"
    );
}

/// `(mtime, ctime, st_blocks)` of `p`.
fn mtime_ctime_blocks(p: &Path) -> (i64, i64, i64, i64, u64) {
    let m = std::fs::metadata(p).unwrap();
    (
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.blocks(),
    )
}

/// Truncates to the size a file has, by path and through a descriptor,
/// of files with and without allocated pages, and of one with a
/// `fallocate(KEEP_SIZE)` reservation past its end; one line per step:
/// whether mtime and ctime moved, and the blocks after.
fn same_size_truncate_steps(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let files: [(&str, &[u8], i64); 4] = [
        ("empty", b"", 0),
        ("data", b"0123456789", 10),
        ("sparse", b"", 100_000),
        ("reserved", b"abc", 3),
    ];
    for (name, data, size) in files {
        let p = root.join(name);
        std::fs::write(&p, data).unwrap();
        let fd = open_fd(&p, libc::O_RDWR);
        // SAFETY: plain system calls on a descriptor this function owns.
        unsafe {
            assert_eq!(libc::ftruncate(fd, size), 0);
            if name == "reserved" {
                assert_eq!(
                    libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20),
                    0
                );
            }
        }
        for how in ["path", "fd", "path", "O_TRUNC"] {
            let before = mtime_ctime_blocks(&p);
            std::thread::sleep(std::time::Duration::from_millis(15));
            let cp = c(&p);
            // SAFETY: a valid C string; a descriptor this function owns.
            let r = unsafe {
                match how {
                    "path" => libc::truncate(cp.as_ptr(), size),
                    "fd" => libc::ftruncate(fd, size),
                    _ if size == 0 => libc::close(open_fd(&p, libc::O_WRONLY | libc::O_TRUNC)),
                    _ => 0,
                }
            };
            assert_eq!(r, 0, "{name} {how}: {}", std::io::Error::last_os_error());
            let after = mtime_ctime_blocks(&p);
            out.push(format!(
                "{name} by {how}: mtime moved {}, ctime moved {}, blocks {}",
                (after.0, after.1) != (before.0, before.1),
                (after.2, after.3) != (before.2, before.3),
                after.4
            ));
        }
        // SAFETY: closing a descriptor this function owns.
        unsafe { libc::close(fd) };
    }
    out
}

/// Until 2026-11 a `truncate(2)` to the size a file has moved its mtime
/// and ctime even where nothing is allocated (tmpfs and ext4 leave them:
/// `truncate(2)` asks for no time change, FUSE sends it as a SETATTR
/// without a file handle), and a truncate to the same size kept a
/// `fallocate(KEEP_SIZE)` reservation past the end (tmpfs gives it back).
fn same_size_truncate_matches_tmpfs() {
    let m = TestMount::new("samesize");
    let t = Tmpfs::new("samesize-tmpfs");
    let want = same_size_truncate_steps(&t.0);
    assert!(
        want.contains(&"empty by path: mtime moved false, ctime moved false, blocks 0".into())
            && want.contains(&"empty by fd: mtime moved true, ctime moved true, blocks 0".into()),
        "tmpfs: {want:#?}"
    );
    let got = same_size_truncate_steps(&m.mnt);
    assert_eq!(got, want, "lanefs (left) vs tmpfs (right)");
}

/// Fill the file system at `dir` page by page until `ENOSPC`, free two
/// pages, then write three pages at offset 100 of a new file: what the
/// write returned, and whether the file holds exactly those bytes.
fn write_three_pages_with_two_free(dir: &Path) -> (std::io::Result<usize>, bool) {
    use std::os::unix::fs::FileExt;
    let fill = std::fs::File::create(dir.join("fill")).unwrap();
    let page = vec![b'x'; 4096];
    let mut pages = 0u64;
    while fill.write_all_at(&page, pages * 4096).is_ok() {
        pages += 1;
        assert!(pages < 1 << 16, "never full");
    }
    fill.set_len((pages - 2) * 4096).unwrap();
    let g = std::fs::File::create(dir.join("g")).unwrap();
    let r = g.write_at(&[b'y'; 3 * 4096], 100);
    let n = *r.as_ref().unwrap_or(&0);
    let mut want = vec![0u8; 100];
    want.resize(100 + n, b'y');
    let held = std::fs::read(dir.join("g")).unwrap() == want;
    (r, held)
}

/// A `write(2)` that does not fit, through a mount without the writeback
/// cache: a short count with exactly that much written, as on tmpfs (whose
/// count is what fits; lanefs's ends where the kernel split the call into
/// WRITEs, docs/FUSE.md "Known gaps"), never data beyond the count and
/// never an error after part of it landed.
fn write_at_enospc_is_short_as_on_tmpfs() {
    if writeback() {
        eprintln!("SKIPPED: with the writeback cache the write succeeds and fsync reports ENOSPC (writeback.rs)");
        return;
    }
    let m = TestMount::with("enospc-short", &["--capacity", "1M"], &[]);
    let t = Tmpfs::with("enospc-short-tmpfs", "size=1M");
    for (what, dir) in [("tmpfs", &t.0), ("lanefs", &m.mnt)] {
        let (r, held) = write_three_pages_with_two_free(dir);
        let n = r.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(n > 0 && n < 3 * 4096, "{what}: wrote {n} of 3 pages");
        assert!(
            held,
            "{what}: the file does not hold exactly the {n} bytes written"
        );
    }
}

on_both_transports!(
    write_at_enospc_is_short_as_on_tmpfs,
    rename_whiteout_matches_tmpfs,
    sticky_create_matches_tmpfs,
    noatime_follows_the_descriptor_not_the_open,
    dir_noatime_follows_the_descriptor_not_the_open,
    same_size_truncate_matches_tmpfs
);
on_both_transports_and_writeback!(append_follows_the_descriptor_not_the_open,);
