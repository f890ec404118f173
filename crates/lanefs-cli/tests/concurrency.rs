//! POSIX guarantees under concurrency through a mount (both transports,
//! and on an image, which `lanefs fsck` must find clean after the
//! unmount): `O_APPEND` writers on separate descriptors never overwrite
//! each other; `pread` racing `truncate`/`ftruncate` and rewrites, through
//! the page cache and with `O_DIRECT`, never returns bytes nobody wrote
//! nor more than the file ever held; concurrent `link`/`unlink` of one
//! file leave `st_nlink` equal to its names; concurrent `mkdir`/`rmdir`
//! of the same names leave every directory's link count right; a listing
//! read by `getdents64` with a buffer of one entry, resumed by `lseek` to
//! the last offset it returned, lists every name that exists throughout
//! exactly once while other names come and go. (The same checks on the
//! embedded API: `crates/lanefs/tests/concurrency_semantics.rs`; listings
//! with the kernel's cache: `dircache.rs`.)

mod common;

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;

const APPENDERS: u64 = 4;
const RECORDS: u64 = 250;

fn record(id: u64, i: u64) -> Vec<u8> {
    let len = 16 + ((i * 37 + id * 11) % 300) as usize;
    let mut r = vec![b'A' + id as u8; len];
    let head = format!("<{id}:{i:05}:{len:03}|");
    r[..head.len()].copy_from_slice(head.as_bytes());
    r[len - 1] = b'\n';
    r
}

fn append_writers_never_overwrite() {
    let m = TestMount::new("append");
    let f = m.path("log");
    std::fs::write(&f, b"").unwrap();
    let start = Arc::new(Barrier::new(APPENDERS as usize));
    let threads: Vec<_> = (0..APPENDERS)
        .map(|id| {
            let (f, start) = (f.clone(), start.clone());
            std::thread::spawn(move || {
                let h = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
                start.wait();
                for i in 0..RECORDS {
                    let r = record(id, i);
                    // write(2) and pwrite(2): both append on O_APPEND.
                    let n = if i % 2 == 0 {
                        std::io::Write::write(&mut &h, &r).unwrap()
                    } else {
                        h.write_at(&r, 0).unwrap()
                    };
                    assert_eq!(n, r.len(), "short append");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let data = std::fs::read(&f).unwrap();
    let total: usize = (0..APPENDERS)
        .flat_map(|id| (0..RECORDS).map(move |i| record(id, i).len()))
        .sum();
    assert_eq!(data.len(), total, "size is the sum of the appends");
    let mut next = [0u64; APPENDERS as usize];
    let mut at = 0;
    while at < data.len() {
        let id = data[at + 1].wrapping_sub(b'0') as u64;
        assert!(id < APPENDERS, "garbage at {at}");
        let want = record(id, next[id as usize]);
        assert_eq!(&data[at..at + want.len()], &want[..], "record torn at {at}");
        next[id as usize] += 1;
        at += want.len();
    }
}

const TSIZE: u64 = 32 * 4096 + 77;

fn patt(i: u64) -> u8 {
    (1 + (i * 7 + i / 4096) % 251) as u8
}

fn pattern(from: u64, to: u64) -> Vec<u8> {
    (from..to).map(patt).collect()
}

/// A page-aligned buffer for `O_DIRECT`.
struct Aligned(Vec<u8>, usize);
impl Aligned {
    fn new(len: usize) -> Aligned {
        let v = vec![0u8; len + 4096];
        let skip = v.as_ptr().align_offset(4096);
        Aligned(v, skip)
    }
    fn buf(&mut self, len: usize) -> &mut [u8] {
        &mut self.0[self.1..self.1 + len]
    }
}

fn pread_racing_truncate() {
    let m = TestMount::new("trunc");
    let p = m.path("tr");
    std::fs::write(&p, pattern(0, TSIZE)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let truncater = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            let mut rng = Rng(0x7777);
            while !stop.load(Ordering::Relaxed) {
                let cut = rng.below(TSIZE);
                if rng.below(2) == 0 {
                    f.set_len(cut).unwrap();
                } else {
                    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
                    // SAFETY: a valid C string.
                    assert_eq!(unsafe { libc::truncate(c.as_ptr(), cut as i64) }, 0);
                }
                f.write_all_at(&pattern(cut, TSIZE), cut).unwrap();
            }
        })
    };
    let readers: Vec<_> = [0, libc::O_DIRECT]
        .into_iter()
        .map(|flags| {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(flags)
                    .open(&p)
                    .unwrap();
                let mut rng = Rng(0x1234 + flags as u64);
                let mut buf = Aligned::new(TSIZE as usize + 8192);
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) || reads < 50 {
                    let off = rng.below(TSIZE + 4096);
                    let len = 1 + rng.below(TSIZE) as usize;
                    let b = buf.buf(len);
                    let n = f.read_at(b, off).unwrap();
                    assert!(
                        n == 0 || off + n as u64 <= TSIZE,
                        "read {n} at {off}: past any size the file had"
                    );
                    for (k, &c) in b[..n].iter().enumerate() {
                        let at = off + k as u64;
                        assert!(
                            c == patt(at) || c == 0,
                            "byte {at} reads {c:#x}: never written"
                        );
                    }
                    reads += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1200));
    stop.store(true, Ordering::Relaxed);
    truncater.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(std::fs::read(&p).unwrap(), pattern(0, TSIZE));
}

fn link_unlink_keep_nlink() {
    let m = TestMount::new("links");
    let d = m.path("lk");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("f"), b"x").unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(99 + t);
                for _ in 0..400 {
                    let name = d.join(format!("l{}", rng.below(8)));
                    let r = if rng.below(2) == 0 {
                        std::fs::hard_link(d.join("f"), &name)
                    } else {
                        std::fs::remove_file(&name)
                    };
                    if let Err(e) = r {
                        let errno = e.raw_os_error();
                        assert!(errno == Some(libc::EEXIST) || errno == Some(libc::ENOENT));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let names = std::fs::read_dir(&d).unwrap().count() as u64;
    assert_eq!(std::fs::metadata(d.join("f")).unwrap().nlink(), names);
}

fn mkdir_rmdir_same_names() {
    let m = TestMount::new("mkrm");
    let d = m.path("md");
    std::fs::create_dir(&d).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(5 + t);
                for _ in 0..800 {
                    let a = d.join(format!("x{}", rng.below(3)));
                    let sub = a.join(format!("s{}", rng.below(2)));
                    let r = match rng.below(6) {
                        0 | 1 => std::fs::create_dir(&a),
                        2 => std::fs::remove_dir(&a),
                        3 => std::fs::create_dir(&sub),
                        4 => std::fs::remove_dir(&sub),
                        _ => std::fs::rename(&a, d.join(format!("x{}", rng.below(3)))),
                    };
                    if let Err(e) = r {
                        let ok = [libc::EEXIST, libc::ENOENT, libc::ENOTEMPTY, libc::EINVAL];
                        assert!(ok.contains(&e.raw_os_error().unwrap_or(0)), "{e}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut dirs = 0;
    for e in std::fs::read_dir(&d).unwrap() {
        let p = e.unwrap().path();
        let subs = std::fs::read_dir(&p).unwrap().count() as u64;
        assert_eq!(std::fs::metadata(&p).unwrap().nlink(), 2 + subs, "{p:?}");
        dirs += 1;
    }
    assert_eq!(std::fs::metadata(&d).unwrap().nlink(), 2 + dirs);
}

/// Every name in `dir` by `getdents64` with room for `buf` bytes a call,
/// after each call `lseek` back to the last offset returned when `reseek`
/// (what a `telldir`/`seekdir` pair between calls does).
fn list_small(dir: &Path, buf: usize, reseek: bool) -> Vec<String> {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0);
    let mut words = vec![0u64; buf.div_ceil(8)];
    let mut names = Vec::new();
    loop {
        // SAFETY: `words` has room for `buf` bytes.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, words.as_mut_ptr(), buf) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        // SAFETY: the kernel wrote `n` bytes of records into `words`.
        let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, n as usize) };
        let mut at = 0;
        let mut last = 0i64;
        while at < bytes.len() {
            let off = i64::from_ne_bytes(bytes[at + 8..at + 16].try_into().unwrap());
            let reclen = u16::from_ne_bytes(bytes[at + 16..at + 18].try_into().unwrap()) as usize;
            let name = &bytes[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
            if name != b"." && name != b".." {
                names.push(String::from_utf8_lossy(name).into_owned());
            }
            last = off;
            at += reclen;
        }
        if reseek {
            // SAFETY: a valid descriptor.
            assert_eq!(unsafe { libc::lseek(fd, last, libc::SEEK_SET) }, last);
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    names
}

fn small_getdents_during_churn() {
    let m = TestMount::new("getdents");
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    let stable: Vec<String> = (0..300).map(|i| format!("stable_{i}")).collect();
    for n in &stable {
        std::fs::write(d.join(n), b"").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churners: Vec<_> = (0..2u64)
        .map(|t| {
            let (d, stop) = (d.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let n = d.join(format!("churn_{t}_{}", i % 100));
                    if i % 200 < 100 {
                        let _ = std::fs::write(&n, b"");
                    } else {
                        let _ = std::fs::remove_file(&n);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut round = 0;
    while Instant::now() < deadline || round < 6 {
        // One 24-byte record (a name up to 5 bytes) does not fit 32 bytes
        // with most names here: sizes that take one entry, a few, many.
        for (buf, reseek) in [(48, true), (64, false), (512, true), (4096, false)] {
            let got = list_small(&d, buf, reseek);
            let mut count: HashMap<&str, usize> = HashMap::new();
            for n in &got {
                *count.entry(n.as_str()).or_default() += 1;
            }
            for n in &stable {
                assert_eq!(
                    count.get(n.as_str()).copied(),
                    Some(1),
                    "{n} with a {buf}-byte buffer (reseek {reseek}), round {round}"
                );
            }
        }
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.join().unwrap();
    }
}

on_both_transports!(
    append_writers_never_overwrite,
    pread_racing_truncate,
    link_unlink_keep_nlink,
    mkdir_rmdir_same_names,
    small_getdents_during_churn,
);

on_image_mount!(
    append_writers_never_overwrite => append_on_image,
    pread_racing_truncate => pread_racing_truncate_on_image,
    link_unlink_keep_nlink => links_on_image,
    mkdir_rmdir_same_names => mkdir_rmdir_on_image,
    small_getdents_during_churn => getdents_on_image,
);
