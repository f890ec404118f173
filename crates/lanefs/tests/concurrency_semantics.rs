//! POSIX guarantees under concurrency, through the embedded API, on the
//! memory store and on an image with a tiny cache (objects evicted and
//! read back all the time): `O_APPEND` writers never overwrite each other;
//! a `pread` racing `truncate`/`ftruncate` and overwrites (from two lanes,
//! so the file's page stripes are in play) never returns bytes nobody
//! wrote nor more than the file ever held, and data cut off by a truncate
//! never comes back when the file grows again; concurrent `link`/`unlink`
//! of one file leave `st_nlink` equal to its names; concurrent
//! `mkdir`/`rmdir` of the same names leave a consistent tree; the core's
//! `readdir` asked for one entry a call during churn lists every stable
//! name once, and resumes at any cookie it returned; directories renamed
//! into each other by four threads never end up in a detached cycle.
//! After each
//! the engine's `Fs::check()` is clean (and on the image `lanefs fsck`).
//!
//! The same checks through a mount are in `lanefs-cli/tests/concurrency.rs`.

mod common;

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, RwLock};
use std::time::{Duration, Instant};

use lanefs::{Filesystem, FsConfig, OpenOptions};

use common::Rng;

fn check(fs: &Filesystem) {
    if let Err(p) = fs.core().check() {
        panic!("Fs::check: {p:#?}");
    }
}

/// An image in a fresh directory, opened with a cache of a few dozen
/// inodes and pages and a commit every 20 ms.
fn image_fs() -> io::Result<(Filesystem, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("c.img");
    lanefs_image::mkfs(&img, 128 << 20)?;
    let config = FsConfig {
        cache_inodes_max: 32,
        cache_pages_max: 32,
        ..FsConfig::default()
    };
    let store = lanefs::ImageConfig {
        commit_interval: Some(Duration::from_millis(20)),
        cache_bytes: Some(4096),
    };
    Ok((Filesystem::open_image_with(&img, &store, config)?, dir))
}

fn on_both(test: fn(&Filesystem)) {
    let fs = Filesystem::new_in_memory().unwrap();
    test(&fs);
    check(&fs);
    let (fs, dir) = image_fs().unwrap();
    test(&fs);
    common::check_then_fsck(fs, &dir.path().join("c.img")).unwrap();
}

// ---- O_APPEND ----------------------------------------------------------

const APPENDERS: u64 = 4;
const RECORDS: u64 = 300;

fn record_len(id: u64, i: u64) -> usize {
    16 + ((i * 37 + id * 11) % 300) as usize
}

/// `<id:iiiii:lll|` then the id's letter, then a newline.
fn record(id: u64, i: u64) -> Vec<u8> {
    let len = record_len(id, i);
    let mut r = vec![b'A' + id as u8; len];
    let head = format!("<{id}:{i:05}:{len:03}|");
    r[..head.len()].copy_from_slice(head.as_bytes());
    r[len - 1] = b'\n';
    r
}

fn appenders_never_overwrite(fs: &Filesystem) {
    fs.write("/app", b"").unwrap();
    let start = Arc::new(Barrier::new(APPENDERS as usize));
    // Two writers share one handle (one position, as a dup'ed fd), the
    // others each open their own.
    let shared = Arc::new(OpenOptions::new().append(true).open(fs, "/app").unwrap());
    let threads: Vec<_> = (0..APPENDERS)
        .map(|id| {
            let fs = fs.clone();
            let start = start.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                let own = OpenOptions::new().append(true).open(&fs, "/app").unwrap();
                start.wait();
                for i in 0..RECORDS {
                    let r = record(id, i);
                    let n = if id < 2 {
                        (&*shared).write(&r).unwrap()
                    } else if i.is_multiple_of(2) {
                        (&own).write(&r).unwrap()
                    } else {
                        // pwrite of an O_APPEND file appends too.
                        own.write_at(&r, 0).unwrap()
                    };
                    assert_eq!(n, r.len(), "short append");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total: usize = (0..APPENDERS)
        .flat_map(|id| (0..RECORDS).map(move |i| record_len(id, i)))
        .sum();
    let data = fs.read("/app").unwrap();
    assert_eq!(data.len(), total, "size is the sum of the appends");
    let mut next = [0u64; APPENDERS as usize];
    let mut at = 0;
    while at < data.len() {
        let id = (data[at + 1] - b'0') as u64;
        assert!(id < APPENDERS, "garbage at {at}");
        let i = next[id as usize];
        let want = record(id, i);
        assert_eq!(
            &data[at..at + want.len()],
            &want[..],
            "record {i} of writer {id} at {at} is torn or out of order"
        );
        next[id as usize] += 1;
        at += want.len();
    }
    assert!(next.iter().all(|&n| n == RECORDS));
    fs.remove_file("/app").unwrap();
}

#[test]
fn append_writers_never_overwrite_each_other() {
    on_both(appenders_never_overwrite);
}

// ---- pread against truncate -------------------------------------------

const TSIZE: u64 = 24 * 4096 + 123;

/// The only byte ever written at `i` (besides the zeros of a hole).
fn patt(i: u64) -> u8 {
    (1 + (i * 7 + i / 4096) % 251) as u8
}

fn pattern(from: u64, to: u64) -> Vec<u8> {
    (from..to).map(patt).collect()
}

/// Readers check every byte is the pattern or zero, and never more than
/// `TSIZE` bytes; two overwriters (two lanes: the file gets page stripes)
/// rewrite the pattern in place; a truncater cuts the file to random
/// sizes (`ftruncate` and `truncate`) and writes it back. Every few
/// rounds the truncater, with the overwriters paused, cuts the file,
/// grows it again by truncate and checks that what was cut off reads as
/// zeros (a write that lost the race with the cut must not come back).
fn pread_never_sees_garbage(fs: &Filesystem) {
    let f = fs.create("/tr").unwrap();
    f.write_all_at(&pattern(0, TSIZE), 0).unwrap();
    drop(f);
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(RwLock::new(()));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for w in 0..2u64 {
        let (fs, stop, pause) = (fs.clone(), stop.clone(), pause.clone());
        threads.push(std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/tr").unwrap();
            let mut rng = Rng(0x9e37 + w);
            while !stop.load(Ordering::Relaxed) {
                let _p = pause.read().unwrap();
                let off = rng.below(TSIZE);
                let max = if rng.below(2) == 0 { 64 } else { 9000 };
                let len = 1 + rng.below(max);
                let end = (off + len).min(TSIZE);
                f.write_all_at(&pattern(off, end), off).unwrap();
            }
        }));
    }
    for r in 0..2u64 {
        let (fs, stop, reads) = (fs.clone(), stop.clone(), reads.clone());
        threads.push(std::thread::spawn(move || {
            let f = fs.open("/tr").unwrap();
            let mut rng = Rng(0x51 + r);
            let mut buf = vec![0u8; TSIZE as usize + 8192];
            while !stop.load(Ordering::Relaxed) {
                let off = rng.below(TSIZE + 4096);
                let len = 1 + rng.below(TSIZE) as usize;
                let n = f.read_at(&mut buf[..len], off).unwrap();
                assert!(
                    n == 0 || off + n as u64 <= TSIZE,
                    "read {n} bytes at {off}: past any size the file had"
                );
                for (k, &b) in buf[..n].iter().enumerate() {
                    let at = off + k as u64;
                    assert!(
                        b == patt(at) || b == 0,
                        "byte {at} reads {b:#x}: never written (pattern {:#x})",
                        patt(at)
                    );
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(fs, "/tr")
        .unwrap();
    let mut rng = Rng(0xdead);
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut round = 0u64;
    while Instant::now() < deadline
        || (reads.load(Ordering::Relaxed) < 200 && !threads.iter().any(|t| t.is_finished()))
    {
        round += 1;
        let cut = rng.below(TSIZE);
        if round.is_multiple_of(8) {
            let _p = pause.write().unwrap();
            f.set_len(cut).unwrap();
            fs.truncate("/tr", TSIZE).unwrap();
            let mut tail = vec![0xffu8; (TSIZE - cut) as usize];
            f.read_exact_at(&mut tail, cut).unwrap();
            if let Some(k) = tail.iter().position(|&b| b != 0) {
                panic!(
                    "byte {} reads {:#x} after a cut to {cut} and a grow: data cut off came back",
                    cut + k as u64,
                    tail[k]
                );
            }
            f.write_all_at(&pattern(cut, TSIZE), cut).unwrap();
            continue;
        }
        if round.is_multiple_of(2) {
            f.set_len(cut).unwrap();
        } else {
            fs.truncate("/tr", cut).unwrap();
        }
        f.write_all_at(&pattern(cut, TSIZE), cut).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(fs.read("/tr").unwrap(), pattern(0, TSIZE));
    fs.remove_file("/tr").unwrap();
}

#[test]
fn pread_racing_truncate_sees_only_written_bytes() {
    on_both(pread_never_sees_garbage);
}

// ---- link / unlink ---------------------------------------------------------

fn link_count_matches_names(fs: &Filesystem) {
    fs.create_dir("/lk").unwrap();
    fs.write("/lk/f", b"x").unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(77 + t);
                for _ in 0..600 {
                    // Names shared between threads: links and unlinks of
                    // one name race.
                    let name = format!("/lk/l{}", rng.below(10));
                    let r = if rng.below(2) == 0 {
                        fs.hard_link("/lk/f", &name)
                    } else {
                        fs.remove_file(&name)
                    };
                    if let Err(e) = r {
                        let errno = e.raw_os_error();
                        assert!(
                            errno == Some(libc::EEXIST) || errno == Some(libc::ENOENT),
                            "{e}"
                        );
                    }
                    let n = fs.metadata("/lk/f").unwrap().nlink();
                    assert!((1..=11).contains(&n), "nlink {n}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let names = fs.read_dir("/lk").unwrap().count() as u32;
    assert_eq!(fs.metadata("/lk/f").unwrap().nlink(), names);
    fs.remove_dir_all("/lk").unwrap();
}

#[test]
fn concurrent_link_unlink_keep_nlink_equal_to_names() {
    on_both(link_count_matches_names);
}

// ---- mkdir / rmdir of the same names -------------------------------------

fn mkdir_rmdir_same_names(fs: &Filesystem) {
    fs.create_dir("/md").unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(5 + t);
                for _ in 0..1500 {
                    let a = format!("/md/x{}", rng.below(3));
                    let sub = format!("{a}/s{}", rng.below(2));
                    let r = match rng.below(6) {
                        0 | 1 => fs.create_dir(&a),
                        2 => fs.remove_dir(&a),
                        3 => fs.create_dir(&sub),
                        4 => fs.remove_dir(&sub),
                        _ => fs.rename(&a, format!("/md/x{}", rng.below(3))),
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
    check(fs);
    let mut dirs = 0;
    for e in fs.read_dir("/md").unwrap() {
        let e = e.unwrap();
        dirs += 1;
        let p = Path::new("/md").join(e.file_name());
        let subs = fs.read_dir(&p).unwrap().count() as u32;
        assert_eq!(fs.metadata(&p).unwrap().nlink(), 2 + subs, "{p:?}");
    }
    assert_eq!(fs.metadata("/md").unwrap().nlink(), 2 + dirs);
    fs.remove_dir_all("/md").unwrap();
}

#[test]
fn concurrent_mkdir_rmdir_of_one_name_stay_consistent() {
    on_both(mkdir_rmdir_same_names);
}

// ---- listings of one entry a call, resumed and re-read -----------------

/// The core's `readdir` (what FUSE's READDIR and the path layer call)
/// asked for one entry a call, as `getdents64` with a buffer of one
/// record, while two threads create and unlink other names: every name
/// that exists throughout comes exactly once; and going back to a cookie
/// the listing returned (`seekdir` to a `telldir` value) lists from there
/// the same stable names again.
fn one_entry_a_call_during_churn(fs: &Filesystem) {
    const STABLE: usize = 200;
    fs.create_dir("/rd").unwrap();
    for i in 0..STABLE {
        fs.write(format!("/rd/stable{i}"), b"").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churners: Vec<_> = (0..2u64)
        .map(|t| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let n = format!("/rd/churn{t}-{}", i % 50);
                    if i % 100 < 50 {
                        fs.write(&n, b"").unwrap();
                    } else {
                        fs.remove_file(&n).unwrap();
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let stable_index = |name: &[u8]| -> Option<usize> {
        std::str::from_utf8(name.strip_prefix(b"stable")?)
            .ok()?
            .parse()
            .ok()
    };
    let deadline = Instant::now() + Duration::from_millis(800);
    let mut rounds = 0;
    while Instant::now() < deadline || rounds < 3 {
        rounds += 1;
        let dir = fs.open("/rd").unwrap();
        let mut seen = vec![0u32; STABLE];
        // (cookie before an entry, the stable names from there on)
        let mut marks: Vec<(u64, usize)> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        let mut offset = 0;
        loop {
            let mut got = None;
            fs.core()
                .readdir(dir.handle(), offset, &mut |e| {
                    got = Some((e.name.to_vec(), e.next_offset));
                    true
                })
                .unwrap();
            let Some((name, next)) = got else { break };
            if let Some(k) = stable_index(&name) {
                if order.len().is_multiple_of(37) {
                    marks.push((offset, order.len()));
                }
                seen[k] += 1;
                order.push(k);
            }
            offset = next;
        }
        for (k, &n) in seen.iter().enumerate() {
            assert_eq!(n, 1, "stable{k} listed {n} times one entry a call");
        }
        for &(cookie, from) in &marks {
            let mut again = Vec::new();
            fs.core()
                .readdir(dir.handle(), cookie, &mut |e| {
                    if let Some(k) = stable_index(e.name) {
                        again.push(k);
                    }
                    false
                })
                .unwrap();
            assert_eq!(again, order[from..], "resumed at cookie {cookie}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.join().unwrap();
    }
    fs.remove_dir_all("/rd").unwrap();
}

#[test]
fn listing_one_entry_a_call_during_churn() {
    on_both(one_entry_a_call_during_churn);
}

// ---- directory renames into each other ------------------------------------

/// Every directory below `p` (not `p` itself).
fn dirs_below(fs: &Filesystem, p: &str) -> usize {
    let mut n = 0;
    for e in fs.read_dir(p).unwrap() {
        let e = e.unwrap();
        if e.kind() == lanefs::FileKind::Directory {
            let child = format!(
                "{}/{}",
                p.trim_end_matches('/'),
                e.file_name().to_string_lossy()
            );
            n += 1 + dirs_below(fs, &child);
        }
    }
    n
}

/// Four threads rename random directories of a small tree into each
/// other (`RENAME_NOREPLACE`, so none is replaced): a rename that would
/// put a directory inside itself fails (`EINVAL`), whatever the others do
/// at the same time, so every directory stays reachable from the root,
/// none in a detached cycle.
fn renames_never_detach_a_directory(fs: &Filesystem) {
    const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    fs.create_dir("/rn").unwrap();
    for n in NAMES {
        fs.create_dir(format!("/rn/{n}")).unwrap();
    }
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(t * 7 + 1);
                // A directory found by a random walk down from /rn.
                let pick = |rng: &mut Rng| -> String {
                    let mut p = String::from("/rn");
                    loop {
                        let Ok(it) = fs.read_dir(&p) else { return p };
                        let names: Vec<String> = it
                            .filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect();
                        if names.is_empty() || rng.below(3) == 0 {
                            return p;
                        }
                        p = format!("{p}/{}", names[rng.index(names.len())]);
                    }
                };
                for _ in 0..3000 {
                    let from = pick(&mut rng);
                    let to = format!("{}/{}", pick(&mut rng), NAMES[rng.below(6) as usize]);
                    if from == "/rn" {
                        continue;
                    }
                    if let Err(e) = fs.rename_flags(&from, &to, libc::RENAME_NOREPLACE) {
                        let ok = [libc::EINVAL, libc::ENOENT, libc::EEXIST, libc::ENOTDIR];
                        assert!(
                            ok.contains(&e.raw_os_error().unwrap_or(0)),
                            "{from} -> {to}: {e}"
                        );
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    check(fs);
    assert_eq!(dirs_below(fs, "/rn"), NAMES.len(), "directories reachable");
    fs.remove_dir_all("/rn").unwrap();
}

#[test]
fn concurrent_directory_renames_never_detach_one() {
    on_both(renames_never_detach_a_directory);
}
