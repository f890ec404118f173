//! A regular file's mtime and ctime under racing changes: pure overwrites
//! (data-side times, no `meta`), ftruncate to the same size, growing
//! writes, fallocate, shrinking ftruncate, chmod,
//! `UTIME_NOW`, fsync, writeback, link, unlink and rename run on real threads while observers
//! read the attributes over and over. Every change reads the clock, and
//! Linux reads it under the inode lock, so a later change never shows an
//! older time: an observer's successive reads of mtime and ctime must never
//! go backwards, and a read that starts after a change returned must show a
//! ctime no older than that change's.
//!
//! Knob: `LANEFS_TIMES_RACE_MS` — how long each race runs (default 1500).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lanefs_core::*;

mod common;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const SIZE: u64 = 8192;

fn race_time() -> Duration {
    Duration::from_millis(common::knob("LANEFS_TIMES_RACE_MS", 1500))
}

fn ts_key(t: Timespec) -> u64 {
    (t.sec as u64) * 1_000_000_000 + t.nsec as u64
}

/// `/f`, [`SIZE`] bytes written (so that overwrites inside it are pure),
/// open read-write.
fn file(fs: &Fs) -> (Ino, OpenFile) {
    let (a, f) = common::create_rw(fs, b"f");
    fs.write(&f, 0, &[7u8; SIZE as usize]).unwrap();
    (a.ino, f)
}

/// Which changes race the overwrites.
#[derive(Clone, Copy)]
struct Mix {
    overwrite: bool,
    truncate: bool,
    chmod: bool,
    touch: bool,
    fsync: bool,
    /// link and unlink of a second name, rename of the first.
    names: bool,
    /// Writes that grow the file and fallocate (data changes that take
    /// `meta` too), and ftruncate back to [`SIZE`].
    grow: bool,
}

/// Run `mix` (with or without pure overwrites) for [`race_time`]; observers check
/// that mtime and ctime never go backwards, and that a ctime read after a
/// change returned is no older than the change's own.
fn race(mix: Mix) {
    let fs = Fs::new_in_memory();
    let (ino, f) = file(&fs);
    let f = Arc::new(f);
    let stop = Arc::new(AtomicBool::new(false));
    // The largest ctime a finished change returned (as a key).
    let done_ctime = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    // Two overwriters: two lanes give the file stripes (`pcache::lanes`),
    // so overwrites inside one page run under a stripe, not the data lock.
    for w in 0..if mix.overwrite { 2 } else { 0 } {
        let (fs, f, stop) = (fs.clone(), f.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                let off = (i * 97) % (SIZE - 16);
                fs.write(&f, off, &[i as u8; 16]).unwrap();
                i += 2;
            }
        }));
    }
    let changer = |what: u32| {
        let (fs, f, stop, done_ctime) = (fs.clone(), f.clone(), stop.clone(), done_ctime.clone());
        std::thread::spawn(move || {
            let root = Cred::root();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let ch = match what {
                    6 => {
                        fs.write(&f, SIZE + (i % 8) as u64, &[1u8; 16]).unwrap();
                        fs.fallocate(&f, 0, 0, 4096).unwrap();
                        SetAttr {
                            size: Some(SIZE),
                            ..Default::default()
                        }
                    }
                    4 => {
                        if let Ok(a) = fs.link(&root, ino, ROOT_INO, b"g") {
                            fs.forget(a.ino, 1);
                            done_ctime.fetch_max(ts_key(a.ctime), Ordering::SeqCst);
                        }
                        let _ = fs.unlink(&root, ROOT_INO, b"g");
                        continue;
                    }
                    5 => {
                        let (from, to): (&[u8], &[u8]) = if i.is_multiple_of(2) {
                            (b"f", b"h")
                        } else {
                            (b"h", b"f")
                        };
                        let _ = fs.rename(&root, ROOT_INO, from, ROOT_INO, to, 0);
                        i += 1;
                        continue;
                    }
                    0 => SetAttr {
                        size: Some(SIZE),
                        ..Default::default()
                    },
                    1 => SetAttr {
                        mode: Some(if i.is_multiple_of(2) { 0o600 } else { 0o644 }),
                        ..Default::default()
                    },
                    2 => SetAttr {
                        atime: Some(TimeSet::Now),
                        mtime: Some(TimeSet::Now),
                        ..Default::default()
                    },
                    _ => {
                        fs.fsync(&f, i.is_multiple_of(2)).unwrap();
                        fs.sync().unwrap();
                        i += 1;
                        continue;
                    }
                };
                let handle = (what == 0 || what == 6).then_some(&*f);
                let a = fs.setattr(&root, ino, &ch, handle).unwrap();
                done_ctime.fetch_max(ts_key(a.ctime), Ordering::SeqCst);
                i += 1;
            }
        })
    };
    for (on, what) in [
        (mix.truncate, 0),
        (mix.chmod, 1),
        (mix.touch, 2),
        (mix.fsync, 3),
        (mix.names, 4),
        (mix.names, 5),
        (mix.grow, 6),
    ] {
        if on {
            // Two of each, so that changes of one kind race each other too.
            threads.push(changer(what));
            threads.push(changer(what));
        }
    }
    let observe = || {
        let (fs, stop, done_ctime) = (fs.clone(), stop.clone(), done_ctime.clone());
        std::thread::spawn(move || {
            let (mut last_m, mut last_c) = (0u64, 0u64);
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let floor = done_ctime.load(Ordering::SeqCst);
                let a = fs.getattr(ino).unwrap();
                let (m, c) = (ts_key(a.mtime), ts_key(a.ctime));
                assert!(m >= last_m, "mtime went back: {last_m} then {m}");
                assert!(c >= last_c, "ctime went back: {last_c} then {c}");
                assert!(
                    c >= floor,
                    "ctime {c} older than a finished change's {floor}"
                );
                assert!(c >= m, "ctime {c} older than mtime {m}");
                (last_m, last_c) = (m, c);
                reads += 1;
            }
            reads
        })
    };
    let observers: Vec<_> = (0..2).map(|_| observe()).collect();
    std::thread::sleep(race_time());
    stop.store(true, Ordering::Relaxed);
    let mut failure = None;
    for t in threads {
        if let Err(e) = t.join() {
            failure.get_or_insert(e);
        }
    }
    let mut reads = 0;
    for t in observers {
        match t.join() {
            Ok(n) => reads += n,
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        std::panic::resume_unwind(e);
    }
    assert!(reads > 0, "the observers read nothing");
    fs.check().unwrap();
}

#[test]
fn overwrites_racing_ftruncate_keep_times_monotonic() {
    race(Mix {
        overwrite: true,
        truncate: true,
        chmod: false,
        touch: false,
        fsync: false,
        names: false,
        grow: false,
    });
}

#[test]
fn chmods_racing_each_other_keep_ctime_monotonic() {
    race(Mix {
        overwrite: false,
        truncate: false,
        chmod: true,
        touch: false,
        fsync: false,
        names: false,
        grow: false,
    });
}

#[test]
fn overwrites_racing_utime_now_keep_times_monotonic() {
    race(Mix {
        overwrite: true,
        truncate: false,
        chmod: false,
        touch: true,
        fsync: true,
        names: false,
        grow: false,
    });
}

#[test]
fn every_change_racing_keeps_times_monotonic() {
    race(Mix {
        overwrite: true,
        truncate: true,
        chmod: true,
        touch: true,
        fsync: true,
        names: true,
        grow: true,
    });
}

#[test]
fn name_changes_racing_chmods_keep_ctime_monotonic() {
    race(Mix {
        overwrite: false,
        truncate: false,
        chmod: true,
        touch: false,
        fsync: false,
        names: true,
        grow: false,
    });
}

#[test]
fn data_changes_under_meta_racing_chmods_keep_times_monotonic() {
    race(Mix {
        overwrite: false,
        truncate: false,
        chmod: true,
        touch: false,
        fsync: false,
        names: false,
        grow: true,
    });
}

/// A pure overwrite's times live on the data side until writeback or
/// eviction folds them into the record: files opened, overwritten,
/// chmodded and closed over and over while another thread evicts
/// everything it can. What stat showed with the handle open is what it
/// shows after the close, and after a lookup that may load the inode back
/// from the store — times, mode, size and data.
#[test]
fn times_survive_eviction_between_opens() {
    let fs = Fs::new(
        Arc::new(MemoryStore::default()),
        FsConfig {
            cache_inodes_max: 4,
            cache_pages_max: 8,
            ..FsConfig::default()
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let shrinker = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut evicted = 0;
            while !stop.load(Ordering::Relaxed) {
                evicted += fs.shrink().inodes_evicted;
            }
            evicted
        })
    };
    let deadline = std::time::Instant::now() + race_time();
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let r = Cred::root();
                let name = format!("f{t}");
                let name = name.as_bytes();
                let (_, f, _) = fs
                    .open_at(&r, ROOT_INO, name, CREAT, 0o644, 0, false)
                    .unwrap();
                fs.write(&f, 0, &[1u8; SIZE as usize]).unwrap();
                drop(f);
                let mut i = 0u32;
                while std::time::Instant::now() < deadline {
                    let off = u64::from(i) % (SIZE - 16);
                    let (a, f, _) = fs
                        .open_at(&r, ROOT_INO, name, libc::O_RDWR, 0, 0, false)
                        .unwrap();
                    fs.write(&f, off, &[i as u8; 16]).unwrap();
                    if i.is_multiple_of(3) {
                        let ch = SetAttr {
                            mode: Some(0o600 | ((i % 2) * 0o44)),
                            ..Default::default()
                        };
                        fs.setattr(&r, a.ino, &ch, None).unwrap();
                    }
                    let open = fs.getattr(a.ino).unwrap();
                    drop(f);
                    let closed = fs.getattr(a.ino).unwrap();
                    let back = fs.lookup(&r, ROOT_INO, name).unwrap();
                    let key = |x: &Attr| (x.mtime, x.ctime, x.perm, x.size);
                    assert_eq!(key(&open), key(&closed), "round {i}: after the close");
                    assert_eq!(key(&open), key(&back), "round {i}: after eviction");
                    let (_, g, _) = fs
                        .open_at(&r, ROOT_INO, name, libc::O_RDONLY, 0, 0, false)
                        .unwrap();
                    let mut buf = [0u8; 16];
                    fs.read(&g, off, &mut buf).unwrap();
                    assert_eq!(buf, [i as u8; 16], "round {i}: data");
                    drop(g);
                    i += 1;
                }
                i
            })
        })
        .collect();
    let mut failure = None;
    let mut rounds = 0;
    for w in workers {
        match w.join() {
            Ok(n) => rounds += n,
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let evicted = shrinker.join().unwrap();
    if let Some(e) = failure {
        std::panic::resume_unwind(e);
    }
    assert!(
        rounds > 0 && evicted > 0,
        "{rounds} rounds, {evicted} evicted"
    );
    fs.check().unwrap();
}
