//! The kernel's directory cache (`FOPEN_CACHE_DIR`, on by default,
//! `-o nocache_dir` turns it off; the tests name `-o cache_dir` anyway):
//! listings are cached (a listing served
//! from the cache does not reach the daemon), every change made through
//! the mount shows in the next listing, a moved directory's `..` follows
//! it, `telldir`/`seekdir`/`rewinddir` work on cached listings, and a
//! listing taken while entries are added and removed returns every
//! untouched entry exactly once and nothing twice, and never a name
//! removed before it began. Needs root and /dev/fuse.

mod common;

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// A directory stream (`opendir(3)`), closed on drop.
struct Dir(*mut libc::DIR);

impl Dir {
    fn open(p: &Path) -> Dir {
        let c = CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated path.
        let d = unsafe { libc::opendir(c.as_ptr()) };
        assert!(
            !d.is_null(),
            "opendir {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
        Dir(d)
    }

    /// The next entry (name, d_ino), or `None` at the end.
    fn next(&mut self) -> Option<(String, u64)> {
        // SAFETY: errno is thread-local; the stream is open.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: self.0 is an open stream owned by us.
        let e = unsafe { libc::readdir(self.0) };
        if e.is_null() {
            let err = std::io::Error::last_os_error();
            assert_eq!(err.raw_os_error(), Some(0), "readdir: {err}");
            return None;
        }
        // SAFETY: readdir returned a valid entry, alive until the next call.
        let (name, ino) = unsafe {
            (
                CStr::from_ptr((*e).d_name.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
                (*e).d_ino,
            )
        };
        Some((name, ino))
    }

    fn tell(&mut self) -> libc::c_long {
        // SAFETY: open stream.
        unsafe { libc::telldir(self.0) }
    }

    fn seek(&mut self, pos: libc::c_long) {
        // SAFETY: open stream; pos came from telldir on it.
        unsafe { libc::seekdir(self.0, pos) }
    }

    fn rewind(&mut self) {
        // SAFETY: open stream.
        unsafe { libc::rewinddir(self.0) }
    }

    /// Every remaining entry.
    fn rest(&mut self) -> Vec<(String, u64)> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: open stream, closed once.
        unsafe { libc::closedir(self.0) };
    }
}

/// The names in `p` (without `.` and `..`), sorted, each checked to come
/// only once.
fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = Dir::open(p)
        .rest()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n != "." && n != "..")
        .collect();
    v.sort();
    let before = v.len();
    v.dedup();
    assert_eq!(v.len(), before, "a name listed twice in {}", p.display());
    v
}

fn set_atime(p: &Path, secs: i64) {
    let ts = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    let c = CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: valid C string and two timespecs.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) },
        0
    );
}

/// The directory cache is on with `cache_dir`: with `strictatime` (every
/// READDIR the daemon serves moves atime) and `attr_timeout=0` (every
/// stat asks the daemon), a second listing leaves atime alone — it never
/// reached the daemon — also by default, while with `nocache_dir` it
/// moves it.
fn listings_are_cached_with_cache_dir() {
    for (opts, cached) in [
        ("strictatime,attr_timeout=0,cache_dir", true),
        ("strictatime,attr_timeout=0", true),
        ("strictatime,attr_timeout=0,nocache_dir", false),
    ] {
        let m = TestMount::with("dircached", &["-o", opts], &[]);
        let d = m.path("d");
        std::fs::create_dir(&d).unwrap();
        for i in 0..64 {
            std::fs::write(d.join(format!("f{i:02}")), b"").unwrap();
        }
        assert_eq!(names(&d).len(), 64, "first listing ({opts})");
        set_atime(&d, 1_000_000);
        assert_eq!(names(&d).len(), 64, "second listing ({opts})");
        let atime = std::fs::metadata(&d).unwrap().atime();
        assert_eq!(
            atime == 1_000_000,
            cached,
            "{opts}: the second listing {} the daemon",
            if cached { "reached" } else { "did not reach" }
        );
    }
}

/// Creates, unlinks, renames (within and across directories), mkdirs,
/// rmdirs, hard links and symlinks made through the mount show in the
/// next listing of every directory they touch, with `cache_dir`.
fn cached_dir_listing_sees_every_change() {
    let m = TestMount::with("cachedir", &["-o", "cache_dir"], &[]);
    let d = m.path("d");
    let e = m.path("e");
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&e).unwrap();
    for i in 0..64 {
        std::fs::write(d.join(format!("f{i:02}")), b"x").unwrap();
    }
    assert_eq!(names(&d).len(), 64);
    assert_eq!(names(&d).len(), 64, "second listing (from the cache)");
    assert!(names(&e).is_empty());
    let has = |dir: &Path, n: &str| names(dir).contains(&n.to_string());
    std::fs::write(d.join("new"), b"").unwrap();
    assert!(has(&d, "new"), "create not seen");
    std::fs::remove_file(d.join("f00")).unwrap();
    assert!(!has(&d, "f00"), "unlink not seen");
    std::fs::rename(d.join("f01"), d.join("g01")).unwrap();
    assert!(has(&d, "g01") && !has(&d, "f01"), "rename not seen");
    std::fs::rename(d.join("f02"), e.join("f02")).unwrap();
    assert!(
        !has(&d, "f02") && has(&e, "f02"),
        "cross-dir rename not seen"
    );
    std::fs::write(e.join("f03"), b"").unwrap();
    std::fs::rename(e.join("f03"), d.join("f03")).unwrap();
    assert!(has(&d, "f03") && !has(&e, "f03"), "rename over not seen");
    std::fs::hard_link(d.join("f04"), e.join("h04")).unwrap();
    assert!(has(&e, "h04"), "link not seen");
    std::os::unix::fs::symlink("f05", d.join("s05")).unwrap();
    assert!(has(&d, "s05"), "symlink not seen");
    std::fs::create_dir(d.join("sub")).unwrap();
    assert!(has(&d, "sub"), "mkdir not seen");
    std::fs::remove_dir(d.join("sub")).unwrap();
    assert!(!has(&d, "sub"), "rmdir not seen");
    assert_eq!(names(&d).len(), 64 - 3 + 3);
}

/// A directory moved to another parent lists `..` as its new parent, also
/// when its listing was cached before the move (the kernel changes only
/// the two parents; the handler invalidates the moved directory).
fn moved_directory_dotdot_follows() {
    let m = TestMount::with("dotdot", &["-o", "cache_dir"], &[]);
    for p in ["a/sub", "b"] {
        std::fs::create_dir_all(m.path(p)).unwrap();
    }
    std::fs::write(m.path("a/sub/f"), b"").unwrap();
    let dotdot = |p: &Path| {
        let l = Dir::open(p).rest();
        let map: HashMap<String, u64> = l.into_iter().collect();
        (map[".."], map["."], map.contains_key("f"))
    };
    let ino = |p: &str| std::fs::metadata(m.path(p)).unwrap().ino();
    assert_eq!(dotdot(&m.path("a/sub")), (ino("a"), ino("a/sub"), true));
    std::fs::rename(m.path("a/sub"), m.path("b/sub")).unwrap();
    assert_eq!(
        dotdot(&m.path("b/sub")),
        (ino("b"), ino("b/sub"), true),
        "`..` of a moved directory"
    );
    // And exchanged with a directory elsewhere (RENAME_EXCHANGE).
    std::fs::create_dir(m.path("a/other")).unwrap();
    assert_eq!(dotdot(&m.path("a/other")).0, ino("a"));
    let c = |p: &str| CString::new(m.path(p).to_str().unwrap()).unwrap();
    let (x, y) = (c("a/other"), c("b/sub"));
    // SAFETY: valid C strings.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            x.as_ptr(),
            libc::AT_FDCWD,
            y.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(dotdot(&m.path("a/other")), (ino("a"), ino("a/other"), true));
    assert_eq!(dotdot(&m.path("b/sub")).0, ino("b"));
}

/// `telldir`/`seekdir` return to the same entry, on the first (filling)
/// and on a cached listing, and `rewinddir` shows changes made since.
fn telldir_seekdir_rewinddir() {
    let m = TestMount::with("seekdir", &["-o", "cache_dir"], &[]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    // Long names: several READDIR(PLUS) replies per listing.
    for i in 0..300 {
        std::fs::write(d.join(format!("entry-with-a-longer-name-{i:04}")), b"").unwrap();
    }
    for round in ["first listing", "cached listing"] {
        let mut dir = Dir::open(&d);
        let mut seen = Vec::new();
        loop {
            let pos = dir.tell();
            match dir.next() {
                Some((n, _)) => seen.push((pos, n)),
                None => break,
            }
        }
        assert_eq!(seen.len(), 302, "{round}");
        for i in [0, 1, 2, 57, 151, 299, 301, 150, 3] {
            let (pos, name) = &seen[i];
            dir.seek(*pos);
            assert_eq!(
                dir.next().map(|e| e.0).as_ref(),
                Some(name),
                "{round}: seekdir to #{i}"
            );
            if i + 1 < seen.len() {
                assert_eq!(dir.next().map(|e| e.0), Some(seen[i + 1].1.clone()));
            }
        }
        dir.rewind();
        assert_eq!(dir.rest().len(), 302, "{round}: after rewinddir");
    }
    let mut dir = Dir::open(&d);
    assert_eq!(dir.rest().len(), 302);
    std::fs::write(d.join("added"), b"").unwrap();
    std::fs::remove_file(d.join("entry-with-a-longer-name-0000")).unwrap();
    dir.rewind();
    let after: Vec<String> = dir.rest().into_iter().map(|e| e.0).collect();
    assert!(
        after.contains(&"added".to_string()),
        "rewinddir: create not seen"
    );
    assert!(
        !after.contains(&"entry-with-a-longer-name-0000".to_string()),
        "rewinddir: unlink not seen"
    );
    assert_eq!(after.len(), 302);
}

/// A listing that runs while entries are created and removed (between
/// its own readdir calls, and by another thread) returns every entry that
/// existed throughout exactly once and no entry twice (POSIX leaves only
/// the changed ones open).
fn listing_during_changes() {
    let m = TestMount::with("dirchurn", &["-o", "cache_dir"], &[]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    let stable: Vec<String> = (0..400).map(|i| format!("stable-{i:04}")).collect();
    for n in &stable {
        std::fs::write(d.join(n), b"").unwrap();
    }
    let check = |got: &[String], what: &str| {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for n in got {
            *count.entry(n.as_str()).or_default() += 1;
        }
        for (n, c) in &count {
            assert_eq!(*c, 1, "{what}: {n} listed {c} times");
        }
        for n in &stable {
            assert!(count.contains_key(n.as_str()), "{what}: {n} missing");
        }
    };
    // Deterministic: changes between our own readdir calls.
    for round in 0..6 {
        let mut dir = Dir::open(&d);
        let mut got = Vec::new();
        let mut k = 0;
        while let Some((n, _)) = dir.next() {
            got.push(n);
            k += 1;
            if k % 50 == 0 {
                for j in 0..10 {
                    let name = format!("churn-{round}-{k}-{j}");
                    std::fs::write(d.join(&name), b"").unwrap();
                    if j % 2 == 0 {
                        std::fs::remove_file(d.join(&name)).unwrap();
                    }
                }
            }
        }
        check(&got, &format!("round {round}"));
    }
    // Free-running: another thread creates and removes while we list.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (d, stop) = (d.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = d.join(format!("bg-{}", i % 64));
                if i % 128 < 64 {
                    let _ = std::fs::write(&n, b"");
                } else {
                    let _ = std::fs::remove_file(&n);
                }
                i += 1;
            }
        })
    };
    for round in 0..20 {
        let got: Vec<String> = Dir::open(&d).rest().into_iter().map(|e| e.0).collect();
        check(&got, &format!("concurrent round {round}"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}

/// A directory opened with `open(2)` and read with raw `getdents64(2)`
/// calls of a chosen buffer size, so that a test decides how much of a
/// listing each call takes (and so which READDIR the kernel sends).
struct RawDir(std::os::fd::OwnedFd);

impl RawDir {
    fn open(p: &Path) -> RawDir {
        use std::os::fd::FromRawFd;
        let c = CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated path; the result is checked.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(
            fd >= 0,
            "open {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
        // SAFETY: `fd` was just opened and is owned by nobody else.
        RawDir(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// One `getdents64` call with a `buf_bytes` buffer: the names it
    /// returned (empty at the end of the directory).
    fn chunk(&mut self, buf_bytes: usize) -> Vec<String> {
        use std::os::fd::AsRawFd;
        let mut buf = vec![0u64; buf_bytes.div_ceil(8)];
        // SAFETY: the buffer is valid for `buf_bytes` bytes and 8-aligned.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                self.0.as_raw_fd(),
                buf.as_mut_ptr(),
                buf_bytes,
            )
        };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        let bytes = &bytemuck_bytes(&buf)[..n as usize];
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16,
            // d_type u8, d_name[] (NUL-terminated).
            let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            let name = CStr::from_bytes_until_nul(&bytes[at + 19..at + reclen])
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push(name);
            at += reclen;
        }
        out
    }

    /// Every remaining name, read with `buf_bytes` calls.
    fn rest(&mut self, buf_bytes: usize) -> Vec<String> {
        let mut all = Vec::new();
        loop {
            let c = self.chunk(buf_bytes);
            if c.is_empty() {
                return all;
            }
            all.extend(c);
        }
    }
}

fn bytemuck_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: any u64 slice is valid as bytes of 8 times its length.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
}

/// A name removed before a listing began is never in it, also when
/// another descriptor's cache fill straddles the removal: descriptor A
/// starts filling the kernel's cached listing (its chunks so far include
/// the victim, the 51st name it read), the victim is unlinked, descriptor
/// B opens and takes a small first chunk (not from the cache: the fill is
/// incomplete, so the kernel does not check the cache's version), A
/// finishes the fill, and B reads the
/// rest — from the now complete cache, whose first chunk predates the
/// unlink (docs/FUSE.md, `FOPEN_CACHE_DIR`). Without the daemon's guard
/// (`dircache.rs` in lanefs-fuse) B lists the victim. Afterwards listings
/// are cached again.
fn listing_never_shows_a_name_removed_before_it_began() {
    let m = TestMount::with(
        "dirstraddle",
        &["-o", "cache_dir,strictatime,attr_timeout=0"],
        &[],
    );
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    let all: Vec<String> = (0..200).map(|i| format!("f{i:03}")).collect();
    for n in &all {
        std::fs::write(d.join(n), b"").unwrap();
    }
    // Every linux_dirent64 of these names ("f000": 19 + 5 bytes) is 24.
    const REC: usize = 24;
    let mut removed: Vec<String> = Vec::new();
    for round in 0..3 {
        // A reads until its chunks (each appended to the cache: A is the
        // only reader and starts the fill) include 51 names, not to the
        // end; the victim is the 51st. (Taken from what A read: the
        // listing's order is the engine's cookie order, which need not be
        // the order of creation.)
        let mut a = RawDir::open(&d);
        let mut seen: Vec<String> = Vec::new();
        let victim = loop {
            let c = a.chunk(REC * 120);
            assert!(!c.is_empty(), "round {round}: A read {seen:?}");
            seen.extend(c);
            if let Some(v) = seen.iter().filter(|n| *n != "." && *n != "..").nth(50) {
                break v.clone();
            }
        };
        assert!(
            seen.len() < all.len() - removed.len(),
            "round {round}: A read everything"
        );
        std::fs::remove_file(d.join(&victim)).unwrap();
        removed.push(victim.clone());
        let mut b = RawDir::open(&d);
        let mut got = b.chunk(REC * 20);
        assert!(!got.contains(&victim));
        a.rest(REC * 120);
        got.extend(b.rest(REC * 20));
        assert!(
            !got.contains(&victim),
            "round {round}: {victim}, unlinked before B was opened, is in B's listing"
        );
        let mut want: Vec<String> = all
            .iter()
            .filter(|n| !removed.contains(n))
            .cloned()
            .collect();
        want.extend([".".to_string(), "..".to_string()]);
        want.sort();
        got.sort();
        assert_eq!(got, want, "round {round}: B's listing");
    }
    // The guard does not switch the cache off for good: with nothing
    // changing, the next listing fills it again and the one after never
    // reaches the daemon (under `strictatime` every READDIR the daemon
    // serves moves atime; `attr_timeout=0` makes stat ask the daemon).
    let n = names(&d).len();
    set_atime(&d, 1_000_000);
    assert_eq!(names(&d).len(), n);
    assert_eq!(
        std::fs::metadata(&d).unwrap().atime(),
        1_000_000,
        "the listing after a refill reached the daemon"
    );
}

on_both_transports!(
    listings_are_cached_with_cache_dir,
    cached_dir_listing_sees_every_change,
    moved_directory_dotdot_follows,
    telldir_seekdir_rewinddir,
    listing_during_changes,
    listing_never_shows_a_name_removed_before_it_began,
);
